#!/usr/bin/python3
# @lint-avoid-python-3-compatibility-imports
#
# mongosnoop    Trace MongoDB wire-protocol requests: one line per request.
#               For Linux, uses BCC, eBPF.
#
# USAGE: mongosnoop.py -p PID [-h] [-j] [-d SECONDS] [--max-connections N]
#                       [--tls auto|on|off]
#
# One line per request of a MongoDB-protocol server, written when its first
# reply is sent: time, pid, tid (of the thread that sent the reply), fd,
# requestID, opcode, command name, request and first-reply sizes, and the
# server-side latency (return of the receive that completed the request to the
# entry of the send that carries the reply). With -j, one JSON object per line
# with the fields time (wall clock, epoch seconds), pid, tid, fd, request_id,
# opcode, command, bytes_in, bytes_out, latency_ns, stream.
#
# It loads the same in-kernel decoder as mongolatency.py (probes/mongo_wire.h):
# syscall tracepoints only - sys_enter/sys_exit of read, readv, recvfrom,
# recvmsg, write, writev, sendto, sendmsg, and sys_enter_close - with the pid
# filtered in the kernel, and one ring-buffer record per request (perf buffer
# when the kernel has no ring buffer). Checked on FerretDB v1.24.0 (read() and
# write(); one line per request counted by its ferretdb_client_requests_total)
# and on raw-socket servers in mongod's pattern (recvmsg of the header, then
# the body; sendmsg) and with readv/writev, driven by pymongo 4.20.
#
# Example (FerretDB v1.24.0, 8 pymongo threads: the same run as the example
# in mongolatency.py; lines cut):
#
#   # ./mongosnoop.py -p 9938
#   Tracing MongoDB wire protocol of PID 9938 (read/readv/recvfrom/recvmsg/
#   write/writev/sendto/sendmsg syscalls)... Hit Ctrl-C to end.
#   TIME(s)  PID    TID    FD  REQID      OPCODE   COMMAND      BYTES_IN BYTES_OUT  LAT(us)
#   3.853    9938   14769  7   1804289383 OP_MSG   ismaster          330       252   155.80
#   3.854    9938   14769  20  846930886  OP_MSG   ismaster          330       252    52.66
#   3.901    9938   9945   24  1100661313 OP_MSG   getMore           129        97   450.53
#   3.901    9938   14770  62  805750846  OP_MSG   delete            149        45  2478.75
#   3.902    9938   14770  22  1159126505 OP_MSG   update            181        60  3475.33
#   3.911    9938   14767  22  1889947178 OP_MSG   insert          24238        45  1201.13
#   3.912    9938   9945   62  945117276  OP_MSG   find              137     12173  1494.50
#   [...]
#   requests: 808  replies: 808  stream replies: 0  no-reply (moreToCome): 0
#   lost: unmatched replies 0, requests without reply 0, malformed headers 0,
#   dropped events 0
#
# (The footer's second line is one line in the real output.) The 24238-byte
# insert spanned several 4 KiB reads of FerretDB; its latency runs from the
# read that completed it. The fds of one pymongo connection recur with
# different requestIDs; TID is whichever Go runtime thread wrote the reply.
# TIME(s) is the time of the reply since tracing began. The footer is the loss
# accounting of mongolatency.py. With -j the banner and the footer go to
# stderr, so stdout holds nothing but events.
#
# Overhead: as mongolatency.py, plus one ring-buffer record and one line of
# Python per request; at tens of thousands of requests per second the reader
# can fall behind and records are dropped - counted as "dropped events".
#
# TLS: --tls auto|on|off, as mongolatency.py (its header says what is hooked
# and how; probes/README.md, "TLS plaintext"): OpenSSL and Go crypto/tls
# plaintext decoded through uprobes.
#
# Caveats: only the first iovec of readv/writev/recvmsg/sendmsg is decoded; a
# request header split across receives counts as malformed (reply headers
# split across sends are completed); compressed bodies have no command name
# ("[compressed]"); at most 8 messages per receive or send and 4 outstanding
# requests per connection. Lines are wider than 80 columns (10 fields).
# Requests with moreToCome (no reply) and further replies of an exhaust stream
# get no line: they are counted in the footer. --max-connections N (default
# 10,000) sizes the connection map as in mongolatency.py (14.4 MB of kernel
# memory, printed at start; a full map is named at the end with the fix).
#
# Copyright 2025 mongoprobe authors.
# Licensed under the Apache License, Version 2.0 (the "License")
#
# 2025          mongoprobe      Created this.

from __future__ import print_function

import argparse
import json
import os
import signal
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import mongolatency as mw  # noqa: E402  (shared loader, events)
wf = mw.wf  # mongoprobe's wirefacts (opcode names, the footer), as mongolatency found it

