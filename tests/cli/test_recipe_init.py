"""`attune recipe init`: a working torchtitan command line becomes a recipe whose resolved config is the same."""

import json
import re
import subprocess

import pytest

from bot.cli import main
from bot.core.recipe import load_recipe
from bot.runner.check import runnable_problem
from bot.runner.resolve import resolve_args, resolve_recipe
from bot.sim.hardware import hardware_id

# what a recipe makes explicit where torchtitan leaves it implicit, and what the runner owns (bot.runner.draft)
MADE_EXPLICIT = {"training.global_batch_size", "lr_scheduler.total_steps", "debug.seed"}
RUNNER_OWNED = {"metrics.log_freq"}


def _same(a, b) -> bool:
    """Equal values; initialisers (functions, partials) compare by what they call, not by object identity."""
    if a == b:
        return True
    return re.sub(r" at 0x[0-9a-f]+", "", repr(a)) == re.sub(r" at 0x[0-9a-f]+", "", repr(b))


@pytest.fixture
def repo(tmp_path, monkeypatch):
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("ATTUNE_CACHE_DIR", str(tmp_path / ".cache"))
    return tmp_path


@pytest.mark.parametrize(
    ("module", "config", "hardware", "nodes", "dpn", "overrides"),
    [
        ("torchtitan.models.llama3", "llama3_debugmodel", "cpu", 1, 1, ["--training.seq-len", "512"]),
        ("torchtitan.models.qwen3", "qwen3_moe_debug", "cpu", 1, 2, ["--training.local-batch-size", "2"]),
    ],
)
def test_the_recipe_resolves_to_the_users_command_line(repo, capsys, module, config, hardware, nodes, dpn, overrides):
    out = repo / "r.yaml"
    rc = main(
        [
            "recipe",
            "init",
            "--module",
            module,
            "--config",
            config,
            "--hardware",
            hardware,
            "--nodes",
            str(nodes),
            "--devices-per-node",
            str(dpn),
            "--out",
            str(out),
            "--json",
            "--",
            *overrides,
        ]
    )
    assert rc == 0, capsys.readouterr()
    report = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    user = resolve_args(["--module", module, "--config", config, *overrides])
    recipe = load_recipe(out)
    assert recipe.workload.overrides == overrides
    ours = resolve_recipe(recipe, steps=user["training.steps"], dump_folder=user["dump_folder"])
    differ = {k for k in user.keys() | ours.keys() if not _same(user.get(k), ours.get(k))}
    assert differ <= MADE_EXPLICIT | RUNNER_OWNED, differ
    assert set(report["made_explicit"]) <= MADE_EXPLICIT
    # the stock debug configs read torchtitan's test tokenizer and c4_test data: made offline, where they name them
    assert sorted(report["assets_made"]) == [
        "tests/assets/c4_test/data.json",
        "tests/assets/tokenizer/tokenizer.json",
        "tests/assets/tokenizer/tokenizer_config.json",
    ]
    if user["training.global_batch_size"] == -1:  # the implicit global batch, computed
        assert ours["training.global_batch_size"] == user["training.local_batch_size"] * dpn
    assert recipe.levers["activation_checkpoint"] == user["activation_checkpoint.mode"]
    assert recipe.levers["host.allocator"] == "default"  # on the CPU the host's allocator is a lever too
    assert runnable_problem(recipe) is None
    # and as `attune recipe show` prints it (its run length and dump folder are the runner's)
    assert main(["recipe", "show", str(out)]) == 0
    shown = capsys.readouterr().out.split("# resolved torchtitan config\n", 1)[1]
    printed = dict(line.split(" = ", 1) for line in shown.splitlines())
    expected = {k: repr(v) for k, v in user.items() if not k.startswith("model_spec.model.layers.")}
    differ = {k for k in expected.keys() | printed.keys() if not _same(expected.get(k), printed.get(k))}
    assert differ <= MADE_EXPLICIT | RUNNER_OWNED | {"training.steps", "dump_folder"}, differ


