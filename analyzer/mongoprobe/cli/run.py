"""``mongoprobe load``, ``record``, ``phases``, ``report``: recorded runs.

``load`` drives the built-in workload (``mongoprobe.load.insert_workload``), ``record`` runs any load
command while probes and collectors watch the server (``mongoprobe.run.record``), and
``phases`` and ``report`` read a recorded RUN directory (``mongoprobe.analysis.phase_table``,
``mongoprobe.views.report``). ``register(subparsers)`` adds them to ``mongoprobe``; the
subjects are imported when a command runs.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
from pathlib import Path

from .common import RAW, CommandError, command_after, doc_line

# --- load ----------------------------------------------------------------------------

LOAD_EXAMPLES = """examples:
  mongoprobe load --phases 10i.1q:60s,1i@1000.10q:60s,0i.10q:60s,10i.0q:60s
  mongoprobe load --uri mongodb://127.0.0.1:27017/ --phases 4i.0q:100000i  # a load
  mongoprobe load --phases 1i@100.4q:30s --pad 1024 --query-limit 10
  mongoprobe record --target embedded -o runs/r1 -- mongoprobe load --phases 10i.1q:60s
"""


def _load_arguments(p: argparse.ArgumentParser) -> None:
    from mongoprobe.load import COLLECTION

    p.add_argument("--uri", default=None,
                   help="server URI (default: $MONGOPROBE_URI, set by mongoprobe record)")
    p.add_argument("--phases", required=True, metavar="SPEC",
                   help="Ni[@RATE].Mq:LENGTH[,...], e.g. 10i.1q:60s,1i@1000.10q:60s")
    p.add_argument("--pad", type=int, default=256, help="bytes of pad per document (256)")
    p.add_argument("--query-limit", type=int, default=4,
                   help="documents per range query at most (4)")
    p.add_argument("--interval", type=float, default=1.0, help="seconds per report line (1)")
    p.add_argument("--db", default="mongoprobe", help="database (mongoprobe)")
    p.add_argument("--collection", default=COLLECTION, help=f"collection ({COLLECTION})")
    p.add_argument("--batch", type=int, default=1,
                   help="documents per insert command (1)")
    p.add_argument("--keep", action="store_true",
                   help="keep the collection (default: drop and recreate it)")
    p.add_argument("--seed", type=int, default=None, help="random seed (default: fresh)")
    p.add_argument("--no-sort", dest="sort", action="store_false",
                   help="range queries without a sort (iibench's hinted mongod query; "
                        "servers that cannot use the index for the sort scan otherwise)")


def cmd_load(args: argparse.Namespace) -> int:
    from mongoprobe.load import insert_workload as load

    uri = args.uri or os.environ.get("MONGOPROBE_URI")
    if not uri:
        raise CommandError("no --uri and MONGOPROBE_URI is not set", 2)
    try:
        phases = load.parse_spec(args.phases)
    except load.SpecError as e:
        raise CommandError(f"--phases: {e}", 2) from None
    for flag, v, lo in (("--pad", args.pad, 0), ("--query-limit", args.query_limit, 1),
                        ("--batch", args.batch, 1)):
        if v < lo:
            raise CommandError(f"{flag} must be at least {lo}", 2)
    if args.interval <= 0:
        raise CommandError("--interval must be positive", 2)
    rc, _ = load.run(load.Options(uri, phases, args.pad, args.query_limit, args.interval,
                                  args.db, args.collection, args.batch, args.keep, args.seed,
                                  args.sort))
    return rc


# --- record --------------------------------------------------------------------------

RECORD_EXAMPLES = """examples:
  mongoprobe record --target embedded -o runs/r1 -- mongoprobe load --phases 10i.1q:60s
  mongoprobe record --target embedded -o runs/r2 --probes latency,vmstat,iostat,pidstat \\
      -- mongoprobe load --phases 10i.1q:60s,1i@1000.10q:60s,0i.10q:60s,10i.0q:60s
  mongoprobe record -p 4127 --uri mongodb://127.0.0.1:27017/ -o runs/r3 \\
      --probes all --events -- mongoprobe load --phases 4i.1q:60s
  python -c 'import mongoprobe; print(mongoprobe.load_run("runs/r1").phases)'
