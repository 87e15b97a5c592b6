"""Config stage of the correctness gate: diff every resolved field, then tiers, invariants, defects.

:func:`check_config` resolves both recipes with torchtitan's own ConfigManager
(:mod:`bot.runner.resolve`, cached per recipe content in this process), describes each as one
flat dict of *fields*, diffs every field and rejects — naming the field, both values and the
rule — when

1. the candidate does not resolve (torchtitan or the recipe's pins refuse it);
2. a ``pinned`` value changes (the recipe's objective);
3. a changed field is tier X (``gate/rules/objective.yaml``; a field no rule covers is X);
4. a derived invariant changes: tokens per optimizer step (local batch x DP degree x
   grad-accumulation steps x seq_len — catches ``global_batch_size = -1`` silently following the
   local batch or the DP degree), schedule length and warm-up in steps (catches
   ``training.steps`` driving the schedule when ``lr_scheduler.total_steps`` is unset), or an
   invariant a tier rule ``requires`` (``global_batch_pinned``, ``seed_checkpoint``,
   ``lr_schedule_pinned``) does not hold;
5. a known stack defect (``gate/rules/defects.yaml``) with ``action: reject`` matches the
   candidate's context (resolved fields + ``stack.*`` + ``derived.*`` + ``runtime.*`` + ``model.*``);
6. a precision field changes (training dtype, mixed-precision param/reduce, bf16 optimizer
   states, float8 converters) and no explicit ``precision_tolerance`` was given. With one, the
   stage passes with ``requires_convergence=True`` and ``precision_change=True``.

Fields beyond torchtitan's flat dict (``to_dict`` keeps no types and drops some callables):
``<node>.__type__`` for every config dataclass the workload's config function builds (a swapped
loss, tokenizer or attention class is visible), callables the flat dict lacks, private scalar
fields of config dataclasses (``to_dict`` drops them: e.g. the MoE router's
``_debug_force_load_balance``), and recipe-level
fields (``env.*``, ``cluster.*``, ``workload.*``, ``bench.*``), classified by :data:`RECIPE_TIERS`
before ``objective.yaml``. Object addresses (``<function f at 0x7f..>``) are stripped before the
diff; a closure's captured values stay invisible (documented limit). ``Verdict.tier`` is the
highest tier among changed fields (B when nothing changed). Nothing is evaluated: rule
conditions are data matched by :mod:`bot.core.matcher`.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import importlib
import io
import re
from collections.abc import Mapping, Sequence
from typing import Any

from pydantic import BaseModel, Field

from bot.core.recipe import Recipe
from bot.core.records import CheckResult, Scalar, Verdict
from bot.runner.resolve import ResolveError, dp_degree, resolve_recipe
from gate import rules
from gate.errors import GateInputError
from gate.rules import TIER_ORDER, DefectRule, TierRule

ABSENT = "<absent>"
_RECIPE_SECTIONS = {"recipe", "workload", "cluster", "bench", "env"}
_ADDRESS = re.compile(r" at 0x[0-9a-fA-F]+")
_DOC = "https://github.com/pytorch/torchtitan/blob/release/0.3/docs/debugging.md"
_SKIP_TYPES = ("activation_checkpoint",)  # the AC class follows the CLI subcommand: see activation_checkpoint.mode

# Recipe-level fields (not torchtitan's): checked before objective.yaml (first match wins).
RECIPE_TIERS: list[TierRule] = [
    TierRule(pattern="recipe.*", tier="B", why="recipe metadata (id, source)", source=_DOC),
    TierRule(pattern="workload.model", tier="B", why="the model's leaderboard label only", source=_DOC),
    TierRule(
        pattern="workload.module",
        tier="X",
        why="another module can change any code path, which no resolved field shows",
        source="https://github.com/pytorch/torchtitan/blob/release/0.3/torchtitan/config/manager.py",
    ),
    TierRule(
        pattern="workload.config",
        tier="R",
        why="another config function: its resolved fields and config types are diffed one by one; what it does outside the config is not visible, so a convergence check is still required",
        source="https://github.com/pytorch/torchtitan/blob/release/0.3/torchtitan/config/manager.py",
    ),
    TierRule(
        pattern="cluster.devices_per_node",
        tier="R",
        requires=["global_batch_pinned", "seed_checkpoint"],
        why="the world size sets the DP degree when dp_shard is -1: reduction order, sharded init and (unpinned) the global batch change",
        source=_DOC,
    ),
    TierRule(
        pattern="cluster.nodes",
        tier="R",
        requires=["global_batch_pinned", "seed_checkpoint"],
        why="as cluster.devices_per_node",
        source=_DOC,
    ),
    TierRule(pattern="cluster.launcher", tier="R", why="local torchrun vs Slurm launch the same trainer", source=_DOC),
    TierRule(
        pattern="cluster.hardware",
        tier="X",
        why="another platform: the baseline curve and its noise band do not transfer",
        source=_DOC,
    ),
    TierRule(pattern="cluster.*", tier="B", why="cost and runner labels only", source=_DOC),
    TierRule(
        pattern="bench.*",
        tier="B",
        why="the measurement window only (the run length itself is diffed as training.steps)",
        source=_DOC,
    ),
]

INVARIANTS: dict[str, str] = {
    "derived.tokens_per_step": "tokens per optimizer step = local batch x DP degree x grad-accumulation steps x seq_len",
    "derived.schedule_total_steps": "LR schedule length in steps (lr_scheduler.total_steps, or training.steps when it is unset)",
    "derived.warmup_steps": "LR warm-up in steps (clipped to the schedule length)",
}
REQUIRES_WHY: dict[str, str] = {
    "global_batch_pinned": "training.global_batch_size must be pinned (> 0) in both, or it silently follows local batch x DP degree",
    "seed_checkpoint": "the initial weights must be the same: an unchanged init sharding layout, or both loading one seed checkpoint",
    "lr_schedule_pinned": "lr_scheduler.total_steps must be set in both, or training.steps drives the schedule",
}


class FieldChange(BaseModel):
    """One changed field with the tier rule that classifies it."""

    field: str
    before: Any
    after: Any
    tier: str
    rule: str
    why: str
    source: str
    precision: bool = False
    requires: list[str] = Field(default_factory=list)

    def describe(self) -> str:
        return f"{self.field}: {_show(self.before)} -> {_show(self.after)} (tier {self.tier}, rule '{self.rule}': {self.why})"


class ResolvedRecipe(BaseModel):
    """Everything the config stage knows about one recipe."""

    name: str
    fields: dict[str, Any]  # every diffable field
    derived: dict[str, Any]  # derived.* values (invariants, defect context)
    pinned: dict[str, Scalar]
    context: dict[str, Any]  # defect-rule context


# ----------------------------------------------------------------------------- describing a recipe


def _norm(value: Any) -> Any:
    if isinstance(value, str):
        return _ADDRESS.sub("", value)
    if isinstance(value, list | tuple):
        return [_norm(v) for v in value]
    return value


def _show(value: Any) -> str:
    return ABSENT if value is ABSENT else repr(value)


def _qualname(obj: Any) -> str:
    return f"{getattr(obj, '__module__', '?')}.{getattr(obj, '__qualname__', type(obj).__qualname__)}"


def _walk(obj: Any, prefix: str, out: dict[str, Any], seen: set[int], depth: int = 0) -> None:
    """Config-node types (``<path>.__type__``) and callables, at the paths ``flatten`` uses."""
    if depth > 16 or id(obj) in seen:
        return
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        seen.add(id(obj))
        out[f"{prefix}__type__"] = _qualname(type(obj))
        for f in dataclasses.fields(obj):
            if depth == 0 and f.name in _SKIP_TYPES:
                continue
            value = getattr(obj, f.name, None)
            if f.name.startswith("_") and (value is None or isinstance(value, bool | int | float | str)):
                out[f"{prefix}{f.name}"] = (
                    value  # private fields (``to_dict`` drops them), e.g. router._debug_force_load_balance
                )
                continue
            _walk(value, f"{prefix}{f.name}.", out, seen, depth + 1)
    elif isinstance(obj, list | tuple):
        for i, item in enumerate(obj):
            _walk(item, f"{prefix}{i}.", out, seen, depth + 1)
    elif isinstance(obj, dict):
        for key, item in obj.items():
            _walk(item, f"{prefix}{key}.", out, seen, depth + 1)
    elif isinstance(obj, functools.partial):
        out[prefix[:-1]] = _norm(repr(obj))
    elif callable(obj):
        out[prefix[:-1]] = _qualname(obj)


def _config_object(recipe: Recipe) -> Any | None:
    """The workload's config function result, as torchtitan's ConfigManager loads it (no CLI)."""
    module = None
    for name in (f"{recipe.workload.module}.config_registry", recipe.workload.module):
        try:
            module = importlib.import_module(name)
            break
        except ImportError:
            continue
    fn = getattr(module, recipe.workload.config, None) if module else None
    try:
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
            return fn() if callable(fn) else None
    except Exception:  # resolution already succeeded; a second call failing only loses type info
        return None


def structure_fields(config: Any, flat: Mapping[str, Any]) -> dict[str, Any]:
    """Config-node types and callables that the flat dict lacks."""
    out: dict[str, Any] = {}
    if config is not None:
        _walk(config, "", out, set())
    return {k: v for k, v in out.items() if k not in flat}


def model_facts(config: Any) -> dict[str, Any]:
    """``model.*`` context keys the defect rules read (best effort from the config object)."""
    try:
        layers = list(config.model_spec.model.layers)
    except Exception:
        return {}
    backends = {"FlexAttention": "flex", "VarlenAttention": "varlen", "ScaledDotProductAttention": "sdpa"}
    out: dict[str, Any] = {"model.moe": any(getattr(layer, "moe", None) is not None for layer in layers)}
    kinds = set()
    for layer in layers:
        inner = getattr(getattr(layer, "attention", None), "inner_attention", None)
        if inner is not None:
            kinds.add(backends.get(type(inner).__qualname__.split(".")[0], type(inner).__qualname__))
    if len(kinds) == 1:
        out["model.attn_backend"] = kinds.pop()
    return out


def recipe_fields(recipe: Recipe) -> dict[str, Any]:
    """Recipe-level fields: the ranks' environment (runner levers included), cluster, workload, benchmark window, metadata."""
    out: dict[str, Any] = {f"env.{k}": v for k, v in recipe.launch_env.items()}
    cluster = recipe.cluster.model_dump()
    out.update({f"cluster.{k}": _norm(v) for k, v in cluster.items()})
    out.update({f"workload.{k}": v for k, v in recipe.workload.model_dump().items()})
    out.update({f"bench.{k}": v for k, v in recipe.bench.model_dump().items()})
    out.update({"recipe.id": recipe.id, "recipe.source": recipe.source})
    return out


