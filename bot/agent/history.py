"""What a campaign's steps have already shown, as the heuristic policy reads it: lessons and recompute retries
measured clearly slower (not proposed again), configurations already stepped or tried from the incumbent, values
that ran out of memory, chains of stacked steps, the incumbent's own diagnosis, and the latest kept step the cost
model can check itself against.

Pure functions of the campaign state (and, for a diagnosis, the record store); nothing here proposes a change.
"""

from __future__ import annotations

import re

from bot.agent.costmodel_tuner import MODELLED
from bot.agent.lessons import Lesson
from bot.agent.policy import LeverSpace
from bot.core import levers as catalog
from bot.core.diagnosis import Diagnosis, diagnose
from bot.core.matcher import fields
from bot.core.records import MEASURED_OUTCOMES, Change, RecordReader, Scalar, Setting
from bot.core.state import Campaign, RunRef, Step

# an enabler's why: "enabler of X=v: ..." or, for a chain, "enabler of X=v, then Y=w[, then Z=u ...]: ..." (each link
# names the ones after it; the heuristic's ``_microbatch_enabler`` makes a two-link one)
ENABLER = re.compile(
    r"^enabler of (?P<lever>[\w.]+)=(?P<value>[^\s,:]+)(?:, then (?P<then>[\w.]+=[^\s,:]+(?:, then [\w.]+=[^\s,:]+)*))?:"
)
EXPLORING = "exploring the search space one lever at a time"  # a blind probe's why
# recompute modes by how much they recompute (memory_budget keeps about half the activations, like selective)
AC_RANK = {"none": 0, "memory_budget": 1, "selective": 1, "full": 2}
MOMENTUM_GAIN = 0.10  # a kept step that removed a tenth of the step time or more: worth one more notch the same way
COMPILE_NAME = "compile.enable"
# the batch levers: more of either keeps more activations (one that ran out of memory bounds every larger one)
BATCH_LEVERS = ("training.local_batch_size", "parallelism.pipeline_parallel_microbatch_size")


def undone(levers: dict[str, Scalar], *changes: Change) -> dict[str, Scalar]:
    """``levers`` with each change undone: its lever back to the value it had, or unset (torchtitan's default) where
    it had none."""
    out = dict(levers)
    for c in changes:
        if c.before is None:
            out.pop(c.lever, None)
        else:
            out[c.lever] = c.before
    return out


def refuted(campaign: Campaign, lesson: Lesson, lever: str, value: Scalar) -> bool:
    """``lesson``'s ``lever=value`` was measured clearly slower on an earlier incumbent (its trial cut -- stopped
    early or closed without pairs, below it by more than the throughput band -- or an interval wholly below zero) and
    no step kept since has changed a parallel degree or a lever the lesson's condition reads: on such an incumbent it
    would measure the same, so the lesson does not propose it again. (A kept change of one of those levers -- a new layout -- opens it
    again: AC off may lose at microbatch 1 and win at 8.) A change measured stacked on its enabler (the local batch
    that keeps the pinned global batch, from the incumbent) counts as measured: proposed again, it comes with the same
    enabler; one stacked on an out-of-memory step measured that step's recompute too, and does not."""
    watched = set(catalog.PARALLEL_DEGREES) | {
        f.removeprefix("levers.") for f in (fields(lesson.when) if lesson.when else set()) if f.startswith("levers.")
    }
    now = catalog.effective(campaign.incumbent_levers)
    for s in campaign.steps:
        m = s.measurement
        enabler = campaign.step(s.stacked_on) if s.stacked_on is not None else None
        if enabler is not None and (not enabler.change.enabler or enabler.stacked_on is not None):
            continue  # stacked on an out-of-memory step or a chain: it measured more than this change
        if (
            s.kept
            or s.change.lever != lever
            or str(s.change.after) != str(value)
            or lesson.id not in s.change.lessons
            or m is None
            or m.decision != "no_gain"
            or not (m.cut or (m.hi is not None and m.hi < 0))
        ):
            continue
        then = catalog.effective(undone(s.levers, s.change, *([enabler.change] if enabler is not None else [])))
        if not any(now.get(k) != then.get(k) for k in watched if k != lever):
            return True
    return False


def proposed_by(campaign: Campaign, lesson: str, lever: str, value: Scalar | None) -> bool:
    """Whether a step of the campaign (not an enabler) already moved ``lever`` to ``value`` for ``lesson``."""
    return any(
        lesson in s.change.lessons
        and not s.change.enabler
        and s.change.lever == lever
        and str(s.change.after) == str(value)
        for s in campaign.steps
    )


