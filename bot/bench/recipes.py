"""``attune bench recipes``: coverage of torchtitan's own LLM training configs, tuned in the simulator (SIMULATED).

For every training config of torchtitan 0.3.0's LLM registries (``REGISTRIES``; debug and SFT configs set aside,
:func:`set_aside`): build its model (:mod:`bot.facts`), draft the recipe as ``attune recipe init --launcher sim`` does
(:func:`bot.runner.draft.draft_recipe`) on the fewest devices of the rule (:func:`candidate_clusters`) where the
drafted layout runs in the simulator, then run the agent and the baselines through :func:`bot.bench.tuners.bench`
under its common budget. A config that does not build or whose draft does not run is a row that says why; nothing stops the rest.
"""

from __future__ import annotations

import ast
import importlib
import importlib.util
import re
import tempfile
import time
from pathlib import Path
from typing import Any

from tabulate import tabulate

from bot.bench.tuners import baseline_problem, bench
from bot.core.recipe import RecipeError, load_recipe
from bot.facts import FactsError, model_facts
from bot.facts.build import QUANTIZED_NOTE, SM100, converters_as_on, importable
from bot.runner.draft import draft_recipe, render
from bot.runner.resolve import ResolveError, resolve_args
from bot.sim.hardware import get_hardware

REGISTRIES = tuple(
    f"torchtitan.models.{m}"
    for m in ("llama3", "qwen3", "qwen3_5", "deepseek_v3", "gpt_oss", "kimi_k2_7", "muse_glimmer")
)
CLUSTER_SIZES = (8, 16, 32, 64, 128, 256)
HARDWARE_ORDER = ("h100-sxm-80gb", "h200")  # H100 first; H200 only where no H100 cluster size holds the state
DEVICES_PER_NODE = 8
STATE_BYTES_PER_PARAM = 16  # fp32 parameters, gradients and both Adam moments
MEMORY_SHARE = 0.5  # that state, sharded over the cluster, may fill at most this share of each device
DEFAULT_BASELINES = (
    "costmodel",
    "tpe",
)  # the two strongest by mean fraction of the oracle in a bench tuners probe (docs)
AGENT = "heuristic"
TARGET_FRACTION = 0.95


def registry_configs(module: str) -> list[str]:
    """The config functions of ``module``'s ``config_registry.py``, read from its source (so a registry whose imports
    fail here is still listed): public module-level functions with no required argument, in file order."""
    spec = importlib.util.find_spec(module)
    if spec is None or not spec.submodule_search_locations:
        return []
    path = Path(next(iter(spec.submodule_search_locations))) / "config_registry.py"
    if not path.is_file():
        return []
    names = []
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.FunctionDef) and not node.name.startswith("_"):
            a = node.args
            required = len(a.posonlyargs) + len(a.args) - len(a.defaults) + sum(d is None for d in a.kw_defaults)
            if required == 0:
                names.append(node.name)
    return names


def set_aside(config: str) -> str | None:
    """Why a registry config is not part of the benchmark, or None: debug configs (toy models for CI, not a training
    run to tune) and SFT configs (fine-tuning on a chat data set, not pre-training throughput)."""
    if "debug" in config:
        return "debug config (a toy model for torchtitan's own tests)"
    if config.startswith("sft_"):
        return "SFT config (fine-tuning, not a pre-training run)"
    return None


def candidate_clusters(n_params: int) -> list[tuple[str, int]]:
    """Every (hardware id, devices) of ``HARDWARE_ORDER`` x ``CLUSTER_SIZES``, H100s first and fewest first, on which
    the training state (``STATE_BYTES_PER_PARAM`` per parameter, sharded evenly) fills at most ``MEMORY_SHARE`` of
    each device."""
    state = STATE_BYTES_PER_PARAM * n_params
    return [
        (hw_id, n)
        for hw_id in HARDWARE_ORDER
        for n in CLUSTER_SIZES
        if state / n <= get_hardware(hw_id).hbm_gib * 2**30 * MEMORY_SHARE
    ]


def choose_cluster(n_params: int) -> tuple[str, int] | None:
    """The first of :func:`candidate_clusters`, or None where none holds the state."""
    return next(iter(candidate_clusters(n_params)), None)


def missing_package(message: str) -> str | None:
    """The top-level package a failed import names (``No module named 'x.y'`` -> ``x``), or None."""
    m = re.search(r"No module named '([\w.]+)'", message)
    return m.group(1).split(".")[0] if m else None


def _resolve(module: str, config: str) -> tuple[dict[str, Any], str | None]:
    """The config resolved as ``recipe init`` resolves it, and None; where torchtitan refuses a low-precision converter
    on this GPU-less host, resolved again with the converters answered as on an SM100 GPU (as :mod:`bot.facts` builds
    the model), and the refusal ``recipe init`` gives here."""
    argv = ["--module", module, "--config", config]
    with importable(Path.cwd()):
        try:
            return resolve_args(argv), None
        except ResolveError as exc:
            if "only supported on" not in str(exc):
                raise
            refusal = str(exc).splitlines()[0]
        with converters_as_on(SM100):
            return resolve_args(argv), refusal


