"""bot/core/recipe.py: shipped recipes load; malformed recipes give one line naming file, line and field;
set_lever makes one-line git diffs, keeps comments and order, and refuses without touching the file."""

from __future__ import annotations

import io
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from bot.core.recipe import RecipeError, _yaml, load_recipe, parse_recipe_text, set_lever, set_lever_text

REPO = Path(__file__).resolve().parents[2]
SHIPPED = sorted((REPO / "recipes").rglob("*.yaml"))
CPU_RECIPE = REPO / "recipes" / "llama3-tiny" / "cpu.yaml"


def line_of(text: str, needle: str) -> int:
    """1-based number of the (only) line of ``text`` containing ``needle``."""
    hits = [i for i, line in enumerate(text.splitlines(), 1) if needle in line]
    assert len(hits) == 1, f"{needle!r} occurs on lines {hits}"
    return hits[0]


def test_there_are_shipped_recipes() -> None:
    assert CPU_RECIPE in SHIPPED


@pytest.mark.parametrize("path", SHIPPED, ids=lambda p: str(p.relative_to(REPO)))
def test_every_shipped_recipe_loads(path: Path) -> None:
    recipe = load_recipe(path)
    assert recipe.levers, "a shipped recipe has levers to tune"
    assert recipe.bench.warmup_steps < recipe.bench.steps
    for key in ("training.global_batch_size", "training.seq_len", "optimizer.lr", "debug.seed"):
        assert key in recipe.pinned


@pytest.mark.parametrize("path", SHIPPED, ids=lambda p: str(p.relative_to(REPO)))
def test_round_trip_of_every_shipped_recipe_is_byte_identical(path: Path) -> None:
    text = path.read_text()
    yaml = _yaml()
    buf = io.StringIO()
    yaml.dump(yaml.load(text), buf)
    assert buf.getvalue() == text


def test_cpu_recipe_values() -> None:
    recipe = load_recipe(CPU_RECIPE)
    assert recipe.name == "llama3-tiny/cpu"
    assert recipe.devices == 1
    assert recipe.levers["activation_checkpoint"] == "full"
    assert recipe.levers["compile.enable"] is False
    assert recipe.levers["training.local_batch_size"] == 1
    assert recipe.env == {"OMP_NUM_THREADS": "2", "GOMP_SPINCOUNT": "10000"}


# ------------------------------------------------------------------ malformed recipes
BASE = CPU_RECIPE.read_text()


def _malformed() -> list[tuple[str, str, str, str, str]]:
    """(id, recipe text, line marker, field, message fragment)."""
    cases = []
    text = BASE.replace("  nodes: 1\n", "  nodes: 1: 2\n")
    cases.append(("bad-yaml", text, "  nodes: 1: 2", "not valid YAML", "mapping values"))
    text = BASE + "tuning_notes: fast\n"
    cases.append(("unknown-top-level-field", text, "tuning_notes:", "tuning_notes", "unknown field"))
    text = BASE.replace("  devices_per_node: 1\n", "")
    cases.append(("missing-required-field", text, "cluster:", "cluster.devices_per_node", "required field is missing"))
    text = BASE.replace("  training.local_batch_size: 1", "  training.local_batch_size: two")
    cases.append(("lever-wrong-type", text, "training.local_batch_size: two", "levers.training.local_batch_size", "expected an integer"))
    text = BASE.replace("  compile.enable: false", "  compile.enable: maybe")
    cases.append(("bool-lever-wrong-type", text, "compile.enable: maybe", "levers.compile.enable", "expected true or false"))
    text = BASE.replace("  loss.num_chunks: 8", "  loss.num_chunks: 8\n  activation_checkpoint.memory_budget: [0.3]")
    cases.append(("float-lever-a-list", text, "memory_budget: [0.3]", "levers.activation_checkpoint.memory_budget", "expected a number"))
    text = BASE.replace("  loss.num_chunks: 8", "  loss.num_chunkz: 8")
    cases.append(("unknown-lever", text, "loss.num_chunkz", "levers.loss.num_chunkz", "unknown lever"))
    text = BASE.replace("  debug.seed: 42\n", "")
    cases.append(("missing-required-pin", text, "pinned:", "pinned", "debug.seed"))
    text = BASE.replace("  debug.seed: 42\n", "  debug.seed: 42\n  loss.num_chunks: 8\n")
    cases.append(("pinned-key-also-a-lever", text, "  loss.num_chunks: 8\n  optimizer", "levers.loss.num_chunks", "pinned"))
    text = BASE.replace("  warmup_steps: 5", "  warmup_steps: 20")
    cases.append(("warmup-not-below-steps", text, "  warmup_steps: 20", "bench.warmup_steps", "must be below steps"))
    text = BASE.replace("  nodes: 1\n", "  nodes: 0\n")
    cases.append(("out-of-range", text, "  nodes: 0", "cluster.nodes", "greater than or equal to 1"))
    return cases


