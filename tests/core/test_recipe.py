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

from bot.core.recipe import (
    MAX_BENCH_STEPS,
    PIN_TYPES,
    Recipe,
    RecipeError,
    _pin_problem,
    _yaml,
    field_error,
    load_recipe,
    parse_recipe_text,
    recipe_hash,
    set_lever,
    set_lever_text,
)
from bot.core.records import content_hash

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
    cases.append(
        (
            "lever-wrong-type",
            text,
            "training.local_batch_size: two",
            "levers.training.local_batch_size",
            "expected an integer",
        )
    )
    text = BASE.replace("  compile.enable: false", "  compile.enable: maybe")
    cases.append(
        ("bool-lever-wrong-type", text, "compile.enable: maybe", "levers.compile.enable", "expected true or false")
    )
    text = BASE.replace("  loss.num_chunks: 8", "  loss.num_chunks: 8\n  activation_checkpoint.memory_budget: [0.3]")
    cases.append(
        (
            "float-lever-a-list",
            text,
            "memory_budget: [0.3]",
            "levers.activation_checkpoint.memory_budget",
            "expected a number",
        )
    )
    text = BASE.replace("  loss.num_chunks: 8", "  loss.num_chunkz: 8")
    cases.append(("unknown-lever", text, "loss.num_chunkz", "levers.loss.num_chunkz", "unknown lever"))
    text = BASE.replace("  debug.seed: 42\n", "")
    cases.append(("missing-required-pin", text, "pinned:", "pinned", "debug.seed"))
    text = BASE.replace("  debug.seed: 42\n", "  debug.seed: 42\n  loss.num_chunks: 8\n")
    cases.append(
        ("pinned-key-also-a-lever", text, "  loss.num_chunks: 8\n  optimizer", "levers.loss.num_chunks", "pinned")
    )
    text = BASE.replace("  warmup_steps: 5", "  warmup_steps: 20")
    cases.append(("warmup-not-below-steps", text, "  warmup_steps: 20", "bench.warmup_steps", "must be below steps"))
    text = BASE.replace("  nodes: 1\n", "  nodes: 0\n")
    cases.append(("out-of-range", text, "  nodes: 0", "cluster.nodes", "greater than or equal to 1"))
    # pinned values of the wrong kind (PIN_TYPES), at the pin's own line
    for name, old, new, message in [
        ("pin-seed-text", "debug.seed: 42", "debug.seed: abc", "expected an integer, got 'abc'"),
        ("pin-seed-flag", "debug.seed: 42", "debug.seed: true", "expected an integer, got True"),
        (
            "pin-seed-negative",
            "debug.seed: 42",
            "debug.seed: -1",
            "expected an integer from 0 to 2,147,483,647, got -1",
        ),
        ("pin-lr-zero", "optimizer.lr: 0.003", "optimizer.lr: 0", "expected a positive finite number, got 0"),
        ("pin-lr-text", "optimizer.lr: 0.003", "optimizer.lr: '3e-4'", "expected a number, got '3e-4'"),
        ("pin-lr-nan", "optimizer.lr: 0.003", "optimizer.lr: .nan", "expected a finite number, got nan"),
        (
            "pin-gbs-fraction",
            "training.global_batch_size: 8",
            "training.global_batch_size: 12.5",
            "expected an integer, got 12.5",
        ),
        (
            "pin-gbs-zero",
            "training.global_batch_size: 8",
            "training.global_batch_size: 0",
            "expected a positive integer up to 2,147,483,647 or -1 (local batch x data parallel), got 0",
        ),
        (
            "pin-seq-len-negative",
            "training.seq_len: 256",
            "training.seq_len: -256",
            "expected a positive integer up to 16,777,216, got -256",
        ),
        (
            "pin-seq-len-huge",
            "training.seq_len: 256",
            "training.seq_len: 1000000000000000000000000000000",
            "expected a positive integer up to 16,777,216, got 1000000000000000000000000000000",
        ),
        (
            "pin-gbs-huge",
            "training.global_batch_size: 8",
            "training.global_batch_size: 2147483648",
            "expected a positive integer up to 2,147,483,647 or -1 (local batch x data parallel), got 2147483648",
        ),
        (
            "pin-total-steps-float",
            "lr_scheduler.total_steps: 1000",
            "lr_scheduler.total_steps: 1000.0",
            "expected an integer, got 1000.0",
        ),
        (
            "pin-warmup-negative",
            "lr_scheduler.warmup_steps: 5",
            "lr_scheduler.warmup_steps: -5",
            "expected an integer from 0 to 2,147,483,647, got -5",
        ),
        (
            "pin-weight-decay-negative",
            "debug.seed: 42",
            "debug.seed: 42\n  optimizer.weight_decay: -0.1",
            "expected a finite number >= 0, got -0.1",
        ),
        (
            "pin-eps-zero",
            "debug.seed: 42",
            "debug.seed: 42\n  optimizer.eps: 0.0",
            "expected a positive finite number, got 0.0",
        ),
        (
            "pin-decay-type",
            "debug.seed: 42",
            "debug.seed: 42\n  lr_scheduler.decay_type: cos",
            "expected one of linear, sqrt, cosine, got 'cos'",
        ),
        (
            "pin-other-key-inf",
            "debug.seed: 42",
            "debug.seed: 42\n  training.max_norm: .inf",
            "expected a finite number, got inf",
        ),
        ("pin-a-list", "debug.seed: 42", "debug.seed: [42]", "expected a number, text or true/false, got [42]"),
        ("pin-empty", "debug.seed: 42", "debug.seed:", "expected a number, text or true/false, got None"),
    ]:
        text = BASE.replace(f"  {old}\n", f"  {new}\n")
        key = new.rpartition("\n  ")[2].split(":")[0]
        cases.append((name, text, f"  {new.rpartition(chr(10) + '  ')[2]}", f"pinned.{key}: {message}", message))
    # unbounded and non-finite numbers
    text = BASE.replace("  steps: 20\n", "  steps: 1e12\n")
    cases.append(
        (
            "bench-steps-huge",
            text,
            "  steps: 1e12",
            "bench.steps: expected at most 1,000,000 steps",
            "got 1,000,000,000,000",
        )
    )
    text = BASE.replace("  steps: 20\n", f"  steps: {MAX_BENCH_STEPS + 1}\n")
    cases.append(
        (
            "bench-steps-one-too-many",
            text,
            f"  steps: {MAX_BENCH_STEPS + 1}",
            "bench.steps",
            "expected at most 1,000,000",
        )
    )
    for value in (".nan", ".inf"):
        text = BASE.replace("usd_per_device_hour: 0.05", f"usd_per_device_hour: {value}")
        cases.append(
            (f"price-{value[1:]}", text, "usd_per_device_hour:", "cluster.usd_per_device_hour", "finite number")
        )
    text = BASE.replace("  loss.num_chunks: 8", "  loss.num_chunks: 8\n  activation_checkpoint.memory_budget: .nan")
    cases.append(
        (
            "float-lever-nan",
            text,
            "memory_budget: .nan",
            "levers.activation_checkpoint.memory_budget",
            "expected a finite number",
        )
    )
    return cases


