"""Measure the change the memory screen ruled out, once, before a campaign with a gain in hand stops early."""

from __future__ import annotations

from bot.agent.heuristic.constants import POLICY, SCREEN_CHECK_RUNS
from bot.agent.heuristic.move import Context
from bot.agent.history import oom_dominated, undoes_a_kept_step
from bot.agent.memory_screen import MARGIN, SCREEN_CHECK_LESSON, change_levers, checks_the_screen, predicted_peak
from bot.agent.policy import validate_change
from bot.agent.space import layout_problem
from bot.core.records import Change


class ScreenCheck:
    """Nothing but the patience stop or blind probes is left, a gain is in hand and SCREEN_CHECK_RUNS runs of the
    budget are unspent: run, once per campaign, the change the memory screen ruled out whose predicted peak lies
    nearest the device's memory (re-applied to the incumbent). The screen is a model's ratio; a run measures."""

    id = "screen-check"
    lessons: tuple[str, ...] = (SCREEN_CHECK_LESSON,)
    obligation = False

    def propose(self, ctx: Context) -> Change | None:
        campaign, space = ctx.campaign, ctx.space
        if campaign.incumbent_step == 0 or any(checks_the_screen(s.change) for s in campaign.steps):
            return None
        left = campaign.budget - campaign.spent
        if left < SCREEN_CHECK_RUNS * campaign.expected_run_cost():
            return None
        offers: list[tuple[float, Change, str]] = []
        seen: set[tuple[str, str]] = set()
        for st in campaign.steps:
            c = st.change
            key = (c.lever, repr(c.after))
            if not c.predicted_oom or key in seen or ctx.current.get(c.lever) == c.after:
                continue
            seen.add(key)
            if oom_dominated(campaign, c.lever, c.after, measured_only=True) or undoes_a_kept_step(
                campaign, c.lever, c.after
            ):
                continue
            change = Change(
                lever=c.lever,
                before=ctx.current.get(c.lever),
                after=c.after,
                lessons=[SCREEN_CHECK_LESSON],
                policy=POLICY,
            )
            if validate_change(campaign, change, space, reopen_screened=True) is not None or layout_problem(
                space.recipe, {**campaign.incumbent_levers, c.lever: c.after}
            ):
                continue
            pred = predicted_peak(campaign, change_levers(campaign, change), None, space, ctx.records)
            if pred is None or pred.predicted <= pred.capacity * (1.0 + MARGIN):
                continue  # the screen would let it through now: what other moves left is not the screen's doing
            why = (
                f"the memory screen rules this out, predicting {pred.predicted:.0f} GiB (the measured "
                f"{pred.measured:.0f} GiB x the memory model's {pred.ratio:.2f}) of the device's {pred.capacity:.0f} "
                f"GiB; nothing else is left and {left / campaign.budget:.0%} of the budget is unspent: one run "
                "measures what the model only predicted"
            )
            offers.append((pred.predicted / pred.capacity, change, why))
        if not offers:
            return None
        _, change, why = min(offers, key=lambda t: t[0])
        return change.model_copy(update={"why": why})
