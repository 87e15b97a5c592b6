"""A GitHub campaign driven end to end against the spec-validated fake (tests/forge/fake_github.py): the issue form
starts it, and every ``trial.yml`` dispatch is answered the way the workflow's jobs would answer it.

``DispatchAnswerer`` plays trial.yml for each dispatch, in order:

- ``check``: ``bot.github.check_trial.parse_limits`` on the ``limits`` input and the forge's own ``check_trial`` /
  ``check_default_run`` (a refused run fails loudly here: on GitHub the campaign would wait forever);
- ``run``: the recipe file as it is at the dispatched ``sha`` (``recipe`` input), run the way
  ``attune run RECIPE --json --out run/ [--max-wall-s S] [--stop-below T]`` runs it -- either in-process through
  ``bot.cli.main`` from a checkout of that sha (``mode="attune-run"``: a fresh process per run, so a fresh
  ``SimRunner(seed=0)`` every time), or with a caller-given runner object called with exactly the arguments
  ``cmd_run`` passes (``runner=...``: e.g. one long-lived ``SimRunner(seed=s)``, whose noise stream advances run by
  run like the local driver's);
  a calibration (real recipes only; simulated ones are calibrated by the bot) is ``attune github calibrate``'s
  ``calibrate_loss_band`` on the records branch's baseline recipe and record;
- ``report``: ``bot.github.trial_results.handle`` with the artifact directory.

``GitHubCampaign`` wraps one campaign: seed the fake, open the issue, ``start`` (``campaign_requests.handle``), top the
budget up with ``/attune budget +H`` comments when the request's budget is above what the form accepts, and
``drain`` (answer dispatches until none is left); ``state()`` is the campaign as stored on the issue.
"""

from __future__ import annotations

import contextlib
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from forge_helpers import TOKEN

TRIAL_WORKFLOW = "trial.yml"
FORM_BUDGET_MAX = 500.0  # bot.github.request.MAX_BUDGET_HOURS (also the most one `/attune budget +H` adds)


def _number(x: float) -> str:
    """A float as the form and ``/attune budget +H`` accept it (digits, optional decimals), exactly."""
    text = repr(float(x))
    if not text.replace(".", "", 1).isdigit():
        raise ValueError(f"{x!r} cannot be written as plain digits")
    return text


def issue_form(recipe: str, budget: float, policy: str = "heuristic", labels: str = "gpu, h100") -> str:
    return (
        f"### Recipe path\n\n{recipe}\n\n### Budget (device-hours)\n\n{_number(budget)}\n\n### Policy\n\n{policy}\n\n"
        f"### Runner labels\n\n{labels}\n\n### Bench steps\n\n_No response_"
    )


class FreshSimRunner:
    """A runner that behaves like one ``attune run`` process per run: a new ``SimRunner(seed)`` for every run (so
    its noise stream restarts each time, as it does on a trial.yml runner). Give it to the local driver to match
    ``DispatchAnswerer(mode="attune-run")``."""

    def __init__(self, seed: int = 0) -> None:
        self.seed = seed

    def run(self, recipe: Any, **kw: Any) -> Any:
        from bot.runner.sim import SimRunner

        return SimRunner(seed=self.seed).run(recipe, **kw)


