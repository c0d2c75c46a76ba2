"""``mongoprobe latency`` and ``mongoprobe snoop``: server-side request latency, live.

The wire probes (``mongoprobe.run.wire_probe``: bpftrace's mongo_latency.bt, bcc's
mongolatency.py; ``--engine dtrace``: dtrace/mongo_time.d and mongo_snoop.d through
``mongoprobe.run.dtrace_runner``) on one pid, until ``-d``, Ctrl-C or the pid's exit.
Histograms render through ``latency.LatencySummary``; data on stdout, the banner and
losses on stderr.
"""

from __future__ import annotations

import argparse
import json
import sys
import time

from .common import RAW, CommandError, check_trace, run_dtrace

MAX_CONNECTIONS = 10000     # probes.MAX_CONNECTIONS (not imported: --help stays fast)


def _positive(s: str) -> int:
    n = int(s)
    if n <= 0:
        raise argparse.ArgumentTypeError("must be positive")
    return n

TLS_HELP = ("decode TLS plaintext through uprobes on the target's TLS library: "
            "OpenSSL SSL_read/SSL_write/SSL_read_ex/SSL_write_ex in libssl or the "
            "executable (bcc, bpftrace; dtrace through the pid provider); Go crypto/tls "
            "(*Conn).Read/Write (bcc only: D cannot name Go's functions, bpftrace 0.17 "
            "cannot probe inside a function). auto (default): "
            "hook the library when the target has one; on: fail when none can be "
            "hooked; off: syscalls only")

LATENCY_EXAMPLES = """examples:
  mongoprobe latency -p 4127              # histograms per command until Ctrl-C
  mongoprobe latency -p 4127 -i 5 -d 60   # every 5 s for a minute
  mongoprobe latency -p 4127 --by op --unit us   # per opcode (OP_MSG, OP_QUERY, ...)
  mongoprobe latency -p 4127 --engine bcc --json
  mongoprobe latency -p 4127 --engine dtrace -d 30   # dtrace/mongo_time.d
  mongoprobe latency -p 4127 --events ev.jsonl -d 30   # exact, per request
  mongoprobe latency -p 4127 --events ev.parquet --events-sample 100 -d 30
  mongoprobe latency -p 4127 --engine bcc --tls on   # TLS plaintext (OpenSSL, Go;
                                         # bpftrace, dtrace: OpenSSL only)
"""

SNOOP_EXAMPLES = """examples:
  mongoprobe snoop -p 4127                # one line per request until Ctrl-C
  mongoprobe snoop -p 4127 -d 10 --json   # one JSON object per request
  mongoprobe snoop -p 4127 --engine dtrace -d 10   # dtrace/mongo_snoop.d
"""


def _check_trace(args: argparse.Namespace) -> None:
    """The pid and the tracer; with --engine auto, the engine chosen (args.engine, and
    args.fallbacks to try in turn if it cannot start), said in one line."""
    from mongoprobe.run import engine_choice as engines, tracer as probes
    args.fallbacks = []
    if args.engine != "auto":
        check_trace(args.engine, args.pid)
        return
    check_trace("auto", args.pid)
    try:
        choice = engines.choose(args.pid, args.tls)
    except probes.ProbeError as e:
        raise CommandError(str(e)) from None
    print(f"mongoprobe: {choice.why}", file=sys.stderr, flush=True)
    args.engine, args.fallbacks = choice.engine, choice.fallbacks


def _failed_start(args: argparse.Namespace, e: Exception) -> None:
    """The engine could not start the tool: with --engine auto, the next one takes
    over (said in one line); else CommandError with the tracer's own error and the
    engine to use instead."""
    from mongoprobe.run import engine_choice as engines, tracer as probes
    if args.fallbacks:
        nxt = args.fallbacks.pop(0)
        print(f"mongoprobe: {e}: engine {nxt} instead", file=sys.stderr, flush=True)
        args.engine = nxt
        return
    hint = engines.instead(args.engine, args.pid, args.tls) if isinstance(
        e, probes.TracerFailed) else ""
    raise CommandError(f"{e}{hint}") from None


def _started(probe, args: argparse.Namespace, sizing: str | None = None,
             tls_lines: list[str] | None = None) -> None:
    """The probe is attached: say so (stderr, so stdout stays data) and arm the stops.
    tls_lines: what was said about TLS (WireProbe.tls_lines), else bcc's stderr."""
    from mongoprobe.run import tracer as probes, wire_probe
    probes.Stopper(probe.interrupt, lambda: probe.proc.poll() is None, args.duration, args.pid,
                   child=probe.proc.pid, first=probe.ask_to_end)
    if tls_lines is None:       # the TLS library hooked (bcc), or why none was
        tls_lines = wire_probe.said_about_tls(probe.stderr_lines)
    for line in tls_lines:
        print(line, file=sys.stderr, flush=True)
    if sizing:
        print(sizing, file=sys.stderr, flush=True)
    print(f"Tracing MongoDB requests of PID {args.pid} ({args.engine})... "
          "Hit Ctrl-C to end.", file=sys.stderr, flush=True)


