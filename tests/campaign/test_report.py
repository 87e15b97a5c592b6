"""bot/campaign/report.py: step reports (size cap, mermaid chart with the same numbers as a table) and campaign summaries."""

from __future__ import annotations

import re

from campaign_fakes import make_record, new_state, play, recipe_text, scripted, table_rule

from bot import campaign as cm
from bot.campaign.report import MAX_REPORT, render_campaign_summary, render_run_summary, render_step_report
from bot.core.recipe import parse_recipe_text
from bot.core.records import CheckResult, Verdict

RECIPE = parse_recipe_text(recipe_text())
SCRIPT = [
    {"lever": "activation_checkpoint", "to": "none"},
    {"lever": "training.local_batch_size", "to": 2},
    {"lever": "loss.num_chunks", "to": 4},
]
RULE = table_rule(
    {(("training.local_batch_size", 2),): "oom", (("activation_checkpoint", "none"),): [1300.0, 1290.0]},
    [1000.0, 1010.0],
)


def campaign() -> cm.Campaign:
    return play(
        new_state(recipe_text()), scripted(SCRIPT), RULE, config_ok=lambda levers: levers.get("loss.num_chunks") != 4
    )


def curves(n: int) -> tuple:
    base = make_record(RECIPE, "ok", 1000.0, 0.01, losses=[5.0 - i * 1e-3 for i in range(n)])
    cand = make_record(RECIPE, "ok", 1300.0, 0.01, losses=[5.0 - i * 1e-3 + 2e-4 for i in range(n)])
    return base, cand


def chart_and_table(report: str) -> tuple[dict, list[list[str]]]:
    block = re.search(r"```mermaid\n(.*?)```", report, re.S).group(1)
    assert block.startswith("xychart-beta")
    xs = re.search(r"x-axis \[(.*)\]", block).group(1).replace('"', "").split(", ")
    lines = [m.split(", ") for m in re.findall(r"line \[(.*)\]", block)]
    text = report.splitlines()
    start = next(i for i, line in enumerate(text) if "| baseline loss" in line and "candidate loss" in line)
    rows = []
    for line in text[start + 2 :]:
        if not line.startswith("|"):
            break
        rows.append([c.strip() for c in line.strip("|").split("|")])
    return {"x": xs, "baseline": lines[0], "candidate": lines[1]}, rows


def test_a_step_report_shows_the_loss_chart_and_the_same_numbers_as_a_table() -> None:
    state = campaign()
    base, cand = curves(12)
    report = render_step_report(state, state.step(1), cand, base)
    chart, rows = chart_and_table(report)
    assert len(chart["x"]) == len(rows) == 12
    assert [r[0] for r in rows] == chart["x"]
    assert [r[1] for r in rows] == chart["baseline"] and [r[2] for r in rows] == chart["candidate"]
    assert chart["baseline"][0] == "5.0000"
    assert "| decision" in report and "kept (merged)" in report and "1,290" in report  # the re-measure
    assert report.splitlines()[2].startswith("| step") and set(report.splitlines()[3]) <= set("|-: ")  # a header row


def test_long_curves_stay_under_the_limit_and_keep_the_last_step() -> None:
    state = campaign()
    base, cand = curves(20_000)
    report = render_step_report(state, state.step(1), cand, base)
    assert len(report) < MAX_REPORT
    chart, rows = chart_and_table(report)
    assert len(rows) == len(chart["x"]) <= 40
    assert chart["x"][0] == "1" and chart["x"][-1] == "20000"  # the whole curve is sampled, not just its start
    assert [r[1] for r in rows] == chart["baseline"]


def test_a_huge_report_is_truncated_under_the_limit() -> None:
    state = campaign()
    step = state.step(1).model_copy(deep=True)
    reasons = ["x" * 5000] * 30
    step.verdict = Verdict(
        verdict="ok",
        stage="convergence",
        reasons=reasons,
        checks=[CheckResult(name=f"c{i}", passed=True, evidence={"k": "y" * 5000}) for i in range(10)],
    )
    report = render_step_report(state, step, *reversed(curves(100)))
    assert len(report) <= MAX_REPORT and report.endswith("(truncated)\n")


