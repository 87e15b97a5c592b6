"""Markdown and terminal text for runs, steps and campaigns: one renderer for PR comments, local step reports and
``attune campaign show``."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from tabulate import tabulate

from bot.campaign.measure import share
from bot.core.mdtext import code_safe, md_inline
from bot.core.records import Prediction, RunRecord, Verdict

if TYPE_CHECKING:
    from bot.core.state import Campaign, Measurement, Step


def _fmt(x: float | None, spec: str = ",.0f") -> str:
    return "—" if x is None else format(x, spec)


def render_run_summary(record: RunRecord, path: str | None = None) -> str:
    s = record.summary
    label = " (SIMULATED)" if record.simulated else ""
    rows: list[list[object]] = [
        ["outcome", record.outcome + (f" — {record.reason}" if record.reason else "")],
        ["steps", s.steps_completed],
        ["loss first → last", f"{_fmt(s.loss_first, '.4f')} → {_fmt(s.loss_last, '.4f')}"],
        [
            "tokens/s per device (median)",
            f"{_fmt(s.tps_median)}  "
            + ("(CV: too few measured steps)" if s.tps_cv is None else f"(CV {_fmt(s.tps_cv * 100, '.1f')}%)"),
        ],
        ["step time (median)", f"{_fmt(s.step_time_median_s, '.3f')} s"],
        [
            "MFU",
            _fmt(s.mfu, ".2f") + "%"
            if s.mfu is not None and record.stack.device_family in PEAK_KNOWN
            else "— (device peak unknown)",
        ],
        ["peak memory", f"{_fmt(s.peak_memory_gib, '.2f')} GiB"],
        ["wall / start-up", f"{s.wall_s:.1f} s / {_fmt(s.startup_s, '.1f')} s"],
        ["device-hours", f"{s.device_hours:.5f}"],
    ]
    if path:
        rows.append(["record", path])
    return f"run {record.run_id}{label}: {record.recipe_id}\n" + tabulate(rows, tablefmt="simple")


MAX_REPORT = 60_000  # GitHub holds 65,536 characters in a comment
PEAK_KNOWN = ("cuda", "rocm", "sim")  # device families with a known peak FLOP/s: MFU is shown only there
MAX_POINTS = 40  # points of a loss curve in a report (chart and table show the same ones)


def _sample(n: int, k: int = MAX_POINTS) -> list[int]:
    """Up to ``k`` indices spread evenly over ``range(n)``, the first and the last included."""
    if n <= k:
        return list(range(n))
    return sorted({round(i * (n - 1) / (k - 1)) for i in range(k)})


def _loss_chart(baseline: RunRecord | None, candidate: RunRecord | None) -> str:
    if not baseline or not candidate or not candidate.steps:
        return ""
    base = {s.step: s for s in baseline.steps}
    pairs = [(base[s.step], s) for s in candidate.steps if s.step in base]  # the steps both runs logged
    if not pairs:
        return ""
    pairs = [pairs[i] for i in _sample(len(pairs))]
    xs = [f'"{c.step}"' for _, c in pairs]
    b = [f"{bs.loss:.4f}" for bs, _ in pairs]
    c = [f"{cs.loss:.4f}" for _, cs in pairs]
    chart = "\n".join(
        [
            "```mermaid",
            "xychart-beta",
            '    title "Loss per step (line 1: baseline, line 2: candidate)"',
            f"    x-axis [{', '.join(xs)}]",
            '    y-axis "loss"',
            f"    line [{', '.join(b)}]",
            f"    line [{', '.join(c)}]",
            "```",
        ]
    )
    rows = [
        [cs.step, bl, cl, f"{cs.loss - bs.loss:+.2e}", _fmt(bs.grad_norm, ".4f"), _fmt(cs.grad_norm, ".4f")]
        for (bs, cs), bl, cl in zip(pairs, b, c, strict=True)
    ]
    table = tabulate(
        rows,
        headers=["step", "baseline loss", "candidate loss", "Δ", "baseline grad norm", "candidate grad norm"],
        tablefmt="github",
        disable_numparse=True,
    )
    return chart + "\n\n" + table


def _gate_line(v: Verdict | None) -> str:
    if v is None:
        return "not reached"
    head = f"**{v.verdict}** (tier {v.tier})"
    return head if v.ok else f"{head}: {md_inline(v.reasons[0], 200) if v.reasons else 'rejected'}"


def _estimate(state: Campaign, step: Step) -> str:
    """The candidate against the incumbent: the paired estimate with its interval, the pairs and why it stopped."""
    trial = next((r for r in step.runs if r.kind == "trial"), None)
    if trial is None or trial.tps is None:
        return "not measured"
    inc = _incumbent_before(state, step.n)
    text = f"incumbent {_fmt(inc)} → candidate {_fmt(trial.tps)} tokens/s/device (trial)"
    m = step.measurement
    if m is not None:
        text += "; " + measurement_line(m)
    elif step.gain is not None:
        text += f": {step.gain:+.1%} (unpaired trial)"
    return text


def measurement_line(m: Measurement) -> str:
    """``+12.3% [+8.1%, +16.7%] (90% CI, 2 pairs) — gain: why``: the fields the measurement protocol supplies."""
    if m.estimate is None:
        return f"{m.decision.replace('_', ' ')}: {m.why}"
    ci = "" if m.lo is None else f" [{m.lo:+.1%}, {m.hi:+.1%}]"
    what = "unpaired trial, cut" if m.cut else f"{m.pairs} pair{'s' * (m.pairs != 1)}"
    conf = f"{m.confidence:.0%} CI, " if m.lo is not None else ""
    return f"**{m.estimate:+.1%}**{ci} ({conf}{what}) — {m.decision.replace('_', ' ')}: {m.why}"


def _pairs_table(step: Step) -> str:
    """Each pair's runs in the order they ran, with the log-ratio."""
    import math

    rows = []
    for r in step.runs:
        if r.kind != "pair":
            continue
        d = f"{math.log(r.tps / r.reference_tps):+.4f}" if r.tps and r.reference_tps else "—"
        rows.append([r.attempt, r.order or "—", _fmt(r.reference_tps), _fmt(r.tps), d, r.outcome])
    if not rows:
        return ""
    return tabulate(
        rows,
        headers=["pair", "order", "incumbent tok/s", "candidate tok/s", "log-ratio", "outcome"],
        tablefmt="github",
        disable_numparse=True,
    )


