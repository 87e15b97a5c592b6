"""The default policy: deterministic, offline, ordered lesson-guided rules.

The rules below are this module's; what they read of the campaign's past is :mod:`bot.agent.history`, when they
stop without a change :mod:`bot.agent.stopping`, which cost a move is aimed at and which goes first
:mod:`bot.agent.cost_focus`, and the notch and batch-share arithmetic of a move :mod:`bot.agent.layout_moves`.

0. **No gain in hand** (``no_gain_stop``): stop before the first step when the incumbent's addressable share
   (exposed communication + bubble + recompute with memory to spare) could not clear the noise band even if all
   of it were removed; and, while no step has been kept, the steps together may spend NO_GAIN_SHARE of the budget,
   each proposal carrying what is left as its step's cap (a recipe already at its optimum costs little).
1. **OOM -> recompute** (the rule that made the published campaigns): when the last trial ran
   out of memory, retry that same layout with more activation recomputation (a step stacked on
   the failed one) before the layout is abandoned; when it already recomputes everything, retry
   it with the model sharded over twice the pipeline stages (``oom-raise-pipeline-parallel``). The recompute
   retry is not made again for a change whose same retry was measured MOMENTUM_GAIN slower on an earlier incumbent
   (``recompute_retry_refuted``: recompute costs the same share again).
   A change the memory screen predicts to run out of memory (:mod:`bot.agent.memory_screen`: a measured peak
   scaled by the analytic memory model, over the device by more than its margin) is proposed with that
   prediction and not run: the campaign records it as an out-of-memory trial that cost nothing, and the
   retries above follow from it as from a real one. A retry (and a line search's next notch, 1c and the push past
   an undecided step) the speed screen predicts slower than the incumbent by more than the analytic model's error
   (:mod:`bot.agent.speed_screen`, GPUs only) is proposed with that prediction and not run either: the step closes
   with no gain at no cost, and patience counts it as the run it stands in for. A memory partner (``_memory_partner``: context parallel, 1F1B,
   more stages, twice the TP inside the node (on the recompute change itself) -- tried in the order the analytic cost
   model predicts fastest -- then smaller microbatches, for a recompute saving that ran out of memory) that runs out
   of memory itself is retried one notch further in its place, stacked on the same recompute change, so the chain
   grows no deeper.
   No recompute that runs out of memory, its layout partners too, under torch.compile: memory_budget recompute in
   place of the change to none (``_memory_budget_in_place``: the compiler's partitioner keeps half the activations,
   the layout unchanged), before half the local batch; memory_budget -> none is then the next step down.
1b. **Enablers**: a degree change that torchtitan would refuse only because the pinned global
   batch no longer divides (with ``dp_shard=-1`` a smaller TP/PP/CP grows the DP degree), or because its schedule
   would get fewer microbatches than stages, is preceded by the local-batch change that keeps ``local_batch x dp``
   (one lever, gated, not run) -- from the incumbent, or stacked on an out-of-memory step for its retry -- and
   then proposed stacked on it. A change that needs a prerequisite (expert or pipeline parallel with
   CUDA graphs off) gets the prerequisite as its enabler the same way: alone it may cost throughput,
   and it is worth only what it enables. More pipeline stages that would leave few microbatches per flush (an
   analytic bubble of BUBBLE_FRAC or more, the share the fill acts on once measured) are gated the same way, as
   the enabler of the largest local batch (``_fill_first``): run alone they would measure the bubble, not the
   layout. Where a schedule's own bound leaves no one-lever path -- DualPipeV needs microbatches >= stages, so twice
   the stages at the local batch's share are refused while twice the local batch at the old degree would not
   divide the global batch -- the schedule with the same stage placement and no such bound (ZBVZeroBubble) is the
   stepping stone (``_stepping_stone``), and the schedule it replaced is proposed back once legal
   (``_restore_schedule``). A schedule a lesson asks for that is refused only for too few microbatches
   (``_microbatch_enabler``) gets the local batch that gives them as its enabler; with the local batch already the global batch's share, twice (or four times) the TP degree inside the
   node, then CP, is the enabler of that larger local batch, itself the gated enabler of the schedule: a chain of
   two enablers with the schedule measured on them (the layout alone would price the old schedule). Legality (divisibility, batch arithmetic, stage split) is computed
   in code for free (``bot.agent.space.layout_problem``) -- never a speed or memory estimate.
1c. **Keep going**: a step kept with a large gain (MOMENTUM_GAIN) on a numeric lever is followed by the
   next notch the same way (a line search along the lever that paid), before the lessons; where that lever has no
   legal next notch and its kept change was enabled by a parallel degree, the same coupling one notch further (PP
   1 -> 2 as the enabler of local batch 2 -> 4: PP 2 -> 4 as the enabler of local batch 8), while the incumbent
   still spends COMM_FRAC of its step in exposed communication (what halving the DP ranks again removes). A
   coupled retry measured behind the incumbent gets a stacked follow-up for the cost it left behind
   (``_follow_up``) -- a bubble the local batch can no longer shrink: the pipeline schedule the lessons pick for
   that run, its levers and its diagnosis (the chain brought the stages in under the incumbent's schedule, a value
   never chosen while it did nothing); less recompute only where the recompute is the coupling's (it recomputes more than the
   incumbent, or the incumbent cannot recompute less itself: ``_recompute_left_behind``). A kept step that changed
   a parallel degree or the schedule with such a gain (unless the next notch is proposed first) is followed by a
   **second pass** over the kept steps that gained little before it and were aimed at a cost it was aimed at too
   (``_second_pass``): each one's change measured the other way, once, on the new layout (levers interact;
   coordinate descent repeats its passes). Where it did not run right after, it runs before the patience stop.
1d. **Fewer DP ranks** (from the breakdown), with the local batch already the pinned global batch's
   share: twice the TP degree (inside the node; then CP) as the enabler of twice the local batch -- under PP
   for a bubble (twice the microbatches per flush), without PP for exposed communication of COMM_FRAC or
   more with the FSDP group spread over nodes (half the FSDP ranks, each gathering half the weights). One measured
   try per incumbent: the other degree would buy the same halving.
2. The relevant lessons, highest priority first; each lesson's ``try`` list in order; the first
   change that is legal, untried and not objective-changing wins. A change whose prerequisite is
   missing proposes the prerequisite first, as its enabler (1b) -- compile over a V-shaped pipeline schedule
   (which crashes under it) the zero-bubble schedule without the V, while the incumbent's bubble is small. A
   lesson's change measured clearly slower on an earlier incumbent is not proposed again until a kept step
   changes a parallel degree or a lever the lesson reads (``refuted``), nor one that moves a lever back across a
   kept step that gained MOMENTUM_GAIN or more (``undoes_a_kept_step``). After the diagnosis-driven moves (1d),
   the lessons held back only by their memory-headroom threshold, where the memory screen predicts their change
   fits (the threshold stands in for a prediction the lesson cannot make). The diagnosis-driven move (1d) goes
   before the lessons when the cost it is aimed at is more than LARGER_COST times the one the first lesson's change
   is aimed at (``aimed_at_a_larger_cost``: fewer FSDP ranks for a third of the step in exposed communication
   before less recompute for 7 % of it; where the two costs are closer, the lessons' order stands) -- unless a
   lesson is aimed at that larger cost too and the analytic cost model predicts its change at least as fast
   (``predicted_faster``): the catalog's one-lever remedy then goes first (qwen3-30b-a3b on 64 H100 at EP 8:
   resharding off, predicted 22 % faster, before TP 2 with twice the local batch, predicted slower; llama3.1-8b on
   64 H200, where the model ranks TP 2 ahead, keeps TP 2 first).
2b. **Layout jump** (``layout-jump-from-cost-model``, :mod:`bot.agent.layout_jump`): once the lessons and the
   second pass have nothing left for the incumbent -- or once the campaign has spent JUMP_AT of its budget, once a
   campaign, so a search still climbing in its starting layout's basin gets to see another before the budget ends
   -- the layout the analytic cost model ranks best from the incumbent (its compile, async TP and resharding kept),
   where the model predicts it at least ``MIN_SAVING`` faster than the incumbent and predicts it to fit (its memory
   figure anchored on a measured peak): a chain of one-lever enablers through legal layouts, its last lever measured
   on them. Once per incumbent, and only after a step was kept and the model reproduced its measured speed-up --
   except that a jump which ran out of memory, its run having measured a peak, is re-aimed once from the same
   incumbent with its memory anchored on that peak (``_reaimed_jump``), before any out-of-memory retry.
3. Generic exploration of the remaining search space, one lever at a time -- never a lever whose whole
   addressable cost (the bubble for the schedule, recompute for activation checkpointing) is inside the
   noise band, never a lever that does nothing in the incumbent's layout (``bot.core.levers.inert``: the PP
   microbatch size or schedule without PP, async TP or sequence parallel without TP), never back to a value a
   kept step moved away from -- until patience runs out (PATIENCE
   measured steps, or PATIENCE_RUNS baseline runs' device-hours, since the last kept step). A blind probe that ran
   out of memory counts as one that found nothing, and its retry with more recompute is itself a blind probe: once
   patience is spent it is not made (the retry pays only where the probe gains more than the recompute it adds,
   which nothing measured suggests; a memory partner that keeps a recompute saving is still tried).
4. Nothing left: stop (the campaign keeps the recipe it has).
"""

from __future__ import annotations

from collections.abc import Callable

from bot.agent.cost_focus import (
    BUBBLE_LESSON,
    COMM_DP_LESSON,
    DP_BUBBLE_LESSON,
    Partner,
    aimed_at_a_larger_cost,
    aimed_cost,
    aims_at,
    costs_aimed_at,
    dominant_cost_first,
    fastest_first,
    predicted_faster,
    predicted_step,
    unmeasurable,
)
from bot.agent.costmodel import bubble_fraction
from bot.agent.history import (
    AC_RANK,
    ENABLER,
    EXPLORING,
    MOMENTUM_GAIN,
    already_stepped,
    chain_depth,
    chain_steps,
    compile_untried,
    enabled_why,
    from_a_blind_probe,
    incumbent_diagnosis,
    last_layout_step,
    last_step_trial,
    last_trial_failed,
    oom_dominated,
    oom_values,
    proposed_by,
    recompute_retry_refuted,
    refuted,
    tried_from_incumbent,
    undoes_a_kept_step,
)
from bot.agent.layout_jump import layout_jump
from bot.agent.layout_moves import (
    CP,
    TP,
    batch_share,
    dp_spans_nodes,
    fewer_dp_degrees,
    model_parallel,
    next_notch,
    notch_toward,
    with_batch_share,
)
from bot.agent.lessons import Lesson, LeverChange, apply_op, relevant
from bot.agent.memory_screen import MeasuredPeak, change_levers, predicted_oom, predicted_peak, reference_peak
from bot.agent.policy import LeverSpace, base_levers, lesson_context, validate_change
from bot.agent.space import layout_problem
from bot.agent.speed_screen import predicted_slower
from bot.agent.stopping import NO_RECOMPUTE_HEADROOM, no_gain_allowance_left, no_gain_stop, patience_stop
from bot.core import levers as catalog
from bot.core.diagnosis import Diagnosis, diagnose
from bot.core.records import MEASURED_OUTCOMES, Change, RecordReader, Scalar, Stop
from bot.core.state import Campaign, Step