def test_a_config_rejection_is_reported_once_even_after_a_reload() -> None:
    state = cm.Campaign.model_validate_json(campaign().model_dump_json())  # as a resumed driver reads it
    step = state.step(3)
    assert step.config_verdict is not None and step.config_verdict.verdict == "reject"
    report = render_step_report(state, step, None, None)
    assert report.count("<summary>Gate (config): reject") == 1 and "<summary>Gate (convergence)" not in report
    assert "| gate: config" in report and "**reject**" in report


def test_the_campaign_summary_lists_every_step() -> None:
    state = campaign()
    summary = render_campaign_summary(state)
    for s in state.steps:
        assert re.search(rf"\|\s+{s.n}\s+\|\s+{re.escape(s.change.lever)}\s+\|", summary)
    assert "| oom" in summary and "yes" in summary
    for table in re.findall(r"((?:^\|.*\n)+)", summary, re.M):  # GitHub renders a table only under a header row
        first, second = table.splitlines()[:2]
        assert not set(first) <= set("|-: ") and set(second) <= set("|-: ")
    assert (
        "baseline tokens/s per device" in summary
        and "1,005" in summary
        and "+27.7% [+24.4%, +31.1%]" in summary
        and "gain (1)" in summary
    )
    assert f"{state.spent:.4f} of {state.budget:.4f} device-hours" in summary
    assert "the recipe is kept as it was" not in summary  # step 1 won


def test_a_campaign_that_ended_before_any_step_says_no_step_was_tried() -> None:
    """Stopped before its first step (or a baseline that could not run): it tried nothing, so it cannot say that no
    change cleared the minimum gain; one whose steps all failed to clear it says that."""
    from bot.core.records import Stop

    state = play(new_state(recipe_text()), lambda s: Stop(why="stopped by the user"), RULE)
    assert state.phase == "finished" and not state.steps
    summary = render_campaign_summary(state)
    assert "no step was tried; the recipe is kept as it was" in summary and "no change cleared" not in summary
    tried = play(new_state(recipe_text()), scripted(SCRIPT[1:2]), RULE)  # its one step runs out of memory
    assert tried.steps and tried.incumbent_step == 0
    assert "no change cleared the minimum worthwhile gain" in render_campaign_summary(tried)


def test_run_summary_labels_simulated_runs() -> None:
    record = make_record(RECIPE, "ok", 1234.0, 0.02, simulated=True)
    text = render_run_summary(record, "runs/x.json")
    assert "(SIMULATED)" in text and "1,234" in text and "runs/x.json" in text


def test_a_run_with_one_measured_step_has_no_spread_to_show() -> None:
    record = make_record(RECIPE, "ok", 1234.0, 0.02)
    assert "(CV 1.0%)" in render_run_summary(record, "runs/x.json")
    one = record.model_copy(update={"summary": record.summary.model_copy(update={"tps_cv": None})})
    text = render_run_summary(one, "runs/x.json")
    assert "(CV: too few measured steps)" in text and "CV 0.0%" not in text


def test_truncation_never_leaves_a_code_block_open() -> None:
    state = campaign()
    base, cand = curves(40)
    report = render_step_report(state, state.step(1), cand, base)
    chart_at = report.index("```mermaid")
    step = state.step(1).model_copy(deep=True)
    pad = MAX_REPORT - 40 - chart_at - 30  # the cut falls 30 characters into the mermaid block
    step.change = step.change.model_copy(update={"why": step.change.why + "w" * pad})
    long = render_step_report(state, step, cand, base)
    assert len(long) <= MAX_REPORT and long.endswith("(truncated)\n")
    assert "```mermaid" in long and "line [" not in long  # cut inside the chart...
    assert long.count("```") % 2 == 0  # ...and the block is closed


def test_a_step_report_shows_the_diagnosis_the_policies_used() -> None:
    state = campaign()
    base, cand = curves(12)
    sim = cand.model_copy(
        update={"simulated": True, "breakdown": {"compute_s": 6.0, "exposed_comm_s": 3.0, "bubble_s": 1.0}}
    )
    report = render_step_report(state, state.step(1), sim, base)
    section = report.split("<summary>Diagnosis</summary>", 1)[1].split("</details>", 1)[0]
    rows = {
        cells[0]: cells[1]
        for line in section.splitlines()
        if line.startswith("| ")
        for cells in [[c.strip() for c in line.strip("|").split("|")]]
    }
    assert rows["tokens/s per device"] == "1,300 (CV 1.0%)"
    assert rows["step-time breakdown (SIMULATED)"] == "compute 60%, exposed_comm 30%, bubble 10%"
    assert "Diagnosis" not in render_step_report(
        state, state.step(1), None, base
    )  # nothing measured, nothing diagnosed


