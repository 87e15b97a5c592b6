"""The out-of-memory retry (an obligation): the failed layout retried with more recompute, more stages, half the
batch, compiled, or a memory partner that keeps a recompute saving."""

from __future__ import annotations

from bot.agent.cost_focus import (
    Partner,
    fastest_first,
)
from bot.agent.heuristic.checked import checked
from bot.agent.heuristic.constants import (
    BUDGET_PARTNER_LESSON,
    CP_PARTNER_LESSON,
    DEGREE_PARTNER_LESSON,
    DEGREES,
    LONG_SEQ,
    MAX_CHAIN,
    OOM_BATCH_LESSON,
    OOM_COMPILE_LESSON,
    OOM_LESSON,
    OOM_PP_LESSON,
    POLICY,
    PP_PARTNER_LESSON,
    RECOMPUTE_LADDER,
    RESHARD_PARTNER_LESSON,
    SCHEDULE_PARTNER_LESSON,
    STONE_LESSON,
    TP_NAME,
    TP_PARTNER_LESSON,
)
from bot.agent.heuristic.enablers import batch_enabler, stepping_stone
from bot.agent.heuristic.move import Context
from bot.agent.heuristic.screens import screened
from bot.agent.history import (
    AC_RANK,
    COMPILE_NAME,
    chain_depth,
    chain_steps,
    from_a_blind_probe,
    last_step_trial,
    recompute_retry_refuted,
)
from bot.agent.memory_screen import change_levers, predicted_peak
from bot.agent.policy import LeverSpace, validate_change
from bot.agent.space import layout_problem
from bot.agent.stopping import patience_stop
from bot.core import levers as catalog
from bot.core.records import Change, RecordReader, Scalar
from bot.core.state import Campaign, Step


def oom_retry(campaign: Campaign, space: LeverSpace, records: RecordReader | None = None) -> Change | None:
    """The last trial ran out of memory: retry its layout with more recomputation, then more pipeline stages; under
    full recompute a degree change with half the local batch (or PP microbatch) first, halved again only where the
    memory model anchored on the measured peak (``records``) puts the half within the device; where no stages can be
    added, compiled (:func:`compile_retry`)."""
    last, trial = last_step_trial(campaign)
    if last is not None and trial is None and last.change.predicted_slower and OOM_LESSON in last.change.lessons:
        return degree_partner(campaign, space, last)
    if last is None or trial is None or trial.outcome != "oom":
        return None
    eff = catalog.effective(last.levers)
    inc = catalog.effective(campaign.incumbent_levers)
    if AC_RANK.get(str(eff["activation_checkpoint"]), 2) < AC_RANK.get(str(inc["activation_checkpoint"]), 2):
        # the step (or the chain it ends) gave up recomputation and ran out of memory: keep the recompute saving
        # and retry it with an activation-memory partner instead (coupled move, one lever per step)
        return memory_partner(campaign, space, last, eff, inc)
    if last.change.lever == "activation_checkpoint" and last.change.stacked_on is None:
        return None  # the step changed the recompute mode itself: nothing to retry
    # a retry that ran out of memory again climbs the ladder (selective -> full) before the layout is abandoned
    mode = str(eff["activation_checkpoint"])
    nxt = RECOMPUTE_LADDER.get(mode)
    if nxt is not None and recompute_retry_refuted(campaign, last, nxt):
        return None
    if nxt is None:
        pp_name = "parallelism.pipeline_parallel_degree"
        pp = int(eff[pp_name])
        halve = halve_batch(campaign, space, last, eff, OOM_BATCH_LESSON)
        if halve is not None and last.change.lever in DEGREES and chain_depth(campaign, last) < MAX_CHAIN:
            return halve
        if (
            halve is not None
            and OOM_BATCH_LESSON in last.change.lessons
            and last.stacked_on is not None
            and chain_depth(campaign, last) < MAX_CHAIN
            and records is not None
        ):
            peak = predicted_peak(campaign, change_levers(campaign, halve), last.n, space, records)
            if peak is not None and peak.predicted <= peak.capacity:
                return halve.model_copy(
                    update={
                        "why": halve.why
                        + (
                            f"; halved once already, it measured {peak.measured:.0f} GiB, and the memory model, anchored on "
                            f"that peak, puts half of it at {peak.predicted:.0f} GiB of {peak.capacity:.0f}"
                        )
                    }
                )
        if mode != "full" or pp <= 1 or pp_name not in space.values or last.change.lever not in DEGREES:
            return compile_retry(campaign, space, last, eff)  # a degree change is re-sharded; others compiled
        if 2 * pp not in space.values[pp_name] or layout_problem(space.recipe, {**last.levers, pp_name: 2 * pp}):
            return compile_retry(campaign, space, last, eff)
        return stacked_retry(
            campaign,
            space,
            last.n,
            (pp_name, pp, 2 * pp),
            OOM_PP_LESSON,
            f"step {last.n} ({last.change.title()}) ran out of memory under full recomputation; retry that "
            "layout with the model split over twice the pipeline stages (half the weights, optimizer "
            "state and in-flight activations per rank)",
        )
    return stacked_retry(
        campaign,
        space,
        last.n,
        ("activation_checkpoint", mode, nxt),
        OOM_LESSON,
        f"step {last.n} ({last.change.title()}) ran out of memory; retry that layout with recomputation before abandoning it",
    )


