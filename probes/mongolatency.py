#!/usr/bin/python3
# @lint-avoid-python-3-compatibility-imports
#
# mongolatency  Summarize MongoDB wire-protocol request latency as histograms.
#               For Linux, uses BCC, eBPF.
#
# USAGE: mongolatency.py -p PID [-h] [-O] [-C] [-c] [-m|-u] [-j] [-T]
#                        [--events FILE] [-d SECONDS] [interval [count]]
#
# Server-side latency of each request of a MongoDB-protocol server (mongod,
# mongos, FerretDB, ...): from the return of the receive syscall that completed
# the request message to the entry of the send syscall carrying the first bytes
# of its reply. The wire protocol is decoded in the kernel (probes/mongo_wire.h,
# shared with mongosnoop.py): a state machine per connection (pid, fd) frames
# receives and sends into messages, reads each request's command name, and
# matches replies to requests by responseTo. Latencies are aggregated in the
# kernel as log2 histograms per opcode (default, -O), per command (-C) or per
# connection (-c); only counts and sums cross to user space.
#
# Hooks (syscall tracepoints only, the target kernel has no kprobes):
# sys_enter/sys_exit of read, readv, recvfrom, recvmsg (requests) and write,
# writev, sendto, sendmsg (replies), and sys_enter_close. The pid filter runs in
# the kernel. Checked on FerretDB v1.24.0 (read() of 4 KiB buffers, replies with
# write()) and on a raw-socket server in mongod's pattern (recvmsg of the 16-byte
# header, then of the body; replies with sendmsg), driven by pymongo 4.20.
#
# Example (FerretDB v1.24.0, pymongo load, -C -u, trimmed):
#
#   command = insert
#        usecs               : count     distribution
#          128 -> 255        : 16       |*                                       |
#          256 -> 511        : 362      |****************************************|
#          512 -> 1023       : 204      |**********************                  |
#         1024 -> 2047       : 22       |**                                      |
#   count 604  avg 567 us
#   ...
#   requests: 4371  replies: 4371  stream replies: 0  no-reply (moreToCome): 0
#   lost: unmatched replies 0, requests without reply 0, malformed headers 0, dropped events 0
#
# Each section is one opcode/command/connection; "count" is the number of
# timed requests (those that got a reply). The two last lines are the loss
# counters, always printed: requests = replies + no-reply + requests without
# reply (+ requests still being received when tracing stopped).
#
# Overhead: every read/write-family syscall of the target pid pays two
# tracepoint programs and one hash update/delete (the per-thread arguments);
# on a known connection, a bounded header decode and a few map updates per
# message. Nothing is sent to user space per request unless --events is given
# (then one ring-buffer record per request). Files, pipes and unknown sockets
# stop at the first invalid header. Measure it as a ratio of alternating runs.
#
# Caveats:
# - readv/writev/recvmsg/sendmsg: only the first iovec is decoded; a header
#   that lies beyond it is counted as malformed.
# - A header split across two receives (1-15 bytes at the end of a receive)
#   counts as malformed and resets the connection's framing; so do more than
#   8 messages in one receive/send (the analyzer's stream decoder handles both).
# - OP_COMPRESSED bodies carry no readable command name: "[compressed]".
# - Not traced: recvmmsg/sendmmsg, sendfile/splice, io_uring, TLS (the bytes
#   seen are encrypted: nothing decodes). Connections accepted before tracing
#   started are picked up at their next receive that starts with a header.
# - The per-connection peer address (-c) is resolved from /proc when printing:
#   an fd closed or reused since then shows as such.
#
# Copyright 2025 mongoprobe authors.
# Licensed under the Apache License, Version 2.0 (the "License")
#
# 2025          mongoprobe      Created this.

from __future__ import print_function

import argparse
import ctypes as ct
import json
import math
import os
import signal
import socket
import struct
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
WIRE_H = os.path.join(HERE, "mongo_wire.h")

OPCODES = {
    1: "OP_REPLY", 2001: "OP_UPDATE", 2002: "OP_INSERT", 2004: "OP_QUERY",
    2005: "OP_GET_MORE", 2006: "OP_DELETE", 2007: "OP_KILL_CURSORS",
    2012: "OP_COMPRESSED", 2013: "OP_MSG",
}
UNIT_ABBR = {"nsecs": "ns", "usecs": "us", "msecs": "ms"}
SYSCALLS = "read/readv/recvfrom/recvmsg/write/writev/sendto/sendmsg"

