"""What the ``claude`` policy's tools say a layout will do: the analytic cost model's step time and tokens/s change
against the incumbent, its per-device memory, and the memory and speed screens' verdicts -- the figures the default
policy's moves are screened with (:mod:`bot.agent.speed_screen`, :mod:`bot.agent.memory_screen`)."""

from __future__ import annotations

import math
from typing import Any

from bot.agent.costmodel import estimate_of
from bot.agent.memory_screen import predicted_oom, predicted_peak
from bot.agent.policy import LeverSpace
from bot.agent.speed_screen import predicted_slower, predicted_tps
from bot.core import levers as catalog
from bot.core.records import RecordReader, Scalar
from bot.core.state import Campaign
from bot.sim.hardware import get_hardware

CPU_NOTE = (
    "a CPU host: the model's efficiencies are GPU figures, so its step times here are a rough guide and "
    "the speed screen is off; only a run measures"
)


def forecast(
    campaign: Campaign,
    space: LeverSpace,
    records: RecordReader,
    levers: dict[str, Scalar],
    stacked_on: int | None = None,
) -> dict[str, Any]:
    """The predictions for a run of the recipe with ``levers`` (stacked on step ``stacked_on``, or on the incumbent);
    a figure the models cannot give is left out, and a ``note`` says why when none can be given."""
    out: dict[str, Any] = {}
    here, there = predicted_tps(space, campaign.incumbent_levers), predicted_tps(space, levers)
    if there is not None:
        out["step_s"] = round(there[1], 4)
        if here is not None:
            out["incumbent_step_s"] = round(here[1], 4)
            out["tokens_per_s_change"] = f"{there[0] / here[0] - 1:+.1%}"
    try:
        memory, hw = estimate_of(space.recipe, levers).memory_gib, get_hardware(space.recipe.cluster.hardware)
    except (KeyError, ValueError, ZeroDivisionError, catalog.LeverError):
        memory, hw = math.nan, None
    if hw is not None and math.isfinite(memory):
        out["model_memory_gib_per_device"] = round(memory, 3)
        out["device_memory_gib"] = hw.hbm_gib
    peak = predicted_peak(campaign, levers, stacked_on, space, records)
    if peak is not None:  # anchored on a peak this campaign measured: the more trustworthy figure
        out["predicted_peak_gib_per_device"] = round(peak.predicted, 2)
        out["device_memory_gib"] = round(peak.capacity, 2)
    oom = predicted_oom(campaign, levers, stacked_on, space, records)
    if oom:
        out["predicted_oom"] = oom
    slower = predicted_slower(space, campaign.incumbent_levers, levers)
    if slower:
        out["predicted_slower"] = slower
    if hw is not None and hw.kind != "gpu":
        out["note"] = CPU_NOTE
    elif not out:
        out["note"] = "the cost model cannot predict this recipe (a model, accelerator or layout it does not know)"
    return out