def test_a_moe_config_on_a_simulated_cluster_gets_the_expert_lever(repo, capsys):
    rc = main(
        [
            "recipe",
            "init",
            "--module",
            "torchtitan.models.qwen3",
            "--config",
            "qwen3_30b_a3b",
            "--hardware",
            "H100-SXM5-80GB",
            "--nodes",
            "2",
            "--devices-per-node",
            "8",
            "--launcher",
            "sim",
        ]
    )
    assert rc == 0, capsys.readouterr()
    path = repo / "recipes" / "qwen3_30b_a3b" / "h100-sxm-80gbx16.yaml"
    recipe = load_recipe(path)
    assert recipe.cluster.hardware == "h100-sxm-80gb"
    assert recipe.levers["parallelism.expert_parallel_degree"] == 1
    assert "host.allocator" not in recipe.levers  # a GPU host does not do the math: no allocator lever
    assert recipe.pinned["training.global_batch_size"] == 2 * 16  # local batch 2 x FSDP over 16 ranks
    assert runnable_problem(recipe) is None  # the simulator knows the built model
    assert not (repo / "tests").exists()  # a real config's tokenizer and data are the user's: nothing made


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["--config", "llama3_nonexistent", "--hardware", "h100"], "llama3_nonexistent"),
        (["--config", "llama3_debugmodel", "--hardware", "a100"], "known names: b200"),
        (
            ["--config", "llama3_debugmodel", "--hardware", "h100", "--", "--training.no-such-field", "1"],
            "no-such-field",
        ),
    ],
)
def test_a_config_that_does_not_resolve_writes_nothing(repo, capsys, args, says):
    rc = main(
        ["recipe", "init", "--module", "torchtitan.models.llama3", "--nodes", "1", "--devices-per-node", "8", *args]
    )
    err = capsys.readouterr().err
    assert rc == 2
    assert says in err and len(err.strip().splitlines()) == 1 and "Traceback" not in err
    assert not (repo / "recipes").exists()


def test_an_unimportable_module_is_named(repo, capsys):
    rc = main(
        [
            "recipe",
            "init",
            "--module",
            "mymods.missing",
            "--config",
            "c",
            "--hardware",
            "cpu",
            "--nodes",
            "1",
            "--devices-per-node",
            "1",
        ]
    )
    assert rc == 2 and "workload.module" in capsys.readouterr().err


def test_an_existing_recipe_is_not_overwritten(repo, capsys):
    out = repo / "mine.yaml"
    out.write_text("keep me\n")
    rc = main(
        [
            "recipe",
            "init",
            "--module",
            "torchtitan.models.llama3",
            "--config",
            "llama3_debugmodel",
            "--hardware",
            "cpu",
            "--nodes",
            "1",
            "--devices-per-node",
            "1",
            "--out",
            str(out),
        ]
    )
    assert rc == 2 and "exists" in capsys.readouterr().err
    assert out.read_text() == "keep me\n"


@pytest.mark.parametrize(
    ("out", "size", "says"),
    [
        ("afile/mine.yaml", "1", "--out afile/mine.yaml: afile is a file; expected a folder there"),
        ("adir", "1", "--out adir: is a folder"),
        ("mine.yaml", "99999999999999999999999", "--nodes and --devices-per-node: expected positive integers up to"),
    ],
)
def test_an_out_that_cannot_be_written_or_a_typo_size_is_refused_before_anything_is_made(repo, capsys, out, size, says):
    """Were tracebacks (FileExistsError from mkdir, IsADirectoryError from the replace with --force), or a recipe for
    10^23 devices. Even with --force: one line, exit 2, and the tree as it was (no debug assets made either)."""
    (repo / "afile").write_text("keep me\n")
    (repo / "adir").mkdir()
    before = sorted(p.relative_to(repo) for p in repo.rglob("*") if ".git" not in p.parts)
    rc = main(
        ["recipe", "init", "--module", "torchtitan.models.llama3", "--config", "llama3_debugmodel"]
        + ["--hardware", "cpu", "--nodes", "1", "--devices-per-node", size, "--out", out, "--force"]
    )
    err = capsys.readouterr().err
    assert rc == 2 and err.startswith(f"attune: {says}") and len(err.strip().splitlines()) == 1, err
    assert sorted(p.relative_to(repo) for p in repo.rglob("*") if ".git" not in p.parts) == before
    assert (repo / "afile").read_text() == "keep me\n"


@pytest.mark.parametrize(
    ("name", "profile"),
    [
        ("h100", "h100-sxm-80gb"),
        ("H100-SXM5-80GB", "h100-sxm-80gb"),
        ("h200", "h200"),
        ("B200", "b200"),
        ("cpu", "cpu"),
        ("h100_96gb", "h100-96gb"),
    ],
)
def test_hardware_names_as_users_write_them(name, profile):
    assert hardware_id(name) == profile


def test_a_low_precision_config_is_drafted_for_the_gpu_it_needs_and_refused_for_one_it_does_not(repo, capsys):
    """On a host without a GPU, torchtitan's converter checks are answered as the recipe's GPU would answer them."""
    common = [
        "recipe",
        "init",
        "--module",
        "torchtitan.models.llama3",
        "--config",
        "llama3_8b_mxfp8",
        "--nodes",
        "1",
        "--devices-per-node",
        "8",
        "--launcher",
        "slurm",
    ]
    assert main([*common, "--hardware", "b200"]) == 0, capsys.readouterr()
    recipe = load_recipe(repo / "recipes" / "llama3_8b_mxfp8" / "b200x8.yaml")
    assert "quantize.linear" not in recipe.levers  # set by the config function: not the tuner's
    capsys.readouterr()
    assert main([*common, "--hardware", "h100", "--out", str(repo / "h100.yaml")]) == 2  # MXFP8 needs SM100
    assert "SM100" in capsys.readouterr().err and not (repo / "h100.yaml").exists()
