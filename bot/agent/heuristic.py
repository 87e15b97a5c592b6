"""The default policy: deterministic, offline, ordered lesson-guided rules.

1. **OOM -> recompute** (the rule that made the published campaigns): when the last trial ran
   out of memory, retry that same layout with more activation recomputation (a step stacked on
   the failed one) before the layout is abandoned.
2. The relevant lessons, highest priority first; each lesson's ``try`` list in order; the first
   change that is legal, untried and not objective-changing wins. A change whose prerequisite is
   missing proposes the prerequisite first.
3. Generic exploration of the remaining search space, one lever at a time.
4. Nothing left: stop (the campaign keeps the recipe it has).
"""

from __future__ import annotations

from bot import levers as catalog
from bot.agent.diagnose import Diagnosis
from bot.agent.policy import LeverSpace, lesson_context, validate_change
from bot.campaign import Campaign
from bot.lessons import Lesson, LeverChange, relevant
from bot.records import Change, Scalar, Stop

RECOMPUTE_LADDER = {"none": "selective", "selective": "full", "memory_budget": "full"}
OOM_LESSON = "oom-enable-recompute"


def _relative(space: LeverSpace, current: Scalar, lc: LeverChange) -> Scalar | None:
    if lc.op is None:
        return lc.value
    if lc.op in ("double", "halve") and isinstance(current, int) and not isinstance(current, bool):
        return current * 2 if lc.op == "double" else (current // 2 if current > 1 else None)
    values = space.values.get(lc.lever) or list(catalog.get(lc.lever).choices)
    if current in values:
        i = values.index(current) + (1 if lc.op in ("next", "double") else -1)
        return values[i] if 0 <= i < len(values) else None
    return None


class HeuristicPolicy:
    name = "heuristic"

    def propose(self, campaign: Campaign, diagnosis: Diagnosis, lessons: list[Lesson], levers: LeverSpace) -> Change | Stop:
        retry = self._oom_retry(campaign)
        if retry is not None and validate_change(campaign, retry, levers) is None:
            return retry
        if diagnosis.outcome != "ok" and _last_trial_failed(campaign):
            # that failure was a rejected candidate's (its layout is abandoned); the lessons are matched
            # against the incumbent, which ran fine — an OOM lesson must not fire on a recipe that fits
            diagnosis = Diagnosis(outcome="ok", simulated=diagnosis.simulated)
        ctx = lesson_context(campaign, diagnosis, levers)
        current = catalog.effective(campaign.incumbent_levers)
        for lesson in relevant(lessons, ctx):
            if not lesson.auto_propose:
                continue
            for lc in lesson.try_:
                if lc.lever not in levers.values and lc.lever not in levers.recipe.levers:
                    continue  # the recipe does not let the tuner change it
                value = _relative(levers, current.get(lc.lever), lc)
                if value is None:
                    continue
                change = self._checked(campaign, levers, lc.lever, value, lesson.why, [lesson.id])
                if change is not None:
                    return change
        for lever, values in levers.values.items():
            for value in values:
                change = self._checked(campaign, levers, lever, value, "exploring the search space one lever at a time", [])
                if change is not None:
                    return change
        return Stop(why="no untried legal change is left in the search space", policy=self.name)

    def _checked(self, campaign: Campaign, space: LeverSpace, lever: str, value: Scalar, why: str, lessons: list[str]) -> Change | None:
        current = catalog.effective(campaign.incumbent_levers)
        change = Change(lever=lever, before=current.get(lever), after=value, why=why, lessons=lessons, policy=self.name)
        problem = validate_change(campaign, change, space)
        if problem is None:
            return change
        if problem.startswith("prerequisite missing"):
            fix = catalog.prerequisite_for(campaign.incumbent_levers, lever, value, space.model)
            if fix is not None:
                pre = Change(lever=fix[0], before=current.get(fix[0]), after=fix[1],
                             why=f"prerequisite of {lever}={value}: {problem}", lessons=lessons, policy=self.name)
                if validate_change(campaign, pre, space) is None:
                    return pre
        return None

    def _oom_retry(self, campaign: Campaign) -> Change | None:
        """The last trial ran out of memory: retry its layout with more recomputation."""
        if not campaign.steps:
            return None
        last = campaign.steps[-1]
        trial = next((r for r in last.runs if r.kind == "trial"), None)
        if trial is None or trial.outcome != "oom":
            return None
        if last.change.lever == "activation_checkpoint" and last.change.stacked_on is None:
            return None  # the step changed the recompute mode itself: nothing to retry
        # a retry that ran out of memory again climbs the ladder (selective -> full) before the layout is abandoned
        mode = str(catalog.effective(last.levers)["activation_checkpoint"])
        nxt = RECOMPUTE_LADDER.get(mode)
        if nxt is None:
            return None
        change = Change(
            lever="activation_checkpoint",
            before=mode,
            after=nxt,
            why=f"step {last.n} ({last.change.title()}) ran out of memory; retry that layout with recomputation before abandoning it",
            lessons=[OOM_LESSON],
            policy=self.name,
            stacked_on=last.n,
        )
        return change


def _last_trial_failed(campaign: Campaign) -> bool:
    if not campaign.steps:
        return False
    trial = next((r for r in campaign.steps[-1].runs if r.kind == "trial"), None)
    return trial is not None and trial.outcome != "ok"