def stacked_retry(
    campaign: Campaign,
    space: LeverSpace,
    on: int,
    move: tuple[str, Scalar | None, Scalar],
    lesson: str | list[str],
    why: str,
    reopen_screened: bool = False,
) -> Change | None:
    """The change ``move`` (lever, before, after), stacked on step ``on``, citing ``lesson`` (or lessons); None where
    the campaign would refuse it (``reopen_screened``: see :func:`validate_change`)."""
    lever, before, after = move
    lessons = [lesson] if isinstance(lesson, str) else lesson
    change = Change(lever=lever, before=before, after=after, lessons=lessons, policy=POLICY, stacked_on=on, why=why)
    return change if validate_change(campaign, change, space, reopen_screened=reopen_screened) is None else None


def compile_retry(campaign: Campaign, space: LeverSpace, last, eff: dict[str, Scalar]) -> Change | None:
    """Stacked on ``last``, which ran out of memory recomputing all it can, eager: the same layout compiled (Inductor's
    fused kernels save fewer intermediates for backward); None where compile is on, not offered, or illegal there."""
    if eff.get(COMPILE_NAME) or True not in space.values.get(COMPILE_NAME, []):
        return None
    if layout_problem(space.recipe, {**last.levers, COMPILE_NAME: True}) is not None:
        return None
    return stacked_retry(
        campaign,
        space,
        last.n,
        (COMPILE_NAME, False, True),
        OOM_COMPILE_LESSON,
        f"step {last.n} ({last.change.title()}) ran out of memory recomputing all it can; retry that layout "
        "compiled: the fused kernels save fewer intermediates for backward",
    )


