"""mongoprobe command line: one ``cmd_<name>(args)`` per subcommand.

Data goes to stdout, diagnostics to stderr; bad input or a failed probe gives one
clear line and a non-zero exit. Heavy imports (pandas, the probes) are deferred
to the subcommands that need them.
"""

from __future__ import annotations

import argparse
import json
import sys
import time

EXAMPLES = """examples:
  mongoprobe target start                 # start the embedded FerretDB, print pid/uri
  mongoprobe target status --json         # {"pid", "uri", "metrics_url"}
  mongoprobe latency -p 4127              # histograms per command until Ctrl-C
  mongoprobe latency -p 4127 -i 5 -d 60   # every 5 s for a minute
  mongoprobe latency -p 4127 --by op      # per opcode (OP_MSG, OP_QUERY, ...)
  mongoprobe latency -p 4127 --engine bcc --json
  mongoprobe latency -p 4127 --engine dtrace -d 30   # dtrace/mongo_time.d
  mongoprobe latency -p 4127 --events ev.jsonl -d 30   # exact, per request
  mongoprobe snoop -p 4127                # one line per request
"""


def die(msg: str, code: int = 1) -> None:
    print(f"mongoprobe: {msg}", file=sys.stderr)
    sys.exit(code)


# --- target ------------------------------------------------------------------------


def cmd_target(args: argparse.Namespace) -> int:
    from . import target

    if args.action == "start":
        try:
            info = target.start(tls=args.tls)
        except target.TargetError as e:
            die(str(e))
    elif args.action == "stop":
        stopped = target.stop()
        if not args.json:
            print("stopped" if stopped else "not running")
        return 0
    else:
        info = target.status()
        if info is None:
            if args.json:
                print(json.dumps({"pid": None, "uri": None, "metrics_url": None}))
            else:
                print("not running")
            return 1
    if args.json:
        print(info.json())
    else:
        print(f"pid          {info.pid}\nuri          {info.uri}\nmetrics_url  {info.metrics_url}")
    return 0


# --- latency and snoop -------------------------------------------------------------


def _check_trace(args: argparse.Namespace) -> None:
    from . import probes

    why = {"bcc": probes.why_cannot_bcc, "dtrace": probes.why_cannot_dtrace}.get(
        args.engine, probes.why_cannot_trace)()
    if why:
        die(why)
    try:
        probes.check_pid(args.pid)
    except probes.ProbeError as e:
        die(str(e))


def _started(probe, args: argparse.Namespace) -> None:
    """The probe is attached: say so (stderr, so stdout stays data) and arm the stops."""
    from . import probes
    probes.Stopper(probe.interrupt, lambda: probe.proc.poll() is None, args.duration, args.pid)
    print(f"Tracing MongoDB requests of PID {args.pid} ({args.engine})... "
          "Hit Ctrl-C to end.", file=sys.stderr, flush=True)


def _print_summary(summary, args: argparse.Namespace, interval: bool = False) -> None:
    if args.json:
        print(json.dumps(summary.to_json()), flush=True)
        return
    if interval:
        print(time.strftime("%H:%M:%S"))
    print(summary.render(by=args.by, unit=args.unit, labels=_peer_labels(args)), end="",
          flush=True)


def _peer_labels(args: argparse.Namespace) -> dict | None:
    """For --by conn: "pid, fd" -> the client address, while the connection is open."""
    if args.by != "conn":
        return None
    from . import procnet
    try:
        peers = procnet.socket_peers(args.pid)
    except OSError:
        return None
    return {f"{args.pid},{fd}": f"{r[0]}:{r[1]}" for fd, (_, r) in peers.items()}


