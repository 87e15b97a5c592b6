"""The ``sim`` backend: a RunRecord from the calibrated cluster simulator, labelled simulated.

No device is used: the outcome (``ok``/``oom``/``invalid``), per-step tokens/s with seeded run-to-run
noise (run k of a campaign, or of the runner object, is seeded with ``seed * 100003 + k``), peak memory,
MFU and the step-time breakdown (compute, exposed communication, bubble, recompute) come from :mod:`bot.sim`;
the loss curve is the simulator's modelled curve, the same for every legal layout of one objective, so the gate
path runs. ``device_hours`` is what the run would
cost on the simulated cluster (start-up plus the benchmark steps, times the devices).
Simulated records never enter ``results/`` or ``leaderboard.md``.
"""

from __future__ import annotations

import itertools
import math
from pathlib import Path

from bot.core.recipe import Recipe
from bot.core.records import LaunchShape, Outcome, RunRecord, StackFingerprint, StepMetric, content_hash
from bot.runner.base import EarlyStop, early_stop_reason, git_commit, new_run_id, summarize, wall_cap_reason
from bot.sim.models import model_for, model_label

SIM_STARTUP_S = 240.0  # launch, init, checkpoint load and compile on a large cluster (modelled)


class SimRunner:
    def __init__(self, *, seed: int = 0, startup_s: float = SIM_STARTUP_S) -> None:
        self.seed = seed
        self.counter = itertools.count()
        self.startup_s = startup_s

    def run(
        self,
        recipe: Recipe,
        *,
        steps: int | None = None,
        out_dir: Path | None = None,
        recipe_path: str | None = None,
        recipe_text: str | None = None,
        max_wall_s: float | None = None,
        early_stop: EarlyStop | None = None,
        run_index: int | None = None,
    ) -> RunRecord:
        """``run_index``: the run's place in its campaign (0 for the first), which seeds its noise; without it the
        runner counts its own runs. A campaign resumed in a new process hands it in, so a resumed campaign draws
        the same noise as one that ran through."""
        from bot.sim.noise import sim_loss_curve
        from bot.sim.simulate import simulate

        steps = steps or recipe.bench.steps
        seed = self.seed * 100_003 + (next(self.counter) if run_index is None else run_index)
        c = recipe.cluster
        res = simulate(
            model_for(recipe.workload),
            c.hardware,
            c.nodes,
            c.devices_per_node,
            dict(recipe.levers),
            dict(recipe.pinned),
            seed,
        )
        metrics: list[StepMetric] = []
        wall = 30.0  # an invalid layout is refused at start-up, before any step
        if res.outcome == "ok":
            p = recipe.pinned
            loss = sim_loss_curve(
                steps,
                int(p.get("debug.seed", 0)),
                model=model_label(recipe.workload),
                global_batch_size=int(p["training.global_batch_size"]),
                seq_len=int(p["training.seq_len"]),
                lr=float(p["optimizer.lr"]),
                warmup_steps=int(p.get("lr_scheduler.warmup_steps", 0)),
                total_steps=int(p["lr_scheduler.total_steps"]),
            )
            tps = res.step_tps(steps)
            t = 0.0
            for i in range(steps):
                step_time = (res.tokens_per_step or 0) / (tps[i] * recipe.devices) if tps[i] else res.step_time_s or 0.0
                t += step_time
                metrics.append(
                    StepMetric(
                        step=i + 1,
                        loss=loss[i],
                        grad_norm=None,
                        tps=tps[i],
                        memory_gib=res.peak_memory_gib,
                        memory_pct=100.0 * (res.peak_memory_gib or 0) / (res.memory_capacity_gib or 1),
                        mfu=(res.mfu or 0) * 100,
                        time_s=t,
                    )
                )
            wall = self.startup_s + t
        elif res.outcome == "oom":
            wall = self.startup_s  # dies in the first step
        outcome: Outcome = res.outcome
        reason = res.reason
        for i in range(
            len(metrics) - 1
        ):  # a clearly slower trial ends as soon as the rule sees it (a completed run is ok)
            why = early_stop_reason(metrics[: i + 1], recipe.bench.warmup_steps, early_stop)
            if why is not None:
                metrics, wall, outcome, reason = (
                    metrics[: i + 1],
                    self.startup_s + (metrics[i].time_s or 0.0),
                    "stopped",
                    why,
                )
                break
        if (
            max_wall_s is not None and wall > max_wall_s
        ):  # the wall-clock cap (a campaign's budget cap) stops it where it got to
            metrics = [m for m in metrics if self.startup_s + (m.time_s or 0.0) <= max_wall_s]
            reason = f"{wall_cap_reason(max_wall_s)} (the run needed {wall:,.0f} s)"
            wall, outcome = (
                math.floor(max_wall_s * 1000) / 1000,
                "timeout",
            )  # the summary keeps milliseconds: never round up past the cap
        summary = summarize(
            metrics,
            warmup_steps=recipe.bench.warmup_steps,
            devices=recipe.devices,
            wall_s=wall,
            startup_s=self.startup_s if metrics else None,
            tokens_per_step=res.tokens_per_step,
            memory_capacity_gib=res.memory_capacity_gib,
        )
        if outcome == "oom":
            summary.peak_memory_gib = res.peak_memory_gib
        # the recipe file's own text, as the local runner hashes it (the report job checks the hash against the file)
        text = (
            recipe_text
            if recipe_text is not None
            else (
                Path(recipe_path).read_text()
                if recipe_path and Path(recipe_path).is_file()
                else recipe.model_dump_json()
            )
        )
        return RunRecord(
            run_id=new_run_id(),
            recipe_id=recipe.name,
            recipe_path=recipe_path,
            recipe_hash=content_hash(text),
            git_commit=git_commit(Path(recipe_path).resolve().parent)
            if recipe_path and Path(recipe_path).is_file()
            else None,
            model=model_label(recipe.workload),
            moe=model_for(recipe.workload).is_moe,
            hardware=c.hardware,
            levers=recipe.levers,
            pinned=recipe.pinned,
            stack=StackFingerprint(
                python="-", torch="simulated", torchtitan="0.3.0", device_name=c.hardware, device_family="sim"
            ),
            launch=LaunchShape(
                launcher="sim", nodes=c.nodes, devices_per_node=c.devices_per_node, world_size=recipe.devices
            ),
            outcome=outcome,
            reason=reason,
            steps=metrics,
            breakdown=res.breakdown.model_dump() if res.breakdown else {},
            summary=summary,
            usd_per_device_hour=c.usd_per_device_hour,
            simulated=True,
            log_tail="SIMULATED run: " + "; ".join(res.notes)[:2000],
        )
