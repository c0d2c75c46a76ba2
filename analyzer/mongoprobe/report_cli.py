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


def cmd_phases(args: argparse.Namespace) -> int:
    from . import phases
    run = _run(args.run)
    if args.json:
        print(json.dumps(phases.phase_json(run)))
    else:
        print(phases.render(phases.phase_table(run)), end="")
    return 0


def cmd_report(args: argparse.Namespace) -> int:
    from . import report
    run = _run(args.run)
    out = report.write(run, args.output, tuple(args.diff) if args.diff else None)
    print(out)
    return 0


def register(sub) -> None:
    p = sub.add_parser("phases", help="per-phase table of a recorded run",
                       formatter_class=argparse.RawDescriptionHelpFormatter,
                       epilog="examples:\n  mongoprobe phases RUN\n  mongoprobe phases RUN --json\n")
    p.add_argument("run", metavar="RUN")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_phases)
    r = sub.add_parser("report", help="one self-contained HTML report of a recorded run",
                       formatter_class=argparse.RawDescriptionHelpFormatter,
                       epilog="examples:\n  mongoprobe report RUN -o report.html\n"
                              "  mongoprobe report RUN --diff 10i.1q 0i.10q\n")
    r.add_argument("run", metavar="RUN")
    r.add_argument("-o", "--output", default="report.html")
    r.add_argument("--diff", nargs=2, metavar=("A", "B"),
                   help="also the differential flame graph of phase B against A")
    r.set_defaults(func=cmd_report)
