"""``mongoprobe fold``, ``flamegraph``, ``heatmap``, ``categories``, ``top``: stack profiles.

``register(subparsers)`` adds them to ``mongoprobe``; one ``cmd_<name>(args)`` each. Inputs are stacks files (``perf script`` output, bpftrace
stack maps in text or ``-f json``, DTrace aggregated stacks, or folded stacks; the
format is detected unless ``--format`` says it) or ``-`` for stdin. Data goes to
stdout (or ``-o``), diagnostics to stderr; damaged input gives one line naming the
file and line, and exit status 1.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import IO

from .common import RAW, CommandError

FORMATS = ["perf", "bpftrace", "dtrace", "folded"]

FOLD_EXAMPLES = """examples:
  mongoprobe fold out.perf > out.folded            # perf script output, detected
  mongoprobe fold - < out.perf > out.folded        # stdin (perf script | mongoprobe fold -)
  mongoprobe fold profile.bt.txt --format bpftrace # bpftrace @[..., kstack, ustack] maps
  mongoprobe fold dtrace-ustack.txt                # DTrace @[ustack()] = count() output
"""

FLAMEGRAPH_EXAMPLES = """examples:
  mongoprobe flamegraph out.perf -o cpu.svg
  mongoprobe flamegraph out.perf --from 3254 --to 3257 -o first3s.svg
  mongoprobe flamegraph profile.bt.txt --phases phases.json --phase run -o run.svg
  mongoprobe flamegraph out.perf --diff 3254:3257 3257:3261 -o diff.svg
  mongoprobe flamegraph profile.bt.txt --phases phases.json --diff load run -o diff.svg
"""

FLAMEGRAPH_DESCRIPTION = """Draw stacks as an SVG flame graph (or a differential one, --diff),
coloured by frame category (flamegraphs/categories.toml). The renderer is inferno
(installed by scripts/setup.sh), or FLAMEGRAPH_DIR/flamegraph.pl when the environment
variable FLAMEGRAPH_DIR names a FlameGraph checkout."""

HEATMAP_EXAMPLES = """examples:
  mongoprobe heatmap out.perf -o cpu.png                      # CPU samples (default)
  mongoprobe heatmap events.jsonl --what latency -o lat.png   # latency --events output
  mongoprobe heatmap snoop.txt --what latency --stat count -o reqs.png
"""

CATEGORIES_EXAMPLES = """examples:
  mongoprobe categories out.perf                  # share of samples by category
  mongoprobe categories profile.bt.txt --phases phases.json --json
  mongoprobe categories out.perf --rules my-categories.toml
"""

TOP_EXAMPLES = """examples:
  mongoprobe top out.perf             # the 20 functions with the most self samples
  mongoprobe top profile.bt.txt -n 50 --json
