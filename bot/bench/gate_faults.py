"""Fault-injection benchmark of the correctness gate, on real CPU torchtitan runs of the tiny recipe.

Every case is a candidate recipe judged against a baseline by the real gate (config stage, then
the convergence stage on real ~20-step runs):

* **config faults** — objective changes made through the recipe (pins, precision levers, cluster
  layout) or through a config-function variant (``bot/inrank/workloads/variants.py``: optimizer
  hyperparameters, param groups and model config that torchtitan 0.3.0's frozen CLI cannot set).
  Most are rejected by the config stage with no run.
* **code faults** — the candidate recipe *is* the baseline (config stage: tier B) and a test hook
  (``bot/inrank/hooks.py``) changes the code path inside the ranks. The gate's rule for an
  identical config is that the runs must be bitwise identical, so the tier-B check must catch it.
  A fault whose curves come out bitwise identical to the baseline is reported as a **no-op**
  (shown ineffective), not as caught.
* **legitimate changes** — must pass. They are split: the *calibration* set
  (:func:`gate.calibration.calibration_specs`: a baseline repeat, an init perturbation, a
  grad-accumulation split, another ``loss.num_chunks``) builds the noise band; false rejects are
  counted on the *held-out* set only (AC modes, GC cadence, FSDP reshard policy, structured
  logging, optimizer implementations, unchunked loss, two more GA splits, the 2-rank layouts,
  compile).

Every run loads the objective's seed checkpoint (``bot/runner/seed.py``; made once on one rank with all degrees 1),
so 2-rank layouts start from the 1-rank baseline's weights and are legitimate tier-R changes: FSDP (also with
reshard never), TP with and without SP, PP with 1F1B, GPipe and Interleaved1F1B. DDP over 2 ranks (replicate 2) is
in the *calibration* set (a layout's reduction-order drift), the other layouts are held out and counted. Layout
faults are hooks on those layouts (``bot/inrank/hooks.py``: a TP plan that shards the norms or leaves a projection
unsharded, a PP split that drops or duplicates a layer, PP microbatch losses scaled by the microbatch count, the seed
checkpoint not loaded); CP cannot run on the CPU (``bot/core/layouts.py``) and is a config-stage reject.

Runs go through the content-keyed run cache (``gate/runs.py``) and the band is saved in the band
cache, so a rerun only redoes what changed. At most ``jobs`` runs at a time (use 2 at most on a
2-core machine); with ``jobs > 1`` every run uses one torch thread (thread count does not change
the numerics on this CPU, and every run of a benchmark uses the same setting).
"""

from __future__ import annotations

import io
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, Field
from ruamel.yaml import YAML

from bot.core.recipe import parse_recipe_text, set_lever_text
from bot.core.records import RunRecord, Scalar, Verdict, atomic_write_text
from gate.calibration import DEFAULT_CACHE, calibration_specs, objective_hash, save_band
from gate.config_check import check_config
from gate.convergence import DEFAULT_SAFETY, LossBand, calibrate_band, check_convergence, compare_signal
from gate.runs import RunSpec, lookup, run_key, run_many, stack_key

BASELINE_RECIPE = "llama3-tiny/cpu.yaml"  # in recipes/ of the repository at or above the working directory
VARIANTS = "bot.inrank.workloads.variants"
STEPS = 20

Kind = Literal["fault", "legit"]


class Case(BaseModel):
    """One benchmark case: a candidate made from a baseline by a few edits, or a hook."""

    name: str
    kind: Kind
    inject: Literal["config", "code", "layout"]
    what: str
    baseline: str = "base"  # key into BASELINES
    levers: dict[str, Scalar] = Field(default_factory=dict)
    pinned: dict[str, Scalar | None] = Field(default_factory=dict)  # None removes a pin
    cluster: dict[str, Any] = Field(default_factory=dict)
    workload: dict[str, str] = Field(default_factory=dict)
    hook: str | None = None

    @property
    def expected(self) -> str:
        return "reject" if self.kind == "fault" else "ok"


