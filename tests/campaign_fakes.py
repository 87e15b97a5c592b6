"""Test doubles for campaign tests: a table-driven fake runner, scripted policy, gate callables,
a tmp git repository holding the shipped CPU recipe, and an executor factory (local ports)."""

from __future__ import annotations

import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bot import campaign as cm
from bot.agent import LeverSpace
from bot.agent.space import search_space
from bot.campaign.gate_calls import catalog_verdict
from bot.core import levers as catalog
from bot.core.recipe import Recipe, parse_recipe_text, set_lever_text
from bot.core.records import (
    Change,
    LaunchShape,
    RunRecord,
    RunSummary,
    Scalar,
    StackFingerprint,
    StepMetric,
    Stop,
    Verdict,
    content_hash,
)
from bot.drive.executor import Executor
from bot.drive.local_ports import FileRecordStore, FileStateStore, LocalRunPort

REPO = Path(__file__).resolve().parents[1]
CPU_RECIPE = REPO / "recipes" / "llama3-tiny" / "cpu.yaml"
RECIPE_REL = "recipes/llama3-tiny/cpu.yaml"

# rule(effective levers, nth measurement of that configuration) -> (outcome, tps)
Rule = Callable[[dict[str, Scalar], int], tuple[str, float | None]]


def make_record(
    recipe: Recipe,
    outcome: str,
    tps: float | None,
    cost: float,
    *,
    n_steps: int = 10,
    simulated: bool = False,
    run_id: str = "r0",
    losses: list[float] | None = None,
) -> RunRecord:
    losses = losses if losses is not None else [4.0 - 0.1 * i for i in range(n_steps)]
    steps = (
        []
        if outcome != "ok"
        else [StepMetric(step=i + 1, loss=loss, grad_norm=1.0, tps=tps) for i, loss in enumerate(losses)]
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
        launch=LaunchShape(launcher="local", nodes=1, devices_per_node=1, world_size=recipe.devices),
        outcome=outcome,
        reason="" if outcome == "ok" else f"fake {outcome}",
        steps=steps,
        summary=RunSummary(
            steps_completed=len(steps),
            tps_median=tps if outcome == "ok" else None,
            tps_cv=0.01 if outcome == "ok" else None,
            wall_s=cost * 3600 / recipe.devices,
            device_hours=cost,
        ),
        usd_per_device_hour=recipe.cluster.usd_per_device_hour,
        simulated=simulated,
    )


class FakeRunner:
    """A runner whose outcome and tokens/s come from ``rule`` and whose cost comes from ``costs``."""

    def __init__(
        self, rule: Rule, *, cost: float | Callable[[int], float] = 0.01, on_run: Callable[[Path], None] | None = None
    ) -> None:
        self.rule = rule
        self.cost = cost
        self.on_run = on_run
        self.calls: list[dict[str, Any]] = []
        self.seen: dict[str, int] = {}

    def run(
        self,
        recipe: Recipe,
        *,
        steps: int | None = None,
        out_dir: Path,
        recipe_path: str | None = None,
        recipe_text: str | None = None,
        max_wall_s: float | None = None,
        early_stop: Any = None,
    ) -> RunRecord:
        if self.on_run:
            self.on_run(Path(out_dir))
        eff = catalog.effective(recipe.levers)
        key = repr(sorted(eff.items()))
        nth = self.seen.get(key, 0)
        self.seen[key] = nth + 1
        outcome, tps = self.rule(eff, nth)
        cost = self.cost(len(self.calls)) if callable(self.cost) else self.cost
        cap = None if max_wall_s is None else max_wall_s * recipe.devices / 3600.0
        if cap is not None and cost > cap:  # a real runner is stopped at the budget cap: so is this one
            outcome, tps, cost = "timeout", None, cap
        stopped = outcome == "ok" and tps is not None and early_stop is not None and tps < early_stop.below_tps
        if stopped:  # a real runner ends a clearly slower trial after a few measured steps: a third of the cost here
            cost /= 3
        self.calls.append(
            {
                "out_dir": str(out_dir),
                "levers": dict(recipe.levers),
                "outcome": outcome,
                "tps": tps,
                "cost": cost,
                "early_stop": early_stop,
            }
        )
        record = make_record(recipe, outcome, tps, cost, run_id=f"run{len(self.calls)}")
        if stopped:
            record = record.model_copy(update={"outcome": "stopped", "reason": "stopped early: fake"})
        return record


class MemoryRecords:
    """A record store of in-memory records, by reference (a ``RecordReader``)."""

    def __init__(self, records: dict[str, RunRecord] | None = None) -> None:
        self.records = dict(records or {})

    def read(self, ref: str) -> RunRecord | None:
        return self.records.get(ref)