def _incumbent_before(state: Campaign, n: int) -> float | None:
    """The incumbent step ``n`` was measured against: the last step kept before it, else the baseline."""
    kept = [s for s in state.steps if s.kept and s.n < n]
    if kept:
        from bot.core.state import confirmed_tps

        return confirmed_tps(kept[-1])
    return state.baseline_tps


def _config_changes(v: Verdict | None) -> str:
    """The config gate's changed fields whose effect changed (a field that only stops applying is counted, not listed)."""
    check = next((c for c in v.checks if c.name == "tiers"), None) if v is not None else None
    changed = list((check.evidence.get("changed") if check else None) or [])
    shown = [
        c for c in changed if isinstance(c, dict) and "<absent>" not in (str(c.get("before")), str(c.get("after")))
    ]
    if not shown:
        return ""
    rows = [
        [
            f"`{c.get('field')}`",
            f"`{c.get('before')}`",
            f"`{c.get('after')}`",
            c.get("tier", ""),
            f"`{c.get('rule', '')}`",
            f"[source]({c['source']})" if c.get("source") else "—",
        ]
        for c in shown[:40]
    ]
    hidden = len(changed) - len(shown)
    table = tabulate(
        rows, headers=["field", "before", "after", "tier", "rule", "source"], tablefmt="github", disable_numparse=True
    )
    return table + (
        f"\n\n{hidden} sub-field(s) no longer apply (absent in one of the configs) and are not listed."
        if hidden
        else ""
    )


def _defects(v: Verdict | None) -> str:
    check = next((c for c in v.checks if c.name == "defects"), None) if v is not None else None
    if check is None:
        return ""
    fired = check.evidence.get("fired") or []
    unchecked = check.evidence.get("unchecked") or {}
    lines = [f"- fired: `{f}`" for f in fired] or ["- none fired"]
    if unchecked:
        lines.append(
            f"- could not be checked ({len(unchecked)}): "
            + ", ".join(f"`{k}` (needs {', '.join(map(str, needs))})" for k, needs in list(unchecked.items())[:12])
        )
    return "\n".join(lines)