DDP2 = {"cluster": {"devices_per_node": 2}, "levers": {"parallelism.data_parallel_replicate_degree": 2}}
# 2-rank layouts over the 1-rank baseline (every run loads the objective's seed checkpoint, bot/runner/seed.py)
_ONE = {"parallelism.data_parallel_shard_degree": 1}
LAYOUT2: dict[str, dict[str, Any]] = {
    "fsdp2": {"levers": {"parallelism.data_parallel_shard_degree": 2}},
    "fsdp2_reshard_never": {
        "levers": {"parallelism.data_parallel_shard_degree": 2, "parallelism.fsdp_reshard_after_forward": "never"}
    },
    "tp2": {"levers": {**_ONE, "parallelism.tensor_parallel_degree": 2}},
    "tp2_nosp": {
        "levers": {**_ONE, "parallelism.tensor_parallel_degree": 2, "parallelism.enable_sequence_parallel": False}
    },
    "pp2": {"levers": {**_ONE, "parallelism.pipeline_parallel_degree": 2, "training.local_batch_size": 2}},
    "pp2_gpipe": {
        "levers": {
            **_ONE,
            "parallelism.pipeline_parallel_degree": 2,
            "training.local_batch_size": 2,
            "parallelism.pipeline_parallel_schedule": "GPipe",
        }
    },
    "pp2_interleaved": {
        "levers": {
            **_ONE,
            "parallelism.pipeline_parallel_degree": 2,
            "training.local_batch_size": 4,
            "parallelism.pipeline_parallel_schedule": "Interleaved1F1B",
        }
    },
    "cp2": {"levers": {**_ONE, "parallelism.context_parallel_degree": 2}},
}


def _layout(name: str) -> dict[str, Any]:
    spec = LAYOUT2[name]
    return {"cluster": {"devices_per_node": 2}, "levers": dict(spec["levers"])}


def _variant(config: str) -> dict[str, str]:
    return {"module": VARIANTS, "config": config}


