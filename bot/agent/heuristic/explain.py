"""What a step's report says the policy saw and expected: the diagnosis in one clause, the move, the prediction."""

from __future__ import annotations

from bot.agent.heuristic.scorer import Score
from bot.core.diagnosis import Diagnosis
from bot.core.records import Prediction

NAMES = {
    "exposed_comm": "exposed communication",
    "bubble": "the pipeline bubble",
    "recompute": "recompute",
    "compute": "compute",
    "other": "other work",
    "fwd_bwd": "forward and backward",
    "optim": "the optimizer",
    "fetching_batch": "data loading",
}
PRIOR_BASIS = {
    "diagnosis": "half of the {cost} it is aimed at",
    "lesson": "the gain its lesson's evidence measured",
    "momentum": "half the saving the last notch measured",
    "blind": "a blind prior: no cost model here and no measured cost it is aimed at",
}
SHOWN = 2  # the largest shares named (compute aside)


def saw(diagnosis: Diagnosis | None) -> str:
    """The incumbent's diagnosis in one clause: its largest costs' shares of the step and its memory headroom
    ("recompute is 31% of the step, exposed communication 12%, and memory has 40% headroom")."""
    if diagnosis is None:
        return ""
    shares = sorted(((v, k) for k, v in diagnosis.breakdown.items() if k != "compute" and v >= 0.005), reverse=True)
    parts = [f"{NAMES.get(k, k)} {v:.0%}" for v, k in shares[:SHOWN]]
    text = ""
    if parts:
        text = f"{parts[0].rsplit(' ', 1)[0]} is {parts[0].rsplit(' ', 1)[1]} of the step"
        text += "".join(f", {p}" for p in parts[1:])
    if diagnosis.mem_headroom_frac is not None:
        mem = f"memory has {diagnosis.mem_headroom_frac:.0%} headroom"
        text = f"{text} and {mem}" if text else mem
    return text


def prediction(move: str, diagnosis: Diagnosis | None, score: Score | None) -> Prediction:
    """The record a proposal carries: the move, what it saw and the score's predicted gain with its basis."""
    if score is None:
        return Prediction(move=move, saw=saw(diagnosis))
    gain = 1.0 / (1.0 - score.saving) - 1.0 if score.saving < 1.0 else None
    if score.model_saving is None:
        basis = PRIOR_BASIS[score.prior_basis].format(cost=NAMES.get(score.aimed_at, score.aimed_at))
    else:
        basis = f"the cost model weighted {score.credibility:.2f} by how it reproduced the kept steps, the diagnosis the rest"
    return Prediction(move=move, saw=saw(diagnosis), gain=gain, basis=basis)