examples = """examples:
    ./mongosnoop.py -p 181           # one line per request, Ctrl-C ends
    ./mongosnoop.py -p 181 -d 10     # trace for 10 seconds
    ./mongosnoop.py -p 181 -j > r.jsonl  # JSON lines (footer on stderr)
"""

HDR = "%-8s %-6s %-6s %-3s %-10s %-8s %-12s %8s %9s %8s"


def parse_args(argv=None):
    parser = argparse.ArgumentParser(
        description="Trace MongoDB wire-protocol requests, one line each",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=examples)
    parser.add_argument("-p", "--pid", type=mw.positive_int, required=True,
        help="trace this server process (tgid) only")
    parser.add_argument("-j", "--json", action="store_true",
        help="one JSON object per request")
    parser.add_argument("-d", "--duration", type=mw.positive_float, metavar="SECONDS",
        help="total duration of the trace, in seconds")
    parser.add_argument("--max-connections", type=mw.positive_int,
        default=mw.MAX_CONNECTIONS, metavar="N",
        help="connections traced at once: sizes the kernel maps (default %d)"
             % mw.MAX_CONNECTIONS)
    mw.add_tls_option(parser)
    parser.add_argument("--ebpf", action="store_true",
        help=argparse.SUPPRESS)
    return parser.parse_args(argv)


def main(argv=None):
    tool = "mongosnoop"
    args = parse_args(argv)
    if args.ebpf:
        print(mw.bpf_text(args.pid, events=True, max_conns=args.max_connections,
                          tls=mw.tls_hooks(tool, args.pid, args.tls)))
        return 0
    mw.check_target(tool, args.pid)
    tls = mw.tls_hooks(tool, args.pid, args.tls)
    b, ringbuf = mw.load(tool, args.pid, events=True, max_conns=args.max_connections,
                         tls=tls)
    clock = mw.wall_clock()
    t0 = time.clock_gettime_ns(time.CLOCK_MONOTONIC)
    out = sys.stdout

    def on_event(data, _size):
        ev = mw.as_event(data)
        if args.json:
            out.write(json.dumps(mw.event_dict(ev, clock, args.pid)) + "\n")
        else:
            out.write((HDR + "\n") % (
                "%.3f" % ((ev.ts - t0) / 1e9), args.pid, ev.tid, mw.conn_id(ev.fd),
                ev.request_id, wf.opcode_name(ev.opcode), mw.cmdname(ev.cmd),
                ev.bytes_in, ev.bytes_out, "%.2f" % (ev.latency_ns / 1e3)))

    events = mw.Events(b, ringbuf, on_event)
    mw.on_sigterm()
    print(mw.sizing_line(tool, args.max_connections, False), file=sys.stderr)
    # In JSON mode the banner goes to stderr: stdout stays data.
    print("Tracing MongoDB wire protocol of PID %d (%s syscalls)... "
          "Hit Ctrl-C to end." % (args.pid, mw.SYSCALLS),
          file=sys.stderr if args.json else sys.stdout, flush=True)
    if not args.json:
        print(HDR % ("TIME(s)", "PID", "TID", "FD", "REQID", "OPCODE",
                     "COMMAND", "BYTES_IN", "BYTES_OUT", "LAT(us)"))
    out.flush()

    start = time.monotonic()
    end = start + args.duration if args.duration else None
    last_check = start
    gone = False
    try:
        while True:
            wait = 0.25
            if end is not None:
                wait = max(0.0, min(wait, end - time.monotonic()))
            events.poll(int(wait * 1000))
            out.flush()
            now = time.monotonic()
            if end is not None and now >= end:
                break
            if now - last_check >= 1.0:
                last_check = now
                # the kernel's per-second aggregates are not shown here: read
                # and dropped, so their map never fills
                mw.take_slices(b)
                if not mw.alive(args.pid):
                    gone = True
                    break
    except KeyboardInterrupt:
        pass
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    events.drain()
    out.flush()
    if gone:
        print("%s: PID %d exited" % (tool, args.pid), file=sys.stderr)
    totals = mw.read_counts(mw.raw_counts(b), events.lost, mw.outstanding(b), args.pid,
                            fresh=True)
    totals["answered_no_reply_by_command"] = mw.answered_by_command(b)
    if args.json:
        mw.footer(totals, sys.stderr)
    else:
        print()
        mw.footer(totals)
    mw.dropped_hint(tool, totals["lost"]["dropped"] - sum(totals["full"].values()), ringbuf)
    mw.full_hint(tool, mw.raw_counts(b), args.max_connections)
    mw.detach_at_once(b)
    return 0


if __name__ == "__main__":
    sys.exit(main())