def table_rule(table: dict[tuple[tuple[str, Scalar], ...], list[float] | str], base: list[float]) -> Rule:
    """tps per measurement for configurations matching a table key (lever=value pairs), else ``base``."""

    def rule(eff: dict[str, Scalar], nth: int) -> tuple[str, float | None]:
        for key, value in table.items():
            if all(eff.get(k) == v for k, v in key):
                if isinstance(value, str):
                    return value, None
                return "ok", value[min(nth, len(value) - 1)]
        return "ok", base[min(nth, len(base) - 1)]

    return rule


class ScriptedPolicy:
    """Proposes the given changes in order (before = incumbent value), then stops."""

    name = "scripted"

    def __init__(self, changes: list[dict[str, Any]]) -> None:
        self.changes = changes

    def propose(
        self, campaign: cm.Campaign, diagnosis: Any, lessons: Any, levers: LeverSpace, records: Any = None
    ) -> Change | Stop:
        i = len(campaign.steps)
        if i >= len(self.changes):
            return Stop(why="script exhausted", policy=self.name)
        spec = dict(self.changes[i])
        cur = catalog.effective(
            campaign.step(spec["stacked_on"]).levers if spec.get("stacked_on") else campaign.incumbent_levers
        )
        return Change(
            lever=spec["lever"],
            before=cur.get(spec["lever"]),
            after=spec["to"],
            why="scripted",
            policy=self.name,
            stacked_on=spec.get("stacked_on"),
            enabler=spec.get("enabler", False),
            max_device_hours=spec.get("max_device_hours"),
            predicted_oom=spec.get("predicted_oom", ""),
            predicted_slower=spec.get("predicted_slower", ""),
        )


def gate_ok(baseline: Recipe, candidate: Recipe) -> Verdict:
    return catalog_verdict(baseline, candidate)


def make_gate_config(reject: Callable[[Recipe], bool] | None = None) -> Callable[[Recipe, Recipe], Verdict]:
    def gate(baseline: Recipe, candidate: Recipe) -> Verdict:
        if reject and reject(candidate):
            return Verdict(verdict="reject", stage="config", tier="X", reasons=["test: rejected config"])
        return catalog_verdict(baseline, candidate)

    return gate


def make_gate_convergence(reject: Callable[[RunRecord], bool] | None = None) -> Callable[..., Verdict]:
    def gate(baseline: RunRecord, candidate: RunRecord, tier: str, band: Any = None) -> Verdict:
        if reject and reject(candidate):
            return Verdict(verdict="reject", stage="convergence", tier=tier, reasons=["test: loss curve diverged"])
        return Verdict(verdict="ok", stage="convergence", tier=tier, reasons=["test: curves match"])

    return gate


def space_fn(recipe: Recipe) -> LeverSpace:
    return LeverSpace(recipe=recipe, values=search_space(recipe))


def git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=repo, check=True, capture_output=True, text=True).stdout


def recipe_text(**levers: Scalar) -> str:
    text = CPU_RECIPE.read_text()
    for k, v in levers.items():
        text = set_lever_text(text, k.replace("__", "."), v)
    return text


def make_repo(root: Path, text: str | None = None) -> Path:
    """A git repository (branch main) holding the CPU recipe at RECIPE_REL."""
    root.mkdir(parents=True, exist_ok=True)
    git(root, "init", "-q", "-b", "main")
    git(root, "config", "user.name", "attune test")
    git(root, "config", "user.email", "test@localhost")
    git(root, "config", "commit.gpgsign", "false")
    (root / ".gitignore").write_text("/.attune/\n")
    path = root / RECIPE_REL
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text if text is not None else CPU_RECIPE.read_text())
    git(root, "add", "-A")
    git(root, "commit", "-q", "-m", "initial recipe")
    return root


def new_state(text: str, cid: str = "c1", *, budget: float = 1.0, **kw: Any) -> cm.Campaign:
    recipe = parse_recipe_text(text, RECIPE_REL)
    return cm.Campaign(
        id=cid,
        recipe_path=RECIPE_REL,
        recipe_id=recipe.name,
        policy=kw.pop("policy", "scripted"),
        devices=recipe.devices,
        usd_per_device_hour=recipe.cluster.usd_per_device_hour,
        budget=budget,
        baseline_levers=dict(recipe.levers),
        incumbent_levers=dict(recipe.levers),
        **kw,
    )


def make_driver(
    forge: Any,
    runner: Any,
    policy: Any,
    work_dir: Path,
    *,
    states: Any = None,
    gate_config: Any = None,
    gate_convergence: Any = None,
    lessons: list | None = None,
    calibrate: Any = None,
    **kw: Any,
) -> Executor:
    """The one executor with local ports under ``work_dir`` (``states``: a state store standing in for the file one)."""
    records = FileRecordStore(work_dir)
    return Executor(
        forge=forge,
        states=states or FileStateStore(work_dir),
        records=records,
        runs=LocalRunPort(runner, records, calibrate=calibrate),
        policy=policy,
        lessons=lessons or [],
        space_fn=space_fn,
        gate_config=gate_config or gate_ok,
        gate_convergence=gate_convergence or make_gate_convergence(),
        **kw,
    )