def cases() -> list[Case]:
    """The benchmark's cases (faults first, then held-out legitimate changes)."""
    cfg = "config"
    faults = [
        Case(
            name="lr +10%",
            kind="fault",
            inject=cfg,
            what="peak LR 3e-3 -> 3.3e-3 (config function, pin updated)",
            workload=_variant("lr_up_10pct"),
            pinned={"optimizer.lr": 0.0033},
        ),
        Case(
            name="lr +10%, stale pin",
            kind="fault",
            inject=cfg,
            what="peak LR 3.3e-3 in the config function, pin left at 3e-3",
            workload=_variant("lr_up_10pct"),
        ),
        Case(
            name="clipping off",
            kind="fault",
            inject=cfg,
            what="max_norm 1.0 -> 1e9 (config function)",
            workload=_variant("clipping_off"),
        ),
        Case(
            name="max_norm 2.0",
            kind="fault",
            inject=cfg,
            what="clip threshold 1.0 -> 2.0 (recipe pin)",
            pinned={"training.max_norm": 2.0},
        ),
        Case(
            name="weight decay 0",
            kind="fault",
            inject=cfg,
            what="AdamW weight_decay 0.1 -> 0",
            workload=_variant("weight_decay_off"),
        ),
        Case(name="eps 1e-6", kind="fault", inject=cfg, what="AdamW eps 1e-8 -> 1e-6", workload=_variant("eps_1e6")),
        Case(
            name="beta2 0.999",
            kind="fault",
            inject=cfg,
            what="AdamW betas (0.9, 0.95) -> (0.9, 0.999)",
            workload=_variant("beta2_0999"),
        ),
        Case(
            name="no decay on norms",
            kind="fault",
            inject=cfg,
            what="a param group exempts norms and embeddings from weight decay",
            workload=_variant("no_decay_on_norms"),
        ),
        Case(name="SGD", kind="fault", inject=cfg, what="AdamW replaced by SGD", workload=_variant("sgd_optimizer")),
        Case(
            name="warm-up removed",
            kind="fault",
            inject=cfg,
            what="lr_scheduler.warmup_steps 5 -> 0",
            pinned={"lr_scheduler.warmup_steps": 0},
        ),
        Case(
            name="schedule 1000 -> 500",
            kind="fault",
            inject=cfg,
            what="lr_scheduler.total_steps 1000 -> 500",
            pinned={"lr_scheduler.total_steps": 500},
        ),
        Case(
            name="cosine decay",
            kind="fault",
            inject=cfg,
            what="lr_scheduler.decay_type linear -> cosine",
            pinned={"lr_scheduler.decay_type": "cosine"},
        ),
        Case(
            name="min lr 0",
            kind="fault",
            inject=cfg,
            what="lr_scheduler.min_lr_factor 0.1 -> 0",
            pinned={"lr_scheduler.min_lr_factor": 0.0},
        ),
        Case(name="seed 43", kind="fault", inject=cfg, what="debug.seed 42 -> 43", pinned={"debug.seed": 43}),
        Case(
            name="global batch 16",
            kind="fault",
            inject=cfg,
            what="training.global_batch_size 8 -> 16",
            pinned={"training.global_batch_size": 16},
        ),
        Case(
            name="seq_len 128",
            kind="fault",
            inject=cfg,
            what="training.seq_len 256 -> 128",
            pinned={"training.seq_len": 128},
        ),
        Case(
            name="dataset seed",
            kind="fault",
            inject=cfg,
            what="dataloader.data_seed 1234 -> 7 (other data)",
            pinned={"dataloader.data_seed": 7},
        ),
        Case(
            name="tokenizer path",
            kind="fault",
            inject=cfg,
            what="hf_assets_path changed (other tokenizer assets)",
            pinned={"hf_assets_path": "./other-tokenizer"},
        ),
        Case(
            name="init from checkpoint",
            kind="fault",
            inject=cfg,
            what="checkpoint.initial_load_path set (other initial weights)",
            pinned={"checkpoint.initial_load_path": "/tmp/attune-seed-checkpoint"},
        ),
        Case(
            name="bf16 params (mixed precision)",
            kind="fault",
            inject=cfg,
            what="lever training.mixed_precision_param float32 -> bfloat16",
            levers={"training.mixed_precision_param": "bfloat16"},
        ),
        Case(
            name="bf16 optimizer states",
            kind="fault",
            inject=cfg,
            what="lever optimizer.implementation fused -> fused_opt_states_bf16",
            levers={"optimizer.implementation": "fused_opt_states_bf16"},
        ),
        Case(
            name="bf16 training dtype",
            kind="fault",
            inject=cfg,
            what="training.dtype float32 -> bfloat16 (config function)",
            workload=_variant("bf16_training"),
        ),
        Case(
            name="tied embeddings",
            kind="fault",
            inject=cfg,
            what="weight tying on (config function)",
            workload=_variant("tied_embeddings"),
        ),
        Case(
            name="3 layers",
            kind="fault",
            inject=cfg,
            what="one transformer block fewer (config function)",
            workload=_variant("three_layers"),
        ),
        Case(
            name="rope theta 5e5",
            kind="fault",
            inject=cfg,
            what="RoPE theta 1e4 -> 5e5 (config function)",
            workload=_variant("rope_theta_500k"),
        ),
        Case(
            name="lbs 4, global batch unpinned",
            kind="fault",
            inject="layout",
            what="local batch 8 -> 4 while global_batch_size is -1 (follows lbs x DP)",
            baseline="gbs_unpinned",
            levers={"training.local_batch_size": 4},
        ),
        Case(
            name="CP 2 ranks (cannot run on CPU)",
            kind="fault",
            inject="layout",
            what="context parallel 2: needs FlexAttention's backward, absent on the CPU (rejected before any run)",
            **_layout("cp2"),
        ),
        Case(
            name="DDP 2 ranks, spmd_types",
            kind="fault",
            inject="layout",
            what="DDP over 2 ranks with the spmd_types backend (torch 2.13 defect)",
            workload=_variant("spmd_types_backend"),
            **DDP2,
        ),
    ]
    code = [
        (
            "loss per microbatch",
            "loss_per_microbatch",
            "each microbatch's own token mean, averaged (not the global token mean)",
        ),
        ("labels shifted", "label_shift", "labels shifted once more: predicts t+2"),
        ("prompt labels trained", "ignore_index_off", "ignored (prompt/pad) labels trained as pad"),
        ("future-token leak", "future_leak", "attention mask lets each token see the next one"),
        ("cross-document attention", "cross_doc", "packed documents attend across boundaries"),
        ("RoPE restart mid-sequence", "rope_restart", "RoPE positions restart at seq/2 (CP sharding bug)"),
        ("attention scale 1/d", "attn_scale", "scores scaled by 1/d instead of 1/sqrt(d)"),
        ("dropout 0.1", "dropout:0.1", "dropout on every block output"),
        ("layer-0 attention frozen", r"drop_grads:^layers\.0\.attention\.", "layer-0 attention gradients dropped"),
        ("embeddings frozen", r"drop_grads:^tok_embeddings\.", "embedding gradients dropped"),
        ("grads x2", "grad_scale:2", "gradients x2 before clipping (loss-scale bug)"),
        ("grads x0.5", "grad_scale:0.5", "gradients x0.5 before clipping (double division)"),
        ("bf16 gradients", "bf16_grads", "gradients rounded to bf16 (bf16 reduction)"),
        ("LR stepped per microbatch", "lr_per_microbatch", "LR schedule stepped GA times per step"),
        ("optimizer step skipped", "skip_step:3", "the optimizer step of step 3 skipped"),
        ("zero_grad skipped", "stale_grads", "gradients accumulate across steps"),
        ("z-loss 1e-4", "z_loss:1e-4", "z-loss added to the objective"),
        ("label smoothing 0.1", "label_smoothing:0.1", "cross-entropy with label smoothing"),
        ("data restarts", "data_restart:80", "data stream restarts after 80 samples (step 11)"),
        (
            "biases frozen (model has none)",
            r"drop_grads:\.bias$",
            "bias gradients dropped; no-op by construction: the model has no biases",
        ),
    ]
    faults += [Case(name=n, kind="fault", inject="code", what=w, hook=h) for n, h, w in code]
    layout_code = [
        (
            "TP plan shards the norms",
            "tp2",
            "tp_norm_sharded",
            "TP 2: per-layer norm weights sharded S(0) instead of replicated",
        ),
        (
            "TP plan leaves w3 unsharded",
            "tp2",
            "tp_proj_unsharded",
            "TP 2: FFN w3 replicated while w1 is column-sharded",
        ),
        ("PP split drops layer 1", "pp2", "pp_drop_layer:1", "PP 2: layer 1 in no stage (the model runs without it)"),
        ("PP split duplicates layer 1", "pp2", "pp_dup_layer:1", "PP 2: layer 1 in both stages (runs twice)"),
        (
            "PP loss / microbatch count",
            "pp2",
            "pp_mb_loss_scale",
            "PP 2: each microbatch loss divided again by the microbatch count (torchtitan#1733)",
        ),
        (
            "FSDP without the seed checkpoint",
            "fsdp2",
            "seed_not_loaded",
            "FSDP 2: seed checkpoint not loaded (identical shards on a CPU mesh)",
        ),
        ("TP without the seed checkpoint", "tp2", "seed_not_loaded", "TP 2: seed checkpoint not loaded (sharded init)"),
        (
            "PP without the seed checkpoint",
            "pp2",
            "seed_not_loaded",
            "PP 2: seed checkpoint not loaded (per-stage init seeds)",
        ),
    ]
    faults += [
        Case(name=n, kind="fault", inject="code", what=w, hook=h, **_layout(lay)) for n, lay, h, w in layout_code
    ]
    faults += [
        Case(
            name="rank 1 reads rank 0's data",
            kind="fault",
            inject="code",
            what="DDP 2 ranks: both ranks read the same samples",
            baseline="ddp2",
            hook="dup_rank_data",
        ),
        Case(
            name="step skipped on rank 1",
            kind="fault",
            inject="code",
            what="DDP 2 ranks: rank 1 skips the optimizer step at step 3",
            baseline="ddp2",
            hook="skip_step:3@1",
        ),
    ]
    legit = [
        Case(
            name="AC none",
            kind="legit",
            inject=cfg,
            what="activation_checkpoint full -> none",
            levers={"activation_checkpoint": "none"},
        ),
        Case(
            name="AC selective",
            kind="legit",
            inject=cfg,
            what="activation_checkpoint full -> selective",
            levers={"activation_checkpoint": "selective"},
        ),
        Case(
            name="gc every step",
            kind="legit",
            inject=cfg,
            what="training.gc_freq 50 -> 1",
            levers={"training.gc_freq": 1},
        ),
        Case(
            name="reshard always",
            kind="legit",
            inject=cfg,
            what="fsdp_reshard_after_forward default -> always",
            levers={"parallelism.fsdp_reshard_after_forward": "always"},
        ),
        Case(
            name="reshard never",
            kind="legit",
            inject=cfg,
            what="fsdp_reshard_after_forward default -> never",
            levers={"parallelism.fsdp_reshard_after_forward": "never"},
        ),
        Case(
            name="structured logging off",
            kind="legit",
            inject=cfg,
            what="debug.enable_structured_logging true -> false",
            levers={"debug.enable_structured_logging": False},
        ),
        Case(
            name="optimizer foreach",
            kind="legit",
            inject=cfg,
            what="optimizer.implementation fused -> foreach",
            levers={"optimizer.implementation": "foreach"},
        ),
        Case(
            name="optimizer for-loop",
            kind="legit",
            inject=cfg,
            what="optimizer.implementation fused -> for-loop",
            levers={"optimizer.implementation": "for-loop"},
        ),
        Case(
            name="loss unchunked",
            kind="legit",
            inject=cfg,
            what="loss.num_chunks 8 -> 1",
            levers={"loss.num_chunks": 1},
        ),
        Case(
            name="GA 2 (lbs 4)",
            kind="legit",
            inject=cfg,
            what="local batch 1 -> 4, global batch pinned (GA 8 -> 2)",
            levers={"training.local_batch_size": 4},
        ),
        Case(
            name="GA 1 (lbs 8)",
            kind="legit",
            inject=cfg,
            what="local batch 1 -> 8, global batch pinned (GA 8 -> 1)",
            levers={"training.local_batch_size": 8},
        ),
        Case(
            name="FSDP 2 ranks",
            kind="legit",
            inject="layout",
            what="2 ranks, dp_shard 2, seed checkpoint, global batch pinned (GA 8 -> 4 per rank)",
            **_layout("fsdp2"),
        ),
        Case(
            name="FSDP 2 ranks, reshard never",
            kind="legit",
            inject="layout",
            what="as FSDP 2 ranks, fsdp_reshard_after_forward never",
            **_layout("fsdp2_reshard_never"),
        ),
        Case(
            name="TP 2 (+SP)",
            kind="legit",
            inject="layout",
            what="tensor parallel 2 with sequence parallel, seed checkpoint",
            **_layout("tp2"),
        ),
        Case(
            name="TP 2 (no SP)",
            kind="legit",
            inject="layout",
            what="tensor parallel 2 without sequence parallel, seed checkpoint",
            **_layout("tp2_nosp"),
        ),
        Case(
            name="PP 2 (1F1B)",
            kind="legit",
            inject="layout",
            what="pipeline parallel 2, 1F1B, local batch 2 = 2 microbatches, seed checkpoint",
            **_layout("pp2"),
        ),
        Case(
            name="PP 2 (GPipe)",
            kind="legit",
            inject="layout",
            what="pipeline parallel 2, GPipe, 2 microbatches, seed checkpoint",
            **_layout("pp2_gpipe"),
        ),
        Case(
            name="PP 2 (Interleaved1F1B)",
            kind="legit",
            inject="layout",
            what="pipeline parallel 2, Interleaved1F1B (4 stages), 4 microbatches, seed checkpoint",
            **_layout("pp2_interleaved"),
        ),
        Case(
            name="compile",
            kind="legit",
            inject=cfg,
            what="compile.enable false -> true (inductor on CPU)",
            levers={"compile.enable": True},
        ),
    ]
    return faults + legit


