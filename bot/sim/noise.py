"""Seeded measurement noise and a modelled loss curve; everything here is *simulated*.

Throughput noise follows docs/reference/performance-model.md §5: run-to-run spread of about 1-3 % on one allocation (torchtitan
autoresearch: "TPS fluctuates ~1-3 %"; Llama 3: 1-2 % diurnal swing). A run draws one offset (allocation / clock
state, sigma 1.2 %) and each step adds jitter (sigma 1 %), with rare slow steps (stragglers, GC). The same seed and
the same run key always give the same numbers.

The loss curve depends only on the objective (model, global batch, sequence length, lr schedule, data seed), never
on the layout, so every legal layout of the same objective gets the same curve up to tiny seeded noise -- which is
what a correctness gate must see for a throughput-only change.
"""

from __future__ import annotations

import hashlib
import json
import math
from typing import Any

import numpy as np

RUN_SIGMA = 0.012
STEP_SIGMA = 0.010
SLOW_STEP_P = 0.02
SLOW_STEP_FACTOR = 0.85


class SimulatedSeries(list):
    """A list of floats that says it is simulated (``.label == "simulated"``)."""

    label = "simulated"
    simulated = True


def stable_seed(*parts: Any) -> int:
    """A process-independent 63-bit seed from JSON-able parts (Python's hash() is salted per process)."""
    blob = json.dumps(parts, sort_keys=True, default=str).encode()
    return int.from_bytes(hashlib.sha256(blob).digest()[:8], "big") >> 1


def run_offset(seed: int, key: str) -> float:
    """Multiplicative run-level factor (about 1 +- 1.2 %), fixed by seed and run key."""
    rng = np.random.default_rng(stable_seed("run", seed, key))
    return float(np.clip(1.0 + rng.normal(0.0, RUN_SIGMA), 0.95, 1.05))


def step_throughputs(tps: float, n_steps: int, seed: int, key: str) -> SimulatedSeries:
    """Per-step noisy tokens/s around the model value ``tps`` for ``n_steps`` steps (simulated)."""
    if n_steps < 0:
        raise ValueError(f"n_steps must be >= 0, got {n_steps}")
    rng = np.random.default_rng(stable_seed("steps", seed, key))
    base = tps * run_offset(seed, key)
    jitter = np.clip(rng.normal(0.0, STEP_SIGMA, n_steps), -0.04, 0.04)
    slow = rng.random(n_steps) < SLOW_STEP_P
    values = base * (1.0 + jitter) * np.where(slow, SLOW_STEP_FACTOR, 1.0)
    return SimulatedSeries(float(v) for v in values)


def measured_throughput(tps: float, seed: int, key: str, steps: int = 20, warmup: int = 5) -> float:
    """What a benchmark would report: the median of the post-warm-up steps (simulated)."""
    if tps <= 0:
        return 0.0
    values = step_throughputs(tps, steps, seed, key)[warmup:]
    return float(np.median(values)) if values else tps * run_offset(seed, key)


def sim_loss_curve(
    steps: int,
    seed: int,
    *,
    model: str = "llama3.1-8b",
    global_batch_size: int = 256,
    seq_len: int = 8192,
    lr: float = 3e-4,
    warmup_steps: int = 200,
    total_steps: int = 10000,
    start_step: int = 1,
    noise: float = 0.004,
    perturbation: int | None = None,
) -> SimulatedSeries:
    """Modelled training loss for steps ``start_step .. start_step + steps - 1`` (simulated).

    A power law in tokens seen, ``L = 1.7 + 9 * (tokens / 1e6 + 1)^-0.32``, slowed during warm-up and by a
    too-small lr, with seeded Gaussian noise of relative size ``noise``. Inputs are the objective only; pass
    ``perturbation`` (any int) to emulate reduction-order drift between layouts (adds 1e-3 relative noise).
    """
    if steps < 0:
        raise ValueError(f"steps must be >= 0, got {steps}")
    rng = np.random.default_rng(
        stable_seed("loss", seed, model, global_batch_size, seq_len, lr, warmup_steps, total_steps)
    )
    drift = np.random.default_rng(stable_seed("drift", perturbation)) if perturbation is not None else None
    noise_all = rng.normal(0.0, noise, start_step + steps)
    lr_scale = min(1.0, (lr / 3e-4) ** 0.25) if lr > 0 else 0.0
    values = SimulatedSeries()
    for i in range(start_step, start_step + steps):
        effective = min(i, warmup_steps) / 2.0 + max(0, i - warmup_steps)  # warm-up ramps lr linearly
        tokens = effective * lr_scale * global_batch_size * seq_len
        loss = 1.7 + 9.0 * (tokens / 1e6 + 1.0) ** -0.32
        loss *= 1.0 + noise_all[i]
        if drift is not None:
            loss *= 1.0 + drift.normal(0.0, 1e-3)
        values.append(float(loss) if math.isfinite(loss) else float("nan"))
    return values
