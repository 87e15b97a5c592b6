"""When the heuristic policy stops without a change: with no gain in hand, once the diagnosis says nothing
measurable can be won or the steps have spent the no-gain allowance (and each proposal carries what is left of
it); with a gain in hand, once patience runs out for blind exploration.

Pure functions of the campaign state and the incumbent's diagnosis; each stop returns the sentence a user reads.
"""

from __future__ import annotations

from bot.agent.history import from_a_blind_probe
from bot.core.diagnosis import Diagnosis
from bot.core.records import MEASURED_OUTCOMES
from bot.core.state import Campaign

PATIENCE = 2
PATIENCE_RUNS = 1.0
NO_GAIN_SHARE = 0.22  # of the budget, spent on steps before the first kept one (the set-up not counted)
MIN_PROBE_RUNS = 2  # runs' device-hours the no-gain allowance is never below
ADDRESSABLE = {"exposed_comm", "bubble", "recompute"}
NO_RECOMPUTE_HEADROOM = 0.05  # the same headroom the less-recompute follow-up asks for (_fix_for)


def patience_stop(campaign: Campaign) -> str | None:
    """Stop before generic exploration once a gain is in hand and, since the last kept step, either PATIENCE
    measured steps found nothing or the steps spent PATIENCE_RUNS baseline runs' device-hours (failed starts and
    coupled retries add up: one blind probe can open a chain of out-of-memory retries): every diagnosis- and
    lesson-driven move is spent, and each further blind probe costs device-hours that delay payback."""
    if campaign.incumbent_step == 0:
        return None
    since = [s for s in campaign.steps if s.n > campaign.incumbent_step]
    # a blind probe that failed found nothing too: a real start that ran out of memory or crashed (a retry of it
    # included), or a probe the memory screen predicted to run out (its free retries are the same probe); and a step
    # the speed screen predicted slower, which stands in for the run that would have measured it
    measured = [
        s
        for s in since
        if s.change.predicted_slower
        or any(
            r.kind == "trial"
            and (
                r.outcome in MEASURED_OUTCOMES
                or (
                    (r.device_hours > 0 or (r.outcome == "oom" and s.stacked_on is None))
                    and from_a_blind_probe(campaign, s.n)
                )
            )
            for r in s.runs
        )
    ]
    run_cost = max((r.device_hours for r in campaign.measured_baseline()), default=0.0)
    spent = sum(r.device_hours for s in since for r in s.runs)
    if len(measured) >= PATIENCE:
        why = f"the last {PATIENCE} measured steps gained nothing"
    elif run_cost > 0 and spent >= PATIENCE_RUNS * run_cost:
        why = f"the steps since the last kept one spent {spent / run_cost:.1f} baseline runs' device-hours and gained nothing"
    else:
        return None
    return (
        f"no diagnosis- or lesson-driven move is left and {why}; keeping the +{campaign.gain:.1%} found rather than "
        "spend more device-hours on blind exploration"
    )


def addressable_share(d: Diagnosis | None) -> float | None:
    """The share of the step a throughput lever can remove, from the incumbent's measured breakdown: exposed
    communication + pipeline bubble + recomputation -- the last only with memory to spare for the activations it
    would keep (headroom >= NO_RECOMPUTE_HEADROOM, or headroom not measured). None without a breakdown that names
    all three."""
    if d is None or d.outcome != "ok" or not set(d.breakdown) >= ADDRESSABLE:
        return None  # e.g. a CPU run's spans (forward-backward, optimizer, data) name none of these costs
    b = d.breakdown
    share = b.get("exposed_comm", 0.0) + b.get("bubble", 0.0)
    if d.mem_headroom_frac is None or d.mem_headroom_frac >= NO_RECOMPUTE_HEADROOM:
        share += b.get("recompute", 0.0)
    return share


