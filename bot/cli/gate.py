"""``attune gate``: the correctness gate — is CANDIDATE still training what BASELINE trains?"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from bot.cli.common import EXIT_OK, UsageError, emit_json


def cmd_gate(args: argparse.Namespace) -> int:
    from gate.api import render_verdict, run_gate
    from gate.errors import GateInputError

    for p in (args.baseline, args.candidate, args.baseline_run, args.candidate_run):
        if p and not Path(p).exists():
            raise UsageError(f"{p}: no such file")
    if args.precision_tolerance is not None and not 0 < args.precision_tolerance < 1:
        raise UsageError(
            f"--precision-tolerance: expected a relative tolerance between 0 and 1 (e.g. 0.01); got {args.precision_tolerance}"
        )
    if args.jobs < 1:
        raise UsageError(f"--jobs: expected at least 1; got {args.jobs}")
    if args.steps < 1:
        raise UsageError(f"--steps: expected the number of steps to compare, 1 or more; got {args.steps}")
    try:
        verdict = run_gate(
            args.baseline,
            args.candidate,
            config_only=args.config_only,
            baseline_run=args.baseline_run,
            candidate_run=args.candidate_run,
            steps=args.steps,
            precision_tolerance=args.precision_tolerance,
            jobs=args.jobs,
        )
    except GateInputError as exc:  # the inputs cannot be gated (not a verdict on the candidate)
        raise UsageError(str(exc)) from None
    if args.json:
        print(render_verdict(verdict), file=__import__("sys").stderr)
        emit_json(
            {
                "verdict": verdict.verdict,
                "stage": verdict.stage,
                "tier": verdict.tier,
                "reasons": verdict.reasons,
                "requires_convergence": verdict.requires_convergence,
                "precision_change": verdict.precision_change,
            }
        )
    else:
        print(render_verdict(verdict))
    return EXIT_OK if verdict.ok else 1


def register(sub: Any) -> None:
    g = sub.add_parser("gate", help="the correctness gate: is CANDIDATE still training what BASELINE trains?")
    g.add_argument("baseline")
    g.add_argument("candidate")
    g.add_argument("--config-only", action="store_true")
    g.add_argument("--baseline-run")
    g.add_argument("--candidate-run")
    g.add_argument("--steps", type=int, default=20)
    g.add_argument(
        "--precision-tolerance",
        type=float,
        default=None,
        help="accept a precision change whose loss stays within this relative tolerance (e.g. 0.01); default: reject",
    )
    g.add_argument("--jobs", type=int, default=1, help="calibration runs at a time")
    g.add_argument("--json", action="store_true")
    g.set_defaults(func=cmd_gate)
