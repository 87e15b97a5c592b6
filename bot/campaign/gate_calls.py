"""How a campaign calls the correctness gate (package ``gate``) for each kind of recipe.

Real recipes go through torchtitan's resolved config (``gate.config_check``) and the loss-curve
check (``gate.convergence``). Simulated recipes have no torchtitan config to resolve: their
config stage classifies the changed levers by the lever catalog's tiers, and their modelled loss
curves go through the same convergence check.

The convergence stage compares reduction-order (tier R) and numerics (tier N) changes within a
loss-curve noise band calibrated once per campaign (:func:`calibrate_loss_band`): for a real
recipe from real calibration runs (``gate.calibration``; cached by content, so a second campaign
on the same recipe and stack reuses them at no device cost); for a simulated recipe from the
simulator's modelled reduction-order drift (no runs, labelled simulated).
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bot.core import levers as catalog
from bot.core.recipe import Recipe, parse_recipe_text
from bot.core.records import CheckResult, RunRecord, StepMetric, Verdict, read_record, write_record
from bot.core.state import Calibrated
from gate.convergence import LossBand

TIER_ORDER = "BRNX"


def catalog_verdict(baseline: Recipe, candidate: Recipe) -> Verdict:
    """Config stage for simulated recipes: pins unchanged, tiers from the lever catalog."""
    reasons: list[str] = []
    tier = "B"
    precision = False
    for key in sorted(set(baseline.pinned) | set(candidate.pinned)):
        if baseline.pinned.get(key) != candidate.pinned.get(key):
            reasons.append(
                f"pinned {key} changed: {baseline.pinned.get(key)!r} -> {candidate.pinned.get(key)!r} (rule: the objective is pinned)"
            )
            tier = "X"
    before, after = catalog.effective(baseline.levers), catalog.effective(candidate.levers)
    for key in sorted(k for k in after if before.get(k) != after.get(k)):
        lever = catalog.get(key)
        t = lever.tier_of(after[key])
        tier = max(tier, t, key=TIER_ORDER.index)
        if lever.precision or t == "N":
            precision = True
            reasons.append(
                f"{key} changed {before.get(key)!r} -> {after[key]!r}: a precision change is never a plain pass (policy: reject)"
            )
        elif t == "X":
            reasons.append(f"{key} changed {before.get(key)!r} -> {after[key]!r}: objective-changing (tier X)")
    ok = not reasons
    return Verdict(
        verdict="ok" if ok else "reject",
        stage="config",
        tier=tier,
        reasons=reasons or [f"changed levers are tier {tier} (lever catalog)"],
        checks=[CheckResult(name="catalog-tiers", passed=ok, reasons=reasons)],
        precision_change=precision,
    )


def config_gate(baseline: Recipe, candidate: Recipe) -> Verdict:
    if candidate.cluster.launcher == "sim":
        return catalog_verdict(baseline, candidate)
    from gate.config_check import check_config

    return check_config(baseline, candidate)


GATE_STEPS = 20  # the gate's comparison window (gate.convergence's default)


def gate_steps(baseline: RunRecord) -> int:
    """The comparison window: a benchmark shorter than :data:`GATE_STEPS` is compared over the steps it has."""
    return min(GATE_STEPS, max((s.step for s in baseline.steps), default=GATE_STEPS))


def convergence_gate(baseline: RunRecord, candidate: RunRecord, tier: str, band: LossBand | None = None) -> Verdict:
    from gate.convergence import check_convergence
    from gate.errors import GateInputError

    try:
        return check_convergence(baseline, candidate, tier=tier, band=band, steps=gate_steps(baseline))
    except GateInputError as exc:  # the baseline or band cannot serve: fail closed, say why
        reason = f"the gate could not compare the curves: {exc} (fail closed)"
        return Verdict(
            verdict="reject",
            stage="convergence",
            tier=tier,
            reasons=[reason],
            checks=[CheckResult(name="convergence", passed=False, reasons=[reason])],
        )


SIM_DRIFT_RUNS = 3  # modelled reduction-order perturbations a simulated band is calibrated on


def _sim_band(recipe: Recipe, reference: RunRecord) -> tuple[LossBand, str]:
    from bot.sim.models import model_label
    from bot.sim.noise import sim_loss_curve
    from gate.convergence import calibrate_band

    p = recipe.pinned
    n = gate_steps(reference)
    runs = []
    for k in range(1, SIM_DRIFT_RUNS + 1):
        loss = sim_loss_curve(
            n,
            int(p.get("debug.seed", 0)),
            model=model_label(recipe.workload),
            global_batch_size=int(p["training.global_batch_size"]),
            seq_len=int(p["training.seq_len"]),
            lr=float(p["optimizer.lr"]),
            warmup_steps=int(p.get("lr_scheduler.warmup_steps", 0)),
            total_steps=int(p["lr_scheduler.total_steps"]),
            perturbation=k,
        )
        steps = [StepMetric(step=i + 1, loss=float(loss[i])) for i in range(n)]
        runs.append(reference.model_copy(update={"run_id": f"{reference.run_id}-drift{k}", "steps": steps}))
    labels = [f"modelled reduction-order drift {k} (simulated)" for k in range(1, SIM_DRIFT_RUNS + 1)]
    band = calibrate_band(runs, reference, labels=labels)
    return (
        band,
        f"SIMULATED loss band: modelled reduction-order drift ({SIM_DRIFT_RUNS} perturbations), safety {band.safety:g}; no runs",
    )


def calibration_plan(recipe_text: str, reference: RunRecord, workdir: Path | None = None) -> dict[str, Any]:
    """The calibration runs of a campaign's baseline (run id -> ``gate.runs.RunSpec``); ``workdir``: the recipe's
    repository root, where their ranks start (default: where they are run from)."""
    from gate.calibration import calibration_specs

    return calibration_specs(
        recipe_text,
        steps=gate_steps(reference),
        env={},
        label="baseline",
        workdir=str(workdir) if workdir is not None else None,
    )


def fresh_calibration_runs(recipe_text: str, recipe: Recipe, cache_dir: Path, *, baseline_repeats: int = 0) -> int:
    """How many runs a campaign's calibration of this recipe will make (those not in ``cache_dir``): none for a
    simulated recipe (its band is modelled). Its baseline's first run runs ``bench.steps``: the window is known.
    ``baseline_repeats``: the baseline runs besides the first the calibration is given (:func:`baseline_repeat`)."""
    if recipe.cluster.launcher == "sim":
        return 0
    from gate.calibration import calibration_specs
    from gate.runs import lookup

    specs = calibration_specs(recipe_text, steps=min(GATE_STEPS, recipe.bench.steps), env={}, label="baseline")
    if baseline_repeats > 0:
        specs.pop(REPEAT, None)
    if not (Path(cache_dir) / "runs").is_dir():  # nothing cached (and no need to fingerprint the stack to know it)
        return len(specs)
    return sum(1 for spec in specs.values() if lookup(spec, Path(cache_dir)) is None)


REPEAT = "cal:repeat"  # the calibration's run of the baseline recipe once more


def baseline_repeat(specs: dict[str, Any], reference: RunRecord, repeats: list[RunRecord]) -> dict[str, RunRecord]:
    """The calibration's repeat, where the campaign has already made it: another ok run of the reference's recipe,
    seed checkpoint and length, with no hook (``{REPEAT: record}``; empty where there is none)."""
    spec = specs.get(REPEAT)
    if spec is None:
        return {}
    for run in repeats:
        if (
            run.outcome == "ok"
            and run.run_id != reference.run_id
            and run.recipe_hash == reference.recipe_hash
            and run.seed_checkpoint == reference.seed_checkpoint
            and run.hook is None
            and {s.step for s in run.steps} >= set(range(1, spec.steps + 1))
        ):
            return {REPEAT: run}
    return {}


def band_from_runs(
    specs: dict[str, Any], records: dict[str, RunRecord], reference: RunRecord, *, spent: float, where: str = ""
) -> Calibrated:
    """The loss band from the calibration runs' records (every spec needs an ok record), with what they cost."""
    from gate.convergence import calibrate_band
    from gate.errors import GateInputError

    missing = [specs[sid].label for sid in specs if sid not in records]
    if missing:
        return Calibrated(
            device_hours=spent,
            note=f"no loss band: calibration runs missing ({'; '.join(missing)}); tier-R/N steps fail closed",
        )
    failed = [f"{specs[sid].label}: {records[sid].outcome}" for sid in specs if records[sid].outcome != "ok"]
    if failed:
        return Calibrated(
            device_hours=spent,
            note=f"no loss band: calibration runs failed ({'; '.join(failed)}); tier-R/N steps fail closed",
        )
    try:
        band = calibrate_band([records[sid] for sid in specs], reference, labels=[specs[sid].label for sid in specs])
    except GateInputError as exc:
        return Calibrated(device_hours=spent, note=f"no loss band: {exc}; tier-R/N steps fail closed")
    note = (
        f"loss band calibrated on {len(specs)} runs ({', '.join(specs[sid].label for sid in specs)}) against baseline run "
        f"{reference.run_id}, safety {band.safety:g}{where}"
    )
    return Calibrated(band=band, device_hours=spent, note=note)