"""


def label(text: str) -> tuple[str, str]:
    """KEY=VALUE of --label: a key of letters, digits, '_', '-' or '.'."""
    key, eq, value = text.partition("=")
    if not eq or not key or not all(c.isalnum() or c in "_-." for c in key):
        raise argparse.ArgumentTypeError(f"{text!r} is not KEY=VALUE")
    return key, value


def _record_arguments(p: argparse.ArgumentParser) -> None:
    from mongoprobe.run import collectors

    g = p.add_mutually_exclusive_group(required=True)
    g.add_argument("-p", "--pid", type=int, help="the server's process id")
    g.add_argument("--target", choices=["embedded"],
                   help="start a private FerretDB for the run and stop it after")
    p.add_argument("--backend", choices=["sqlite", "postgresql"], default="sqlite",
                   help="--target embedded: FerretDB's storage (postgresql: a private "
                        "PostgreSQL cluster, recorded as the server's downstream)")
    p.add_argument("-o", "--output", required=True, metavar="RUN",
                   help="run directory to create (must not exist or be empty)")
    p.add_argument("--probes", default=",".join(collectors.DEFAULT), metavar="LIST",
                   help="comma-separated: " + ",".join(collectors.SPECS) +
                        " or all (default: latency)")
    p.add_argument("--events", action="store_true",
                   help="latency: also keep every request (latency.events.parquet); "
                        "phases then give exact percentiles")
    p.add_argument("--events-sample", type=int, metavar="N",
                   help="with --events: keep one request in N, at random")
    p.add_argument("--engine", choices=["auto", "bcc", "bpftrace"], default="auto",
                   help="the latency probe's: auto (default) bcc where it compiles "
                        "(mongolatency.py), else bpftrace (mongo_latency.bt); the "
                        "manifest's latency_engine says which and why")
    p.add_argument("--max-connections", type=int, metavar="N", default=None,
                   help="connections the latency probe traces at once (sizes its maps: "
                        "bcc MW_CONNS = N, bpftrace BPFTRACE_MAX_MAP_KEYS = 4 N); "
                        "default 10000, fewer where that would pin 256 MB or more")
    p.add_argument("--tls", choices=["auto", "on", "off"], default="auto",
                   help="TLS plaintext for the latency probe: bcc decodes OpenSSL and "
                        "Go's crypto/tls (FerretDB); bpftrace OpenSSL's SSL_read/SSL_write "
                        "(mongo_latency_tls.bt), Go's is then counted, not decoded. "
                        "auto (default): hook the library when the target has one; "
                        "on: fail when it cannot be hooked; off: syscalls only")
    p.add_argument("-i", "--interval", type=float, default=1.0,
                   help="seconds between collector samples (1)")
    p.add_argument("--uri", help="with -p: the server's URI, given to COMMAND as "
                                 "MONGOPROBE_URI")
    p.add_argument("--metrics-url", help="with -p: a FerretDB /debug/metrics URL")
    p.add_argument("--port", type=int, help="with -p: the server's port for pcap "
                                            "(default: the pid's first listening port)")
    p.add_argument("--grace", type=float, default=15.0,
                   help="seconds the command gets to end after SIGINT (15)")
    p.add_argument("--label", action="append", type=label, default=[], metavar="KEY=VALUE",
                   help="what this run varies, kept in the manifest's labels (repeatable): "
                        "compare groups and lays out runs by them")
    p.add_argument("command", nargs=argparse.REMAINDER, metavar="-- COMMAND...",
                   help="the load command")


def cmd_record(args: argparse.Namespace) -> int:
    from mongoprobe.run import collectors, record

    command = command_after(args.command, "record")
    try:
        probes = collectors.parse_list(args.probes)
    except ValueError as e:
        raise CommandError(f"--probes: {e}", 2) from None
    if args.interval <= 0:
        raise CommandError("--interval must be positive", 2)
    args.command, args.probes = command, probes
    if not hasattr(args, "record_argv"):
        args.record_argv = sys.argv[1:]
    try:
        return record.Recorder(args).run()
    except record.RecordError as e:
        raise CommandError(str(e)) from None


# --- phases and report ---------------------------------------------------------------

PHASES_HELP = ("phases to use instead of the tool's: seconds from the recording's start "
               "(or epoch seconds)")
PHASES_EXAMPLES = """examples:
  mongoprobe phases RUN
  mongoprobe phases RUN --json
  mongoprobe phases RUN --phases warm=0..4,steady=4..12   # seconds from the start
"""
REPORT_EXAMPLES = """examples:
  mongoprobe report RUN                         # writes RUN/report.html
  mongoprobe report RUN -o report.html
  mongoprobe report RUN --diff 2i.1q 0i.2q      # and the flame graph of B against A
  mongoprobe report RUN --phases warm=0..4,steady=4..12
