"""Shared values for the forge tests (kept out of conftest.py so test modules can import them by a unique name)."""

from __future__ import annotations

TOKEN = "ghs_test_token_not_a_secret"


def set_one_lever(text: str, lever: str, value: str, *, source: str = "<recipe>") -> str:
    """A stand-in for ``bot.core.recipe.set_lever_text`` in forge tests: replaces the line ``  <lever>: <old>``.

    The forge's GitHub behaviour is what these tests check; the recipe edit itself is bot.core.recipe's.
    """
    lines = text.splitlines(keepends=True)
    for i, line in enumerate(lines):
        key, sep, _ = line.strip().partition(":")
        if sep and key == lever and line.startswith("  "):
            if value.strip() != value or not value or "\n" in value:
                raise ValueError(f"{source}: bad value for {lever}: {value!r}")
            lines[i] = f"  {lever}: {value}\n"
            return "".join(lines)
    raise ValueError(f"{source}: no lever {lever}")


def require(*modules: str) -> None:
    """Import the test-only packages the GitHub contract tests need; skip the module locally when one is missing,
    but fail under CI (``CI`` set), where they must be installed and these tests must run."""
    import importlib
    import os

    import pytest

    for name in modules:
        try:
            importlib.import_module(name)
        except ImportError as exc:
            message = f"{name} is not installed ({exc}); install the test extras (responses, openapi-core)"
            if os.environ.get("CI"):
                raise ImportError(message) from exc
            pytest.skip(message, allow_module_level=True)
