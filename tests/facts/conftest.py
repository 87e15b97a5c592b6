"""Each facts test reads and writes its own disk cache."""

import pytest


@pytest.fixture(autouse=True)
def _facts_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("ATTUNE_CACHE_DIR", str(tmp_path / "cache"))
    from bot.sim.models import _spec

    _spec.cache_clear()
    yield
    _spec.cache_clear()
