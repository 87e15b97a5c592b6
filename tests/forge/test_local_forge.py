"""bot/forge/local.py: campaign steps as real git branches in a tmp repository."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from bot.forge.base import StepRequest, step_branch
from bot.forge.local import ForgeError, LocalForge

REPO = Path(__file__).resolve().parents[2]
RECIPE = "recipes/llama3-tiny/cpu.yaml"


def git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=repo, check=True, capture_output=True, text=True).stdout


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    root = tmp_path / "repo"
    root.mkdir()
    git(root, "init", "-q", "-b", "main")
    git(root, "config", "user.name", "attune test")
    git(root, "config", "user.email", "test@localhost")
    (root / ".gitignore").write_text("/.attune/\n")
    (root / RECIPE).parent.mkdir(parents=True)
    (root / RECIPE).write_text((REPO / RECIPE).read_text())
    git(root, "add", "-A")
    git(root, "commit", "-q", "-m", "recipe")
    return root


def request(n: int = 1, lever: str = "activation_checkpoint", value: str = "none") -> StepRequest:
    return StepRequest(
        campaign="c1", n=n, recipe_path=RECIPE, lever=lever, value=value, title=f"attune step {n}: {lever}", body="why"
    )


def test_open_step_makes_a_branch_with_a_one_line_recipe_change(repo: Path) -> None:
    forge = LocalForge(repo)
    before = (repo / RECIPE).read_text()
    ref = forge.open_step(request())
    assert ref.branch == "attune/c1/1-activation_checkpoint" == step_branch("c1", 1, "activation_checkpoint")
    assert git(repo, "diff", "--numstat", "main", ref.branch, "--", RECIPE).split() == ["1", "1", RECIPE]
    assert git(repo, "diff", "--name-only", "main", ref.branch).split() == [RECIPE]
    diff = git(repo, "diff", "-U0", "main", ref.branch, "--", RECIPE)
    assert "-  activation_checkpoint: full" in diff and "+  activation_checkpoint: none" in diff
    assert git(repo, "rev-parse", ref.branch).strip() == ref.head_sha
    assert git(repo, "log", "-1", "--format=%s", ref.branch).strip() == "attune step 1: activation_checkpoint"
    # plumbing only: the working tree, the index and HEAD are untouched
    assert (repo / RECIPE).read_text() == before
    assert git(repo, "status", "--porcelain") == "" and git(repo, "rev-parse", "--abbrev-ref", "HEAD").strip() == "main"


def test_dotted_levers_make_safe_branch_names_and_booleans_stay_one_line(repo: Path) -> None:
    forge = LocalForge(repo)
    ref = forge.open_step(request(2, "compile.enable", "true"))
    assert ref.branch == "attune/c1/2-compile-enable"
    assert git(repo, "diff", "--numstat", "main", ref.branch, "--", RECIPE).split()[:2] == ["1", "1"]
    assert "compile.enable: true" in forge.read_file(RECIPE, ref.branch)


def test_open_step_is_idempotent_and_find_step_survives_a_restart(repo: Path) -> None:
    forge = LocalForge(repo)
    assert forge.find_step("c1", 1) is None
    ref = forge.open_step(request())
    again = LocalForge(repo).open_step(request(value="selective"))  # a resumed driver: the step that exists is returned
    assert again == ref
    assert git(repo, "for-each-ref", "--format=%(refname)", "refs/heads/attune/").split() == [
        f"refs/heads/{ref.branch}"
    ]
    assert LocalForge(repo).find_step("c1", 1) == ref
    assert LocalForge(repo).find_step("c1", 11) is None and LocalForge(repo).find_step("c2", 1) is None


def test_records_and_report_are_committed_on_the_branch(repo: Path) -> None:
    forge = LocalForge(repo)
    ref = forge.open_step(request())
    ref2 = forge.add_files(
        ref,
        {"campaigns/c1/step-1/trial.json": '{"run": 1}\n', "campaigns/c1/step-1/report.md": "# report\n"},
        "records",
    )
    assert ref2.head_sha != ref.head_sha and git(repo, "rev-parse", ref.branch).strip() == ref2.head_sha
    files = git(repo, "ls-tree", "-r", "--name-only", ref.branch).split()
    assert "campaigns/c1/step-1/trial.json" in files and "campaigns/c1/step-1/report.md" in files
    assert forge.read_file("campaigns/c1/step-1/trial.json", ref.branch) == '{"run": 1}\n'
    # the same files again (a resumed driver): no empty commit
    ref3 = forge.add_files(ref2, {"campaigns/c1/step-1/report.md": "# report\n"}, "records again")
    assert ref3.head_sha == ref2.head_sha and git(repo, "rev-list", "--count", f"main..{ref.branch}").strip() == "2"
    assert not (repo / "campaigns").exists()  # never in the working tree of the base branch


def test_merge_no_ff_brings_the_record_under_results(repo: Path) -> None:
    forge = LocalForge(repo)
    ref = forge.open_step(request())
    ref = forge.add_files(ref, {"results/llama3-tiny/cpu/run1.json": "{}\n"}, "results")
    merged = forge.merge(ref, "attune: merge step 1")
    assert merged.state == "merged" and forge.find_step("c1", 1).state == "merged"
    parents = git(repo, "log", "-1", "--format=%P", "main").split()
    assert (
        len(parents) == 2 and parents[1] == ref.head_sha
    )  # a real merge commit, even where a fast-forward was possible
    assert git(repo, "log", "-1", "--format=%s", "main").strip() == "attune: merge step 1"
    assert (repo / "results/llama3-tiny/cpu/run1.json").read_text() == "{}\n"
    assert "activation_checkpoint: none" in (repo / RECIPE).read_text() == forge.read_file(RECIPE)


def test_merge_refuses_when_the_branch_head_moved(repo: Path) -> None:
    forge = LocalForge(repo)
    ref = forge.open_step(request())
    # someone pushes to the step branch after it was measured
    tree = git(repo, "rev-parse", f"{ref.branch}^{{tree}}").strip()
    moved = git(repo, "commit-tree", tree, "-p", ref.head_sha, "-m", "unmeasured change").strip()
    git(repo, "update-ref", f"refs/heads/{ref.branch}", moved)
    main_before = git(repo, "rev-parse", "main").strip()
    with pytest.raises(ForgeError, match="moved"):
        forge.merge(ref, "merge")
    assert git(repo, "rev-parse", "main").strip() == main_before
    assert forge.find_step("c1", 1).state == "open"


def test_a_closed_step_keeps_its_branch(repo: Path) -> None:
    forge = LocalForge(repo)
    ref = forge.open_step(request())
    ref = forge.add_files(ref, {"campaigns/c1/step-1/CLOSED.md": "Closed: no gain\n"}, "close")
    closed = forge.close(ref, "no gain")
    assert closed.state == "closed" and LocalForge(repo).find_step("c1", 1).state == "closed"
    assert git(repo, "rev-parse", ref.branch).strip() == ref.head_sha
    assert forge.read_file("campaigns/c1/step-1/CLOSED.md", ref.branch) == "Closed: no gain\n"
    assert "activation_checkpoint: full" in forge.read_file(RECIPE)  # the base branch did not change


def test_stacked_step_starts_from_the_parent_branch(repo: Path) -> None:
    forge = LocalForge(repo)
    parent = forge.open_step(request(1, "training.local_batch_size", "2"))
    child = forge.open_step(request(2, "activation_checkpoint", "selective"), base_ref=parent.branch)
    text = forge.read_file(RECIPE, child.branch)
    assert "training.local_batch_size: 2" in text and "activation_checkpoint: selective" in text
    assert git(repo, "diff", "--numstat", parent.branch, child.branch, "--", RECIPE).split()[:2] == ["1", "1"]
    with pytest.raises(ForgeError, match="no such base ref"):
        forge.open_step(request(3), base_ref="attune/c1/99-nothing")


def test_status_comments_and_base_commits(repo: Path) -> None:
    forge = LocalForge(repo)
    ref = forge.open_step(request())
    forge.set_status(ref, "success", "gate passed")
    assert forge.status_of(ref.head_sha) == {"context": "attune/gate", "state": "success", "description": "gate passed"}
    assert forge.status_of("0" * 40) is None
    forge.upsert_comment(ref, "attune:step-1", "first")
    forge.upsert_comment(ref, "attune:step-1", "second")
    forge.upsert_comment(0, "attune:campaign", "summary")
    comments = sorted((repo / ".attune" / "comments").iterdir())
    assert len(comments) == 2 and {p.read_text() for p in comments} == {"second", "summary"}
    sha = forge.commit_on_base({"campaigns/c1/summary.md": "done\n"}, "summary")
    assert git(repo, "rev-parse", "main").strip() == sha
    assert forge.commit_on_base({"campaigns/c1/summary.md": "done\n"}, "summary again") == sha  # nothing new: no commit
