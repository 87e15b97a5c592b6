"""Arithmetic of the moves between layouts: a notch along an ordered lever, the ways to divide the DP ranks at a
fixed device count (more TP inside the node, then CP), and the local batch that keeps a rank's share of the pinned
global batch when the model-parallel degree changes.

Pure functions of lever values; legality itself is :func:`bot.agent.space.layout_problem`'s.
"""

from __future__ import annotations

from bot.agent.policy import LeverSpace
from bot.core import levers as catalog
from bot.core.records import Scalar

TP, CP = "parallelism.tensor_parallel_degree", "parallelism.context_parallel_degree"


def fewer_dp_degrees(space: LeverSpace, eff: dict[str, Scalar], factors: tuple[int, ...]) -> list[tuple[str, int]]:
    """(lever, value) of each legal-valued way to divide the DP ranks by one of ``factors`` at a fixed device count:
    the TP degree that many times larger -- inside the node only (TP collectives run every layer, over NVLink) --
    then the CP degree; in that order, the smaller factor first for each."""
    out = []
    for lever in (TP, CP):
        for factor in factors:
            value = factor * int(eff[lever])
            if (
                lever in space.values
                and value in space.values[lever]
                and not (lever == TP and value > space.recipe.cluster.devices_per_node)
            ):
                out.append((lever, value))
    return out


def model_parallel(eff: dict[str, Scalar]) -> int:
    """The model-parallel product TP x CP x PP of the effective levers ``eff`` (the cluster over it is the DP degree)."""
    return (
        int(eff["parallelism.tensor_parallel_degree"])
        * int(eff["parallelism.context_parallel_degree"])
        * int(eff["parallelism.pipeline_parallel_degree"])
    )


def dp_spans_nodes(space: LeverSpace, eff: dict[str, Scalar]) -> bool:
    """Whether the data-parallel (FSDP) group of the layout ``eff`` spans more than one node."""
    c = space.recipe.cluster
    return c.nodes > 1 and c.nodes * c.devices_per_node // max(model_parallel(eff), 1) > c.devices_per_node


def _notch(values: list[Scalar], at: Scalar, up: bool) -> Scalar | None:
    """The value one step up (or down) from ``at`` on an ordered numeric lever, or None."""
    if not all(isinstance(v, int) and not isinstance(v, bool) for v in (*values, at)) or at not in values:
        return None
    i = values.index(at) + (1 if up else -1)
    return values[i] if 0 <= i < len(values) else None


def next_notch(values: list[Scalar], before: Scalar | None, after: Scalar) -> Scalar | None:
    """The value one step past ``after`` in the direction ``before -> after`` of an ordered numeric lever, or None."""
    if not isinstance(before, int) or isinstance(before, bool) or before == after:
        return None
    return _notch(values, after, after > before)  # type: ignore[operator]


def notch_toward(values: list[Scalar], at: Scalar, toward: Scalar | None) -> Scalar | None:
    """The value one step from ``at`` in the direction of ``toward`` on an ordered numeric lever, or None."""
    if not isinstance(toward, int) or isinstance(toward, bool) or at == toward:
        return None
    return _notch(values, at, toward > at)  # type: ignore[operator]


def batch_share(lbs: int, old_mp: int, new_mp: int) -> int:
    """The local batch that keeps a rank's share of the pinned global batch when the model-parallel degree TP x CP x PP
    goes from ``old_mp`` to ``new_mp`` (the DP degree the other way); 0 where that is not a whole number."""
    return lbs * new_mp // old_mp if (lbs * new_mp) % old_mp == 0 else 0


def with_batch_share(levers: dict[str, Scalar], lever: str, value: Scalar) -> dict[str, Scalar]:
    """``levers`` with ``lever=value`` and the local batch at the pinned global batch's share (:func:`batch_share`,
    as ``_enabler`` sets it), where that is a whole number."""
    cur = catalog.effective(levers)
    new = {**levers, lever: value}
    share = batch_share(
        int(cur["training.local_batch_size"]), model_parallel(cur), model_parallel(catalog.effective(new))
    )
    return {**new, "training.local_batch_size": share} if share else new
