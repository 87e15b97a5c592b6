"""The ``attune`` command: one module per command group, registered here in the order ``--help`` shows them.

| group | module |
|---|---|
| ``run`` | :mod:`.run` |
| ``recipe show/set`` | :mod:`.recipe` |
| ``gate`` | :mod:`.gate` |
| ``campaign run/list/show/resume/stop``, ``demo`` | :mod:`.campaign` |
| ``leaderboard`` | :mod:`.leaderboard` |
| ``lessons list/show`` | :mod:`.lessons` |
| ``bench gate/tuners`` | :mod:`.bench` |
| ``sim calibrate`` | :mod:`.sim` |
| ``doctor`` | :mod:`.doctor` |
| ``github handle/check-trial/calibrate`` | :mod:`.github` |

Every handler returns an exit code. User mistakes (a bad recipe, an unknown lever, a refused value, a missing file,
a recipe outside a git repository) print one line on stderr and exit 2 — never a traceback. With ``--json`` the
last stdout line is one JSON object. Shared pieces (exit codes, ``UsageError``, JSON output) are in :mod:`.common`.
"""

from __future__ import annotations

import argparse
import os
import sys

from bot.cli import bench, campaign, doctor, gate, github, leaderboard, lessons, recipe, run, sim
from bot.cli.common import EXIT_FAILED, EXIT_OK, EXIT_REJECT, EXIT_USAGE, UsageError, emit_json

__all__ = ["EXIT_FAILED", "EXIT_OK", "EXIT_REJECT", "EXIT_USAGE", "UsageError", "build_parser", "emit_json", "main"]

GROUPS = (run, recipe, gate, campaign, leaderboard, lessons, bench, sim, doctor, github)


class Parser(argparse.ArgumentParser):
    """argparse with usage errors on one line, like every other user error (exit 2)."""

    def error(self, message: str) -> None:  # type: ignore[override]
        self.exit(2, f"{self.prog}: {message} (see `{self.prog} --help`)\n")


def build_parser() -> argparse.ArgumentParser:
    p = Parser(
        prog="attune",
        description="Tune a torchtitan recipe for throughput, one lever at a time, behind a correctness gate.",
    )
    sub = p.add_subparsers(dest="command", required=True)
    for group in GROUPS:
        group.register(sub)
    return p


def quiet_library_notices() -> None:
    """torch logs a deprecation notice for every Enum torchao registers with pytree when torchtitan's float8/MXFP8
    components import it (a library matter, not the user's): a command's stderr stays its own one-line errors."""
    import logging

    logging.getLogger("torch.utils._pytree").setLevel(logging.ERROR)


def main(argv: list[str] | None = None) -> int:
    from bot.agent.lessons import LessonFileError
    from bot.core.recipe import RecipeError
    from bot.core.repo import RepoError

    quiet_library_notices()
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except (RecipeError, RepoError, UsageError, LessonFileError) as exc:
        print(f"attune: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except FileNotFoundError as exc:
        print(f"attune: {exc.filename}: no such file", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        print("attune: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        return _reader_gone()


EXIT_SIGPIPE = 141  # 128 + SIGPIPE: what a shell reports for a writer whose reader went away


def _reader_gone() -> int:
    """stdout's reader went away (``attune recipe show R | head``): stop quietly, as Unix tools do, not with a
    traceback. stdout is pointed at /dev/null so the interpreter's flush at exit cannot fail again (the recipe of
    https://docs.python.org/3/library/signal.html#note-on-sigpipe)."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    return EXIT_SIGPIPE


if __name__ == "__main__":
    sys.exit(main())
