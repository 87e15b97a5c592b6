"""The line search: after a large kept gain, the next notch along the lever (or coupling) that paid."""

from __future__ import annotations

from bot.agent.heuristic.checked import checked
from bot.agent.heuristic.constants import COMM_FRAC, DEGREES, POLICY
from bot.agent.heuristic.move import Context
from bot.agent.heuristic.screens import screened
from bot.agent.history import (
    MOMENTUM_GAIN,
    already_stepped,
    chain_steps,
    enabled_settings,
    last_step_trial,
    tried_from_incumbent,
)
from bot.agent.layout_moves import (
    next_notch,
)
from bot.agent.policy import LeverSpace, validate_change
from bot.agent.space import layout_problem
from bot.core import levers as catalog
from bot.core.diagnosis import Diagnosis
from bot.core.records import Change, Setting
from bot.core.state import Campaign


def keep_going(campaign: Campaign, space: LeverSpace, incumbent: Diagnosis | None = None) -> Change | None:
    """The last step was kept with a gain of MOMENTUM_GAIN or more on a numeric lever: its next notch the same way (a
    line search along what paid); where that has no legal notch and the kept change was enabled by a parallel
    degree, the same coupling one notch further, while the incumbent spends COMM_FRAC of its step in exposed
    communication."""
    last, trial = last_step_trial(campaign)
    if (
        last is None
        or not last.kept
        or campaign.incumbent_step != last.n
        or last.gain is None
        or last.gain < MOMENTUM_GAIN
    ):
        return None
    # the kept step's own lever first; then, where that has no legal next notch and the kept change was enabled by
    # a parallel degree (PP 1 -> 2 as the gated enabler of local batch 2 -> 4, kept together), the same coupling
    # one notch further: the degree's next notch as the enabler of the kept lever's (PP 2 -> 4 for local batch 8),
    # while the incumbent still spends COMM_FRAC of its step in exposed communication -- what halving the DP
    # ranks again removes (the measurements: docs/agent-moves.md)
    chain = [campaign.step(n).change for n in chain_steps(campaign, last.n)]
    top, tried = chain[0], tried_from_incumbent(campaign)
    notch = next_notch(space.values.get(top.lever, []), top.before, top.after)
    if notch is None:
        return None
    if (top.lever, str(notch)) not in tried:
        why = f"step {last.n} ({last.change.title()}) gained {last.gain:+.1%}: one notch further along the same lever (a line search along what paid)"
        change = checked(campaign, space, top.lever, notch, why, list(last.change.lessons))
        if change is not None:
            return change
    comm = incumbent.breakdown.get("exposed_comm", 0.0) if incumbent is not None and incumbent.outcome == "ok" else 0.0
    if comm < COMM_FRAC:
        return None  # a degree that halves the DP ranks again pays for the communication it removes: little is left
    cur = catalog.effective(campaign.incumbent_levers)
    for c in chain[1:]:
        enables = enabled_settings(c) if c.enabler else []
        degree = next_notch(space.values.get(c.lever, []), c.before, c.after)
        if c.lever not in DEGREES or not enables or enables[0].lever != top.lever or degree is None:
            continue
        enabled = {**campaign.incumbent_levers, c.lever: degree, top.lever: notch}
        if (
            layout_problem(space.recipe, {**campaign.incumbent_levers, c.lever: degree})
            or layout_problem(space.recipe, enabled)
            or already_stepped(campaign, enabled)
        ):
            continue
        change = Change(
            lever=c.lever,
            before=cur.get(c.lever),
            after=degree,
            lessons=list(last.change.lessons),
            policy=POLICY,
            enabler=True,
            enables=[Setting(lever=top.lever, value=notch)],
            why=f"enabler of {top.lever}={notch}: step {last.n} ({last.change.title()}, enabled by "
            f"{c.title()}) gained {last.gain:+.1%}; the same coupling one notch further along both (a line search along what paid)",
        )
        if validate_change(campaign, change, space) is None:
            return change
    return None


class KeepGoing:
    """The last step was kept with a large gain: the next notch the same way (:func:`keep_going`), speed-screened."""

    id = "keep-going"
    lessons: tuple[str, ...] = ()
    obligation = False

    def propose(self, ctx: Context) -> Change | None:
        return screened(ctx.campaign, ctx.space, keep_going(ctx.campaign, ctx.space, ctx.incumbent))
