"""The gate's one input-error type.

``GateInputError`` means the gate could not judge: a baseline that does not resolve or did not
run to the end, a run record of a different recipe, a noise band that does not cover the
comparison. It is never a verdict on the candidate (``attune gate`` exits 2 on it, not 1).
"""

from __future__ import annotations


class GateInputError(ValueError):
    """The gate's inputs are unusable; the message names the input and what was expected."""
