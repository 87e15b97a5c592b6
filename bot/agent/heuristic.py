"""The default policy: deterministic, offline, ordered lesson-guided rules.

0. **No gain in hand** (``_no_gain_stop``): stop before the first step when the incumbent's addressable share
   (exposed communication + bubble + recompute with memory to spare) could not clear the noise band even if all
   of it were removed; and, while no step has been kept, the steps together may spend NO_GAIN_SHARE of the budget,
   each proposal carrying what is left as its step's cap (a recipe already at its optimum costs little).
1. **OOM -> recompute** (the rule that made the published campaigns): when the last trial ran
   out of memory, retry that same layout with more activation recomputation (a step stacked on
   the failed one) before the layout is abandoned; when it already recomputes everything, retry
   it with the model sharded over twice the pipeline stages (``oom-raise-pipeline-parallel``). The recompute
   retry is not made again for a change whose same retry was measured MOMENTUM_GAIN slower on an earlier incumbent
   (``_recompute_retry_refuted``: recompute costs the same share again).
   A change the memory screen predicts to run out of memory (:mod:`bot.agent.memory_screen`: a measured peak
   scaled by the analytic memory model, over the device by more than its margin) is proposed with that
   prediction and not run: the campaign records it as an out-of-memory trial that cost nothing, and the
   retries above follow from it as from a real one. A memory partner (``_memory_partner``: context parallel, 1F1B,
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
   changes a parallel degree or a lever the lesson reads (``_refuted``), nor one that moves a lever back across a
   kept step that gained MOMENTUM_GAIN or more (``_undoes_a_kept_step``). After the diagnosis-driven moves (1d),
   the lessons held back only by their memory-headroom threshold, where the memory screen predicts their change
   fits (the threshold stands in for a prediction the lesson cannot make). The diagnosis-driven move (1d) goes
   before the lessons when the cost it is aimed at is more than LARGER_COST times the one the first lesson's change
   is aimed at (``_aimed_at_a_larger_cost``: fewer FSDP ranks for a third of the step in exposed communication
   before less recompute for 7 % of it; where the two costs are closer, the lessons' order stands) -- unless a
   lesson is aimed at that larger cost too and the analytic cost model predicts its change at least as fast
   (``_predicted_faster``): the catalog's one-lever remedy then goes first (qwen3-30b-a3b on 64 H100 at EP 8:
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

import math
import re
from collections.abc import Callable

from bot.agent.costmodel import bubble_fraction, estimate_of
from bot.agent.costmodel_tuner import MODELLED
from bot.agent.layout_jump import layout_jump
from bot.agent.lessons import Lesson, LeverChange, apply_op, relevant
from bot.agent.memory_screen import MeasuredPeak, change_levers, predicted_oom, predicted_peak, reference_peak
from bot.agent.policy import LeverSpace, base_levers, lesson_context, validate_change
from bot.agent.space import layout_problem
from bot.core import levers as catalog
from bot.core.diagnosis import Diagnosis, diagnose
from bot.core.matcher import fields, positive_fields
from bot.core.records import MEASURED_OUTCOMES, Change, RecordReader, Scalar, Stop
from bot.core.state import Campaign, RunRef, Step

RECOMPUTE_LADDER = {"none": "selective", "selective": "full", "memory_budget": "full"}
OOM_LESSON = "oom-enable-recompute"
OOM_PP_LESSON = "oom-raise-pipeline-parallel"
# "enabler of LEVER=VALUE:" -- or, for a two-link chain, "enabler of LEVER=VALUE, then LEVER2=VALUE2:" (the change it
# enables is itself the gated enabler of the second: ``_microbatch_enabler``)
# "enabler of X=v: ..." or, for a chain, "enabler of X=v, then Y=w[, then Z=u ...]: ..." (each link names the ones after it)
ENABLER = re.compile(r"^enabler of (?P<lever>[\w.]+)=(?P<value>[^\s,:]+)(?:, then (?P<then>[\w.]+=[^\s,:]+(?:, then [\w.]+=[^\s,:]+)*))?:")
DEGREES = catalog.PARALLEL_DEGREES
# Generic exploration order once the lessons are spent: the levers with the largest effect on step
# time first (recompute, batch split, pipeline schedule, parallel degrees), housekeeping last.
EXPLORING = "exploring the search space one lever at a time"  # a blind probe's why
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
        incumbent = _incumbent_diagnosis(campaign, records) if campaign.steps else diagnosis
        flat = _no_gain_stop(campaign, incumbent)
        if flat is not None:
            return Stop(why=flat, policy=self.name)
        decision = self._propose(campaign, diagnosis, lessons, levers, records, incumbent)
        if isinstance(decision, Change) and not decision.enabler:  # not run when it cannot fit: an OOM, for free
            oom = predicted_oom(campaign, change_levers(campaign, decision), decision.stacked_on, levers, records)
            if oom is not None:
                decision = decision.model_copy(update={"predicted_oom": oom})
            else:
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
        retry = self._oom_retry(campaign, levers, records)
        if retry is not None and not (OOM_LESSON in retry.lessons and _from_a_blind_probe(campaign, retry.stacked_on)
                                      and _patience_stop(campaign)):
            return retry
        follow = (self._enabled_change(campaign, levers) or self._follow_up(campaign, levers, records, lessons) or self._push_further(campaign, levers)
                  or self._keep_going(campaign, levers, incumbent) or self._restore_schedule(campaign, levers)
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
        if diagnosis.outcome != "ok" and _last_trial_failed(campaign):
            # that failure was a rejected candidate's (its layout is abandoned); the lessons are matched
            # against the incumbent, which ran fine — an OOM lesson must not fire on a recipe that fits
            diagnosis = _incumbent_diagnosis(campaign, records) or Diagnosis(outcome="ok", simulated=diagnosis.simulated)
        ctx = lesson_context(campaign, diagnosis, levers)
        current = catalog.effective(campaign.incumbent_levers)
        moot = _unmeasurable(campaign, diagnosis)
        hits = relevant(lessons, ctx)
        lesson_change = self._from_lessons(campaign, levers, dominant_cost_first(hits, diagnosis), current, moot, incumbent)
        driven = self._diagnosis_driven(campaign, diagnosis, levers)
        if lesson_change is not None and not _aimed_at_a_larger_cost(driven, lesson_change, diagnosis):
            return lesson_change
        if driven is not None:
            # a lesson aimed at the same cost first, where the analytic model predicts its change the faster
            aimed = [ls for ls in hits if _aims_at(ls, _aimed_cost(driven))] if lesson_change is not None else []
            same = self._from_lessons(campaign, levers, aimed, current, moot, incumbent) if aimed else None
            return same if same is not None and _predicted_faster(campaign, levers, same, driven) else driven
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
        stop = _patience_stop(campaign)
        if stop is not None:
            return Stop(why=stop, policy=self.name)
        order = sorted(levers.values, key=lambda k: EXPLORE_ORDER.index(k) if k in EXPLORE_ORDER else len(EXPLORE_ORDER))
        # blind probes skip, besides the moot levers, those that do nothing in the incumbent's layout
        moot = moot | {k for k in levers.values if catalog.inert(campaign.incumbent_levers, k)}
        order = [k for k in order if k not in moot]
        for lever in order:  # first the nearest moves of each lever, most impactful levers first
            for value in _neighbours(campaign, levers, lever, current.get(lever)):
                if _undoes_a_kept_step(campaign, lever, value):
                    continue
                change = self._checked(campaign, levers, lever, value, EXPLORING, [], incumbent)
                if change is not None:
                    return change
        for lever, values in levers.values.items():  # then every other legal value, in the space's order
            if lever in moot:
                continue
            for value in values:
                if _oom_dominated(campaign, lever, value) or _undoes_a_kept_step(campaign, lever, value):
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
        last, trial = _last_step_trial(campaign)
        if last is None or trial is None or trial.outcome != "oom" or JUMP_LESSON not in last.change.lessons:
            return None
        if sum(1 for s in campaign.steps if s.n > campaign.incumbent_step and JUMP_LESSON in s.change.lessons and s.runs) != 1:
            return None
        peak = reference_peak(campaign, last.n, records)
        if peak is None or catalog.effective(peak.levers) != catalog.effective(last.levers):
            return None  # the failed run reported no peak: the same anchor would aim the same way
        on = _incumbent_diagnosis(campaign, records)  # the lessons match the incumbent, which ran fine
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
                           frozenset(_unmeasurable(campaign, diagnosis)), anchor or reference_peak(campaign, None, records),
                           campaign.incumbent_tps / campaign.baseline_tps if campaign.incumbent_tps and campaign.baseline_tps else None,
                           last_layout_step(campaign), _compile_untried(campaign, space))
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
        if change.stacked_on and len(_chain_steps(campaign, change.stacked_on)) + 2 > MAX_CHAIN:
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
        if not legal or _already_stepped(campaign, {**levers, lbs_name: max(legal)}):
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
                if value is None or _refuted(campaign, lesson, lc.lever, value) or _undoes_a_kept_step(campaign, lc.lever, value, MOMENTUM_GAIN):
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
        if _already_stepped(campaign, enabled):
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
        old_mp, new_mp = _model_parallel(cur), _model_parallel({**cur, lever: value})
        lbs = int(cur[lbs_name])
        target = _batch_share(lbs, old_mp, new_mp)
        if target < 1 or target not in space.values[lbs_name]:
            return None
        enabled = {**base, lbs_name: target, lever: value}
        if layout_problem(space.recipe, enabled) is not None:
            return None
        if _already_stepped(campaign, enabled):
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
                if _already_stepped(campaign, {**target, SCHEDULE: value}):
                    return None
                change = Change(lever=lbs_name, before=lbs, after=v, lessons=[*lessons, MICROBATCH_LESSON], policy=self.name,
                                enabler=True, why=f"enabler of {SCHEDULE}={value}: the local batch that gives it its microbatches; {reason}")
                return change if validate_change(campaign, change, space) is None else None
        for lever, degree in _fewer_dp_degrees(space, cur, (2, 4)):
            factor = degree // int(cur[lever])
            if factor * lbs not in space.values[lbs_name]:
                continue
            layout = {**inc, lever: degree, lbs_name: factor * lbs}
            if (layout_problem(space.recipe, {**inc, lever: degree}) or layout_problem(space.recipe, layout)
                    or layout_problem(space.recipe, {**layout, SCHEDULE: value})):
                continue
            if _already_stepped(campaign, {**layout, SCHEDULE: value}):
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
        old_mp, new_mp = _model_parallel(cur), _model_parallel({**cur, change.lever: change.after})
        lbs = int(cur[lbs_name])
        share = _batch_share(lbs, old_mp, new_mp)
        if new_mp >= old_mp or not share:
            return None
        enabled = {**target, lbs_name: share}
        if (share not in space.values[lbs_name] or layout_problem(space.recipe, enabled) is not None
                or layout_problem(space.recipe, {**campaign.incumbent_levers, lbs_name: share}) is not None
                or _already_stepped(campaign, enabled)):
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
        last, trial = _last_step_trial(campaign)
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
        why = f"the change step {last.n} enabled ({last.change.title()}: {last.change.why.split(': ', 1)[-1]})"
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
        last, trial = _last_step_trial(campaign)
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
        if nxt is not None and _recompute_retry_refuted(campaign, last, nxt):
            return None
        if nxt is None:
            pp_name = "parallelism.pipeline_parallel_degree"
            pp = int(eff[pp_name])
            halve = self._halve_batch(campaign, space, last, eff, OOM_BATCH_LESSON)
            if halve is not None and last.change.lever in DEGREES and _chain_depth(campaign, last) < MAX_CHAIN:
                return halve
            if (halve is not None and OOM_BATCH_LESSON in last.change.lessons and last.stacked_on is not None
                    and _chain_depth(campaign, last) < MAX_CHAIN and records is not None):
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
        node, in the order the cost model predicts fastest (:func:`_fastest_first`) -- then memory_budget recompute in
        place, then smaller microbatches."""
        if _chain_depth(campaign, last) >= MAX_CHAIN:
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
        for lever, value, lesson, how in _fastest_first(campaign, space, last, options):
            # a partner that itself ran out of memory is retried one notch further in its place, not stacked on itself:
            # PP 1 -> 2 out of memory -> PP 1 -> 4 on the same recompute change (the chain stays as deep)
            on = campaign.step(last.stacked_on) if lever == last.change.lever and last.stacked_on else last
            why = f"step {on.n} ({on.change.title()}) gave up recomputation and ran out of memory; keep that and free activation memory instead: {how}"
            illegal = layout_problem(space.recipe, {**on.levers, lever: value})
            if illegal is not None:
                # refused by the pinned global batch or by the schedule's microbatch bound: the local batch (or, where
                # no local batch is legal on its own, the stepping-stone schedule) goes first as a gated enabler, the
                # partner stacked on it and measured -- within the chain's bound
                enabler = None if _chain_depth(campaign, on) + 2 > MAX_CHAIN else (
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
        ac_step = next((campaign.step(n) for n in _chain_steps(campaign, last.n)
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
        if _already_stepped(campaign, {**stepped, lever: value}):
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
        for n in sorted({n for s in campaign.steps if s.kept for n in _chain_steps(campaign, s.n)}, reverse=True):
            c = campaign.step(n).change
            if STONE_LESSON not in c.lessons or c.lever != SCHEDULE or current.get(SCHEDULE) != c.after:
                continue
            if _proposed_by(campaign, STONE_LESSON, SCHEDULE, c.before):
                return None  # measured back once already (a later incumbent does not reopen it)
            if _already_stepped(campaign, {**campaign.incumbent_levers, SCHEDULE: c.before}):
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
        pipeline schedule) aimed at a cost the small one was aimed at too (``_costs_aimed_at``): the small one's
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
            costs = _costs_aimed_at(c, by_id)
            later = [t for t in kept if t.n > s.n and (t.gain or 0.0) >= MOMENTUM_GAIN
                     and any(campaign.step(m).change.lever in (*DEGREES, SCHEDULE) for m in _chain_steps(campaign, t.n))
                     and any(costs & _costs_aimed_at(campaign.step(m).change, by_id) for m in _chain_steps(campaign, t.n))]
            if not later or (just_kept and later[-1].n != campaign.steps[-1].n):
                continue
            if (c.lever, str(c.before)) in _tried_from_incumbent(campaign) or _already_stepped(campaign, {**campaign.incumbent_levers, c.lever: c.before}):
                continue
            if _proposed_by(campaign, SECOND_PASS_LESSON, c.lever, c.before):
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
        jumps = [s for s in campaign.steps if s.kept and any(JUMP_LESSON in campaign.step(m).change.lessons for m in _chain_steps(campaign, s.n))]
        if not jumps:
            return None
        jump = jumps[-1]
        reviews = [s for s in campaign.steps if s.n > jump.n and REVIEW_LESSON in s.change.lessons and s.runs]
        if any(not s.kept and all(r.outcome != "oom" for r in s.runs) for s in reviews):
            return None  # a review measured no gain: the degrees the model ranks below it are not worth a run
        current = catalog.effective(campaign.incumbent_levers)
        tried = _tried_from_incumbent(campaign)
        options = []
        for m in _chain_steps(campaign, jump.n):
            c = campaign.step(m).change
            if c.lever not in DEGREES or c.lever not in space.values or current.get(c.lever) != c.after:
                continue
            for notch, way in ((_notch_toward(space.values[c.lever], c.after, c.before), "back"),
                               (_next_notch(space.values[c.lever], c.before, c.after), "further")):
                if notch is None or (c.lever, str(notch)) in tried or _proposed_by(campaign, REVIEW_LESSON, c.lever, notch):
                    continue
                target = _with_batch_share(campaign.incumbent_levers, c.lever, notch)
                peak = predicted_peak(campaign, target, None, space, records)
                if peak is not None and peak.predicted > peak.capacity:
                    continue  # the jump's own test (layout_jump): anchored on the measured peak, no margin
                options.append((_predicted_step(space, target), c, notch, way))
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
        last, trial = _last_step_trial(campaign)
        if last is None:
            return None
        if (last.kept or last.stacked_on is not None or last.change.extra or trial is None or trial.outcome != "ok"
                or last.gain is None or last.gain <= 0 or last.verdict is None or not last.verdict.ok
                or last.measurement is None or last.measurement.decision != "undecided"):
            return None
        if catalog.effective(campaign.incumbent_levers).get(last.change.lever) != last.change.before:
            return None  # the incumbent moved on since
        notch = _next_notch(space.values.get(last.change.lever, []), last.change.before, last.change.after)
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
        last, trial = _last_step_trial(campaign)
        if last is None or not last.kept or campaign.incumbent_step != last.n or last.gain is None or last.gain < MOMENTUM_GAIN:
            return None
        # the kept step's own lever first; then, where that has no legal next notch and the kept change was enabled by
        # a parallel degree (PP 1 -> 2 as the gated enabler of local batch 2 -> 4, kept together), the same coupling
        # one notch further: the degree's next notch as the enabler of the kept lever's (PP 2 -> 4 for local batch 8),
        # while the incumbent still spends COMM_FRAC of its step in exposed communication -- what halving the DP
        # ranks again removes (qwen3-30b-a3b on 64 B200: 55-73 % of the step, PP 2 -> 4 -> 8 each kept at +40-100 %;
        # minimax-m2 at 13 %: PP 4 -> 8 measured +0 % over 2-5 runs)
        chain = [campaign.step(n).change for n in _chain_steps(campaign, last.n)]
        top, tried = chain[0], _tried_from_incumbent(campaign)
        notch = _next_notch(space.values.get(top.lever, []), top.before, top.after)
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
            degree = _next_notch(space.values.get(c.lever, []), c.before, c.after)
            if c.lever not in DEGREES or m is None or m.group("lever") != top.lever or degree is None:
                continue
            enabled = {**campaign.incumbent_levers, c.lever: degree, top.lever: notch}
            if (layout_problem(space.recipe, {**campaign.incumbent_levers, c.lever: degree}) or layout_problem(space.recipe, enabled)
                    or _already_stepped(campaign, enabled)):
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
        last, trial = _last_step_trial(campaign)
        if last is None:
            return None
        if last.kept or last.stacked_on is None or trial is None or trial.outcome not in MEASURED_OUTCOMES or not trial.record:
            return None
        if _chain_depth(campaign, last) >= MAX_CHAIN:
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
                if value is None or str(value) == str(eff[SCHEDULE]) or _already_stepped(campaign, {**levers, SCHEDULE: value}):
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
        incumbent = _incumbent_diagnosis(campaign, records)
        if incumbent is None or incumbent.outcome != "ok" or "activation_checkpoint" not in space.values:
            return None
        b = incumbent.breakdown
        share = b.get("recompute", 0.0)
        if share <= max(b.get("exposed_comm", 0.0), b.get("bubble", 0.0)) or share / max(1.0 - share, 1e-9) < campaign.min_gain:
            return None
        mode = str(catalog.effective(campaign.incumbent_levers)["activation_checkpoint"])
        after = LESS_RECOMPUTE.get(mode)
        if after is None or after not in space.values["activation_checkpoint"] or ("activation_checkpoint", after) in _tried_from_incumbent(campaign):
            return None
        levers = {**campaign.incumbent_levers, "activation_checkpoint": after}
        if _already_stepped(campaign, levers):
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
        if pp <= 1 and not legal and comm >= COMM_FRAC and _dp_spans_nodes(space, eff):
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
        for lever, value in _fewer_dp_degrees(space, eff, (2,)):
            if cost == "comm" and lever == CP:
                continue
            name = "tensor parallel" if lever == TP else "context parallel"
            enabled = {**campaign.incumbent_levers, lever: value, lbs_name: 2 * lbs}
            if layout_problem(space.recipe, {**campaign.incumbent_levers, lever: value}) or layout_problem(space.recipe, enabled):
                continue
            if _already_stepped(campaign, enabled):
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


AC_RANK = {"none": 0, "memory_budget": 1, "selective": 1, "full": 2}
LESS_RECOMPUTE = {"full": "selective", "selective": "none", "memory_budget": "none"}
MOMENTUM_GAIN = 0.10  # a kept step that removed a tenth of the step time or more: worth one more notch the same way
MAX_CHAIN = 5  # coupled changes: at most this many stacked steps on top of the incumbent
LONG_SEQ = 8192
# of the step: a pipeline bubble worth filling (a larger local batch, a zero-bubble schedule, fewer DP ranks) and
# the analytic bubble at which more stages are gated behind the fill (lesson pp-fill-the-pipeline fires at the same share)
BUBBLE_FRAC = 0.05
RECOMPUTE_FRAC = 0.05
PATIENCE = 2
PATIENCE_RUNS = 1.0
NO_GAIN_SHARE = 0.22  # of the budget, spent on steps before the first kept one (the set-up not counted)
MIN_PROBE_RUNS = 2  # runs' device-hours the no-gain allowance is never below
ADDRESSABLE = {"exposed_comm", "bubble", "recompute"}
NO_RECOMPUTE_HEADROOM = 0.05  # the same headroom the less-recompute follow-up asks for (_fix_for)
OOM_BATCH_LESSON = "oom-halve-local-batch"
CP_PARTNER_LESSON = "less-recompute-partner-context-parallel"
BUDGET_PARTNER_LESSON = "less-recompute-partner-memory-budget"
SCHEDULE_PARTNER_LESSON = "less-recompute-partner-1f1b"
PP_PARTNER_LESSON = "less-recompute-partner-pipeline"
TP_PARTNER_LESSON = "less-recompute-partner-tensor-parallel"
TP_NAME = "parallelism.tensor_parallel_degree"
COMPILE_NAME = "compile.enable"
BUBBLE_LESSON = "pp-fill-the-pipeline"
SCHEDULE = "parallelism.pipeline_parallel_schedule"
STONE_LESSON = "pp-schedule-stepping-stone"
SECOND_PASS_LESSON = "second-pass-over-small-gains"
SHARE_LESSON = "dp-degree-batch-share"
MICROBATCH_LESSON = "pp-schedule-microbatches-fewer-dp-ranks"
# a schedule that needs microbatches >= stages -> the one with the same stage placement (two per rank, V-shaped) and
# the same zero-bubble backward split that does not (bot.core.layouts: NEEDS_MB_GE_STAGES)
STEPPING_STONE = {"DualPipeV": "ZBVZeroBubble"}
TOO_FEW_MICROBATCHES = "needs at least as many microbatches"  # the layout checker's refusal for that bound
DP_BUBBLE_LESSON = "pp-bubble-fewer-dp-ranks"
COMM_DP_LESSON = "fsdp-comm-fewer-dp-ranks"
COMM_FRAC = 0.25  # exposed communication share that calls for fewer FSDP ranks
RECOMPUTE_LESSON = "ac-less-recompute-when-it-dominates"
LESS_RECOMPUTE_FITS_LESSON = "ac-less-recompute-when-predicted-to-fit"
JUMP_LESSON = "layout-jump-from-cost-model"
REVIEW_LESSON = "layout-jump-review"  # each degree a kept jump moved, one notch back and one further (_jump_review)
# of the budget spent: the jump is proposed then (once a campaign) if the lessons have not run out before; a third
# leaves its basin two thirds of the budget (simulated, 33 tasks: mean oracle fraction 95.5 % at a half, 96.5 % here)
JUMP_AT = 1 / 3


def _refuted(campaign: Campaign, lesson: Lesson, lever: str, value: Scalar) -> bool:
    """``lesson``'s ``lever=value`` was measured clearly slower on an earlier incumbent (screened out or stopped
    early: below it by more than the noise band; or an interval wholly below zero) and no step kept since has
    changed a parallel degree or a lever the lesson's condition reads: on such an incumbent it would measure the
    same, so the lesson does not propose it again. (A kept change of one of those levers -- a new layout -- opens it
    again: AC off may lose at microbatch 1 and win at 8.) A change measured stacked on its enabler (the local batch
    that keeps the pinned global batch, from the incumbent) counts as measured: proposed again, it comes with the same
    enabler; one stacked on an out-of-memory step measured that step's recompute too, and does not."""
    watched = set(DEGREES) | {f.removeprefix("levers.") for f in (fields(lesson.when) if lesson.when else set()) if f.startswith("levers.")}
    now = catalog.effective(campaign.incumbent_levers)
    for s in campaign.steps:
        m = s.measurement
        enabler = campaign.step(s.stacked_on) if s.stacked_on is not None else None
        if enabler is not None and (not enabler.change.enabler or enabler.stacked_on is not None):
            continue  # stacked on an out-of-memory step or a chain: it measured more than this change
        if (s.kept or s.change.lever != lever or str(s.change.after) != str(value)
                or lesson.id not in s.change.lessons or m is None or m.decision != "no_gain"
                or not (m.screened or (m.hi is not None and m.hi < 0))):
            continue
        then = catalog.effective({**s.levers, lever: s.change.before,
                                  **({enabler.change.lever: enabler.change.before} if enabler is not None else {})})
        if not any(now.get(k) != then.get(k) for k in watched if k != lever):
            return True
    return False


def _proposed_by(campaign: Campaign, lesson: str, lever: str, value: Scalar) -> bool:
    """Whether a step of the campaign (not an enabler) already moved ``lever`` to ``value`` for ``lesson``."""
    return any(lesson in s.change.lessons and not s.change.enabler and s.change.lever == lever and str(s.change.after) == str(value)
               for s in campaign.steps)


def _recompute_retry_refuted(campaign: Campaign, last: Step, mode: str) -> bool:
    """The change ``last`` made (its lever and value) ran out of memory before, on an earlier incumbent, and its
    retry with ``mode`` recompute was measured slower than that incumbent by MOMENTUM_GAIN or more: the recompute
    costs about the same share of the step again (expert parallel 16 -> 8 out of memory, its full-recompute retry
    -23 %; after a kept TP 1 -> 2 the same change ran out of memory again and the same retry measured -25 %), more
    than the change could win back, so the retry is not made again. The layout is abandoned as after a failed
    ladder; the memory screen and a later kept step may still open it another way. A retry measured clearly slower
    by less (screened out, or an interval wholly below zero) is not made again either while no step kept since has
    changed a parallel degree, as for a refuted lesson (:func:`_refuted`): on the same layout it measures the same
    (llama3.1-70b on 128 H200, a scratch task: CP 4 -> 2 out of memory, its selective retry -7.1 %; after a kept
    reshard-after-forward change, the same pair again, -4.3 %)."""
    now = catalog.effective(campaign.incumbent_levers)
    for s in campaign.steps:
        if (s.stacked_on is None or s.stacked_on == last.n or s.kept or s.change.lever != "activation_checkpoint"
                or str(s.change.after) != mode or s.gain is None):
            continue
        failed_step = campaign.step(s.stacked_on)
        failed = failed_step.change
        if (failed.lever, str(failed.before), str(failed.after)) != (last.change.lever, str(last.change.before), str(last.change.after)) or not any(
                r.kind == "trial" and r.outcome in MEASURED_OUTCOMES for r in s.runs):
            continue
        if s.gain <= -MOMENTUM_GAIN:
            return True
        m = s.measurement
        then = catalog.effective({**failed_step.levers, failed.lever: failed.before})
        if (m is not None and m.decision == "no_gain" and (m.screened or (m.hi is not None and m.hi < 0))
                and not any(now.get(k) != then.get(k) for k in DEGREES if k != failed.lever)):
            return True
    return False


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


TP, CP = "parallelism.tensor_parallel_degree", "parallelism.context_parallel_degree"


def _fewer_dp_degrees(space: LeverSpace, eff: dict[str, Scalar], factors: tuple[int, ...]) -> list[tuple[str, int]]:
    """(lever, value) of each legal-valued way to divide the DP ranks by one of ``factors`` at a fixed device count:
    the TP degree that many times larger -- inside the node only (TP collectives run every layer, over NVLink) --
    then the CP degree; in that order, the smaller factor first for each."""
    out = []
    for lever in (TP, CP):
        for factor in factors:
            value = factor * int(eff[lever])
            if lever in space.values and value in space.values[lever] and not (lever == TP and value > space.recipe.cluster.devices_per_node):
                out.append((lever, value))
    return out


def _model_parallel(eff: dict[str, Scalar]) -> int:
    """The model-parallel product TP x CP x PP of the effective levers ``eff`` (the cluster over it is the DP degree)."""
    return (int(eff["parallelism.tensor_parallel_degree"]) * int(eff["parallelism.context_parallel_degree"])
            * int(eff["parallelism.pipeline_parallel_degree"]))


def _dp_spans_nodes(space: LeverSpace, eff: dict[str, Scalar]) -> bool:
    """Whether the data-parallel (FSDP) group of the layout ``eff`` spans more than one node."""
    c = space.recipe.cluster
    return c.nodes > 1 and c.nodes * c.devices_per_node // max(_model_parallel(eff), 1) > c.devices_per_node


def _notch(values: list[Scalar], at: Scalar, up: bool) -> Scalar | None:
    """The value one step up (or down) from ``at`` on an ordered numeric lever, or None."""
    if not all(isinstance(v, int) and not isinstance(v, bool) for v in (*values, at)) or at not in values:
        return None
    i = values.index(at) + (1 if up else -1)
    return values[i] if 0 <= i < len(values) else None


def _next_notch(values: list[Scalar], before: Scalar, after: Scalar) -> Scalar | None:
    """The value one step past ``after`` in the direction ``before -> after`` of an ordered numeric lever, or None."""
    if not isinstance(before, int) or isinstance(before, bool) or before == after:
        return None
    return _notch(values, after, after > before)  # type: ignore[operator]


def _notch_toward(values: list[Scalar], at: Scalar, toward: Scalar) -> Scalar | None:
    """The value one step from ``at`` in the direction of ``toward`` on an ordered numeric lever, or None."""
    if not isinstance(toward, int) or isinstance(toward, bool) or at == toward:
        return None
    return _notch(values, at, toward > at)  # type: ignore[operator]


def _batch_share(lbs: int, old_mp: int, new_mp: int) -> int:
    """The local batch that keeps a rank's share of the pinned global batch when the model-parallel degree TP x CP x PP
    goes from ``old_mp`` to ``new_mp`` (the DP degree the other way); 0 where that is not a whole number."""
    return lbs * new_mp // old_mp if (lbs * new_mp) % old_mp == 0 else 0


def _with_batch_share(levers: dict[str, Scalar], lever: str, value: Scalar) -> dict[str, Scalar]:
    """``levers`` with ``lever=value`` and the local batch at the pinned global batch's share (:func:`_batch_share`,
    as ``_enabler`` sets it), where that is a whole number."""
    cur = catalog.effective(levers)
    new = {**levers, lever: value}
    share = _batch_share(int(cur["training.local_batch_size"]), _model_parallel(cur), _model_parallel(catalog.effective(new)))
    return {**new, "training.local_batch_size": share} if share else new


def _already_stepped(campaign: Campaign, levers: dict[str, Scalar]) -> bool:
    """Whether the baseline or some step of the campaign already has this configuration (measured, refused or gated):
    validation refuses a change to either (an enabler of one would be proposed again and again, its change never)."""
    target = catalog.effective(levers)
    return target == catalog.effective(campaign.baseline_levers) or any(catalog.effective(s.levers) == target for s in campaign.steps)


def _tried_from_incumbent(campaign: Campaign) -> set[tuple[str, str]]:
    """(lever, value) of the one-lever steps already proposed from the current incumbent's levers."""
    return {(s.change.lever, str(s.change.after)) for s in campaign.steps
            if s.n > campaign.incumbent_step and s.stacked_on is None and not s.change.enabler}


def _chain_depth(campaign: Campaign, step) -> int:
    """How many stacked steps lead from the incumbent to ``step`` (1 for a step on the incumbent itself)."""
    return len(_chain_steps(campaign, step.n))


def _patience_stop(campaign: Campaign) -> str | None:
    """Stop before generic exploration once a gain is in hand and, since the last kept step, either PATIENCE
    measured steps found nothing or the steps spent PATIENCE_RUNS baseline runs' device-hours (failed starts and
    coupled retries add up: one blind probe on GLM-4.5 opened a five-step OOM chain): every diagnosis- and
    lesson-driven move is spent, and each further blind probe costs device-hours that delay payback."""
    if campaign.incumbent_step == 0:
        return None
    since = [s for s in campaign.steps if s.n > campaign.incumbent_step]
    # a blind probe that failed found nothing too: a real start that ran out of memory or crashed (a retry of it
    # included), or a probe the memory screen predicted to run out (its free retries are the same probe)
    measured = [s for s in since if any(r.kind == "trial" and (r.outcome in MEASURED_OUTCOMES or (
        (r.device_hours > 0 or (r.outcome == "oom" and s.stacked_on is None)) and _from_a_blind_probe(campaign, s.n)))
                                        for r in s.runs)]
    run_cost = max((r.device_hours for r in campaign.measured_baseline()), default=0.0)
    spent = sum(r.device_hours for s in since for r in s.runs)
    if len(measured) >= PATIENCE:
        why = f"the last {PATIENCE} measured steps gained nothing"
    elif run_cost > 0 and spent >= PATIENCE_RUNS * run_cost:
        why = f"the steps since the last kept one spent {spent / run_cost:.1f} baseline runs' device-hours and gained nothing"
    else:
        return None
    return (f"no diagnosis- or lesson-driven move is left and {why}; keeping the +{campaign.gain:.1%} found rather than "
            "spend more device-hours on blind exploration")


def addressable_share(d: Diagnosis | None) -> float | None:
    """The share of the step a throughput lever can remove, from the incumbent's measured breakdown: exposed
    communication + pipeline bubble + recomputation -- the last only with memory to spare for the activations it
    would keep (headroom >= NO_RECOMPUTE_HEADROOM, or headroom not measured). None without a breakdown that names
    all three."""
    if d is None or d.outcome != "ok" or not set(d.breakdown) >= ADDRESSABLE:
        return None  # e.g. a CPU run's spans (forward-backward, optimizer, data) name none of these costs
    b = d.breakdown
    share = b.get("exposed_comm", 0.0) + b.get("bubble", 0.0)
    if d.mem_headroom_frac is None or d.mem_headroom_frac >= NO_RECOMPUTE_HEADROOM:
        share += b.get("recompute", 0.0)
    return share


def _no_gain_stop(campaign: Campaign, incumbent: Diagnosis | None) -> str | None:
    """With no gain in hand, the campaign's probing is bounded by what the diagnosis says can be won.

    (1) The incumbent's addressable share (exposed communication, bubble, recompute with memory to spare) is so
    small that removing all of it would not clear the minimum worthwhile gain: nothing a trial could find is worth it -- stop
    before the first step. (2) Otherwise, while no step has been kept, no new move starts once the campaign has
    spent NO_GAIN_SHARE of its budget on its steps (the baseline and calibration, its set-up, are not counted; failed
    starts, OOM retries, early-stopped trials and the pairs of undecided steps add up): a recipe whose diagnosis- and lesson-driven first moves all fail is most likely at its optimum already,
    and each further probe only delays the verdict. Checked before every proposal (coupled retries included), and each
    proposal may spend only what is left of that allowance (:func:`no_gain_allowance_left`), so a flat recipe costs its
    set-up plus at most NO_GAIN_SHARE (issue 15's flat-task target: at most 30% of the budget, the set-up on the
    simulator being one baseline run, 7% of a 14-run budget; issue 14's flat CPU
    campaigns: at most 40%, the set-up there being a warm-up, 3 baseline runs and, once per recipe, 4 calibration runs)."""
    if campaign.incumbent_step != 0 or campaign.band is None:
        return None
    share = addressable_share(incumbent)
    if share is not None and share / max(1.0 - share, 1e-9) < campaign.min_gain:
        return (f"nothing measurable to win: the recipe's exposed communication, bubble and usable recompute are "
                f"{share:.1%} of its step, less than the {campaign.min_gain:.1%} minimum worthwhile gain even if all were removed")
    left = no_gain_allowance_left(campaign, incumbent)
    if campaign.steps and left is not None and left < campaign.expected_run_cost():
        n, spent = len(campaign.steps), _steps_spent(campaign)
        past = (" (a step whose estimate cleared the minimum gain was measured to its decision past it)"
                if spent > _no_gain_allowance(campaign, incumbent) else "")
        return (f"no gain found: {n} step{'s' * (n != 1)} spent {spent / campaign.budget:.0%} of the budget "
                f"and none beat the recipe; {_no_gain_allowance_text(campaign, incumbent)}{past}, and less than a run of "
                "it is left: it is most likely at its optimum (keeping it rather than spend more on blind probes)")
    return None


def _steps_spent(campaign: Campaign) -> float:
    """Device-hours the campaign's steps spent (their trials and pairs; not the set-up: baseline and calibration)."""
    return sum(r.device_hours for s in campaign.steps for r in s.runs)


def _no_gain_allowance(campaign: Campaign, incumbent: Diagnosis | None) -> float:
    """Device-hours the steps may spend in all while no step has been kept: :func:`no_gain_share` of the budget, never
    less than MIN_PROBE_RUNS runs (one probe measured to its first pair: a small budget still tries)."""
    return max(no_gain_share(incumbent) * campaign.budget, MIN_PROBE_RUNS * campaign.expected_run_cost())


def _no_gain_allowance_text(campaign: Campaign, incumbent: Diagnosis | None) -> str:
    """The allowance as the stop message states it, e.g. "a recipe with no gain in hand may spend 22% of the budget
    on probes" (with the MIN_PROBE_RUNS floor, when that is larger, named)."""
    allowed, share = _no_gain_allowance(campaign, incumbent), no_gain_share(incumbent)
    text = f"a recipe with no gain in hand may spend {allowed / campaign.budget:.0%} of the budget on probes"
    if allowed > share * campaign.budget:
        text += f" ({MIN_PROBE_RUNS} runs' device-hours, more than its {share:.0%} share)"
    return text


def no_gain_share(incumbent: Diagnosis | None) -> float:
    """The share of the budget the steps may spend while no step has been kept: NO_GAIN_SHARE, or the incumbent's
    addressable share when that is smaller -- a recipe whose measured breakdown says levers could remove 9% of its
    step gets 9% of the budget to find it. Without a breakdown that names the costs (a CPU run), NO_GAIN_SHARE."""
    share = addressable_share(incumbent)
    return NO_GAIN_SHARE if share is None else min(NO_GAIN_SHARE, share)


def no_gain_allowance_left(campaign: Campaign, incumbent: Diagnosis | None) -> float | None:
    """Device-hours the steps may still spend while no step has been kept: :func:`no_gain_share` of the budget less
    what the steps spent (their trials and pairs; the baseline and the gate's calibration are the campaign's set-up,
    on a real cluster a large share of a small budget). None once a step was kept (or without a budget): then only
    the budget and patience bound the steps. Each proposal carries what is left as its ``max_device_hours``, so a
    futile last probe cannot overrun it by its pairs: a recipe already at its optimum costs its set-up plus that share."""
    if campaign.incumbent_step != 0 or campaign.budget <= 0:
        return None
    return max(_no_gain_allowance(campaign, incumbent) - _steps_spent(campaign), 0.0)


# the one cost a lever exists to remove, as named in the step-time breakdown
ADDRESSES = {"parallelism.pipeline_parallel_schedule": "bubble", "activation_checkpoint": "recompute"}


# what each lever's change can remove from the step, for putting first the lessons aimed at a cost that dominates it
REMOVES = {"parallelism.fsdp_reshard_after_forward": "exposed_comm", "parallelism.expert_parallel_degree": "exposed_comm",
           "parallelism.pipeline_parallel_schedule": "bubble", "parallelism.pipeline_parallel_microbatch_size": "bubble",
           "activation_checkpoint": "recompute"}
# of the step: a cost over two fifths of it comes first. At 0.5 (more than everything else together) deepseek-v3's
# exposed all-to-all at 43 % of the step waited behind lessons aimed at nothing it measured, and DualPipeV, which hides
# it, came too late in the budget (73.5 -> 83.2 % of the oracle, 5 seeds, at 0.4); at 0.3 FSDP communication at 33 % of
# a 4-node llama3.1-8b step went before the TP / local-batch moves that shrink it (scratch task: 96.4 -> 76.4 %).
DOMINANT = 0.4


AIMS = {BUBBLE_LESSON: "bubble", DP_BUBBLE_LESSON: "bubble", COMM_DP_LESSON: "exposed_comm"}
LARGER_COST = 2.0  # (module docstring, 2.)


def _aimed_cost(change: Change | None) -> str:
    """The cost ``change`` is aimed at: its diagnosis-driven lesson's, or what its lever (an enabler's: the lever it
    enables) REMOVES ("" for none)."""
    if change is None:
        return ""
    m = ENABLER.match(change.why) if change.enabler else None
    return next((AIMS[x] for x in change.lessons if x in AIMS), None) or REMOVES.get(m.group("lever") if m else change.lever, "")


def _costs_aimed_at(change: Change, lessons: dict[str, Lesson]) -> set[str]:
    """Every cost ``change`` is aimed at: ``_aimed_cost``'s, and each cost whose share of the step one of its lessons
    fires on (DualPipeV from the MoE lesson that fires on exposed communication: the bubble and exposed_comm)."""
    out = {_aimed_cost(change)} - {""}
    for lid in change.lessons:
        les = lessons.get(lid)
        if les is not None:
            out |= {cost for cost in ADDRESSABLE if _fires_on(les, cost)}
    return out


def _aimed_at_a_larger_cost(driven: Change | None, lesson_change: Change, diagnosis: Diagnosis) -> bool:
    """Whether the diagnosis-driven move is aimed at a cost more than LARGER_COST times the one the lesson's change
    is aimed at (both named by the incumbent's breakdown)."""
    if driven is None or diagnosis.outcome != "ok" or not diagnosis.breakdown:
        return False
    d, lesson = diagnosis.breakdown.get(_aimed_cost(driven)), diagnosis.breakdown.get(_aimed_cost(lesson_change))
    return d is not None and lesson is not None and d > LARGER_COST * lesson


def _compile_untried(campaign: Campaign, space: LeverSpace) -> bool:
    """Whether torch.compile is off in the incumbent, legal to turn on in the space, and not yet measured on by any
    step (the lessons will propose it: :func:`bot.agent.layout_jump.layout_jump` compares layouts as compiled)."""
    on = [v for v in space.values.get(COMPILE_NAME, []) if v is True]
    return bool(on) and not catalog.effective(campaign.incumbent_levers)[COMPILE_NAME] and not any(
        s.runs and catalog.effective(s.levers)[COMPILE_NAME] for s in campaign.steps)


def last_layout_step(campaign: Campaign) -> tuple[dict[str, Scalar], float] | None:
    """The campaign's latest kept step that changed a lever the cost model has a term for, as (the incumbent's levers
    before it, its measured speed-up): the second check of :func:`bot.agent.layout_jump.layout_jump`'s model.
    None without one (or without its paired estimate). A kept compile or async-TP step is skipped: the model has
    no term for it, so it could not reproduce it."""
    before = dict(campaign.baseline_levers)
    found: tuple[dict[str, Scalar], float] | None = None
    for step in campaign.steps:
        if not step.kept:
            continue
        a, b = catalog.effective(before), catalog.effective(step.levers)
        if step.gain is not None and any(a.get(k) != b.get(k) for k in MODELLED):
            found = (before, 1.0 + step.gain)
        before = dict(step.levers)
    return found


Partner = tuple[str, Scalar, str, str]  # a memory partner: (lever, value, lesson, how it frees memory)


def _fastest_first(campaign: Campaign, space: LeverSpace, last: Step, options: list[Partner]) -> list[Partner]:
    """Memory partners ``(lever, value, lesson, how)`` for the chain ending at ``last``, ordered by the step time the
    analytic cost model predicts for the layout each leads to (:mod:`bot.agent.costmodel`, not the simulator), their
    listed order breaking ties and kept where the model cannot tell (a model or hardware it does not know). A partner
    is one more measured run, and the wrong one's slowdown can hide the recompute saving it was meant to keep:
    llama3.1-8b on 64 H100s at 8192 tokens (an unseen probe task), whose selective -> none ran out of memory, took
    context parallel first -- ring attention over half the ranks, measured 31% slower -- where the model ranks
    doubled TP (with the recompute saving kept, 5% faster) first. The model orders the partners but vetoes none: a
    partner it ranks last is still tried before the batch is halved (with a veto -- TP dropped where predicted
    slower than the incumbent -- qwen3-235b-a22b on 128 H100s kept 84.9 % of the oracle instead of 94.1 %, 3 seeds,
    measured before the model's EP terms were corrected)."""
    def predicted(option: Partner) -> float:
        lever, value = option[0], option[1]
        on = campaign.step(last.stacked_on) if lever == last.change.lever and last.stacked_on else last
        return _predicted_step(space, {**on.levers, lever: value})

    return sorted(options, key=predicted)


def _predicted_step(space: LeverSpace, levers: dict[str, Scalar]) -> float:
    """The analytic cost model's step time for the recipe run with ``levers``; infinite where it cannot tell."""
    try:
        return estimate_of(space.recipe, levers).step_s
    except (KeyError, ValueError, ZeroDivisionError, catalog.LeverError):
        return math.inf


def _predicted_faster(campaign: Campaign, space: LeverSpace, a: Change, b: Change) -> bool:
    """Whether the analytic cost model predicts the run ``a`` leads to (an enabler's: with the change it enables) at
    least as fast as ``b``'s; False where it cannot tell (a model or hardware it does not know)."""
    def target(change: Change) -> dict[str, Scalar]:
        levers = change_levers(campaign, change)
        m = ENABLER.match(change.why) if change.enabler else None
        if m is not None:
            levers = {**levers, m.group("lever"): catalog.parse_value(m.group("lever"), m.group("value"))}
        return levers

    ta, tb = _predicted_step(space, target(a)), _predicted_step(space, target(b))
    return math.isfinite(ta) and math.isfinite(tb) and ta <= tb


def dominant_cost_first(lessons: list[Lesson], diagnosis: Diagnosis) -> list[Lesson]:
    """The relevant lessons with those aimed at the incumbent's dominant cost first (the largest addressable cost,
    when over DOMINANT of its measured step), each group in priority order. A recipe that spends 89% of its step in exposed communication
    gains nothing measurable from less recompute (2.5% of it) however high that lesson's priority: its first probe
    is better spent on what dominates. Without a dominant cost (or a breakdown) the order is the lessons' own."""
    if diagnosis.outcome != "ok" or not diagnosis.breakdown:
        return lessons
    cost, share = max(((k, v) for k, v in diagnosis.breakdown.items() if k in ADDRESSABLE), key=lambda kv: kv[1], default=("", 0.0))
    if share <= DOMINANT:
        return lessons
    aimed = [ls for ls in lessons if _aims_at(ls, cost)]
    return aimed + [ls for ls in lessons if ls not in aimed]


def _aims_at(lesson: Lesson, cost: str) -> bool:
    """Whether ``lesson`` is aimed at ``cost``: a lever it tries exists to remove that cost (REMOVES), or it fires on
    that cost's share of the measured step (its ``when`` reads ``diagnosis.breakdown.<cost>_frac`` outside a ``not``)."""
    return any(REMOVES.get(lc.lever) == cost for lc in lesson.try_) or _fires_on(lesson, cost)


def _fires_on(lesson: Lesson, cost: str) -> bool:
    """Whether ``lesson`` fires on ``cost``'s share of the measured step (reads ``diagnosis.breakdown.<cost>_frac``
    outside a ``not``; one held back by the share reads it under ``not``)."""
    return lesson.when is not None and f"diagnosis.breakdown.{cost}_frac" in positive_fields(lesson.when)


def _unmeasurable(campaign: Campaign, diagnosis: Diagnosis) -> set[str]:
    """Levers whose whole addressable cost is below the minimum worthwhile gain: removing all of it could not be kept
    as a gain, so a trial would spend runs to learn nothing. Only with a measured breakdown that names the cost."""
    if campaign.band is None or diagnosis.outcome != "ok":
        return set()
    def best_gain(f: float) -> float:  # removing a share f of the step speeds it up by f / (1 - f)
        return f / (1.0 - f) if f < 1.0 else float("inf")

    return {lever for lever, cost in ADDRESSES.items()
            if cost in diagnosis.breakdown and best_gain(diagnosis.breakdown[cost]) < campaign.min_gain}


def _neighbours(campaign: Campaign, space: LeverSpace, lever: str, current: Scalar) -> list[Scalar]:
    """Generic exploration moves for one lever: adjacent values of an ordered domain (batch sizes and degrees
    one doubling/halving away, larger first), every value of a categorical one, recompute only downwards; never a
    value that a step from this incumbent already showed runs out of memory (less recompute than a mode that
    did not fit, a larger batch than one that did not)."""
    values = list(space.values.get(lever, []))
    oom = _oom_values(campaign, lever)
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


def _undoes_a_kept_step(campaign: Campaign, lever: str, value: Scalar, min_gain: float | None = None) -> bool:
    """Whether ``lever=value`` moves a lever back to the value a kept (A/B-confirmed or decisive) step moved it away
    from -- with ``min_gain``, only a kept step that gained that much. Blind exploration never does (that direction
    was measured as a gain beyond the noise band); a lesson never undoes a gain of MOMENTUM_GAIN or more (PP 2 -> 1
    right after PP 1 -> 2 was kept at +433 %), while a smaller one may be revisited (what it traded may matter more
    later); coupled retries still may. Blind exploration reads each kept step's own change; with ``min_gain`` every
    change of a kept chain counts (an enabler kept with the change stacked on it: PP 1 -> 2 as the enabler of local
    batch 2 -> 4, kept together at +524 %)."""
    for s in campaign.steps:
        if not s.kept or (min_gain is not None and (s.gain or 0.0) < min_gain):
            continue
        moves = [s.change] if min_gain is None else [campaign.step(n).change for n in _chain_steps(campaign, s.n)]
        if any(c.lever == lever and c.before == value for c in moves):
            return True
    return False


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
    d = _incumbent_diagnosis(campaign, records)
    if d is None or (d.mem_headroom_frac or 0.0) < NO_RECOMPUTE_HEADROOM:
        return True
    less = {**campaign.incumbent_levers, "activation_checkpoint": LESS_RECOMPUTE[mode]}
    return _already_stepped(campaign, less) or predicted_oom(campaign, less, None, space, records) is not None


def _chain_steps(campaign: Campaign, n: int) -> list[int]:
    """Step ``n`` and the steps it is stacked on, down to the incumbent."""
    out = []
    while n:
        out.append(n)
        n = campaign.step(n).stacked_on or 0
    return out


def _oom_values(campaign: Campaign, lever: str) -> list[Scalar]:
    """Values of ``lever`` that ran out of memory as a one-lever step from the current incumbent."""
    return [s.change.after for s in campaign.steps if s.change.lever == lever and s.change.stacked_on is None
            and s.levers == {**campaign.incumbent_levers, lever: s.change.after}
            and any(r.kind == "trial" and r.outcome == "oom" for r in s.runs)]


def _oom_dominated(campaign: Campaign, lever: str, value: Scalar) -> bool:
    """A value that needs more memory than one that already ran out of memory from this incumbent."""
    oom = _oom_values(campaign, lever)
    if not oom:
        return False
    if lever == "activation_checkpoint":
        return AC_RANK.get(str(value), 2) <= min(AC_RANK.get(str(v), 2) for v in oom)
    if lever in ("training.local_batch_size", "parallelism.pipeline_parallel_microbatch_size") and isinstance(value, int):
        return value >= min(int(v) for v in oom)
    return False


def _incumbent_diagnosis(campaign: Campaign, records: RecordReader) -> Diagnosis | None:
    """The incumbent's own diagnosis (its latest ok run), read from its record through the record store."""
    runs = campaign.step(campaign.incumbent_step).runs if campaign.incumbent_step else campaign.baseline
    for ref in reversed(runs or []):
        if ref.outcome == "ok" and ref.record:
            record = records.read(ref.record)
            return diagnose(record) if record is not None else None
    return None


def _from_a_blind_probe(campaign: Campaign, n: int | None) -> bool:
    """Whether step ``n`` is (or is stacked on) a blind probe of generic exploration: its retries are probes too,
    which the patience stop bounds like any other."""
    chain = _chain_steps(campaign, n or 0)
    return bool(chain) and EXPLORING in campaign.step(chain[-1]).change.why  # _fill_first keeps the probe's why


def _last_step_trial(campaign: Campaign) -> tuple[Step | None, RunRef | None]:
    """The campaign's last step and its trial run (None where there is none yet)."""
    if not campaign.steps:
        return None, None
    last = campaign.steps[-1]
    return last, next((r for r in last.runs if r.kind == "trial"), None)


def _last_trial_failed(campaign: Campaign) -> bool:
    _, trial = _last_step_trial(campaign)
    return trial is not None and trial.outcome != "ok"