"""


def _run(path: str):
    from mongoprobe.run.run_folder import load_run
    try:
        return load_run(path)
    except (OSError, ValueError) as e:
        raise CommandError(f"{path}: not a readable run directory ({e})") from None


@contextlib.contextmanager
def reading(path: str, mistakes: tuple = ()):
    """What goes wrong while a run is read reaches the user as one line naming the run
    and what was wrong (a damaged file names itself), with exit 1: the analyzer's
    errors (a FormatError, a table without its column) and its bugs alike, which
    MONGOPROBE_DEBUG=1 shows with their traceback instead. ``mistakes``: the errors
    of a mistaken request, which the caller says in its own words."""
    try:
        yield
    except (CommandError, *mistakes):
        raise
    except Exception as e:
        if os.environ.get("MONGOPROBE_DEBUG"):
            raise
        what = str(e) or type(e).__name__
        where = "" if str(path) in what else f"{path}: "
        raise CommandError(f"{where}{what} ({type(e).__name__}; MONGOPROBE_DEBUG=1 "
                           "shows where)") from None


def _phases(run, args: argparse.Namespace):
    """The --phases override as a (name, start, end) table, or None."""
    from mongoprobe.analysis import phase_table as phases
    if not args.phases:
        return None
    return phases.parse_phases(args.phases, float(run.manifest.get("start") or 0.0))


def cmd_phases(args: argparse.Namespace) -> int:
    from mongoprobe.analysis import phase_table as phases
    run = _run(args.run)
    try:
        override = _phases(run, args)
    except phases.PhaseError as e:
        raise CommandError(str(e)) from None
    with reading(args.run):
        # made whole before printing: an error leaves no half table behind it
        text = (json.dumps(phases.phase_json(run, override)) + "\n" if args.json else
                phases.render(phases.phase_table(run, override), phases.tool_json(run),
                              run.lost))
    print(text, end="")
    return 0


def cmd_report(args: argparse.Namespace) -> int:
    from mongoprobe.analysis import phase_table as phases
    from mongoprobe.views import report
    run = _run(args.run)
    try:
        override = _phases(run, args)
        # the report belongs with its run, wherever the command runs from
        output = args.output or Path(args.run) / "report.html"
        with reading(args.run, (phases.PhaseError,)):
            out = report.write(run, output, tuple(args.diff) if args.diff else None,
                               override)
    except phases.PhaseError as e:
        raise CommandError(str(e)) from None
    print(out)
    return 0


def register(sub) -> None:
    lp = sub.add_parser("load", help="built-in insert/query workload (insert benchmark style)",
                        description=doc_line("mongoprobe.load.insert_workload"),
                        formatter_class=RAW,
                        epilog=LOAD_EXAMPLES)
    _load_arguments(lp)
    lp.set_defaults(func=cmd_load)

    rp = sub.add_parser("record", help="run a load command while probes record the server",
                        description=doc_line("mongoprobe.run.record"), formatter_class=RAW,
                        epilog=RECORD_EXAMPLES)
    _record_arguments(rp)
    rp.set_defaults(func=cmd_record)

    p = sub.add_parser("phases", help="per-phase table of a recorded run",
                       description="Per phase: the load tool's throughput (ops, inserts, "
                       "queries; per operation), costs per operation, server latency per "
                       "command, and the tool's client latency beside the server's. "
                       "Phases come from the tool's output (YCSB, iibench, the built-in "
                       "load, '### phase' markers), else from the server's traffic.",
                       formatter_class=RAW, epilog=PHASES_EXAMPLES)
    p.add_argument("run", metavar="RUN")
    p.add_argument("--json", action="store_true")
    p.add_argument("--phases", metavar="NAME=START..END,...", help=PHASES_HELP)
    p.set_defaults(func=cmd_phases)

    r = sub.add_parser("report", help="one self-contained HTML report of a recorded run",
                       formatter_class=RAW, epilog=REPORT_EXAMPLES)
    r.add_argument("run", metavar="RUN")
    r.add_argument("-o", "--output", metavar="FILE",
                   help="where to write the report (default: RUN/report.html)")
    r.add_argument("--diff", nargs=2, metavar=("A", "B"),
                   help="also the differential flame graph of phase B against A")
    r.add_argument("--phases", metavar="NAME=START..END,...", help=PHASES_HELP)
    r.set_defaults(func=cmd_report)