@pytest.mark.parametrize(
    ("text", "marker", "field", "fragment"), [c[1:] for c in _malformed()], ids=[c[0] for c in _malformed()]
)
def test_malformed_recipe_gives_one_line_with_file_line_and_field(
    tmp_path: Path, text: str, marker: str, field: str, fragment: str
) -> None:
    path = tmp_path / "recipe.yaml"
    path.write_text(text)
    if "\n" in marker:  # a marker spanning lines: the line of its first part
        first, _, second = marker.partition("\n")
        line = next(
            i
            for i, (a, b) in enumerate(zip(text.splitlines(), text.splitlines()[1:], strict=False), 1)
            if a == first and b.startswith(second)
        )
    else:
        line = line_of(text, marker)
    with pytest.raises(RecipeError) as info:
        load_recipe(path)
    message = str(info.value)
    assert "\n" not in message
    assert message.startswith(f"{path}:{line}: "), message
    assert field in message
    assert fragment in message


def test_the_pin_error_is_exactly_file_line_key_and_what_was_expected(tmp_path: Path) -> None:
    path = tmp_path / "recipe.yaml"
    text = BASE.replace("  debug.seed: 42\n", "  debug.seed: abc\n")
    path.write_text(text)
    with pytest.raises(RecipeError) as info:
        load_recipe(path)
    assert (
        str(info.value)
        == f"{path}:{line_of(text, 'debug.seed: abc')}: pinned.debug.seed: expected an integer, got 'abc'"
    )


