"""Fixtures for tests against GitHub's contract: the spec (once per session) and a fresh fake per test."""

from __future__ import annotations

import os
import time
from typing import TYPE_CHECKING

import pytest
from forge_helpers import TOKEN, set_one_lever

from bot.forge.github import GitHubForge

if TYPE_CHECKING:  # the fake needs test-only packages; the modules that use it import them via require()
    from fake_github import FakeGitHub
    from openapi_contract import Contract


@pytest.fixture(scope="session")
def github_contract() -> Contract:
    """GitHub's REST description, loaded once per session; skipped (failed under CI) when not installed."""
    from openapi_contract import Contract, spec_missing_reason

    reason = spec_missing_reason()
    if reason is not None:
        if os.environ.get("CI"):
            pytest.fail(f"CI must run the GitHub contract tests: {reason}")
        pytest.skip(reason)
    started = time.perf_counter()
    contract = Contract()
    print(f"\n@octokit/openapi {contract.version}: loaded in {time.perf_counter() - started:.2f}s")
    return contract


@pytest.fixture
def fake_github(github_contract: Contract):
    """A fresh fake repository ``acme/tuning`` on api.github.com; the test fails if the contract was broken."""
    from fake_github import FakeGitHub

    fake = FakeGitHub(github_contract).start()
    try:
        yield fake
    finally:
        fake.stop()
    fake.assert_contract_kept()


@pytest.fixture
def forge(fake_github: FakeGitHub) -> GitHubForge:
    """A GitHubForge on the fake, with PyGithub's throttling and retries off."""
    return GitHubForge(
        fake_github.full_name,
        TOKEN,
        seconds_between_requests=None,
        seconds_between_writes=None,
        retry=None,
        bot_login=fake_github.actor,
        edit_recipe=set_one_lever,
    )
