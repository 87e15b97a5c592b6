"""The enabled change (an obligation): after an enabler passed the gate, the change it enables."""

from __future__ import annotations

from bot.agent.heuristic.constants import POLICY
from bot.agent.heuristic.move import Context
from bot.agent.history import chain_root, enabled_settings, enabled_why, is_probe, last_step_trial
from bot.agent.policy import LeverSpace, base_levers, validate_change
from bot.agent.space import layout_problem
from bot.core import levers as catalog
from bot.core.records import MEASURED_OUTCOMES, Change
from bot.core.state import Campaign


def enabled_change(campaign: Campaign, space: LeverSpace) -> Change | None:
    """The last step was an enabler that ran: now the change it enables, stacked on it unless it was kept."""
    last, trial = last_step_trial(campaign)
    enables = enabled_settings(last.change) if last else []
    if last is None or not enables:
        return None
    # an enabler is gated, not run (records from before that rule: it ran)
    ready = (
        (last.config_verdict is not None and last.config_verdict.ok)
        if last.change.enabler
        else (trial is not None and trial.outcome in MEASURED_OUTCOMES)
    )
    if not ready:
        return None
    (lever, value), rest = (enables[0].lever, enables[0].value), enables[1:]
    cur = catalog.effective(base_levers(campaign, last.change) if not last.kept else campaign.incumbent_levers)
    why = enabled_why(campaign, last)
    if rest:  # the first link of a two-link chain: the change it enables is the gated enabler of the second
        why = f"enabler of {', then '.join(f'{s.lever}={s.value}' for s in rest)}: {why}"
    change = Change(
        lever=lever,
        before=cur.get(lever),
        after=value,
        lessons=last.change.lessons,
        policy=POLICY,
        why=why,
        stacked_on=None if last.kept else last.n,
        enabler=bool(rest),
        enables=rest,
        probe=is_probe(chain_root(campaign, last).change),
    )  # its why carries the chain's first reason
    if validate_change(campaign, change, space) is not None:
        return None
    if layout_problem(space.recipe, base_levers(campaign, change) | {lever: value}) is not None:
        return None
    return change


class EnabledChange:
    """The last step was an enabler that passed the gate: the change it enables, stacked on it."""

    id = "enabled-change"
    lessons: tuple[str, ...] = ()
    obligation = True

    def propose(self, ctx: Context) -> Change | None:
        return enabled_change(ctx.campaign, ctx.space)
