"""The ports of the one executor (:mod:`bot.drive.executor`): the protocols each place a campaign runs implements.

Where a campaign runs (a terminal, a GitHub workflow run) changes only these:

| port | local (:mod:`bot.drive.local_ports`) | GitHub (:mod:`bot.github.github_ports`) |
|---|---|---|
| state store | ``state.json`` under the work dir (atomic write) | the bot's state comment on the issue |
| record store | files under the work dir | files on the branch ``attune/<campaign>/records`` |
| run port | runs the recipe now and returns its record | dispatches ``trial.yml`` and suspends |
| forge | git branches (``LocalForge``) or memory | pull requests (``GitHubForge``) |

A record store names a run by its key (``baseline-2``, ``step-3-trial``, ``step-3-incumbent``) and answers a
reference string for it that the campaign keeps (``RunRef.record``); policies and reports read records through
the store, never through a path.
"""

from __future__ import annotations

from typing import Protocol

from pydantic import BaseModel

from bot import campaign as cm
from bot.core.records import RunRecord
from bot.runner import EarlyStop


class StateStore(Protocol):
    def load(self, cid: str) -> cm.Campaign | None:
        """The stored state of campaign ``cid``, or None."""

    def save(self, state: cm.Campaign) -> None:
        """Persist ``state`` (after every transition)."""


class RecordStore(Protocol):
    def read(self, ref: str) -> RunRecord | None:
        """The record behind a reference this store answered (None: no such record)."""

    def read_text(self, ref: str) -> str | None:
        """The stored text behind a reference (None: none)."""

    def find_run(self, cid: str, key: str) -> tuple[RunRecord, str] | None:
        """A run already recorded under ``key`` (and its reference): a resumed executor never repeats it."""

    def put_run(self, cid: str, key: str, record: RunRecord) -> str:
        """Store a run's record under ``key``; answers its reference. Idempotent."""

    def get(self, cid: str, name: str) -> str | None:
        """A campaign file (``baseline-recipe.yaml``, ``calibration.json``), or None."""

    def put(self, cid: str, name: str, text: str) -> str:
        """Write a campaign file; answers its reference. Idempotent."""


class RunRequest(BaseModel):
    """One run the campaign asks for: what to run and the limits it runs under."""

    key: str  # run key: baseline-2, step-3-trial, step-3-pair2-incumbent, step-3-pair2-candidate
    kind: str  # baseline, trial, pair-incumbent, pair-candidate
    n: int = 0
    attempt: int = 1
    recipe_text: str
    max_wall_s: float  # the hard budget cap: what is left of the budget, in wall seconds on the recipe's devices
    early_stop: EarlyStop | None = None
    steps: int | None = None  # a run that is only measured stops after this many steps (None: the recipe's bench.steps)


def budget_cap_s(state: cm.Campaign, devices: int, already: float = 0.0) -> float:
    """The hard budget cap of the next run(s): what is left of the budget (less ``already``, device-hours the action
    spent before), in wall seconds on ``devices`` devices."""
    return max(0.0, state.budget - state.spent - already) * 3600.0 / max(devices, 1)


class RunPort(Protocol):
    def run(self, state: cm.Campaign, request: RunRequest) -> RunRecord | None:
        """Run now and answer the record, or start the run elsewhere and answer None (suspended: its result comes
        back later as an event fed to the executor)."""

    def calibrate(self, state: cm.Campaign, recipe_text: str, reference: RunRecord | None) -> cm.Calibrated | None:
        """The gate's loss band for this campaign's baseline, or None (suspended, as for ``run``)."""