def recompute_retry_refuted(campaign: Campaign, last: Step, mode: str) -> bool:
    """The change ``last`` made (its lever and value) ran out of memory before, on an earlier incumbent, and its
    retry with ``mode`` recompute was measured slower than that incumbent by MOMENTUM_GAIN or more -- the recompute
    costs about the same share of the step again, so the retry is not made again -- or measured clearly slower by
    less (its trial cut, or an interval wholly below zero) with no step kept since that changed a parallel degree, as
    for a refuted lesson (:func:`refuted`): on the same layout it measures the same. The measurements:
    docs/agent-evidence.md."""
    now = catalog.effective(campaign.incumbent_levers)
    for s in campaign.steps:
        if (
            s.stacked_on is None
            or s.stacked_on == last.n
            or s.kept
            or s.change.lever != "activation_checkpoint"
            or str(s.change.after) != mode
            or s.gain is None
        ):
            continue
        failed_step = campaign.step(s.stacked_on)
        failed = failed_step.change
        if (failed.lever, str(failed.before), str(failed.after)) != (
            last.change.lever,
            str(last.change.before),
            str(last.change.after),
        ) or not any(r.kind == "trial" and r.outcome in MEASURED_OUTCOMES for r in s.runs):
            continue
        if s.gain <= -MOMENTUM_GAIN:
            return True
        m = s.measurement
        then = catalog.effective(undone(failed_step.levers, failed))
        if (
            m is not None
            and m.decision == "no_gain"
            and (m.cut or (m.hi is not None and m.hi < 0))
            and not any(now.get(k) != then.get(k) for k in catalog.PARALLEL_DEGREES if k != failed.lever)
        ):
            return True
    return False


def already_stepped(campaign: Campaign, levers: dict[str, Scalar]) -> bool:
    """Whether the baseline or some step of the campaign already has this configuration (measured, refused or gated):
    validation refuses a change to either (an enabler of one would be proposed again and again, its change never)."""
    target = catalog.effective(levers)
    return target == catalog.effective(campaign.baseline_levers) or any(
        catalog.effective(s.levers) == target for s in campaign.steps
    )


def tried_from_incumbent(campaign: Campaign) -> set[tuple[str, str]]:
    """(lever, value) of the one-lever steps already proposed from the current incumbent's levers."""
    return {
        (s.change.lever, str(s.change.after))
        for s in campaign.steps
        if s.n > campaign.incumbent_step and s.stacked_on is None and not s.change.enabler
    }


def chain_steps(campaign: Campaign, n: int) -> list[int]:
    """Step ``n`` and the steps it is stacked on, down to the incumbent."""
    out = []
    while n:
        out.append(n)
        n = campaign.step(n).stacked_on or 0
    return out


def chain_depth(campaign: Campaign, step) -> int:
    """How many stacked steps lead from the incumbent to ``step`` (1 for a step on the incumbent itself)."""
    return len(chain_steps(campaign, step.n))


def oom_values(campaign: Campaign, lever: str, measured_only: bool = False) -> list[Scalar]:
    """Values of ``lever`` that ran out of memory as a one-lever step from the current incumbent (``measured_only``:
    not those the memory screen only predicted to)."""
    return [
        s.change.after
        for s in campaign.steps
        if s.change.lever == lever
        and s.change.stacked_on is None
        and not (measured_only and s.change.predicted_oom)
        and s.levers == {**campaign.incumbent_levers, lever: s.change.after}
        and any(r.kind == "trial" and r.outcome == "oom" for r in s.runs)
    ]


def oom_dominated(campaign: Campaign, lever: str, value: Scalar, measured_only: bool = False) -> bool:
    """A value that needs more memory than one that already ran out of memory from this incumbent (``measured_only``:
    in a run, not only by the memory screen's prediction)."""
    oom = oom_values(campaign, lever, measured_only)
    if not oom:
        return False
    if lever == "activation_checkpoint":
        return AC_RANK.get(str(value), 2) <= min(AC_RANK.get(str(v), 2) for v in oom)
    if lever in BATCH_LEVERS and isinstance(value, int):
        return value >= min(int(v) for v in oom)
    return False


def undoes_a_kept_step(campaign: Campaign, lever: str, value: Scalar, min_gain: float | None = None) -> bool:
    """Whether ``lever=value`` moves a lever back to the value a kept (A/B-confirmed or decisive) step moved it away
    from -- with ``min_gain``, only a kept step that gained that much. Blind exploration never does (that direction
    was measured as a gain beyond the noise band); a lesson never undoes a gain of MOMENTUM_GAIN or more (PP 2 -> 1
    right after a kept PP 1 -> 2), while a smaller one may be revisited (what it traded may matter more
    later); coupled retries still may. Blind exploration reads each kept step's own change; with ``min_gain`` every
    change of a kept chain counts (an enabler kept with the change stacked on it: PP 1 -> 2 as the enabler of local
    batch 2 -> 4, kept together)."""
    for s in campaign.steps:
        if not s.kept or (min_gain is not None and (s.gain or 0.0) < min_gain):
            continue
        moves = [s.change] if min_gain is None else [campaign.step(n).change for n in chain_steps(campaign, s.n)]
        if any(c.lever == lever and c.before == value for c in moves):
            return True
    return False