def derived_values(flat: Mapping[str, Any], world_size: int) -> dict[str, Any]:
    """``derived.*``: the quantities the objective depends on, computed as torchtitan does."""
    rep = int(flat["parallelism.data_parallel_replicate_degree"])
    tp, pp = int(flat["parallelism.tensor_parallel_degree"]), int(flat["parallelism.pipeline_parallel_degree"])
    cp, ep = int(flat["parallelism.context_parallel_degree"]), int(flat["parallelism.expert_parallel_degree"])
    dp = dp_degree(dict(flat), world_size)
    shard = max(dp // max(rep, 1), 1)
    lbs, gbs_raw, seq = (
        int(flat["training.local_batch_size"]),
        int(flat["training.global_batch_size"]),
        int(flat["training.seq_len"]),
    )
    gbs = gbs_raw if gbs_raw > 0 else lbs * dp  # torchtitan trainer.py: -1 means local batch x DP degree
    total_raw = flat.get("lr_scheduler.total_steps")
    total = int(total_raw) if total_raw is not None else int(flat["training.steps"])
    mesh = shard * cp * tp
    return {
        "derived.world_size": world_size,
        "derived.dp_degree": dp,
        "derived.dp_shard_degree": shard,
        "derived.global_batch_size": gbs,
        "derived.grad_accum_steps": gbs // (lbs * dp) if lbs * dp else 0,
        "derived.tokens_per_step": gbs * seq,
        "derived.schedule_total_steps": total,
        "derived.warmup_steps": min(int(flat["lr_scheduler.warmup_steps"]), total),
        "derived.seq_len_mod_128": seq % 128,
        "derived.seed_checkpoint": flat.get("checkpoint.initial_load_path") not in (None, ""),
        "derived.init_layout": f"dp_shard={shard} tp={tp} pp={pp} cp={cp} ep={ep}",
        "derived.ep_divides_mesh": mesh % ep == 0 if ep else True,
        "derived.efsdp_degree": mesh // ep if ep and mesh % ep == 0 else 0,
    }


def runs_load_seed(recipe: Recipe) -> bool:
    """True when the runs that compare this recipe load a seed checkpoint: local and Slurm runs of the gate
    (``gate.runs``) and of campaigns do (``bot/runner/seed.py``)."""
    from bot.runner.seed import wants_seed

    return recipe.cluster.launcher in ("local", "slurm") and wants_seed(recipe)


def local_stack() -> dict[str, Any]:
    """This machine's stack (the one the gate's runs would use)."""
    from bot.runner.base import stack_fingerprint

    fp = stack_fingerprint()
    return {
        "torch": fp.torch,
        "torchtitan": fp.torchtitan,
        "device_family": fp.device_family,
        "device_name": fp.device_name,
    }


def runtime_flags(recipe: Recipe, stack: Mapping[str, Any]) -> dict[str, bool]:
    """What the CPU compatibility layer provides: only CPU recipes on a CPU stack get it."""
    from bot.inrank.cpu_compat import PATCHES

    on = recipe.cluster.hardware == "cpu" and stack.get("device_family") == "cpu"
    return {
        "runtime.set_timeout_shim": on and "set_timeout" in PATCHES,
        "runtime.force_sum_reduction": on and "gloo_premul_sum" in PATCHES,
        "runtime.sdpa_attention_shim": on and "attention" in PATCHES,
    }


_RESOLVED: dict[str, dict[str, Any]] = {}


def resolve_cached(recipe: Recipe) -> dict[str, Any]:
    """``resolve_recipe`` memoised by recipe content (a resolution costs seconds the first time)."""
    key = recipe.model_dump_json()
    if key not in _RESOLVED:
        _RESOLVED[key] = resolve_recipe(recipe)
    return _RESOLVED[key]


def _fix_ac(flat: Mapping[str, Any]) -> dict[str, Any]:
    """``activation_checkpoint`` none resolves to a None config: mode ``NoneType`` and a bare key.

    bot.runner.resolve maps AC classes by name and torchtitan's NoAC config is ``None``; spell the
    mode ``none`` as the lever does and drop the bare ``activation_checkpoint: None`` entry.
    """
    out = dict(flat)
    if out.get("activation_checkpoint.mode") == "NoneType":
        out["activation_checkpoint.mode"] = "none"
    if "activation_checkpoint" in out and out["activation_checkpoint"] is None:
        del out["activation_checkpoint"]
    return out


def describe(recipe: Recipe, *, stack: Mapping[str, Any]) -> ResolvedRecipe:
    """Resolve and describe one recipe (raises ``ResolveError`` when torchtitan refuses it)."""
    flat = _fix_ac(resolve_cached(recipe))
    config = _config_object(recipe)
    fields = {k: _norm(v) for k, v in flat.items()}
    fields.update(structure_fields(config, flat))
    fields.update(recipe_fields(recipe))
    derived = derived_values(flat, recipe.devices)
    # a local or Slurm run made by the gate or a campaign loads its objective's seed checkpoint (bot/runner/seed.py)
    derived["derived.seed_checkpoint"] = bool(derived["derived.seed_checkpoint"]) or runs_load_seed(recipe)
    context = {k: v for k, v in fields.items()}
    context.update(derived)
    context.update({f"stack.{k}": v for k, v in stack.items()})
    context.update(runtime_flags(recipe, stack))
    context.update(model_facts(config))
    return ResolvedRecipe(name=recipe.name, fields=fields, derived=derived, pinned=dict(recipe.pinned), context=context)


# ----------------------------------------------------------------------------- the pure check


@functools.lru_cache(maxsize=1)
def _objective_tiers() -> tuple[TierRule, ...]:
    return tuple(rules.load_tiers())


@functools.lru_cache(maxsize=1)
def _known_defects() -> tuple[DefectRule, ...]:
    return tuple(rules.load_defects())


def diff_fields(before: Mapping[str, Any], after: Mapping[str, Any]) -> list[tuple[str, Any, Any]]:
    """Every field whose value differs (a field on one side only is ``ABSENT`` on the other)."""
    out = []
    for key in sorted(set(before) | set(after)):
        a, b = before.get(key, ABSENT), after.get(key, ABSENT)
        if not _same(a, b):
            out.append((key, a, b))
    return out


def _same(a: Any, b: Any) -> bool:
    """Equality that never equates a bool with a number (``True`` is not ``1``)."""
    if isinstance(a, bool) or isinstance(b, bool):
        return type(a) is type(b) and bool(a == b)
    return bool(a == b)


def _scalars(value: Any) -> list[Any]:
    """The scalar values a tier rule's ``values`` list can match (list elements included)."""
    if isinstance(value, list):
        return [x for v in value for x in _scalars(v)]
    return [value] if isinstance(value, str | int | float | bool) and value is not ABSENT else []


def classify_change(field: str, before: Any, after: Any, tiers: Sequence[TierRule]) -> FieldChange:
    values = _scalars(before) + _scalars(after)
    rule = rules.classify(field, values=values, rules=[*RECIPE_TIERS, *tiers])
    return FieldChange(
        field=field,
        before=before,
        after=after,
        tier=rule.tier,
        rule=rule.name,
        why=rule.why,
        source=rule.source,
        precision=rule.precision,
        requires=list(rule.requires),
    )


def _requirement_problems(need: str, base: ResolvedRecipe, cand: ResolvedRecipe) -> list[str]:
    b, c = base.fields, cand.fields
    if need == "global_batch_pinned":
        values = (b.get("training.global_batch_size"), c.get("training.global_batch_size"))
        if not all(isinstance(v, int) and v > 0 for v in values):
            return [f"training.global_batch_size is {values[0]!r} in the baseline and {values[1]!r} in the candidate"]
    elif need == "seed_checkpoint":
        same_layout = base.derived["derived.init_layout"] == cand.derived["derived.init_layout"]
        seeded = base.derived["derived.seed_checkpoint"] and cand.derived["derived.seed_checkpoint"]
        if not (same_layout or seeded):
            return [
                f"init sharding {base.derived['derived.init_layout']!r} -> {cand.derived['derived.init_layout']!r} without a seed checkpoint"
            ]
    elif need == "lr_schedule_pinned":
        values = (b.get("lr_scheduler.total_steps"), c.get("lr_scheduler.total_steps"))
        if any(v is None or v is ABSENT for v in values):
            return [f"lr_scheduler.total_steps is {values[0]!r} in the baseline and {values[1]!r} in the candidate"]
    return []


def check_resolved(
    base: ResolvedRecipe,
    cand: ResolvedRecipe,
    *,
    precision_tolerance: float | None = None,
    tiers: Sequence[TierRule] | None = None,
    defects: Sequence[DefectRule] | None = None,
) -> Verdict:
    """The config verdict from two described recipes (pure)."""
    tiers = _objective_tiers() if tiers is None else tiers
    defects = _known_defects() if defects is None else defects
    changes = [classify_change(f, a, b, tiers) for f, a, b in diff_fields(base.fields, cand.fields)]
    tier = max((c.tier for c in changes), key=TIER_ORDER.__getitem__, default="B")
    reasons: list[str] = []
    checks: list[CheckResult] = []

    pinned = [(k, a, b) for k, a, b in diff_fields(base.pinned, cand.pinned)]
    pin_reasons = [
        f"pinned {k}: {_show(a)} -> {_show(b)} (rule 'pinned': the recipe's objective; never changed by tuning)"
        for k, a, b in pinned
    ]
    checks.append(
        CheckResult(
            name="pinned",
            passed=not pin_reasons,
            reasons=pin_reasons,
            evidence={"changed": [{"field": k, "before": a, "after": b} for k, a, b in pinned]},
        )
    )

    # torchtitan's own fields first: they say what changed; recipe-level fields say where
    x_changes = sorted((c for c in changes if c.tier == "X"), key=lambda c: c.field.split(".")[0] in _RECIPE_SECTIONS)
    checks.append(
        CheckResult(
            name="tiers",
            passed=not x_changes,
            reasons=[f"{c.describe()} changes the objective" for c in x_changes],
            evidence={"tier": tier, "changed": [c.model_dump(mode="json") for c in changes]},
        )
    )

    inv_reasons: list[str] = []
    inv_evidence: list[dict[str, Any]] = []
    for name, what in INVARIANTS.items():
        a, b = base.derived[name], cand.derived[name]
        inv_evidence.append({"invariant": name, "before": a, "after": b})
        if a != b:
            inv_reasons.append(f"{name}: {a!r} -> {b!r} (invariant: {what})")
    for change in changes:
        for need in change.requires:
            for problem in _requirement_problems(need, base, cand):
                inv_reasons.append(
                    f"{change.field} changed but {problem} (rule '{change.rule}' requires {need}: {REQUIRES_WHY[need]})"
                )
    checks.append(
        CheckResult(name="invariants", passed=not inv_reasons, reasons=inv_reasons, evidence={"derived": inv_evidence})
    )

    fired = rules.matching_defects(list(defects), cand.context)
    defect_reasons = []
    for rule in fired:
        if rule.action == "reject":
            also = " (the baseline matches it too)" if rules.defect_matches(rule, base.context) else ""
            defect_reasons.append(f"known stack defect '{rule.id}': {rule.title} ({rule.source}){also}")
    gaps = {
        r.id: rules.missing_context(r, cand.context) for r in defects if rules.affects_matches(r.affects, cand.context)
    }
    checks.append(
        CheckResult(
            name="defects",
            passed=not defect_reasons,
            reasons=defect_reasons,
            evidence={
                "fired": [{"id": r.id, "action": r.action, "source": r.source, "symptom": r.symptom} for r in fired],
                "unchecked": {k: v for k, v in gaps.items() if v},
            },
        )
    )

    precision = [c for c in changes if c.precision]
    precision_reasons = []
    if precision and precision_tolerance is None:
        precision_reasons = [
            f"precision change {c.describe()}; policy: rejected unless an explicit precision_tolerance is given"
            for c in precision
        ]
    checks.append(
        CheckResult(
            name="precision",
            passed=not precision_reasons,
            reasons=precision_reasons,
            evidence={"changed": [c.field for c in precision], "precision_tolerance": precision_tolerance},
        )
    )

    for check in checks:
        reasons += check.reasons
    if reasons:
        return Verdict(
            verdict="reject",
            stage="config",
            tier=tier,
            reasons=reasons,
            checks=checks,
            requires_convergence=False,
            precision_change=bool(precision),
        )
    info = [f"changed: {c.describe()}" for c in changes] or ["no field changed: the runs must be bitwise identical"]
    if precision:
        info.append(f"precision change accepted for a convergence check with tolerance {precision_tolerance}")
    info += [
        f"defect '{r.id}' requires a convergence check ({r.source})" for r in fired if r.action == "require_convergence"
    ]
    return Verdict(
        verdict="ok",
        stage="config",
        tier=tier,
        reasons=info,
        checks=checks,
        requires_convergence=True,
        precision_change=bool(precision),
    )


# ----------------------------------------------------------------------------- the I/O edge


def check_config(
    baseline: Recipe,
    candidate: Recipe,
    *,
    stack: dict[str, Any] | None = None,
    precision_tolerance: float | None = None,
) -> Verdict:
    """Config stage: resolve both recipes and judge the candidate's change (never runs training).

    ``stack`` is ``{"torch", "torchtitan", "device_family", ...}`` for the defect rules; default:
    this machine's stack. A baseline that does not resolve raises :class:`GateInputError`; a
    candidate that does not resolve is rejected.
    """
    stack = dict(stack) if stack is not None else local_stack()
    try:
        base = describe(baseline, stack=stack)
    except ResolveError as exc:
        raise GateInputError(f"baseline {baseline.name}: {exc}") from None
    try:
        cand = describe(candidate, stack=stack)
    except ResolveError as exc:
        reason = f"candidate does not resolve: {exc}"
        check = CheckResult(name="resolve", passed=False, reasons=[reason])
        return Verdict(
            verdict="reject", stage="config", tier="X", reasons=[reason], checks=[check], requires_convergence=False
        )
    return check_resolved(base, cand, precision_tolerance=precision_tolerance)
