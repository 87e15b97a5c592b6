"""bot/campaign/leaderboard.py: leaderboard.md from results/ — measured, gated, fastest per (model, hardware, devices)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from campaign_fakes import make_record, recipe_text

from bot.campaign.leaderboard import collect, regenerate, render, usd_per_million_tokens
from bot.core.recipe import parse_recipe_text

RECIPE = parse_recipe_text(recipe_text())


def put(repo: Path, name: str, tps: float, *, gate: str | None = "passed", simulated: bool = False, outcome: str = "ok",
        hardware: str = "cpu", devices: int = 1, baseline: float | None = 1000.0, usd: float = 0.05) -> Path:
    rec = make_record(RECIPE, outcome, tps, 0.01, simulated=simulated, run_id=name)
    data = json.loads(rec.model_dump_json())
    data.update(hardware=hardware, usd_per_device_hour=usd)
    data["launch"].update(world_size=devices, devices_per_node=devices)
    if gate is not None:
        data.update(gate=gate, baseline_tps=baseline)
    path = repo / "results" / "llama3-tiny" / hardware / f"{name}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data))
    return path


def test_usd_per_million_tokens() -> None:
    assert usd_per_million_tokens(2.0, 1000.0) == pytest.approx(2.0 / (1000.0 * 3600) * 1e6)
    assert usd_per_million_tokens(3.5, 12_345.0) == pytest.approx(3.5 / (12_345.0 * 3600.0) * 1e6)
    assert usd_per_million_tokens(2.0, 0.0) is None


def test_fastest_gated_measured_record_per_model_hardware_devices(tmp_path: Path) -> None:
    put(tmp_path, "slow", 1100.0)
    put(tmp_path, "fast", 1300.0)
    put(tmp_path, "simulated", 9000.0, simulated=True)  # never on the board
    put(tmp_path, "ungated", 8000.0, gate=None)  # no gate verdict: not a result
    put(tmp_path, "rejected", 7000.0, gate="rejected")
    put(tmp_path, "crashed", 6000.0, outcome="crash")
    put(tmp_path, "two-devices", 900.0, devices=2)
    put(tmp_path, "gpu", 20_000.0, hardware="h100-sxm-80gb", usd=2.5, baseline=None)
    (tmp_path / "results" / "junk.json").write_text("{not json")
    rows = collect(tmp_path)
    keys = [(r["hardware"], r["devices"], r["tps_per_device"]) for r in rows]
    assert keys == [("cpu", 1, 1300.0), ("cpu", 2, 900.0), ("h100-sxm-80gb", 1, 20_000.0)]
    cpu = rows[0]
    assert cpu["model"] == "llama3-tiny" and cpu["record"].endswith("fast.json")
    assert cpu["usd_per_mtok"] == pytest.approx(0.05 / (1300.0 * 3600) * 1e6)
    assert cpu["gain"] == pytest.approx(0.3)
    assert rows[2]["gain"] is None and rows[2]["usd_per_mtok"] == pytest.approx(2.5 / (20_000.0 * 3600) * 1e6)
    text = render(rows)
    assert "1,300" in text and f"${cpu['usd_per_mtok']:.3f}" in text and "+30.0%" in text
    assert "9,000" not in text and "8,000" not in text and "7,000" not in text and "6,000" not in text


def test_an_empty_board_and_regenerate(tmp_path: Path) -> None:
    assert "No measured result has landed yet." in render(collect(tmp_path))
    put(tmp_path, "only-simulated", 5000.0, simulated=True)
    path, text = regenerate(tmp_path)
    assert path == tmp_path / "leaderboard.md" and path.read_text() == text
    assert "No measured result has landed yet." in text and "simulated" in text.lower()


def test_the_launch_shape_is_part_of_the_key_and_moe_models_come_first(tmp_path: Path) -> None:
    two_ranks = put(tmp_path, "two-ranks", 900.0, devices=2)
    two_nodes = put(tmp_path, "two-nodes", 800.0, devices=2)
    data = json.loads(two_nodes.read_text())
    data["launch"].update(nodes=2, devices_per_node=1, launcher="slurm")
    two_nodes.write_text(json.dumps(data))
    moe = put(tmp_path, "moe", 50.0, hardware="h100-sxm-80gb")
    data = json.loads(moe.read_text())
    data.update(model="mixtral-8x22b")
    moe.write_text(json.dumps(data))
    rows = collect(tmp_path)
    assert rows[0]["model"] == "mixtral-8x22b" and rows[0]["moe"]  # MoE first
    shapes = sorted((r["nodes"], r["devices_per_node"], r["tps_per_device"]) for r in rows if r["devices"] == 2)
    assert shapes == [(1, 2, 900.0), (2, 1, 800.0)]  # a 2-rank and a 2-node result do not collide
    assert two_ranks.name in {Path(r["record"]).name for r in rows}
    text = render(rows)
    assert "mixtral-8x22b (MoE)" in text and "(2 nodes × 1)" in text and "(1 node × 2)" in text


def test_the_columns_people_trust_are_there_and_mfu_only_with_a_known_peak(tmp_path: Path) -> None:
    cpu = put(tmp_path, "cpu", 1300.0)
    data = json.loads(cpu.read_text())
    data["summary"]["mfu"] = 0.01  # torchtitan's figure against an unknown CPU peak: not shown
    data["levers"].update({"parallelism.tensor_parallel_degree": 2, "parallelism.enable_sequence_parallel": True,
                           "activation_checkpoint": "selective", "compile.enable": True})
    data.update(campaign="c1", step=3)
    for i, s in enumerate(data["steps"]):
        s["tflops"] = 1.0 + i
    cpu.write_text(json.dumps(data))
    gpu = put(tmp_path, "gpu", 20_000.0, hardware="h100-sxm-80gb", usd=2.5)
    data = json.loads(gpu.read_text())
    data["summary"]["mfu"] = 41.5
    data["stack"].update(device_family="cuda", cuda="12.8", driver="570.1", device_name="NVIDIA H100")
    gpu.write_text(json.dumps(data))
    rows = {r["hardware"]: r for r in collect(tmp_path)}
    assert rows["cpu"]["mfu"] is None and rows["h100-sxm-80gb"]["mfu"] == pytest.approx(41.5)
    assert rows["cpu"]["layout"].startswith("FSDP") and "TP 2 +SP" in rows["cpu"]["layout"]
    assert rows["cpu"]["recompute"] == "selective" and rows["cpu"]["compile"] is True
    assert rows["cpu"]["gbs"] == RECIPE.pinned["training.global_batch_size"] and rows["cpu"]["seq"] == RECIPE.pinned["training.seq_len"]
    assert rows["cpu"]["tflops"] is not None and rows["cpu"]["gate"] == "campaigns/c1/step-3/report.md"
    text = render(list(rows.values()))
    for column in ("precision", "GBS", "MBS", "seq", "layout", "recompute", "compile", "model TFLOP/s/device", "MFU", "gate", "stack"):
        assert column in text.splitlines()[next(i for i, line in enumerate(text.splitlines()) if line.startswith("| model"))]
    assert "41.5%" in text and "CUDA 12.8, driver 570.1" in text and "[passed](campaigns/c1/step-3/report.md)" in text