# ----------------------------------------------------------------------------- recipe edits


def _yaml() -> YAML:
    yaml = YAML(typ="rt")
    yaml.preserve_quotes = True
    yaml.width = 4096
    yaml.indent(mapping=2, sequence=4, offset=2)
    return yaml


def edit_recipe_text(
    text: str, *, levers=None, pinned=None, cluster=None, workload=None, source: str = "<bench>"
) -> str:
    """``text`` with the given edits (levers through the catalog; other sections by YAML round-trip)."""
    for lever, value in (levers or {}).items():
        text = set_lever_text(text, lever, value, source=source)
    sections = {"pinned": pinned or {}, "cluster": cluster or {}, "workload": workload or {}}
    if any(sections.values()):
        yaml = _yaml()
        data = yaml.load(text)
        for section, edits in sections.items():
            for key, value in edits.items():
                if value is None:
                    data[section].pop(key, None)
                else:
                    data[section][key] = value
        buf = io.StringIO()
        yaml.dump(data, buf)
        text = buf.getvalue()
    parse_recipe_text(text, source)
    return text


def baselines(base_text: str) -> dict[str, str]:
    """The baselines cases are judged against: the shipped recipe, DDP over 2 ranks, an unpinned global batch."""
    return {
        "base": base_text,
        "ddp2": edit_recipe_text(base_text, levers=DDP2["levers"], cluster=DDP2["cluster"], source="ddp2"),
        "gbs_unpinned": edit_recipe_text(
            base_text,
            levers={"training.local_batch_size": 8},
            pinned={"training.global_batch_size": -1},
            source="gbs_unpinned",
        ),
    }


