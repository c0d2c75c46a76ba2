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
# writev, sendto, sendmsg (replies), and sys_enter_close (frees a connection's
# state). The pid filter runs in the kernel. Checked on FerretDB v1.24.0
# (read() of 4 KiB buffers, replies with write()): the per-command counts
# equal the deltas of its ferretdb_client_requests_total exactly. Checked on
# raw-socket servers in mongod's pattern (recvmsg of the 16-byte header, then
# of the body; replies with sendmsg), with readv/writev, recvfrom/sendto, and
# replies split across writes (tests/wireserver.py), driven by pymongo 4.20
# and raw clients (OP_QUERY, OP_COMPRESSED, kind-1-first OP_MSG, moreToCome,
# exhaust streams, pipelining, a 100 KB insert).
#
# Example (FerretDB v1.24.0; 8 pymongo threads inserting 6-24 KB documents,
# find with batch_size=2, aggregate, count, update, delete; -C -u; the zero
# rows atop each histogram and most sections cut, the banner wrapped):
#
#   # ./mongolatency.py -p 9938 -C -u
#   Tracing MongoDB wire protocol of PID 9938 (read/readv/recvfrom/recvmsg/
#   write/writev/sendto/sendmsg syscalls)... Hit Ctrl-C to end.
#   ^C
#   [...]
#   command = getMore
#        usecs               : count     distribution
#          256 -> 511        : 11       |*********                     |
#          512 -> 1023       : 41       |***************************   |
#         1024 -> 2047       : 46       |******************************|
#         2048 -> 4095       : 38       |*************************     |
#         4096 -> 8191       : 35       |***********************       |
#         8192 -> 16383      : 18       |***********                   |
#        16384 -> 32767      : 3        |*                             |
#   count 192  avg 3543 us
#
#   command = ismaster
#        usecs               : count     distribution
#           32 -> 63         : 10       |******************************|
#           64 -> 127        : 4        |************                  |
#          128 -> 255        : 1        |***                           |
#          256 -> 511        : 1        |***                           |
#   count 16  avg 94 us
#   [...]
#   requests: 808  replies: 808  stream replies: 0  no-reply (moreToCome): 0
#   lost: unmatched replies 0, requests without reply 0, malformed headers 0,
#   dropped events 0
#
# (The star bars are shortened here to fit; the footer's second line is one
# line in the real output.) Each section is one opcode (-O, the default),
# command (-C) or connection (-c: fd and peer); "count" is the number of timed
# requests (those that got a reply), "avg" their mean. The handshakes
# (ismaster) answer in tens of microseconds, the getMores of 2-document
# batches mostly in 0.5-8 ms on this busy 2-core machine. The footer is always
# printed: requests = replies + no-reply + requests without reply (+ requests
# still being received when tracing stopped); stream replies are the further
# replies of exhaust (moreToCome) streams; an unmatched reply answers nothing
# the probe saw (a request received before tracing began, or the reply
# FerretDB sends to a moreToCome request, which the protocol says gets none).
# Here the 808 requests matched FerretDB's request metrics command by command.
#
# -j prints one JSON object per interval (and at the end): by_command, by_op,
# by_conn ({"count", "avg_ns", "p50_ns", "p99_ns", "max_ns", "requests",
# "hist": [{"lo_ns", "hi_ns", "count"}]}; p50/p99 interpolated in the log2
# buckets, exact from the events with --events), requests_by_command,
# requests_by_op, lost, counts. The kernel counters are cumulative and the
# intervals their differences: interval reports add up to the run exactly.
#
# Overhead: every read/write-family syscall of the target pid runs two
# tracepoint programs and one hash update/delete (per-thread arguments); on a
# known connection, a bounded header decode and a few map updates per
# message. Nothing reaches user space per request unless --events is given
# (then one ring-buffer record per request). Files, pipes and unknown sockets
# stop at the first invalid header. Measured here: a pipe write()+read() pair
# of the traced pid went from 300 to 590 ns (~140 ns per traced syscall); a
# pymongo ping loop on FerretDB (~13,000 requests/s) ran at 0.97x its
# untraced rate (mean of 5 alternating runs; run-to-run noise was +-20% on
# this shared 2-core machine). Measure it as a ratio of alternating runs.
#
# Caveats:
# - readv/writev/recvmsg/sendmsg: only the first iovec is decoded; a header
#   beyond it counts as malformed (a reply written with writev as header and
#   body iovecs is framed, but its moreToCome flag is not seen).
# - A request header split across two receives (1-15 bytes at the end of a
#   receive) counts as malformed, and the connection's framing restarts at the
#   next receive that begins with a valid header (one count per desync); so do
#   more than 8 messages in one receive or send. The analyzer's stream decoder
#   handles both. Reply headers split across sends are completed.
# - At most 4 requests outstanding per connection: a 5th before any reply
#   evicts the oldest (a request without reply; its reply is unmatched).
# - OP_COMPRESSED bodies carry no readable command name: "[compressed]".
#   Names are read as at most 32 bytes (31 characters); an OP_MSG whose body
#   section is not in the bytes read is named "[unknown]".
# - Not traced: recvmmsg/sendmmsg, sendfile/splice, io_uring, TLS (the bytes
#   seen are encrypted: nothing decodes). Connections accepted before tracing
#   started are picked up at their next receive that starts with a header.
# - -c keys connections by (pid, fd): a reused fd adds to the same row; the
#   peer address is resolved from /proc when printing ("(closed)" if gone).
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