"""


def _report_stats(stats: dict, meta: dict | None = None) -> None:
    """Samples the fold left out, once on stderr (as inferno's collapsers do)."""
    notes = []
    if stats.get("skipped_events"):
        notes.append(f"{stats['skipped_events']} samples of other events skipped "
                     "(only the first event type is folded)")
    if stats.get("empty"):
        notes.append(f"{stats['empty']} samples without a stack (bpftrace: stack map "
                     "collisions; perf: all frames dropped)")
    total = (meta or {}).get("scalars", {}).get("samples_total")
    if total is not None and stats.get("samples") is not None:
        lost = total - stats["samples"] - stats.get("empty", 0)
        if lost > 0:
            notes.append(f"{lost} samples lost before printing (@samples_total {total}: "
                         "raise BPFTRACE_MAP_KEYS_MAX)")
    for n in notes:
        print(f"mongoprobe: {n}", file=sys.stderr)


# --- fold ---------------------------------------------------------------------------------


def fold_to(path: str, fmt: str | None, out: IO) -> None:
    """Fold ``path`` into ``out`` as folded lines; what was left out, once on stderr."""
    from mongoprobe.model import stack_samples as stacks
    from ..formats.errors import FormatError

    stats: dict = {}
    meta: dict = {}
    try:
        counts = stacks.fold(path, fmt, stats, meta)
    except (FormatError, ValueError) as e:
        raise CommandError(str(e)) from None
    except OSError as e:
        raise CommandError(f"{path}: {e.strerror or e}") from None
    if not counts:
        raise CommandError(f"{path}: no stack samples found")
    stacks.write_folded(counts, out)
    out.flush()
    _report_stats(stats, meta)


def cmd_fold(args: argparse.Namespace) -> int:
    fold_to(args.file, args.format, sys.stdout)
    return 0


# --- flamegraph ----------------------------------------------------------------------------


def _run_dir(path: str):
    """A recorded run (a RUN directory with manifest.json), or None for a file."""
    if path != "-" and (Path(path) / "manifest.json").is_file():
        from mongoprobe.run.run_folder import load_run
        return load_run(path)
    return None


def _load(path: str, fmt: str | None, bucket: float | None = 1.0):
    from mongoprobe.analysis import run_profile
    from mongoprobe.model import stack_samples as stacks
    run = _run_dir(path)
    if run is not None:
        # the run's on-CPU profile, on the wall clock its phases use
        return run_profile.run_stacks(run, "offcpu" if fmt == "offcpu" else "profile", bucket)
    return stacks.load(path, fmt, bucket=bucket)


def _run_name(path: str) -> str:
    if path == "-":
        return "stdin"
    return Path(path).name if Path(path).is_dir() else Path(path).stem


def _phases_of(args):
    """--phases FILE, else the phases of a RUN directory given as input."""
    from mongoprobe.model.phase import phases_from
    if args.phases:
        return phases_from(args.phases)
    run = _run_dir(args.input)
    if run is not None and len(run.phases):
        return phases_from(run.phases)
    return None


def _range(spec: str) -> tuple[float, float]:
    try:
        a, b = spec.split(":")
        return float(a), float(b)
    except ValueError:
        raise ValueError(f"{spec!r}: expected a phase name (with --phases) or FROM:TO seconds")


def _slice_spec(df, spec: str, phases):
    """A phase name (from --phases) or FROM:TO -> (label, slice)."""
    from mongoprobe.model import stack_samples as stacks

    for p in phases or []:
        if p.name == spec:
            return p.name, stacks.slice_phase(df, p)
    if phases and ":" not in spec:
        raise ValueError(f"no phase {spec!r} in --phases (have: "
                         f"{', '.join(p.name for p in phases)})")
    a, b = _range(spec)
    return f"{a:g}-{b:g} s", stacks.slice_time(df, a, b)


def _pids(df, args) -> str | None:
    if getattr(args, "pid", None):
        return str(args.pid)
    pids = sorted({int(p) for p in df["pid"] if p >= 0})
    if not pids:
        pid = df.attrs.get("meta", {}).get("pid")
        return str(pid) if pid else None
    return ",".join(map(str, pids[:4])) + ("..." if len(pids) > 4 else "")


def flamegraph_to(path: str, fmt: str | None, out: Path, title: str, pid: str) -> None:
    """``path``'s stacks drawn into ``out`` as ``mongoprobe flamegraph`` draws them."""
    cmd_flamegraph(argparse.Namespace(
        input=path, format=fmt, output=str(out), title=title, pid=pid, phases=None,
        phase=None, diff=None, start=None, end=None, no_categories=False,
        no_normalize=False))


def cmd_flamegraph(args: argparse.Namespace) -> int:
    from mongoprobe.views import flamegraph
    from mongoprobe.model import stack_samples as stacks
    from ..formats.errors import FormatError

    try:
        df = _load(args.input, args.format)
        phases = _phases_of(args)
        run = _run_name(args.input)
        pid = _pids(df, args)
        unit = df.attrs.get("meta", {}).get("unit")
        countname = unit or ("samples" if df.attrs.get("format") != "perf" else "period")
        if args.diff:
            (la, a), (lb, b) = (_slice_spec(df, s, phases) for s in args.diff)
            title = args.title or flamegraph.title_for(run, phase=f"{la} -> {lb}", pid=pid,
                                                       diff=True)
            flamegraph.render_diff(stacks.folded(a), stacks.folded(b), args.output,
                                   title=title, countname=countname,
                                   normalize=not args.no_normalize)
            what = f"{int(a['count'].sum())} -> {int(b['count'].sum())} {unit or 'samples'}"
        else:
            label = None
            if args.phase:
                if not phases:
                    raise CommandError("--phase needs a RUN directory or --phases FILE "
                                       "(JSON or CSV: name,start,end)")
                label, df = _slice_spec(df, args.phase, phases)
            elif args.start is not None or args.end is not None:
                df = stacks.slice_time(df, args.start, args.end)
                label = f"{args.start if args.start is not None else ''}-" \
                        f"{args.end if args.end is not None else ''} s"
            title = args.title or flamegraph.title_for(run, phase=label, pid=pid)
            flamegraph.render(stacks.folded(df), args.output, title=title,
                              countname=countname, categories=not args.no_categories)
            what = f"{int(df['count'].sum())} {unit or 'samples'}"
    except (FormatError, ValueError, LookupError, flamegraph.RenderError) as e:
        raise CommandError(str(e)) from None
    except OSError as e:
        raise CommandError(f"{e.filename or args.input}: {e.strerror or e}") from None
    print(f"mongoprobe: wrote {args.output} ({what})", file=sys.stderr)
    return 0


# --- heatmap -------------------------------------------------------------------------------


def _events(path: str):
    """Wire events: a run's (record --events; its event source, read in batches
    however many), Parquet (read the same way) or JSON lines (latency --events FILE),
    or mongo_snoop.bt / mongo_snoop.d text."""
    from mongoprobe.model.event_store import ParquetEvents
    from ..formats import wire_events

    run = _run_dir(path)
    if run is not None:
        source = run.latencies.source if run.file("latency") is not None else None
        if source is None:
            raise LookupError(f"{path}: the run kept no per-request events (a sub-second "
                              "latency heat map needs them: record with --events)")
        return source
    if path.endswith(".parquet"):
        return ParquetEvents(path)
    text = sys.stdin.read() if path == "-" else Path(path).read_text()
    first = next((x for x in text.splitlines() if x.strip()), "")
    if first.startswith("{"):
        return wire_events.parse_events_json(text.splitlines(), path)
    return wire_events.parse_snoop(text.splitlines(), path)


def cmd_heatmap(args: argparse.Namespace) -> int:
    from mongoprobe.views import heatmap
    from ..formats.errors import FormatError

    run = _run_name(args.input)
    rd = _run_dir(args.input)
    # a run's heat maps count seconds from the recording's start, as its report does
    t0 = float(rd.manifest["start"]) if rd is not None and rd.manifest.get("start") else None
    try:
        if args.what == "latency":
            ev = _events(args.input)
            if not len(ev):
                raise CommandError(f"{args.input}: no request events")
            title = args.title or f"{run} - request latency ({args.stat}) - " \
                                  f"{len(ev)} requests"
            heatmap.latency_heatmap(ev, args.output, title=title, rows=args.rows,
                                    stat=args.stat, t0=t0)
        else:
            df = _load(args.input, args.format, bucket=None)
            if not len(df):
                raise CommandError(f"{args.input}: no stack samples found")
            pid = _pids(df, args)
            title = args.title or f"{run} - CPU samples" + (f" - pid {pid}" if pid else "")
            heatmap.cpu_heatmap(df, args.output, title=title, rows=args.rows, t0=t0)
    except (FormatError, ValueError, LookupError) as e:
        raise CommandError(str(e)) from None
    except OSError as e:
        raise CommandError(f"{e.filename or args.input}: {e.strerror or e}") from None
    print(f"mongoprobe: wrote {args.output}", file=sys.stderr)
    return 0


# --- categories and top -------------------------------------------------------------------


def _table(args: argparse.Namespace, make):
    """``make(stacks DataFrame)`` on FILE's stacks, or CommandError naming what is wrong."""
    from ..formats.errors import FormatError

    try:
        return make(_load(args.file, args.format))
    except (FormatError, ValueError) as e:
        raise CommandError(str(e)) from None
    except OSError as e:
        raise CommandError(f"{e.filename or args.file}: {e.strerror or e}") from None


def cmd_categories(args: argparse.Namespace) -> int:
    from mongoprobe.analysis import cpu_categories as categories
    from mongoprobe.model.phase import phases_from
    from mongoprobe.views import text as views

    def make(df):
        rules = categories.load_rules(args.rules) if args.rules else None
        phases = phases_from(args.phases) if args.phases else None
        return categories.category_table(df, phases, rules)

    t = _table(args, make)
    if args.json:
        print(json.dumps({"rules": str(args.rules or categories.categories_file()),
                          "categories": t.to_dict(orient="records")}))
    else:
        print(views.render_categories(t), end="")
    return 0


def cmd_top(args: argparse.Namespace) -> int:
    from mongoprobe.analysis import cpu_categories as categories
    from mongoprobe.views import text as views

    t = _table(args, lambda df: categories.top_functions(df, args.n))
    if args.json:
        print(json.dumps({"functions": t.to_dict(orient="records")}))
    else:
        print(views.render_top(t), end="")
    return 0


# --- registration -------------------------------------------------------------------------


def register(sub) -> None:
    def fmt(p):
        p.add_argument("--format", choices=FORMATS,
                       help="input format (detected when omitted)")

    p = sub.add_parser("fold", help="stacks -> folded lines on stdout",
                       formatter_class=RAW, epilog=FOLD_EXAMPLES,
                       description="Fold perf script, bpftrace or DTrace stacks into "
                       "'frame;frame;... count' lines (inferno-collapse-perf's output "
                       "for perf script input).")
    p.add_argument("file", help="stacks file, or - for stdin")
    fmt(p)
    p.set_defaults(func=cmd_fold)

    p = sub.add_parser("flamegraph", help="SVG flame graph (or differential) of stacks",
                       formatter_class=RAW, epilog=FLAMEGRAPH_EXAMPLES,
                       description=FLAMEGRAPH_DESCRIPTION)
    p.add_argument("input", help="stacks file (perf script, bpftrace, DTrace, folded) or -")
    fmt(p)
    g = p.add_mutually_exclusive_group()
    g.add_argument("--phase", metavar="NAME", help="only the samples of this phase")
    g.add_argument("--diff", nargs=2, metavar=("A", "B"),
                   help="differential graph from A to B: phase names or FROM:TO seconds")
    p.add_argument("--phases", metavar="FILE",
                   help="phases: JSON ({'phases': [{name, start, end}]}) or CSV")
    p.add_argument("--from", dest="start", type=float, metavar="S",
                   help="samples at or after S seconds (the input's time base)")
    p.add_argument("--to", dest="end", type=float, metavar="S", help="samples before S")
    p.add_argument("--title", help="title (default: input, phase, pid)")
    p.add_argument("--pid", type=int, help="pid to name in the title")
    p.add_argument("--no-categories", action="store_true",
                   help="hot palette only (no category colours)")
    p.add_argument("--no-normalize", action="store_true",
                   help="--diff: do not scale A to B's total")
    p.add_argument("-o", "--output", required=True, metavar="FILE.svg")
    p.set_defaults(func=cmd_flamegraph)

    p = sub.add_parser("heatmap", help="sub-second heat map PNG (CPU samples or latency)",
                       formatter_class=RAW, epilog=HEATMAP_EXAMPLES)
    p.add_argument("input", help="stacks file (cpu) or wire events file (latency), or -")
    p.add_argument("--what", choices=["cpu", "latency"], default="cpu")
    fmt(p)
    p.add_argument("--stat", choices=["max", "mean", "count", "sum"], default="max",
                   help="latency: colour by this per cell (default max)")
    p.add_argument("--rows", type=int, default=50, help="bands per second (default 50)")
    p.add_argument("--title")
    p.add_argument("--pid", type=int, help="pid to name in the title")
    p.add_argument("-o", "--output", required=True, metavar="FILE.png")
    p.set_defaults(func=cmd_heatmap)

    p = sub.add_parser("categories", help="share of samples by frame category",
                       formatter_class=RAW, epilog=CATEGORIES_EXAMPLES)
    p.add_argument("file", help="stacks file or -")
    fmt(p)
    p.add_argument("--phases", metavar="FILE", help="per phase (JSON or CSV name,start,end)")
    p.add_argument("--rules", metavar="FILE", help="category rules (default "
                   "flamegraphs/categories.toml)")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_categories)

    p = sub.add_parser("top", help="flat profile: functions by self and total share",
                       formatter_class=RAW, epilog=TOP_EXAMPLES)
    p.add_argument("file", help="stacks file or -")
    fmt(p)
    p.add_argument("-n", type=int, default=20, help="how many functions (default 20)")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_top)
