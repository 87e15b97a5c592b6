"""Bad input that used to get past the checks and start something: the real ``attune`` in scratch clones, each case
one line naming the file, field or flag and what was expected, exit 2, no traceback, and nothing changed — no
branch, no commit, no campaign folder, no output folder.

- ``campaign run --budget nan|inf`` (a float, and not a number or not finite) and the other numeric flags;
- ``campaign run`` of a recipe with uncommitted changes, or one git does not track, with the local forge (it branches
  from the committed recipe and merges into the working tree: the first merge failed after a whole step);
- a simulated recipe on hardware, or of a model, the simulator does not know (``attune run`` and ``campaign run``);
- ``attune run --out FILE``, ``--steps 0``, ``--steps`` within the recipe's warm-up;
- ``attune gate --steps 0`` (a damaged run record: tests/gate/test_api.py);
- ``campaign show|resume|stop`` of a damaged ``state.json`` (or ``launch.json``).

Also :func:`bot.core.repo.uncommitted` on its own.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from crash_helpers import attune, git, scratch_clone
from test_campaign_commands import one_line_error

from bot.core.repo import uncommitted
from bot.core.state import Campaign

SIM = "bot/bench/tasks/llama3.1-8b/h100x8.yaml"  # launcher sim, 8 devices: bench steps 20, warm-up 5
CPU = "recipes/llama3-tiny/cpu.yaml"


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    return scratch_clone(tmp_path / "repo")


def snapshot(repo: Path) -> dict[str, str]:
    """What a refused command must leave as it was: the working tree (ignored files too: ``.attune/``, ``runs/``),
    the branches and HEAD."""
    return {
        "status": git(repo, "status", "--porcelain", "--ignored", "--untracked-files=all"),
        "branches": git(repo, "for-each-ref", "--format=%(refname) %(objectname)", "refs/heads"),
        "head": git(repo, "rev-parse", "HEAD"),
    }


def refused(repo: Path, *args: str) -> str:
    """``attune ARGS`` in ``repo``: one error line, exit 2, and nothing changed."""
    before = snapshot(repo)
    line = one_line_error(attune(repo, *args))
    assert snapshot(repo) == before, line
    return line


def edit(repo: Path, rel: str, old: str, new: str, *, commit: bool = True) -> int:
    """Replace the line ``old`` of ``rel`` (committed unless told not to); the line's number."""
    path = repo / rel
    lines = path.read_text().splitlines(keepends=True)
    n = next(i for i, line in enumerate(lines) if line.rstrip("\n") == old)
    lines[n] = new + "\n"
    path.write_text("".join(lines))
    if commit:
        git(repo, "commit", "-q", "-am", f"test: {new.strip()}")
    return n + 1


# ----------------------------------------------------------------------------- campaign run: flags and the recipe
@pytest.mark.parametrize("budget", ["nan", "inf", "0"])
def test_a_budget_that_is_not_a_positive_finite_number_starts_nothing(repo: Path, budget: str) -> None:
    line = refused(repo, "campaign", "run", SIM, f"--budget={budget}")
    assert line.startswith("attune: --budget: expected a positive, finite number of device-hours; got "), line
    assert not (repo / ".attune").exists()


def test_the_demo_refuses_such_a_budget_before_it_clones(repo: Path, tmp_path: Path) -> None:
    tmp = tmp_path / "tmp"  # where its scratch clone would go
    tmp.mkdir()
    proc = attune(repo, "demo", "--budget", "nan", env={"TMPDIR": str(tmp)})
    assert one_line_error(proc) == "attune: --budget: expected a positive, finite number of device-hours; got nan"
    assert list(tmp.iterdir()) == []


def test_max_steps_below_one_starts_nothing(repo: Path) -> None:
    line = refused(repo, "campaign", "run", SIM, "--budget", "5", "--max-steps", "0")
    assert line == "attune: --max-steps: expected a whole number of steps, 1 or more; got 0"
    assert not (repo / ".attune").exists()


