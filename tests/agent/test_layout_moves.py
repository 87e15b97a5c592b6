"""bot/agent/layout_moves.py: a notch along an ordered lever, the ways to divide the DP ranks, the batch share."""

from __future__ import annotations

import pytest
from campaign_fakes import space_fn

from bot.agent.layout_moves import (
    CP,
    TP,
    batch_share,
    dp_spans_nodes,
    fewer_dp_degrees,
    model_parallel,
    next_notch,
    notch_toward,
    with_batch_share,
)
from bot.core import levers as catalog
from bot.core.recipe import parse_recipe_text

PP = "parallelism.pipeline_parallel_degree"
LBS = "training.local_batch_size"


def _recipe(nodes: int) -> str:
    return f"""\
id: test/moves
workload: {{module: bot.inrank.workloads.llama3_tiny, config: llama3_tiny_cpu, model: llama3-tiny}}
cluster: {{hardware: h100-sxm-80gb, nodes: {nodes}, devices_per_node: 8, launcher: sim, usd_per_device_hour: 2.0}}
levers:
  training.local_batch_size: 4
  parallelism.tensor_parallel_degree: 4
pinned:
  training.global_batch_size: 512
  training.seq_len: 2048
  optimizer.lr: 0.0003
  lr_scheduler.total_steps: 1000
  debug.seed: 42
bench: {{steps: 20, warmup_steps: 5}}
"""


@pytest.mark.parametrize(
    ("before", "after", "expected"), [(1, 2, 4), (4, 2, 1), (1, 8, None), (8, 1, None), (2, 2, None)]
)
def test_next_notch_goes_one_value_further_the_way_the_step_went(before: int, after: int, expected: int | None) -> None:
    assert next_notch([1, 2, 4, 8], before, after) == expected


def test_a_notch_exists_only_on_an_ordered_numeric_lever_from_a_value_it_has() -> None:
    assert next_notch(["none", "selective", "full"], "none", "selective") is None  # categorical: no order to follow
    assert next_notch([1, 2, 4], True, 2) is None  # a bool is not a degree
    assert next_notch([1, 2, 4], 1, 3) is None  # 3 is not one of the lever's values
    assert notch_toward([1, 2, 4, 8], 2, 8) == 4 and notch_toward([1, 2, 4, 8], 8, 1) == 4
    assert notch_toward([1, 2, 4, 8], 4, 4) is None and notch_toward([1, 2, 4, 8], 1, "x") is None


def test_the_batch_share_keeps_a_ranks_share_of_the_pinned_global_batch() -> None:
    assert batch_share(4, 4, 8) == 8  # twice the model-parallel degree: half the DP ranks, twice the local batch
    assert batch_share(4, 8, 2) == 1
    assert batch_share(1, 4, 2) == 0  # half a sample: not a whole number


def test_with_batch_share_moves_the_local_batch_with_the_model_parallel_degree() -> None:
    levers = {TP: 4, LBS: 4}
    assert with_batch_share(levers, TP, 8) == {TP: 8, LBS: 8}
    assert with_batch_share(levers, PP, 2) == {TP: 4, PP: 2, LBS: 8}
    assert with_batch_share({TP: 4, LBS: 1}, TP, 2) == {TP: 2, LBS: 1}  # no whole share: the local batch stays
    assert model_parallel(catalog.effective({TP: 2, CP: 2, PP: 4})) == 16


def test_fewer_dp_ranks_grow_tp_inside_the_node_then_cp() -> None:
    space = space_fn(parse_recipe_text(_recipe(nodes=2)))
    eff = catalog.effective(space.recipe.levers)
    ways = fewer_dp_degrees(space, eff, (2, 4))
    assert ways[0] == (TP, 8)  # TP 4 -> 8 fills the node; TP 16 would cross it
    assert (TP, 16) not in ways
    assert [lever for lever, _ in ways] == sorted((lever for lever, _ in ways), key=(TP, CP).index)  # TP first
    assert all(value in space.values[lever] for lever, value in ways)


def test_the_dp_group_spans_nodes_only_where_the_model_parallel_degree_leaves_more_than_a_node_of_ranks() -> None:
    two = space_fn(parse_recipe_text(_recipe(nodes=2)))
    one = space_fn(parse_recipe_text(_recipe(nodes=1)))
    assert dp_spans_nodes(two, catalog.effective({TP: 1}))  # 16 DP ranks over 2 nodes
    assert not dp_spans_nodes(two, catalog.effective({TP: 2}))  # 8 DP ranks: one node's worth
    assert not dp_spans_nodes(one, catalog.effective({TP: 1}))