def test_the_campaign_summary_names_the_gate_loss_band() -> None:
    state = campaign().model_copy(update={"calibrated": True, "calibration_note": "loss band calibrated on 4 runs (…)"})
    assert "| gate loss band" in render_campaign_summary(state) and "calibrated on 4 runs" in render_campaign_summary(
        state
    )


def test_the_report_opens_with_the_one_screen_summary_then_the_chart_then_folded_evidence() -> None:
    from bot.campaign.gate_calls import config_gate
    from bot.core.recipe import set_lever_text

    state = campaign()
    step = state.step(1).model_copy(deep=True)
    text = recipe_text()
    step.config_verdict = config_gate(
        parse_recipe_text(text), parse_recipe_text(set_lever_text(text, "activation_checkpoint", "none", source="r"))
    )
    base, cand = curves(12)
    report = render_step_report(state, step, cand, base)
    summary = report.split("**Why:**", 1)[0]
    for row in (
        "| decision",
        "| throughput",
        "| change",
        "| proposed by",
        "| gate: config",
        "| gate: convergence",
        "| cost",
    ):
        assert row in summary, row
    assert (
        "incumbent 1,005 → candidate 1,300" in summary
        and "**+27.7%** [+24.4%, +31.1%] (90% CI, 1 pair) — gain" in summary
    )
    assert report.index("**Why:**") < report.index("```mermaid") < report.index("<details>")
    assert "Traceback" not in report and "{'field'" not in report  # no raw Python dicts
    config = report.split("<summary>Gate (config)", 1)[1].split("</details>", 1)[0]
    mode = next(line for line in config.splitlines() if "`activation_checkpoint.mode`" in line)
    assert [c.strip() for c in mode.strip("|").split("|")][:5] == [
        "`activation_checkpoint.mode`",
        "`full`",
        "`none`",
        "B",
        "`activation_checkpoint*`",
    ]
    assert (
        "activation_checkpoint.debug" not in config and "no longer apply" in config
    )  # effect unchanged: counted, not listed
    assert "[source](https://" in config
    assert "Defect rules" in config and "could not be checked" in config


def test_mfu_is_shown_only_where_the_device_peak_is_known() -> None:
    cpu = make_record(RECIPE, "ok", 1000.0, 0.01)
    cpu.summary.mfu = 0.01
    assert "device peak unknown" in render_run_summary(cpu) and "0.01%" not in render_run_summary(cpu)
    gpu = cpu.model_copy(update={"stack": cpu.stack.model_copy(update={"device_family": "cuda"})})
    assert "0.01%" in render_run_summary(gpu)


def test_every_mermaid_chart_the_bot_emits_parses_with_mermaid_itself() -> None:
    from mermaid_check import parse_all

    state = campaign()
    charts = []
    for n in (2, 12, 20_000):
        base, cand = curves(n)
        for step in state.steps:
            charts += re.findall(r"```mermaid\n(.*?)```", render_step_report(state, step, cand, base), re.S)
    flat = make_record(RECIPE, "ok", 1000.0, 0.01, losses=[float("1e-9")] * 5)
    charts += re.findall(r"```mermaid\n(.*?)```", render_step_report(state, state.step(1), flat, flat), re.S)
    assert len(charts) >= 4 and all(c.startswith("xychart-beta") for c in charts)
    results = parse_all(charts)
    assert [r for r in results if not r["ok"]] == []
    assert {r["type"] for r in results} == {"xychart"}
    broken = parse_all(["xychart-beta\n    x-axis [1, 2\n    line [1"])  # and the check can fail
    assert broken[0]["ok"] is False


def test_the_summary_says_how_much_of_the_spend_went_to_runs_stopped_by_a_signal() -> None:
    state = campaign()
    assert "stopped by a signal" not in render_campaign_summary(state)
    lost = state.model_copy(update={"spent": state.spent + 0.0125, "abandoned": 0.0125})
    assert (
        f"{lost.spent:.4f} of {lost.budget:.4f} device-hours (0.0125 of them in runs stopped by a signal, not recorded)"
        in render_campaign_summary(lost)
    )