def _print_summary(summary, args: argparse.Namespace, interval: bool = False) -> None:
    if args.json:
        print(json.dumps(summary.to_json()), flush=True)
        from mongoprobe.model.latency_summary import untraced_line
        if untraced_line(summary.untraced):      # said in one line, as in the text
            print(untraced_line(summary.untraced), file=sys.stderr)
        return
    if interval:
        print(time.strftime("%H:%M:%S"))
    print(summary.render(by=args.by, unit=args.unit, labels=_peer_labels(args)), end="",
          flush=True)


def _peer_labels(args: argparse.Namespace) -> dict | None:
    """For --by conn: "pid, fd" -> the client address, while the connection is open."""
    if args.by != "conn":
        return None
    from mongoprobe.run import procnet
    try:
        peers = procnet.socket_peers(args.pid)
    except OSError:
        return None
    return {f"{args.pid},{fd}": f"{r[0]}:{r[1]}" for fd, (_, r) in peers.items()}


def _wire_probe(args: argparse.Namespace, events_every: int, sizing_error: bool = True):
    """The wire probe of args.engine (bcc, bpftrace), started; None when it could not
    start and --engine auto moved to the next engine (args.engine)."""
    from mongoprobe.run import tracer as probes, wire_probe
    try:
        wp = wire_probe.WireProbe(args.engine, args.pid, by_conn=args.by == "conn",
                                  events_every=events_every,
                                  max_connections=args.max_connections, tls=args.tls,
                                  sizing_error=sizing_error)
    except probes.ProbeError as e:
        _failed_start(args, e)
        return None
    for note in wp.notes:
        print(f"mongoprobe: {note}", file=sys.stderr, flush=True)
    _started(wp.probe, args, wp.sizing(), wp.tls_lines())
    return wp


def _finished(wp):
    """The probe has exited: its whole run, or one line saying why there is none."""
    rc = wp.probe.stop()
    if rc not in (0, None) and not wp.slices_seen:
        raise CommandError(f"{wp.probe.name} failed: {wp.probe.error_summary()}")
    try:
        return wp.finish()
    finally:
        for hint in wp.full_hints():
            print(hint, file=sys.stderr)
        wp.close()


def cmd_latency(args: argparse.Namespace) -> int:
    from mongoprobe.model import latency_summary as latency
    from mongoprobe.model.latencies import Latencies

    _check_trace(args)
    every = (args.events_sample or 1) if args.events else 0
    wp = None
    while wp is None:
        if args.engine == "dtrace":
            return _latency_dtrace(args)
        wp = _wire_probe(args, every)
    pending: list = []          # the slices of the interval being printed
    for s in wp.slices():
        if not args.interval:
            continue
        pending.append(s)
        if (s.start_ns + s.length_ns - pending[0].start_ns) >= args.interval * 1e9:
            # the interval's seconds, and the counters since the second before them
            before = wp.slices_seen[-len(pending) - 1:-len(pending)]
            part = Latencies.from_slices(before + pending, wp.clock)
            summary = latency.from_latencies(part, args.engine, args.pid,
                                             wp.clock.wall_s(pending[0].start_ns),
                                             wp.clock.wall_s(s.start_ns + s.length_ns))
            _print_summary(summary, args, interval=True)
            pending = []
    lat = _finished(wp)
    if args.events and lat.events is not None:
        from ..formats.wire_events import write_events
        write_events(lat.events, args.events)
    if args.interval and not args.json:
        print("--- whole run ---")
    _print_summary(latency.from_latencies(lat, args.engine, args.pid), args)
    return 0


def _run_dtrace(script: str, args: argparse.Namespace, on_line=None):
    """Run a wire script (its _tls twin when --tls finds OpenSSL): (run, hooked)."""
    from mongoprobe.run import dtrace_runner as dtrace_engine, tracer as probes
    try:
        tls = dtrace_engine.tls_script(script, args.pid, args.tls)
    except probes.ProbeError as e:
        raise CommandError(str(e)) from None
    for note in tls.notes:      # what was hooked, or why not
        print(note, file=sys.stderr, flush=True)
    script = tls.script
    options = _dtrace_sized(script, args)
    run = run_dtrace(script, args.pid, args.duration,
                     lambda lines: any(ln.startswith("requests: ") for ln in lines),
                     args=dtrace_engine.wire_args(script, tls.args, args.by == "conn"),
                     on_line=on_line, options=options,
                     banner=f"{script}: sized for {args.max_connections} connections "
                            f"(--max-connections): -x {' -x '.join(options)}, about "
                            f"{probes.human_bytes(args.dtrace_bytes)} of kernel memory\n"
                            f"Tracing MongoDB requests of PID {args.pid} (dtrace "
                            f"{script})... Hit Ctrl-C to end.")
    return run, tls.hooked