def test_a_recipe_with_uncommitted_changes_or_untracked_is_refused_before_the_campaign_starts(repo: Path) -> None:
    edit(
        repo,
        SIM,
        "  activation_checkpoint: selective                           # llama3_8b: selective (per-op SAC)",
        "  activation_checkpoint: full",
        commit=False,
    )  # a layout that runs: only the uncommitted edit is wrong
    line = refused(repo, "campaign", "run", SIM, "--budget", "5")
    assert line.startswith(
        f"attune: {SIM}: has uncommitted changes; a campaign's steps branch from the recipe as committed"
    ), line
    git(repo, "add", SIM)  # staged is not committed either
    assert refused(repo, "campaign", "run", SIM, "--budget", "5").startswith(f"attune: {SIM}: has uncommitted changes")
    git(repo, "reset", "-q", "--hard")
    copy = "bot/bench/tasks/llama3.1-8b/copy.yaml"
    (repo / copy).write_text((repo / SIM).read_text())
    assert refused(repo, "campaign", "run", copy, "--budget", "5").startswith(f"attune: {copy}: is not tracked by git;")
    assert not (repo / ".attune").exists()


def test_the_in_memory_forge_tunes_the_recipe_as_it_is_on_disk(repo: Path) -> None:
    edit(
        repo,
        SIM,
        "  training.local_batch_size: 1                               # llama3_8b: local batch 1",
        "  training.local_batch_size: 1                               # edited, not committed",
        commit=False,
    )
    branches = git(repo, "branch", "--list")
    done = attune(repo, "campaign", "run", SIM, "--budget", "3", "--forge", "none", "--json")  # holds its set-up
    assert done.returncode == 0, done.stderr[-2000:]
    assert json.loads(done.stdout.strip().splitlines()[-1])["finish_reason"]
    assert git(repo, "branch", "--list") == branches  # its steps were kept in memory


@pytest.mark.parametrize(
    ("field", "old", "new", "fragment"),
    [
        (
            "cluster.hardware",
            "  hardware: h100-sxm-80gb",
            "  hardware: tpu9",
            "'tpu9' is unknown to the simulator; known: b200, cpu, ",
        ),
        # a config torchtitan does not have, for a model the zoo does not hold either
        (
            "workload.config",
            "  config: llama3_8b",
            "  config: llama3_nonexistent",
            "the simulator cannot know this model: ",
        ),
    ],
)
def test_hardware_or_a_model_the_simulator_does_not_know_runs_nothing(
    repo: Path, tmp_path: Path, field: str, old: str, new: str, fragment: str
) -> None:
    if field == "workload.config":
        edit(repo, SIM, "  model: llama3.1-8b", "  model: gpt-9")
    n = edit(repo, SIM, old, new)
    out = tmp_path / "out"
    line = refused(repo, "run", SIM, "--out", str(out))
    assert line.startswith(f"attune: {SIM}:{n}: {field}: {fragment}"), line
    assert not out.exists()
    line = refused(repo, "campaign", "run", SIM, "--budget", "5")
    assert line.startswith(f"attune: {repo / SIM}:{n}: {field}: {fragment}"), line
    assert not (repo / ".attune").exists()


def test_a_results_file_that_is_not_a_run_record_stops_the_campaign_before_its_first_run(repo: Path) -> None:
    """A local-forge campaign ends by regenerating leaderboard.md from results/: it used to run every step, commit its
    summary and only then fail on the bad file."""
    bad = next(iter(sorted((repo / "results").rglob("*.json"))))
    record = json.loads(bad.read_text())
    record["summary"]["tps_median"] = "fast"
    bad.write_text(json.dumps(record))
    git(repo, "commit", "-q", "-am", "test: a results file that is not a run record")
    rel = bad.relative_to(repo)
    line = refused(repo, "campaign", "run", SIM, "--budget", "5")
    assert (
        line.startswith("attune: ") and str(rel) in line and "summary.tps_median: expected a number; got 'fast'" in line
    ), line
    assert not (repo / ".attune").exists()