@pytest.mark.parametrize(
    ("key", "value"),
    [
        (
            "training.global_batch_size",
            -1,
        ),  # torchtitan's "local batch x DP": the gate's config check refuses it, not the loader
        ("training.global_batch_size", 2048),
        ("debug.seed", 0),
        ("optimizer.lr", 3.0e-4),
        ("optimizer.lr", 1),  # an integer is a number
        ("optimizer.weight_decay", 0.0),
        ("lr_scheduler.warmup_steps", 0),
        ("lr_scheduler.min_lr_factor", 0.0),
        ("lr_scheduler.decay_type", "cosine"),
        ("debug.deterministic", True),
        (
            "checkpoint.initial_load_path",
            "/tmp/attune-seed-checkpoint",
        ),  # a key PIN_TYPES does not know: any finite scalar
        ("hf_assets_path", "./other-tokenizer"),
    ],
)
def test_pins_of_the_right_kind_load(key: str, value: object) -> None:
    assert _pin_problem(key, value) is None
    recipe = parse_recipe_text(BASE, "r.yaml")
    assert Recipe.model_validate({**recipe.model_dump(), "pinned": {**recipe.pinned, key: value}}).pinned[key] == value


def test_pin_types_cover_every_pin_of_the_shipped_recipes_and_the_gate_benchmark() -> None:
    from bot.bench.gate_faults import cases

    shipped = {key for path in SHIPPED for key in load_recipe(path).pinned}
    benchmark = {
        key
        for case in cases()
        for key, value in case.pinned.items()
        if not isinstance(value, str) and value is not None
    }
    assert shipped | benchmark <= set(PIN_TYPES), sorted((shipped | benchmark) - set(PIN_TYPES))
    for case in cases():  # the gate benchmark's pinned faults are valid recipes: the gate, not the loader, rejects them
        for key, value in case.pinned.items():
            if value is not None:
                assert _pin_problem(key, value) is None, (case.name, key, value)


def test_the_bench_steps_cap_itself_loads() -> None:
    assert (
        parse_recipe_text(BASE.replace("  steps: 20\n", f"  steps: {MAX_BENCH_STEPS}\n")).bench.steps == MAX_BENCH_STEPS
    )


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
COMMENTED = BASE.replace(
    "  compile.enable: false", "  compile.enable: false  # inductor brings nothing on CPU"
).replace("levers:\n", "levers:\n  # what the tuner may change\n")


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
    assert "  metrics.log_freq: 5\npinned:\n" in text  # the last line of levers
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
def test_refused_edit_leaves_the_file_byte_identical(
    tmp_path: Path, text: str, lever: str, value: str, fragment: str
) -> None:
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


# ------------------------------------------------------------------ a recipe that is not UTF-8
LATIN1 = BASE.encode().replace(b"  # a 2-vCPU cloud VM", b"  # a 2-vCPU cloud VM, caf\xe9")


def _latin1_message(path: Path) -> str:
    offset = LATIN1.index(b"\xe9")
    line = LATIN1.count(b"\n", 0, offset) + 1
    return f"{path}:{line}: not UTF-8 text (byte 0xe9 at offset {offset}); save the file as UTF-8"


@pytest.mark.parametrize(
    "call",
    [load_recipe, recipe_hash, lambda path: set_lever(path, "training.gc_freq", "10")],
    ids=["load_recipe", "recipe_hash", "set_lever"],
)
def test_a_recipe_that_is_not_utf8_is_a_recipe_error_naming_the_byte(tmp_path: Path, call) -> None:
    path = tmp_path / "latin1.yaml"
    path.write_bytes(LATIN1)
    with pytest.raises(RecipeError) as info:
        call(path)
    assert str(info.value) == _latin1_message(path)
    assert path.read_bytes() == LATIN1
    assert [p.name for p in tmp_path.iterdir()] == ["latin1.yaml"]


def test_recipe_hash_is_the_same_whatever_the_line_ends(tmp_path: Path) -> None:
    """A runner hashes ``read_text`` (CRLF turned to LF), an upload check hashes ``git show`` (CRLF kept): they agree."""
    path = tmp_path / "r.yaml"
    path.write_bytes(BASE.replace("\n", "\r\n").encode())
    assert recipe_hash(path) == content_hash(BASE) == content_hash(path.read_text())
    assert content_hash(BASE) != content_hash(BASE + "# one more line\n")
    with pytest.raises(RecipeError, match="cannot read recipe"):
        recipe_hash(tmp_path / "missing.yaml")