def registry_import_problem(module: str) -> str | None:
    """The top-level package whose absence stops ``module``'s config registry from importing here, or None (torchtitan's
    ConfigManager reports such a failure as the module's, without the package's name)."""
    try:
        importlib.import_module(f"{module}.config_registry")
    except ModuleNotFoundError as exc:
        return (exc.name or "").split(".")[0] or None
    except Exception:
        return None
    return None


def draft(module: str, config: str, hw_id: str, devices: int, work: Path) -> tuple[Path, str | None]:
    """The recipe ``attune recipe init --launcher sim`` writes for the config on the cluster, written under ``work``,
    and ``recipe init``'s refusal on this host where the draft needed the converters' stand-in (:func:`_resolve`);
    ResolveError/FactsError/RecipeError where it cannot be drafted."""
    hw = get_hardware(hw_id)
    flat, refusal = _resolve(module, config)
    facts = model_facts(module, config, [])
    d = draft_recipe(
        module=module,
        config=config,
        overrides=[],
        flat=flat,
        spec=facts.spec,
        hw=hw,
        nodes=devices // DEVICES_PER_NODE,
        devices_per_node=DEVICES_PER_NODE,
        launcher="sim",
        quantized=QUANTIZED_NOTE in facts.family_notes,
    )
    path = work / config / f"{hw.id}x{devices}.yaml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(render(d))
    load_recipe(path)  # a RecipeError here: the draft is not a valid recipe
    return path, refusal


def _changed(base: dict[str, Any], best: dict[str, Any]) -> str:
    """The levers the oracle's point sets differently from the recipe: ``tp 8->4, ...`` (short names)."""
    parts = [f"{k.rsplit('.', 1)[-1]} {base.get(k)!s}->{v!s}" for k, v in best.items() if base.get(k) != v]
    return ", ".join(parts) or "none"


def coverage_row(module: str, config: str, seeds: int, baselines: tuple[str, ...], work: Path) -> dict[str, Any]:
    """One config's row: built (or why not), the cluster, accepted (or why not), and the campaigns' figures."""
    row: dict[str, Any] = {
        "module": module,
        "config": config,
        "built": False,
        "why": None,
        "missing_package": None,
        "total_params": None,
        "active_params": None,
        "hardware": None,
        "devices": None,
        "accepted": False,
        "baseline_tps_per_device": None,
        "oracle_gain": None,
        "agent": None,
        "best_baseline": None,
        "baselines": {},
        "note": "",
        "recipe_init_here": None,
    }
    try:
        facts = model_facts(module, config, [])
    except FactsError as exc:
        row.update(why=str(exc), missing_package=missing_package(str(exc)) or registry_import_problem(module))
        return row
    spec = facts.spec
    row.update(built=True, total_params=spec.n_params, active_params=spec.n_active_params)
    candidates = candidate_clusters(spec.n_params)
    if not candidates:
        row["why"] = f"no cluster of {CLUSTER_SIZES[-1]} devices or fewer holds its training state within the rule"
        return row
    problems = []
    for hw_id, devices in candidates:  # the fewest devices whose drafted layout runs
        row.update(hardware=hw_id, devices=devices)
        try:
            path, refusal = draft(module, config, hw_id, devices, work)
        except (ResolveError, FactsError, RecipeError) as exc:
            row["why"] = f"recipe init refused it: {str(exc).splitlines()[0]}"
            return row
        recipe = load_recipe(path)
        problem = baseline_problem(recipe)
        if problem is None:
            break
        problems.append(f"{devices} x {hw_id}: {problem}")
    else:
        row["why"] = "the drafted layout (the config's own) runs on no cluster of the rule: " + "; ".join(problems)
        return row
    row["accepted"] = True
    result = bench([path], seeds=seeds, policies=[AGENT, *baselines])
    task = recipe.name
    pols, oracle = result["tasks"][task], result["oracle"][task]
    row.update(
        baseline_tps_per_device=oracle["baseline_tps"],
        oracle_gain=oracle["oracle_gain"],
        oracle_changes=_changed(dict(recipe.levers), oracle["oracle_levers"]),
        budget_device_hours=oracle["budget"],
    )

    def figures(p: str) -> dict[str, Any]:
        m = pols[p]
        return {
            "policy": p,
            "gain": m["mean_gain"],
            "oracle_fraction": m["oracle_fraction"],
            "device_hours": m["device_hours"],
            "false_gains": int(m["false_gains"]),
        }

    row["agent"] = figures(AGENT)
    row["baselines"] = {p: figures(p) for p in baselines}
    row["best_baseline"] = max(row["baselines"].values(), key=lambda f: f["gain"]) if baselines else None
    row["recipe_init_here"] = refusal
    notes = []
    if row["agent"]["oracle_fraction"] < TARGET_FRACTION:
        notes.append(
            f"agent at {row['agent']['oracle_fraction']:.1%} of the oracle; the oracle's point: {row['oracle_changes']}"
        )
    if row["agent"]["false_gains"]:
        notes.append(f"{row['agent']['false_gains']} false gain(s)")
    row["note"] = "; ".join(notes)
    return row