@pytest.mark.parametrize(("text", "marker", "field", "fragment"), [c[1:] for c in _malformed()], ids=[c[0] for c in _malformed()])
def test_malformed_recipe_gives_one_line_with_file_line_and_field(tmp_path: Path, text: str, marker: str, field: str, fragment: str) -> None:
    path = tmp_path / "recipe.yaml"
    path.write_text(text)
    if "\n" in marker:  # a marker spanning lines: the line of its first part
        first, _, second = marker.partition("\n")
        line = next(i for i, (a, b) in enumerate(zip(text.splitlines(), text.splitlines()[1:], strict=False), 1) if a == first and b.startswith(second))
    else:
        line = line_of(text, marker)
    with pytest.raises(RecipeError) as info:
        load_recipe(path)
    message = str(info.value)
    assert "\n" not in message
    assert message.startswith(f"{path}:{line}: "), message
    assert field in message
    assert fragment in message


def test_missing_top_level_section_names_the_file_start(tmp_path: Path) -> None:
    text = re.sub(r"(?ms)^bench:.*\Z", "", BASE)
    path = tmp_path / "r.yaml"
    path.write_text(text)
    with pytest.raises(RecipeError, match=rf"^{re.escape(str(path))}:1: bench: required field is missing$"):
        load_recipe(path)


@pytest.mark.parametrize("text", ["", "- a list\n- not a mapping\n", "just a string\n"])
def test_non_mapping_recipe(text: str) -> None:
    with pytest.raises(RecipeError, match=r"^r\.yaml:1: expected a mapping"):
        parse_recipe_text(text, "r.yaml")


def test_unreadable_recipe(tmp_path: Path) -> None:
    with pytest.raises(RecipeError, match="cannot read recipe"):
        load_recipe(tmp_path / "nope.yaml")


# ------------------------------------------------------------------ set_lever in a real git repository
COMMENTED = BASE.replace("  compile.enable: false", "  compile.enable: false  # inductor brings nothing on CPU").replace(
    "levers:\n", "levers:\n  # what the tuner may change\n"
)


def _git(repo: Path, *args: str) -> str:
    env = {**os.environ, "GIT_CONFIG_GLOBAL": os.devnull, "GIT_CONFIG_NOSYSTEM": "1"}
    out = subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True, env=env, check=True)
    return out.stdout


@pytest.fixture
def repo(tmp_path: Path) -> tuple[Path, Path]:
    if shutil.which("git") is None:
        pytest.skip("git is not installed")
    root = tmp_path / "repo"
    path = root / "recipes" / "m" / "cpu.yaml"
    path.parent.mkdir(parents=True)
    path.write_text(COMMENTED)
    _git(root, "init", "-q")
    _git(root, "add", ".")
    _git(root, "-c", "user.name=t", "-c", "user.email=t@example.com", "commit", "-q", "-m", "recipe")
    return root, path


def _lever_keys(text: str) -> list[str]:
    return list(_yaml().load(text)["levers"])


def test_changing_a_lever_is_a_one_line_diff(repo: tuple[Path, Path]) -> None:
    root, path = repo
    assert set_lever(path, "training.local_batch_size", "2") == 2
    assert _git(root, "diff", "--numstat") == "1\t1\trecipes/m/cpu.yaml\n"
    diff = _git(root, "diff", "-U0")
    assert "-  training.local_batch_size: 1\n+  training.local_batch_size: 2\n" in diff
    text = path.read_text()
    assert "# what the tuner may change" in text
    assert text.startswith("# A small llama3")
    assert _lever_keys(text) == _lever_keys(COMMENTED)
    assert load_recipe(path).levers["training.local_batch_size"] == 2


def test_changing_a_commented_lever_keeps_its_comment(repo: tuple[Path, Path]) -> None:
    root, path = repo
    assert set_lever(path, "compile.enable", "true") is True
    assert _git(root, "diff", "--numstat") == "1\t1\trecipes/m/cpu.yaml\n"
    # ruamel keeps the comment's column, so the padding may differ
    assert re.search(r"^  compile\.enable: true +# inductor brings nothing on CPU$", path.read_text(), re.M)