def candidate_text(case: Case, bases: dict[str, str]) -> str:
    return edit_recipe_text(
        bases[case.baseline],
        levers=case.levers,
        pinned=case.pinned,
        cluster=case.cluster,
        workload=case.workload,
        source=case.name,
    )


# ----------------------------------------------------------------------------- report


class CaseResult(BaseModel):
    name: str
    kind: Kind
    inject: str
    what: str
    expected: str
    verdict: str  # ok | reject | no-op | error
    stage: str  # config | convergence | -
    tier: str
    decided_by: str
    evidence: str
    correct: bool
    runs: list[str] = Field(default_factory=list)
    band_ratio: float | None = None  # what the calibrated band alone says (max |delta|/band), for runs


class BenchReport(BaseModel):
    steps: int
    jobs: int
    results: list[CaseResult]
    calibration: dict[str, Any] = Field(default_factory=dict)
    determinism: str = ""
    runs_total: int = 0
    runs_made: int = 0
    wall_s: float = 0.0

    def summary(self) -> dict[str, Any]:
        faults = [r for r in self.results if r.kind == "fault"]
        legit = [r for r in self.results if r.kind == "legit"]
        caught = [r for r in faults if r.verdict == "reject"]
        return {
            "faults_total": len(faults),
            "faults_caught": len(caught),
            "faults_noop": sum(r.verdict == "no-op" for r in faults),
            "faults_missed": [r.name for r in faults if r.verdict not in ("reject", "no-op")],
            "faults_caught_config": sum(r.stage == "config" for r in caught),
            "faults_caught_convergence": sum(r.stage == "convergence" for r in caught),
            "legit_total": len(legit),
            "legit_rejected": sum(r.verdict != "ok" for r in legit),
            "legit_rejected_names": [r.name for r in legit if r.verdict != "ok"],
            "calibration_runs": self.calibration.get("calibrated_on", []),
            "determinism": self.determinism,
            "cases": len(self.results),
            "runs_total": self.runs_total,
            "runs_made": self.runs_made,
            "wall_s": round(self.wall_s, 1),
        }


