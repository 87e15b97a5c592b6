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
    data["launch"]["world_size"] = devices
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
