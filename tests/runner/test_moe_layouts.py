"""The MoE lever matrix on real torchtitan (moe-tiny, gloo, the CPU): every layout the lever catalog calls legal
trains a few steps, and a layout it calls illegal is refused by torchtitan too.

Default suite: one layout per family (1 rank: local batch / accumulation, AC, the other CPU dispatcher; 2 ranks:
expert parallelism with AC and accumulation). ``slow``: the whole matrix. Runs skip the seed checkpoint (the
initial weights do not matter for "does torchtitan accept and train it").
"""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from bot.agent.space import make_space
from bot.bench.gate_faults import edit_recipe_text
from bot.core import levers as catalog
from bot.core.recipe import parse_recipe_text
from bot.runner.local import LocalRunner

REPO = Path(__file__).resolve().parents[2]
ONE, TWO = (REPO / "recipes" / "moe-tiny" / name for name in ("cpu.yaml", "cpu-2rank.yaml"))
STEPS = 3
ONE_THREAD = {"OMP_NUM_THREADS": "1"}


def layout(path: Path, levers: dict, workload: dict | None = None):
    text = edit_recipe_text(path.read_text(), levers=levers, workload=workload, source=path.name)
    return parse_recipe_text(text, path.name)


def legal(recipe) -> list[str]:
    return catalog.prerequisite_problems(dict(recipe.levers), make_space(recipe).model, recipe.cluster.hardware)


def train(recipe, tmp_path: Path):
    record = LocalRunner(extra_env=ONE_THREAD).run(recipe, steps=STEPS, out_dir=tmp_path)
    assert record.outcome == "ok", record.log_tail[-2000:]
    assert [s.step for s in record.steps] == list(range(1, STEPS + 1))
    assert all(math.isfinite(s.loss) for s in record.steps)
    return record


DEFAULT = [
    pytest.param(
        ONE,
        {"training.local_batch_size": 8, "activation_checkpoint": "none"},
        {"config": "moe_tiny_cpu_local_dispatch"},
        id="1rank-lbs8-ac-none-local-dispatch",
    ),
    pytest.param(
        TWO,
        {"parallelism.expert_parallel_degree": 2, "activation_checkpoint": "selective", "training.local_batch_size": 1},
        None,
        id="2rank-ep2-ac-selective-ga4",
    ),
]
SLOW = (
    [
        pytest.param(
            ONE,
            {"training.local_batch_size": lbs, "activation_checkpoint": ac},
            None,
            id=f"1rank-lbs{lbs}-ac-{ac}",
            marks=pytest.mark.slow,
        )
        for lbs in (1, 2, 4, 8)
        for ac in ("none", "selective", "full")
    ]
    + [
        pytest.param(
            ONE,
            {"loss.num_chunks": 1, "optimizer.implementation": "foreach"},
            None,
            id="1rank-unchunked-foreach",
            marks=pytest.mark.slow,
        ),
        pytest.param(
            TWO,
            {"parallelism.data_parallel_replicate_degree": 2, "parallelism.data_parallel_shard_degree": 1},
            None,
            id="2rank-ddp-ep1",
            marks=pytest.mark.slow,
        ),
    ]
    + [
        pytest.param(
            TWO,
            {"parallelism.expert_parallel_degree": ep, "activation_checkpoint": ac, "training.local_batch_size": lbs},
            None,
            id=f"2rank-ep{ep}-ac-{ac}-lbs{lbs}",
            marks=pytest.mark.slow,
        )
        for ep in (1, 2)
        for ac in ("none", "full")
        for lbs in (1, 4)
    ]
)


@pytest.mark.parametrize(("path", "levers", "workload"), DEFAULT + SLOW)
def test_a_legal_moe_layout_trains(path: Path, levers: dict, workload: dict | None, tmp_path: Path) -> None:
    recipe = layout(path, levers, workload)
    assert legal(recipe) == []
    train(recipe, tmp_path)
    ep = int(levers.get("parallelism.expert_parallel_degree", 1))
    log = (tmp_path / "train.log").read_text()
    assert f"ep={ep}" in log  # torchtitan built the mesh it was asked for


@pytest.mark.slow
@pytest.mark.parametrize(
    ("path", "levers"),
    [
        pytest.param(ONE, {"parallelism.expert_parallel_degree": 2}, id="ep2-on-1-rank"),
        pytest.param(
            TWO,
            {
                "parallelism.expert_parallel_degree": 2,
                "parallelism.data_parallel_replicate_degree": 2,
                "parallelism.data_parallel_shard_degree": 1,
            },
            id="ep2-without-fsdp-ranks",
        ),
    ],
)
def test_an_illegal_moe_layout_is_refused_by_the_catalog_and_by_torchtitan(
    path: Path, levers: dict, tmp_path: Path
) -> None:
    recipe = layout(path, levers)
    assert any("must divide dp_shard*cp*tp" in p for p in legal(recipe))
    record = LocalRunner(extra_env=ONE_THREAD).run(recipe, steps=STEPS, out_dir=tmp_path)
    assert record.outcome != "ok"