def cmd_latency(args: argparse.Namespace) -> int:
    from . import latency, probes
    from .formats.bpftrace_json import BpftraceOutput

    _check_trace(args)
    if args.engine == "dtrace":
        return _latency_dtrace(args)
    try:
        if args.engine == "bcc":
            return _latency_bcc(args)
        wall = probes.wall_offset_ns()
        script = "mongo_snoop.bt" if args.events else "mongo_latency.bt"
        extra = [] if args.events else [int(args.interval or 0)]
        probe = probes.bpftrace(script, args.pid, *extra)
    except probes.ProbeError as e:
        die(str(e))
    _started(probe, args)
    out = BpftraceOutput()
    for line in probe.lines():
        done = out.add_line(line, "bpftrace")
        if done is not None and args.interval and not args.events and done.maps:
            _print_summary(latency.from_snapshot(done, pid=args.pid), args, interval=True)
    rc = probe.stop()
    if rc not in (0, None) and not out.snapshots:
        die(f"bpftrace failed: {probe.error_summary()}")
    if args.events:
        from .formats.wire_events import from_bpftrace
        events = from_bpftrace(out, wall)
        summary = latency.from_events(events, engine="bpftrace", pid=args.pid)
        counters = latency.from_snapshot(out.final, lost_events=out.lost)
        summary.counts, summary.lost = counters.counts, counters.lost
        summary.requests_by_command = counters.requests_by_command
        from .formats.wire_events import write_events_json
        with open(args.events, "w") as fh:
            write_events_json(events, fh)
    else:
        summary = latency.from_bpftrace(out, pid=args.pid)
    if args.interval and not args.events:
        if not args.json:
            print("--- whole run ---")
    _print_summary(summary, args)
    return 0


def _latency_bcc(args: argparse.Namespace) -> int:
    from . import latency, probes

    argv = ["-p", args.pid, "-j"]
    if args.events:
        argv += ["--events", args.events]
    if args.interval:
        argv += [args.interval]
    try:
        probe = probes.bcc("mongolatency.py", *argv)
    except probes.ProbeError as e:
        die(str(e))
    _started(probe, args)
    last = None
    for line in probe.lines():
        line = line.strip()
        if not line.startswith("{"):
            continue
        s = latency.from_json(json.loads(line))
        s.engine, s.pid = "bcc", args.pid
        if last is not None and args.interval:
            _print_summary(last, args, interval=True)
        last = s if last is None or not args.interval else last.merge(s)
    probe.stop()
    if last is None:
        die(f"mongolatency.py printed no result: {probe.error_summary()}")
    _print_summary(last, args)
    return 0


def _run_dtrace(script: str, args: argparse.Namespace, on_line=None):
    from . import dtrace_engine, probes
    try:
        run = dtrace_engine.run(script, args.pid, duration=args.duration, on_line=on_line,
                                options=dtrace_engine.WIRE_OPTIONS[script],
                                banner=f"Tracing MongoDB requests of PID {args.pid} (dtrace "
                                       f"{script})... Hit Ctrl-C to end.")
    except probes.ProbeError as e:
        die(str(e))
    why = dtrace_engine.failed(run)
    if why and not any(ln.startswith("requests: ") for ln in run.lines):
        die(f"dtrace failed: {why}")
    return run


def _latency_dtrace(args: argparse.Namespace) -> int:
    """dtrace/mongo_time.d (or mongo_snoop.d for --events): one summary at the end."""
    from . import dtrace_engine, latency

    if args.interval:
        die("-i: mongo_time.d prints once, at the end; use -d, or --engine bpftrace|bcc")
    if args.events:
        run = _run_dtrace("mongo_snoop.d", args)
        events = dtrace_engine.snoop_events(run.lines)
        summary = latency.from_events(events, engine="dtrace", pid=args.pid)
        summary.counts, summary.lost = dtrace_engine.snoop_footer(run.lines)
        summary.lost["dropped"] = run.dropped
        from .formats.wire_events import write_events_json
        with open(args.events, "w") as fh:
            write_events_json(events, fh)
    else:
        run = _run_dtrace("mongo_time.d", args)
        summary = dtrace_engine.latency_summary(run, args.pid)
    _print_summary(summary, args)
    print(run.loss_line(), file=sys.stderr)
    return 0


def _snoop_dtrace(args: argparse.Namespace) -> int:
    """dtrace/mongo_snoop.d: its lines as they come (mongo_snoop.bt's layout)."""
    from . import dtrace_engine, latency
    from .formats import wire_events
    from .formats.dtrace_latency import clock

    head: list[str] = []

    def show(line: str) -> None:
        if len(head) < 5:
            head.append(line)
        row = wire_events.parse_snoop_line(line)
        if args.json:
            if row:
                c = clock("".join(head))
                row["time"] = c[1] / 1e9 + row["elapsed_s"] if c else None
                print(json.dumps(row), flush=True)
        elif row or line.startswith("TIME(s)"):
            print(line, end="", flush=True)

    run = _run_dtrace("mongo_snoop.d", args, on_line=show)
    counts, lost = dtrace_engine.snoop_footer(run.lines)
    lost["dropped"] = run.dropped
    print(latency.footer(counts, lost), file=sys.stderr if args.json else sys.stdout)
    print(run.loss_line(), file=sys.stderr)
    return 0


