"""compare and series: runs side by side, and a series of runs recorded to compare."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from .common import RAW, CommandError, command_after, doc_line
from .run import reading

COMPARE_EXAMPLES = """examples:
  mongoprobe compare runs/a runs/b                      # one run a side: within-run noise
  mongoprobe compare A=runs/a1,runs/a2 B=runs/b1,runs/b2  # repeated runs are the samples
  mongoprobe compare runs/threads                       # a series folder, by its --vary key
  mongoprobe compare runs/a runs/b --col threads        # grouped and ordered by a label
  mongoprobe compare runs/a runs/b --json               # the README lists the keys
  mongoprobe compare runs/a runs/b --report cmp.html    # differences first, one file
  mongoprobe compare runs/pads --flamegraphs fg/        # per operation, and reversed
"""

SERIES_EXAMPLES = """examples:
  mongoprobe series -o runs/threads --repeat 4 --vary threads=1,2 --target embedded -- mongoprobe load --phases '{threads}i.0q:30s'
"""


def _groups(specs: list[str], col: str | None):
    """The groups of the command line: NAME=RUN[,RUN...] each, a series folder, or
    plain runs (each its own group, named by its folder; with --col, grouped by that
    label)."""
    from mongoprobe.analysis import run_compare
    from mongoprobe.run import series
    from mongoprobe.run.run_folder import load_run

    def load(path: str):
        try:
            return load_run(path)
        except (OSError, ValueError) as e:
            raise CommandError(f"{path}: not a readable run directory ({e})") from None

    if len(specs) == 1 and series.read(specs[0]) is not None:
        meta = series.read(specs[0])
        paths = [str(Path(specs[0]) / r) for r in meta["runs"]]
        return run_compare.by_label([load(p) for p in paths], paths, col or meta["key"])
    named = [s.partition("=") for s in specs]
    if all(eq and not Path(s).exists() for s, (_, eq, _) in zip(specs, named)):
        out = []
        for name, _, runs in named:
            paths = [p for p in runs.split(",") if p]
            out.append(run_compare.Group(name, [load(p) for p in paths], paths))
        return out
    if any(eq and not Path(s).exists() for s, (_, eq, _) in zip(specs, named)):
        raise CommandError("give groups as NAME=RUN[,RUN...] each, or runs alone, not both", 2)
    runs = [load(p) for p in specs]
    if col:
        try:
            return run_compare.by_label(runs, list(specs), col)
        except ValueError as e:
            raise CommandError(str(e)) from None
    names = [Path(p).name or p for p in specs]
    if len(set(names)) < len(names):
        names = list(specs)
    return [run_compare.Group(n, [r], [p]) for n, r, p in zip(names, runs, specs)]


def cmd_compare(args: argparse.Namespace) -> int:
    from mongoprobe.analysis import run_compare
    from mongoprobe.views import comparison

    if args.block <= 0:
        raise CommandError("--block must be positive", 2)
    groups = _groups(args.runs, args.col)
    with reading(", ".join(args.runs)):
        try:
            c, stacks = run_compare.compare_with_stacks(groups, args.baseline, args.block,
                                                        args.min_change)
        except ValueError as e:
            raise CommandError(str(e)) from None
        if args.json:
            text = json.dumps(c) + "\n"
        elif args.csv:
            text = comparison.to_csv(c)
        else:
            text = comparison.render(c)
        graphs = _flamegraphs(stacks, c, args) if args.report or args.flamegraphs else []
        if args.report:
            Path(args.report).write_text(comparison.html_report(c, graphs))
    print(text, end="")
    if args.flamegraphs:
        n = sum("svg" in g for g in graphs)
        print(f"mongoprobe compare: {n} differential flame graphs written to "
              f"{args.flamegraphs}", file=sys.stderr)
    if args.report:
        print(f"mongoprobe compare: report written to {args.report}", file=sys.stderr)
    return 0


def _flamegraphs(stacks: dict, c: dict, args: argparse.Namespace) -> list[dict]:
    """The differential flame graphs of the comparison's ``stacks``
    (views.comparison.flamegraphs), written to --flamegraphs DIR when given; none when
    no run has a profile (an error only when --flamegraphs asked for them)."""
    from mongoprobe.views import comparison

    if not stacks:
        if args.flamegraphs:
            raise CommandError("no run has an on-CPU profile to draw: record with "
                               "--probes ...,profile")
        return []
    try:
        graphs = comparison.flamegraphs(c, stacks, args.flamegraph_scale)
    except ValueError as e:
        raise CommandError(str(e)) from None
    if args.flamegraphs:
        out = Path(args.flamegraphs)
        out.mkdir(parents=True, exist_ok=True)
        for g in graphs:
            if "svg" in g:
                (out / comparison.flamegraph_name(g, c["baseline"])).write_text(g["svg"])
            else:
                print(f"mongoprobe compare: {g['note']}", file=sys.stderr)
    return graphs


def cmd_series(args: argparse.Namespace) -> int:
    from mongoprobe.run import series

    command = command_after(args.command, "series")
    target = (["--target", "embedded"] if args.target else ["-p", str(args.pid)])
    extra = ["--probes", args.probes] if args.probes else []
    extra += ["--events"] if args.events else []
    try:
        key, values = series.parse_vary(args.vary)
        s = series.Series(Path(args.output), key, values, args.repeat, command,
                          [*target, *extra])
        runs = series.record(s)
    except series.SeriesError as e:
        raise CommandError(str(e)) from None
    print(f"mongoprobe series: {len(runs)} runs in {args.output}: mongoprobe compare "
          f"{args.output}", file=sys.stderr)
    return 0


def register(sub) -> None:
    p = sub.add_parser("compare", help="runs side by side: each phase against the baseline's",
                       description=doc_line("mongoprobe.analysis.run_compare"),
                       formatter_class=RAW, epilog=COMPARE_EXAMPLES)
    p.add_argument("runs", nargs="+", metavar="RUN|NAME=RUN[,RUN...]|SERIES")
    p.add_argument("--baseline", metavar="NAME", help="the group the others are compared "
                                                      "with (default: the first)")
    p.add_argument("--col", metavar="KEY", help="group and order the runs by this label "
                                                "(numeric order where they are numbers)")
    p.add_argument("--block", type=float, default=1.0, metavar="SEC",
                   help="with one run a side: the seconds of each block, the samples (1)")
    p.add_argument("--min-change", type=float, metavar="PCT",
                   help="a significant change smaller than PCT percent is marked small")
    out = p.add_mutually_exclusive_group()
    out.add_argument("--json", action="store_true")
    out.add_argument("--csv", action="store_true")
    p.add_argument("--report", metavar="FILE.html", help="also one self-contained HTML file "
                   "(with the flame graphs of the runs that have an on-CPU profile)")
    p.add_argument("--flamegraphs", metavar="DIR", help="write each matched phase's "
                   "differential flame graphs, each group against the baseline and "
                   "reversed, to DIR")
    p.add_argument("--flamegraph-scale", choices=["op", "samples", "none"], default="op",
                   help="a differential graph's first side scaled per operation (op, the "
                        "default: red is more CPU per operation), to the second's samples "
                        "(difffolded -n), or not")
    p.set_defaults(func=cmd_compare)

    s = sub.add_parser("series", help="record a command once per value and repetition, "
                       "interleaved and labelled", description=doc_line("mongoprobe.run.series"),
                       formatter_class=RAW, epilog=SERIES_EXAMPLES)
    s.add_argument("-o", "--output", required=True, metavar="DIR")
    s.add_argument("--repeat", type=int, default=1, metavar="N")
    s.add_argument("--vary", required=True, metavar="KEY=V1,V2[,...]")
    g = s.add_mutually_exclusive_group(required=True)
    g.add_argument("--target", choices=["embedded"])
    g.add_argument("-p", "--pid", type=int)
    s.add_argument("--probes", metavar="LIST", help="record's --probes")
    s.add_argument("--events", action="store_true", help="record's --events")
    s.add_argument("command", nargs=argparse.REMAINDER, metavar="-- COMMAND... {KEY} ...")
    s.set_defaults(func=cmd_series)
