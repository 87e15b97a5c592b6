"""Shared fixtures for the runner tests: the shipped CPU recipe, as text and as a Recipe."""

from __future__ import annotations

from pathlib import Path

import pytest

from bot.core.recipe import Recipe, parse_recipe_text

REPO = Path(__file__).resolve().parents[2]
CPU_RECIPE = REPO / "recipes" / "llama3-tiny" / "cpu.yaml"


@pytest.fixture(scope="session")
def cpu_text() -> str:
    return CPU_RECIPE.read_text()


@pytest.fixture
def cpu_recipe(cpu_text: str) -> Recipe:
    return parse_recipe_text(cpu_text, str(CPU_RECIPE))


@pytest.fixture(scope="session")
def slurm_cluster():
    """A real two-node Slurm on this host (tests/runner/slurm_cluster.py), installed with apt when missing and we are
    root; stopped at the end of the session, also on failure. Where it cannot be had the tests skip and say why;
    under ``CI=true`` that is a failure. One cluster per pytest process: its only user is tests/runner/test_slurm.py,
    and the suite gives each file to one worker (``--dist loadfile``), so its jobs never meet a second cluster's on the
    rendezvous port."""
    import os

    from . import slurm_cluster as sc

    why = sc.install_packages()
    cluster = None
    if why is None:
        try:
            cluster = sc.start()
        except sc.ClusterError as exc:
            why = f"the test Slurm did not start: {exc}"
    if cluster is None:
        if os.environ.get("CI") == "true":
            pytest.fail(f"Slurm tests cannot run under CI=true: {why}")
        print(f"\nSlurm tests skipped: {why}")
        pytest.skip(f"Slurm tests skipped: {why}")
    try:
        yield cluster
    finally:
        cluster.stop()


CPU2_RECIPE = REPO / "recipes" / "llama3-tiny" / "cpu-2rank.yaml"


@pytest.fixture(scope="session")
def seed_cache(tmp_path_factory) -> Path:
    """One seed-checkpoint cache for the session's real runs (a seed costs ~15 s to make; the tests share it)."""
    return tmp_path_factory.mktemp("seed-cache")