PRIORITY = ("resolve", "invariants", "defects", "precision", "pinned", "tiers")


def _config_decision(v: Verdict) -> tuple[str, str]:
    failed = [c for c in v.checks if not c.passed]
    order = sorted(failed, key=lambda c: PRIORITY.index(c.name) if c.name in PRIORITY else len(PRIORITY))
    names = ",".join(c.name for c in order)
    return names, (order[0].reasons[0] if order and order[0].reasons else "; ".join(v.reasons))


def _conv_evidence(v: Verdict) -> tuple[str, str]:
    check = v.checks[-1]
    signals = check.evidence.get("signals", [])
    if check.name == "bitwise" and check.passed:
        return (
            "bitwise",
            f"{', '.join(s['signal'] for s in signals)} bitwise equal over {check.evidence.get('steps')} steps",
        )
    if check.name not in ("bitwise", "band"):
        return check.name, "; ".join(v.reasons)
    bad = [s for s in signals if (not s["equal"] if check.name == "bitwise" else (s.get("statistic") or 0) > 1)]
    if check.name == "band" and not bad:
        worst = ", ".join(f"{s['signal']} {s['statistic']:.2g}x band (step {s['worst_step']})" for s in signals)
        return "band", f"within the band: {worst}"
    shown = bad or signals
    parts = []
    for s in shown[:2]:
        if s.get("worst_step") is None:
            parts.append(f"{s['signal']} equal")
            continue
        text = f"{s['signal']} d={s['deviation']:+.2e} @ step {s['worst_step']}"
        if s.get("first_diff_step"):
            text += f" (first diff step {s['first_diff_step']})"
        if s.get("statistic") is not None:
            text += f", {s['statistic']:.3g}x band"
        parts.append(text)
    name = check.name + (f":{','.join(s['signal'] for s in bad)}" if bad else "")
    return name, "; ".join(parts) or "; ".join(v.reasons)


def _band_ratio(base: RunRecord, cand: RunRecord, band: LossBand | None, steps: int) -> float | None:
    if band is None or base.outcome != "ok" or cand.outcome != "ok":
        return None
    ratios = []
    for signal in band.signals:
        try:
            r = compare_signal(base, cand, signal, steps, band)
        except (TypeError, ValueError):
            continue
        if r.statistic is not None:
            ratios.append(r.statistic)
    return max(ratios) if ratios else None


def _bitwise_equal(a: RunRecord, b: RunRecord, steps: int) -> bool:
    pick = lambda r: [(s.loss, s.grad_norm) for s in r.steps if s.step <= steps]  # noqa: E731
    return a.outcome == b.outcome == "ok" and pick(a) == pick(b) and len(pick(a)) == steps