# indexes of the "counts" array (mongo_wire.h C_*)
C_REQUESTS, C_REPLIES, C_STREAM, C_NOREPLY, C_UNMATCHED, C_NOREPLY_LOST, \
    C_MALFORMED, C_DROPPED = range(8)


class MwEvent(ct.Structure):
    """struct mw_event of mongo_wire.h."""
    _fields_ = [
        ("ts", ct.c_ulonglong), ("latency_ns", ct.c_ulonglong),
        ("pid", ct.c_uint), ("tid", ct.c_uint), ("fd", ct.c_uint),
        ("request_id", ct.c_uint), ("opcode", ct.c_uint),
        ("bytes_in", ct.c_uint), ("bytes_out", ct.c_uint),
        ("stream", ct.c_uint), ("cmd", ct.c_char * 32),
    ]


def opname(op):
    return OPCODES.get(op, "OP_%d" % op)


def cmdname(raw):
    if isinstance(raw, (bytes, bytearray)):
        raw = bytes(raw).split(b"\0", 1)[0].decode("utf-8", "replace")
    return raw


# ---- shared with mongosnoop.py ---------------------------------------------

def die(tool, msg):
    print("%s: %s" % (tool, msg), file=sys.stderr)
    sys.exit(1)


def check_target(tool, pid):
    """One clear line and exit 1 when the pid cannot be traced."""
    if not os.path.exists("/proc/%d" % pid):
        die(tool, "no process with PID %d" % pid)
    try:
        with open("/proc/%d/stat" % pid) as f:
            if f.read().rsplit(")", 1)[1].split()[0] == "Z":
                die(tool, "PID %d has exited (zombie)" % pid)
    except OSError:
        die(tool, "no process with PID %d" % pid)
    if os.geteuid() != 0:
        die(tool, "must run as root (BPF and tracefs need it)")


def alive(pid):
    try:
        with open("/proc/%d/stat" % pid) as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def bpf_text(pid, views=(), factor=1, events=False, ringbuf=True):
    """The program of mongo_wire.h with this run's switches."""
    defs = ["#define MW_TARGET_PID %d" % pid, "#define MW_FACTOR %dULL" % factor]
    for v in views:
        defs.append("#define MW_HIST_%s 1" % v.upper())
    if events:
        defs.append("#define MW_EVENTS 1")
        if ringbuf:
            defs.append("#define MW_RINGBUF 1")
    with open(WIRE_H) as f:
        return "\n".join(defs) + "\n" + f.read()


def load(tool, pid, views=(), factor=1, events=False):
    """Compile, load and attach; returns (bpf, ringbuf_used)."""
    from bcc import BPF
    attempts = [True, False] if events else [False]
    err = None
    for ringbuf in attempts:
        try:
            b = BPF(text=bpf_text(pid, views, factor, events, ringbuf))
        except Exception as e:      # ringbuf unsupported: retry with perf
            err = e
            continue
        # the programs that decode the 2nd..8th message of one syscall
        jmp = b["mw_jmp"]
        for i, name in enumerate(("mw_rx_more", "mw_tx_more")):
            fn = b.load_func(name, BPF.TRACEPOINT)
            jmp[ct.c_int(i)] = ct.c_int(fn.fd)
        return b, ringbuf
    die(tool, "cannot load the BPF program: %s" % str(err).splitlines()[-1])


