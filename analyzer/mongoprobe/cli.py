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
  mongoprobe latency -p 4127 --events ev.parquet --events-sample 100
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


def _wire_probe(args: argparse.Namespace, events_every: int):
    from . import probes, wire_probe
    try:
        wp = wire_probe.WireProbe(args.engine, args.pid, by_conn=args.by == "conn",
                                  events_every=events_every)
    except probes.ProbeError as e:
        die(str(e))
    _started(wp.probe, args)
    return wp


def _finished(wp):
    """The probe has exited: its whole run, or one line saying why there is none."""
    rc = wp.probe.stop()
    if rc not in (0, None) and not wp.slices_seen:
        die(f"{wp.probe.name} failed: {wp.probe.error_summary()}")
    try:
        return wp.finish()
    finally:
        wp.close()


def cmd_latency(args: argparse.Namespace) -> int:
    from . import latency
    from .latencies import Latencies

    _check_trace(args)
    if args.engine == "dtrace":
        return _latency_dtrace(args)
    every = (args.events_sample or 1) if args.events else 0
    wp = _wire_probe(args, every)
    pending: list = []          # the slices of the interval being printed
    for s in wp.slices():
        if not args.interval:
            continue
        pending.append(s)
        if (s.start_ns + s.length_ns - pending[0].start_ns) >= args.interval * 1e9:
            # the interval's seconds, and the counters since the second before them
            before = wp.slices_seen[-len(pending) - 1:-len(pending)]
            part = Latencies.from_slices(before + pending, wp.offset_ns)
            first = pending[0].start_ns + wp.offset_ns
            summary = latency.from_latencies(part, args.engine, args.pid, first / 1e9,
                                             (s.start_ns + s.length_ns + wp.offset_ns) / 1e9)
            _print_summary(summary, args, interval=True)
            pending = []
    lat = _finished(wp)
    if args.events and lat.events is not None:
        from .formats.wire_events import write_events
        write_events(lat.events, args.events)
    if args.interval and not args.json:
        print("--- whole run ---")
    _print_summary(latency.from_latencies(lat, args.engine, args.pid), args)
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


SNOOP_HEADER = (f"{'TIME(s)':<14} {'PID':<7} {'TID':<7} {'FD':<4} {'REQID':<11} "
                f"{'OPCODE':<13} {'COMMAND':<16} {'BYTES_IN':>8} {'BYTES_OUT':>9} "
                f"{'LAT(us)':<10} F")


def cmd_snoop(args: argparse.Namespace) -> int:
    """One line per request: bpftrace's mongo_latency.bt with an event per request
    (names from its words here), bcc's mongosnoop.py, or dtrace/mongo_snoop.d."""
    from . import latency, probes
    from .formats.wire_slices import EVENT_COLUMNS

    _check_trace(args)
    if args.engine == "dtrace":
        return _snoop_dtrace(args)
    if args.engine == "bcc":
        try:
            probe = probes.bcc("mongosnoop.py", "-p", args.pid, *(["-j"] if args.json else []))
        except probes.ProbeError as e:
            die(str(e))
        _started(probe, args)
        for line in probe.lines():
            print(line, end="", flush=True)
        return probe.stop() or 0
    args.by = "command"
    wp = _wire_probe(args, 1)
    t0 = None
    if not args.json:
        print(SNOOP_HEADER, flush=True)
    shown = 0
    for _line, _done in wp.lines():
        # a second's events come together, once the second is over: in time order
        for ev in sorted(wp.reader.events[shown:]):
            row = dict(zip(EVENT_COLUMNS, ev))
            t0 = row["mono_ns"] if t0 is None else t0
            if args.json:
                row["time"] = (row.pop("mono_ns") + wp.offset_ns) / 1e9
                print(json.dumps({"pid": args.pid, **row}), flush=True)
            else:
                t = (row["mono_ns"] - t0) / 1e9
                print(f"{t:<14.6f} {args.pid:<7} {row['tid']:<7} {row['fd']:<4} "
                      f"{row['request_id']:<11} {row['opcode']:<13} {row['command']:<16} "
                      f"{row['bytes_in']:>8} {row['bytes_out']:>9} "
                      f"{row['latency_ns'] / 1000:<10.3f} {'m' if row['stream'] else '-'}",
                      flush=True)
        shown = len(wp.reader.events)
    lat = _finished(wp)
    print(latency.footer(lat.counts, lat.lost), file=sys.stderr if args.json else sys.stdout)
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
    lt.add_argument("--events", metavar="FILE",
                    help="also write every request (or one in --events-sample N): "
                         "FILE.parquet as Parquet, else JSON lines; percentiles become "
                         "exact when every request is kept")
    lt.add_argument("--events-sample", type=int, metavar="N",
                    help="with --events: keep one request in N, at random (the "
                         "histograms still count every request)")
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