def raw_counts(b):
    """The cumulative counters (never cleared: intervals are differences)."""
    t = b["counts"]
    return [int(t.sum(ct.c_int(i)).value) for i in range(8)]


def read_counts(b, final, extra_dropped=0, cur=None, prev=None):
    """Counters since prev (raw_counts of the last report; None: since the
    start); at the end, requests still outstanding are lost too."""
    v = cur if cur is not None else raw_counts(b)
    if prev is not None:
        v = [a - p for a, p in zip(v, prev)]
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
    """[lo, hi) of log2 slot i (bpf_log2l: 0 holds 0, i >= 1 holds 2**(i-1)..2**i - 1),
    hi exclusive as everywhere in mongoprobe's JSON ("hist": [{"lo_ns", "hi_ns"}])."""
    if i == 0:
        return 0, 1
    return 1 << (i - 1), 1 << i


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
    # view: (histogram map, stats map, max map, section header,
    #        key of a hist entry, key of a stats/max entry)
    "op": ("hist_op", "stats_op", "max_op", "opcode",
           lambda k: int(k.key), lambda k: int(k.value)),
    "cmd": ("hist_cmd", "stats_cmd", "max_cmd", "command",
            lambda k: cmdname(k.cmd), lambda k: cmdname(k.cmd)),
    "conn": ("hist_conn", "stats_conn", "max_conn", "conn",
             lambda k: int(k.key) & 0xffffffff,
             lambda k: int(k.value) & 0xffffffff),
}


def collect(b, view):
    """Cumulative {key: {"vals", "requests", "count", "sum_ns"}} of a view."""
    hname, sname, _, _, hkey, skey = VIEWS[view]
    vals = hist_vals(b[hname], hkey)
    out = {}
    for k, s in b[sname].items():
        key = skey(k)
        if key in out:                  # two kernel keys that decode alike: add up
            d = out[key]
            d["requests"] += int(s.requests)
            d["count"] += int(s.count)
            d["sum_ns"] += int(s.sum_ns)
            continue
        out[key] = {"vals": vals.pop(key, [0] * 65),
                    "requests": int(s.requests), "count": int(s.count),
                    "sum_ns": int(s.sum_ns)}
    for key, v in vals.items():         # stats entry lost to a full map
        out[key] = {"vals": v, "requests": 0, "count": sum(v), "sum_ns": 0}
    return out


class Aggregates(object):
    """The in-kernel aggregates of one report: histograms, counts and sums
    are cumulative in the kernel and differenced here (an interval loses
    nothing to a clearing race); the max maps are cleared at each report."""

    def __init__(self, b, views):
        self.b = b
        self.views = views
        self.prev = dict((v, {}) for v in views)
        self.prev_counts = None
        self.cur = {}
        self.cur_counts = None

    def view(self, view):
        """{key: {"vals", "requests", "count", "sum_ns", "max_ns"}} since the
        last report, keys without activity left out."""
        cur = collect(self.b, view)
        self.cur[view] = cur
        prev = self.prev.get(view, {})
        skey = VIEWS[view][5]
        maxes = {}
        for k, v in self.b[VIEWS[view][2]].items():
            maxes[skey(k)] = max(maxes.get(skey(k), 0), int(v.value))
        out = {}
        for key, d in cur.items():
            p = prev.get(key)
            if p:
                d = {"vals": [a - c for a, c in zip(d["vals"], p["vals"])],
                     "requests": d["requests"] - p["requests"],
                     "count": d["count"] - p["count"],
                     "sum_ns": d["sum_ns"] - p["sum_ns"]}
            else:
                d = dict(d)
            if d["requests"] or d["count"]:
                d["max_ns"] = maxes.get(key, 0)
                out[key] = d
        return out

    def totals(self, final, extra_dropped=0):
        self.cur_counts = raw_counts(self.b)
        return read_counts(self.b, final, extra_dropped, self.cur_counts,
                           self.prev_counts)

    def advance(self):
        """The next report starts from here."""
        for v in self.views:
            if v in self.cur:
                self.prev[v] = self.cur[v]
            self.b[VIEWS[v][2]].clear()
        self.cur = {}
        if self.cur_counts is not None:
            self.prev_counts = self.cur_counts


