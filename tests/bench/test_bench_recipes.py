"""``attune bench recipes``: a registry config drafted, simulated and tuned; a config that does not build is a row."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from bot.bench.recipes import (
    REGISTRIES,
    candidate_clusters,
    choose_cluster,
    coverage_row,
    registry_configs,
    render_coverage,
    set_aside,
)


def test_the_registries_are_listed_from_source_with_debug_and_sft_configs_set_aside() -> None:
    qwen3 = registry_configs("torchtitan.models.qwen3")
    assert "qwen3_0_6b" in qwen3 and "sft_qwen3_8b_math" in qwen3 and "qwen3_debugmodel" in qwen3
    assert "enable_fused_swiglu" not in registry_configs("torchtitan.models.deepseek_v3")  # takes a config: a helper
    assert registry_configs("torchtitan.models.qwen3_5")  # listed even where its imports fail here
    assert set_aside("qwen3_debugmodel") and set_aside("sft_qwen3_8b_math") and set_aside("qwen3_32b") is None
    kept = [c for m in REGISTRIES for c in registry_configs(m) if set_aside(c) is None]
    assert len(kept) == 32, kept


def test_the_cluster_is_the_fewest_devices_holding_the_training_state_at_half_memory() -> None:
    assert choose_cluster(600_000_000) == ("h100-sxm-80gb", 8)
    assert choose_cluster(70_550_000_000) == ("h100-sxm-80gb", 32)  # 1.13 TB / 32 = 35 GB <= 40 GiB
    assert choose_cluster(405_850_000_000) == ("h100-sxm-80gb", 256)
    assert choose_cluster(1_030_000_000_000) == ("h200", 256)  # over every H100 count: H200
    assert choose_cluster(10**13) is None


def test_a_small_config_is_drafted_simulated_and_tuned(tmp_path: Path) -> None:
    row = coverage_row("torchtitan.models.qwen3", "qwen3_0_6b", 1, ("greedy",), tmp_path)
    assert row["built"] and row["accepted"] and row["why"] is None
    assert 0.59e9 < row["total_params"] < 0.61e9 and row["active_params"] == row["total_params"]
    assert (row["hardware"], row["devices"]) == ("h100-sxm-80gb", 8)
    assert row["baseline_tps_per_device"] > 0 and row["oracle_gain"] >= row["agent"]["gain"] - 1e-9
    assert 0 < row["agent"]["oracle_fraction"] <= 1 and row["agent"]["device_hours"] > 0
    assert row["best_baseline"]["policy"] == "greedy" and row["agent"]["false_gains"] >= 0
    text = render_coverage(
        {"seeds": 1, "baselines": ["greedy"], "rule": "r", "rows": [row], "set_aside": [], "wall_s": 1.0}
    )
    assert "SIMULATED" in text and "| qwen3_0_6b" in text and "8 x h100-sxm-80gb" in text


def test_a_config_that_does_not_build_is_a_row_that_says_why(tmp_path: Path) -> None:
    bad = coverage_row("torchtitan.models.qwen3", "no_such_config", 1, ("greedy",), tmp_path)
    assert not bad["built"] and not bad["accepted"] and "no_such_config" in bad["why"] and bad["agent"] is None
    rows = [bad]
    absent = [p for p in ("fla", "torchvision") if importlib.util.find_spec(p) is None]
    if absent:  # qwen3_5's registry imports both: the first one missing here is named
        missing = coverage_row("torchtitan.models.qwen3_5", "qwen35_0_8b", 1, ("greedy",), tmp_path)
        assert not missing["built"] and missing["missing_package"] in absent, missing
        rows.append(missing)
    text = render_coverage(
        {"seeds": 1, "baselines": ["greedy"], "rule": "r", "rows": rows, "set_aside": [], "wall_s": 1.0}
    )
    assert "no_such_config" in text and "Not built or not accepted" in text


def test_a_draft_that_runs_out_of_memory_steps_up_to_the_next_cluster_size(tmp_path: Path, monkeypatch) -> None:
    import bot.bench.recipes as recipes

    assert candidate_clusters(70_550_000_000)[:3] == [
        ("h100-sxm-80gb", 32),
        ("h100-sxm-80gb", 64),
        ("h100-sxm-80gb", 128),
    ]
    tried: list[int] = []

    def oom_below_16(recipe):  # the simulator's answer stood in: out of memory on 8 devices, runs on 16
        devices = recipe.cluster.nodes * recipe.cluster.devices_per_node
        tried.append(devices)
        return "oom: peak memory 90.0 GiB exceeds 79.6 GiB" if devices < 16 else None

    monkeypatch.setattr(recipes, "baseline_problem", oom_below_16)
    row = coverage_row("torchtitan.models.qwen3", "qwen3_0_6b", 1, ("greedy",), tmp_path)
    assert tried == [8, 16] and row["accepted"] and (row["hardware"], row["devices"]) == ("h100-sxm-80gb", 16)

    monkeypatch.setattr(recipes, "baseline_problem", lambda recipe: "oom: peak memory 412.0 GiB exceeds 79.6 GiB")
    never = coverage_row("torchtitan.models.qwen3", "qwen3_0_6b", 1, ("greedy",), tmp_path)
    assert not never["accepted"] and never["agent"] is None
    assert "runs on no cluster of the rule" in never["why"] and "256 x h200: oom" in never["why"]


@pytest.mark.parametrize("name", ["heuristic", "attune"])
def test_the_agent_is_refused_as_a_baseline_under_either_name(name: str, capsys: pytest.CaptureFixture[str]) -> None:
    """``attune`` is the deprecated name of ``heuristic`` (the agent, always run): as a baseline it is refused, in one line."""
    from bot.cli import main

    assert main(["bench", "recipes", "--baselines", f"tpe,{name}"]) == 2
    err = capsys.readouterr().err.strip()
    assert "--baselines: heuristic is the agent, always run" in err and len(err.splitlines()) == 1
