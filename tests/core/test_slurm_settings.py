"""bot/core/slurm.py: a recipe's ``cluster.slurm`` and Slurm's duration forms; bad settings name file, line, field."""

from __future__ import annotations

from pathlib import Path

import pytest

from bot.core.recipe import RecipeError, load_recipe, parse_recipe_text
from bot.core.slurm import SlurmSettings, duration_s, minutes_text

REPO = Path(__file__).resolve().parents[2]
SLURM_RECIPE = REPO / "recipes" / "llama3-tiny" / "cpu-slurm.yaml"


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("30", 1800),
        ("5:30", 330),
        ("1:00:00", 3600),
        ("0:15:00", 900),
        ("2-0", 172800),
        ("1-2:30", 95400),
        ("1-0:0:10", 86410),
        (" 45 ", 2700),
    ],
)
def test_slurm_duration_forms(text: str, seconds: int) -> None:
    assert duration_s(text) == seconds


@pytest.mark.parametrize("text", ["", "1h", "1:2:3:4", "-5", "1-", "UNLIMITED"])
def test_not_a_slurm_duration(text: str) -> None:
    with pytest.raises(ValueError, match="not a Slurm duration"):
        duration_s(text)


def test_minutes_for_sbatch_time_round_down_to_at_least_one() -> None:
    assert [minutes_text(s) for s in (16.0, 59.9, 60.0, 3599.0)] == ["1", "1", "1", "59"]


def test_shipped_slurm_recipe_settings() -> None:
    recipe = load_recipe(SLURM_RECIPE)
    s = recipe.cluster.slurm
    assert recipe.cluster.launcher == "slurm" and recipe.devices == 2
    assert s is not None and s.time_limit_s == 900 and s.queue_budget_s == 600 and s.cpus_per_task == 1
    assert SlurmSettings().queue_budget_s == 3600 and SlurmSettings().time_limit_s is None


def test_a_bare_number_of_minutes_is_a_duration() -> None:
    assert SlurmSettings.model_validate({"time_limit": 90}).time_limit_s == 5400


def _with(text: str, line: str) -> str:
    """The recipe with one line of its cluster.slurm block set (replaced when the key is there)."""
    key = line.split(":", 1)[0]
    lines = text.splitlines(keepends=True)
    at = [i for i, ln in enumerate(lines) if ln.startswith(f"    {key}:")]
    if at:
        lines[at[0]] = f"    {line}\n"
    else:
        lines.insert(next(i for i, ln in enumerate(lines) if ln.startswith("    cpus_per_task:")) + 1, f"    {line}\n")
    return "".join(lines)


@pytest.mark.parametrize(
    ("line", "field", "fragment"),
    [
        ("time_limit: 1h", "cluster.slurm.time_limit", "not a Slurm duration"),
        ("queue_budget: '0'", "cluster.slurm.queue_budget", "longer than zero"),
        ("extra_sbatch: ['--nodes=4']", "cluster.slurm.extra_sbatch", "--nodes is set by cluster.nodes"),
        ("extra_sbatch: ['--time=5']", "cluster.slurm.extra_sbatch", "cluster.slurm.time_limit"),
        ("extra_sbatch: ['exclusive']", "cluster.slurm.extra_sbatch", "expected an sbatch option"),
        ('extra_sbatch: ["--comment=a\\nrm -rf /"]', "cluster.slurm.extra_sbatch", "one line"),
        ("rdzv_port: 80", "cluster.slurm.rdzv_port", "greater than or equal to 1024"),
        ("gpus: 8", "cluster.slurm.gpus", "unknown field"),
        ("partition: ''", "cluster.slurm.partition", "at least 1 character"),
        # every argument of an #SBATCH line counts, not only the first
        (
            "extra_sbatch: ['--exclusive --output=/tmp/x']",
            "cluster.slurm.extra_sbatch",
            "--output is set by the runner",
        ),
        ("extra_sbatch: ['--mem=0 -o/tmp/x']", "cluster.slurm.extra_sbatch", "-o is set by the runner"),
        ("extra_sbatch: ['--outp=/tmp/x']", "cluster.slurm.extra_sbatch", "--output is set by the runner"),
        (
            "extra_sbatch: ['--export=ALL,LD_PRELOAD=/tmp/x.so']",
            "cluster.slurm.extra_sbatch",
            "--export is set by the runner",
        ),
        ("extra_sbatch: ['--comment=\"a --output=/x\"']", "cluster.slurm.extra_sbatch", "no quotes"),
        ("partition: 'gpu --output=/tmp/x'", "cluster.slurm.partition", "expected one word"),
        ("account: 'a --export=ALL'", "cluster.slurm.account", "expected one word"),
    ],
)
def test_bad_slurm_settings_name_file_line_and_field(line: str, field: str, fragment: str) -> None:
    text = _with(SLURM_RECIPE.read_text(), line)
    want_line = text.splitlines().index(f"    {line}") + 1
    with pytest.raises(RecipeError) as err:
        parse_recipe_text(text, "r.yaml")
    message = str(err.value)
    assert "\n" not in message and fragment in message, message
    assert message.startswith(f"r.yaml:{want_line}: {field}: "), message


def test_sbatch_options_that_are_no_owned_ones_still_pass() -> None:
    settings = SlurmSettings(partition="gpu,debug", gres="gpu:h100:8", extra_sbatch=["--exclusive --mem=0", "--gpus=8"])
    assert settings.extra_sbatch == ["--exclusive --mem=0", "--gpus=8"]