def halve_batch(campaign: Campaign, space: LeverSpace, last, eff: dict[str, Scalar], lesson: str) -> Change | None:
    """Stacked on ``last``: half the activations per microbatch (local batch without PP, PP microbatch with it)."""
    pp = int(eff["parallelism.pipeline_parallel_degree"])
    name = "training.local_batch_size" if pp <= 1 else "parallelism.pipeline_parallel_microbatch_size"
    cur = eff.get(name)
    if name not in space.values or not isinstance(cur, int) or cur <= 1 or cur // 2 not in space.values[name]:
        return None
    if layout_problem(space.recipe, {**last.levers, name: cur // 2}) is not None:
        return None
    return stacked_retry(
        campaign,
        space,
        last.n,
        (name, cur, cur // 2),
        lesson,
        f"step {last.n} ({last.change.title()}) ran out of memory; retry that layout with half the "
        "activations per microbatch (the global batch stays pinned: only the accumulation split changes)",
    )


def layout_partners(space: LeverSpace, eff: dict[str, Scalar], stages: bool = True) -> list[Partner]:
    """The layout changes that free activation or parameter memory without recomputing more, for the layout ``eff``:
    the non-interleaved schedule, twice the pipeline stages (``stages``), resharding after forward again (no PP)."""
    sch_name, pp_name = "parallelism.pipeline_parallel_schedule", "parallelism.pipeline_parallel_degree"
    pp = int(eff[pp_name])
    options: list[Partner] = []
    if (
        pp > 1
        and sch_name in space.values
        and str(eff.get(sch_name, "")).lower().startswith("interleaved")
        and "1F1B" in space.values[sch_name]
    ):
        options.append(
            (
                sch_name,
                "1F1B",
                SCHEDULE_PARTNER_LESSON,
                "1F1B keeps at most PP microbatches in flight per rank; the interleaved schedule keeps more",
            )
        )
    if stages and pp_name in space.values and 2 * pp in space.values[pp_name]:
        options.append(
            (
                pp_name,
                2 * pp,
                PP_PARTNER_LESSON,
                "twice the pipeline stages: half the layers (weights, optimizer state, saved activations) per rank, "
                "and activations per microbatch instead of per local batch",
            )
        )
    reshard = "parallelism.fsdp_reshard_after_forward"
    if pp == 1 and str(eff.get(reshard)) == "never" and "default" in space.values.get(reshard, []):
        options.append(
            (
                reshard,
                "default",
                RESHARD_PARTNER_LESSON,
                "FSDP frees each layer's gathered parameters after its forward again, instead of holding them "
                "unsharded until its backward",
            )
        )
    return options


def degree_partner(campaign: Campaign, space: LeverSpace, retry: Step) -> Change | None:
    """A parallel-degree change ran out of memory and its recompute retry (``retry``) was predicted slower, so not
    run: retry the degree change with one of the :func:`layout_partners` that changes no parallel degree instead,
    the fastest the cost model predicts first. None where none applies."""
    failed = campaign.step(retry.stacked_on) if retry.stacked_on else None
    if failed is None or failed.change.lever not in DEGREES or chain_depth(campaign, failed) >= MAX_CHAIN:
        return None
    eff = catalog.effective(failed.levers)
    # no second degree change: the step measures the one it retries (more stages would be a new layout, not a retry)
    partners = layout_partners(space, eff, stages=False)
    for lever, value, lesson, how in fastest_first(campaign, space, failed, partners):
        if layout_problem(space.recipe, {**failed.levers, lever: value}) is not None:
            continue
        why = (
            f"step {failed.n} ({failed.change.title()}) ran out of memory and recomputing more is predicted slower; "
            f"free the memory with the layout instead: {how}"
        )
        move = (lever, eff.get(lever), value)
        change = stacked_retry(
            campaign, space, failed.n, move, [DEGREE_PARTNER_LESSON, lesson], why, reopen_screened=True
        )
        if change is not None:
            return change
    return None


def memory_partner(
    campaign: Campaign, space: LeverSpace, last, eff: dict[str, Scalar], inc: dict[str, Scalar]
) -> Change | None:
    """A recompute reduction ran out of memory: retry it (stacked) with the next activation-memory partner --
    context parallel at long sequences, the :func:`layout_partners`, twice the TP inside the node, in the order the
    cost model predicts fastest (:func:`fastest_first`) -- then memory_budget recompute in place, then smaller
    microbatches."""
    if chain_depth(campaign, last) >= MAX_CHAIN:
        return None
    cp_name = "parallelism.context_parallel_degree"
    seq = space.recipe.pinned.get("training.seq_len")
    options: list[Partner] = []
    if isinstance(seq, int) and seq >= LONG_SEQ and cp_name in space.values and int(eff[cp_name]) == int(inc[cp_name]):
        options.append(
            (
                cp_name,
                2 * int(eff[cp_name]),
                CP_PARTNER_LESSON,
                f"context parallel splits the {seq}-token sequence, halving the activations each rank keeps",
            )
        )
    options += layout_partners(space, eff)
    tp = int(eff[TP_NAME])
    # a partner of the recompute change itself (or, out of memory, in its own place), never stacked on another
    # partner (docs/agent-moves.md)
    if (
        TP_NAME in space.values
        and 2 * tp in space.values[TP_NAME]
        and 2 * tp <= space.recipe.cluster.devices_per_node
        and last.change.lever in ("activation_checkpoint", TP_NAME)
    ):
        options.append(
            (
                TP_NAME,
                2 * tp,
                TP_PARTNER_LESSON,
                "twice the tensor-parallel ranks inside the node, which with sequence parallel split every "
                "activation a layer keeps",
            )
        )
    for lever, value, lesson, how in fastest_first(campaign, space, last, options):
        # a partner that itself ran out of memory is retried one notch further in its place, not stacked on itself:
        # PP 1 -> 2 out of memory -> PP 1 -> 4 on the same recompute change (the chain stays as deep)
        on = campaign.step(last.stacked_on) if lever == last.change.lever and last.stacked_on else last
        why = f"step {on.n} ({on.change.title()}) gave up recomputation and ran out of memory; keep that and free activation memory instead: {how}"
        illegal = layout_problem(space.recipe, {**on.levers, lever: value})
        if illegal is not None:
            # refused by the pinned global batch or by the schedule's microbatch bound: the local batch (or, where
            # no local batch is legal on its own, the stepping-stone schedule) goes first as a gated enabler, the
            # partner stacked on it and measured -- within the chain's bound
            enabler = (
                None
                if chain_depth(campaign, on) + 2 > MAX_CHAIN
                else (
                    batch_enabler(campaign, space, lever, value, illegal, [lesson], stacked_on=on.n, why=why)
                    or stepping_stone(campaign, space, on, lever, value, illegal, lesson, why)
                )
            )
            if enabler is not None:
                return enabler
            continue
        # a layout the memory screen only predicted to run out stays open to a partner: this retry is anchored on
        # the peak the failed run measured
        move = (lever, catalog.effective(on.levers).get(lever), value)
        change = stacked_retry(campaign, space, on.n, move, lesson, why, reopen_screened=True)
        if change is not None:
            return change
    return memory_budget_in_place(campaign, space, last, eff) or halve_batch(
        campaign, space, last, eff, OOM_BATCH_LESSON
    )


def memory_budget_in_place(campaign: Campaign, space: LeverSpace, last, eff: dict[str, Scalar]) -> Change | None:
    """No recompute ran out of memory (with the layout partners, where they ran, out of memory too) under
    torch.compile: memory_budget recompute in place of the chain's change to none -- on what that change was
    stacked on, or from the incumbent -- which keeps part of the saving with the layout unchanged (lesson
    less-recompute-partner-memory-budget). None where it does not apply."""
    ac = "activation_checkpoint"
    if str(eff[ac]) != "none" or "memory_budget" not in space.values.get(ac, []) or not catalog.compiles_model(eff):
        return None
    ac_step = next(
        (
            campaign.step(n)
            for n in chain_steps(campaign, last.n)
            if campaign.step(n).change.lever == ac and str(campaign.step(n).change.after) == "none"
        ),
        None,
    )
    if ac_step is None:
        return None
    why = (
        f"step {ac_step.n} ({ac_step.change.title()}) gave up recomputation and ran out of memory"
        f"{'' if ac_step is last else ', its memory partners too'}; keep part of the saving instead: memory_budget "
        "recompute keeps what the compiler's partitioner fits in half the activations and recomputes the cheapest "
        "of the rest, with the layout unchanged"
    )
    if ac_step.stacked_on is None:
        return checked(campaign, space, ac, "memory_budget", why, [BUDGET_PARTNER_LESSON])
    on = campaign.step(ac_step.stacked_on)
    move = (ac, catalog.effective(on.levers)[ac], "memory_budget")
    return stacked_retry(campaign, space, on.n, move, BUDGET_PARTNER_LESSON, why)


class OomRetry:
    """The last trial ran out of memory (or was predicted to): that layout retried (:func:`oom_retry`), screened for
    speed -- except a blind probe's recompute retry once patience is spent (it is a probe too)."""

    id = "oom-retry"
    lessons = (
        OOM_LESSON,
        OOM_COMPILE_LESSON,
        DEGREE_PARTNER_LESSON,
        OOM_PP_LESSON,
        OOM_BATCH_LESSON,
        CP_PARTNER_LESSON,
        SCHEDULE_PARTNER_LESSON,
        PP_PARTNER_LESSON,
        RESHARD_PARTNER_LESSON,
        TP_PARTNER_LESSON,
        BUDGET_PARTNER_LESSON,
        STONE_LESSON,
    )
    obligation = True

    def propose(self, ctx: Context) -> Change | None:
        retry = screened(ctx.campaign, ctx.space, oom_retry(ctx.campaign, ctx.space, ctx.records))
        if (
            retry is not None
            and OOM_LESSON in retry.lessons
            and from_a_blind_probe(ctx.campaign, retry.stacked_on)
            and patience_stop(ctx.campaign)
        ):
            return None
        return retry