def record_name(sid: str) -> str:
    """The file name a calibration run's record is uploaded under (``cal:repeat`` -> ``cal-repeat.json``)."""
    return sid.replace(":", "-") + ".json"


def calibrate_loss_band(
    recipe_text: str,
    reference: RunRecord,
    *,
    cache_dir: Path,
    jobs: int = 2,
    progress: Any = None,
    records_out: Path | None = None,
    max_wall_s: float | None = None,
    workdir: Path | None = None,
    repeats: list[RunRecord] | None = None,
) -> Calibrated:
    """The gate's loss band for a campaign's baseline ``reference``, with the device-hours it cost and a note.

    Real recipes: the calibration runs of ``gate.calibration`` (a repeat, an init perturbation, a
    gradient-accumulation split, another loss chunking), each compared with the campaign's own
    baseline run; runs already in ``cache_dir`` are reused and cost nothing. A calibration that
    cannot be made returns no band, and tier-R/N steps then fail closed. ``records_out``: where the
    calibration runs' records are also written (a self-hosted runner uploads them; the report job
    recomputes the band from them, :func:`band_from_runs`). ``max_wall_s``: the campaign's budget cap (what is
    left, in wall seconds on the recipe's devices), shared equally by the fresh runs, each stopped at its share.
    ``repeats``: the campaign's other baseline runs; one of them is the calibration's repeat (:func:`baseline_repeat`).
    """
    from gate.runs import lookup, run_many

    recipe = parse_recipe_text(recipe_text, reference.recipe_path or reference.recipe_id)
    if reference.simulated or recipe.cluster.launcher == "sim":
        band, note = _sim_band(recipe, reference)
        return Calibrated(band=band, note=note)
    specs = calibration_plan(recipe_text, reference, workdir)
    given = baseline_repeat(specs, reference, repeats or [])
    fresh = [sid for sid, spec in specs.items() if sid not in given and lookup(spec, cache_dir) is None]
    if (
        max_wall_s is not None and fresh
    ):  # the budget cap, shared: the fresh runs together never pass it, however many run at once
        share = max_wall_s / len(fresh)
        specs = {
            sid: spec.model_copy(update={"max_wall_s": share}) if sid in fresh else spec for sid, spec in specs.items()
        }
    try:
        made = run_many(
            {sid: spec for sid, spec in specs.items() if sid not in given}, cache_dir, jobs=jobs, progress=progress
        )
    except RuntimeError as exc:
        return Calibrated(
            device_hours=_spent_on([specs[sid] for sid in fresh], cache_dir),
            note=f"no loss band: a calibration run failed ({exc}); tier-R/N steps fail closed",
        )
    records = {**made, **given}
    if records_out is not None:
        for sid, record in records.items():
            write_record(record, Path(records_out) / record_name(sid))
    spent = sum(records[sid].summary.device_hours for sid in fresh)
    return band_from_runs(
        specs,
        records,
        reference,
        spent=spent,
        where=f"; {len(fresh)} run now, {len(specs) - len(fresh) - len(given)} reused from {cache_dir}"
        + ("; the repeat is a baseline run" if given else ""),
    )


def _spent_on(specs: list[Any], cache_dir: Path) -> float:
    """Device-hours of the runs of ``specs`` that left a record (ok, or failed: kept aside) before one failed; a failed
    record left by an earlier campaign counts too (over, never under, what was spent)."""
    from gate.runs import cached_path

    spent = 0.0
    for spec in specs:
        path = cached_path(spec, cache_dir)
        where = next((p for p in (path, Path(cache_dir) / "failed" / path.name) if p.is_file()), None)
        if where is not None:
            with contextlib.suppress(OSError, ValueError):
                spent += read_record(where).summary.device_hours
    return spent


def make_calibrator(
    cache_dir: Path, *, jobs: int = 1, progress: Any = None, workdir: Path | None = None
) -> Callable[[str, RunRecord], Calibrated]:
    """The driver's ``calibrate`` callable: :func:`calibrate_loss_band` with its cache, parallelism and the recipe's
    repository root (where the calibration runs' ranks start) fixed."""
    return functools.partial(
        calibrate_loss_band, cache_dir=Path(cache_dir), jobs=jobs, progress=progress, workdir=workdir
    )