def _dtrace_sized(script: str, args: argparse.Namespace) -> tuple[str, ...]:
    """The -x options of ``script`` (mapmem.dtrace_sized; args.max_connections set to
    what is used); CommandError when they would pin over a quarter of the free memory."""
    from mongoprobe.run import map_memory as mapmem, tracer as probes
    args.max_connections, options, size = mapmem.dtrace_sized(
        script, args.max_connections, probes.possible_cpus(), args.by == "conn")
    why = mapmem.too_much(size)
    if why:
        raise CommandError(f"{script}: sized for {args.max_connections} connections would "
                           f"pin {why}: lower --max-connections")
    args.dtrace_bytes = size
    return options


def _dtrace_full_hint(run, script: str, args: argparse.Namespace) -> None:
    """The wire scripts' per-connection buffers are sized by --max-connections: when
    DTrace dropped dynamic variables or aggregation entries, say the fix once."""
    drops = run.drops
    if not len(drops):
        return
    full = drops[drops["kind"].isin(["dynamic variable", "aggregation"])]
    for kind, n in full.groupby("kind")["count"].sum().items():
        print(f"{script}: {kind} space full: {int(n)} dropped: raise --max-connections "
              f"(now {args.max_connections})", file=sys.stderr)


def _latency_dtrace(args: argparse.Namespace) -> int:
    """dtrace/mongo_time.d (or mongo_snoop.d for --events): one summary at the end."""
    from mongoprobe.run import dtrace_runner as dtrace_engine
    from mongoprobe.model import latency_summary as latency

    if args.interval:
        raise CommandError("-i: mongo_time.d prints once, at the end; use -d, or "
                           "--engine bpftrace|bcc")
    if args.events:
        from ..formats import wire_events
        run, hooked = _run_dtrace("mongo_snoop.d", args)
        events = dtrace_engine.snoop_events(run.lines)
        summary = latency.from_events(events, engine="dtrace", pid=args.pid,
                                      checked=wire_events.snoop_checks_replies(run.lines))
        summary.counts, summary.lost = dtrace_engine.snoop_footer(run.lines)
        summary.lost["dropped"] = run.dropped
        summary.untraced, summary.tls = dtrace_engine.tls_report("".join(run.lines), hooked)
        from ..formats.wire_events import write_events_json
        with open(args.events, "w") as fh:
            write_events_json(events, fh)
    else:
        run, hooked = _run_dtrace("mongo_time.d", args)
        summary = dtrace_engine.latency_summary(run, args.pid, hooked)
    _print_summary(summary, args)
    print(run.loss_line(), file=sys.stderr)
    _dtrace_full_hint(run, "mongo_snoop.d" if args.events else "mongo_time.d", args)
    return 0


def _snoop_dtrace(args: argparse.Namespace) -> int:
    """dtrace/mongo_snoop.d: its lines as they come (mongo_snoop.bt's layout)."""
    from mongoprobe.run import dtrace_runner as dtrace_engine
    from mongoprobe.model import latency_summary as latency
    from ..formats import wire_events
    from ..formats.dtrace_latency import clock

    head: list[str] = []
    ties = dtrace_engine.SnoopTies()     # memory-BIO connections: their socket's fd

    def show(line: str, row: dict | None) -> None:
        if args.json:
            if row:
                c = clock("".join(head))
                row["time"] = c[1] / 1e9 + row["elapsed_s"] if c else None
                print(json.dumps(row), flush=True)
        elif row or line.startswith("TIME(s)"):
            print(line, end="", flush=True)

    def take(line: str) -> None:
        if len(head) < 5:
            head.append(line)
        for ln, row in ties.feed(line, wire_events.parse_snoop_line(line)):
            show(ln, row)

    run, hooked = _run_dtrace("mongo_snoop.d", args, on_line=take)
    for ln, row in ties.flush():
        show(ln, row)
    counts, lost = dtrace_engine.snoop_footer(run.lines)
    lost["dropped"] = run.dropped
    print(latency.footer(counts, lost), file=sys.stderr if args.json else sys.stdout)
    untraced, tls = dtrace_engine.tls_report("".join(run.lines), hooked)
    for line in (latency.tls_line(tls), latency.untraced_line(untraced)):
        if line:
            print(line, file=sys.stderr if args.json else sys.stdout)
    print(run.loss_line(), file=sys.stderr)
    _dtrace_full_hint(run, "mongo_snoop.d", args)
    return 0


