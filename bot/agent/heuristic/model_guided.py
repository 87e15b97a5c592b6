"""The one-lever neighbour the cost model predicts saves the most step time, once the lessons have nothing left.

On a GPU recipe whose model and accelerator the cost model knows: each lever's nearest values (as exploration would
try them), screened for memory, scored by the predicted share of the step saved; the best is proposed when it clears
the larger of the minimum worthwhile gain and the model's error on this campaign's kept steps. Not on a CPU host."""

from __future__ import annotations

from bot.agent.heuristic.checked import checked
from bot.agent.heuristic.explore import neighbours
from bot.agent.heuristic.move import Context
from bot.agent.heuristic.scorer import credibility, model_saving
from bot.agent.history import oom_dominated, tried_from_incumbent, undoes_a_kept_step
from bot.agent.layout_jump import MIN_SAVING
from bot.agent.memory_screen import change_levers, predicted_oom
from bot.core import levers as catalog
from bot.core.records import Change, Scalar


class ModelGuided:
    """The cost model's best one-lever step from the incumbent (see the module)."""

    id = "model-guided"
    lessons: tuple[str, ...] = ()
    obligation = False

    def propose(self, ctx: Context) -> Change | None:
        campaign, space = ctx.campaign, ctx.space
        here = catalog.effective(campaign.incumbent_levers)
        # the predicted saving must clear the model's error on one layout, less as it reproduced the kept steps
        floor = max(campaign.min_gain, MIN_SAVING * (1.5 - credibility(campaign, space)))
        tried = tried_from_incumbent(campaign)
        moot = ctx.moot | {k for k in space.values if catalog.inert(campaign.incumbent_levers, k)}
        ranked: list[tuple[float, str, Scalar]] = []
        for lever in space.values:
            if lever in moot:
                continue
            for value in neighbours(campaign, space, lever, here.get(lever)):
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
            why = (
                f"the cost model predicts this saves {saving:.0%} of the step, the most of any one-lever neighbour left"
            )
            change = checked(campaign, space, lever, value, why, [], ctx.incumbent)
            if change is None or change.enabler:
                continue
            if predicted_oom(campaign, change_levers(campaign, change), change.stacked_on, space, ctx.records) is None:
                return change
        return None


TRIES = 3  # the best predicted neighbours checked for legality and memory before the move gives up
