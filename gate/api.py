"""``attune gate``: the whole gate for one candidate recipe against its baseline.

:func:`run_gate` runs the config stage first (a rejection there costs no run), then gets both
run records — given, or made with the local runner through the content-keyed run cache
(:mod:`gate.runs`) — then the convergence stage: bitwise for tier B, the recipe's calibrated noise
band for tier R/N (loaded from the band cache, calibrated when absent or stale). Problems with
the inputs raise :class:`~gate.errors.GateInputError` (or ``RecipeError``): the CLI's exit 2.
:func:`render_verdict` is the plain-text/markdown rendering.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

from bot.core.recipe import RecipeError, parse_recipe_text
from bot.core.records import RunRecord, Verdict, content_hash, read_record
from bot.core.textfile import NotText, read_utf8
from gate.calibration import DEFAULT_CACHE, calibrate, load_band
from gate.config_check import check_config
from gate.convergence import LossBand, baseline_problem, check_convergence
from gate.errors import GateInputError
from gate.runs import RunSpec, run_one


def _read(path: str | Path, what: str) -> str:
    """The recipe's text (its hash is the same whatever its line ends: :func:`bot.core.records.content_hash`); a byte
    that is not UTF-8 is one line."""
    try:
        return read_utf8(path)
    except OSError as exc:
        raise GateInputError(f"{path}: cannot read the {what}: {exc.strerror or exc}") from None
    except NotText as exc:
        raise GateInputError(str(exc)) from None


def _record(path: str | Path, what: str, recipe_text: str, *, allow_hook: bool) -> RunRecord:
    try:
        record = read_record(path)
    except OSError as exc:
        raise GateInputError(f"{path}: cannot read the {what} run record: {exc.strerror or exc}") from None
    except ValueError as exc:  # one line naming the file and its first wrong field, or the byte that is not UTF-8
        raise GateInputError(str(exc)) from None
    if record.recipe_hash != content_hash(recipe_text):
        raise GateInputError(
            f"{path}: the {what} run record was made from another recipe (hash {record.recipe_hash}, recipe {content_hash(recipe_text)})"
        )
    if record.hook and not allow_hook:
        raise GateInputError(f"{path}: the {what} run record was made with the test hook {record.hook!r}")
    return record


def _merge(config: Verdict, conv: Verdict) -> Verdict:
    return Verdict(
        verdict=conv.verdict,
        stage="convergence",
        tier=config.tier,
        reasons=conv.reasons,
        checks=[*config.checks, *conv.checks],
        requires_convergence=True,
        precision_change=config.precision_change,
    )


def run_gate(
    baseline_path: str | Path,
    candidate_path: str | Path,
    *,
    config_only: bool = False,
    baseline_run: str | Path | None = None,
    candidate_run: str | Path | None = None,
    steps: int = 20,
    out_dir: str | Path | None = None,
    precision_tolerance: float | None = None,
    cache_dir: str | Path | None = None,
    calibrate_missing: bool = True,
    jobs: int = 1,
    progress: Callable[[str], None] | None = None,
) -> Verdict:
    """Gate ``candidate_path`` against ``baseline_path`` (see the module docstring).

    ``out_dir`` is unused by the cached runs (their logs live under ``cache_dir/work``); when
    given, the verdict is also written there as ``verdict.json``. ``cache_dir`` defaults to
    ``.attune``. ``calibrate_missing=False`` makes a missing band a rejection (fail closed)
    instead of running the calibration runs.
    """
    cache = Path(cache_dir) if cache_dir is not None else DEFAULT_CACHE
    base_text, cand_text = _read(baseline_path, "baseline recipe"), _read(candidate_path, "candidate recipe")
    try:
        baseline = parse_recipe_text(base_text, str(baseline_path))
        candidate = parse_recipe_text(cand_text, str(candidate_path))
    except RecipeError as exc:
        raise GateInputError(str(exc)) from None
    config = check_config(baseline, candidate, precision_tolerance=precision_tolerance)
    if not config.ok or config_only:
        return _finish(config, out_dir)

    base_spec = RunSpec(
        label=f"baseline {baseline.name}", recipe_text=base_text, steps=steps, recipe_path=str(baseline_path)
    )
    cand_spec = RunSpec(
        label=f"candidate {candidate.name}", recipe_text=cand_text, steps=steps, recipe_path=str(candidate_path)
    )
    if baseline_run:
        base_rec = _record(baseline_run, "baseline", base_text, allow_hook=False)
        problem = baseline_problem(base_rec, steps)
        if problem is not None:  # before anything is run or calibrated, naming the file the user gave
            raise GateInputError(f"{baseline_run}: {problem}")
    else:
        base_rec = run_one(base_spec, cache)
    cand_rec = (
        _record(candidate_run, "candidate", cand_text, allow_hook=True) if candidate_run else run_one(cand_spec, cache)
    )

    band: LossBand | None = load_band(cache, baseline, base_rec.stack.key())
    if config.tier in ("R", "N") and band is None and calibrate_missing:
        band = calibrate(base_text, baseline_spec=base_spec, cache_dir=cache, steps=steps, jobs=jobs, progress=progress)
    if band is not None and config.precision_change and precision_tolerance is not None:
        band = band.widened(precision_tolerance, base_rec)
    conv = check_convergence(base_rec, cand_rec, tier=config.tier, band=band, steps=steps)
    return _finish(_merge(config, conv), out_dir)


def _finish(verdict: Verdict, out_dir: str | Path | None) -> Verdict:
    if out_dir is not None:
        path = Path(out_dir) / "verdict.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(verdict.model_dump_json(indent=1) + "\n")
    return verdict


def verdict_json(verdict: Verdict) -> str:
    """One line of JSON for ``attune gate --json`` (``verdict``, ``stage``, ``tier``, ``reasons`` first)."""
    data = verdict.model_dump(mode="json")
    head = {k: data.pop(k) for k in ("verdict", "stage", "tier", "reasons")}
    return json.dumps({**head, **data}, default=str)


def render_verdict(v: Verdict) -> str:
    """The verdict as plain text (valid markdown): headline, reasons, then each check."""
    head = "PASS" if v.ok else "REJECT"
    lines = [f"**gate: {head}** at the {v.stage} stage (tier {v.tier})"]
    if v.precision_change:
        lines.append("precision change: accepted only under an explicit tolerance" if v.ok else "precision change")
    lines.append("")
    lines += [f"- {r}" for r in v.reasons] or ["- (no reasons)"]
    lines += ["", "checks:"]
    for check in v.checks:
        lines.append(
            f"- [{'x' if check.passed else ' '}] {check.name}"
            + ("" if check.passed else f": {len(check.reasons)} problem(s)")
        )
        if check.name in ("bitwise", "band"):
            for sig in check.evidence.get("signals", []):
                stat = "" if sig.get("statistic") is None else f", max|d|/band {sig['statistic']:.3g}"
                where = (
                    ""
                    if sig.get("worst_step") is None
                    else f", worst step {sig['worst_step']} delta {sig['deviation']:+.3g}"
                )
                lines.append(f"    - {sig['signal']}: {'equal' if sig['equal'] else 'differs'}{where}{stat}")
    return "\n".join(lines) + "\n"
