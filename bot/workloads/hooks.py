"""Test-only workload hooks, installed inside torchtitan ranks when ``ATTUNE_HOOK`` is set.

A hook is ``name`` or ``name:arg``. They exist to make real failures and real faults happen in
real torchtitan runs (tests, the gate's fault-injection benchmark); recipes never set them.

Failure hooks (runner tests):
- ``crash_at:N``  raise inside ``train_step`` at step N (a real crash).
- ``hang_at:N``   stop making progress at step N (sleep forever) — the runner must call it a hang.
- ``oom_at:N``    ask torch for an impossible host allocation at step N (torch's real OOM text).
"""

from __future__ import annotations

import time
from collections.abc import Callable

HOOKS: dict[str, Callable[[str], None]] = {}


def hook(name: str) -> Callable[[Callable[[str], None]], Callable[[str], None]]:
    def register(fn: Callable[[str], None]) -> Callable[[str], None]:
        HOOKS[name] = fn
        return fn

    return register


def _at_step(n: int, action: Callable[[], None]) -> None:
    from torchtitan.trainer import Trainer

    original = Trainer.train_step

    def train_step(self, data_iterator):
        if self.step == n:
            action()
        return original(self, data_iterator)

    Trainer.train_step = train_step


@hook("crash_at")
def crash_at(arg: str) -> None:
    def boom() -> None:
        raise RuntimeError(f"attune test hook: deliberate crash at step {arg}")

    _at_step(int(arg or 2), boom)


@hook("hang_at")
def hang_at(arg: str) -> None:
    def stall() -> None:
        while True:
            time.sleep(3600)

    _at_step(int(arg or 2), stall)


@hook("oom_at")
def oom_at(arg: str) -> None:
    def allocate() -> None:
        import torch

        torch.empty(1 << 46, dtype=torch.uint8)  # 64 TiB: torch's allocator refuses it

    _at_step(int(arg or 2), allocate)


def install(spec: str) -> None:
    """Install the hooks named in ``spec`` (comma-separated ``name[:arg]``)."""
    for part in filter(None, (p.strip() for p in spec.split(","))):
        name, _, arg = part.partition(":")
        if name not in HOOKS:
            raise SystemExit(f"attune: unknown workload hook {name!r}; known: {', '.join(sorted(HOOKS))}")
        HOOKS[name](arg)
