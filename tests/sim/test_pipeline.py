"""Pipeline bubbles and in-flight activations (docs/reference/performance-model.md §4.3), by hand."""

import pytest

from bot.facts.legality import resolve_layout
from bot.sim.hardware import get_hardware
from bot.sim.pipeline import bubble_units, inflight_chunks
from bot.sim.zoo import get_model


def _layout(schedule, pp=8, lbs=32, lps=None):
    levers = {
        "parallelism.tensor_parallel_degree": 8,
        "parallelism.pipeline_parallel_degree": pp,
        "parallelism.pipeline_parallel_schedule": schedule,
        "training.disable_cuda_graphs": True,
        "training.local_batch_size": lbs,
        "parallelism.pipeline_parallel_layers_per_stage": lps,
    }
    lay, _ = resolve_layout(
        get_model("llama3.1-405b"),
        get_hardware("h200"),
        16,
        8,
        levers,
        {"training.global_batch_size": 256, "training.seq_len": 8192},
    )
    return lay


def test_1f1b_bubble_and_memory():
    lay = _layout("1F1B")
    assert bubble_units(lay) == 7  # p - 1 microbatch times
    assert inflight_chunks(lay, 0) == 8 and inflight_chunks(lay, 7) == 1  # min(m, p - rank)


def test_interleaved_bubble_and_warmup():
    lay = _layout("Interleaved1F1B")  # v = 2, m = 32
    assert bubble_units(lay) == pytest.approx(7 / 2)
    # rounds = 32 // 8 = 4, per round 8: warm-up on rank 0 = (2 - 1) * 8 + 2 * 7 = 22 chunks, + the one in flight
    assert inflight_chunks(lay, 0) == 23


def test_interleaved_with_few_microbatches_waits():
    lay = _layout("Interleaved1F1B", lbs=4)  # m = 4 < p = 8
    assert bubble_units(lay) == pytest.approx(7 / 2 + (8 - 4))


def test_zero_bubble_and_gpipe():
    assert bubble_units(_layout("InterleavedZeroBubble")) == pytest.approx(7 / 2 / 3)
    gpipe = _layout("GPipe")
    assert bubble_units(gpipe) == 7 and inflight_chunks(gpipe, 0) == 32  # GPipe holds every microbatch
