"""Shared fixtures of the GitHub event scenarios: the OpenAPI contract every fake request and response is checked against."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "forge"))
from openapi_contract import Contract, spec_missing_reason  # noqa: E402


@pytest.fixture(scope="module")
def contract() -> Contract:
    reason = spec_missing_reason()
    if reason:
        pytest.skip(reason)
    return Contract()
