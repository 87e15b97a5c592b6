"""gate/calibration.py: where bands live, when they are stale, which runs calibrate them."""

from __future__ import annotations

from pathlib import Path

from bot.bench.gate_faults import edit_recipe_text
from bot.core.recipe import parse_recipe_text
from gate.calibration import band_path, calibration_specs, load_band, objective_hash, save_band
from gate.convergence import LossBand, SignalBand

BASE_TEXT = (Path(__file__).resolve().parents[2] / "recipes" / "llama3-tiny" / "cpu.yaml").read_text()
STACK_KEY = "cpu/cpu/torch2.13.0+cpu/titan0.3.0"


def band_for(text: str, stack_key: str = STACK_KEY) -> LossBand:
    recipe = parse_recipe_text(text, "t")
    sb = SignalBand(signal="loss", quantum=1e-5, floor=2e-5, envelope=[0.0] * 3, band=[2e-5] * 3)
    return LossBand(
        recipe_id=recipe.name,
        stack_key=stack_key,
        objective_hash=objective_hash(recipe),
        safety=5,
        steps=3,
        signals={"loss": sb},
    )


def test_band_path_is_per_recipe_and_stack(tmp_path: Path) -> None:
    path = band_path(tmp_path, "llama3-tiny/cpu", STACK_KEY)
    assert path == tmp_path / "calibration" / "llama3-tiny" / "cpu" / "cpu_cpu_torch2.13.0+cpu_titan0.3.0.json"


def test_saved_band_loads_back_for_the_same_recipe_and_stack(tmp_path: Path) -> None:
    recipe = parse_recipe_text(BASE_TEXT, "base")
    save_band(tmp_path, band_for(BASE_TEXT))
    loaded = load_band(tmp_path, recipe, STACK_KEY)
    assert loaded is not None and loaded.signals["loss"].band == [2e-5] * 3
    # a lever change keeps the band (same objective); a new stack or a new objective recalibrates
    assert load_band(tmp_path, recipe.with_lever("compile.enable", True), STACK_KEY) is not None
    assert load_band(tmp_path, recipe, "cpu/cpu/torch2.14.0/titan0.3.0") is None
    other = parse_recipe_text(edit_recipe_text(BASE_TEXT, pinned={"debug.seed": 7}), "seed7")
    assert load_band(tmp_path, other, STACK_KEY) is None


def test_corrupt_band_is_ignored(tmp_path: Path) -> None:
    recipe = parse_recipe_text(BASE_TEXT, "base")
    path = band_path(tmp_path, recipe.name, STACK_KEY)
    path.parent.mkdir(parents=True)
    path.write_text("{not json")
    assert load_band(tmp_path, recipe, STACK_KEY) is None


def test_calibration_runs_are_repeat_perturbation_and_two_legit_variants() -> None:
    specs = calibration_specs(BASE_TEXT, steps=20)
    assert list(specs) == ["cal:repeat", "cal:init_perturb", "cal:ga_split", "cal:num_chunks"]
    assert specs["cal:repeat"].recipe_text == BASE_TEXT and specs["cal:repeat"].repeat == 1
    assert specs["cal:init_perturb"].hook == "init_perturb:1"
    assert parse_recipe_text(specs["cal:ga_split"].recipe_text, "x").levers["training.local_batch_size"] == 2
    assert parse_recipe_text(specs["cal:num_chunks"].recipe_text, "x").levers["loss.num_chunks"] == 2
