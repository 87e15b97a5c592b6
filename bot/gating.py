"""How a campaign calls the correctness gate (package ``gate``) for each kind of recipe.

Real recipes go through torchtitan's resolved config (``gate.config_check``) and the loss-curve
check (``gate.convergence``). Simulated recipes have no torchtitan config to resolve: their
config stage classifies the changed levers by the lever catalog's tiers, and their modelled loss
curves go through the same convergence check.
"""

from __future__ import annotations

from bot import levers as catalog
from bot.recipe import Recipe
from bot.records import CheckResult, RunRecord, Verdict

TIER_ORDER = "BRNX"


def catalog_verdict(baseline: Recipe, candidate: Recipe) -> Verdict:
    """Config stage for simulated recipes: pins unchanged, tiers from the lever catalog."""
    reasons: list[str] = []
    tier = "B"
    precision = False
    for key in sorted(set(baseline.pinned) | set(candidate.pinned)):
        if baseline.pinned.get(key) != candidate.pinned.get(key):
            reasons.append(f"pinned {key} changed: {baseline.pinned.get(key)!r} -> {candidate.pinned.get(key)!r} (rule: the objective is pinned)")
            tier = "X"
    before, after = catalog.effective(baseline.levers), catalog.effective(candidate.levers)
    for key in sorted(k for k in after if before.get(k) != after.get(k)):
        lever = catalog.get(key)
        t = lever.tier_of(after[key])
        tier = max(tier, t, key=TIER_ORDER.index)
        if lever.precision or t == "N":
            precision = True
            reasons.append(f"{key} changed {before.get(key)!r} -> {after[key]!r}: a precision change is never a plain pass (policy: reject)")
        elif t == "X":
            reasons.append(f"{key} changed {before.get(key)!r} -> {after[key]!r}: objective-changing (tier X)")
    ok = not reasons
    return Verdict(verdict="ok" if ok else "reject", stage="config", tier=tier, reasons=reasons or [f"changed levers are tier {tier} (lever catalog)"],
                   checks=[CheckResult(name="catalog-tiers", passed=ok, reasons=reasons)], precision_change=precision)


def config_gate(baseline: Recipe, candidate: Recipe) -> Verdict:
    if candidate.cluster.launcher == "sim":
        return catalog_verdict(baseline, candidate)
    from gate.config_check import check_config

    return check_config(baseline, candidate)


GATE_STEPS = 20  # the gate's comparison window (gate.convergence's default)


def convergence_gate(baseline: RunRecord, candidate: RunRecord, tier: str) -> Verdict:
    from gate.convergence import check_convergence

    # a benchmark shorter than the window is compared over the steps it has (else the gate refuses the baseline)
    steps = min(GATE_STEPS, max((s.step for s in baseline.steps), default=GATE_STEPS))
    return check_convergence(baseline, candidate, tier=tier, band=None, steps=steps)