Suite = tuple[str, Callable[[], list[Case]], Callable[[str], dict[str, str]]]
# a suite's 2-rank baseline that joins the calibration set (dense: DDP; moe: EP 1 over 2 ranks)
TWO_RANK_CALIBRATION = {"ddp2": "DDP, replicate 2", "ep1x2": "FSDP 2, EP 1"}


def dense_suite() -> Suite:
    """The default suite: its baseline recipe (under recipes/), its cases and its baselines (llama3-tiny).
    ``bot.bench.gate_faults_moe.SUITE`` is the MoE one."""
    return BASELINE_RECIPE, cases, baselines


def run_bench(
    *,
    out_dir: str | Path,
    jobs: int = 1,
    progress: Callable[[str], None] | None = None,
    steps: int = STEPS,
    cache_dir: str | Path | None = None,
    safety: float = DEFAULT_SAFETY,
    only: list[str] | None = None,
    suite: Suite | None = None,
) -> BenchReport:
    """Run the benchmark (``suite``: default :func:`dense_suite`); write ``report.json`` and ``report.md`` under ``out_dir``."""
    t0 = time.monotonic()
    say = progress or (lambda _msg: None)
    out = Path(out_dir)
    cache = Path(cache_dir) if cache_dir is not None else DEFAULT_CACHE
    env = {"ATTUNE_TORCH_THREADS": "1"} if jobs > 1 else {}
    from bot.core.repo import find_repo

    baseline_recipe, suite_cases, suite_baselines = suite or dense_suite()
    base_text = (find_repo().recipes / baseline_recipe).read_text()
    bases = suite_baselines(base_text)
    recipes = {k: parse_recipe_text(t, k) for k, t in bases.items()}
    all_cases = [c for c in suite_cases() if not only or c.name in only]

    # 1. config stage for every case (in-process resolution, no runs)
    say(f"config stage for {len(all_cases)} cases")
    texts = {c.name: candidate_text(c, bases) for c in all_cases}
    verdicts = {c.name: check_config(recipes[c.baseline], parse_recipe_text(texts[c.name], c.name)) for c in all_cases}

    # 2. the runs: baselines, calibration, every case that passed the config stage
    specs: dict[str, RunSpec] = {"base:base": RunSpec(label="baseline", recipe_text=base_text, steps=steps, env=env)}
    cal = calibration_specs(base_text, steps=steps, env=env)
    two = next((k for k in TWO_RANK_CALIBRATION if k in bases), None)  # the suite's 2-rank baseline joins the band
    if two is not None:
        cal[f"cal:{two}"] = RunSpec(
            label=f"baseline on 2 ranks ({TWO_RANK_CALIBRATION[two]})", recipe_text=bases[two], steps=steps, env=env
        )
    specs.update(cal)
    for c in all_cases:
        if verdicts[c.name].ok:
            specs[f"base:{c.baseline}"] = RunSpec(
                label=f"baseline {c.baseline}", recipe_text=bases[c.baseline], steps=steps, env=env
            )
            specs[f"case:{c.name}"] = RunSpec(
                label=c.name, recipe_text=texts[c.name], steps=steps, env=env, hook=c.hook
            )
    # a layout fault (a hook on a layout) is a no-op when it leaves the same layout's clean run bitwise unchanged
    for c in all_cases:
        if verdicts[c.name].ok and c.hook and (c.levers or c.cluster):
            specs[f"clean:{c.name}"] = RunSpec(
                label=f"{c.name} (no hook)", recipe_text=texts[c.name], steps=steps, env=env
            )
    # a case identical to its baseline (no hook) is the baseline run itself
    for c in all_cases:
        sid = f"case:{c.name}"
        if sid in specs and c.hook is None and texts[c.name] == bases[c.baseline]:
            specs.pop(sid)
    here = stack_key()
    unique = {run_key(s, here): s for s in specs.values()}
    cached = sum(lookup(s, cache) is not None for s in unique.values())
    say(f"{len(unique)} runs needed, {cached} cached")
    records = run_many(specs, cache, jobs=jobs, progress=say)

    # 3. calibrate the band on the calibration set only
    base_rec = records["base:base"]
    band = calibrate_band(
        [records[k] for k in cal],
        base_rec,
        safety,
        labels=[cal[k].label for k in cal],
        objective_hash=objective_hash(recipes["base"]),
    )
    save_band(cache, band)
    determinism = (
        "bitwise identical" if _bitwise_equal(base_rec, records["cal:repeat"], steps) else "NOT bitwise identical"
    )

    # 4. judge every case
    results = []
    for c in all_cases:
        v = verdicts[c.name]
        if not v.ok:
            decided, evidence = _config_decision(v)
            results.append(_result(c, "reject", v, decided, evidence))
            continue
        base = records[f"base:{c.baseline}"]
        cand = records.get(f"case:{c.name}", base)
        conv = check_convergence(
            base, cand, tier=v.tier, band=band if c.baseline == "base" or v.tier != "B" else None, steps=steps
        )
        decided, evidence = _conv_evidence(conv)
        verdict: str = conv.verdict
        if c.kind == "fault" and c.inject == "code" and _bitwise_equal(base, cand, steps):
            verdict, evidence = (
                "no-op",
                "candidate curves bitwise identical to the baseline: the fault did not change the update",
            )
        clean = records.get(f"clean:{c.name}")
        if c.kind == "fault" and clean is not None and _bitwise_equal(clean, cand, steps):
            verdict, evidence = (
                "no-op",
                "curves bitwise identical to the same layout without the fault: it did not change the update",
            )
        ratio = _band_ratio(base, cand, band, steps) if c.baseline == "base" else None
        results.append(_result(c, verdict, conv, decided, evidence, runs=[base.run_id, cand.run_id], band_ratio=ratio))

    report = BenchReport(
        steps=steps,
        jobs=jobs,
        results=results,
        calibration={
            "calibrated_on": band.calibrated_on,
            "safety": band.safety,
            "band_max": {s: max(sb.band) for s, sb in band.signals.items()},
            "envelope_max": {s: max(sb.envelope) for s, sb in band.signals.items()},
            "stack": band.stack_key,
        },
        determinism=determinism,
        runs_total=len(unique),
        runs_made=len(unique) - cached,
        wall_s=time.monotonic() - t0,
    )
    out.mkdir(parents=True, exist_ok=True)
    atomic_write_text(out / "report.json", report.model_dump_json(indent=1) + "\n")
    atomic_write_text(out / "report.md", render_bench(report))
    return report