def _details(summary: str, body: str) -> str:
    return f"<details><summary>{summary}</summary>\n\n{body}\n\n</details>" if body else ""


def expectation(p: Prediction, measured: float | None) -> str:
    """One sentence: what the diagnosis saw, the move that acted on it, its prediction beside the measured result."""
    lead = f"The diagnosis saw {md_inline(p.saw)}; the" if p.saw else "The"
    pred = f"predicted {p.gain:+.1%} ({md_inline(p.basis)})" if p.gain is not None else "no prediction"
    got = f", measured {measured:+.1%}" if measured is not None else ", not measured"
    move = p.move.replace("`", "'")
    return f"{lead} `{move}` move acted on it: {pred}{got}."


def render_step_report(state: Campaign, step: Step, trial: RunRecord | None, baseline: RunRecord | None) -> str:
    """A step's report (PR body, PR comment, local step report): first the one-screen summary a reviewer decides
    from (decision and why, the throughput estimate with its uncertainty, the change and the lessons behind it, the
    gate per stage, the cost so far), then the loss chart and its table, then the evidence folded away (the config
    gate's changed fields, the defect rules, the convergence statistics, the diagnosis, the run facts)."""
    ch = step.change
    sim = " — SIMULATED" if trial is not None and trial.simulated else ""
    conv = step.verdict if step.verdict is not None and step.verdict.stage == "convergence" else None
    step_cost = sum(r.device_hours for r in step.runs)
    rows = [
        ["decision", _decision(step)],
        ["throughput", _estimate(state, step)],
        [
            "change",
            f"`{ch.lever}`: `{ch.before}` → `{ch.after}`"
            + (f" (+{len(ch.extra)} more levers)" if ch.extra else "")
            + (f", stacked on step {step.stacked_on}" if step.stacked_on else ""),
        ],
        ["proposed by", ch.policy + (f"; lessons: {', '.join(ch.lessons)}" if ch.lessons else "")],
        ["gate: config", _gate_line(step.config_verdict)],
        [
            "gate: convergence",
            _gate_line(conv)
            if conv is not None
            else (
                "not needed (tier B: bit-identical)"
                if step.config_verdict is not None
                and step.config_verdict.ok
                and not step.config_verdict.requires_convergence
                else "not reached"
            ),
        ],
        [
            "trial",
            next(
                (f"{r.outcome} {md_inline(r.reason)}".strip() for r in step.runs if r.kind == "trial"),
                "not run: an enabler (the change it enables is stacked on it and measured)"
                if ch.enabler
                else f"not run: {ch.predicted_slower}"
                if ch.predicted_slower
                else "not run yet",
            ),
        ],
        ["cost", f"this step {step_cost:.4f} device-hours; campaign {state.spent:.4f} of {state.budget:.4f}"],
    ]
    parts = [
        f"## ATTUNE step {step.n}: {ch.title()}{sim}",
        tabulate(rows, headers=["step", "value"], tablefmt="github"),
        f"**Why:** {ch.why}",
    ]
    if ch.prediction is not None:
        parts[-1] = f"**Why:** {expectation(ch.prediction, step.gain)} {ch.why}"
    chart = _loss_chart(baseline, trial) if trial is not None else ""
    if chart:
        parts.append("### Loss curve\n" + chart)
    evidence = []
    for v in (step.config_verdict, conv):
        if v is None:
            continue
        body = [f"- {md_inline(r, 4000)}" for r in v.reasons[:20] if not r.startswith("changed: ")]
        if v.stage == "config":
            body += [_config_changes(v), "**Defect rules**\n\n" + _defects(v) if _defects(v) else ""]
        for c in v.checks[:10]:
            if v.stage == "config" and c.name in ("tiers", "defects"):
                continue
            ev = ", ".join(f"{k}={val}" for k, val in list(c.evidence.items())[:8])
            body.append(
                f"- check `{c.name}`: {'pass' if c.passed else 'FAIL'}" + (f" — {md_inline(ev, 600)}" if ev else "")
            )
        evidence.append(_details(f"Gate ({v.stage}): {v.verdict} (tier {v.tier})", "\n\n".join(x for x in body if x)))
    if step.measurement is not None:
        m = step.measurement
        measured = "\n\n".join(
            x
            for x in (
                f"Rule: {m.rule}." if m.rule else "",
                _pairs_table(step),
                f"Noise: one pair's log-ratio sd {m.sigma:.4f} with {m.df} degrees of freedom (pooled over the "
                "campaign's repeat runs of one configuration)"
                if m.sigma is not None
                else "",
            )
            if x
        )
        evidence.append(
            _details(
                f"Measurement: {m.decision.replace('_', ' ')} after {m.pairs} pair{'s' * (m.pairs != 1)}", measured
            )
        )
    if trial is not None:
        evidence.append(_details("Diagnosis", render_diagnosis(trial)))
        evidence.append(_details("Run facts", "```\n" + code_safe(render_run_summary(trial)) + "\n```"))
    parts += [e for e in evidence if e]
    text = "\n\n".join(parts) + "\n"
    if len(text) <= MAX_REPORT:
        return text
    cut = text[: MAX_REPORT - 60]
    if cut.count("```") % 2:  # cut inside a code block: close it, or the rest of the comment renders as code
        cut += "\n```"
    cut += "\n</details>" * max(0, cut.count("<details>") - cut.count("</details>"))
    return cut + "\n\n…(truncated)\n"


