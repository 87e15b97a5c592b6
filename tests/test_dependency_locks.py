"""The hash-locked requirement files (requirements/) against pyproject.toml, and the installs that read them.

Offline and fast: the lock's header carries a fingerprint of the dependency lists it was compiled from
(requirements/inputs.py), so a dependency edited in pyproject.toml without ``requirements/update`` fails here; every
direct requirement is pinned in the lock at a version its specifier admits; every pin carries hashes; every workflow
install and ``./dev`` read a lock with ``--require-hashes`` and install the project with ``--no-deps``."""

from __future__ import annotations

import importlib.util
import re
import tomllib
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parents[1]
LOCKS = {"runtime.txt": ("dependencies",), "test.txt": ("dependencies", "test")}
PIN = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==([^\s;\\]+)")
# the torch stack is the machine's own (README, "Bring your own torch"); hosted jobs add requirements/torch-cpu.txt
NEVER_LOCKED = {"torch", "triton"}


def inputs_module():  # noqa: ANN201 - a module object
    spec = importlib.util.spec_from_file_location("lock_inputs", ROOT / "requirements" / "inputs.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def entries(path: Path) -> dict[str, tuple[str, list[str]]]:
    """Lock file -> {name: (version, hashes)}; a requirement's continuation lines hold its hashes."""
    found: dict[str, tuple[str, list[str]]] = {}
    current = None
    for line in path.read_text().splitlines():
        pin = PIN.match(line)
        if pin:
            current = canonicalize_name(pin.group(1))
            found[current] = (pin.group(2), [])
        elif line.startswith("    --hash=sha256:") and current is not None:
            found[current][1].append(line.split(":", 1)[1].rstrip(" \\"))
        elif line and not line.startswith((" ", "#")):
            raise AssertionError(f"{path.name}: a line that is not a pinned requirement: {line!r}")
    return found


def declared(groups: tuple[str, ...]) -> list[Requirement]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    lists = {"dependencies": project["dependencies"], **project.get("optional-dependencies", {})}
    return [Requirement(text) for group in groups for text in lists[group]]


@pytest.mark.parametrize("lock", sorted(LOCKS))
def test_the_lock_was_compiled_from_pyproject_as_it_is(lock: str) -> None:
    header = next(
        ln for ln in (ROOT / "requirements" / lock).read_text().splitlines() if ln.startswith("# inputs-sha256: ")
    )
    assert header.removeprefix("# inputs-sha256: ") == inputs_module().fingerprint(ROOT), (
        f"requirements/{lock} was compiled from other dependency lists than pyproject.toml's: run requirements/update "
        "(docs/dependencies.md)"
    )


def test_the_fingerprint_moves_with_every_dependency_list(tmp_path: Path) -> None:
    """A changed range in either list, or another torch pin, is another fingerprint (the check above would fail)."""
    (tmp_path / "requirements").mkdir()
    torch_cpu = (ROOT / "requirements" / "torch-cpu.txt").read_text()
    text = (ROOT / "pyproject.toml").read_text()
    module = inputs_module()

    def fingerprint(pyproject: str, torch: str = torch_cpu) -> str:
        (tmp_path / "pyproject.toml").write_text(pyproject)
        (tmp_path / "requirements" / "torch-cpu.txt").write_text(torch)
        return module.fingerprint(tmp_path)

    base = fingerprint(text)
    assert base == module.fingerprint(ROOT)
    assert fingerprint(text.replace('"pydantic>=2.6"', '"pydantic>=2.7"')) != base
    assert fingerprint(text.replace('"pytest>=8"', '"pytest>=8",\n  "tomli"')) != base
    assert fingerprint(text, torch_cpu.replace("torch==2.13.0+cpu", "torch==2.14.0+cpu")) != base
    assert fingerprint(text.replace('name = "attune"', 'name = "attune2"')) == base  # not a dependency


@pytest.mark.parametrize(("lock", "groups"), sorted(LOCKS.items()))
def test_every_declared_requirement_is_pinned_with_hashes(lock: str, groups: tuple[str, ...]) -> None:
    pins = entries(ROOT / "requirements" / lock)
    for req in declared(groups):
        name = canonicalize_name(req.name)
        assert name in pins, f"requirements/{lock}: {req.name} (pyproject.toml) is not locked"
        assert req.specifier.contains(pins[name][0], prereleases=True), (
            f"requirements/{lock}: {req.name}=={pins[name][0]} is outside {req}"
        )
    for name, (version, hashes) in pins.items():
        assert hashes and all(re.fullmatch(r"[0-9a-f]{64}", h) for h in hashes), (
            f"requirements/{lock}: {name}=={version} has no hash"
        )
    assert not NEVER_LOCKED & set(pins) and not any(n.startswith("nvidia-") for n in pins), sorted(pins)


def test_the_runtime_lock_is_the_test_lock_s_runtime_part() -> None:
    """The jobs run on the versions ./dev tests (and the act harness offers the test venv's packages as installed)."""
    runtime, test = entries(ROOT / "requirements" / "runtime.txt"), entries(ROOT / "requirements" / "test.txt")
    assert {n: v for n, (v, _) in runtime.items()} == {n: test[n][0] for n in runtime}
    assert set(test) > set(runtime)


def test_the_hosted_jobs_torch_is_pinned_by_hash() -> None:
    text = (ROOT / "requirements" / "torch-cpu.txt").read_text()
    assert re.search(r"^torch==2\.13\.0\+cpu ;[^\n]*\\\n\s+--hash=sha256:[0-9a-f]{64}$", text, re.M), text


def test_every_install_reads_a_lock_with_hashes_and_the_project_without_dependencies() -> None:
    """No `pip install .` resolving ranges at run time: each install of the project is `--no-deps`, preceded by a
    `--require-hashes -r requirements/...` install; ./dev's stamp covers the lock, so a new lock reinstalls."""
    sources = {p.name: p.read_text() for p in sorted((ROOT / ".github" / "workflows").glob("*.yml"))}
    sources["dev"] = (ROOT / "dev").read_text()
    project_installs = 0
    for name, text in sources.items():
        lines = [
            ln.strip() for ln in text.splitlines() if re.search(r"pip install\b", ln) and not ln.strip().startswith("#")
        ]
        for i, line in enumerate(lines):
            if re.search(r"\s(-e\s+)?\.$", line):
                project_installs += 1
                assert "--no-deps" in line and "--no-build-isolation" in line, f"{name}: {line}"
                assert i > 0 and "--require-hashes -r requirements/" in lines[i - 1], (
                    f"{name}: no locked install before {line}"
                )
            elif "torch==" not in line and not line.startswith("pip_q=("):  # ./dev's torch wheel: installed as before
                assert "--require-hashes" in line and re.search(r"-r requirements/(runtime|test)\.txt", line), (
                    f"{name}: {line}"
                )
    assert project_installs == 6  # campaign, leaderboard, trial (check, run, report), ./dev
    assert "requirements/test.txt" in next(ln for ln in sources["dev"].splitlines() if ln.startswith("want="))