@pytest.mark.parametrize("argv", [("show",), ("set", "training.gc_freq", "10")], ids=["show", "set"])
def test_attune_recipe_on_a_latin1_recipe_is_one_line_exit_2(tmp_path: Path, argv: tuple[str, ...]) -> None:
    from cli.test_cli import assert_one_line_error
    from crash_helpers import attune

    path = tmp_path / "latin1.yaml"
    path.write_bytes(LATIN1)
    proc = attune(tmp_path, "recipe", argv[0], str(path), *argv[1:], timeout=60)
    assert assert_one_line_error(proc) == f"attune: {_latin1_message(path)}"
    assert path.read_bytes() == LATIN1


# ------------------------------------------------------------------ a CRLF recipe keeps its line ends
CRLF = BASE.replace("\n", "\r\n")


@pytest.mark.parametrize("shipped", SHIPPED, ids=lambda p: str(p.relative_to(REPO)))
def test_set_lever_on_a_crlf_recipe_changes_one_line_and_keeps_crlf(tmp_path: Path, shipped: Path) -> None:
    recipe = load_recipe(shipped)
    lever = next(
        name for name in ("training.gc_freq", "training.local_batch_size", "loss.num_chunks") if name in recipe.levers
    )
    new = 2 * int(recipe.levers[lever]) if recipe.levers[lever] != 1 else 2
    path = tmp_path / "crlf.yaml"
    path.write_bytes(shipped.read_text().replace("\n", "\r\n").encode())
    before = path.read_bytes().split(b"\n")
    set_lever(path, lever, new)
    after = path.read_bytes().split(b"\n")
    assert len(after) == len(before)
    changed = [(a, b) for a, b in zip(before, after, strict=True) if a != b]
    assert len(changed) == 1 and changed[0][1].startswith(f"  {lever}: {new}".encode()), changed
    assert all(line.endswith(b"\r") for line in after[:-1]) and after[-1] == b""
    assert load_recipe(path).levers[lever] == new


def test_a_new_lever_in_a_crlf_recipe_is_one_added_crlf_line(tmp_path: Path) -> None:
    path = tmp_path / "crlf.yaml"
    path.write_bytes(CRLF.encode())
    set_lever(path, "metrics.log_freq", 5)
    data = path.read_bytes()
    assert b"\n" not in data.replace(b"\r\n", b"") and b"\r\r" not in data
    lines = data.split(b"\r\n")
    added = lines.index(b"pinned:") - 1
    assert lines[added] == b"  metrics.log_freq: 5"
    assert lines[:added] + lines[added + 1 :] == CRLF.encode().split(b"\r\n")


def test_setting_the_same_value_in_a_crlf_recipe_leaves_it_byte_identical(tmp_path: Path) -> None:
    path = tmp_path / "crlf.yaml"
    path.write_bytes(CRLF.encode())
    mtime = path.stat().st_mtime_ns
    set_lever(path, "training.gc_freq", 50)
    assert path.read_bytes() == CRLF.encode() and path.stat().st_mtime_ns == mtime


def test_attune_recipe_set_on_a_crlf_recipe_is_a_one_line_git_diff(repo: tuple[Path, Path]) -> None:
    from crash_helpers import attune

    root, path = repo
    path.write_bytes(COMMENTED.replace("\n", "\r\n").encode())
    _git(root, "-c", "user.name=t", "-c", "user.email=t@example.com", "commit", "-qam", "crlf")
    proc = attune(root, "recipe", "set", str(path), "training.local_batch_size", "2", timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert _git(root, "diff", "--numstat") == "1\t1\trecipes/m/cpu.yaml\n"
    assert (
        path.read_bytes()
        == COMMENTED.replace("\n", "\r\n")
        .replace("training.local_batch_size: 1\r\n", "training.local_batch_size: 2\r\n")
        .encode()
    )


# ------------------------------------------------------------------ field_error
def test_field_error_points_at_the_fields_line(tmp_path: Path) -> None:
    path = tmp_path / "r.yaml"
    path.write_text(BASE)
    assert field_error(path, ("cluster", "hardware"), "no such hardware") == (
        f"{path}:{line_of(BASE, '  hardware: cpu')}: cluster.hardware: no such hardware"
    )
    assert field_error(path, ("cluster", "nope"), "x") == f"{path}:{line_of(BASE, 'cluster:')}: cluster.nope: x"


def test_field_error_on_an_unreadable_file_points_at_line_1(tmp_path: Path) -> None:
    path = tmp_path / "latin1.yaml"
    path.write_bytes(LATIN1)
    assert field_error(path, ("cluster", "hardware"), "x") == f"{path}:1: cluster.hardware: x"
    assert field_error(tmp_path / "missing.yaml", ("bench",), "y") == f"{tmp_path / 'missing.yaml'}:1: bench: y"