# ----------------------------------------------------------------------------- attune run
def test_run_out_that_is_a_file_or_below_one_is_a_usage_error(repo: Path, tmp_path: Path) -> None:
    taken = tmp_path / "taken"
    taken.write_text("mine\n")
    line = refused(repo, "run", SIM, "--out", str(taken))
    assert line == f"attune: --out {taken}: is a file; expected a folder for the run record and the run's logs"
    line = refused(repo, "run", SIM, "--out", str(taken / "run"))
    assert (
        line
        == f"attune: --out {taken / 'run'}: {taken} is a file; expected a folder for the run record and the run's logs"
    )
    assert taken.read_text() == "mine\n"


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["--steps", "0"], "--steps: expected at least 2; got 0"),
        (["--steps", "-3"], "--steps: expected at least 2; got -3"),
        (
            ["--steps", "5"],
            "--steps: expected more than the recipe's bench.warmup_steps (5), which are not measured; got 5",
        ),
        (
            ["--steps", "1000000000"],
            "--steps: expected at most 1,000,000 (a benchmark measures tens); got 1,000,000,000",
        ),
        (["--max-wall-s", "nan"], "--max-wall-s: expected a positive number of seconds; got nan"),
        (
            ["--stop-below", "inf"],
            "--stop-below/--stop-after: expected a positive, finite tokens/s and at least 2 steps; got inf, 3",
        ),
    ],
)
def test_run_refuses_steps_it_would_not_run_or_measure(
    repo: Path, tmp_path: Path, args: list[str], expected: str
) -> None:
    out = tmp_path / "out"
    assert refused(repo, "run", SIM, "--out", str(out), *args) == f"attune: {expected}"
    assert not out.exists()


# ----------------------------------------------------------------------------- attune gate
def test_gate_steps_below_one_is_a_usage_error(repo: Path) -> None:
    line = refused(repo, "gate", CPU, CPU, "--steps", "0")
    assert line == "attune: --steps: expected the number of steps to compare, 1 or more; got 0"


# ----------------------------------------------------------------------------- campaign show|resume|stop
def stored(repo: Path, cid: str = "c1") -> Path:
    """A campaign's folder with a valid state (in its baseline phase, resumable) and its launch facts."""
    folder = repo / ".attune" / "campaigns" / cid
    folder.mkdir(parents=True)
    state = Campaign(id=cid, recipe_path=SIM, recipe_id="llama3.1-8b/h100x8", budget=5.0)
    (folder / "state.json").write_text(state.model_dump_json(indent=1))
    (folder / "launch.json").write_text('{"forge": "local", "seed": 0}')
    return folder


def damaged_state(text: str) -> bytes:
    if text == "budget":
        data = json.loads(Campaign(id="c1", recipe_path=SIM, recipe_id="x", budget=5.0).model_dump_json())
        return json.dumps({**data, "budget": "lots"}).encode()
    return text.encode("latin-1")


@pytest.mark.parametrize(
    ("content", "problem"),
    [
        (
            '{"id": "c1",\n',
            ":2: not a campaign state: not valid JSON (Expecting property name enclosed in double quotes, column 1)",
        ),
        ("{}", ": not a campaign state: id: missing (a required field)"),
        ("budget", ": not a campaign state: budget: expected a number; got 'lots'"),
        ("[]", ": not a campaign state: expected a JSON object; got list"),
        ('{"id": "\xe9"}', ":1: not UTF-8 text (byte 0xe9 at offset 8); save the file as UTF-8"),
    ],
)
def test_a_damaged_state_file_is_named_with_its_first_wrong_field(repo: Path, content: str, problem: str) -> None:
    folder = stored(repo)
    (folder / "state.json").write_bytes(damaged_state(content))
    line = refused(repo, "campaign", "show", "c1")
    assert line == f"attune: {folder / 'state.json'}{problem}", line


def test_campaign_list_names_a_damaged_state_by_its_first_wrong_field(repo: Path) -> None:
    """``campaign list`` reads through the same reader as show/resume/stop (it used to say "1 validation error")."""
    stored(repo, "c0")
    folder = stored(repo)
    (folder / "state.json").write_bytes(damaged_state("budget"))
    proc = attune(repo, "campaign", "list", "--json")
    assert proc.returncode == 0, proc.stderr
    rows = {row["id"]: row for row in json.loads(proc.stdout.strip().splitlines()[-1])["campaigns"]}
    assert rows["c1"]["status"] == (
        f"unreadable: {folder / 'state.json'}: not a campaign state: budget: expected a number; got 'lots'"
    ), rows["c1"]
    assert rows["c0"]["phase"] == "baseline"