def coverage(
    seeds: int = 3,
    baselines: tuple[str, ...] = DEFAULT_BASELINES,
    configs: list[str] | None = None,
    progress: Any = None,
) -> dict[str, Any]:
    """Every registry config (or those ``configs`` names, as ``config`` or ``module:config``): the rows and the
    configs set aside (SIMULATED)."""
    t0 = time.monotonic()
    rows, aside = [], []
    with tempfile.TemporaryDirectory() as tmp:
        for module in REGISTRIES:
            for config in registry_configs(module):
                if configs is not None and config not in configs and f"{module}:{config}" not in configs:
                    continue
                why = set_aside(config)
                if why is not None:
                    aside.append({"module": module, "config": config, "why": why})
                    continue
                rows.append(coverage_row(module, config, seeds, tuple(baselines), Path(tmp)))
                if progress:
                    progress(rows[-1])
    return {
        "simulated": True,
        "seeds": seeds,
        "baselines": list(baselines),
        "rule": RULE,
        "rows": rows,
        "set_aside": aside,
        "wall_s": time.monotonic() - t0,
    }


RULE = (
    f"the fewest of {', '.join(map(str, CLUSTER_SIZES))} H100 80GB ({DEVICES_PER_NODE} a node) on which "
    f"{STATE_BYTES_PER_PARAM} bytes/parameter (fp32 weights, gradients, Adam moments), sharded evenly, fill at "
    f"most {MEMORY_SHARE:.0%} of each device and the drafted layout runs in the simulator (the next count up where "
    f"it runs out of memory); H200 where no H100 count does"
)


def _b(n: int | None) -> str:
    return "—" if n is None else f"{n / 1e9:.2f} B"


def _pct(x: float | None) -> str:
    return "—" if x is None else f"{x:+.1%}"


def render_coverage(result: dict[str, Any]) -> str:
    """The report: the rule, the table (every number SIMULATED), the notes and the set-aside list."""
    lines = [
        f"# Registry coverage benchmark — SIMULATED ({result['seeds']} seeds; baselines "
        f"{', '.join(result['baselines'])})\n",
        f"Cluster rule: {result['rule']}.\n",
    ]
    body = []
    for r in result["rows"]:
        built = "yes" if r["built"] else f"no: missing {r['missing_package']}" if r["missing_package"] else "no"
        cluster = f"{r['devices']} x {r['hardware']}" if r["devices"] else "—"
        a, b = r["agent"], r["best_baseline"]
        body.append(
            [
                r["config"],
                built,
                _b(r["total_params"]),
                _b(r["active_params"]),
                cluster,
                "yes" if r["accepted"] else "no",
                "—" if r["baseline_tps_per_device"] is None else f"{r['baseline_tps_per_device']:.1f}",
                _pct(r["oracle_gain"]),
                _pct(a["gain"]) if a else "—",
                f"{a['oracle_fraction']:.1%}" if a else "—",
                f"{b['policy']} {_pct(b['gain'])}" if b else "—",
                f"{b['oracle_fraction']:.1%}" if b else "—",
                f"{a['device_hours']:.1f} / {b['device_hours']:.1f}" if a and b else "—",
                f"{a['false_gains']} / {b['false_gains']}" if a and b else "—",
            ]
        )
    headers = [
        "config",
        "built here",
        "total params",
        "active params",
        "cluster",
        "accepted",
        "baseline tok/s/dev",
        "oracle gain",
        "agent gain",
        "agent of oracle",
        "best baseline gain",
        "its of oracle",
        "device-h agent / best",
        "false gains agent / best",
    ]
    lines.append(tabulate(body, headers=headers, tablefmt="github", disable_numparse=True))
    why = [f"- {r['config']}: {r['why']}" for r in result["rows"] if r["why"]]
    notes = [f"- {r['config']}: {r['note']}" for r in result["rows"] if r["note"]]
    if why:
        lines += ["\nNot built or not accepted:", *why]
    if notes:
        lines += [f"\nBelow {TARGET_FRACTION:.0%} of the oracle or with a false gain:", *notes]
    stand_in = [f"- {r['config']}: {r['recipe_init_here']}" for r in result["rows"] if r.get("recipe_init_here")]
    if stand_in:
        lines += [
            "\nDrafted with the low-precision converters answered as on an SM100 GPU (as the model facts build them); "
            "`recipe init` on this GPU-less host refuses them:",
            *stand_in,
        ]
    if result["set_aside"]:
        lines += ["\nSet aside:", *(f"- {s['module']}:{s['config']}: {s['why']}" for s in result["set_aside"])]
    lines.append(f"\nAll numbers SIMULATED; {result['wall_s']:.0f} s.")
    return "\n".join(lines)
