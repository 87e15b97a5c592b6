"""The one-lever change the cost model predicts saves the most step time, once the lessons have nothing left.

On a GPU recipe whose model and accelerator the cost model knows: each lever's values (the neighbours exploration
would try, and for a degree or batch size every legal value further along), screened for memory, scored by the
predicted share of the step saved; the best is proposed when it clears the larger of the minimum worthwhile gain and
the model's error on this campaign's kept steps. Not on a CPU host."""

from __future__ import annotations

from bot.agent.heuristic.checked import checked
from bot.agent.heuristic.explore import neighbours
from bot.agent.heuristic.move import Context
from bot.agent.heuristic.scorer import credibility, model_saving
from bot.agent.history import BATCH_LEVERS, oom_dominated, oom_values, tried_from_incumbent, undoes_a_kept_step
from bot.agent.layout_jump import MIN_SAVING
from bot.agent.memory_screen import change_levers, predicted_oom
from bot.agent.policy import LeverSpace
from bot.core import levers as catalog
from bot.core.records import Change, Scalar
from bot.core.state import Campaign


def reach(campaign: Campaign, space: LeverSpace, lever: str, current: Scalar | None) -> list[Scalar]:
    """The values of ``lever`` the model scores: its exploration neighbours and, for a numeric lever, every value
    beyond them in the same direction (a degree several doublings away; never a batch at or above one that ran out of
    memory)."""
    near = neighbours(campaign, space, lever, current)
    values = list(space.values.get(lever, []))
    numeric = all(isinstance(v, int) and not isinstance(v, bool) for v in values)
    if not near or not numeric or current not in values:
        return near
    here, ints = int(current), [int(v) for v in near]  # numeric: every value is an int
    up = [v for v in values if int(v) > max(ints) > here]  # further only in a direction the neighbours go
    down = [v for v in values if 0 < int(v) < min(ints) < here]
    far = up + down
    if lever in BATCH_LEVERS:
        limit = min((int(v) for v in oom_values(campaign, lever)), default=None)
        far = [v for v in far if limit is None or int(v) < limit]
    return near + far


class ModelGuided:
    """The cost model's best one-lever step from the incumbent (see the module)."""

    id = "model-guided"
    lessons: tuple[str, ...] = ()
    obligation = False

    def propose(self, ctx: Context) -> Change | None:
        return guided_change(ctx)


def guided_change(ctx: Context, bar: float = 1.0) -> Change | None:
    """The move's proposal, its predicted saving ``bar`` times the one it must clear (see the module)."""
    campaign, space = ctx.campaign, ctx.space
    here = catalog.effective(campaign.incumbent_levers)
    # the predicted saving must clear the model's error on one layout, less as it reproduced the kept steps
    floor = bar * max(campaign.min_gain, MIN_SAVING * (1.5 - credibility(campaign, space)))
    tried = tried_from_incumbent(campaign)
    moot = ctx.moot | {k for k in space.values if catalog.inert(campaign.incumbent_levers, k)}
    ranked: list[tuple[float, str, Scalar]] = []
    for lever in space.values:
        if lever in moot:
            continue
        for value in reach(campaign, space, lever, here.get(lever)):
            if (lever, str(value)) in tried or oom_dominated(campaign, lever, value):
                continue
            if undoes_a_kept_step(campaign, lever, value):
                continue
            saving = model_saving(space, here, {**here, lever: value})
            if saving is None:
                return None  # the model cannot tell on this recipe: nothing to guide by
            if saving > floor:
                ranked.append((saving, lever, value))
    for saving, lever, value in sorted(ranked, key=lambda r: -r[0])[:TRIES]:
        why = f"the cost model predicts this saves {saving:.0%} of the step, the most of any one-lever change left"
        change = checked(campaign, space, lever, value, why, [], ctx.incumbent)
        if change is None or change.enabler:
            continue
        if predicted_oom(campaign, change_levers(campaign, change), change.stacked_on, space, ctx.records) is None:
            return change
    return None


TRIES = 3  # the best predicted values checked for legality and memory before the move gives up
PAST_ALLOWANCE_BAR = 3.0  # past the no-gain allowance, only a saving this many times the move's bar is probed


def model_backed_probe(ctx: Context) -> Change | None:
    """No step has gained and the no-gain allowance is spent: one more probe where the cost model predicts a
    one-lever change saves PAST_ALLOWANCE_BAR times what the move must clear; a recipe it sees no such way to improve
    still stops."""
    change = guided_change(ctx, PAST_ALLOWANCE_BAR)
    if change is None:
        return None
    why = f"no step has gained and the no-gain allowance is spent, but {change.why}: one probe past it"
    return change.model_copy(update={"why": why})
