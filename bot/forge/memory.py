"""An in-memory forge for simulated campaigns (``--forge none``): steps without a repository.

Simulated campaigns (``attune bench tuners``) run hundreds of steps; their records are labelled
simulated and never land in ``results/``, so they need no git history. The recipe text of each
step is still produced by the same one-line edit as on a real forge.
"""

from __future__ import annotations

from bot.core.recipe import set_lever_text
from bot.forge.base import StatusState, StepRef, StepRequest, step_branch


class MemoryForge:
    def __init__(self, files: dict[str, str]) -> None:
        self.refs: dict[str, dict[str, str]] = {"main": dict(files)}
        self.steps: dict[tuple[str, int], StepRef] = {}
        self.comments: dict[tuple[str, str], str] = {}
        self.statuses: dict[str, tuple[str, str]] = {}

    def find_step(self, campaign: str, n: int) -> StepRef | None:
        return self.steps.get((campaign, n))

    def open_step(self, req: StepRequest, *, base_ref: str | None = None) -> StepRef:
        if (req.campaign, req.n) in self.steps:
            return self.steps[(req.campaign, req.n)]
        branch = step_branch(req.campaign, req.n, req.lever)
        files = dict(self.refs[base_ref or "main"])
        files[req.recipe_path] = set_lever_text(files[req.recipe_path], req.lever, req.value, source=req.recipe_path)
        self.refs[branch] = files
        ref = StepRef(campaign=req.campaign, n=req.n, branch=branch, head_sha=f"{branch}@1")
        self.steps[(req.campaign, req.n)] = ref
        return ref

    def add_files(self, step: StepRef, files: dict[str, str], message: str) -> StepRef:
        self.refs[step.branch].update(files)
        n = int(step.head_sha.rsplit("@", 1)[1]) + 1
        ref = step.model_copy(update={"head_sha": f"{step.branch}@{n}"})
        self.steps[(step.campaign, step.n)] = ref
        return ref

    def upsert_comment(self, target: int | StepRef, marker: str, body: str) -> None:
        key = target.branch if isinstance(target, StepRef) else str(target)
        self.comments[(key, marker)] = body

    def set_status(self, step: StepRef, state: StatusState, description: str) -> None:
        self.statuses[step.head_sha] = (state, description)

    def merge(self, step: StepRef, message: str) -> StepRef:
        self.refs["main"] = {
            **self.refs["main"],
            **self.refs[step.branch],
        }  # a merge keeps what landed on the base meanwhile
        ref = step.model_copy(update={"state": "merged"})
        self.steps[(step.campaign, step.n)] = ref
        return ref

    def close(self, step: StepRef, reason: str) -> StepRef:
        ref = step.model_copy(update={"state": "closed"})
        self.steps[(step.campaign, step.n)] = ref
        return ref

    def read_file(self, path: str, ref: str | None = None) -> str:
        return self.refs[ref or "main"][path]