def test_resume_and_stop_of_a_damaged_state_name_it_and_take_no_lock(repo: Path) -> None:
    folder = stored(repo)
    (folder / "state.json").write_bytes(damaged_state("budget"))
    files = {p.name: p.read_bytes() for p in folder.iterdir()}
    for command in ("resume", "stop"):
        line = refused(repo, "campaign", command, "c1")
        assert line == (
            f"attune: {folder / 'state.json'}: not a campaign state: budget: expected a number; got 'lots'"
        ), (command, line)
        assert {p.name: p.read_bytes() for p in folder.iterdir()} == files  # no lock file, nothing written


def test_damaged_launch_facts_are_named_with_their_first_wrong_field(repo: Path) -> None:
    folder = stored(repo)
    (folder / "launch.json").write_text('{"seed": "first"}')
    for command in ("resume", "stop"):
        line = refused(repo, "campaign", command, "c1")
        assert line == (
            f"attune: {folder / 'launch.json'}: not the campaign's launch facts: "
            "seed: expected a whole number; got 'first'"
        ), line
    assert sorted(p.name for p in folder.iterdir()) == ["launch.json", "state.json"]


# ----------------------------------------------------------------------------- bot.core.repo.uncommitted
def test_uncommitted_says_why_a_file_is_not_as_committed(repo: Path) -> None:
    recipe = repo / SIM
    assert uncommitted(repo, recipe) is None
    recipe.write_text(recipe.read_text() + "# a note\n")
    assert uncommitted(repo, recipe) == "has uncommitted changes"
    subprocess.run(["git", "add", SIM], cwd=repo, check=True)
    assert uncommitted(repo, recipe) == "has uncommitted changes"
    git(repo, "commit", "-q", "-m", "test: a note")
    assert uncommitted(repo, recipe) is None
    new = repo / "recipes" / "new.yaml"
    new.write_text("x: 1\n")
    assert uncommitted(repo, new) == "is not tracked by git"
    ignored = repo / ".attune" / "r.yaml"  # .gitignore'd
    ignored.parent.mkdir()
    ignored.write_text("x: 1\n")
    assert uncommitted(repo, ignored) == "is not tracked by git"
    assert uncommitted(repo, repo.parent / "elsewhere.yaml") == "is not tracked by git"


def test_an_id_whose_branches_an_earlier_campaign_left_is_refused(repo: Path) -> None:
    """The local forge finds a step by its branch: a new campaign of a reused id (its state deleted, its branches
    left) took the old campaign's step branch as its own and reported a change it never ran."""
    git(repo, "branch", "attune/x/1-activation_checkpoint")
    line = refused(repo, "campaign", "run", SIM, "--budget", "5", "--id", "x")
    assert line.startswith(
        "attune: --id x: 1 branch(es) of an earlier campaign of that id exist (attune/x/1-activation_checkpoint, ...)"
    )
    assert not (repo / ".attune").exists()


def test_staged_changes_are_refused_and_a_campaign_commits_only_its_own_files(repo: Path) -> None:
    """git refuses to merge into an index with staged changes: the campaign used to spend its runs and then fail
    its first merge with a ForgeError traceback (and a finish commit took a user's staged file along)."""
    (repo / "notes.txt").write_text("wip\n")
    git(repo, "add", "notes.txt")
    line = refused(repo, "campaign", "run", SIM, "--budget", "2", "--id", "s")
    assert line == (
        f"attune: {repo}: 1 staged change(s) (notes.txt); a local-forge campaign merges its kept steps into this "
        "checkout, and git refuses to merge into an index with staged changes: commit or unstage them first "
        f"(`git -C {repo} restore --staged .`)"
    ), line
    git(repo, "restore", "--staged", "notes.txt")  # untracked, it is the user's own: left as it is
    done = attune(repo, "campaign", "run", SIM, "--budget", "2", "--id", "s", "--json")
    assert done.returncode == 0, done.stderr[-2000:]
    summary = json.loads(done.stdout.strip().splitlines()[-1])
    assert summary["simulated"] is True and summary["gain"] > 0  # a simulated campaign's JSON says so
    assert "notes.txt" not in git(repo, "log", "--name-only", "--format=", "-8")
    assert "?? notes.txt" in git(repo, "status", "--porcelain")
    proposed = (repo / "lessons" / "proposed" / "s.yaml").read_text()
    assert "SIMULATED" in proposed and "Measured" not in proposed  # a lesson from the simulator is labelled so
