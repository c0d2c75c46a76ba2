"""mongoprobe phases RUN and mongoprobe report RUN."""

from __future__ import annotations

import argparse
import json
import sys


def _run(path: str):
    from .rundir import load_run
    try:
        return load_run(path)
    except (OSError, ValueError) as e:
        print(f"mongoprobe: {path}: not a readable run directory ({e})", file=sys.stderr)
        sys.exit(1)


def _die(msg: str) -> int:
    print(f"mongoprobe: {msg}", file=sys.stderr)
    return 1


def _phases(run, args: argparse.Namespace):
    """The --phases override as a (name, start, end) table, or None."""
    from . import phases
    if not args.phases:
        return None
    return phases.parse_phases(args.phases, float(run.manifest.get("start") or 0.0))


def cmd_phases(args: argparse.Namespace) -> int:
    from . import phases
    run = _run(args.run)
    try:
        override = _phases(run, args)
    except phases.PhaseError as e:
        return _die(str(e))
    if args.json:
        print(json.dumps(phases.phase_json(run, override)))
    else:
        print(phases.render(phases.phase_table(run, override), phases.tool_json(run),
                            run.lost), end="")
    return 0


def cmd_report(args: argparse.Namespace) -> int:
    from . import phases, report
    run = _run(args.run)
    try:
        override = _phases(run, args)
        out = report.write(run, args.output, tuple(args.diff) if args.diff else None,
                           override)
    except phases.PhaseError as e:
        return _die(str(e))
    print(out)
    return 0


def register(sub) -> None:
    p = sub.add_parser("phases", help="per-phase table of a recorded run",
                       description="Per phase: the load tool's throughput (ops, inserts, "
                       "queries; per operation), costs per operation, server latency per "
                       "command, and the tool's client latency beside the server's. "
                       "Phases come from the tool's output (YCSB, iibench, the built-in "
                       "load, '### phase' markers), else from the server's traffic.",
                       formatter_class=argparse.RawDescriptionHelpFormatter,
                       epilog=PHASES_EXAMPLES)
    p.add_argument("run", metavar="RUN")
    p.add_argument("--json", action="store_true")
    p.add_argument("--phases", metavar="NAME=START..END,...", help=PHASES_HELP)
    p.set_defaults(func=cmd_phases)
    r = sub.add_parser("report", help="one self-contained HTML report of a recorded run",
                       formatter_class=argparse.RawDescriptionHelpFormatter,
                       epilog="examples:\n  mongoprobe report RUN -o report.html\n"
                              "  mongoprobe report RUN --diff 10i.1q 0i.10q\n"
                              "  mongoprobe report RUN --phases warm=0..30,steady=30..90\n")
    r.add_argument("run", metavar="RUN")
    r.add_argument("-o", "--output", default="report.html")
    r.add_argument("--diff", nargs=2, metavar=("A", "B"),
                   help="also the differential flame graph of phase B against A")
    r.add_argument("--phases", metavar="NAME=START..END,...", help=PHASES_HELP)
    r.set_defaults(func=cmd_report)


PHASES_HELP = ("phases to use instead of the tool's: seconds from the recording's start "
               "(or epoch seconds)")
PHASES_EXAMPLES = """examples:
  mongoprobe phases RUN
  mongoprobe phases RUN --json
  mongoprobe phases RUN --phases warm=0..30,steady=30..90
"""
