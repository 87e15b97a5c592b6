"""The live progress display (bot/cli/progress.py) of ``attune campaign run|resume`` and ``attune bench tuners``, in
real ``attune`` processes: under a pseudo-terminal it appears (what runs now, the step, spent of the total, elapsed,
ETA); with ``--json``, or when stdout is a pipe, nothing of it is written.

``attune demo`` drives its campaign through the same ``_drive`` as ``campaign run`` (bot/cli/campaign.py), and
``bench gate`` feeds the same display from the same run messages as a campaign's calibration (``[k/N] ...``): both
are covered here without their minutes of real CPU runs, by the message test at the end.
"""

from __future__ import annotations

import io
import json
import os
import pty
import re
import select
import subprocess
import sys
import time
from pathlib import Path

import pytest
from crash_helpers import scratch_clone

ROOT = Path(__file__).resolve().parents[2]
RECIPE = "bot/bench/tasks/glm-4.5/h100x128.yaml"  # simulated: a campaign takes seconds
BENCH = ["bench", "tuners", "--tasks", "llama3.1-8b/h100x8", "--policies", "random,greedy", "--seeds", "1"]
ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
# what only the display writes: rich's hidden cursor while it is live, and its columns
DISPLAY_MARKS = ("\x1b[?25l", " elapsed ", " ETA ")


def env() -> dict[str, str]:
    # PYTHONSAFEPATH: `python -m` in the scratch clone imports this checkout's bot (PYTHONPATH), not the clone's
    return {**os.environ, "PYTHONPATH": str(ROOT), "PYTHONSAFEPATH": "1", "COLUMNS": "200", "TERM": "xterm-256color"}


def under_pty(argv: list[str], cwd: Path, timeout: float = 240) -> tuple[int, str]:
    """Run ``argv`` with stdin, stdout and stderr on a pseudo-terminal; its exit code and everything it wrote."""
    master, slave = pty.openpty()
    proc = subprocess.Popen(argv, cwd=cwd, stdin=slave, stdout=slave, stderr=slave, env=env(), close_fds=True)
    os.close(slave)
    out = bytearray()
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            ready, _, _ = select.select([master], [], [], 1.0)
            if ready:
                try:
                    chunk = os.read(master, 65536)
                except OSError:  # the child closed its end
                    break
                if not chunk:
                    break
                out += chunk
            elif proc.poll() is not None:
                break
        else:
            proc.kill()
    finally:
        os.close(master)
    return proc.wait(timeout=30), out.decode(errors="replace")


def piped(argv: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, cwd=cwd, env=env(), capture_output=True, text=True, timeout=240)


def attune(*args: str) -> list[str]:
    return [sys.executable, "-m", "bot.cli", *args]


def no_display(text: str) -> None:
    for mark in DISPLAY_MARKS:
        assert mark not in text, (mark, text[-1500:])


@pytest.fixture(scope="module")
def repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return scratch_clone(tmp_path_factory.mktemp("progress") / "repo")


def test_a_campaign_on_a_terminal_shows_the_run_step_budget_elapsed_and_eta(repo: Path) -> None:
    code, out = under_pty(attune("campaign", "run", RECIPE, "--budget", "300", "--id", "pty1"), repo)
    assert code == 0, out[-3000:]
    plain = ANSI.sub("", out)
    assert "\x1b[?25l" in out  # rich's live display hid the cursor while it ran
    frames = [line for line in re.split(r"[\r\n]", plain) if line.startswith("campaign pty1 · ")]
    assert frames, plain[-3000:]
    # what runs now and the step, as the campaign went: the baseline runs first, later a step's trial
    assert any("baseline · now: baseline run 1" in f for f in frames), frames[:5]
    assert any(re.search(r"step \d+ · now: step \d+: trial run", f) for f in frames), frames
    # spent of the total budget, elapsed and the estimate of the time left
    assert all(
        re.search(r"[\d.]+/300 device-hours elapsed \d+:\d\d:\d\d ETA (-:--:--|\d+:\d\d:\d\d)", f) for f in frames
    ), frames
    spent = [float(re.search(r"([\d.]+)/300 device-hours", f).group(1)) for f in frames]
    assert spent[0] == 0 and spent[-1] > 0 and spent == sorted(spent)


