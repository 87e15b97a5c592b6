"""bot/campaign/leaderboard.py: leaderboard.md from results/ — measured, gated, fastest per (model, hardware, devices);
a results file that is not a run record stops the regeneration in one line and leaves the board as it was."""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from campaign_fakes import make_record, recipe_text

from bot.campaign.leaderboard import (
    LeaderboardError,
    check_results,
    collect,
    load_result,
    regenerate,
    render,
    usd_per_million_tokens,
)
from bot.core.recipe import load_recipe, parse_recipe_text
from bot.core.records import LaunchShape, StepMetric, write_record
from bot.core.repo import RepoError

ROOT = Path(__file__).resolve().parents[2]
RECIPE = parse_recipe_text(recipe_text())


def put(
    repo: Path,
    name: str,
    tps: float,
    *,
    gate: str | None = "passed",
    simulated: bool = False,
    outcome: str = "ok",
    hardware: str = "cpu",
    devices: int = 1,
    baseline: float | None = 1000.0,
    usd: float = 0.05,
) -> Path:
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
    (tmp_path / "results" / "notes.json").mkdir()  # a folder named *.json is no results file
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
    data["levers"].update(
        {
            "parallelism.tensor_parallel_degree": 2,
            "parallelism.enable_sequence_parallel": True,
            "activation_checkpoint": "selective",
            "compile.enable": True,
        }
    )
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
    assert (
        rows["cpu"]["gbs"] == RECIPE.pinned["training.global_batch_size"]
        and rows["cpu"]["seq"] == RECIPE.pinned["training.seq_len"]
    )
    assert rows["cpu"]["tflops"] is not None and rows["cpu"]["gate"] == "campaigns/c1/step-3/report.md"
    text = render(list(rows.values()))
    for column in (
        "precision",
        "GBS",
        "MBS",
        "seq",
        "layout",
        "recompute",
        "compile",
        "model TFLOP/s/device",
        "MFU",
        "gate",
        "stack",
    ):
        assert (
            column
            in text.splitlines()[next(i for i, line in enumerate(text.splitlines()) if line.startswith("| model"))]
        )
    assert "41.5%" in text and "CUDA 12.8, driver 570.1" in text and "[passed](campaigns/c1/step-3/report.md)" in text


def test_a_record_without_the_simulated_flag_counts_as_simulated(tmp_path: Path) -> None:
    put(tmp_path, "measured", 1000.0)
    unflagged = put(tmp_path, "unflagged", 9000.0)
    data = json.loads(unflagged.read_text())
    del data["simulated"]
    unflagged.write_text(json.dumps(data))
    assert [r["tps_per_device"] for r in collect(tmp_path)] == [1000.0]


# ----------------------------------------------------------------------------- what ATTUNE writes still validates
def as_result(rec: Any, **extra: Any) -> dict[str, Any]:
    """A run record as the executor lands it in results/ (bot/drive/executor.py ``_results_files``)."""
    return {
        **json.loads(rec.model_dump_json()),
        "gate": "passed",
        "campaign": "llama3-tiny-cpu-20260101-000000",
        "step": 2,
        "baseline_tps": 1000.0,
        "gain": 0.125,
        **extra,
    }


def test_every_results_file_of_this_checkout_is_a_valid_record() -> None:
    files = sorted((ROOT / "results").rglob("*.json"))
    assert files, "the checkout's results/ holds the records of its real campaigns"
    for path in files:
        assert load_result(path).eligible(), path
    assert len(check_results(ROOT)) == len(files)
    assert collect(ROOT)  # and they make a board


@pytest.mark.parametrize(
    "recipe_path",
    sorted([*(ROOT / "recipes").rglob("*.yaml"), *(ROOT / "bot/bench/tasks").rglob("*.yaml")]),
    ids=lambda p: str(p.relative_to(ROOT)),
)
def test_records_of_every_shipped_recipe_validate(recipe_path: Path, tmp_path: Path) -> None:
    recipe = load_recipe(recipe_path)
    ok = make_record(recipe, "ok", 1234.0, 0.01, run_id="ok")
    ok.steps = [
        StepMetric(step=i + 1, loss=3.0, tps=1234.0, tflops=1.5, mfu=0.4, memory_gib=2.0, time_s=float(i))
        for i in range(4)
    ]
    ok.launch = LaunchShape(
        launcher="slurm", nodes=2, devices_per_node=1, world_size=2, job_id="7", job_state="COMPLETED"
    )
    kinds = {
        "landed": (as_result(ok), True),
        "first landing, no gain yet": (as_result(ok, gain=None, baseline_tps=None), True),
        "simulated": (as_result(make_record(recipe, "ok", 1234.0, 0.01, simulated=True)), False),
        "crashed": (as_result(make_record(recipe, "crash", None, 0.01)), False),
        "ungated": (json.loads(ok.model_dump_json()), False),
    }
    for name, (data, eligible) in kinds.items():
        path = tmp_path / f"{name}.json"
        path.write_text(json.dumps(data, indent=1) + "\n")
        assert load_result(path).eligible() is eligible, name
    written = write_record(ok, tmp_path / "record.json")  # a bare run record, as the runners write it
    assert not load_result(written).eligible()


# ----------------------------------------------------------------------------- what is not a run record
def _edit(change: Callable[[dict[str, Any]], None]) -> Callable[[dict[str, Any]], bytes]:
    def make(data: dict[str, Any]) -> bytes:
        change(data)
        return json.dumps(data, indent=1).encode()

    return make


