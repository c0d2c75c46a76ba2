"""``mongoprobe parse`` and ``mongoprobe quantize``: any foreign format, as a table or
as DTrace-style histograms.

``register(subparsers)`` adds them to ``mongoprobe``. Importing this is cheap:
the format names come from ``formats.registry`` (which imports no parser), pandas and the
parsers are imported when a subcommand runs.

    mongoprobe parse FORMAT FILE [--json|--csv] [--tz ZONE]
    mongoprobe quantize FILE [--format F] [--column C] [--unit ns|us|ms] [--by C]
"""

from __future__ import annotations

import argparse
import sys

from ..formats import registry
from .common import RAW, CommandError

PARSE_EXAMPLES = """examples:
  mongoprobe parse auto samples/sysstat/iostat-x-1-3.txt       # detect, print a table
  mongoprobe parse ycsb samples/ycsb/ycsb-0.17-load.status.txt --csv
  mongoprobe parse ycsb-summary samples/ycsb/ycsb-0.17-workloada-run.summary.txt --json
  mongoprobe parse iostat-totals samples/sysstat/iostat-xt-iso-2dev.txt --json
  mongoprobe parse iibench samples/iibench/iibench-mongo-1i-1q-30k.stdout.txt
  mongoprobe parse auto RUN/load.out              # what record kept of a load tool's output
  mongoprobe parse vmstat samples/sysstat/vmstat-t-1.txt --tz UTC
  vmstat -t 1 5 | mongoprobe parse vmstat - --csv             # FILE - reads stdin

formats:
""" + "\n".join(f"  {f.name:22} {f.what}" for f in registry.FORMATS) + """
  auto                   the first of the above (in this order) that accepts and reads
                         FILE; when none does, each one tried and why it refused

FILE may be a run's load.out (what record kept of the command's stdout and stderr):
the stamps are taken off and both streams read in the order they were printed.
"""

QUANTIZE_EXAMPLES = """examples:
  mongoprobe quantize samples/ycsb/ycsb-0.17-load.status.txt          # p99_us per op
  mongoprobe quantize samples/ycsb/ycsb-0.17-load.status.txt -c avg_us --unit ms
  mongoprobe quantize events.jsonl --unit us       # latency_ns of --events, per command
  mongoprobe quantize samples/quantize/dtrace-mongo_time-run.txt  # re-render histograms

Values are converted to --unit (default: the column's own, from its name: _ns, _us,
_ms, _s) and truncated to integers, then counted in log2 buckets as DTrace quantize()
does. NaN values (an interval without that operation) are left out. Printed histograms
(the quantize format) are rendered again as they are; bcc's first bucket [0, 2) is not
a DTrace one and is refused.
"""

_UNITS = {"ns": 1.0, "us": 1e3, "ms": 1e6, "s": 1e9}
_WORDS = {"ns": "nsecs", "us": "usecs", "ms": "msecs", "s": "secs"}


def _load(args: argparse.Namespace, fmt: str):
    """(DataFrame, format name) or raises; FILE '-' is stdin, a run's load.out is read
    without its stamps (formats/loadout.py)."""
    import io

    if args.file == "-":
        text, src = registry.read_text(io.StringIO(sys.stdin.read()), "<stdin>")
    else:
        with open(args.file, encoding="utf-8", errors="replace") as fh:
            text, src = registry.read_text(fh, args.file)
    if fmt == "auto":
        return registry.parse_auto(text, src, tz=getattr(args, "tz", None))
    df = registry.get(fmt).parse_text(io.StringIO(text), src, tz=getattr(args, "tz", None))
    return df, fmt


def _read(args: argparse.Namespace, fmt: str):
    """:func:`_load`, or CommandError naming the file and what is wrong."""
    from ..formats.errors import FormatError

    try:
        return _load(args, fmt)
    except (FormatError, OSError, ValueError) as e:
        raise CommandError(str(e)) from None


def cmd_parse(args: argparse.Namespace) -> int:
    from mongoprobe.views import text as views

    df, _ = _read(args, args.format)
    if args.json:
        sys.stdout.write(df.to_json(orient="records", double_precision=15) + "\n")
    elif args.csv:
        sys.stdout.write(df.to_csv(index=False, lineterminator="\n"))
    else:
        sys.stdout.write(views.frame_table(df) + "\n")
    return 0


def _unit_of(column: str) -> str | None:
    for u in ("ns", "us", "ms", "s"):
        if column.endswith("_" + u):
            return u
    return None


