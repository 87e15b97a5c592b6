"""Model facts: what ATTUNE knows about a workload's model, derived from the torchtitan model itself.

Registry at the face: :func:`model_facts` (resolve, build on the meta device, derive, cache), :class:`ModelFacts`,
:class:`ModelSpec` (the structure every consumer reads), :class:`FactsError`.
"""

from bot.facts.build import FactsError, ModelFacts, model_facts
from bot.facts.spec import ModelSpec

__all__ = ["FactsError", "ModelFacts", "ModelSpec", "model_facts"]