def _result(c: Case, verdict: str, v: Verdict, decided: str, evidence: str, **extra: Any) -> CaseResult:
    correct = verdict == c.expected or (c.kind == "fault" and verdict == "no-op")
    return CaseResult(
        name=c.name,
        kind=c.kind,
        inject=c.inject,
        what=c.what,
        expected=c.expected,
        verdict=verdict,
        stage=v.stage,
        tier=v.tier,
        decided_by=decided,
        evidence=evidence,
        correct=correct,
        **extra,
    )


def _cell(text: str, width: int = 140) -> str:
    text = text.replace("|", "/").replace("\n", " ")
    return text if len(text) <= width else text[: width - 3] + "..."


def render_bench(report: BenchReport) -> str:
    """The benchmark as a markdown table plus its summary."""
    s = report.summary()
    lines = [
        f"# Gate fault-injection benchmark ({report.steps} steps per run, {report.jobs} job(s))",
        "",
        f"- faults: {s['faults_caught']}/{s['faults_total']} caught "
        f"({s['faults_caught_config']} at the config stage, {s['faults_caught_convergence']} by convergence), "
        f"{s['faults_noop']} no-op, missed: {', '.join(s['faults_missed']) or 'none'}",
        f"- legitimate (held out from calibration): {s['legit_total'] - s['legit_rejected']}/{s['legit_total']} passed; "
        f"rejected: {', '.join(s['legit_rejected_names']) or 'none'}",
        f"- band calibrated on: {', '.join(report.calibration.get('calibrated_on', []))} "
        f"(safety x{report.calibration.get('safety')}, band max {report.calibration.get('band_max')})",
        f"- baseline repeat: {report.determinism}; runs: {report.runs_total} ({report.runs_made} made now); wall {report.wall_s:.0f}s",
        "",
        "| case | kind | inject | expected | verdict | stage | tier | check that decided | evidence | band ratio |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in report.results:
        ratio = "" if r.band_ratio is None else f"{r.band_ratio:.3g}"
        mark = "" if r.correct else " **(wrong)**"
        lines.append(
            f"| {_cell(r.name, 40)} | {r.kind} | {r.inject} | {r.expected} | {r.verdict}{mark} | {r.stage} | {r.tier} | "
            f"{_cell(r.decided_by, 40)} | {_cell(r.evidence)} | {ratio} |"
        )
    return "\n".join(lines) + "\n"