BAD: dict[str, tuple[Callable[[dict[str, Any]], bytes], str]] = {
    "garbage JSON": (
        lambda d: b'{"run_id": "x",\n  "outcome": ok\n}\n',
        ":2: not valid JSON (Expecting value, column 14)",
    ),
    "empty file": (lambda d: b"", ":1: not valid JSON"),
    "non-UTF-8 text": (
        lambda d: json.dumps({**d, "model": "caf\u00e9"}, indent=1, ensure_ascii=False).encode("latin-1"),
        "not UTF-8 text (byte 0xe9",
    ),
    "not an object": (lambda d: b"[1, 2]\n", ": expected a JSON object (a run record); got list"),
    "tokens/s as a word": (
        _edit(lambda d: d["summary"].update(tps_median="fast")),
        ": summary.tps_median: expected a number; got 'fast'",
    ),
    "tokens/s as digits in a string": (
        _edit(lambda d: d["summary"].update(tps_median="1300")),
        ": summary.tps_median: expected a number; got '1300'",
    ),
    "tokens/s not a number": (
        _edit(lambda d: d["summary"].update(tps_median=float("nan"))),
        ": summary.tps_median: expected a finite number; got nan",
    ),
    "infinite tokens/s": (
        _edit(lambda d: d["summary"].update(tps_median=float("inf"))),
        ": summary.tps_median: expected a finite number; got inf",
    ),
    "negative price": (
        _edit(lambda d: d.update(usd_per_device_hour=-0.5)),
        ": usd_per_device_hour: expected a number >= 0; got -0.5",
    ),
    "simulated as a word": (_edit(lambda d: d.update(simulated="no")), ": simulated: expected true or false; got 'no'"),
    "no launch shape": (_edit(lambda d: d.pop("launch")), ": launch: missing"),
    "devices as a boolean": (
        _edit(lambda d: d["launch"].update(world_size=True)),
        ": launch.world_size: expected a whole number; got True",
    ),
    "unknown outcome": (_edit(lambda d: d.update(outcome="great")), ": outcome: expected 'ok', 'oom'"),
    "fractional microbatch": (
        _edit(lambda d: d["levers"].update({"training.local_batch_size": 8.5})),
        ": levers.training.local_batch_size: expected a whole number; got 8.5",
    ),
    "a list as a lever": (
        _edit(lambda d: d["pinned"].update({"x": [1]})),
        ": pinned.x: expected a boolean, a number or a string",
    ),
    "per-step TFLOP/s as text": (
        _edit(lambda d: d["steps"][1].update(tflops="lots")),
        ": steps.1.tflops: expected a number; got 'lots'",
    ),
    "a table-breaking model": (
        _edit(lambda d: d.update(model="llama|evil")),
        ": model: expected text without '|' or line breaks",
    ),
    "a campaign id that is a path": (
        _edit(lambda d: d.update(campaign="../../etc")),
        ": campaign: expected a campaign id",
    ),
    "a date in words": (  # was printed in the board's date column as it stood
        _edit(lambda d: d.update(created_at="yesterday")),
        ": created_at: expected an ISO 8601 date and time",
    ),
}


@pytest.mark.parametrize("kind", list(BAD))
def test_a_bad_results_file_stops_the_regeneration_and_leaves_the_board_as_it_was(kind: str, tmp_path: Path) -> None:
    good = put(tmp_path, "good", 1300.0)
    regenerate(tmp_path)
    board = (tmp_path / "leaderboard.md").read_bytes()
    listing = sorted(os.listdir(tmp_path))
    make, expected = BAD[kind]
    bad = good.with_name("uploaded.json")
    bad.write_bytes(make(json.loads(good.read_text())))
    with pytest.raises(LeaderboardError) as caught:
        regenerate(tmp_path)
    message = str(caught.value)
    assert isinstance(caught.value, RepoError)  # what the CLI and publish-leaderboard report on one line, exit 2
    assert "\n" not in message and message.startswith(str(bad)) and expected in message, message
    assert (tmp_path / "leaderboard.md").read_bytes() == board and sorted(os.listdir(tmp_path)) == listing
    with pytest.raises(LeaderboardError):
        collect(tmp_path)  # the GitHub path (publish-leaderboard) renders from collect: refused there too
    with pytest.raises(LeaderboardError, match=r"uploaded\.json"):
        check_results(tmp_path)  # a pre-flight check finds it before anything runs


def test_a_board_that_cannot_be_written_is_one_error_and_the_old_board_stays(tmp_path: Path, monkeypatch) -> None:
    put(tmp_path, "good", 1300.0)
    regenerate(tmp_path)
    board = (tmp_path / "leaderboard.md").read_bytes()
    put(tmp_path, "faster", 1400.0)

    def refuse(src: Any, dst: Any) -> None:
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(os, "replace", refuse)
    with pytest.raises(LeaderboardError, match=r"leaderboard\.md: cannot write the board \(Permission denied\)"):
        regenerate(tmp_path)
    monkeypatch.undo()
    assert (tmp_path / "leaderboard.md").read_bytes() == board
    assert sorted(p.name for p in tmp_path.iterdir()) == ["leaderboard.md", "results"]  # no half-written temporary file
    assert "1,400" in regenerate(tmp_path)[1]
