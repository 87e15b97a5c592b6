"""bot/forge/memory.py: the in-memory forge of simulated campaigns behaves like the git one."""

from __future__ import annotations

import difflib
from pathlib import Path

from bot.forge.base import StepRequest
from bot.forge.memory import MemoryForge

RECIPE = "recipes/llama3-tiny/cpu.yaml"
TEXT = (Path(__file__).resolve().parents[2] / RECIPE).read_text()


def request(n: int = 1, lever: str = "activation_checkpoint", value: str = "none") -> StepRequest:
    return StepRequest(campaign="c1", n=n, recipe_path=RECIPE, lever=lever, value=value, title="t", body="b")


def changed_lines(a: str, b: str) -> list[str]:
    return [
        line
        for line in difflib.unified_diff(a.splitlines(), b.splitlines(), lineterm="", n=0)
        if line[:1] in "+-" and not line.startswith(("+++", "---"))
    ]


def test_open_step_changes_one_line_and_is_idempotent() -> None:
    forge = MemoryForge({RECIPE: TEXT})
    ref = forge.open_step(request())
    assert ref.branch == "attune/c1/1-activation_checkpoint"
    assert changed_lines(TEXT, forge.read_file(RECIPE, ref.branch)) == [
        "-  activation_checkpoint: full",
        "+  activation_checkpoint: none",
    ]
    assert forge.open_step(request(value="selective")) == ref and forge.find_step("c1", 1) == ref
    assert forge.read_file(RECIPE) == TEXT


def test_merge_keeps_the_base_files_and_close_keeps_the_branch() -> None:
    forge = MemoryForge({RECIPE: TEXT, "README.md": "hi\n"})
    ref = forge.add_files(forge.open_step(request()), {"results/x.json": "{}"}, "results")
    assert ref.head_sha.endswith("@2")
    forge.refs["main"]["leaderboard.md"] = "board\n"  # landed on the base after the branch was made
    merged = forge.merge(ref, "merge")
    assert merged.state == "merged" and forge.find_step("c1", 1).state == "merged"
    assert forge.read_file("results/x.json") == "{}" and "activation_checkpoint: none" in forge.read_file(RECIPE)
    assert forge.read_file("leaderboard.md") == "board\n" and forge.read_file("README.md") == "hi\n"
    other = forge.open_step(request(2, "training.local_batch_size", "2"))
    closed = forge.close(other, "no gain")
    assert closed.state == "closed" and "training.local_batch_size: 2" in forge.read_file(RECIPE, other.branch)
    assert "training.local_batch_size: 1" in forge.read_file(RECIPE)