class DispatchAnswerer:
    """Answers the fake's trial.yml dispatches the way trial.yml's check, run and report jobs would."""

    def __init__(
        self,
        gh: Any,
        forge: Any,
        work: Path,
        *,
        runner: Any = None,
        mode: str = "attune-run",
        check: bool = True,
        run_job_result: str = "success",
        driver_kw: dict[str, Any] | None = None,
        on_answer: Callable[[dict[str, str], Path, str], None] | None = None,
    ) -> None:
        if runner is None and mode != "attune-run":
            raise ValueError(f"mode {mode!r} needs a runner; mode 'attune-run' runs bot.cli in-process")
        self.gh, self.forge, self.work = gh, forge, Path(work)
        self.runner, self.mode, self.check = runner, mode if runner is None else "runner", check
        self.run_job_result = run_job_result
        self.driver_kw = dict(driver_kw or {})
        self.on_answer = on_answer
        self.answered = 0  # trial.yml dispatches answered so far (index into the fake's dispatch list)
        self.log: list[tuple[dict[str, str], str]] = []  # (dispatch inputs, the report handler's answer)

    # -- the dispatches
    def trial_dispatches(self) -> list[dict[str, str]]:
        return [d["inputs"] for d in self.gh.dispatches if d["workflow"] == TRIAL_WORKFLOW]

    def unanswered(self) -> list[dict[str, str]]:
        return self.trial_dispatches()[self.answered :]

    def drain(self, limit: int = 500) -> list[tuple[dict[str, str], str]]:
        """Answer every dispatch, including the ones each answer dispatches, until none is left."""
        done = []
        while self.unanswered():
            if len(done) >= limit:
                raise RuntimeError(f"still dispatching after {limit} answers: {self.unanswered()[0]}")
            inputs = self.unanswered()[0]
            done.append((inputs, self.answer(inputs)))
        return done

    def answer(self, inputs: dict[str, str]) -> str:
        """check + run + report for one dispatch (counted as answered)."""
        self.answered += 1
        out = self.work / f"artifact-{self.answered}"
        out.mkdir(parents=True)
        kind, pr, sha, recipe_path = inputs["kind"], int(inputs["pr"]), inputs["sha"], inputs["recipe"]
        limits = self._check(inputs)
        base_sha = ""
        if kind == "calibrate":
            self._calibrate(inputs, out)
        elif kind == "pair":  # both sides in one job, in the pair's order: the incumbent is the default branch head
            base_sha = self.forge._branch_head(self.forge.base_branch)  # noqa: SLF001 - what check-trial emits
            order = inputs.get("order", "")
            assert order in ("AB", "BA"), f"a pair dispatch without its order: {inputs}"
            sides = {"incumbent": base_sha, "candidate": sha}
            for side in ("incumbent", "candidate") if order == "AB" else ("candidate", "incumbent"):
                (out / side).mkdir()
                self._run(recipe_path, sides[side], limits, out / side, tag=side)
        else:
            self._run(recipe_path, sha, limits, out)
        from bot.github import trial_results

        said = trial_results.handle(
            self.forge,
            out,
            campaign=inputs["campaign"],
            issue=int(inputs["issue"]),
            pr=pr,
            sha=sha,
            kind=kind,
            attempt=int(inputs["attempt"]),
            run_job_result=self.run_job_result,
            base_sha=base_sha,
            **self.driver_kw,
        )
        self.log.append((dict(inputs), said))
        if self.on_answer:
            self.on_answer(inputs, out, said)
        return said

    # -- trial.yml's jobs
    def _check(self, inputs: dict[str, str]) -> dict[str, float]:
        """The check job: the limits it would pass on, and (``check``) the forge's own refusal rules."""
        from bot.github.check_trial import parse_limits

        kind, pr, sha = inputs["kind"], int(inputs["pr"]), inputs["sha"]
        limits, problem = parse_limits(inputs.get("limits", "{}"), kind)
        if problem:
            raise AssertionError(f"check-trial would refuse {inputs}: {problem}")
        if self.check:
            tc = self.forge.check_default_run(sha, inputs["recipe"]) if pr == 0 else self.forge.check_trial(pr, sha)
            if not tc.ok:
                raise AssertionError(f"check-trial would refuse {inputs}: {tc.reason}")
        return limits

    def _checkout(self, sha: str, recipe_path: str, tag: str = "") -> Path:
        """The files of ``sha`` the run needs (the recipe), as ``actions/checkout`` would leave them."""
        text = self.gh.file(recipe_path, sha)
        if text is None:
            raise AssertionError(f"{recipe_path} is not in {sha}")
        root = self.work / f"checkout-{self.answered}{tag}"
        (root / recipe_path).parent.mkdir(parents=True, exist_ok=True)
        (root / recipe_path).write_text(text)
        return root

    def _run(self, recipe_path: str, sha: str, limits: dict[str, float], out: Path, tag: str = "") -> None:
        root = self._checkout(sha, recipe_path, tag)
        if self.mode == "attune-run":
            argv = ["run", recipe_path, "--json", "--out", str(out.resolve())]
            if "max_wall_s" in limits:
                argv += ["--max-wall-s", repr(limits["max_wall_s"])]
            if "stop_below_tps" in limits:
                argv += ["--stop-below", repr(limits["stop_below_tps"])]
            from bot.cli import main

            with contextlib.chdir(root), contextlib.redirect_stdout(sys.stderr):
                rc = main(argv)
            if rc not in (0, 3):  # 3: the run failed (oom, invalid, timeout) -- still a record for the report job
                raise AssertionError(f"attune {' '.join(argv)} exited {rc}")
            self._as_checked_out(out / "record.json", sha)
            return
        # cmd_run's call, with the caller's runner object
        from bot.core.recipe import load_recipe
        from bot.core.records import write_record
        from bot.runner import EarlyStop

        recipe = load_recipe(root / recipe_path)
        extra: dict[str, Any] = {}
        if "max_wall_s" in limits:
            extra["max_wall_s"] = limits["max_wall_s"]
        if "stop_below_tps" in limits:
            extra["early_stop"] = EarlyStop(below_tps=limits["stop_below_tps"], after_steps=3)  # --stop-after default
        record = self.runner.run(
            recipe, steps=recipe.bench.steps, out_dir=out, recipe_path=str(root / recipe_path), **extra
        )
        write_record(record.model_copy(update={"recipe_path": recipe_path}), out / "record.json")
        self._as_checked_out(out / "record.json", sha)

    @staticmethod
    def _as_checked_out(path: Path, sha: str) -> None:
        """The record's commit as the runner's checkout of exactly ``sha`` gives it (this stand-in checkout is not a git
        repository; the report job checks the commit against the dispatched sha)."""
        from bot.core.records import RunRecord, write_record

        record = RunRecord.model_validate_json(path.read_text())
        write_record(record.model_copy(update={"git_commit": sha}), path)

    def _calibrate(self, inputs: dict[str, str], out: Path) -> None:
        """``attune github calibrate`` on the records branch (real recipes; a simulated one is never dispatched)."""
        from bot.campaign.gate_calls import calibrate_loss_band
        from bot.core.records import RunRecord, atomic_write_text
        from bot.github.github_ports import records_branch

        cid = inputs["campaign"]
        branch = records_branch(cid)
        text = self.gh.file(f"campaigns/{cid}/baseline-recipe.yaml", branch)
        reference = RunRecord.model_validate_json(self.gh.file(f"campaigns/{cid}/baseline-1.json", branch))
        event = calibrate_loss_band(text, reference, cache_dir=self.work / "calibration-cache")
        atomic_write_text(out / "calibrated.json", event.model_dump_json(indent=1) + "\n")