SNOOP_HEADER = (f"{'TIME(s)':<14} {'PID':<7} {'TID':<7} {'FD':<4} {'REQID':<11} "
                f"{'OPCODE':<13} {'COMMAND':<16} {'BYTES_IN':>8} {'BYTES_OUT':>9} "
                f"{'LAT(us)':<10} F")


def cmd_snoop(args: argparse.Namespace) -> int:
    """One line per request: bpftrace's mongo_latency.bt with an event per request
    (names from its words here), bcc's mongosnoop.py, or dtrace/mongo_snoop.d."""
    from mongoprobe.model import latency_summary as latency
    from mongoprobe.run import tracer as probes
    from ..formats.wire_slices import EVENT_COLUMNS

    _check_trace(args)
    args.by = "command"
    wp = None
    while wp is None:
        if args.engine == "dtrace":
            return _snoop_dtrace(args)
        if args.engine == "bcc":
            probe = _snoop_bcc(args)
            if probe is None:
                continue
            for line in probe.lines():
                print(line, end="", flush=True)
            return probe.stop() or 0
        # a map-size mismatch is said, not fatal: snoop shows requests, not totals
        wp = _wire_probe(args, 1, sizing_error=False)
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
                row["time"] = wp.clock.wall_s(row.pop("mono_ns"))
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
    print(latency.footer(lat.counts, lat.lost, lat.answered_no_reply),
          file=sys.stderr if args.json else sys.stdout)
    if latency.tls_line(lat.tls):       # what the TLS hooks decoded, as mongosnoop.py says
        print(latency.tls_line(lat.tls), file=sys.stderr if args.json else sys.stdout)
    if latency.untraced_line(lat.untraced):
        print(latency.untraced_line(lat.untraced), file=sys.stderr)
    return 0


def _snoop_bcc(args: argparse.Namespace):
    """mongosnoop.py started (None: it could not, and auto moved on)."""
    from mongoprobe.run import map_memory as mapmem, tracer as probes, wire_probe
    cpus = probes.possible_cpus()
    n = args.max_connections or mapmem.default_connections("bcc", "mongosnoop.py", cpus,
                                                             True)
    size = mapmem.bcc_bytes(n, cpus, events=True)
    why = mapmem.too_much(size)
    if why:
        raise CommandError(f"mongosnoop.py: maps sized for {n} connections would pin "
                           f"{why}: lower --max-connections")
    try:
        probe = probes.bcc("mongosnoop.py", "-p", args.pid, "--max-connections", n,
                           "--tls", args.tls, *(["-j"] if args.json else []))
    except probes.ProbeError as e:
        _failed_start(args, e)
        return None
    measured = probes.map_memory(probe.proc.pid)[0]
    _started(probe, args, wire_probe.sizing_line("mongosnoop.py", n, False, cpus, size,
                                                 measured))
    return probe


def _tracing(sp: argparse.ArgumentParser) -> None:
    """The options latency and snoop share."""
    sp.add_argument("-p", "--pid", type=int, required=True, help="server process id")
    sp.add_argument("-d", "--duration", type=float, help="stop after SEC seconds")
    sp.add_argument("--json", action="store_true", help="machine-readable output")
    sp.add_argument("--engine", choices=["auto", "bpftrace", "bcc", "dtrace"],
                    default="auto",
                    help="auto (default): bcc where it compiles, else bpftrace, else "
                         "dtrace (a TLS target: one that decodes its library), said on "
                         "stderr; dtrace: dtrace/*.d (illumos, FreeBSD, macOS, Linux "
                         "with dtrace-utils). $MONGOPROBE_BPFTRACE and "
                         "$MONGOPROBE_BCC_PYTHON name the tracers to run")
    sp.add_argument("--max-connections", type=_positive, metavar="N", default=None,
                    help="connections traced at once: sizes the probe's maps (bcc: "
                         "conns; bpftrace: BPFTRACE_MAX_MAP_KEYS = 4 N; dtrace: "
                         f"dynvarsize, aggsize); default {MAX_CONNECTIONS}, fewer where "
                         "that would pin 256 MB or more (per-CPU maps on many CPUs)")
    sp.add_argument("--tls", choices=["auto", "on", "off"], default="auto",
                    help=TLS_HELP)


def register(sub) -> None:
    lt = sub.add_parser("latency", help="server-side request latency histograms",
                        formatter_class=RAW, epilog=LATENCY_EXAMPLES,
                        description="Histograms of the server's own time per request "
                        "(receive to reply, at its syscalls), per command, opcode or "
                        "connection, with every loss counted.")
    _tracing(lt)
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

    sn = sub.add_parser("snoop", help="one line per request", formatter_class=RAW,
                        epilog=SNOOP_EXAMPLES,
                        description="One line (or JSON object) per request as the server "
                        "answers it: time, pid, thread, fd, requestID, opcode, command, "
                        "bytes, latency.")
    _tracing(sn)
    sn.set_defaults(func=cmd_snoop)
