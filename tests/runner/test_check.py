"""bot/runner/check.py: whether a valid recipe can run on its launcher, before anything starts. Every shipped recipe
can; a simulated one on hardware or a model the simulator's zoo does not know, or with no model, cannot (one line at
the field's own line, listing what the zoo knows); a local one on more than one node cannot; nor can any layout
torchtitan refuses (the simulator's checks, or torchtitan's own ConfigManager); Slurm's hardware is not checked."""

from __future__ import annotations

from pathlib import Path

import pytest

from bot.core.recipe import RecipeError, load_recipe
from bot.runner import check_runnable
from bot.runner.check import runnable_problem
from bot.sim.hardware import HARDWARE
from bot.sim.zoo import ZOO

REPO = Path(__file__).resolve().parents[2]
SIM = REPO / "bot" / "bench" / "tasks" / "llama3.1-8b" / "h100x8.yaml"
CPU = REPO / "recipes" / "llama3-tiny" / "cpu.yaml"
SLURM = REPO / "recipes" / "llama3-tiny" / "cpu-slurm.yaml"


def edited(tmp_path: Path, source: Path, old: str, new: str) -> tuple[Path, int]:
    """A copy of ``source`` with line ``old`` replaced (or deleted when ``new`` is empty), and that line's number."""
    lines = source.read_text().splitlines(keepends=True)
    n = next(i for i, line in enumerate(lines) if line.rstrip("\n") == old)
    lines[n : n + 1] = [new + "\n"] if new else []
    path = tmp_path / source.name
    path.write_text("".join(lines))
    return path, n + 1


def refusal(path: Path) -> str:
    with pytest.raises(RecipeError) as info:
        check_runnable(load_recipe(path), path)
    message = str(info.value)
    assert "\n" not in message
    return message


@pytest.mark.parametrize(
    "path",
    sorted([*(REPO / "recipes").rglob("*.yaml"), *(REPO / "bot/bench/tasks").rglob("*.yaml")]),
    ids=lambda p: str(p.relative_to(REPO)),
)
def test_every_shipped_recipe_can_run_on_its_launcher(path: Path) -> None:
    assert check_runnable(load_recipe(path), path) is None


def test_hardware_the_simulator_does_not_know_is_named_at_its_line_with_the_known_ones(tmp_path: Path) -> None:
    path, line = edited(tmp_path, SIM, "  hardware: h100-sxm-80gb", "  hardware: tpu9")
    message = refusal(path)
    assert message.startswith(f"{path}:{line}: cluster.hardware: 'tpu9' is unknown to the simulator; known: ")
    assert message.endswith(", ".join(sorted(HARDWARE)))


def test_a_model_neither_torchtitan_nor_the_zoo_knows_is_named_at_its_config_with_the_known_ones(
    tmp_path: Path,
) -> None:
    path, _ = edited(tmp_path, SIM, "  model: llama3.1-8b", "  model: gpt-9")
    text = path.read_text().replace("config: llama3_8b", "config: llama3_nonexistent")
    path.write_text(text)
    line = text.splitlines().index("  config: llama3_nonexistent") + 1
    message = refusal(path)
    assert message.startswith(f"{path}:{line}: workload.config: the simulator cannot know this model: ")
    assert "llama3_nonexistent" in message and message.endswith(", ".join(sorted(ZOO)))


def test_a_simulated_recipe_without_a_model_label_simulates_the_built_model(tmp_path: Path) -> None:
    path, _ = edited(tmp_path, SIM, "  model: llama3.1-8b", "")
    assert runnable_problem(load_recipe(path)) is None


def test_a_local_recipe_on_two_nodes_is_refused_at_its_nodes(tmp_path: Path) -> None:
    path, line = edited(tmp_path, CPU, "  nodes: 1", "  nodes: 2")
    message = refusal(path)
    assert message.startswith(f"{path}:{line}: cluster.nodes: the local launcher runs one node; got 2")


def test_hardware_or_models_outside_the_zoo_are_not_the_simulators_business_elsewhere(tmp_path: Path) -> None:
    path, _ = edited(tmp_path, SLURM, "  hardware: cpu", "  hardware: tpu9")
    assert check_runnable(load_recipe(path), path) is None  # Slurm's nodes answer for their hardware


def test_a_simulated_layout_with_more_tensor_parallel_ranks_than_devices_is_refused_at_that_lever(
    tmp_path: Path,
) -> None:
    path, line = edited(
        tmp_path,
        SIM,
        "  parallelism.tensor_parallel_degree: 1                      # llama3_8b: no TP",
        "  parallelism.tensor_parallel_degree: 16",
    )
    message = refusal(path)
    assert message.startswith(
        f"{path}:{line}: levers.parallelism.tensor_parallel_degree: the layout cannot run: world size 8 "
    )


def test_a_simulated_global_batch_the_data_parallel_degree_does_not_divide_is_refused_at_the_pin(
    tmp_path: Path,
) -> None:
    path, line = edited(
        tmp_path,
        SIM,
        next(ln for ln in SIM.read_text().splitlines() if "training.global_batch_size" in ln),
        "  training.global_batch_size: 7",
    )
    message = refusal(path)
    assert message.startswith(f"{path}:{line}: pinned.training.global_batch_size: the layout cannot run: ")
    assert "not divisible" in message


def test_a_pipeline_with_fewer_microbatches_than_stages_is_refused_at_the_local_batch(tmp_path: Path) -> None:
    """The simulator's reason names the local batch the microbatches come from (it used to name no lever, and the
    refusal pointed at cluster.devices_per_node)."""
    source = REPO / "bot" / "bench" / "tasks" / "llama3.1-405b" / "h200x128.yaml"
    text = source.read_text().splitlines()
    path, _ = edited(
        tmp_path,
        source,
        next(ln for ln in text if ln.startswith("  parallelism.pipeline_parallel_schedule:")),
        "  parallelism.pipeline_parallel_schedule: 1F1B",
    )
    path, _ = edited(
        tmp_path,
        path,
        next(ln for ln in text if ln.startswith("  training.global_batch_size:")),
        "  training.global_batch_size: 8",
    )
    path, line = edited(
        tmp_path,
        path,
        next(ln for ln in text if ln.startswith("  training.local_batch_size:")),
        "  training.local_batch_size: 4",
    )
    message = refusal(path)
    assert message.startswith(
        f"{path}:{line}: levers.training.local_batch_size: the layout cannot run: 1F1B needs at least "
        "as many microbatches (4 = training.local_batch_size/microbatch size) as stages (8; "
    )


def test_a_local_layout_torchtitan_refuses_is_refused_before_any_launch(tmp_path: Path) -> None:
    """torchtitan's own ConfigManager resolves a local recipe in-process, as the runner does before a launch; two
    replicas on a one-device machine cannot start, and the error points at the degree that asks for them."""
    lines = CPU.read_text().splitlines()
    n = lines.index("levers:")
    lines.insert(n + 1, "  parallelism.data_parallel_replicate_degree: 2")
    path = tmp_path / CPU.name
    path.write_text("\n".join(lines) + "\n")
    message = refusal(path)
    assert message.startswith(
        f"{path}:{n + 2}: levers.parallelism.data_parallel_replicate_degree: the layout cannot run: "
    )
    assert "must multiply to the 1 devices" in message


def test_a_slurm_layout_is_checked_though_its_hardware_is_not(tmp_path: Path) -> None:
    path, _ = edited(tmp_path, SLURM, "  nodes: 2", "  nodes: 3")
    message = refusal(path)
    assert message.startswith(f"{path}:") and "must multiply to the 3 devices" in message