class GitHubCampaign:
    """One campaign on the fake, from the issue form to the last answered dispatch."""

    def __init__(
        self,
        gh: Any,
        recipe_path: str,
        recipe_text: str,
        budget: float,
        work: Path,
        *,
        policy: str = "heuristic",
        user: str = "alice",
        answerer: dict[str, Any] | None = None,
        driver_kw: dict[str, Any] | None = None,
        measurement: dict[str, Any] | None = None,
    ) -> None:
        from bot.forge.github import GitHubForge

        self.gh, self.path, self.budget, self.user = gh, recipe_path, budget, user
        gh.seed({recipe_path: recipe_text})
        gh.workflows.update({TRIAL_WORKFLOW, "leaderboard.yml"})
        gh.permissions[user] = "write"
        self.forge = GitHubForge(
            gh.full_name,
            TOKEN,
            seconds_between_requests=None,
            seconds_between_writes=None,
            retry=None,
            bot_login=gh.actor,
        )
        self.issue = gh.add_issue(
            "tune it",
            issue_form(recipe_path, min(budget, FORM_BUDGET_MAX), policy),
            user=user,
            labels=["attune:campaign"],
        )
        self.driver_kw = dict(driver_kw or {})
        self.measurement = measurement  # Campaign measurement fields for the request (default: GitHub's own)
        self.answerer = DispatchAnswerer(gh, self.forge, work, driver_kw=self.driver_kw, **(answerer or {}))

    def start(self) -> str:
        from bot.github import campaign_requests

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
        said = campaign_requests.handle(self.forge, payload, measurement=self.measurement, **self.driver_kw)
        left = round(self.budget - min(self.budget, FORM_BUDGET_MAX), 6)
        while left > 0:  # the form takes at most 500 device-hours: the rest comes as /attune budget +H comments
            add = min(left, FORM_BUDGET_MAX)
            self.command(f"/attune budget +{_number(add)}")
            left = round(left - add, 6)
        return said

    def command(self, body: str) -> str:
        from bot.github.comments import handle as handle_comment

        cid = self.gh.add_comment(self.issue, body, user=self.user)
        return handle_comment(
            self.forge,
            {
                "action": "created",
                "issue": {"number": self.issue},
                "comment": {"id": cid, "body": body, "user": {"login": self.user}},
            },
        )

    def run(self) -> Any:
        said = self.start()
        assert said.endswith("started"), said
        self.answerer.drain()
        return self.state()

    def state(self) -> Any:
        from bot.github.github_ports import load_state

        stored = load_state(self.forge, self.issue)
        assert stored is not None, f"no campaign state on issue #{self.issue}"
        return stored.campaign


def dumps(obj: Any) -> str:
    return json.dumps(obj, indent=1, default=str)
