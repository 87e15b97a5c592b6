"""gate/api.py without runs: config-only verdicts, input errors, rendering."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from bot.bench.gate_faults import edit_recipe_text
from bot.core.records import LaunchShape, RunRecord, StackFingerprint, StepMetric, content_hash, write_record
from gate.api import render_verdict, run_gate, verdict_json
from gate.errors import GateInputError

BASE = Path(__file__).resolve().parents[2] / "recipes" / "llama3-tiny" / "cpu.yaml"


def write(tmp_path: Path, name: str, **edits) -> Path:
    path = tmp_path / name
    path.write_text(edit_recipe_text(BASE.read_text(), **edits))
    return path


def test_config_rejection_needs_no_run(tmp_path: Path) -> None:
    cand = write(tmp_path, "seed.yaml", pinned={"debug.seed": 43})
    v = run_gate(BASE, cand, cache_dir=tmp_path / "cache", out_dir=tmp_path / "out")
    assert v.verdict == "reject" and v.stage == "config"
    assert not (tmp_path / "cache").exists()  # nothing was run
    saved = json.loads((tmp_path / "out" / "verdict.json").read_text())
    assert saved["verdict"] == "reject"


def test_config_only_pass(tmp_path: Path) -> None:
    cand = write(tmp_path, "ac.yaml", levers={"activation_checkpoint": "none"})
    v = run_gate(BASE, cand, config_only=True, cache_dir=tmp_path / "cache")
    assert v.ok and v.stage == "config" and v.tier == "B" and v.requires_convergence


def test_input_errors(tmp_path: Path) -> None:
    with pytest.raises(GateInputError, match="cannot read"):
        run_gate(tmp_path / "missing.yaml", BASE, config_only=True)
    bad = tmp_path / "bad.yaml"
    bad.write_text("workload: [")
    with pytest.raises(GateInputError, match="not valid YAML"):
        run_gate(BASE, bad, config_only=True)
    record = RunRecord(
        run_id="x",
        recipe_id="llama3-tiny/cpu",
        recipe_hash="0000",
        hardware="cpu",
        stack=StackFingerprint(python="3.11", torch="2.13.0", torchtitan="0.3.0"),
        launch=LaunchShape(launcher="local", nodes=1, devices_per_node=1, world_size=1),
        outcome="ok",
    )
    rec = write_record(record, tmp_path / "r.json")
    with pytest.raises(GateInputError, match="another recipe"):
        run_gate(BASE, BASE, baseline_run=rec, candidate_run=rec, cache_dir=tmp_path / "cache")


@pytest.mark.parametrize(
    ("outcome", "losses", "expected"),
    [
        ("oom", [], "baseline run b ended oom: out of memory"),
        ("ok", [4.0, 3.9], "baseline run b has no complete loss curve for steps 1..20"),
    ],
)
def test_a_baseline_record_that_cannot_serve_names_its_file(
    tmp_path: Path, outcome: str, losses: list[float], expected: str
) -> None:
    """A --baseline-run record that ended badly or is too short: one line naming the record file, nothing run."""
    fields = {
        "recipe_id": "llama3-tiny/cpu",
        "recipe_hash": content_hash(BASE.read_text()),
        "hardware": "cpu",
        "stack": StackFingerprint(python="3.11", torch="2.13.0", torchtitan="0.3.0"),
        "launch": LaunchShape(launcher="local", nodes=1, devices_per_node=1, world_size=1),
    }
    reason = "out of memory" if outcome == "oom" else ""
    base = write_record(
        RunRecord(
            run_id="b",
            outcome=outcome,
            reason=reason,
            steps=[StepMetric(step=i + 1, loss=x) for i, x in enumerate(losses)],
            **fields,
        ),
        tmp_path / "b.json",
    )
    cand_recipe = write(tmp_path, "ac.yaml", levers={"activation_checkpoint": "none"})
    fields["recipe_hash"] = content_hash(cand_recipe.read_text())
    cand = write_record(RunRecord(run_id="c", outcome="ok", **fields), tmp_path / "c.json")
    with pytest.raises(GateInputError) as info:
        run_gate(BASE, cand_recipe, baseline_run=base, candidate_run=cand, cache_dir=tmp_path / "cache")
    assert str(info.value) == f"{base}: {expected}"


def test_rendering(tmp_path: Path) -> None:
    cand = write(
        tmp_path, "wd.yaml", workload={"module": "bot.inrank.workloads.variants", "config": "weight_decay_off"}
    )
    v = run_gate(BASE, cand, config_only=True)
    text = render_verdict(v)
    assert text.startswith("**gate: REJECT** at the config stage (tier X)")
    assert "weight_decay: 0.1 -> 0.0" in text and "- [ ] tiers" in text
    line = json.loads(verdict_json(v))
    assert list(line)[:4] == ["verdict", "stage", "tier", "reasons"] and line["verdict"] == "reject"


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        (b"{}", "{path}: not a run record: run_id: missing (a required field)"),
        (
            b'{"run_id": "x", "recipe_id": "r", "recipe_hash": "0000", "hardware": "cpu"}',
            "{path}: not a run record: stack: missing (a required field)",
        ),
        (b'{"run_id": 5}', "{path}: not a run record: run_id: expected a string; got 5"),
        (b"[1, 2]", "{path}: not a run record: expected a JSON object; got list"),
        (b'{"run_id": \n', "{path}:2: not a run record: not valid JSON (Expecting value, column 1)"),
        (b'{"run_id": "caf\xe9"}', "{path}:1: not UTF-8 text (byte 0xe9 at offset 15); save the file as UTF-8"),
    ],
)
def test_a_damaged_run_record_is_one_line_naming_the_file_and_its_first_wrong_field(
    tmp_path: Path, content: bytes, expected: str
) -> None:
    rec = tmp_path / "record.json"
    rec.write_bytes(content)
    with pytest.raises(GateInputError) as info:
        run_gate(BASE, BASE, baseline_run=rec, candidate_run=rec, cache_dir=tmp_path / "cache")
    assert str(info.value) == expected.format(path=rec)
    assert not (tmp_path / "cache").exists()  # nothing was run


def test_a_recipe_that_is_not_utf8_is_one_line(tmp_path: Path) -> None:
    bad = tmp_path / "latin1.yaml"
    bad.write_bytes(BASE.read_bytes().replace(b"# ", b"# \xe9 ", 1))
    with pytest.raises(GateInputError, match=rf"^{re.escape(str(bad))}:1: not UTF-8 text \(byte 0xe9"):
        run_gate(BASE, bad, config_only=True)