def incumbent_diagnosis(campaign: Campaign, records: RecordReader) -> Diagnosis | None:
    """The incumbent's own diagnosis (its latest ok run), read from its record through the record store."""
    runs = campaign.step(campaign.incumbent_step).runs if campaign.incumbent_step else campaign.baseline
    for ref in reversed(runs or []):
        if ref.outcome == "ok" and ref.record:
            record = records.read(ref.record)
            return diagnose(record) if record is not None else None
    return None


def from_a_blind_probe(campaign: Campaign, n: int | None) -> bool:
    """Whether step ``n`` is (or is stacked on) a blind probe of generic exploration: its retries are probes too,
    which the patience stop bounds like any other."""
    chain = chain_steps(campaign, n or 0)
    return bool(chain) and is_probe(campaign.step(chain[-1]).change)  # the fill-first enabler keeps the probe's flag


def is_probe(change: Change) -> bool:
    """Whether ``change`` is a blind probe: its ``probe`` field; for a record stored before it, the phrase in its why."""
    return change.probe if change.probe is not None else EXPLORING in change.why


def enabled_settings(change: Change) -> list[Setting]:
    """What ``change`` enables, in chain order ([] for none): its ``enables`` field; for a record stored before that
    field, parsed from its why ("enabler of X=v[, then Y=w ...]: ..."), up to the first value that does not parse."""
    if change.enables is not None:
        return list(change.enables)
    m = ENABLER.match(change.why)
    if m is None:
        return []
    pairs = [(m.group("lever"), m.group("value"))]
    if m.group("then"):
        pairs += [tuple(link.split("=", 1)) for link in m.group("then").split(", then ")]
    out = []
    for lever, raw in pairs:
        try:
            out.append(Setting(lever=lever, value=catalog.parse_value(lever, raw)))
        except catalog.LeverError:
            break
    return out


def last_step_trial(campaign: Campaign) -> tuple[Step | None, RunRef | None]:
    """The campaign's last step and its trial run (None where there is none yet)."""
    if not campaign.steps:
        return None, None
    last = campaign.steps[-1]
    return last, next((r for r in last.runs if r.kind == "trial"), None)


def last_trial_failed(campaign: Campaign) -> bool:
    _, trial = last_step_trial(campaign)
    return trial is not None and trial.outcome != "ok"


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


def compile_gain(campaign: Campaign) -> float | None:
    """What the kept step that turned torch.compile on measured (None: no such step; compile from the recipe, or
    as the prerequisite of another change, was not measured on its own)."""
    for s in campaign.steps:
        if s.kept and s.change.lever == COMPILE_NAME and s.change.after is True and s.gain is not None:
            return s.gain
    return None


def compile_untried(campaign: Campaign, space: LeverSpace) -> bool:
    """Whether torch.compile is off in the incumbent, legal to turn on in the space, and not yet measured on by any
    step (the lessons will propose it: :func:`bot.agent.layout_jump.layout_jump` compares layouts as compiled)."""
    on = [v for v in space.values.get(COMPILE_NAME, []) if v is True]
    return (
        bool(on)
        and not catalog.effective(campaign.incumbent_levers)[COMPILE_NAME]
        and not any(s.runs and catalog.effective(s.levers)[COMPILE_NAME] for s in campaign.steps)
    )


# a chain link's own reason, as ``enabled_why`` writes it: "the change step N enabled (...)"
CHAIN_LINK = re.compile(r"^the change step (?P<n>\d+) enabled \(")


def link_reason(step: Step) -> str:
    """The reason ``step``'s change gives, without the "enabler of ...:" prefix that names what it enables."""
    why = step.change.why
    return why.split(": ", 1)[-1] if ENABLER.match(why) else why


def chain_root(campaign: Campaign, step: Step) -> Step:
    """The step whose own reason began the enabler chain ``step`` is a link of (``step`` itself, where it began one)."""
    seen = {step.n}
    while m := CHAIN_LINK.match(link_reason(step)):
        prior = next((s for s in campaign.steps if s.n == int(m.group("n"))), None)
        if prior is None or prior.n in seen:
            break
        seen.add(prior.n)
        step = prior
    return step


def enabled_why(campaign: Campaign, enabler: Step) -> str:
    """Why the change an enabler step enables is proposed: that step, and the reason the chain it belongs to began,
    stated once -- a link of a long chain names the step that began it, not every link before it (each link used to
    quote the whole why of the one before, which grew with every link)."""
    root = chain_root(campaign, enabler)
    if root.n == enabler.n:
        return f"the change step {enabler.n} enabled ({enabler.change.title()}: {link_reason(enabler)})"
    return (
        f"the change step {enabler.n} enabled ({enabler.change.title()}), a link of the chain step {root.n} began "
        f"({root.change.title()}: {link_reason(root)})"
    )