def no_gain_stop(campaign: Campaign, incumbent: Diagnosis | None) -> str | None:
    """With no gain in hand, the campaign's probing is bounded by what the diagnosis says can be won.

    (1) The incumbent's addressable share (exposed communication, bubble, recompute with memory to spare) could not
    clear the minimum worthwhile gain even if all were removed: stop before the first step. (2) While no step has been
    kept, no new move starts once the steps (not the set-up) have spent NO_GAIN_SHARE of the budget: a recipe whose
    first moves all fail is most likely at its optimum. Checked before every proposal; each proposal may spend only
    what is left of that allowance (:func:`no_gain_allowance_left`). How the share was chosen: docs/agent-evidence.md."""
    if campaign.incumbent_step != 0 or campaign.band is None:
        return None
    share = addressable_share(incumbent)
    if share is not None and share / max(1.0 - share, 1e-9) < campaign.min_gain:
        return (
            f"nothing measurable to win: the recipe's exposed communication, bubble and usable recompute are "
            f"{share:.1%} of its step, less than the {campaign.min_gain:.1%} minimum worthwhile gain even if all were removed"
        )
    left = no_gain_allowance_left(campaign, incumbent)
    if campaign.steps and left is not None and left < campaign.expected_run_cost():
        n, spent = len(campaign.steps), steps_spent(campaign)
        past = (
            " (a step whose estimate cleared the minimum gain was measured to its decision past it)"
            if spent > no_gain_allowance(campaign, incumbent)
            else ""
        )
        return (
            f"no gain found: {n} step{'s' * (n != 1)} spent {spent / campaign.budget:.0%} of the budget "
            f"and none beat the recipe; {no_gain_allowance_text(campaign, incumbent)}{past}, and less than a run of "
            "it is left: it is most likely at its optimum (keeping it rather than spend more on blind probes)"
        )
    return None


def steps_spent(campaign: Campaign) -> float:
    """Device-hours the campaign's steps spent (their trials and pairs; not the set-up: baseline and calibration)."""
    return sum(r.device_hours for s in campaign.steps for r in s.runs)


def no_gain_allowance(campaign: Campaign, incumbent: Diagnosis | None) -> float:
    """Device-hours the steps may spend in all while no step has been kept: :func:`no_gain_share` of the budget, never
    less than MIN_PROBE_RUNS runs (one probe measured to its first pair: a small budget still tries)."""
    return max(no_gain_share(incumbent) * campaign.budget, MIN_PROBE_RUNS * campaign.expected_run_cost())


def no_gain_allowance_text(campaign: Campaign, incumbent: Diagnosis | None) -> str:
    """The allowance as the stop message states it, e.g. "a recipe with no gain in hand may spend 22% of the budget
    on probes" (with the MIN_PROBE_RUNS floor, when that is larger, named)."""
    allowed, share = no_gain_allowance(campaign, incumbent), no_gain_share(incumbent)
    text = f"a recipe with no gain in hand may spend {allowed / campaign.budget:.0%} of the budget on probes"
    if allowed > share * campaign.budget:
        text += f" ({MIN_PROBE_RUNS} runs' device-hours, more than its {share:.0%} share)"
    return text


def no_gain_share(incumbent: Diagnosis | None) -> float:
    """The share of the budget the steps may spend while no step has been kept: NO_GAIN_SHARE, or the incumbent's
    addressable share when that is smaller -- a recipe whose measured breakdown says levers could remove 9% of its
    step gets 9% of the budget to find it. Without a breakdown that names the costs (a CPU run), NO_GAIN_SHARE."""
    share = addressable_share(incumbent)
    return NO_GAIN_SHARE if share is None else min(NO_GAIN_SHARE, share)


def no_gain_allowance_left(campaign: Campaign, incumbent: Diagnosis | None) -> float | None:
    """Device-hours the steps may still spend while no step has been kept: :func:`no_gain_share` of the budget less
    what the steps spent (their trials and pairs; the baseline and the gate's calibration are the campaign's set-up,
    on a real cluster a large share of a small budget). None once a step was kept (or without a budget): then only
    the budget and patience bound the steps. Each proposal carries what is left as its ``max_device_hours``, so a
    futile last probe cannot overrun it by its pairs: a recipe already at its optimum costs its set-up plus that share."""
    if campaign.incumbent_step != 0 or campaign.budget <= 0:
        return None
    return max(no_gain_allowance(campaign, incumbent) - steps_spent(campaign), 0.0)