def test_a_new_lever_is_one_added_line_inside_levers(repo: tuple[Path, Path]) -> None:
    root, path = repo
    set_lever(path, "metrics.log_freq", 5)
    assert _git(root, "diff", "--numstat") == "1\t0\trecipes/m/cpu.yaml\n"
    text = path.read_text()
    assert "  training.gc_freq: 50\n  metrics.log_freq: 5\npinned:\n" in text
    assert _lever_keys(text) == [*_lever_keys(COMMENTED), "metrics.log_freq"]
    assert load_recipe(path).levers["metrics.log_freq"] == 5


def test_choice_and_float_values_are_written_plainly(repo: tuple[Path, Path]) -> None:
    root, path = repo
    set_lever(path, "activation_checkpoint", "SELECTIVE")  # case-insensitive, catalog spelling written
    assert "  activation_checkpoint: selective\n" in path.read_text()
    assert _git(root, "diff", "--numstat") == "1\t1\trecipes/m/cpu.yaml\n"


def test_setting_the_same_value_changes_nothing(repo: tuple[Path, Path]) -> None:
    root, path = repo
    set_lever(path, "training.gc_freq", "50")
    assert _git(root, "diff", "--numstat") == ""


def test_set_lever_keeps_the_file_mode(repo: tuple[Path, Path]) -> None:
    _, path = repo
    path.chmod(0o640)
    set_lever(path, "training.local_batch_size", 4)
    assert path.stat().st_mode & 0o777 == 0o640


PINNED_LEVER = BASE.replace("  debug.seed: 42\n", "  debug.seed: 42\n  training.mixed_precision_param: float32\n")


@pytest.mark.parametrize(
    ("text", "lever", "value", "fragment"),
    [
        (BASE, "training.local_batch_size", "abc", "expected an integer"),
        (BASE, "training.local_batch_size", "0", "expected a value >= 1"),
        (BASE, "activation_checkpoint", "sometimes", "expected one of none, selective, full, memory_budget"),
        (BASE, "activation_checkpoint.memory_budget", "1.5", "expected a value <= 1"),
        (BASE, "no.such_lever", "1", "unknown lever"),
        (PINNED_LEVER, "training.mixed_precision_param", "bfloat16", "pinned"),
        (BASE.replace("  debug.seed: 42\n", ""), "training.local_batch_size", "2", "pinned must include debug.seed"),
    ],
    ids=["bad-value", "below-minimum", "bad-choice", "above-maximum", "unknown-lever", "pinned-key", "invalid-file"],
)
def test_refused_edit_leaves_the_file_byte_identical(tmp_path: Path, text: str, lever: str, value: str, fragment: str) -> None:
    path = tmp_path / "recipe.yaml"
    path.write_text(text)
    before = path.read_bytes()
    mtime = path.stat().st_mtime_ns
    with pytest.raises(RecipeError) as info:
        set_lever(path, lever, value)
    message = str(info.value)
    assert message.startswith(str(path)), message
    assert fragment in message
    assert "\n" not in message
    assert path.read_bytes() == before
    assert path.stat().st_mtime_ns == mtime
    assert [p.name for p in tmp_path.iterdir()] == ["recipe.yaml"], "no temporary file left behind"


def test_set_lever_text_changes_exactly_one_line() -> None:
    new = set_lever_text(BASE, "loss.num_chunks", 1)
    old_lines, new_lines = BASE.splitlines(), new.splitlines()
    assert len(old_lines) == len(new_lines)
    changed = [(a, b) for a, b in zip(old_lines, new_lines, strict=True) if a != b]
    assert changed == [("  loss.num_chunks: 8", "  loss.num_chunks: 1")]


def test_with_lever_parses_the_value() -> None:
    recipe = parse_recipe_text(BASE)
    assert recipe.with_lever("compile.enable", "on").levers["compile.enable"] is True
    assert recipe.levers["compile.enable"] is False, "with_lever returns a copy"


def test_recipe_set_on_a_pinned_key_says_it_is_part_of_the_objective(tmp_path: Path) -> None:
    from bot.core.recipe import RecipeError, set_lever

    path = tmp_path / "cpu.yaml"
    path.write_text((Path(__file__).resolve().parents[2] / "recipes" / "llama3-tiny" / "cpu.yaml").read_text())
    before = path.read_text()
    with pytest.raises(RecipeError, match="pinned.training.seq_len: part of the objective"):
        set_lever(path, "training.seq_len", "64")
    assert path.read_text() == before