def cmd_snoop(args: argparse.Namespace) -> int:
    from . import probes
    from .formats import wire_events

    _check_trace(args)
    if args.engine == "dtrace":
        return _snoop_dtrace(args)
    try:
        if args.engine == "bcc":
            probe = probes.bcc("mongosnoop.py", "-p", args.pid, *(["-j"] if args.json else []))
        else:
            probe = probes.bpftrace("mongo_snoop.bt", args.pid)
    except probes.ProbeError as e:
        die(str(e))
    _started(probe, args)
    if args.engine == "bcc":
        for line in probe.lines():
            print(line, end="", flush=True)
        return probe.stop() or 0
    from .formats.bpftrace_json import BpftraceOutput, wall_time
    out, wall = BpftraceOutput(), probes.wall_offset_ns()
    for line in probe.lines():
        before = len(out.printf)
        out.add_line(line, "bpftrace")
        for text in out.printf[before:]:
            row = wire_events.parse_snoop_line(text)
            if args.json:
                if row and out.clock:
                    row["time"] = wall_time(out.clock, row["elapsed_s"], wall)
                if row:
                    print(json.dumps(row), flush=True)
            elif not text.startswith("# clock"):
                print(text, end="", flush=True)
    probe.stop()
    from . import latency
    c = latency.from_snapshot(out.final, lost_events=out.lost)
    print(latency.footer(c.counts, c.lost), file=sys.stderr if args.json else sys.stdout)
    return 0


# --- parser --------------------------------------------------------------------------


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="mongoprobe", formatter_class=argparse.RawDescriptionHelpFormatter,
        description="Active benchmarking of MongoDB-protocol servers.", epilog=EXAMPLES)
    sub = p.add_subparsers(dest="cmd", required=True)

    t = sub.add_parser("target", help="the embedded FerretDB target")
    t.add_argument("action", choices=["start", "stop", "status"])
    t.add_argument("--json", action="store_true")
    t.add_argument("--tls", action="store_true",
                   help="start: serve TLS only, with a self-signed certificate (the uri "
                        "carries tls=true and its CA file)")
    t.set_defaults(func=cmd_target)

    def tracing(sp: argparse.ArgumentParser) -> None:
        sp.add_argument("-p", "--pid", type=int, required=True, help="server process id")
        sp.add_argument("-d", "--duration", type=float, help="stop after SEC seconds")
        sp.add_argument("--json", action="store_true", help="machine-readable output")
        sp.add_argument("--engine", choices=["bpftrace", "bcc", "dtrace"], default="bpftrace",
                        help="dtrace: dtrace/*.d (illumos, FreeBSD, macOS, Linux with "
                             "dtrace-utils)")

    lt = sub.add_parser("latency", help="server-side request latency histograms",
                        formatter_class=argparse.RawDescriptionHelpFormatter, epilog=EXAMPLES)
    tracing(lt)
    lt.add_argument("-i", "--interval", type=int, help="print every SEC seconds")
    lt.add_argument("--by", choices=["command", "op", "conn"], default="command")
    lt.add_argument("--unit", choices=["ns", "us", "ms"], default="ns")
    lt.add_argument("--events", metavar="FILE", help="also write one JSON line per request")
    lt.set_defaults(func=cmd_latency)

    sn = sub.add_parser("snoop", help="one line per request")
    tracing(sn)
    sn.set_defaults(func=cmd_snoop)

    # Subcommands that live beside their subject: each module has
    # register(subparsers) adding parsers whose func is one cmd_<name>(args).
    import importlib
    for name in COMMAND_MODULES:
        try:
            mod = importlib.import_module(f"mongoprobe.{name}")
        except ModuleNotFoundError as e:
            if e.name != f"mongoprobe.{name}":
                raise
            continue
        mod.register(sub)
    return p


COMMAND_MODULES = ["profile_cli", "stacks_cli", "pcap_cli", "run_cli", "parse_cli", "report_cli"]


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.func(args) or 0
    except BrokenPipeError:
        return 0


if __name__ == "__main__":
    sys.exit(main())
