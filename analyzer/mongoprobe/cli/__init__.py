"""mongoprobe command line: ``main()`` and the parser, assembled from one module per
command family.

    target.py    target start|stop|status          the embedded FerretDB
    latency.py   latency, snoop                    server-side request latency, live
    profile.py   profile, flush, syscount, threads where a server's time goes
    stacks.py    fold, flamegraph, heatmap,        stack profiles: folded lines, SVG,
                 categories, top                   heat maps, shares
    run.py       load, record, phases, report      the built-in load and recorded runs
    compare.py   compare, series                   runs side by side, recorded series
    pcap.py      capture, pcap                     packet captures
    parse.py     parse, quantize                   any foreign format

Each module has ``register(subparsers)`` and one ``cmd_<name>(args)`` per command,
which maps the arguments to calls of the modules that do the work and prints what
they return: data on stdout, diagnostics on stderr. A command that cannot do what was
asked raises :class:`CommandError`; ``main`` prints it as one line, ``mongoprobe:
...``, and exits non-zero. Importing the families is cheap (pandas, the probes and the
parsers are imported inside the commands), so ``--help`` starts fast.
"""

from __future__ import annotations

import argparse
import sys

from . import compare, latency, parse, pcap, profile, run, stacks, target
from .common import CommandError

__all__ = ["CommandError", "build_parser", "main"]

FAMILIES = (target, latency, profile, stacks, run, compare, pcap, parse)

EXAMPLES = """examples:
  mongoprobe target start                 # start the embedded FerretDB, print pid/uri
  mongoprobe latency -p 4127              # histograms per command until Ctrl-C
  mongoprobe record --target embedded -o runs/r1 -- mongoprobe load --phases 10i.1q:60s
  mongoprobe phases RUN --json

Each command's --help has its options and examples.
"""


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="mongoprobe", formatter_class=argparse.RawDescriptionHelpFormatter,
        description="Active benchmarking of MongoDB-protocol servers.", epilog=EXAMPLES)
    sub = p.add_subparsers(dest="cmd", required=True, metavar="COMMAND")
    for family in FAMILIES:
        family.register(sub)
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.func(args) or 0
    except CommandError as e:
        print(f"mongoprobe: {e}", file=sys.stderr, flush=True)
        return e.status
    except BrokenPipeError:
        return 0
