"""``attune sim calibrate``: the simulator against published measurements (SIMULATED numbers)."""

from __future__ import annotations

import argparse
from typing import Any

from bot.cli.common import EXIT_OK, emit_json


def cmd_sim_calibrate(args: argparse.Namespace) -> int:
    from bot.sim.calibration import calibrate, render_calibration

    report = calibrate()
    if args.json:  # one JSON object on stdout, as every --json: no table before it
        emit_json(
            {
                "simulated": True,
                **report.model_dump(exclude={"rows"}),
                "rows": len(report.rows),
                "row_errors": [r.model_dump() for r in report.rows],
            }
        )
    else:
        print(render_calibration(report))
    return EXIT_OK


def register(sub: Any) -> None:
    sim = sub.add_parser("sim", help="the cluster simulator").add_subparsers(dest="sim_cmd", required=True)
    sc = sim.add_parser("calibrate", help="the simulator against published measurements")
    sc.add_argument("--json", action="store_true")
    sc.set_defaults(func=cmd_sim_calibrate)
