"""The hand-tuning baseline ``greedy``: coordinate descent over the levers, one lever at a time, in a fixed order.

For the current lever each legal value is tried (nearest first, larger before smaller), the best kept, then the next
lever; passes repeat until a whole pass improves nothing. The order is the AMD Primus Tuning Agent's knob order
(ORDER), then the rest of the search space's. A degree change refused only because the pinned global batch no longer
divides also moves the local batch. Stateless: the cursor and what was tried are read from the campaign.
"""

from __future__ import annotations

from bot.agent.lessons import Lesson
from bot.agent.policy import LeverSpace, validate_change
from bot.agent.samplers import _as_change, _tried_configs
from bot.agent.space import layout_problem
from bot.core import levers as catalog
from bot.core.diagnosis import Diagnosis
from bot.core.records import Change, RecordReader, Scalar, Stop
from bot.core.state import Campaign

# Primus Tuning Agent's knob order (https://github.com/AMD-AGI/Primus/blob/main/docs/02-user-guide/tuning-agent.md),
# in torchtitan lever names
ORDER = (
    "parallelism.tensor_parallel_degree",
    "parallelism.pipeline_parallel_degree",
    "parallelism.expert_parallel_degree",
    "parallelism.context_parallel_degree",
    "parallelism.pipeline_parallel_schedule",  # Primus: VPP and the schedule
    "parallelism.pipeline_parallel_microbatch_size",  # Primus: MBS
    "training.local_batch_size",  # Primus: MBS/GBS (the global batch is pinned: only the split moves)
    "activation_checkpoint",  # Primus: recompute granularity
)
BATCH = "training.local_batch_size"


def lever_order(levers: LeverSpace) -> list[str]:
    """The levers of the space in the fixed order: Primus's knobs first, the rest in the space's order."""
    first = [k for k in ORDER if k in levers.values]
    return first + [k for k in levers.values if k not in first]


def value_order(values: list[Scalar], current: Scalar | None) -> list[Scalar]:
    """A lever's legal values nearest to the current one first (one notch up, one down, two up, ...)."""
    if current not in values:
        return list(values)
    i = values.index(current)
    return sorted((v for v in values if v != current), key=lambda v: (abs(values.index(v) - i), values.index(v) < i))


class GreedyPolicy:
    name = "greedy"

    def propose(
        self, campaign: Campaign, diagnosis: Diagnosis, lessons: list[Lesson], levers: LeverSpace, records: RecordReader
    ) -> Change | Stop:
        order = lever_order(levers)
        current = catalog.effective(campaign.incumbent_levers)
        seen = [catalog.effective(c) for c in _tried_configs(campaign)]
        cursor = 0
        if campaign.steps and campaign.steps[-1].change.lever in order:
            cursor = order.index(campaign.steps[-1].change.lever)
        for lever in order[cursor:] + order[:cursor]:
            for value in value_order(list(levers.values[lever]), current.get(lever)):
                config = self._legal({**campaign.incumbent_levers, lever: value}, lever, levers, seen)
                if config is None:
                    continue
                why = (
                    f"coordinate descent (hand-tuning order): {lever} = {value!r}, the next untried value of this lever"
                )
                if BATCH in config and config.get(BATCH) != campaign.incumbent_levers.get(BATCH) and lever != BATCH:
                    why += f", with local batch {config[BATCH]} so the pinned global batch still divides"
                change = _as_change(campaign, {k: config[k] for k in config}, self.name, why)
                if change is not None and change.lever != lever:  # the lever this step is about comes first
                    extra = {k: v for k, v in {change.lever: change.after, **change.extra}.items() if k != lever}
                    change = Change(
                        lever=lever, before=current.get(lever), after=value, extra=extra, why=why, policy=self.name
                    )
                if (
                    change
                    and validate_change(campaign, change, levers, allow_multi=True, check_prerequisites=False) is None
                ):
                    return change
        return Stop(
            why="coordinate descent: a whole pass over the levers improved nothing (every one-lever move from "
            "the incumbent was measured)",
            policy=self.name,
        )

    @staticmethod
    def _legal(
        config: dict[str, Scalar], lever: str, levers: LeverSpace, seen: list[dict[str, Scalar]]
    ) -> dict[str, Scalar] | None:
        """``config`` if legal and untried; else, for a lever other than the local batch, the same with the local
        batch nearest the current one that makes it legal; else None."""
        if catalog.effective(config) in seen:
            return None
        if layout_problem(levers.recipe, config) is None:
            return config
        if lever == BATCH or BATCH not in levers.values:
            return None
        cur = catalog.effective(config).get(BATCH)
        for v in value_order(list(levers.values[BATCH]), cur):
            cand = {**config, BATCH: v}
            if catalog.effective(cand) not in seen and layout_problem(levers.recipe, cand) is None:
                return cand
        return None
