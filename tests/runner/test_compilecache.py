"""bot/runner/compilecache.py: a run that did not end ok never leaves a half-written Inductor cache entry to a later run.

The failure it prevents: a run killed while the C++ compiler writes ``<cache>/xx/<key>.main.so`` leaves a short file,
and every later compile of that kernel fails with ``ImportError: … file too short`` (Inductor reuses a file by its
existence). The unit tests plant such files; the last test makes the failure with a real ``torch.compile``.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from bot.core.recipe import Recipe
from bot.runner.compilecache import (
    CACHE_ENV,
    RUNS_DIR,
    CompileCache,
    Generations,
    cache_root,
    scrub,
    torch_default,
)
from bot.runner.local import LocalRunner


def _old(path: Path, text: str = "x", age_s: float = 3600.0) -> Path:
    """A file an earlier run wrote (its times set back, as far as the file system lets us: mtime)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    then = time.time() - age_s
    os.utime(path, (then, then))
    return path


def _new(path: Path, text: str = "") -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def _backdate_ctime(monkeypatch: pytest.MonkeyPatch, old: set[Path]) -> None:
    """ctime cannot be set back: make ``os.lstat`` report the files in ``old`` as an hour old."""
    real = os.lstat

    def lstat(path: str | os.PathLike[str], *args: object, **kwargs: object) -> os.stat_result:
        st = real(path, *args, **kwargs)  # type: ignore[arg-type]
        if Path(path) in old:
            fields = list(st)
            fields[9] = fields[8]  # ctime := mtime
            return os.stat_result(fields)
        return st

    monkeypatch.setattr("bot.runner.compilecache.os.lstat", lstat)