def campaign_rows(state: Campaign) -> list[list[object]]:
    rows = []
    for s in state.steps:
        trial = next((r for r in s.runs if r.kind == "trial"), None)
        gate = s.verdict.verdict if s.verdict else (s.config_verdict.verdict if s.config_verdict else "—")
        m = s.measurement
        ci = "" if m is None or m.lo is None else f" [{m.lo:+.1%}, {m.hi:+.1%}]"
        rows.append(
            [
                s.n,
                s.change.lever,
                str(s.change.before),
                str(s.change.after),
                trial.outcome if trial else "—",
                gate,
                ("—" if s.gain is None else f"{s.gain:+.1%}") + ci,
                "—" if m is None else f"{m.decision.replace('_', ' ')} ({m.pairs})",
                "yes" if s.kept else "no",
                s.branch,
            ]
        )
    return rows


def render_campaign_summary(state: Campaign, status: str | None = None) -> str:
    """The campaign's summary in markdown. ``status``: how it stands, where that is more than its phase (``campaign
    show`` on one that finished with finish actions still pending says "finishing ..."; the summary those actions
    commit is rendered while they are pending, so it cannot tell by itself)."""
    band = state.band
    sim = any(r.simulated for r in state.baseline)
    shown = status or state.phase
    head = f"## ATTUNE campaign {state.id}{' — SIMULATED' if sim else ''}\n\nRecipe `{state.recipe_path}`, policy `{state.policy}`, {shown}."
    facts = [
        [
            "baseline tokens/s per device",
            _fmt(state.baseline_tps)
            + (
                f" (runs: {', '.join(_fmt(r.tps) for r in state.measured_baseline())}"
                + "".join(
                    f"; warm-up run {_fmt(r.tps)} not counted" for r in state.baseline[: state.baseline_warmup_runs]
                )
                + ")"
                if state.baseline
                else ""
            ),
        ],
        [
            "measurement",
            f"paired A/B, {state.confidence:.0%} interval, minimum worthwhile gain {share(state.min_gain)}, at most {state.max_pairs} pairs a step"
            + (f"; throughput band {band.band:.1%} (baseline spread {band.spread:.1%})" if band else ""),
        ],
        [
            "gate loss band",
            md_inline(state.calibration_note, 600)
            if state.calibration_note
            else ("—" if not state.calibrated else "none"),
        ],
        ["final tokens/s per device", _fmt(state.incumbent_tps)],
        ["gain", f"{state.gain:+.1%} (the kept steps' paired estimates, compounded)"],
        [
            "budget",
            f"{state.spent:.4f} of {state.budget:.4f} device-hours"
            + (f" ({state.abandoned:.4f} of them in runs stopped by a signal, not recorded)" if state.abandoned else "")
            + (f"; {md_inline(state.setup_note, 400)}" if state.setup_note else ""),
        ],
        ["payback", "—" if state.payback_hours() is None else f"{state.payback_hours():.3f} h of training"],
    ]
    if state.phase == "finished":
        verdict = md_inline(state.finish_reason, 600)
        if state.incumbent_step == 0 and not state.steps:
            verdict += " — no step was tried; the recipe is kept as it was"
        elif state.incumbent_step == 0:
            verdict += " — no change cleared the minimum worthwhile gain with confidence; the recipe is kept as it was"
        facts.append(["finished" if status is None or status == "finished" else "finishing", verdict])
    table = tabulate(
        campaign_rows(state),
        headers=["n", "lever", "from", "to", "outcome", "gate", "gain [CI]", "decision (pairs)", "kept", "branch"],
        tablefmt="github",
    )
    return f"{head}\n\n{tabulate(facts, headers=['campaign', 'value'], tablefmt='github')}\n\n### Steps\n\n{table}\n"


