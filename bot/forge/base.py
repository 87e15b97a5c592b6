"""The Forge protocol: the operations a campaign driver needs from wherever steps live.

Two implementations: ``local`` (real git only, the embedded default) and ``github`` (PyGithub).
A *step* is one pull request (GitHub) or one branch (local) that changes exactly one recipe line.
Every method is idempotent where the issue asks for it: ``find_step`` lets a resumed driver see a
step it opened before crashing, and ``upsert_comment`` edits the comment carrying ``marker`` in place.
"""

from __future__ import annotations

from typing import Literal, Protocol

from pydantic import BaseModel

StatusState = Literal["pending", "success", "failure", "error"]


class StepRequest(BaseModel):
    """What a driver asks a forge to open: one lever change on the recipe file."""

    campaign: str
    n: int
    recipe_path: str  # path of the recipe file inside the repository
    lever: str
    value: str  # the new value as the recipe would spell it (YAML scalar text)
    title: str
    body: str


class StepRef(BaseModel):
    """A step as the forge knows it."""

    campaign: str
    n: int
    branch: str
    head_sha: str
    number: int | None = None  # PR number on GitHub; None locally
    url: str = ""
    state: Literal["open", "merged", "closed"] = "open"


def step_branch(campaign: str, n: int, lever: str) -> str:
    """The branch name of a step: ``attune/<campaign>/<n>-<lever>`` (dots in lever names become dashes)."""
    safe = "".join(c if c.isalnum() or c in "-_" else "-" for c in lever)
    return f"attune/{campaign}/{n}-{safe}"


class Forge(Protocol):
    """Operations a campaign driver performs on a forge."""

    def find_step(self, campaign: str, n: int) -> StepRef | None:
        """The step ``n`` of ``campaign`` if it was already opened (any state), else None."""
        ...

    def open_step(self, req: StepRequest, *, base_ref: str | None = None) -> StepRef:
        """Create the step branch with a one-line commit, and open the PR.

        The branch starts from the base branch, or from ``base_ref`` — another step's branch of the same
        campaign — when the step is stacked on it (an out-of-memory layout retried with recomputation).
        """
        ...

    def add_files(self, step: StepRef, files: dict[str, str], message: str) -> StepRef:
        """Commit files (path -> text) on the step branch; returns the step with its new head sha."""
        ...

    def upsert_comment(self, target: int | StepRef, marker: str, body: str) -> None:
        """Create or edit in place the one comment carrying ``marker`` on an issue number or a step."""
        ...

    def set_status(self, step: StepRef, state: StatusState, description: str) -> None:
        """Set the ``attune/gate`` commit status on the step's measured head sha."""
        ...

    def merge(self, step: StepRef, message: str) -> StepRef:
        """Merge the step into the base branch, guarded by ``step.head_sha``."""
        ...

    def close(self, step: StepRef, reason: str) -> StepRef:
        """Close the step without merging, saying why; its branch and records stay."""
        ...

    def read_file(self, path: str, ref: str | None = None) -> str:
        """A file's text on ``ref`` (default: the base branch)."""
        ...