def _pick_column(df, spec) -> str | None:
    for c in spec.latency:
        if c in df.columns and df[c].notna().any():
            return c
    for c in df.columns:
        if c in ("time", "elapsed_s") or _unit_of(c) is None:
            continue
        if df[c].dtype.kind in "if" and df[c].notna().any():
            return c
    return None


def cmd_quantize(args: argparse.Namespace) -> int:
    import numpy as np

    from mongoprobe.views import text as views
    from mongoprobe.model.log2_histogram import from_values, render_quantize

    df, fmt = _read(args, args.format)
    if fmt == "quantize" and args.column is None:
        try:
            sys.stdout.write(views.quantize_printed(df))
        except ValueError as e:
            raise CommandError(f"{args.file}: {e}") from None
        return 0
    spec = registry.get(fmt)
    col = args.column or _pick_column(df, spec)
    if col is None or col not in df.columns:
        what = f"no column {col!r}" if col else "no latency column (a name ending _ns, _us, _ms)"
        raise CommandError(f"{args.file}: {what}; columns: {', '.join(map(str, df.columns))}")
    src_unit = _unit_of(col)
    unit = args.unit or src_unit
    if src_unit is None and args.unit is not None:
        raise CommandError(f"column {col!r} carries no unit in its name; leave out --unit")
    factor = _UNITS[src_unit] / _UNITS[unit] if src_unit and unit else 1.0
    by = spec.by if args.by is None else (None if args.by in ("", "none") else args.by)
    if by is not None and by not in df.columns:
        if args.by is not None:
            raise CommandError(f"{args.file}: no column {by!r} to group by")
        by = None
    try:
        vals = df[col].astype("float64")
    except (TypeError, ValueError):
        raise CommandError(f"column {col!r} is not numeric")
    groups = [(None, vals)] if by is None else [
        (k, vals[df[by] == k]) for k in dict.fromkeys(df[by].tolist())]
    word = _WORDS.get(unit or "", unit or "values")
    print(f"{col} in {word}" + (f", by {by}" if by else "") + f"  ({fmt}: {args.file})")
    shown = 0
    for key, v in groups:
        v = v[np.isfinite(v)]
        if v.empty:
            continue
        ints = np.floor(v.to_numpy() * factor).astype("int64")
        try:
            h = from_values(ints)
        except ValueError as e:
            raise CommandError(f"column {col!r}: {e}")
        head = f"{by} = {key}   " if by else ""
        print(f"{head}count {len(ints)}   min {ints.min():,}   max {ints.max():,}")
        print(render_quantize(h, title="", unit=None), end="")
        shown += 1
    if not shown:
        raise CommandError(f"{args.file}: column {col!r} has no values")
    return 0


def register(sub) -> None:
    fmts = list(registry.names()) + ["auto"]
    p = sub.add_parser("parse", help="any supported foreign format -> table, CSV or JSON",
                       description="Parse FILE as FORMAT and print the DataFrame: a table "
                       "(default; epoch-second times shown as UTC), --csv, or --json (an "
                       "array of records).",
                       formatter_class=RAW,
                       epilog=PARSE_EXAMPLES)  # fmt: skip
    p.add_argument("format", metavar="FORMAT", choices=fmts, help="a format name or auto")
    p.add_argument("file", metavar="FILE", help="input file, or - for stdin")
    out = p.add_mutually_exclusive_group()
    out.add_argument("--json", action="store_true", help="a JSON array of records")
    out.add_argument("--csv", action="store_true", help="CSV with a header line")
    p.add_argument("--tz", metavar="ZONE", help="zone of printed wall-clock times "
                   "(default: this machine's local zone), e.g. UTC")  # fmt: skip
    p.set_defaults(func=cmd_parse)

    q = sub.add_parser("quantize", help="a latency column as a DTrace-style log2 histogram",
                       description="Render a latency column of a parsed FILE as DTrace "
                       "quantize() histograms, one per group.",
                       formatter_class=RAW,
                       epilog=QUANTIZE_EXAMPLES)  # fmt: skip
    q.add_argument("file", metavar="FILE", help="input file, or - for stdin")
    q.add_argument("--format", "-f", default="auto", choices=fmts, metavar="FORMAT",
                   help="input format (default: auto)")
    q.add_argument("--column", "-c", metavar="C", help="column to render (default: the "
                   "format's latency column, e.g. p99_us for ycsb, latency_ns for events)")
    q.add_argument("--unit", choices=["ns", "us", "ms"], help="unit of the histogram values")
    q.add_argument("--by", metavar="C", help="column to group by (default: op for ycsb, "
                   "command for events; 'none' for one histogram)")
    q.add_argument("--tz", metavar="ZONE", help=argparse.SUPPRESS)
    q.set_defaults(func=cmd_quantize)