DEGREES = catalog.PARALLEL_DEGREES
RECOMPUTE_LADDER = {"none": "selective", "selective": "full", "memory_budget": "full"}
OOM_LESSON = "oom-enable-recompute"
OOM_PP_LESSON = "oom-raise-pipeline-parallel"
# Generic exploration order once the lessons are spent: the levers with the largest effect on step
# time first (recompute, batch split, pipeline schedule, parallel degrees), housekeeping last.
EXPLORE_ORDER = ("activation_checkpoint", "training.local_batch_size", "parallelism.pipeline_parallel_microbatch_size",
                 "parallelism.pipeline_parallel_schedule", "parallelism.tensor_parallel_degree",
                 "parallelism.pipeline_parallel_degree", "parallelism.expert_parallel_degree",
                 "parallelism.context_parallel_degree", "compile.enable", "compile.enable_async_tensor_parallel",
                 "parallelism.fsdp_reshard_after_forward")


def _relative(space: LeverSpace, current: Scalar, lc: LeverChange) -> Scalar | None:
    if lc.op is None:
        return lc.value
    return apply_op(lc.op, current, space.values.get(lc.lever) or list(catalog.get(lc.lever).choices))


class HeuristicPolicy:
    name = "heuristic"

    def propose(self, campaign: Campaign, diagnosis: Diagnosis, lessons: list[Lesson], levers: LeverSpace,
                records: RecordReader) -> Change | Stop:
        incumbent = incumbent_diagnosis(campaign, records) if campaign.steps else diagnosis
        flat = no_gain_stop(campaign, incumbent)
        if flat is not None:
            return Stop(why=flat, policy=self.name)
        decision = self._propose(campaign, diagnosis, lessons, levers, records, incumbent)
        if isinstance(decision, Change) and not decision.enabler:  # not run when it cannot fit: an OOM, for free
            oom = predicted_oom(campaign, change_levers(campaign, decision), decision.stacked_on, levers, records)
            if oom is not None:  # a layout that cannot fit is not slow: its retries follow from the out-of-memory trial
                decision = decision.model_copy(update={"predicted_oom": oom, "predicted_slower": ""})
            elif not decision.predicted_slower:
                decision = self._fill_first(campaign, levers, decision) or decision
        left = no_gain_allowance_left(campaign, incumbent)
        if isinstance(decision, Change) and left:  # a probe with no gain in hand spends what is left of it
            return decision.model_copy(update={"max_device_hours": left})
        return decision

    def _propose(self, campaign: Campaign, diagnosis: Diagnosis, lessons: list[Lesson], levers: LeverSpace,
                 records: RecordReader, incumbent: Diagnosis | None) -> Change | Stop:
        reaimed = self._reaimed_jump(campaign, levers, lessons, diagnosis, records)
        if reaimed is not None:
            return reaimed
        retry = self._screened(campaign, levers, self._oom_retry(campaign, levers, records))
        if retry is not None and not (OOM_LESSON in retry.lessons and from_a_blind_probe(campaign, retry.stacked_on)
                                      and patience_stop(campaign)):
            return retry
        follow = (self._enabled_change(campaign, levers) or self._follow_up(campaign, levers, records, lessons)
                  or self._screened(campaign, levers, self._push_further(campaign, levers))
                  or self._screened(campaign, levers, self._keep_going(campaign, levers, incumbent)) or self._restore_schedule(campaign, levers)
                  or self._second_pass(campaign, levers, lessons, just_kept=True))
        if follow is not None:
            return follow
        less = self._less_recompute_that_fits(campaign, levers, records)
        if less is not None:
            return less
        review = self._jump_review(campaign, levers, records)
        if review is not None:
            return review
        if campaign.budget > 0 and campaign.spent >= JUMP_AT * campaign.budget and not any(JUMP_LESSON in s.change.lessons for s in campaign.steps):
            jump = self._layout_jump(campaign, levers, lessons, diagnosis, records)
            if jump is not None:
                return jump
        if diagnosis.outcome != "ok" and last_trial_failed(campaign):
            # that failure was a rejected candidate's (its layout is abandoned); the lessons are matched
            # against the incumbent, which ran fine — an OOM lesson must not fire on a recipe that fits
            diagnosis = incumbent_diagnosis(campaign, records) or Diagnosis(outcome="ok", simulated=diagnosis.simulated)
        ctx = lesson_context(campaign, diagnosis, levers)
        current = catalog.effective(campaign.incumbent_levers)
        moot = unmeasurable(campaign, diagnosis)
        hits = relevant(lessons, ctx)
        lesson_change = self._from_lessons(campaign, levers, dominant_cost_first(hits, diagnosis), current, moot, incumbent)
        driven = self._diagnosis_driven(campaign, diagnosis, levers)
        if lesson_change is not None and not aimed_at_a_larger_cost(driven, lesson_change, diagnosis):
            return lesson_change
        if driven is not None:
            # a lesson aimed at the same cost first, where the analytic model predicts its change the faster
            aimed = [ls for ls in hits if aims_at(ls, aimed_cost(driven))] if lesson_change is not None else []
            same = self._from_lessons(campaign, levers, aimed, current, moot, incumbent) if aimed else None
            return same if same is not None and predicted_faster(campaign, levers, same, driven) else driven
        # then the lessons held back only by their headroom threshold, where the memory screen predicts their change fits
        held = dominant_cost_first(_held_back_by_headroom(lessons, ctx, hits), diagnosis)
        lesson_change = self._from_lessons(campaign, levers, held, current, moot, incumbent,
                                           fits=lambda c, lv: _if_predicted_to_fit(campaign, c, lv, levers, records)
                                           or self._smaller_batch_share(campaign, levers, c, lv, records))
        if lesson_change is not None:
            return lesson_change
        second = self._second_pass(campaign, levers, lessons)
        if second is not None:
            return second
        jump = self._layout_jump(campaign, levers, lessons, diagnosis, records)
        if jump is not None:
            return jump
        stop = patience_stop(campaign)
        if stop is not None:
            return Stop(why=stop, policy=self.name)
        order = sorted(levers.values, key=lambda k: EXPLORE_ORDER.index(k) if k in EXPLORE_ORDER else len(EXPLORE_ORDER))
        # blind probes skip, besides the moot levers, those that do nothing in the incumbent's layout
        moot = moot | {k for k in levers.values if catalog.inert(campaign.incumbent_levers, k)}
        order = [k for k in order if k not in moot]
        for lever in order:  # first the nearest moves of each lever, most impactful levers first
            for value in _neighbours(campaign, levers, lever, current.get(lever)):
                if undoes_a_kept_step(campaign, lever, value):
                    continue
                change = self._checked(campaign, levers, lever, value, EXPLORING, [], incumbent)
                if change is not None:
                    return change
        for lever, values in levers.values.items():  # then every other legal value, in the space's order
            if lever in moot:
                continue
            for value in values:
                if oom_dominated(campaign, lever, value) or undoes_a_kept_step(campaign, lever, value):
                    continue
                change = self._checked(campaign, levers, lever, value, EXPLORING, [], incumbent)
                if change is not None:
                    return change
        return Stop(why="no untried legal change is left in the search space", policy=self.name)

    def _reaimed_jump(self, campaign: Campaign, space: LeverSpace, lessons: list[Lesson], diagnosis: Diagnosis,
                      records: RecordReader) -> Change | None:
        """The incumbent's layout jump ran out of memory and its run measured a peak: one more jump from the same
        incumbent, its memory anchored on that peak instead of the incumbent's. The memory model's ratio errs more
        the further the layouts lie apart, and the failed layout is the measured one nearest the jump's
        neighbourhood (llama3.1-70b on 64 H100s: TP 2 / CP 4 / PP 8 without recompute, anchored on the TP 4 / CP 2 /
        selective incumbent at 72 GiB, measured 86 GiB; anchored on that run, TP 4 / CP 2 / PP 8 is predicted at
        77 GiB on 79.6 GiB devices and measures 79). None otherwise -- the jump's OOM is then handled like any
        other -- and never a third jump from one incumbent."""
        last, trial = last_step_trial(campaign)
        if last is None or trial is None or trial.outcome != "oom" or JUMP_LESSON not in last.change.lessons:
            return None
        if sum(1 for s in campaign.steps if s.n > campaign.incumbent_step and JUMP_LESSON in s.change.lessons and s.runs) != 1:
            return None
        peak = reference_peak(campaign, last.n, records)
        if peak is None or catalog.effective(peak.levers) != catalog.effective(last.levers):
            return None  # the failed run reported no peak: the same anchor would aim the same way
        on = incumbent_diagnosis(campaign, records)  # the lessons match the incumbent, which ran fine
        return self._layout_jump(campaign, space, lessons, on, records, anchor=peak) if on is not None else None

    def _layout_jump(self, campaign: Campaign, space: LeverSpace, lessons: list[Lesson], diagnosis: Diagnosis,
                     records: RecordReader, anchor: MeasuredPeak | None = None) -> Change | None:
        """The diagnosis- and lesson-driven moves are spent: the layout the analytic cost model ranks best from the
        incumbent (:mod:`bot.agent.layout_jump`), once per incumbent, as a chain of one-lever enablers with its last
        lever measured on them (``layout-jump-from-cost-model``; the lesson must be in the catalog and match).
        ``anchor``: the measured peak its memory is judged on, for the re-aimed jump (``_reaimed_jump``); else the
        incumbent's."""
        if not any(lesson.id == JUMP_LESSON for lesson in relevant(lessons, lesson_context(campaign, diagnosis, space))):
            return None
        if anchor is None and any(JUMP_LESSON in s.change.lessons for s in campaign.steps if s.n > campaign.incumbent_step):
            return None
        if not campaign.incumbent_step:
            return None  # nothing kept: no measured speed-up the model could be checked against
        stepped = [campaign.baseline_levers, *(s.levers for s in campaign.steps if s.runs or not s.change.enabler)]
        jump = layout_jump(space.recipe, campaign.baseline_levers, campaign.incumbent_levers, space.values, stepped, space.model,
                           frozenset(unmeasurable(campaign, diagnosis)), anchor or reference_peak(campaign, None, records),
                           campaign.incumbent_tps / campaign.baseline_tps if campaign.incumbent_tps and campaign.baseline_tps else None,
                           last_layout_step(campaign), compile_untried(campaign, space))
        if jump is None:
            return None
        current = catalog.effective(campaign.incumbent_levers)
        (lever, value), *rest = jump.links
        layout = ", ".join(f"{k.rsplit('.', 1)[-1]} {current.get(k)} -> {v}" for k, v in jump.links)
        why = (f"no diagnosis- or lesson-driven move is left; the analytic cost model predicts the layout {layout} "
               f"{jump.saving:.0%} faster than the incumbent's ({jump.incumbent_step_s:.2f} s -> {jump.step_s:.2f} s a step; "
               f"{jump.summary}), its other levers kept: measured once, reached one lever at a time")
        if rest:
            why = f"enabler of {', then '.join(f'{k}={v}' for k, v in rest)}: {why}"
        change = Change(lever=lever, before=current.get(lever), after=value, lessons=[JUMP_LESSON], policy=self.name,
                        why=why, enabler=bool(rest))
        return change if validate_change(campaign, change, space) is None else None

    def _screened(self, campaign: Campaign, space: LeverSpace, change: Change | None) -> Change | None:
        """``change`` -- an out-of-memory retry or a line search's next notch, moves that carry no knowledge of their
        own about speed -- with the speed screen's prediction where the analytic model puts the layout it leads to
        slower than the incumbent by more than its error (:mod:`bot.agent.speed_screen`): proposed, not run."""
        if change is None or change.enabler:
            return change
        slower = predicted_slower(space, campaign.incumbent_levers, change_levers(campaign, change))
        return change.model_copy(update={"predicted_slower": slower}) if slower is not None else change

    def _fill_first(self, campaign: Campaign, space: LeverSpace, change: Change) -> Change | None:
        """A change to more pipeline stages that would leave too few microbatches per flush -- an analytic bubble
        ((p-1)/(v·m), :func:`bot.agent.costmodel.bubble_fraction`) of BUBBLE_FRAC of the step or more, the share
        at which ``_fix_for`` and the diagnosis-driven fill act on a measured bubble -- is made the enabler of the
        largest local batch the pinned global batch allows, the move a run of it would be followed by (``_fix_for``):
        its run alone would measure the bubble, not the layout (minimax-m2: PP 2 -> 4 at 4 microbatches ran at -39 %
        before local batch 128 on it was kept at +17 %; qwen3-235b-a22b: PP 4 -> 8 under DualPipeV at 16 microbatches,
        a 7 % analytic bubble, was kept and the fill to 32 measured on its own afterwards, 2-3 runs for +1.6 %). It
        applies to an out-of-memory retry too (the stacked local batch is then the chain's last retry). None where it
        does not apply: fewer stages, a chain at MAX_CHAIN, no larger legal local batch, or that configuration already
        stepped (then the change runs alone, as it would have)."""
        pp_name, lbs_name = "parallelism.pipeline_parallel_degree", "training.local_batch_size"
        if (change.enabler or change.lever != pp_name or not isinstance(change.after, int) or not isinstance(change.before, int)
                or change.after <= max(change.before, 1) or lbs_name not in space.values):
            return None
        if change.stacked_on and len(chain_steps(campaign, change.stacked_on)) + 2 > MAX_CHAIN:
            return None
        levers = change_levers(campaign, change)
        eff = catalog.effective(levers)
        lbs = int(eff[lbs_name])
        m = max(lbs // max(int(eff["parallelism.pipeline_parallel_microbatch_size"]), 1), 1)
        frac = bubble_fraction(change.after, str(eff[SCHEDULE]), m)
        share = frac / (1.0 + frac)  # of the step: the bubble over busy time + bubble
        if share < BUBBLE_FRAC:
            return None
        legal = [v for v in space.values[lbs_name] if isinstance(v, int) and v > lbs and layout_problem(space.recipe, {**levers, lbs_name: v}) is None]
        if not legal or already_stepped(campaign, {**levers, lbs_name: max(legal)}):
            return None
        enabler = change.model_copy(update={
            "enabler": True, "lessons": [*change.lessons, BUBBLE_LESSON],
            "why": f"enabler of {lbs_name}={max(legal)}: {change.why}; alone, {change.after} stages at {m} microbatches "
                   f"per flush would idle about {share:.0%} of the step in the pipeline bubble ((p-1)/(v·m)), so the "
                   "largest local batch the pinned global batch allows is stacked on it and measured with it"})
        return enabler if validate_change(campaign, enabler, space) is None else None

    def _from_lessons(self, campaign: Campaign, space: LeverSpace, lessons: list[Lesson], current: dict[str, Scalar], moot: set[str],
                      incumbent: Diagnosis | None = None, fits: Callable[[Change, dict[str, Scalar]], Change | None] | None = None) -> Change | None:
        """The first legal, untried change of ``lessons`` (in order; each lesson's ``try`` list in order), passed
        through ``fits`` when given, with the levers the lesson's change runs with (an enabler's too; None from it:
        that change is passed over)."""
        for lesson in lessons:
            if not lesson.auto_propose:
                continue
            for lc in lesson.try_:
                if lc.lever not in space.values and lc.lever not in space.recipe.levers:
                    continue  # the recipe does not let the tuner change it
                if lc.lever in moot:
                    continue
                value = _relative(space, current.get(lc.lever), lc)
                if value is None or refuted(campaign, lesson, lc.lever, value) or undoes_a_kept_step(campaign, lc.lever, value, MOMENTUM_GAIN):
                    continue
                change = self._checked(campaign, space, lc.lever, value, lesson.why, [lesson.id], incumbent)
                if change is not None and fits is not None:
                    change = fits(change, {**change_levers(campaign, change), lc.lever: value})
                if change is not None:
                    return change
        return None

    def _checked(self, campaign: Campaign, space: LeverSpace, lever: str, value: Scalar, why: str, lessons: list[str],
                 incumbent: Diagnosis | None = None) -> Change | None:
        """``lever=value`` as a step from the incumbent if it may be one; else its enabler (a local batch that keeps the
        pinned global batch, a missing prerequisite) when one exists; else None. ``incumbent``: the incumbent's
        diagnosis, which a prerequisite that replaces its pipeline schedule needs (:meth:`_prerequisite`)."""
        current = catalog.effective(campaign.incumbent_levers)
        change = Change(lever=lever, before=current.get(lever), after=value, why=why, lessons=lessons, policy=self.name)
        problem = validate_change(campaign, change, space)
        if problem is None:
            illegal = layout_problem(space.recipe, {**campaign.incumbent_levers, lever: value})
            if illegal is None:
                return change
            if lever == SCHEDULE:
                return self._microbatch_enabler(campaign, space, value, illegal, why, lessons)
            return self._enabler(campaign, space, lever, value, illegal, lessons)
        if problem.startswith("prerequisite missing") and lever == SCHEDULE and TOO_FEW_MICROBATCHES in problem:
            return self._microbatch_enabler(campaign, space, value, problem.removeprefix("prerequisite missing: "), why, lessons)
        if problem.startswith("prerequisite missing"):
            fix = catalog.prerequisite_for(campaign.incumbent_levers, lever, value, space.model)
            if fix is not None:
                return self._prerequisite(campaign, space, lever, value, fix, problem, lessons, incumbent)
        return None

    def _prerequisite(self, campaign: Campaign, space: LeverSpace, lever: str, value: Scalar, fix: tuple[str, Scalar],
                      problem: str, lessons: list[str], incumbent: Diagnosis | None = None) -> Change | None:
        """``lever=value`` needs ``fix`` first (expert parallel with torchtitan's host-synced dispatcher needs CUDA
        graphs off): that prerequisite as an enabler -- gated, not run on its own (alone it may well cost throughput,
        and it is worth only what it enables) -- with the change it enables stacked on it and measured. A prerequisite
        that replaces the incumbent's pipeline schedule (compile over a V-shaped schedule needs the zero-bubble one
        without the V) is proposed only while the incumbent's bubble is under BUBBLE_FRAC: there any zero-bubble
        schedule leaves about as little, while a larger bubble means the schedule the campaign kept is still what
        bounds the step, and swapping it risks more than the enabled change may pay; and only without recompute
        (InterleavedZeroBubble with activation checkpointing runs at a tenth of Interleaved1F1B, torchtitan#773: the
        gate's defect rule interleaved-zero-bubble-with-ac rejects it); and not away from DualPipeV under expert
        parallel, whose all-to-all it hides under the other direction's compute (moe-pp-dualpipe-hides-all-to-all):
        the replacement would expose it again (deepseek-v3: DualPipeV -> InterleavedZeroBubble for compile, -29 %)."""
        current = catalog.effective(campaign.incumbent_levers)
        if fix[0] == SCHEDULE and (incumbent is None or incumbent.outcome != "ok" or "bubble" not in incumbent.breakdown
                                   or incumbent.breakdown["bubble"] >= BUBBLE_FRAC or current["activation_checkpoint"] != "none"
                                   or (current.get(SCHEDULE) == "DualPipeV" and int(current.get("parallelism.expert_parallel_degree") or 1) > 1)):
            return None
        enabled = {**campaign.incumbent_levers, fix[0]: fix[1], lever: value}
        if already_stepped(campaign, enabled):
            return None  # the change it would enable was already measured (or refused)
        if layout_problem(space.recipe, enabled) is not None or layout_problem(space.recipe, {**campaign.incumbent_levers, fix[0]: fix[1]}):
            return None
        pre = Change(lever=fix[0], before=current.get(fix[0]), after=fix[1], lessons=lessons, policy=self.name, enabler=True,
                     why=f"enabler of {lever}={value}: its prerequisite ({problem.removeprefix('prerequisite missing: ')})")
        return pre if validate_change(campaign, pre, space) is None else None

    def _enabler(self, campaign: Campaign, space: LeverSpace, lever: str, value: Scalar, illegal: str,
                 lessons: list[str], *, stacked_on: int | None = None, why: str = "") -> Change | None:
        """``lever=value`` is refused only by the pinned global batch (or by the microbatches per flush its share
        leaves a schedule): the local-batch change that keeps it -- from the incumbent, or stacked on step
        ``stacked_on`` (a retry's degree change; ``why``: the retry's reason)."""
        lbs_name = "training.local_batch_size"
        too_few = TOO_FEW_MICROBATCHES in illegal
        if lever not in DEGREES or not ("local_batch_size*dp" in illegal or too_few) or lbs_name not in space.values:
            return None
        base = campaign.step(stacked_on).levers if stacked_on else campaign.incumbent_levers
        cur = catalog.effective(base)
        old_mp, new_mp = model_parallel(cur), model_parallel({**cur, lever: value})
        lbs = int(cur[lbs_name])
        target = batch_share(lbs, old_mp, new_mp)
        if target < 1 or target not in space.values[lbs_name]:
            return None
        enabled = {**base, lbs_name: target, lever: value}
        if layout_problem(space.recipe, enabled) is not None:
            return None
        if already_stepped(campaign, enabled):
            return None  # the change it would enable was already measured (or refused): nothing to enable
        change = Change(lever=lbs_name, before=lbs, after=target, lessons=lessons, policy=self.name, enabler=True, stacked_on=stacked_on,
                        why=f"enabler of {lever}={value}: " + (
                            f"the local batch that gives the schedule its microbatches at the new DP degree ({illegal})" if too_few else
                            f"keeps local_batch x dp = the pinned global batch split when the DP degree changes ({illegal})")
                            + (f"; {why}" if why else ""))
        if validate_change(campaign, change, space) is not None or layout_problem(space.recipe, {**base, lbs_name: target}):
            return None
        return change

    def _microbatch_enabler(self, campaign: Campaign, space: LeverSpace, value: Scalar, illegal: str, why: str,
                            lessons: list[str]) -> Change | None:
        """The schedule ``value`` is refused only because it needs at least as many microbatches per flush as
        stages (DualPipeV). A local batch the pinned global batch allows at the incumbent's degrees that gives them
        is its enabler. Where the local batch is already the global batch's share, only fewer DP ranks give more
        microbatches: twice (then four times) the tensor parallel degree inside the node, then the context parallel
        degree, as the enabler of the local batch that many times larger, which is in turn the gated enabler of the
        schedule -- a chain of two enablers (not run) with the schedule stacked on them and measured together. The
        layout measured alone under the old schedule would price the degree and the bubble, not the schedule it is
        for (deepseek-v3 under ZBVZeroBubble: TP 2 -> 4 with local batch 16 measured -9 % alone, and +16 % once
        DualPipeV ran on it). None where no such chain is legal or its configuration was already stepped."""
        lbs_name = "training.local_batch_size"
        if TOO_FEW_MICROBATCHES not in illegal or lbs_name not in space.values:
            return None
        inc = campaign.incumbent_levers
        cur = catalog.effective(inc)
        lbs = int(cur[lbs_name])
        reason = f"{cur.get(SCHEDULE)} -> {value} is refused for too few microbatches ({illegal}); {why}"
        for v in sorted(x for x in space.values[lbs_name] if isinstance(x, int) and x > lbs):
            target = {**inc, lbs_name: v}
            if layout_problem(space.recipe, target) is None and layout_problem(space.recipe, {**target, SCHEDULE: value}) is None:
                if already_stepped(campaign, {**target, SCHEDULE: value}):
                    return None
                change = Change(lever=lbs_name, before=lbs, after=v, lessons=[*lessons, MICROBATCH_LESSON], policy=self.name,
                                enabler=True, why=f"enabler of {SCHEDULE}={value}: the local batch that gives it its microbatches; {reason}")
                return change if validate_change(campaign, change, space) is None else None
        for lever, degree in fewer_dp_degrees(space, cur, (2, 4)):
            factor = degree // int(cur[lever])
            if factor * lbs not in space.values[lbs_name]:
                continue
            layout = {**inc, lever: degree, lbs_name: factor * lbs}
            if (layout_problem(space.recipe, {**inc, lever: degree}) or layout_problem(space.recipe, layout)
                    or layout_problem(space.recipe, {**layout, SCHEDULE: value})):
                continue
            if already_stepped(campaign, {**layout, SCHEDULE: value}):
                return None
            change = Change(lever=lever, before=cur[lever], after=degree, lessons=[*lessons, MICROBATCH_LESSON], policy=self.name,
                            enabler=True, why=f"enabler of {lbs_name}={factor * lbs}, then {SCHEDULE}={value}: the local batch is "
                            f"already the pinned global batch's share, so {factor} times the {lever.split('.')[-1].replace('_', ' ')} "
                            f"divides the DP degree by {factor} and the local batch, and with it the microbatches per flush, can "
                            f"grow {factor} times; {reason}")
            if validate_change(campaign, change, space) is None:
                return change
        return None

    def _smaller_batch_share(self, campaign: Campaign, space: LeverSpace, change: Change, target: dict[str, Scalar],
                             records: RecordReader) -> Change | None:
        """A held-back lesson's degree change that trades model-parallel ranks for data-parallel ones (halving TP or CP
        doubles the DP degree) and is predicted not to fit at the incumbent's local batch: at the pinned global batch
        each rank's share of it shrinks by the same factor, and the local batch shrunk with it keeps the accumulation
        split and, to first order, the per-rank activation memory (activations per layer ~ s·b·h/t, Korthikanti et al.
        2022, Table 2) while FSDP keeps the per-rank model state. That local batch as the change's enabler, when the
        memory screen predicts the pair fits; else None."""
        lbs_name = "training.local_batch_size"
        if change.enabler or change.stacked_on is not None or change.lever not in DEGREES or lbs_name not in space.values:
            return None
        cur = catalog.effective(campaign.incumbent_levers)
        old_mp, new_mp = model_parallel(cur), model_parallel({**cur, change.lever: change.after})
        lbs = int(cur[lbs_name])
        share = batch_share(lbs, old_mp, new_mp)
        if new_mp >= old_mp or not share:
            return None
        enabled = {**target, lbs_name: share}
        if (share not in space.values[lbs_name] or layout_problem(space.recipe, enabled) is not None
                or layout_problem(space.recipe, {**campaign.incumbent_levers, lbs_name: share}) is not None
                or already_stepped(campaign, enabled)):
            return None
        enabler = Change(lever=lbs_name, before=lbs, after=share, lessons=[*change.lessons, SHARE_LESSON], policy=self.name,
                         enabler=True, why=f"enabler of {change.lever}={change.after}: {change.lever} {change.before} -> "
                         f"{change.after} multiplies the DP degree by {old_mp // new_mp}, so each rank's share of the pinned "
                         f"global batch, and with it the activations it keeps, shrinks back by the same factor ({change.why})")
        if validate_change(campaign, enabler, space) is not None:
            return None
        return _if_predicted_to_fit(campaign, enabler, enabled, space, records)

    def _enabled_change(self, campaign: Campaign, space: LeverSpace) -> Change | None:
        """The last step was an enabler that ran: now the change it enables, stacked on it unless it was kept."""
        last, trial = last_step_trial(campaign)
        m = ENABLER.match(last.change.why) if last else None
        if last is None or m is None:
            return None
        # an enabler is gated, not run (records from before that rule: it ran)
        ready = (last.config_verdict is not None and last.config_verdict.ok) if last.change.enabler else (
            trial is not None and trial.outcome in MEASURED_OUTCOMES)
        if not ready:
            return None
        lever = m.group("lever")
        try:
            value = catalog.parse_value(lever, m.group("value"))
        except catalog.LeverError:
            return None
        cur = catalog.effective(base_levers(campaign, last.change) if not last.kept else campaign.incumbent_levers)
        why = enabled_why(campaign, last)
        then = m.group("then")
        if then:  # the first link of a two-link chain: the change it enables is the gated enabler of the second
            why = f"enabler of {then}: {why}"
        change = Change(lever=lever, before=cur.get(lever), after=value, lessons=last.change.lessons, policy=self.name,
                        why=why, stacked_on=None if last.kept else last.n, enabler=bool(then))
        if validate_change(campaign, change, space) is not None:
            return None
        if layout_problem(space.recipe, base_levers(campaign, change) | {lever: value}) is not None:
            return None
        return change

    def _oom_retry(self, campaign: Campaign, space: LeverSpace, records: RecordReader | None = None) -> Change | None:
        """The last trial ran out of memory: retry its layout with more recomputation, then more pipeline stages.
        Under full recompute a degree change is retried with half the local batch (or PP microbatch) first; a halved
        retry that ran out of memory again is halved once more only where the memory model, anchored on the peak it
        measured (``records``), puts the half within the device (glm-4.5 on 64 simulated H200s: PP 8 -> 1 at local
        batch 8 measured 165 GiB of 140; at 4 it was the oracle's layout, kept at +10 %)."""
        last, trial = last_step_trial(campaign)
        if last is None or trial is None or trial.outcome != "oom":
            return None
        eff = catalog.effective(last.levers)
        inc = catalog.effective(campaign.incumbent_levers)
        if AC_RANK.get(str(eff["activation_checkpoint"]), 2) < AC_RANK.get(str(inc["activation_checkpoint"]), 2):
            # the step (or the chain it ends) gave up recomputation and ran out of memory: keep the recompute saving
            # and retry it with an activation-memory partner instead (coupled move, one lever per step)
            return self._memory_partner(campaign, space, last, eff, inc)
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
            halve = self._halve_batch(campaign, space, last, eff, OOM_BATCH_LESSON)
            if halve is not None and last.change.lever in DEGREES and chain_depth(campaign, last) < MAX_CHAIN:
                return halve
            if (halve is not None and OOM_BATCH_LESSON in last.change.lessons and last.stacked_on is not None
                    and chain_depth(campaign, last) < MAX_CHAIN and records is not None):
                peak = predicted_peak(campaign, change_levers(campaign, halve), last.n, space, records)
                if peak is not None and peak.predicted <= peak.capacity:
                    return halve.model_copy(update={"why": halve.why + (
                        f"; halved once already, it measured {peak.measured:.0f} GiB, and the memory model, anchored on "
                        f"that peak, puts half of it at {peak.predicted:.0f} GiB of {peak.capacity:.0f}")})
            if mode != "full" or pp <= 1 or pp_name not in space.values or last.change.lever not in DEGREES:
                return None  # only a parallel-degree change that ran out of memory is worth re-sharding
            if 2 * pp not in space.values[pp_name] or layout_problem(space.recipe, {**last.levers, pp_name: 2 * pp}):
                return None
            change = Change(lever=pp_name, before=pp, after=2 * pp, lessons=[OOM_PP_LESSON], policy=self.name, stacked_on=last.n,
                            why=f"step {last.n} ({last.change.title()}) ran out of memory under full recomputation; retry that "
                                "layout with the model split over twice the pipeline stages (half the weights, optimizer "
                                "state and in-flight activations per rank)")
            return change if validate_change(campaign, change, space) is None else None
        change = Change(
            lever="activation_checkpoint",
            before=mode,
            after=nxt,
            why=f"step {last.n} ({last.change.title()}) ran out of memory; retry that layout with recomputation before abandoning it",
            lessons=[OOM_LESSON],
            policy=self.name,
            stacked_on=last.n,
        )
        return change if validate_change(campaign, change, space) is None else None


    def _halve_batch(self, campaign: Campaign, space: LeverSpace, last, eff: dict[str, Scalar], lesson: str) -> Change | None:
        """Stacked on ``last``: half the activations per microbatch (local batch without PP, PP microbatch with it)."""
        pp = int(eff["parallelism.pipeline_parallel_degree"])
        name = "training.local_batch_size" if pp <= 1 else "parallelism.pipeline_parallel_microbatch_size"
        cur = eff.get(name)
        if name not in space.values or not isinstance(cur, int) or cur <= 1 or cur // 2 not in space.values[name]:
            return None
        if layout_problem(space.recipe, {**last.levers, name: cur // 2}) is not None:
            return None
        change = Change(lever=name, before=cur, after=cur // 2, lessons=[lesson], policy=self.name, stacked_on=last.n,
                        why=f"step {last.n} ({last.change.title()}) ran out of memory; retry that layout with half the "
                            "activations per microbatch (the global batch stays pinned: only the accumulation split changes)")
        return change if validate_change(campaign, change, space) is None else None

    def _memory_partner(self, campaign: Campaign, space: LeverSpace, last, eff: dict[str, Scalar], inc: dict[str, Scalar]) -> Change | None:
        """A recompute reduction ran out of memory: retry it (stacked) with the next activation-memory partner --
        context parallel at long sequences, the non-interleaved schedule, more pipeline stages, twice the TP inside the
        node, in the order the cost model predicts fastest (:func:`fastest_first`) -- then memory_budget recompute in
        place, then smaller microbatches."""
        if chain_depth(campaign, last) >= MAX_CHAIN:
            return None
        cp_name, pp_name, sch_name = ("parallelism.context_parallel_degree", "parallelism.pipeline_parallel_degree",
                                      "parallelism.pipeline_parallel_schedule")
        seq = space.recipe.pinned.get("training.seq_len")
        pp = int(eff[pp_name])
        options: list[Partner] = []
        if isinstance(seq, int) and seq >= LONG_SEQ and cp_name in space.values and int(eff[cp_name]) == int(inc[cp_name]):
            options.append((cp_name, 2 * int(eff[cp_name]), CP_PARTNER_LESSON,
                            f"context parallel splits the {seq}-token sequence, halving the activations each rank keeps"))
        if pp > 1 and sch_name in space.values and str(eff.get(sch_name, "")).lower().startswith("interleaved") and "1F1B" in space.values[sch_name]:
            options.append((sch_name, "1F1B", SCHEDULE_PARTNER_LESSON,
                            "1F1B keeps at most PP microbatches in flight per rank; the interleaved schedule keeps more"))
        if pp_name in space.values and 2 * pp in space.values[pp_name]:
            options.append((pp_name, 2 * pp, PP_PARTNER_LESSON,
                            "twice the pipeline stages: half the layers (weights, optimizer state, saved activations) per rank, "
                            "and activations per microbatch instead of per local batch"))
        tp = int(eff[TP_NAME])
        # a partner of the recompute change itself (or, out of memory, in its own place), never stacked on another
        # partner: on minimax-m2 / 64 H200s, TP 4 on a PP partner measured 68% slower where PP 4 in place was the gain
        if (TP_NAME in space.values and 2 * tp in space.values[TP_NAME] and 2 * tp <= space.recipe.cluster.devices_per_node
                and last.change.lever in ("activation_checkpoint", TP_NAME)):
            options.append((TP_NAME, 2 * tp, TP_PARTNER_LESSON,
                            "twice the tensor-parallel ranks inside the node, which with sequence parallel split every "
                            "activation a layer keeps"))
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
                enabler = None if chain_depth(campaign, on) + 2 > MAX_CHAIN else (
                    self._enabler(campaign, space, lever, value, illegal, [lesson], stacked_on=on.n, why=why)
                    or self._stepping_stone(campaign, space, on, lever, value, illegal, lesson, why))
                if enabler is not None:
                    return enabler
                continue
            before = catalog.effective(on.levers).get(lever)
            change = Change(lever=lever, before=before, after=value, lessons=[lesson], policy=self.name, stacked_on=on.n, why=why)
            if validate_change(campaign, change, space) is None:
                return change
        return self._memory_budget_in_place(campaign, space, last, eff) or self._halve_batch(campaign, space, last, eff, OOM_BATCH_LESSON)

    def _memory_budget_in_place(self, campaign: Campaign, space: LeverSpace, last, eff: dict[str, Scalar]) -> Change | None:
        """No recompute ran out of memory (with the layout partners, where they ran, out of memory too) under
        torch.compile: memory_budget recompute in place of the chain's change to none -- on what that change was
        stacked on, or from the incumbent -- which keeps part of the saving with the layout unchanged (lesson
        less-recompute-partner-memory-budget). None where it does not apply."""
        ac = "activation_checkpoint"
        if str(eff[ac]) != "none" or "memory_budget" not in space.values.get(ac, []) or not catalog.compiles_model(eff):
            return None
        ac_step = next((campaign.step(n) for n in chain_steps(campaign, last.n)
                        if campaign.step(n).change.lever == ac and str(campaign.step(n).change.after) == "none"), None)
        if ac_step is None:
            return None
        why = (f"step {ac_step.n} ({ac_step.change.title()}) gave up recomputation and ran out of memory"
               f"{'' if ac_step is last else ', its memory partners too'}; keep part of the saving instead: memory_budget "
               "recompute keeps what the compiler's partitioner fits in half the activations and recomputes the cheapest "
               "of the rest, with the layout unchanged")
        if ac_step.stacked_on is None:
            return self._checked(campaign, space, ac, "memory_budget", why, [BUDGET_PARTNER_LESSON])
        on = campaign.step(ac_step.stacked_on)
        change = Change(lever=ac, before=catalog.effective(on.levers)[ac], after="memory_budget", lessons=[BUDGET_PARTNER_LESSON],
                        policy=self.name, stacked_on=on.n, why=why)
        return change if validate_change(campaign, change, space) is None else None

    def _stepping_stone(self, campaign: Campaign, space: LeverSpace, last, lever: str, value: Scalar, illegal: str,
                        lesson: str, why: str) -> Change | None:
        """Stacked on ``last``: ``lever=value`` is refused because its schedule needs at least as many microbatches
        per flush as stages, and no local batch the pinned global batch allows at the old degree gives them
        (DualPipeV at PP 2 -> 4 with the local batch at its share: 4 microbatches for 8 stages, while 8 would not
        divide the global batch at PP 2). The schedule with the same stage placement that has no such bound
        (STEPPING_STONE) goes first, as its enabler (gated, not run); once the stages are kept, ``_restore_schedule``
        proposes the schedule back where it is legal again."""
        sched = str(catalog.effective(last.levers).get(SCHEDULE, ""))
        stone = STEPPING_STONE.get(sched)
        if stone is None or TOO_FEW_MICROBATCHES not in illegal or stone not in space.values.get(SCHEDULE, []):
            return None
        stepped = {**last.levers, SCHEDULE: stone}
        if layout_problem(space.recipe, stepped) is not None or layout_problem(space.recipe, {**stepped, lever: value}) is not None:
            return None
        if already_stepped(campaign, {**stepped, lever: value}):
            return None
        change = Change(lever=SCHEDULE, before=sched, after=stone, lessons=[lesson, STONE_LESSON], policy=self.name, enabler=True,
                        stacked_on=last.n,
                        why=f"enabler of {lever}={value}: {sched} would need more microbatches per flush than the pinned "
                            f"global batch leaves ({illegal}); {stone} places the same stages without that bound, and "
                            f"{sched} comes back once the local batch allows it; {why}")
        return change if validate_change(campaign, change, space) is None else None

    def _restore_schedule(self, campaign: Campaign, space: LeverSpace) -> Change | None:
        """A kept chain went through a stepping-stone schedule (``_stepping_stone``) and the incumbent still runs it:
        the schedule it replaced, once legal on the incumbent, measured once -- it was kept before the stone for
        what it buys."""
        current = catalog.effective(campaign.incumbent_levers)
        for n in sorted({n for s in campaign.steps if s.kept for n in chain_steps(campaign, s.n)}, reverse=True):
            c = campaign.step(n).change
            if STONE_LESSON not in c.lessons or c.lever != SCHEDULE or current.get(SCHEDULE) != c.after:
                continue
            if proposed_by(campaign, STONE_LESSON, SCHEDULE, c.before):
                return None  # measured back once already (a later incumbent does not reopen it)
            if already_stepped(campaign, {**campaign.incumbent_levers, SCHEDULE: c.before}):
                return None
            if layout_problem(space.recipe, {**campaign.incumbent_levers, SCHEDULE: c.before}) is not None:
                return None  # not legal yet: it comes back when a later step gives it the microbatches
            why = f"step {n} ({c.title()}) stood in for {c.before} until the local batch allowed it: {c.before} back"
            return self._checked(campaign, space, SCHEDULE, c.before, why, [STONE_LESSON])
        return None

    def _second_pass(self, campaign: Campaign, space: LeverSpace, lessons: list[Lesson], *, just_kept: bool = False) -> Change | None:
        """A kept parallel-degree step that gained little (under MOMENTUM_GAIN) -- a degree trades one cost for another
        (expert parallel: all-to-all bytes for expert shards), so what it bought depends on the rest of the layout, while
        a larger local batch only spends memory (undone on 405B after a kept schedule change it measured -17 %) --
        followed by a kept step that gained MOMENTUM_GAIN or more by changing the layout (a parallel degree or the
        pipeline schedule) aimed at a cost the small one was aimed at too (``costs_aimed_at``): the small one's
        change, measured on the layout of then, is measured once the other way on the incumbent -- a second coordinate-descent pass over the small gains (expert parallel 32 ->
        16 gained +3.8 % for its exposed all-to-all under ZBVZeroBubble; after DualPipeV hid the all-to-all, EP 32 was
        18 % faster). A later change aimed elsewhere leaves the small one's cost as it was: no pass (TP 1 -> 2 for
        the bubble, kept at +11 %: EP 16 -> 32 then measured -0.4 % and -3.6 %, 2.7 and 4.0 runs spent)."""
        by_id = {ls.id: ls for ls in lessons}
        kept = [s for s in campaign.steps if s.kept]
        current = catalog.effective(campaign.incumbent_levers)
        for s in kept:
            c = s.change
            if (s.stacked_on is not None or c.enabler or c.extra or s.gain is None or not 0 < s.gain < MOMENTUM_GAIN
                    or c.lever not in DEGREES or c.lever not in space.values or current.get(c.lever) != c.after or SECOND_PASS_LESSON in c.lessons):
                continue
            costs = costs_aimed_at(c, by_id)
            later = [t for t in kept if t.n > s.n and (t.gain or 0.0) >= MOMENTUM_GAIN
                     and any(campaign.step(m).change.lever in (*DEGREES, SCHEDULE) for m in chain_steps(campaign, t.n))
                     and any(costs & costs_aimed_at(campaign.step(m).change, by_id) for m in chain_steps(campaign, t.n))]
            if not later or (just_kept and later[-1].n != campaign.steps[-1].n):
                continue
            if (c.lever, str(c.before)) in tried_from_incumbent(campaign) or already_stepped(campaign, {**campaign.incumbent_levers, c.lever: c.before}):
                continue
            if proposed_by(campaign, SECOND_PASS_LESSON, c.lever, c.before):
                continue
            why = (f"step {s.n} ({c.title()}) gained {s.gain:+.1%} on the layout of then; step {later[0].n} "
                   f"({campaign.step(later[0].n).change.title()}) changed the layout since (kept at {later[0].gain:+.1%}): "
                   f"{c.lever} back to {c.before}, measured once on the incumbent (a second coordinate-descent pass)")
            change = self._checked(campaign, space, c.lever, c.before, why, [SECOND_PASS_LESSON])
            if change is not None:
                return change
        return None

    def _jump_review(self, campaign: Campaign, space: LeverSpace, records: RecordReader) -> Change | None:
        """A kept layout jump moved several parallel degrees at once on the analytic model's word, and its measured
        gain says how the whole move paid, not whether each degree went as far as it should: the model that ranked
        the target errs most on the terms the jump traded (the bubble of few microbatches, CP's ring attention), so
        one of its degrees may have gone a notch too far, or stopped a notch short. Each degree the jump moved, one
        notch back towards where it came from and one notch further the way it went (the local batch following the
        pinned global batch's share as an enabler where the DP degree changes), is measured once on the incumbent --
        a coordinate-descent pass over the jump's own coordinates, each tried both ways (lesson
        ``layout-jump-review``): the reviews predicted fastest first, none whose peak, anchored on the incumbent's
        measured one, exceeds the device (the jump's own fit test, no margin), and no more once one ran and measured
        no gain (an out-of-memory run, cheap, does not end them). Proposed after the recompute the incumbent can shed
        and before the lessons. Simulated, 5 seeds: qwen3-30b-a3b on 16 B200s, whose jump to PP 4 measured +44 %
        where the model predicted +224 %, keeps PP 2 at +4-9 % (94.9 -> 97.6 % of the oracle); llama3.1-70b on 32
        B200s keeps CP 2 over the jump's CP 4 at +5-9 % (93.6 -> 96.2 %). One notch further: minimax-m2 on 128 H100s
        (a scratch probe, 3 seeds), whose jump went PP 4 -> 8, keeps PP 16 with local batch 32 at +6 % (93.5 -> 99.0 %);
        no other of 33 simulated tasks moved. Where the jump placed every degree right the first review ends the
        pass at about one run; with every degree reviewed regardless of misses minimax-m2 on 128 H100s lost
        93.5 -> 89.0 %, and before the lessons' recompute change, qwen3-235b-a22b on 32 B200s lost 82.9 -> 71.7 %."""
        jumps = [s for s in campaign.steps if s.kept and any(JUMP_LESSON in campaign.step(m).change.lessons for m in chain_steps(campaign, s.n))]
        if not jumps:
            return None
        jump = jumps[-1]
        reviews = [s for s in campaign.steps if s.n > jump.n and REVIEW_LESSON in s.change.lessons and s.runs]
        if any(not s.kept and all(r.outcome != "oom" for r in s.runs) for s in reviews):
            return None  # a review measured no gain: the degrees the model ranks below it are not worth a run
        current = catalog.effective(campaign.incumbent_levers)
        tried = tried_from_incumbent(campaign)
        options = []
        for m in chain_steps(campaign, jump.n):
            c = campaign.step(m).change
            if c.lever not in DEGREES or c.lever not in space.values or current.get(c.lever) != c.after:
                continue
            for notch, way in ((notch_toward(space.values[c.lever], c.after, c.before), "back"),
                               (next_notch(space.values[c.lever], c.before, c.after), "further")):
                if notch is None or (c.lever, str(notch)) in tried or proposed_by(campaign, REVIEW_LESSON, c.lever, notch):
                    continue
                target = with_batch_share(campaign.incumbent_levers, c.lever, notch)
                peak = predicted_peak(campaign, target, None, space, records)
                if peak is not None and peak.predicted > peak.capacity:
                    continue  # the jump's own test (layout_jump): anchored on the measured peak, no margin
                options.append((predicted_step(space, target), c, notch, way))
        for _, c, notch, way in sorted(options, key=lambda o: o[0]):
            why = (f"step {jump.n} (the layout jump, kept at {jump.gain:+.1%}) moved {c.lever.rsplit('.', 1)[-1]} {c.before} -> "
                   f"{c.after} together with other levers, on the cost model's word: one notch {way}, {c.after} -> {notch}, "
                   "measured once on the incumbent (a coordinate-descent pass over the jump's degrees)")
            change = self._checked(campaign, space, c.lever, notch, why, [REVIEW_LESSON])
            if change is not None:
                return change
        return None

    def _push_further(self, campaign: Campaign, space: LeverSpace) -> Change | None:
        """The last step (one numeric lever, from the incumbent) measured a positive estimate but ended *undecided*
        (its interval still straddled the minimum gain at the pair cap): move the same lever one notch further in
        the same direction — a bigger change has a bigger effect to measure (on a noisy machine local batch 1 -> 2
        gained +42% inside a 52% band; 1 -> 8 measures +108%)."""
        last, trial = last_step_trial(campaign)
        if last is None:
            return None
        if (last.kept or last.stacked_on is not None or last.change.extra or trial is None or trial.outcome != "ok"
                or last.gain is None or last.gain <= 0 or last.verdict is None or not last.verdict.ok
                or last.measurement is None or last.measurement.decision != "undecided"):
            return None
        if catalog.effective(campaign.incumbent_levers).get(last.change.lever) != last.change.before:
            return None  # the incumbent moved on since
        notch = next_notch(space.values.get(last.change.lever, []), last.change.before, last.change.after)
        if notch is None:
            return None
        why = (f"step {last.n} ({last.change.title()}) gained {last.gain:+.1%}, undecided (its interval straddles the minimum gain): one notch further "
               "along the same lever, for a larger effect to measure")
        return self._checked(campaign, space, last.change.lever, notch, why, list(last.change.lessons))

    def _keep_going(self, campaign: Campaign, space: LeverSpace, incumbent: Diagnosis | None = None) -> Change | None:
        """The last step was kept with a large gain (at least MOMENTUM_GAIN) on a numeric lever: the next notch the
        same way is the most likely next gain (a line search along the lever that paid: expert parallel 1 -> 2
        gained +83% on an all-to-all-bound MoE and 2 -> 4 -> 8 each gained again). Legality, prerequisites and the
        global batch are checked as for any change; a notch that does not pay is closed like any other step."""
        last, trial = last_step_trial(campaign)
        if last is None or not last.kept or campaign.incumbent_step != last.n or last.gain is None or last.gain < MOMENTUM_GAIN:
            return None
        # the kept step's own lever first; then, where that has no legal next notch and the kept change was enabled by
        # a parallel degree (PP 1 -> 2 as the gated enabler of local batch 2 -> 4, kept together), the same coupling
        # one notch further: the degree's next notch as the enabler of the kept lever's (PP 2 -> 4 for local batch 8),
        # while the incumbent still spends COMM_FRAC of its step in exposed communication -- what halving the DP
        # ranks again removes (qwen3-30b-a3b on 64 B200: 55-73 % of the step, PP 2 -> 4 -> 8 each kept at +40-100 %;
        # minimax-m2 at 13 %: PP 4 -> 8 measured +0 % over 2-5 runs)
        chain = [campaign.step(n).change for n in chain_steps(campaign, last.n)]
        top, tried = chain[0], tried_from_incumbent(campaign)
        notch = next_notch(space.values.get(top.lever, []), top.before, top.after)
        if notch is None:
            return None
        if (top.lever, str(notch)) not in tried:
            why = f"step {last.n} ({last.change.title()}) gained {last.gain:+.1%}: one notch further along the same lever (a line search along what paid)"
            change = self._checked(campaign, space, top.lever, notch, why, list(last.change.lessons))
            if change is not None:
                return change
        comm = incumbent.breakdown.get("exposed_comm", 0.0) if incumbent is not None and incumbent.outcome == "ok" else 0.0
        if comm < COMM_FRAC:
            return None  # a degree that halves the DP ranks again pays for the communication it removes: little is left
        cur = catalog.effective(campaign.incumbent_levers)
        for c in chain[1:]:
            m = ENABLER.match(c.why) if c.enabler else None
            degree = next_notch(space.values.get(c.lever, []), c.before, c.after)
            if c.lever not in DEGREES or m is None or m.group("lever") != top.lever or degree is None:
                continue
            enabled = {**campaign.incumbent_levers, c.lever: degree, top.lever: notch}
            if (layout_problem(space.recipe, {**campaign.incumbent_levers, c.lever: degree}) or layout_problem(space.recipe, enabled)
                    or already_stepped(campaign, enabled)):
                continue
            change = Change(lever=c.lever, before=cur.get(c.lever), after=degree, lessons=list(last.change.lessons), policy=self.name,
                            enabler=True, why=f"enabler of {top.lever}={notch}: step {last.n} ({last.change.title()}, enabled by "
                            f"{c.title()}) gained {last.gain:+.1%}; the same coupling one notch further along both (a line search along what paid)")
            if validate_change(campaign, change, space) is None:
                return change
        return None

    def _follow_up(self, campaign: Campaign, space: LeverSpace, records: RecordReader, lessons: list[Lesson] | None = None) -> Change | None:
        """The last step was a coupled retry (stacked) that ran but did not beat the incumbent, and its own diagnosis
        names the cost the coupling left behind: stack the move that removes it (a large pipeline bubble -> fill the
        pipeline with the whole local batch, or, with it full, the schedule the lessons pick for that run; recompute
        left with memory to spare -> less recompute)."""
        last, trial = last_step_trial(campaign)
        if last is None:
            return None
        if last.kept or last.stacked_on is None or trial is None or trial.outcome not in MEASURED_OUTCOMES or not trial.record:
            return None
        if chain_depth(campaign, last) >= MAX_CHAIN:
            return None
        record = records.read(trial.record)
        if record is None:
            return None
        d = diagnose(record)
        return self._fix_for(campaign, space, d, last.levers, stacked_on=last.n, why_prefix=f"step {last.n} ({last.change.title()}) ran",
                             behind=last.gain, recompute_left=_recompute_left_behind(campaign, last, space, records),
                             lessons=lessons)

    def _fix_for(self, campaign: Campaign, space: LeverSpace, d: Diagnosis, levers: dict[str, Scalar], *, stacked_on: int | None,
                 why_prefix: str, behind: float | None = None, recompute_left: bool = True,
                 lessons: list[Lesson] | None = None) -> Change | None:
        """The stacked move that removes the cost ``d`` names: a large bubble -> the largest local batch (which also
        buys bigger GEMMs and fewer flushes, so no bound is put on it); recompute -> less recompute, only where
        removing all of it could lift a layout measured at ``behind`` (its gain over the incumbent) above the
        incumbent by the minimum worthwhile gain (a share f of the step removed speeds it up by 1 / (1 - f) at most,
        and less recompute removes nothing else). A bubble the local batch can no longer shrink (it is already the
        pinned global batch's share) -> the pipeline schedule the ``lessons`` pick for that run (its levers and
        diagnosis), before less recompute where the bubble is the larger cost: a chain that brought the stages in
        left the schedule at what the incumbent had -- a value never chosen while the schedule did nothing
        (``bot.core.levers.inert`` without PP)."""
        eff = catalog.effective(levers)
        bubble = d.breakdown.get("bubble", 0.0)
        recompute = d.breakdown.get("recompute", 0.0)
        if (behind is not None and (1.0 + behind) / max(1.0 - recompute, 1e-9) < 1.0 + campaign.min_gain) or not recompute_left:
            recompute = 0.0
        lbs_name = "training.local_batch_size"
        if int(eff["parallelism.pipeline_parallel_degree"]) > 1 and bubble >= BUBBLE_FRAC and lbs_name in space.values:
            legal = [v for v in space.values[lbs_name] if isinstance(v, int) and v > int(eff[lbs_name])
                     and layout_problem(space.recipe, {**levers, lbs_name: v}) is None]
            if legal:
                change = Change(lever=lbs_name, before=eff[lbs_name], after=max(legal), lessons=[BUBBLE_LESSON], policy=self.name,
                                stacked_on=stacked_on,
                                why=f"{why_prefix} with a {bubble:.0%} pipeline bubble: the largest local batch the pinned global "
                                    "batch allows gives the most microbatches per flush ((p-1)/m shrinks) and fewer flushes")
                if validate_change(campaign, change, space) is None:
                    return change
        schedule = None
        if int(eff["parallelism.pipeline_parallel_degree"]) > 1 and bubble >= BUBBLE_FRAC and lessons:
            schedule = self._schedule_for(campaign, space, lessons, d, levers, stacked_on=stacked_on,
                                          why=f"{why_prefix} with a {bubble:.0%} pipeline bubble and the local batch at the global batch's share")
        if schedule is not None and bubble >= recompute:
            return schedule
        headroom = d.mem_headroom_frac
        mode = str(eff["activation_checkpoint"])
        if recompute >= RECOMPUTE_FRAC and mode in LESS_RECOMPUTE and "activation_checkpoint" in space.values and (headroom or 0) >= 0.05:
            change = Change(lever="activation_checkpoint", before=mode, after=LESS_RECOMPUTE[mode], lessons=[RECOMPUTE_LESSON],
                            policy=self.name, stacked_on=stacked_on,
                            why=f"{why_prefix} with {recompute:.0%} of the step recomputing activations: less recompute")
            if validate_change(campaign, change, space) is None:
                return change
        return schedule

    def _schedule_for(self, campaign: Campaign, space: LeverSpace, lessons: list[Lesson], d: Diagnosis, levers: dict[str, Scalar], *,
                      stacked_on: int | None, why: str) -> Change | None:
        """The first legal, not yet stepped pipeline schedule that the lessons relevant to the run of ``levers`` (its
        diagnosis ``d``) try, those aimed at its dominant cost first, stacked on ``stacked_on``; None without one."""
        if d.outcome in MEASURED_OUTCOMES:  # a run stopped early ran as well as one measured to the end
            d = d.model_copy(update={"outcome": "ok"})
        ctx = lesson_context(campaign, d, space, levers)
        eff = catalog.effective(levers)
        for lesson in dominant_cost_first(relevant(lessons, ctx), d):
            if not lesson.auto_propose:
                continue
            for lc in lesson.try_:
                if lc.lever != SCHEDULE or SCHEDULE not in space.values:
                    continue
                value = _relative(space, eff.get(SCHEDULE), lc)
                if value is None or str(value) == str(eff[SCHEDULE]) or already_stepped(campaign, {**levers, SCHEDULE: value}):
                    continue
                if layout_problem(space.recipe, {**levers, SCHEDULE: value}) is not None:
                    continue
                change = Change(lever=SCHEDULE, before=eff[SCHEDULE], after=value, lessons=[lesson.id], policy=self.name,
                                stacked_on=stacked_on, why=f"{why}: {lesson.why}")
                if validate_change(campaign, change, space) is None:
                    return change
        return None

    def _less_recompute_that_fits(self, campaign: Campaign, space: LeverSpace, records: RecordReader) -> Change | None:
        """Recomputation is the incumbent's largest removable cost (larger than its exposed communication and its
        bubble) and worth a gain on its own (its share s of the step gives s / (1 - s) >= the minimum worthwhile
        gain), and the memory screen predicts the next mode down fits the device -- the incumbent's measured peak
        scaled by the analytic memory model (:func:`bot.agent.memory_screen.predicted_peak`), at most the device's
        memory: less recompute, before the lessons. The headroom lessons ask for a fixed headroom (25 %, 35 %) since
        they have no model of what the activations will take; with a measured peak and a model, the prediction is
        the better test (recompute is pure overhead once the activations fit: Korthikanti et al. 2022). Nothing
        fires without a prediction (a CPU run reports no device memory)."""
        incumbent = incumbent_diagnosis(campaign, records)
        if incumbent is None or incumbent.outcome != "ok" or "activation_checkpoint" not in space.values:
            return None
        b = incumbent.breakdown
        share = b.get("recompute", 0.0)
        if share <= max(b.get("exposed_comm", 0.0), b.get("bubble", 0.0)) or share / max(1.0 - share, 1e-9) < campaign.min_gain:
            return None
        mode = str(catalog.effective(campaign.incumbent_levers)["activation_checkpoint"])
        after = LESS_RECOMPUTE.get(mode)
        if after is None or after not in space.values["activation_checkpoint"] or ("activation_checkpoint", after) in tried_from_incumbent(campaign):
            return None
        levers = {**campaign.incumbent_levers, "activation_checkpoint": after}
        if already_stepped(campaign, levers):
            return None
        pred = predicted_peak(campaign, levers, None, space, records)
        if pred is None or pred.predicted > pred.capacity:
            return None
        why = (f"the incumbent spends {share:.0%} of its step recomputing activations, its largest removable cost, and "
               f"{after} recompute is predicted to fit: {pred.predicted:.0f} GiB (its measured {pred.measured:.0f} GiB x "
               f"the memory model's {pred.ratio:.2f}) of the device's {pred.capacity:.0f} GiB")
        return self._checked(campaign, space, "activation_checkpoint", after, why, [LESS_RECOMPUTE_FITS_LESSON])

    def _diagnosis_driven(self, campaign: Campaign, diagnosis: Diagnosis, space: LeverSpace) -> Change | None:
        """The incumbent's own breakdown: a large pipeline bubble with gradient accumulation -> fill the pipeline;
        with none left to fill, or exposed FSDP communication across nodes without PP -> fewer DP ranks."""
        if diagnosis.outcome != "ok" or not diagnosis.breakdown:
            return None
        eff = catalog.effective(campaign.incumbent_levers)
        lbs_name = "training.local_batch_size"
        legal = [v for v in space.values.get(lbs_name, []) if isinstance(v, int) and v > int(eff[lbs_name])
                 and layout_problem(space.recipe, {**campaign.incumbent_levers, lbs_name: v}) is None]
        pp = int(eff["parallelism.pipeline_parallel_degree"])
        comm = diagnosis.breakdown.get("exposed_comm", 0.0)
        if pp <= 1 and not legal and comm >= COMM_FRAC and dp_spans_nodes(space, eff):
            return self._fewer_dp_ranks(campaign, diagnosis, space, cost="comm")
        if pp <= 1 or diagnosis.breakdown.get("bubble", 0.0) < BUBBLE_FRAC:
            return None
        if not legal:
            return self._fewer_dp_ranks(campaign, diagnosis, space)
        change = Change(lever=lbs_name, before=eff[lbs_name], after=max(legal), lessons=[BUBBLE_LESSON], policy=self.name,
                        why=f"the incumbent spends {diagnosis.breakdown['bubble']:.0%} of its step in the pipeline bubble: the "
                            "largest local batch the pinned global batch allows gives the most microbatches per flush and the fewest flushes")
        return change if validate_change(campaign, change, space) is None else None

    def _fewer_dp_ranks(self, campaign: Campaign, diagnosis: Diagnosis, space: LeverSpace, cost: str = "bubble") -> Change | None:
        """Fewer DP ranks sharing the pinned global batch, each with twice the local batch: twice the tensor (then
        context) parallel degree, inside the node, as the enabler of twice the local batch. The degree change alone
        would only add a gradient-accumulation step (a second flush, a second round of FSDP all-gathers), so it is
        the enabler (gated, not run) and the doubled local batch is stacked on it and measured; one measured try per
        incumbent (the other degree would buy the same halving). Two costs call for it:

        - ``bubble``: under PP, with the local batch already the global batch's share (one flush per step), the
          microbatches per flush can only grow this way, so the bubble (p-1)/m halves (Narayanan et al. 2021 §3.3:
          with the global batch fixed, a larger DP degree means fewer microbatches and a larger bubble);
        - ``comm``: without PP, exposed communication of COMM_FRAC or more with the FSDP group spread over nodes:
          half the FSDP ranks, each all-gathering a TP-sharded half of the weights, for twice the tokens per rank
          (lesson fsdp-comm-fewer-dp-ranks)."""
        eff = catalog.effective(campaign.incumbent_levers)
        lbs_name = "training.local_batch_size"
        lbs = int(eff[lbs_name])
        if lbs_name not in space.values or 2 * lbs not in space.values[lbs_name]:
            return None
        lesson = COMM_DP_LESSON if cost == "comm" else DP_BUBBLE_LESSON
        if any(s.n > campaign.incumbent_step and lesson in s.change.lessons and not s.kept
               and any(r.kind == "trial" and r.outcome in MEASURED_OUTCOMES for r in s.runs) for s in campaign.steps):
            return None  # one degree's try measured what halving the DP ranks buys this incumbent; the other buys the same
        for lever, value in fewer_dp_degrees(space, eff, (2,)):
            if cost == "comm" and lever == CP:
                continue
            name = "tensor parallel" if lever == TP else "context parallel"
            enabled = {**campaign.incumbent_levers, lever: value, lbs_name: 2 * lbs}
            if layout_problem(space.recipe, {**campaign.incumbent_levers, lever: value}) or layout_problem(space.recipe, enabled):
                continue
            if already_stepped(campaign, enabled):
                continue
            if cost == "comm":
                why = (f"enabler of {lbs_name}={2 * lbs}: the incumbent spends {diagnosis.breakdown['exposed_comm']:.0%} of its step in "
                       "exposed communication with its FSDP group spread over nodes, and its local batch is already the global batch's "
                       f"share; twice the {name} degree (inside the node) halves the FSDP group and the weight shard each all-gather "
                       "moves, and each rank's local batch can double")
            else:
                why = (f"enabler of {lbs_name}={2 * lbs}: the incumbent spends {diagnosis.breakdown['bubble']:.0%} of its step "
                       f"in the pipeline bubble and its local batch is already the global batch's share; twice the {name} "
                       "degree halves the DP degree, so the local batch and the microbatches per flush can double ((p-1)/m halves)")
            change = Change(lever=lever, before=eff[lever], after=value, lessons=[lesson], policy=self.name, enabler=True, why=why)
            if validate_change(campaign, change, space) is None:
                return change
        return None


LESS_RECOMPUTE = {"full": "selective", "selective": "none", "memory_budget": "none"}
MAX_CHAIN = 5  # coupled changes: at most this many stacked steps on top of the incumbent
LONG_SEQ = 8192
# of the step: a pipeline bubble worth filling (a larger local batch, a zero-bubble schedule, fewer DP ranks) and
# the analytic bubble at which more stages are gated behind the fill (lesson pp-fill-the-pipeline fires at the same share)
BUBBLE_FRAC = 0.05
RECOMPUTE_FRAC = 0.05
OOM_BATCH_LESSON = "oom-halve-local-batch"
CP_PARTNER_LESSON = "less-recompute-partner-context-parallel"
BUDGET_PARTNER_LESSON = "less-recompute-partner-memory-budget"
SCHEDULE_PARTNER_LESSON = "less-recompute-partner-1f1b"
PP_PARTNER_LESSON = "less-recompute-partner-pipeline"
TP_PARTNER_LESSON = "less-recompute-partner-tensor-parallel"
TP_NAME = "parallelism.tensor_parallel_degree"
SCHEDULE = "parallelism.pipeline_parallel_schedule"
STONE_LESSON = "pp-schedule-stepping-stone"
SECOND_PASS_LESSON = "second-pass-over-small-gains"
SHARE_LESSON = "dp-degree-batch-share"
MICROBATCH_LESSON = "pp-schedule-microbatches-fewer-dp-ranks"
# a schedule that needs microbatches >= stages -> the one with the same stage placement (two per rank, V-shaped) and
# the same zero-bubble backward split that does not (bot.core.layouts: NEEDS_MB_GE_STAGES)
STEPPING_STONE = {"DualPipeV": "ZBVZeroBubble"}
TOO_FEW_MICROBATCHES = "needs at least as many microbatches"  # the layout checker's refusal for that bound
COMM_FRAC = 0.25  # exposed communication share that calls for fewer FSDP ranks
RECOMPUTE_LESSON = "ac-less-recompute-when-it-dominates"
LESS_RECOMPUTE_FITS_LESSON = "ac-less-recompute-when-predicted-to-fit"
JUMP_LESSON = "layout-jump-from-cost-model"
REVIEW_LESSON = "layout-jump-review"  # each degree a kept jump moved, one notch back and one further (_jump_review)
# of the budget spent: the jump is proposed then (once a campaign) if the lessons have not run out before; a third
# leaves its basin two thirds of the budget (simulated, 33 tasks: mean oracle fraction 95.5 % at a half, 96.5 % here)
JUMP_AT = 1 / 3


def _held_back_by_headroom(lessons: list[Lesson], ctx: dict, hits: list[Lesson]) -> list[Lesson]:
    """The lessons that match but for their memory-headroom condition: those ``relevant`` finds once the measured
    headroom is taken as the whole device and not before. A lesson's fixed headroom threshold (25 %, 30 %, 35 %)
    stands in for a prediction it has no model to make; where a measured peak and the memory model can predict the
    lesson's own change (:func:`_if_predicted_to_fit`), the prediction decides instead."""
    if ctx.get("diagnosis.mem_headroom_frac") is None:
        return []
    ids = {lesson.id for lesson in hits}
    return [lesson for lesson in relevant(lessons, {**ctx, "diagnosis.mem_headroom_frac": 1.0}) if lesson.id not in ids]


def _if_predicted_to_fit(campaign: Campaign, change: Change, target: dict[str, Scalar], space: LeverSpace,
                         records: RecordReader) -> Change | None:
    """``change`` (of a lesson held back only by its headroom threshold; an enabler of it included) when the memory
    screen predicts the levers it leads to, ``target``, fit the device -- the incumbent's measured peak x the memory
    model's ratio, at most the device's memory, no margin -- with the prediction added to its reasons; else None
    (it does not fit, or nothing can tell)."""
    pred = predicted_peak(campaign, target, change.stacked_on, space, records)
    if pred is None or pred.predicted > pred.capacity:
        return None
    why = (f"{change.why} (below the lesson's memory headroom, but predicted to fit: {pred.predicted:.0f} GiB, the "
           f"measured {pred.measured:.0f} GiB x the memory model's {pred.ratio:.2f}, of the device's {pred.capacity:.0f} GiB)")
    return change.model_copy(update={"why": why})


def _neighbours(campaign: Campaign, space: LeverSpace, lever: str, current: Scalar) -> list[Scalar]:
    """Generic exploration moves for one lever: adjacent values of an ordered domain (batch sizes and degrees
    one doubling/halving away, larger first), every value of a categorical one, recompute only downwards; never a
    value that a step from this incumbent already showed runs out of memory (less recompute than a mode that
    did not fit, a larger batch than one that did not)."""
    values = list(space.values.get(lever, []))
    oom = oom_values(campaign, lever)
    if lever == "activation_checkpoint":
        worst = min((AC_RANK.get(str(v), 2) for v in oom), default=None)
        # only towards less recomputation (more never speeds a step up), least aggressive first
        cur = AC_RANK.get(str(current), 2)
        return sorted((v for v in values if AC_RANK.get(str(v), 2) < cur and (worst is None or AC_RANK.get(str(v), 2) > worst)),
                      key=lambda v: -AC_RANK.get(str(v), 2))
    numeric = all(isinstance(v, int) and not isinstance(v, bool) for v in values) and isinstance(current, int)
    if not numeric or current not in values:
        return values
    i = values.index(current)
    out = [values[j] for j in (i + 1, i - 1) if 0 <= j < len(values) and values[j] > 0]
    if lever in ("training.local_batch_size", "parallelism.pipeline_parallel_microbatch_size"):
        limit = min((int(v) for v in oom), default=None)
        out = [v for v in out if limit is None or int(v) < limit]
    if lever == "training.local_batch_size" and int(catalog.effective(campaign.incumbent_levers)["parallelism.pipeline_parallel_degree"]) > 1:
        # under PP the activations follow the PP microbatch, not the local batch: a smaller one only means fewer
        # microbatches per flush (a larger bubble), never a memory or speed win
        out = [v for v in out if int(v) > int(current)]
    return out


def _recompute_left_behind(campaign: Campaign, last: Step, space: LeverSpace, records: RecordReader) -> bool:
    """Whether the recompute a stacked step ran with is the coupling's to remove: the chain recomputes more than the
    incumbent (an out-of-memory retry added it), or the incumbent cannot recompute less itself -- no memory headroom,
    its next mode down predicted not to fit (:func:`bot.agent.memory_screen.predicted_oom`), or already stepped.
    Otherwise less recompute is the incumbent's own move, measured there by the lessons; on the rejected layout it
    would only climb a branch already behind (qwen3-30b-a3b on 64 B200: PP 8 -> 16 measured -13 %, less recompute
    stacked on it kept at +14 %, while on PP 8 it was worth +31 %). Where the coupling made the room (TP 4 -> 8 on
    llama3.1-405b: selective recompute fits there and not on the incumbent), the follow-up stands."""
    chain, inc = catalog.effective(last.levers), catalog.effective(campaign.incumbent_levers)
    mode = str(inc["activation_checkpoint"])
    if AC_RANK.get(str(chain["activation_checkpoint"]), 2) > AC_RANK.get(mode, 2) or mode not in LESS_RECOMPUTE:
        return True
    d = incumbent_diagnosis(campaign, records)
    if d is None or (d.mem_headroom_frac or 0.0) < NO_RECOMPUTE_HEADROOM:
        return True
    less = {**campaign.incumbent_levers, "activation_checkpoint": LESS_RECOMPUTE[mode]}
    return already_stepped(campaign, less) or predicted_oom(campaign, less, None, space, records) is not None