class WallClock(object):
    """bpf_ktime_get_ns() is CLOCK_MONOTONIC: offset to wall time, measured
    at start (the pair read closest together)."""

    def __init__(self):
        best = None
        for _ in range(5):
            m0 = time.clock_gettime_ns(time.CLOCK_MONOTONIC)
            w = time.time_ns()
            m1 = time.clock_gettime_ns(time.CLOCK_MONOTONIC)
            if best is None or m1 - m0 < best[0]:
                best = (m1 - m0, w - (m0 + m1) // 2)
        self.offset_ns = best[1]

    def wall(self, mono_ns):
        return (mono_ns + self.offset_ns) / 1e9


def event_dict(ev, clock):
    return {
        "time": round(clock.wall(ev.ts), 6),
        "pid": ev.pid, "tid": ev.tid, "fd": ev.fd,
        "request_id": ev.request_id, "opcode": opname(ev.opcode),
        "command": cmdname(ev.cmd), "bytes_in": ev.bytes_in,
        "bytes_out": ev.bytes_out, "latency_ns": ev.latency_ns,
        "stream": bool(ev.stream),
    }


class Events(object):
    """Per-request events from the ring buffer (or perf buffer)."""

    def __init__(self, b, ringbuf, callback):
        self.b = b
        self.ringbuf = ringbuf
        self.lost = 0
        self.callback = callback

        def handle(_ctx_or_cpu, data, _size):
            ev = ct.cast(data, ct.POINTER(MwEvent)).contents
            self.callback(ev)

        def lost(n):
            self.lost += n

        if ringbuf:
            b["events"].open_ring_buffer(handle)
        else:
            b["events"].open_perf_buffer(handle, page_cnt=256, lost_cb=lost)

    def poll(self, timeout_ms):
        if self.ringbuf:
            self.b.ring_buffer_poll(timeout_ms)
        else:
            self.b.perf_buffer_poll(timeout_ms)

    def drain(self):
        if self.ringbuf:
            self.b.ring_buffer_consume()
        else:
            self.b.perf_buffer_poll(0)


def read_counts(b, final, extra_dropped=0):
    """Counter totals; at the end, outstanding requests are lost too."""
    t = b["counts"]
    v = [int(t.sum(ct.c_int(i)).value) for i in range(8)]
    without = v[C_NOREPLY_LOST]
    if final:
        for _, c in b["conns"].items():
            without += int(c.nslots)
    return {
        "counts": {"requests": v[C_REQUESTS], "replies": v[C_REPLIES],
                   "stream_replies": v[C_STREAM], "no_reply": v[C_NOREPLY]},
        "lost": {"unmatched_replies": v[C_UNMATCHED],
                 "requests_without_reply": without,
                 "malformed": v[C_MALFORMED],
                 "dropped": v[C_DROPPED] + extra_dropped},
    }


def footer(totals, out=sys.stdout):
    c, l = totals["counts"], totals["lost"]
    print("requests: %d  replies: %d  stream replies: %d  "
          "no-reply (moreToCome): %d" % (c["requests"], c["replies"],
                                        c["stream_replies"], c["no_reply"]),
          file=out)
    print("lost: unmatched replies %d, requests without reply %d, "
          "malformed headers %d, dropped events %d" % (
              l["unmatched_replies"], l["requests_without_reply"],
              l["malformed"], l["dropped"]), file=out)


def dropped_hint(tool, n, ringbuf):
    if n:
        print("%s: %d events dropped (%s full): lower the load, or trace "
              "without --events for the histograms only" %
              (tool, n, "ring buffer" if ringbuf else "perf buffer"),
              file=sys.stderr)


def on_sigterm():
    """Ctrl-C and SIGTERM end the trace; SIGINT too when started in the
    background by a shell (which ignores SIGINT for background jobs)."""
    def handler(signum, frame):
        raise KeyboardInterrupt
    signal.signal(signal.SIGTERM, handler)
    signal.signal(signal.SIGINT, signal.default_int_handler)


# ---- peers of connections (-c) ---------------------------------------------

def _addr(hexaddr):
    ip, port = hexaddr.split(":")
    raw = bytes.fromhex(ip)
    if len(raw) == 4:
        host = socket.inet_ntop(socket.AF_INET, raw[::-1])
    else:
        words = b"".join(raw[i:i + 4][::-1] for i in range(0, 16, 4))
        host = socket.inet_ntop(socket.AF_INET6, words)
        if host.startswith("::ffff:") and "." in host:
            host = host[7:]
        else:
            host = "[%s]" % host
    return "%s:%d" % (host, int(port, 16))


def peers(pid):
    """{socket inode: remote address} from the pid's network namespace."""
    out = {}
    for name in ("tcp", "tcp6"):
        try:
            with open("/proc/%d/net/%s" % (pid, name)) as f:
                next(f)
                for line in f:
                    p = line.split()
                    if len(p) > 9:
                        out[p[9]] = _addr(p[2])
        except (OSError, ValueError, StopIteration):
            pass
    return out


def peer_of(pid, fd, table):
    try:
        link = os.readlink("/proc/%d/fd/%d" % (pid, fd))
    except OSError:
        return "(closed)"
    if link.startswith("socket:["):
        return table.get(link[8:-1], "(socket)")
    return "(%s)" % link


# ---- histograms ------------------------------------------------------------

def hist_vals(table, keyfn):
    """{section key: [count per log2 slot]} from a BPF_HISTOGRAM."""
    out = {}
    for k, v in table.items():
        key = keyfn(k)
        vals = out.setdefault(key, [0] * 65)
        if 0 <= k.slot < 65:
            vals[k.slot] += int(v.value)
    return out


def bucket_bounds(i):
    if i <= 1:
        return 0, 1
    return 1 << (i - 1), (1 << i) - 1


def pct_from_hist(vals, p, maxv):
    n = sum(vals)
    if n == 0:
        return 0
    rank = p * n
    cum = 0
    for i, c in enumerate(vals):
        if c == 0:
            continue
        if cum + c >= rank:
            lo, hi = bucket_bounds(i)
            v = lo + (hi - lo) * (rank - cum) / c
            return int(min(round(v), maxv)) if maxv else int(round(v))
        cum += c
    return int(maxv)


def pct_exact(sorted_lat, p):
    if not sorted_lat:
        return 0
    i = max(0, int(math.ceil(p * len(sorted_lat))) - 1)
    return int(sorted_lat[i])


def json_hist(vals):
    idx = [i for i, c in enumerate(vals) if c]
    if not idx:
        return []
    out = []
    for i in range(idx[0], idx[-1] + 1):
        lo, hi = bucket_bounds(i)
        out.append({"lo_ns": lo, "hi_ns": hi, "count": int(vals[i])})
    return out


try:
    from bcc.table import _print_log2_hist     # what print_log2_hist uses
except ImportError:                             # pragma: no cover
    _print_log2_hist = None


VIEWS = {
    # view: (histogram map, stats map, section header, key of a hist entry,
    #        key of a stats entry)
    "op": ("hist_op", "stats_op", "opcode",
           lambda k: int(k.key), lambda k: int(k.value)),
    "cmd": ("hist_cmd", "stats_cmd", "command",
            lambda k: cmdname(k.cmd), lambda k: cmdname(k.cmd)),
    "conn": ("hist_conn", "stats_conn", "conn",
             lambda k: int(k.key) & 0xffffffff,
             lambda k: int(k.value) & 0xffffffff),
}


def collect(b, view):
    """{key: {"vals", "requests", "count", "sum_ns", "max_ns"}} of a view."""
    hname, sname, _, hkey, skey = VIEWS[view]
    vals = hist_vals(b[hname], hkey)
    out = {}
    for k, s in b[sname].items():
        out[skey(k)] = {"vals": vals.pop(skey(k), [0] * 65),
                        "requests": int(s.requests), "count": int(s.count),
                        "sum_ns": int(s.sum_ns), "max_ns": int(s.max_ns)}
    for key, v in vals.items():         # stats entry lost to a full map
        out[key] = {"vals": v, "requests": 0, "count": sum(v),
                    "sum_ns": 0, "max_ns": 0}
    return out


def clear(b, views):
    for v in views:
        b[VIEWS[v][0]].clear()
        b[VIEWS[v][1]].clear()
    b["counts"].clear()


def label(view, key, pid, table):
    if view == "op":
        return opname(key)
    if view == "conn":
        return "fd %d %s" % (key, peer_of(pid, key, table))
    return key


def print_text(b, views, pid, unit, totals):
    table = peers(pid) if "conn" in views else {}
    div = {"nsecs": 1, "usecs": 1000, "msecs": 1000000}[unit]
    for view in views:
        data = collect(b, view)
        keys = sorted(data, key=lambda k: (label(view, k, pid, table)
                                           if view != "conn" else k))
        for key in keys:
            d = data[key]
            if d["count"] == 0:
                continue
            print("\n%s = %s" % (VIEWS[view][2], label(view, key, pid, table)))
            if _print_log2_hist is not None:
                _print_log2_hist(d["vals"], unit, None)
            avg = d["sum_ns"] / d["count"] / div
            print("count %d  avg %d %s" % (d["count"], int(round(avg)),
                                          UNIT_ABBR[unit]))
    print()
    footer(totals)


def json_view(b, view, pid, lat_by, table):
    out = {}
    for key, d in collect(b, view).items():
        name = label(view, key, pid, table) if view != "conn" else str(key)
        exact = sorted(lat_by.get((view, key), ())) if lat_by is not None else None
        n = d["count"]
        if exact:
            p50, p99 = pct_exact(exact, 0.50), pct_exact(exact, 0.99)
        else:
            p50 = pct_from_hist(d["vals"], 0.50, d["max_ns"])
            p99 = pct_from_hist(d["vals"], 0.99, d["max_ns"])
        e = {"count": n, "avg_ns": int(round(d["sum_ns"] / n)) if n else 0,
             "p50_ns": p50, "p99_ns": p99, "max_ns": d["max_ns"],
             "hist": json_hist(d["vals"]), "requests": d["requests"]}
        if view == "conn":
            e["fd"] = key
            e["peer"] = peer_of(pid, key, table)
        out[name] = e
    return out


def json_report(b, pid, totals, lat_by):
    table = peers(pid)
    rep = {"time": round(time.time(), 6),
           "by_command": json_view(b, "cmd", pid, lat_by, table),
           "by_op": json_view(b, "op", pid, lat_by, table),
           "by_conn": json_view(b, "conn", pid, lat_by, table)}
    rep.update(totals)
    return rep


# ---- main ------------------------------------------------------------------

def positive_int(val):
    try:
        ival = int(val)
    except ValueError:
        raise argparse.ArgumentTypeError("must be an integer")
    if ival <= 0:
        raise argparse.ArgumentTypeError("must be positive")
    return ival


def positive_float(val):
    try:
        fval = float(val)
    except ValueError:
        raise argparse.ArgumentTypeError("must be a number")
    if fval <= 0:
        raise argparse.ArgumentTypeError("must be positive")
    return fval


examples = """examples:
    ./mongolatency.py -p 181          # latency histograms per opcode, Ctrl-C ends
    ./mongolatency.py -p 181 -C       # one histogram per command (find, insert...)
    ./mongolatency.py -p 181 -c       # one histogram per connection (fd, peer)
    ./mongolatency.py -p 181 -Cu 1 10 # per command, usecs, 1 s summaries, 10 times
    ./mongolatency.py -p 181 -mT 5    # msecs, 5 s summaries with timestamps
    ./mongolatency.py -p 181 -j -d 30 # one JSON summary after 30 seconds
    ./mongolatency.py -p 181 -j 1     # one JSON summary per second
    ./mongolatency.py -p 181 --events req.jsonl -d 60  # + one JSON line per request
"""


def parse_args(argv=None):
    parser = argparse.ArgumentParser(
        description="Summarize MongoDB wire-protocol request latency "
                    "(server side) as histograms",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=examples)
    parser.add_argument("-p", "--pid", type=positive_int, required=True,
        help="trace this server process (tgid) only")
    parser.add_argument("-O", "--opcodes", action="store_true",
        help="a histogram per opcode (the default view)")
    parser.add_argument("-C", "--commands", action="store_true",
        help="a histogram per command name")
    parser.add_argument("-c", "--connections", action="store_true",
        help="a histogram per connection (fd and peer address)")
    units = parser.add_mutually_exclusive_group()
    units.add_argument("-m", "--milliseconds", action="store_true",
        help="millisecond histograms")
    units.add_argument("-u", "--microseconds", action="store_true",
        help="microsecond histograms")
    parser.add_argument("-j", "--json", action="store_true",
        help="one JSON object per interval: by_command, by_op, by_conn "
             "(nanoseconds), lost, counts")
    parser.add_argument("-T", "--timestamp", action="store_true",
        help="include a timestamp on interval output")
    parser.add_argument("--events", metavar="FILE",
        help="also write one JSON line per request to FILE")
    parser.add_argument("-d", "--duration", type=positive_float, metavar="SECONDS",
        help="total duration of the trace, in seconds")
    parser.add_argument("interval", nargs="?", type=positive_int,
        help="output interval, in seconds")
    parser.add_argument("count", nargs="?", type=positive_int,
        help="number of outputs")
    parser.add_argument("--ebpf", action="store_true",
        help=argparse.SUPPRESS)
    return parser.parse_args(argv)


def main(argv=None):
    tool = "mongolatency"
    args = parse_args(argv)
    views = []
    if args.opcodes:
        views.append("op")
    if args.commands:
        views.append("cmd")
    if args.connections:
        views.append("conn")
    if not views:
        views = ["op"]
    if args.json:
        kviews, factor, unit = ["op", "cmd", "conn"], 1, "nsecs"
    else:
        kviews = views
        if args.milliseconds:
            factor, unit = 1000000, "msecs"
        elif args.microseconds:
            factor, unit = 1000, "usecs"
        else:
            factor, unit = 1, "nsecs"
    events = args.events is not None

    if args.ebpf:
        print(bpf_text(args.pid, kviews, factor, events, True))
        return 0

    check_target(tool, args.pid)
    try:
        evfile = open(args.events, "w") if events else None
    except OSError as e:
        die(tool, "cannot write %s: %s" % (args.events, e.strerror))
    b, ringbuf = load(tool, args.pid, kviews, factor, events)
    clock = WallClock()

    # exact latencies per (view, key) of this interval, from the events
    lat_by = {} if events and args.json else None
    ev_reader = None
    if events:
        def on_event(ev):
            d = event_dict(ev, clock)
            evfile.write(json.dumps(d) + "\n")
            if lat_by is not None:
                for view, key in (("op", ev.opcode), ("cmd", d["command"]),
                                  ("conn", ev.fd)):
                    lat_by.setdefault((view, key), []).append(ev.latency_ns)
        ev_reader = Events(b, ringbuf, on_event)

    on_sigterm()
    # The banner goes to stderr in JSON mode so stdout stays data, and readers
    # still learn that the programs are attached.
    print("Tracing MongoDB wire protocol of PID %d (%s syscalls)... "
          "Hit Ctrl-C to end." % (args.pid, SYSCALLS),
          file=sys.stderr if args.json else sys.stdout)
    sys.stdout.flush()
    sys.stderr.flush()

    start = time.monotonic()
    end = start + args.duration if args.duration else None
    interval = args.interval
    countdown = args.count
    next_print = start + interval if interval else None
    exiting = False
    gone = False
    last_check = start

    def report(final):
        if ev_reader:
            ev_reader.drain()
            evfile.flush()
        totals = read_counts(b, final, ev_reader.lost if ev_reader else 0)
        if args.json:
            print(json.dumps(json_report(b, args.pid, totals, lat_by)))
        else:
            if args.timestamp:
                print("\n%s" % time.strftime("%H:%M:%S"), end="")
            print_text(b, views, args.pid, unit, totals)
        sys.stdout.flush()
        if lat_by is not None:
            lat_by.clear()
        if ev_reader:
            ev_reader.lost = 0
        return totals

    dropped_total = 0
    while True:
        try:
            now = time.monotonic()
            stops = [t for t in (next_print, end) if t is not None]
            wait = max(0.0, min(stops) - now) if stops else 1.0
            wait = min(wait, 1.0)
            if ev_reader:
                ev_reader.poll(int(wait * 1000))
            else:
                time.sleep(wait)
            now = time.monotonic()
            if now - last_check >= 1.0:
                last_check = now
                if not alive(args.pid):
                    gone = True
            if end is not None and now >= end:
                exiting = True
            elif next_print is not None and now >= next_print:
                next_print += interval
                if countdown is not None:
                    countdown -= 1
                    if countdown == 0:
                        exiting = True
            else:
                if not gone:
                    continue
                exiting = True
        except KeyboardInterrupt:
            exiting = True
            signal.signal(signal.SIGINT, signal.SIG_IGN)
            signal.signal(signal.SIGTERM, signal.SIG_IGN)
            if not args.json:
                print()
        if gone:
            print("%s: PID %d exited" % (tool, args.pid), file=sys.stderr)
        totals = report(exiting)
        dropped_total += totals["lost"]["dropped"]
        if exiting:
            break
        clear(b, kviews)

    if evfile:
        evfile.close()
    dropped_hint(tool, dropped_total, ringbuf)
    return 0


if __name__ == "__main__":
    sys.exit(main())