def decisions(state: cm.Campaign) -> dict[str, Any]:
    """What a campaign decided, without run ids or paths (comparable across drivers and resumes)."""
    return {
        "phase": state.phase,
        "finish_reason": state.finish_reason,
        "spent": round(state.spent, 9),
        "incumbent_step": state.incumbent_step,
        "incumbent_levers": state.incumbent_levers,
        "incumbent_tps": state.incumbent_tps,
        "band": state.band.band if state.band else None,
        "baseline": [(r.outcome, r.tps) for r in state.baseline],
        "steps": [
            {
                "n": s.n,
                "lever": s.change.lever,
                "to": s.change.after,
                "stacked_on": s.stacked_on,
                "state": s.state,
                "kept": s.kept,
                "gain": s.gain,
                "levers": s.levers,
                "runs": [(r.kind, r.outcome, r.tps) for r in s.runs],
                "close_reason": s.close_reason,
            }
            for s in state.steps
        ],
    }


def play(
    state: cm.Campaign,
    decide: Callable[[cm.Campaign], Change | Stop],
    rule: Rule,
    *,
    cost: float = 0.01,
    config_ok: Callable[[dict[str, Scalar]], bool] = lambda levers: True,
    convergence_ok: Callable[[dict[str, Scalar]], bool] = lambda levers: True,
) -> cm.Campaign:
    """Run the state machine with synthetic events only (no forge, no files): for building campaign histories."""
    seen: dict[str, int] = {}

    def measure(levers: dict[str, Scalar]) -> tuple[str, float | None]:
        eff = catalog.effective(levers)
        key = repr(sorted(eff.items()))
        seen[key] = seen.get(key, 0) + 1
        return rule(eff, seen[key] - 1)

    if not state.pending and state.phase == "baseline" and not state.baseline:
        state, _ = cm.advance(state, cm.CampaignRequested())
    while state.pending:
        a = state.pending[0]
        if isinstance(a, cm.RunBaseline):
            outcome, tps = measure(state.baseline_levers)
            ev: Any = cm.RunFinished(
                run=cm.RunRef(kind="baseline", attempt=a.attempt, outcome=outcome, tps=tps, device_hours=cost)
            )
        elif isinstance(a, cm.RunTrial):
            outcome, tps = measure(state.step(a.n).levers)
            ev = cm.RunFinished(
                run=cm.RunRef(kind="trial", n=a.n, outcome=outcome, tps=tps, device_hours=cost, record=f"{a.n}-trial")
            )
        elif isinstance(a, cm.MeasurePair):
            st = state.step(a.n)
            trial = next(r for r in st.runs if r.kind == "trial")
            inc = measure(state.incumbent_levers)
            cand = (trial.outcome, trial.tps) if a.with_trial else measure(st.levers)
            outcome = "ok" if inc[0] == "ok" and cand[0] == "ok" else "crash"
            ev = cm.RunFinished(
                run=cm.RunRef(
                    kind="pair",
                    n=a.n,
                    attempt=a.k,
                    order=a.order,
                    outcome=outcome,
                    tps=cand[1],
                    reference_tps=inc[1],
                    record=trial.record if a.with_trial else f"{a.n}-{a.k}-b",
                    reference_record=f"{a.n}-{a.k}-a",
                    device_hours=cost * (1 if a.with_trial else 2),
                )
            )
        elif isinstance(a, cm.Propose):
            ev = cm.Proposed(decision=decide(state))
        elif isinstance(a, cm.Calibrate):
            ev = cm.Calibrated(note="test: no band")
        elif isinstance(a, cm.OpenStep):
            ev = cm.StepOpened(n=a.n, branch=f"attune/{state.id}/{a.n}", head_sha=f"sha{a.n}")
        elif isinstance(a, cm.CheckConfig):
            ok = config_ok(state.step(a.n).levers)
            ev = cm.GateVerdict(
                n=a.n,
                verdict=Verdict(
                    verdict="ok" if ok else "reject", stage="config", tier="R", reasons=[] if ok else ["test: rejected"]
                ),
            )
        elif isinstance(a, cm.CheckConvergence):
            ok = convergence_ok(state.step(a.n).levers)
            ev = cm.GateVerdict(n=a.n, verdict=Verdict(verdict="ok" if ok else "reject", stage="convergence", tier="R"))
        elif isinstance(a, cm.Merge):
            ev = cm.StepMerged(n=a.n)
        elif isinstance(a, cm.Close):
            ev = cm.StepClosed(n=a.n)
        else:
            ev = cm.Done()
        state, _ = cm.advance(state, ev)
    return state


def scripted(changes: list[dict[str, Any]]) -> Callable[[cm.Campaign], Change | Stop]:
    policy = ScriptedPolicy(changes)
    return lambda state: policy.propose(state, None, None, None, None)  # type: ignore[arg-type]