def label(view, key, pid, table):
    if view == "op":
        return opname(key)
    if view == "conn":
        return "fd %d %s" % (key, peer_of(pid, key, table))
    return key


def print_text(agg, views, pid, unit, totals):
    table = peers(pid) if "conn" in views else {}
    div = {"nsecs": 1, "usecs": 1000, "msecs": 1000000}[unit]
    for view in views:
        data = agg.view(view)
        keys = sorted(data, key=lambda k: (label(view, k, pid, table)
                                           if view != "conn" else k))
        for key in keys:
            d = data[key]
            if d["count"] == 0:
                continue
            print("\n%s = %s" % (VIEWS[view][3], label(view, key, pid, table)))
            if _print_log2_hist is not None:
                _print_log2_hist(d["vals"], unit, None)
            avg = d["sum_ns"] / d["count"] / div
            print("count %d  avg %d %s" % (d["count"], int(round(avg)),
                                          UNIT_ABBR[unit]))
    print()
    footer(totals)


def json_view(agg, view, pid, lat_by, table):
    out = {}
    for key, d in agg.view(view).items():
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


def json_report(agg, pid, totals, lat_by):
    table = peers(pid)
    rep = {"time": round(time.time(), 6),
           "by_command": json_view(agg, "cmd", pid, lat_by, table),
           "by_op": json_view(agg, "op", pid, lat_by, table),
           "by_conn": json_view(agg, "conn", pid, lat_by, table)}
    # complete requests (replied or not), as the bpftrace tools count them
    for view in ("command", "op"):
        rep["requests_by_" + view] = {k: v["requests"] for k, v in
                                      rep["by_" + view].items() if v["requests"]}
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
    ./mongolatency.py -p 181          # histograms per opcode; Ctrl-C ends
    ./mongolatency.py -p 181 -C       # one histogram per command (find...)
    ./mongolatency.py -p 181 -c       # one per connection (fd and peer)
    ./mongolatency.py -p 181 -Cu 1 10 # per command, usecs, 1 s, 10 times
    ./mongolatency.py -p 181 -mT 5    # msecs, 5 s summaries, timestamps
    ./mongolatency.py -p 181 -j -d 30 # one JSON summary after 30 seconds
    ./mongolatency.py -p 181 -j 1     # one JSON summary per second
    ./mongolatency.py -p 181 --events req.jsonl -d 60
                                      # and one JSON line per request
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
    agg = Aggregates(b, kviews)

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
        totals = agg.totals(final, ev_reader.lost if ev_reader else 0)
        if args.json:
            print(json.dumps(json_report(agg, args.pid, totals, lat_by)))
        else:
            if args.timestamp:
                print("\n%s" % time.strftime("%H:%M:%S"), end="")
            print_text(agg, views, args.pid, unit, totals)
        agg.advance()
        sys.stdout.flush()
        if lat_by is not None:
            lat_by.clear()
        if ev_reader:
            ev_reader.lost = 0
        return totals

    # Ctrl-C or SIGTERM while a report prints: finish it, then the last one
    stop = {"now": False}

    def deferred(signum, frame):
        stop["now"] = True

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
                    gone = exiting = True
            if end is not None and now >= end:
                exiting = True
            elif next_print is not None and now >= next_print:
                next_print += interval
                if countdown is not None:
                    countdown -= 1
                    if countdown == 0:
                        exiting = True
            elif not exiting:
                continue
        except KeyboardInterrupt:
            exiting = True
            if not args.json:
                print()
        signal.signal(signal.SIGINT, deferred)
        signal.signal(signal.SIGTERM, deferred)
        if gone:
            print("%s: PID %d exited" % (tool, args.pid), file=sys.stderr)
        if not exiting:
            dropped_total += report(False)["lost"]["dropped"]
            exiting = stop["now"]
        if exiting:
            # the last report, and the detaching of the probes, are not cut
            # short by a second Ctrl-C/SIGTERM
            signal.signal(signal.SIGINT, signal.SIG_IGN)
            signal.signal(signal.SIGTERM, signal.SIG_IGN)
            dropped_total += report(True)["lost"]["dropped"]
            break
        on_sigterm()

    if evfile:
        evfile.close()
    dropped_hint(tool, dropped_total, ringbuf)
    return 0


if __name__ == "__main__":
    sys.exit(main())