def test_scrub_removes_what_changed_since_but_locks_and_markers(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    kept = _old(tmp_path / "ab" / "cab.main.so")
    _backdate_ctime(monkeypatch, {kept})
    since = time.time()
    half = _new(tmp_path / "iz" / "ciz.main.so")  # empty: what a killed compiler leaves
    triton = _new(tmp_path / "triton" / "0" / "K" / "k.json", "{}")
    lock = _new(tmp_path / "locks" / "ciz.lock")  # another run may hold it
    marker = _new(tmp_path / RUNS_DIR / "abc.run")
    assert scrub(tmp_path, since) == 2
    assert kept.exists() and lock.exists() and marker.exists()
    assert not half.exists() and not triton.exists()


def test_a_run_that_ends_ok_keeps_its_entries_one_that_does_not_loses_them(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cache = CompileCache(tmp_path)
    earlier = _old(tmp_path / "ab" / "cab.main.so")
    old = {earlier}
    _backdate_ctime(monkeypatch, old)
    ok = cache.begin()
    good = _new(tmp_path / "cd" / "ccd.main.so", "ELF")
    assert ok.end(ok=True) == 0 and good.exists()
    assert not ok.marker.exists()
    old.add(_old(good, "ELF"))  # an hour ago, as far as the next run can tell
    killed = cache.begin()
    half = _new(tmp_path / "iz" / "ciz.main.so")
    assert killed.end(ok=False) == 1
    assert not half.exists() and earlier.exists() and good.exists()
    assert list((tmp_path / RUNS_DIR).glob("*.run")) == []


def test_a_runner_that_died_is_cleaned_up_for_by_the_next_run(tmp_path: Path) -> None:
    """A runner SIGKILLed mid-run never calls ``end``: its marker is left, held by nobody; the next run scrubs."""
    code = (
        "import os, sys, time; from pathlib import Path; from bot.runner.compilecache import CompileCache; "
        "lease = CompileCache(Path(sys.argv[1])).begin(); p = Path(sys.argv[1]) / 'iz'; p.mkdir(); "
        "(p / 'ciz.main.so').write_text(''); print('ready', flush=True); time.sleep(600)"
    )
    dead = subprocess.Popen([sys.executable, "-c", code, str(tmp_path)], stdout=subprocess.PIPE, text=True)
    assert dead.stdout is not None and dead.stdout.readline().strip() == "ready"
    live = CompileCache(tmp_path).begin()  # beside a run that is going on: nothing of it is touched
    assert (tmp_path / "iz" / "ciz.main.so").exists()
    live.end(ok=True)
    dead.kill()
    dead.wait()
    after = CompileCache(tmp_path).begin()
    assert not (tmp_path / "iz" / "ciz.main.so").exists()
    assert [m.name for m in (tmp_path / RUNS_DIR).glob("*.run")] == [after.marker.name]
    after.end(ok=True)


def test_the_cache_is_the_operators_choice_else_the_runners_own(tmp_path: Path) -> None:
    assert cache_root({}, {}, default=tmp_path / "own") == tmp_path / "own"
    assert cache_root({CACHE_ENV: str(tmp_path / "job")}, {}, default=tmp_path / "own") == tmp_path / "job"
    assert cache_root({CACHE_ENV: "/a"}, {CACHE_ENV: "/b"}, default=tmp_path) == Path("/b")  # extra_env over os.environ
    # torch writes its default into the process's environment once anything asks Inductor for its cache: not a choice
    assert cache_root({CACHE_ENV: str(torch_default())}, {}, default=tmp_path / "own") == tmp_path / "own"


@pytest.mark.parametrize(
    ("outcome", "raises", "kept"),
    [("ok", None, True), ("timeout", None, False), ("crash", None, False), (None, KeyboardInterrupt, False)],
)
def test_the_local_runner_gives_each_run_its_cache_and_scrubs_after_a_failed_one(
    cpu_recipe: Recipe,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    outcome: str | None,
    raises: type[BaseException] | None,
    kept: bool,
) -> None:
    """The run's env names the runner's cache (over the recipe's own); what a run that did not end ok (stopped, timed
    out, hung, crashed, interrupted) wrote there is gone afterwards, what an ok run wrote stays."""
    monkeypatch.delenv(CACHE_ENV, raising=False)
    seen: dict[str, str] = {}

    def launch(self: LocalRunner, argv: list[str], env: dict[str, str], *args: object, **kwargs: object) -> tuple:
        seen.update(env)
        _new(Path(env[CACHE_ENV]) / "iz" / "ciz.main.so")  # the compiler was writing when the run ended
        if raises:
            raise raises()
        return outcome, "", [], "", 1.0, None

    monkeypatch.setattr(LocalRunner, "_launch", launch)
    recipe = cpu_recipe.model_copy(update={"env": {**cpu_recipe.env, CACHE_ENV: str(tmp_path / "recipes-own")}})
    runner = LocalRunner(compile_cache=tmp_path / "cache")
    if raises:
        with pytest.raises(raises):
            runner.run(recipe, steps=4, out_dir=tmp_path / "run")
    else:
        assert runner.run(recipe, steps=4, out_dir=tmp_path / "run").outcome == outcome
    assert seen[CACHE_ENV] == str(tmp_path / "cache")
    assert (tmp_path / "cache" / "iz" / "ciz.main.so").exists() == kept
    assert list((tmp_path / "cache" / RUNS_DIR).glob("*.run")) == []


def test_a_slurm_generation_is_retired_once(tmp_path: Path) -> None:
    gens = Generations(tmp_path / "state" / "compile-generation")
    first = gens.current()
    assert gens.current() == first and gens.path("/tmp/c/", first) == f"/tmp/c/g-{first}"
    gens.retire(first)
    second = gens.current()
    assert second != first
    gens.retire(first)  # a second failed job of the old generation: the new one stays
    assert gens.current() == second


def test_the_batch_script_exports_the_jobs_generation_over_the_recipes_cache(tmp_path: Path) -> None:
    from bot.core.recipe import load_recipe
    from bot.runner.slurm import SlurmRunner, batch_script

    recipe = load_recipe(Path(__file__).resolve().parents[2] / "recipes" / "llama3-tiny" / "cpu-slurm.yaml")
    recipe = recipe.model_copy(update={"env": {**recipe.env, CACHE_ENV: "/recipe/cache"}})
    runner = SlurmRunner(compile_state=tmp_path / "gen", extra_env={CACHE_ENV: "/scratch/inductor"})
    gen = runner._generation()
    path = runner._compile_cache(gen)
    assert path == f"/scratch/inductor/g-{gen}"
    body, _ = batch_script(recipe, steps=4, out_dir=tmp_path, extra_env=runner.extra_env, compile_cache=path)
    exports = [ln for ln in body.splitlines() if ln.startswith(f"export {CACHE_ENV}=")]
    assert exports[-1] == f"export {CACHE_ENV}={path}"
    runner._retire(gen)
    assert runner._compile_cache(runner._generation()) != path


PROBE = "import torch; f = torch.compile(lambda x: (x.sin() * 2 + x.cos()).sum()); print(float(f(torch.ones(64))))"


def _compile(cache: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, CACHE_ENV: str(cache), "OMP_NUM_THREADS": "1"}
    env.pop("TRITON_CACHE_DIR", None)
    return subprocess.run([sys.executable, "-c", PROBE], env=env, capture_output=True, text=True, timeout=300)


@pytest.mark.torchtitan
def test_a_real_half_written_kernel_breaks_the_next_compile_unless_scrubbed(tmp_path: Path) -> None:
    """Real Inductor (~45 s on 2 cores): a compile into the cache, then its ``.main.so`` files cut to nothing, as a
    kill mid-write leaves them. The next compile fails with "file too short" (the failure); after the run is ended
    not ok, the cache holds none of it and a compile succeeds."""
    cache = CompileCache(tmp_path)
    killed = cache.begin()
    first = _compile(tmp_path)
    assert first.returncode == 0, first.stderr[-2000:]
    sos = list(tmp_path.rglob("*.main.so"))
    assert sos
    for so in sos:
        so.write_bytes(b"")
    broken = _compile(tmp_path)
    assert broken.returncode != 0 and "file too short" in broken.stderr
    assert killed.end(ok=False) > 0
    assert not any(so.exists() for so in sos)
    lease = cache.begin()
    again = _compile(tmp_path)
    lease.end(ok=again.returncode == 0)
    assert again.returncode == 0, again.stderr[-2000:]
    assert again.stdout.strip() == first.stdout.strip()