@pytest.mark.parametrize("how", ["json-on-a-terminal", "pipe"])
def test_a_campaign_shows_nothing_of_it_with_json_or_into_a_pipe(repo: Path, how: str) -> None:
    cid = f"quiet-{how}"
    if how == "pipe":
        done = piped(attune("campaign", "run", RECIPE, "--budget", "300", "--id", cid), repo)
        code, out = done.returncode, done.stdout + done.stderr
        assert "step 1:" in out  # the progress lines a log gets are still there
    else:
        code, out = under_pty(attune("campaign", "run", RECIPE, "--budget", "300", "--id", cid, "--json"), repo)
        summary = json.loads(next(ln for ln in reversed(out.replace("\r", "").splitlines()) if ln.startswith("{")))
        assert summary["campaign"] == cid and summary["finish_reason"]
    assert code == 0, out[-3000:]
    no_display(out)
    assert f"campaign {cid} · " not in ANSI.sub("", out)


def test_a_resumed_campaign_shows_the_display_from_where_it_stands(repo: Path) -> None:
    killed = subprocess.run(
        attune("campaign", "run", RECIPE, "--budget", "300", "--id", "res1", "--json"),
        cwd=repo,
        env={**env(), "ATTUNE_CRASH_AFTER": "12"},
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert killed.returncode == -9, killed.stderr[-2000:]  # SIGKILLed after its 12th side effect, mid-campaign
    code, out = under_pty(attune("campaign", "resume", "res1"), repo)
    assert code == 0, out[-3000:]
    frames = [line for line in re.split(r"[\r\n]", ANSI.sub("", out)) if line.startswith("campaign res1 · ")]
    assert frames, out[-3000:]
    spent = [float(re.search(r"([\d.]+)/300 device-hours", f).group(1)) for f in frames]
    assert spent[0] > 0 and spent == sorted(spent)  # it starts from what the killed process had spent
    done = piped(attune("campaign", "resume", "res1"), repo)
    assert done.returncode == 0 and "already finished" in done.stdout
    no_display(done.stdout + done.stderr)


def test_bench_tuners_on_a_terminal_counts_campaigns_with_elapsed_and_eta(tmp_path: Path) -> None:
    code, out = under_pty(attune(*BENCH), ROOT)
    assert code == 0, out[-3000:]
    plain = ANSI.sub("", out)
    frames = [line for line in re.split(r"[\r\n]", plain) if line.startswith("bench tuners")]
    assert any(re.search(r"0/2 campaigns elapsed \d+:\d\d:\d\d ETA", f) for f in frames), frames[:3]
    assert any(
        re.search(
            r"· last: llama3\.1-8b/h100x8 greedy seed 0: [+-][\d.]+% \([\d.]+ simulated device-hours in all\)"
            r".* 2/2 campaigns elapsed",
            f,
        )
        for f in frames
    ), frames[-3:]
    assert "| oracle" in plain  # and the report follows, as without a terminal


@pytest.mark.parametrize("how", ["json-on-a-terminal", "pipe"])
def test_bench_tuners_shows_nothing_of_it_with_json_or_into_a_pipe(how: str) -> None:
    if how == "pipe":
        done = piped(attune(*BENCH), ROOT)
        code, out = done.returncode, done.stdout + done.stderr
    else:
        code, out = under_pty(attune(*BENCH, "--json"), ROOT)
    assert code == 0 and "| oracle" in out, out[-3000:]
    no_display(out)
    assert "campaigns elapsed" not in ANSI.sub("", out)


def test_run_messages_count_runs_and_a_campaigns_calibration_names_them() -> None:
    """The messages ``gate.runs.run_many`` gives (bench gate's runs, a campaign's calibration runs) drive the count."""
    from rich.console import Console

    from bot.campaign import RunTrial
    from bot.cli.progress import CampaignDisplay, CountDisplay, action_label

    text = io.StringIO()
    term = Console(file=text, force_terminal=True, width=200)
    with CountDisplay(term, "bench gate", 0, "runs") as display:
        display.message("3 run(s) from the cache, 12 to run (2 at a time)")
        assert display.progress.tasks[0].total is None  # not known yet: no ETA from nothing
        display.message("[5/12] nan-grad: crash in 40s")
        task = display.progress.tasks[0]
        assert (task.completed, task.total, task.fields["spent"]) == (5, 12, "5/12")
        assert "last: nan-grad: crash in 40s" in task.description

    class State:  # what CampaignDisplay reads of a campaign
        id, budget, spent, phase, steps = "c9", 10.0, 2.5, "stepping", [object(), object()]
        pending = [RunTrial(n=2)]

    with CampaignDisplay(term, State()) as display:
        assert display.progress.tasks[0].description == "campaign c9 · step 2 · now: step 2: trial run"
        assert display.progress.tasks[0].fields["spent"] == "2.5/10"
        display.message("[1/4] calibration repeat: ok in 12s")
        assert display.progress.tasks[0].description == "campaign c9 · calibration 1/4 done"
    assert action_label(RunTrial(n=3)) == "step 3: trial run"