def _decision(step: Step) -> str:
    """What happened to the step, in words (a report is written before the merge or close it announces)."""
    if step.kept:
        if step.state == "merged":
            return "kept (merged)"
        return "kept: gate passed and the paired interval clears the minimum gain; merging"
    if step.close_reason:
        return f"closed: {md_inline(step.close_reason, 600)}"
    return {"proposed": "proposed", "open": "open: being measured", "closed": "closed"}.get(step.state, step.state)


def render_diagnosis(record: RunRecord) -> str:
    """The diagnosis every policy decided from (bot.core.diagnosis), as a small table."""
    from bot.core.diagnosis import diagnose

    d = diagnose(record)
    rows = [
        ["outcome", d.outcome + (f" — {md_inline(d.reason, 200)}" if d.reason else "")],
        [
            "tokens/s per device",
            "—" if d.tps is None else f"{d.tps:,.0f}" + ("" if d.tps_cv is None else f" (CV {d.tps_cv:.1%})"),
        ],
        [
            "MFU",
            f"{d.mfu:.2f}%"
            if d.mfu is not None and record.stack.device_family in PEAK_KNOWN
            else "— (device peak unknown)",
        ],
        ["step time", "—" if d.step_time_s is None else f"{d.step_time_s:.3f} s"],
        [
            "memory",
            "—"
            if d.peak_memory_gib is None
            else f"{d.peak_memory_gib:.2f} GiB peak"
            + (
                ""
                if d.mem_headroom_frac is None
                else f", headroom {d.mem_headroom_frac:.0%} of {d.memory_capacity_gib:.1f} GiB"
            ),
        ],
    ]
    if d.breakdown:
        rows.append(
            [
                "step-time breakdown" + (" (SIMULATED)" if d.simulated else ""),
                ", ".join(f"{k} {v:.0%}" for k, v in sorted(d.breakdown.items(), key=lambda kv: -kv[1])),
            ]
        )
    if d.spans_ms:
        rows.append(
            ["torchtitan spans (median ms/step)", ", ".join(f"{k} {v:.1f}" for k, v in sorted(d.spans_ms.items()))]
        )
    return "### Diagnosis\n\n" + tabulate(rows, headers=["", "trial"], tablefmt="github")


def summary_json(state: Campaign, repo: Any) -> dict[str, Any]:
    return {
        "campaign": state.id,
        "repo": str(repo),
        "recipe": state.recipe_path,
        "policy": state.policy,
        "simulated": any(r.simulated for r in state.baseline),  # its numbers are the simulator's, not measurements
        "baseline_tps": state.baseline_tps,
        "final_tps": state.incumbent_tps,
        "gain": state.gain,
        "noise_band": state.band.band if state.band else None,
        "min_gain": state.min_gain,
        "confidence": state.confidence,
        "max_pairs": state.max_pairs,
        "budget": state.budget,
        "device_hours": state.spent,
        "payback_hours": state.payback_hours(),
        "finish_reason": state.finish_reason,
        "steps": [
            {
                "n": s.n,
                "lever": s.change.lever,
                "from": s.change.before,
                "to": s.change.after,
                "outcome": next((r.outcome for r in s.runs if r.kind == "trial"), "not run"),
                "gate": v.verdict if (v := s.verdict or s.config_verdict) else None,
                "gain": s.gain,
                "measurement": s.measurement.model_dump() if s.measurement else None,
                "kept": s.kept,
                "branch": s.branch,
                "policy": s.change.policy,
            }
            for s in state.steps
        ],
    }
