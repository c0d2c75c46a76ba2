#!/usr/bin/python3
# @lint-avoid-python-3-compatibility-imports
#
# mongolatency  Summarize MongoDB wire-protocol request latency as histograms.
#               For Linux, uses BCC, eBPF.
#
# USAGE: mongolatency.py -p PID [-h] [-O] [-C] [-c] [-m|-u] [-j] [-T]
#                        [--events FILE] [-d SECONDS] [--max-connections N]
#                        [--tls auto|on|off]
#                        [interval [count]]
#
# Server-side latency of each request of a MongoDB-protocol server (mongod,
# mongos, FerretDB, ...): from the return of the receive syscall that completed
# the request message to the entry of the send syscall carrying the first bytes
# of its reply. The wire protocol is decoded in the kernel (probes/mongo_wire.h,
# shared with mongosnoop.py): a state machine per connection (pid, fd) frames
# receives and sends into messages, reads each request's command name, and
# matches replies to requests by responseTo. Latencies are aggregated in the
# kernel as log-linear histograms (32 buckets per power of two) per second and
# (command, opcode) or connection; only counts and sums cross to user space,
# printed per opcode (default, -O), per command (-C) or per connection (-c) as
# bcc's log2 tables.
#
# Hooks (syscall tracepoints only, the target kernel has no kprobes):
# sys_enter/sys_exit of read, readv, recvfrom, recvmsg (requests) and write,
# writev, sendto, sendmsg (replies), and sys_enter_close (frees a connection's
# state); sys_enter_recvmmsg, sendmmsg and io_uring_enter are only counted (a
# "not traced:" line under the footer says so: probes/README.md). The pid filter runs in the kernel. Checked on FerretDB v1.24.0
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
# by_conn ({"count", "avg_ns", "p50_ns", "p95_ns", "p99_ns", "max_ns",
# "requests", "errors", "error_codes", "hist": [{"lo_ns", "hi_ns", "count"}]};
# errors: the replies with ok: 0, per code in error_codes (probes/README.md,
# "Replies that failed"; the text output adds "errors N (59 CommandNotFound: n)"
# to the count line); percentiles are nearest-rank: exact from the events with
# --events, else the middle of the log-linear bucket [lo_ns, hi_ns) of that
# rank, within 1.6%, at most the exact max (mongoprobe's wirefacts.stats, the
# statistic of every mongoprobe view), requests_by_command,
# requests_by_op, lost, counts. The kernel counters are cumulative and the
# intervals their differences: interval reports add up to the run exactly.
#
# Overhead: a receive of the target runs one program (at its exit: the
# arguments come from the saved registers), a send two (write and sendto are
# framed at entry; the exit only checks that every byte went out); each other process's
# read/write-family syscalls run the pid filter only. Per request: one
# connection lookup per program (an array slot by fd: inlined, no hash), state
# changed in place, and one per-CPU (second, command, opcode) entry updated at
# the reply (a per-CPU array slot, a hash behind it); nothing reaches user
# space unless --events is given (then one ring-buffer record per request,
# read every 100 ms without waking the reader). Measured with the kernel's
# bpf_stats (bench/probe_cost.py, 8-connection find_one load): 0.92-0.99 us of
# BPF time per request on mongo-java-server (7 program runs, 0.93-0.97x its
# untraced throughput, the programs that only test the pid 0.95-0.98x), 1.05 us
# with --events; 2.0 us on FerretDB (8 runs, their floor 0.74 us; its Go
# runtime leaves the caches colder). The runs of the pid filter alone cost
# about 60-100 ns each on this VM.
#
# OP_COMPRESSED requests: the histograms key them [compressed]; with --events
# their events name the command, decompressed here from the request's first
# 128 bytes (snappy, zlib; zstd with python3-zstandard when the body fits).
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
# - Not traced: recvmmsg/sendmmsg, sendfile/splice, io_uring. Connections
#   accepted before tracing started are picked up at their next receive that
#   starts with a header.
# - TLS (--tls auto, the default; on; off): the plaintext of the target's TLS
#   library is decoded through uprobes (probes/mongo_tls.h, probes/tlshooks.py):
#   OpenSSL's SSL_read/SSL_write/SSL_read_ex/SSL_write_ex (uprobe and uretprobe;
#   libssl mapped by the target, or linked into its executable) and Go's
#   crypto/tls (*Conn).Read/Write (uprobes at entry and at the RET instructions,
#   found with objdump). The connection is the fd of the read/write made inside
#   the call (or the last one of its SSL */tls.Conn). A server that drives
#   OpenSSL through memory BIOs (asio, mongod) makes none: its connections are
#   keyed by their SSL *, forgotten at SSL_free (a uprobe), and named by the fd
#   of the send that follows SSL_write on the thread (-c rows and events show
#   it; "ssl #N (TLS on memory BIOs: socket not known)" when none was seen).
#   A request completes at the read call's return, a
#   reply is timed at the write call's entry (the crypto is left out). With a
#   TLS library hooked, every read/write of the target runs one more program,
#   stopped at once while no TLS call is in flight. Checked on FerretDB v1.24.0
#   (Go crypto/tls, pymongo over TLS: counts equal its metrics) and on
#   tests/wireserver.py --tls (Python's ssl: libssl.so.3, SSL_read_ex/
#   SSL_write_ex) in mongod's header-then-body pattern, buffered reads and
#   split replies, and with --tls-bio memory (asyncio's transport: memory BIOs).
# - -c keys connections by (pid, fd): a reused fd adds to the same row; the
#   peer address is resolved from /proc when printing ("(closed)" if gone).
# - --max-connections N (default 10,000) sizes the maps: conns (2N slots: one
#   for each fd below N, N for larger fds and TLS plaintext; preallocated:
#   14.4 MB of kernel memory at the default on 2 CPUs, printed at start); with
#   -c, lat_conn (3N per-connection aggregates of 4 KB, allocated as used: up
#   to 79 MB while 10,000 connections are busy). A connection with no slot
#   left is not traced: its requests count as dropped, and the end says
#   "map conns full: ... raise --max-connections" once.
#
# Copyright 2025 mongoprobe authors.
# Licensed under the Apache License, Version 2.0 (the "License")
#
# 2025          mongoprobe      Created this.

from __future__ import print_function

import argparse
import array
import ctypes as ct
import json
import os
import re
import signal
import struct
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
WIRE_H = os.path.join(HERE, "mongo_wire.h")
TLS_H = os.path.join(HERE, "mongo_tls.h")
# mongo_wire.h's programs that serve several syscalls (its "One program per
# decoding role" comment):
# attached by load() to the tracepoints beside their own
SHARED_PROGRAMS = {"sys_exit_read": ("sys_exit_readv", "sys_exit_recvfrom", "sys_exit_recvmsg"),
                   "sys_enter_write": ("sys_enter_sendto",),
                   "sys_exit_write": ("sys_exit_sendto",),
                   "sys_exit_writev": ("sys_exit_sendmsg",)}
sys.path.insert(0, HERE)
import tlshooks  # noqa: E402  (which TLS library the target uses, where to hook it)
from compressednames import compressed_command  # noqa: E402


def load_package_module(name):
    """mongoprobe's stdlib-only module NAME (wire.facts: opcodes, error codes, the
    footer, buckets, the statistic, /proc readers; model.clock: the clock offset):
    the analyzer's own copy, never a second one. Loaded by its path (packagefiles)
    so that the package's __init__ (which needs pandas) does not run under the
    system python3; the one already imported when the analyzer runs this tool
    in-process."""
    if "mongoprobe." + name in sys.modules:
        return sys.modules["mongoprobe." + name]
    from packagefiles import package_module
    return package_module(name)


wf = load_package_module("wire.facts")
UNIT_ABBR = {"nsecs": "ns", "usecs": "us", "msecs": "ms"}
UNIT_DIV = {"nsecs": 1, "usecs": 1000, "msecs": 1000000}
SYSCALLS = "read/readv/recvfrom/recvmsg/write/writev/sendto/sendmsg"
SLICE_NS = 1000000000           # the kernel's aggregation slice (MW_SLICE_NS)
GRACE_NS = 50000000             # a slice is read this long after it ends

# indexes of the "counts" array (mongo_wire.h C_*)
C_REQUESTS, C_REPLIES, C_STREAM, C_NOREPLY, C_UNMATCHED, C_NOREPLY_LOST, \
    C_MALFORMED, C_DROPPED, C_MMSG, C_URING, C_TLS, C_FULL_CONNS, C_FULL_LAT, \
    C_SPILLED, C_ANSWERED = range(15)
C_MAX = 15
# mongo_tls.h's "tls_counts", after C_MAX in raw_counts: TLS connections whose
# plaintext was decoded, calls with plaintext and no connection to key them by,
# calls with bytes; of the decoded connections, those keyed by their SSL *
# (memory BIOs), and of those, the ones tied to their socket's fd
T_DECODED, T_NOFD, T_CALLS, T_BIO, T_TIED = range(C_MAX, C_MAX + 5)
T_MAX = 5
MW_TLS_FD = 0x80000000          # conns/fd key bit of a TLS connection's plaintext
MW_TLS_SSL = 0x40000000         # with it: a memory-BIO connection, keyed by SSL *
# the TLS libraries this run hooked (load() sets it): [tlshooks.Hook]
TLS_HOOKED = []
# the maps whose filling C_FULL_* count (they are part of C_DROPPED too)
FULL_MAPS = ((C_FULL_CONNS, "conns", "requests on connections not traced"),
             (C_FULL_LAT, "lat_spill", "latencies not aggregated"))
MAX_CONNECTIONS = 10000         # --max-connections default
MW_SPILL = 64                   # lat_spill's keys without ring buffers (mongo_wire.h)
AGGS = 4096                     # aggregates (slice, command, opcode) at once
CACHE_SETS, CACHE_BITS = 4, 4     # lat_cache: 4 sets of 2^4 slots (mongo_wire.h)
CACHE_WAYS = 1 << CACHE_BITS

# Log-linear latency buckets (mongo_wire.h computes the index wirefacts.bucket
# gives): values below 32 ns are their own bucket; above, 32 sub-buckets per
# power of two; bucket b holds [lo, hi) = wirefacts.bounds(b). The kernel keeps
# buckets 0..NB-1; the last one also holds everything longer (2^36 ns and up).
SUB_BITS, NB = wf.SUB_BITS, wf.NB
bucket_bounds = wf.bounds


class MwEvent(ct.Structure):
    """struct mw_event of mongo_wire.h (72 bytes; --events-format raw writes it)."""
    _fields_ = [
        ("ts", ct.c_ulonglong), ("latency_ns", ct.c_ulonglong),
        ("cmd", ct.c_char * 24),
        ("tid", ct.c_uint), ("fd", ct.c_uint),
        ("request_id", ct.c_uint), ("opcode", ct.c_uint),
        ("bytes_in", ct.c_uint), ("bytes_out", ct.c_uint),
        ("stream", ct.c_uint), ("error_code", ct.c_int),
    ]


class MwName(ct.Union):
    _fields_ = [("c", ct.c_char * 24), ("w", ct.c_ulonglong * 3)]


class MwKey(ct.Structure):
    """struct mw_key of mongo_wire.h"""
    _fields_ = [("slice", ct.c_ulonglong), ("name", MwName),
                ("op", ct.c_uint), ("fd", ct.c_uint)]


class MwSpill(ct.Structure):
    """struct mw_spill of mongo_wire.h: one latency the maps had no room for"""
    _fields_ = [("k", MwKey), ("lat", ct.c_ulonglong), ("bucket", ct.c_uint),
                ("err", ct.c_int), ("timed", ct.c_uint), ("pad", ct.c_uint)]


def spill_pages(max_conns):
    """spill_rb's pages (a power of 2, at least 64): room for two records
    (80 bytes with the ring's header) per connection, a second's aggregates of
    every connection with -c and their commands' had none of them room in lat;
    2 MiB at the default --max-connections"""
    need = 2 * max_conns * 80 // 4096
    pages = 64
    while pages < need:
        pages *= 2
    return pages


RAW_MAGIC = b"mongoprobe-events-raw 1\n"

MW_PFX = 128                    # mongo_wire.h: bytes of a request kept for its name
CPFX_SIZE = 16 + MW_PFX         # struct mw_cpfx: an OP_COMPRESSED request's first bytes


# ---- compressed requests: the command name from a prefix (compressednames.py,
# shared with the analyzer's reader of mongo_latency.bt's events)

class CompressedNames(object):
    """Names of OP_COMPRESSED requests from their mw_cpfx records, put into
    their events (the record comes first: one ring buffer, in order)."""

    def __init__(self):
        self.names = {}
        self.recovered = self.unread = 0

    def record(self, data):
        raw = ct.string_at(data, CPFX_SIZE)
        fd, rid, _length, have = struct.unpack_from("<IIII", raw)
        name = compressed_command(raw[16:], min(have, MW_PFX))
        per_fd = self.names.setdefault(fd, {})
        if len(per_fd) >= 16:               # a sample's unmatched ones
            per_fd.pop(next(iter(per_fd)))
        per_fd[rid] = name

    def name(self, data, size):
        """data, or a copy of it naming its command (the ring buffer is
        read-only here), and the copy to keep alive while it is used"""
        ev = as_event(data)
        if ev.cmd != b"[compressed]":
            return data, None
        name = self.names.get(ev.fd, {}).pop(ev.request_id, None)
        if name is None:
            self.unread += 1
            return data, None
        self.recovered += 1
        copy = ct.create_string_buffer(ct.string_at(data, size), size)
        MwEvent.from_buffer(copy).cmd = name
        return ct.addressof(copy), copy


opname = wf.opcode_name


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


def bpf_text(pid, by_conn=False, events=False, ringbuf=True, sample=1,
             max_conns=MAX_CONNECTIONS, tls=()):
    """The program of mongo_wire.h with this run's switches; with tls (hooks of
    tlshooks.find), mongo_tls.h after it."""
    defs = ["#define MW_TARGET_PID %d" % pid, "#define MW_SLICE_NS %dULL" % SLICE_NS,
            "#define MW_CONNS %d" % max_conns, "#define MW_AGGS %d" % AGGS,
            "#define MW_CACHE_SETS %d" % CACHE_SETS, "#define MW_CACHE_BITS %d" % CACHE_BITS]
    kinds = set(h.kind for h in tls)
    if kinds:
        defs.append("#define MW_TLS 1")
    if "openssl" in kinds:
        defs.append("#define MW_TLS_OPENSSL 1")
        if all(h.free for h in tls if h.kind == "openssl"):
            # SSL_free forgets them: memory-BIO connections keyed by SSL *
            defs.append("#define MW_TLS_BIO 1")
    if "go" in kinds:
        defs.append("#define MW_TLS_GO 1")
    if by_conn:
        defs.append("#define MW_BY_CONN 1")
    if ringbuf:
        defs.append("#define MW_RINGBUF 1")
        defs.append("#define MW_SPILL_PAGES %d" % spill_pages(max_conns))
    if events:
        defs.append("#define MW_EVENTS 1")
        if sample > 1:
            defs.append("#define MW_SAMPLE %d" % sample)
    with open(WIRE_H) as f:
        text = "\n".join(defs) + "\n" + f.read()
    if tls:
        with open(TLS_H) as f:
            text += "\n" + f.read()
    return text


def tls_hooks(tool, pid, mode):
    """The TLS libraries to hook in pid for --tls mode (auto: those found; on:
    they must exist; off: none). Says on stderr what it hooks or why not."""
    if mode == "off":
        return []
    try:
        hooks = tlshooks.find(pid)
    except (OSError, tlshooks.TlsError) as e:
        if mode == "on":
            die(tool, "--tls on: %s" % e)
        print("%s: TLS library not hooked: %s" % (tool, e), file=sys.stderr)
        return []
    if mode == "on" and not hooks:
        die(tool, "--tls on: PID %d has no TLS library to hook (OpenSSL's libssl, "
                  "SSL_read in its executable, or Go's crypto/tls)" % pid)
    return hooks


def fix_uprobe_binding():
    """Debian's python3-bpfcc 0.26 declares libbcc's bpf_attach_uprobe with six
    arguments; the C function takes seven, the last ref_ctr_offset (the file
    offset of a USDT semaphore the kernel increments in the target's memory
    while the probe is on). The seventh then is whatever lies on the stack (6,
    here): the kernel takes it as a counter to write in the target, and refuses
    (EINVAL; "ref_ctr_offset mismatch" in dmesg) any later uprobe at the same
    address from another tracer (bpftrace, DTrace: 0), or ours after theirs.
    Called before attaching: bcc's calls then pass 0."""
    from bcc import libbcc
    f = libbcc.lib.bpf_attach_uprobe
    if len(getattr(f, "argtypes", None) or ()) != 6:
        return                  # a binding that passes ref_ctr_offset itself
    raw = ct.CDLL("libbcc.so.0", use_errno=True)["bpf_attach_uprobe"]
    raw.restype = ct.c_int
    raw.argtypes = list(f.argtypes) + [ct.c_uint32]
    libbcc.lib.bpf_attach_uprobe = lambda *args: raw(*(args + (0,)))


def detach_at_once(b):
    """Every syscall tracepoint and uprobe detached together, from threads, before
    bcc's cleanup detaches them one after another: the kernel waits at each perf
    event's close (the unregistering of its tracepoint or uprobe, about 0.1 s here),
    and concurrent waits overlap. The counts are read by then: nothing is lost."""
    jobs = ([(b.detach_tracepoint, tp) for tp in list(b.tracepoint_fds)]
            + [(b.detach_uprobe_event, ev) for ev in list(b.uprobe_fds)])
    threads = [threading.Thread(target=f, args=(arg,)) for f, arg in jobs]
    for t in threads:
        t.start()
    for t in threads:
        t.join()


def attach_tls(b, pid, hooks):
    """mongo_tls.h's programs: its tail-call targets and the library's
    functions (the syscall programs of mongo_wire.h, compiled with MW_TLS, hand
    the fds of nested socket syscalls to it)."""
    from bcc import BPF
    fix_uprobe_binding()
    jmp = b["mw_jmp_tls"]
    for i, name in enumerate(("mw_rx_more_tls", "mw_tx_more_tls", "mw_rx_frame_tls",
                              "mw_tx_frame_tls")):
        fn = b.load_func(name, BPF.KPROBE)
        jmp[ct.c_int(i)] = ct.c_int(fn.fd)
    for h in hooks:
        if h.kind == "openssl":
            for fn in h.funcs:
                ex = "_ex" if fn.endswith("_ex") else ""
                way = "write" if fn.startswith("SSL_write") else "read"
                b.attach_uprobe(name=h.path, sym=fn, pid=pid,
                                fn_name="mw_ssl_%s%s_enter" % (way, ex))
                b.attach_uretprobe(name=h.path, sym=fn, pid=pid,
                                   fn_name="mw_ssl%s_return" % ex)
            if h.free:
                b.attach_uprobe(name=h.path, sym=tlshooks.SSL_FREE, pid=pid,
                                fn_name="mw_ssl_free")
            continue
        for fn, enter in ((tlshooks.GO_READ, "mw_go_read_enter"),
                          (tlshooks.GO_WRITE, "mw_go_write_enter")):
            b.attach_uprobe(name=h.path, sym=fn, fn_name=enter, pid=pid)
            for off in h.rets[fn]:
                b.attach_uprobe(name=h.path, sym=fn, sym_off=off, fn_name="mw_go_return",
                                pid=pid)


def load(tool, pid, by_conn=False, events=False, sample=1, max_conns=MAX_CONNECTIONS,
         tls=()):
    """Compile, load and attach (tls: the hooks of tls_hooks); returns (bpf,
    ringbuf_used)."""
    from bcc import BPF
    err = None
    for ringbuf in (True, False):
        try:
            b = BPF(text=bpf_text(pid, by_conn, events, ringbuf, sample, max_conns, tls))
        except Exception as e:      # ringbuf unsupported: retry without
            err = e
            if ringbuf:
                print("%s: no ring buffer (%s): %sa burst of new aggregates "
                      "beyond %d keys is lost" % (
                          tool, str(e).splitlines()[-1],
                          "events go through the perf buffer, which wakes this "
                          "reader per event; " if events else "", MW_SPILL),
                      file=sys.stderr)
            continue
        if ringbuf:
            SPILL.set_bpf(b)
        # the slots of conns for keys other than fds below max_conns (mongo_wire.h)
        free = b["conn_free"]
        for i in range(max_conns, 2 * max_conns):
            free.push(ct.c_uint32(i))
        # the programs of mongo_wire.h that serve several syscalls ("One
        # program per decoding role")
        for prog, tps in SHARED_PROGRAMS.items():
            for tp in tps:
                b.attach_tracepoint(tp="syscalls:" + tp, fn_name="tracepoint__syscalls__" + prog)
        # the programs that decode the 2nd..8th message of one syscall
        jmp = b["mw_jmp"]
        for i, name in enumerate(("mw_rx_more", "mw_tx_more")):
            fn = b.load_func(name, BPF.TRACEPOINT)
            jmp[ct.c_int(i)] = ct.c_int(fn.fd)
        if tls:
            try:
                attach_tls(b, pid, tls)
            except Exception as e:  # bcc raises Exception for a failed attach
                die(tool, "cannot hook TLS (%s): %s" % (
                    "; ".join(h.describe() for h in tls), str(e).splitlines()[-1]))
            TLS_HOOKED[:] = tls
            SSL_FDS.set_bpf(b)
            for h in tls:
                print("%s: TLS plaintext from %s" % (tool, h.describe()), file=sys.stderr)
        return b, ringbuf
    die(tool, "cannot load the BPF program: %s" % str(err).splitlines()[-1])


def wall_clock():
    """bpf_ktime_get_ns() is CLOCK_MONOTONIC: the analyzer's clock offset to wall
    time (model.clock.Clock), measured now."""
    return load_package_module("model.clock").Clock.measure()


def event_dict(ev, clock, pid):
    return {
        "time": round(clock.wall_s(ev.ts), 6),
        "pid": pid, "tid": ev.tid, "fd": conn_id(ev.fd),
        "request_id": ev.request_id, "opcode": opname(ev.opcode),
        "command": cmdname(ev.cmd), "bytes_in": ev.bytes_in,
        "bytes_out": ev.bytes_out, "latency_ns": ev.latency_ns,
        "stream": bool(ev.stream), "error_code": ev.error_code,
    }


class Events(object):
    """Per-request events from the ring buffer (or perf buffer), in order.

    A memory-BIO TLS connection is tied to its socket by the send that follows
    the reply's SSL_write, after the reply's event: an event whose connection is
    not tied yet waits, with those after it, until it is or TIE_WAIT_S has gone
    by (a server slow to send its ciphertext), so that its line names the fd."""

    TIE_WAIT_S = 1.0

    def __init__(self, b, ringbuf, callback):
        self.b = b
        self.ringbuf = ringbuf
        self.lost = 0
        self.callback = callback
        self.held = []          # (deadline, copy of the event, size), oldest first

        self.compressed = CompressedNames()

        def handle(_ctx_or_cpu, data, size):
            if size == CPFX_SIZE:
                self.compressed.record(data)
                return
            data, _keep = self.compressed.name(data, size)
            if self.held or untied(data):
                copy = ct.create_string_buffer(ct.string_at(data, size), size)
                self.held.append((time.monotonic() + self.TIE_WAIT_S, copy, size))
                return
            self.callback(data, size)

        def lost(n):
            self.lost += n

        if ringbuf:
            b["events"].open_ring_buffer(handle)
        else:
            b["events"].open_perf_buffer(handle, page_cnt=256, lost_cb=lost)

    def poll(self, timeout_ms):
        if self.ringbuf:
            # the kernel does not wake this reader (a wakeup per event costs
            # microseconds): take what is there every 100 ms at most
            self.b.ring_buffer_poll(min(timeout_ms, 100))
            self.b.ring_buffer_consume()
        else:
            self.b.perf_buffer_poll(timeout_ms)
        self.release()

    def drain(self, final=True):
        """Take what the buffer holds; final: the trace ends, nothing is held back."""
        if self.ringbuf:
            self.b.ring_buffer_consume()
        else:
            self.b.perf_buffer_poll(0)
        self.release(everything=final)

    def release(self, everything=False):
        """Hand on the held events, oldest first, while the first is tied, its wait
        is over, or (the trace ending) everything goes."""
        now = time.monotonic()
        while self.held:
            deadline, copy, size = self.held[0]
            if not everything and now < deadline and untied(copy):
                break
            self.held.pop(0)
            self.callback(ct.addressof(copy), size)


def as_event(data):
    return ct.cast(data, ct.POINTER(MwEvent)).contents


class SslFds(object):
    """The sockets of memory-BIO TLS connections (mongo_tls.h keys them by their
    SSL *, and ties the key to the fd of the send that follows SSL_write): key ->
    fd from the kernel's tls_bio_fd, looked up once per key and remembered."""

    def __init__(self):
        self.table = None
        self.known = {}

    def set_bpf(self, b):
        try:
            self.table = b["tls_bio_fd"]
        except KeyError:        # OpenSSL on memory BIOs not decoded in this run
            self.table = None

    def fd(self, key):
        fd = self.known.get(key)
        if fd is None and self.table is not None:
            try:
                fd = int(self.table[self.table.Key(key)].value)
            except KeyError:    # not tied (yet)
                return None
            if len(self.known) > 100000:
                self.known.clear()
            self.known[key] = fd
        return fd


SSL_FDS = SslFds()


def untied(data):
    """An event (data) of a memory-BIO connection whose socket is not known yet
    (without memory-BIO decoding, none: the event is not even looked at)."""
    if SSL_FDS.table is None:
        return False
    raw = int(as_event(data).fd)
    return bool(raw & MW_TLS_FD and raw & MW_TLS_SSL) and SSL_FDS.fd(raw) is None


def conn_id(raw):
    """The connection of a conns key (an event's or aggregate's fd): the fd, that
    of a TLS connection's socket too; a memory-BIO connection not tied to its
    socket keeps its key without MW_TLS_FD: MW_TLS_SSL (2^30) | its number."""
    raw = int(raw)
    if raw & MW_TLS_FD and raw & MW_TLS_SSL:
        fd = SSL_FDS.fd(raw)
        if fd is not None:
            return fd
    return raw & ~MW_TLS_FD


def raw_counts(b):
    """The cumulative counters (never cleared: intervals are differences)."""
    t = b["counts"]
    v = [int(t.sum(ct.c_int(i)).value) for i in range(C_MAX)]
    try:
        tt = b["tls_counts"]
    except KeyError:            # no TLS library hooked
        return v + [0] * T_MAX
    return v + [int(tt.sum(ct.c_int(i)).value) for i in range(T_MAX)]


def map_memory():
    """Bytes of kernel memory of this process's BPF maps as the kernel accounts
    them (fdinfo's memlock): the preallocated maps in full."""
    total, seen = 0, set()
    for fd in os.listdir("/proc/self/fdinfo"):
        try:
            with open("/proc/self/fdinfo/%s" % fd) as f:
                info = dict(ln.split(":", 1) for ln in f.read().splitlines() if ":" in ln)
        except (OSError, ValueError):
            continue
        if "map_type" in info and "memlock" in info and info.get("map_id") not in seen:
            seen.add(info.get("map_id"))
            total += int(info["memlock"])
    return total


def sizing_line(tool, max_conns, by_conn):
    """What the maps were sized for and what that costs, said once at start."""
    grow = ""
    if by_conn:
        # struct mw_val: 4 counters and 1024 u32 buckets; 2 seconds alive
        grow = "; per-connection aggregates add up to %.0f MB as used" % (
            2 * max_conns * (32 + 4 * NB) / 1048576.0)
    return "%s: maps sized for %d connections (--max-connections): %.1f MB of " \
        "kernel memory%s" % (tool, max_conns, map_memory() / 1048576.0, grow)


def full_hint(tool, v, max_conns, out=sys.stderr):
    """bcc-style, once at the end: which map filled, and the fix."""
    for idx, name, what in FULL_MAPS:
        if v[idx]:
            print("%s: map %s full: %d %s (counted as dropped): raise "
                  "--max-connections (now %d)" % (tool, name, v[idx], what, max_conns),
                  file=out)


def outstanding(b):
    """Requests waiting for a reply now (lost if tracing ends here)."""
    return sum(int(c.nslots) for c in b["conns"].values() if c.live)


IO_URING_RESCAN_S = 10.0        # io_uring_fds: a scan's result serves this long
IO_URING_SEEN = {}              # pid -> (monotonic time of its last scan, instances)


def io_uring_fds(pid, fresh=False):
    """How many io_uring instances the process holds (its fds), 0 if unknown.
    A scan reads every fd's link (~30 ms at 5,000 connections: 3% of a CPU if
    done each second), so its result serves IO_URING_RESCAN_S seconds, unless
    fresh (the end)."""
    now = time.monotonic()
    seen = IO_URING_SEEN.get(pid)
    if not fresh and seen and now - seen[0] < IO_URING_RESCAN_S:
        return seen[1]
    IO_URING_SEEN[pid] = (now, io_uring_scan(pid))
    return IO_URING_SEEN[pid][1]


io_uring_scan = wf.io_uring_instances


def read_counts(v, extra_dropped=0, pending=0, pid=None, fresh=False):
    """The counts and loss counters of raw_counts values (or differences); with
    pid, what the probe cannot decode: recvmmsg/sendmmsg and io_uring_enter
    calls, and the process's io_uring instances (io_uring with SQPOLL needs no
    syscall; io_uring_fds: fresh, or up to IO_URING_RESCAN_S old)."""
    return {
        # tls_connections: those whose plaintext was not decoded (all of them
        # when no TLS library is hooked; a memory-BIO connection whose ciphertext
        # began before tracing may be counted decoded and not seen as TLS: never
        # below 0); tls_calls_without_socket: TLS calls whose plaintext had no
        # connection to key it by (probes/mongo_tls.h)
        "untraced": {"mmsg_calls": v[C_MMSG], "io_uring_calls": v[C_URING],
                     "io_uring_fds": io_uring_fds(pid, fresh) if pid else 0,
                     "tls_connections": max(0, v[C_TLS] - v[T_DECODED]),
                     "tls_hooked": 1 if TLS_HOOKED else 0,
                     "tls_calls_without_socket": v[T_NOFD]},
        # memory_bio: of the connections, those keyed by their SSL * (no socket
        # syscall inside SSL_read/SSL_write), memory_bio_tied: of those, the ones
        # whose socket fd is known
        "tls": {"hooked": [h.describe() for h in TLS_HOOKED],
                "connections": v[T_DECODED], "calls": v[T_CALLS],
                "memory_bio": v[T_BIO], "memory_bio_tied": v[T_TIED]},
        "counts": {"requests": v[C_REQUESTS], "replies": v[C_REPLIES],
                   "stream_replies": v[C_STREAM], "no_reply": v[C_NOREPLY],
                   "answered_no_reply": v[C_ANSWERED]},
        "lost": {"unmatched_replies": v[C_UNMATCHED],
                 "requests_without_reply": v[C_NOREPLY_LOST] + pending,
                 "malformed": v[C_MALFORMED],
                 "dropped": v[C_DROPPED] + extra_dropped},
        # latencies the kernel's maps had no room for, aggregated here (not lost)
        "spilled": v[C_SPILLED],
        # the part of "dropped" that full maps caused, per map
        "full": dict((name, v[idx]) for idx, name, _ in FULL_MAPS),
    }


def answered_by_command(b):
    """{command: replies the server sent to requests that asked for none}, since the
    start (the "answered" map: cumulative, a rare path)."""
    out = {}
    for k, n in b["answered"].items():
        name = bytes(k.c).split(b"\0", 1)[0].decode("utf-8", "replace")
        out[name] = out.get(name, 0) + int(n.value)
    return out


def footer(totals, out=sys.stdout):
    """The footer, then the TLS and "not traced" lines (wirefacts.loss_lines)."""
    print(wf.loss_lines(totals["counts"], totals["lost"], totals.get("tls"),
                        totals.get("untraced"),
                        totals.get("answered_no_reply_by_command")), file=out)


untraced_line = wf.untraced_line


def dropped_hint(tool, n, ringbuf):
    if n:
        print("%s: %d events dropped (%s full): lower the load, sample them "
              "(--events-sample N), or trace without --events for the "
              "histograms only" % (tool, n, "ring buffer" if ringbuf else "perf buffer"),
              file=sys.stderr)


def on_sigterm():
    """Ctrl-C and SIGTERM end the trace; SIGINT too when started in the
    background by a shell (which ignores SIGINT for background jobs)."""
    def handler(signum, frame):
        raise KeyboardInterrupt
    signal.signal(signal.SIGTERM, handler)
    signal.signal(signal.SIGINT, signal.default_int_handler)


# ---- peers of connections (-c) ---------------------------------------------

def peers(pid):
    """{socket inode: (local, remote)} of the pid's network namespace."""
    return wf.tcp_sockets(pid)


peer_of = wf.peer_text


# ---- the kernel's slices ---------------------------------------------------

Agg = wf.Agg          # one key's count, sum, max, buckets and failures


def take_slices(b, final=False, now=None):
    """{slice: {("cmd", (command, opcode)) | ("conn", fd): Agg}} of the slices
    that are over at now (the monotonic clock, ns; all of them when final);
    their kernel entries are deleted (a slice is read once, after its writers
    are done: nothing is lost)."""
    if now is None:
        now = time.clock_gettime_ns(time.CLOCK_MONOTONIC)
    out = {}
    for name in ("lat", "lat_spill", "lat_conn"):
        try:
            t = b[name]
        except KeyError:        # lat_conn: only with -c
            continue
        take_map(t, now, final, out)
    take_cache(b["lat_cache"], now, final, out)
    SPILL.take(now, final, out)
    take_errs(b["errs"], now, final, out)
    return out


NONZERO = re.compile(b"[^\x00]")


def take_map(t, now, final, out):
    """take_slices for one of the two aggregate maps, into out"""
    done = []
    for k, per_cpu in t.items():
        if not final and (k.slice + 1) * SLICE_NS + GRACE_NS > now:
            continue
        # per-CPU values (lat, lat_spill), or one (lat_conn)
        for v in (per_cpu if isinstance(per_cpu, (list, ct.Array)) else [per_cpu]):
            add_value(out, k, v)
        done.append(k)
    for k in done:
        del t[k]


def take_cache(t, now, final, out):
    """take_slices for lat_cache (mongo_wire.h): a slot is taken, then zeroed,
    once each CPU's copy in it is free or holds a second that is over, and
    (unless final) its set is not the current second's or the next one's, the
    sets being written or about to be"""
    sec = now // SLICE_NS
    busy = {sec % CACHE_SETS, (sec + 1) % CACHE_SETS}
    for i, per_cpu in t.items():
        i = int(i.value)
        if not final and i // CACHE_WAYS in busy:
            continue
        used = [a for a in per_cpu if a.k.slice]
        if not used or (not final and any(
                (a.k.slice + 1) * SLICE_NS + GRACE_NS > now for a in used)):
            continue
        for a in used:
            add_value(out, a.k, a.v)
        t[ct.c_int(i)] = t.Leaf()


def agg_of(out, k):
    """the Agg of aggregate key k in out, {slice: {view key: Agg}}"""
    if k.fd:
        key = ("conn", conn_id(k.fd))   # a TLS connection's plaintext too
    else:
        key = ("cmd", (cmdname(k.name.c), opname(int(k.op))))
    return out.setdefault(int(k.slice), {}).setdefault(key, Agg())


class Spill(object):
    """The latencies mongo_wire.h's maps had no room for (a burst of new
    keys), one record each through the ring buffer spill_rb: aggregated here
    by slice, taken with the kernel's aggregates (take_slices). drain() must
    run often enough for the ring not to fill (main loops: every 0.25 s)."""

    def __init__(self):
        self.b = None
        self.pending = {}

    def set_bpf(self, b):
        self.b = b
        b["spill_rb"].open_ring_buffer(self.record)

    def record(self, _ctx, data, _size):
        r = ct.cast(data, ct.POINTER(MwSpill)).contents
        agg = agg_of(self.pending, r.k)
        if not r.timed:
            agg.noreply += 1
            return
        agg.count += 1
        agg.sum_ns += r.lat
        agg.max_ns = max(agg.max_ns, r.lat)
        agg.errors += r.err != 0
        if r.bucket < NB:
            agg.hist[r.bucket] = agg.hist.get(r.bucket, 0) + 1

    def drain(self):
        """read the ring (every ring buffer of b: events too, if any)"""
        if self.b is not None:
            self.b.ring_buffer_consume()

    def take(self, now, final, out):
        """take_slices for the spilled latencies"""
        self.drain()
        for sl in list(self.pending):
            if not final and (sl + 1) * SLICE_NS + GRACE_NS > now:
                continue
            for key, agg in self.pending.pop(sl).items():
                out.setdefault(sl, {}).setdefault(key, Agg()).add(agg)


SPILL = Spill()                 # load() opens it when the kernel has ring buffers


def add_value(out, k, v):
    """one CPU's value v of aggregate key k, into out (take_slices)"""
    agg = agg_of(out, k)
    agg.count += v.count
    agg.sum_ns += v.sum_ns
    agg.max_ns = max(agg.max_ns, v.max_ns)
    agg.noreply += v.noreply
    agg.errors += v.errors
    if v.count:
        raw = bytes(v.hist)
        h = array.array("I", raw)
        # the few buckets in use, found at C speed (10,000 connections'
        # values a second, 1024 buckets each, are too many for a loop)
        for i in sorted(set(m.start() // 4 for m in NONZERO.finditer(raw))):
            agg.hist[i] = agg.hist.get(i, 0) + h[i]


def take_errs(e, now, final, out):
    """take_slices for the failed replies per error code (their per-command
    count is in the aggregates)"""
    done = []
    for k, n in e.items():
        if not final and (k.slice + 1) * SLICE_NS + GRACE_NS > now:
            continue
        key = ("cmd", (cmdname(k.name.c), opname(int(k.op))))
        agg = out.setdefault(int(k.slice), {}).setdefault(key, Agg())
        agg.codes[int(k.code)] = agg.codes.get(int(k.code), 0) + int(n.value)
        done.append(k)
    for k in done:
        del e[k]


# ---- reports ---------------------------------------------------------------

class Report(object):
    """What one report (an interval, or the whole run) shows, per view."""

    def __init__(self):
        self.by = {"cmd": {}, "op": {}, "conn": {}}

    def add_slice(self, rows):
        for (kind, key), agg in rows.items():
            if kind == "conn":
                self.by["conn"].setdefault(key, Agg()).add(agg)
            else:
                self.by["cmd"].setdefault(key[0], Agg()).add(agg)
                self.by["op"].setdefault(key[1], Agg()).add(agg)


def json_hist(hist):
    return [{"lo_ns": bucket_bounds(b)[0], "hi_ns": bucket_bounds(b)[1], "count": int(c)}
            for b, c in sorted(hist.items()) if c]


def log2_slots(hist, div):
    """bcc's log2 slots (slot i holds [2^(i-1), 2^i); 0 holds 0) of log-linear
    buckets in a unit of div ns, each bucket placed by its midpoint."""
    vals = [0] * 65
    for b, c in hist.items():
        v = wf.middle(*bucket_bounds(b)) // div
        vals[min(v.bit_length(), 64)] += c
    return vals


try:
    from bcc.table import _print_log2_hist     # what print_log2_hist uses
except ImportError:                             # pragma: no cover
    _print_log2_hist = None

HEADERS = {"op": "opcode", "cmd": "command", "conn": "conn"}


SSL_UNTIED = "(TLS on memory BIOs: socket not known)"


def label(view, key, pid, table):
    if view == "conn":
        if key & MW_TLS_SSL:
            return "ssl #%d %s" % (key & ~MW_TLS_SSL, SSL_UNTIED)
        return "fd %d %s" % (key, peer_of(pid, key, table))
    return key


def errors_text(d):
    """"  errors N (code name: n, ...)" of an Agg with failed replies, else ""."""
    if not d.errors:
        return ""
    codes = wf.error_summary(d.codes)
    return "  errors %d%s" % (d.errors, " (%s)" % codes if codes else "")


def print_text(rep, views, pid, unit, totals):
    table = peers(pid) if "conn" in views else {}
    div = UNIT_DIV[unit]
    for view in views:
        data = rep.by[view]
        for key in sorted(data):
            d = data[key]
            if d.count == 0:
                continue
            print("\n%s = %s" % (HEADERS[view], label(view, key, pid, table)))
            if _print_log2_hist is not None:
                _print_log2_hist(log2_slots(d.hist, div), unit, None)
            print("count %d  avg %d %s  max %d %s%s" % (
                d.count, int(round(d.sum_ns / d.count / div)), UNIT_ABBR[unit],
                int(round(d.max_ns / div)), UNIT_ABBR[unit], errors_text(d)))
    print()
    footer(totals)


def json_view(rep, view, pid, lat_by, table):
    out = {}
    for key, d in rep.by[view].items():
        name = str(key)
        exact = sorted(lat_by.get((view, key), ())) if lat_by is not None else None
        n = d.count
        # the events' exact values when every request of the key has one
        e = d.stats(exact if exact and len(exact) == n else None)
        e.update({"hist": json_hist(d.hist), "requests": n + d.noreply,
                  "errors": d.errors,
                  "error_codes": {str(c): v for c, v in sorted(d.codes.items())}})
        if view == "conn" and key & MW_TLS_SSL:
            e["fd"] = None
            e["peer"] = SSL_UNTIED
        elif view == "conn":
            e["fd"] = key
            e["peer"] = peer_of(pid, key, table)
        out[name] = e
    return out


def json_report(rep, pid, totals, lat_by):
    table = peers(pid)
    out = {"time": round(time.time(), 6),
           "by_command": json_view(rep, "cmd", pid, lat_by, table),
           "by_op": json_view(rep, "op", pid, lat_by, table),
           "by_conn": json_view(rep, "conn", pid, lat_by, table)}
    # complete requests (answered or not), as the bpftrace tools count them
    for view in ("command", "op"):
        out["requests_by_" + view] = {k: v["requests"] for k, v in
                                      out["by_" + view].items() if v["requests"]}
    out.update(totals)
    return out


def slice_line(k, rows, clock, totals):
    """One --slices JSON line: a slice's aggregates, the cumulative counters."""
    start = k * SLICE_NS
    return json.dumps({
        "slice": k, "start_ns": start, "time": round(clock.wall_s(start), 6),
        "length_ns": SLICE_NS,
        "rows": [[key[0], key[1], *agg.row()] for (kind, key), agg in sorted(rows.items())
                 if kind == "cmd"],
        "conn_rows": [[key, *agg.row()] for (kind, key), agg in sorted(rows.items())
                      if kind == "conn"],
        "counts": totals["counts"], "lost": totals["lost"],
        "untraced": totals["untraced"]},
        separators=(",", ":"))


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
    ./mongolatency.py -p 181 --slices # one JSON line per second, every bucket
    ./mongolatency.py -p 181 --events req.jsonl -d 60
                                      # and one JSON line per request
    ./mongolatency.py -p 181 --events req.raw --events-format raw \\
        --events-sample 100           # 1 request in 100, as binary records
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
    out = parser.add_mutually_exclusive_group()
    out.add_argument("-j", "--json", action="store_true",
        help="one JSON object per interval: by_command, by_op, by_conn "
             "(nanoseconds), lost, counts")
    out.add_argument("--slices", action="store_true",
        help="one JSON line per second of kernel aggregates (every bucket), "
             "then the final counters: what mongoprobe records")
    parser.add_argument("-T", "--timestamp", action="store_true",
        help="include a timestamp on interval output")
    parser.add_argument("--events", metavar="FILE",
        help="also write one record per request to FILE")
    parser.add_argument("--events-format", choices=["json", "raw"], default="json",
        help="json: one JSON line per request (default); raw: the kernel's "
             "72-byte records after a one-line header (for mongoprobe)")
    parser.add_argument("--events-sample", type=positive_int, default=1, metavar="N",
        help="keep one request in N (random) in --events; the histograms "
             "still count every request")
    parser.add_argument("-d", "--duration", type=positive_float, metavar="SECONDS",
        help="total duration of the trace, in seconds")
    parser.add_argument("--max-connections", type=positive_int,
        default=MAX_CONNECTIONS, metavar="N",
        help="connections traced at once: sizes the kernel maps (default %d)"
             % MAX_CONNECTIONS)
    add_tls_option(parser)
    parser.add_argument("interval", nargs="?", type=positive_int,
        help="output interval, in seconds")
    parser.add_argument("count", nargs="?", type=positive_int,
        help="number of outputs")
    parser.add_argument("--ebpf", action="store_true",
        help=argparse.SUPPRESS)
    return parser.parse_args(argv)


TLS_HELP = ("decode TLS plaintext with uprobes on the target's TLS library: "
            "OpenSSL (SSL_read/SSL_write/SSL_read_ex/SSL_write_ex, libssl or "
            "static) or Go crypto/tls ((*Conn).Read/Write); auto (default): when "
            "the target has one; on: fail without one; off: syscalls only")


def add_tls_option(parser):
    parser.add_argument("--tls", choices=["auto", "on", "off"], default="auto",
        help=TLS_HELP)


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
    by_conn = "conn" in views
    if args.milliseconds:
        unit = "msecs"
    elif args.microseconds:
        unit = "usecs"
    else:
        unit = "nsecs"
    events = args.events is not None
    sample = args.events_sample

    if args.ebpf:
        print(bpf_text(args.pid, by_conn, events, True, sample, args.max_connections,
                       tls_hooks(tool, args.pid, args.tls)))
        return 0

    check_target(tool, args.pid)
    tls = tls_hooks(tool, args.pid, args.tls)
    try:
        evfile = open(args.events, "wb" if args.events_format == "raw" else "w") \
            if events else None
    except OSError as e:
        die(tool, "cannot write %s: %s" % (args.events, e.strerror))
    b, ringbuf = load(tool, args.pid, by_conn, events, sample, args.max_connections, tls)
    clock = wall_clock()

    # exact latencies per (view, key) of this interval, from unsampled events
    lat_by = {} if events and args.json and sample == 1 else None
    ev_reader = None
    if events:
        if args.events_format == "raw":
            evfile.write(RAW_MAGIC)
            evfile.write((json.dumps({"pid": args.pid, "clock_offset_ns": clock.offset_ns,
                                      "record_bytes": ct.sizeof(MwEvent),
                                      "sample": sample}) + "\n").encode())

        def on_event(data, size):
            if args.events_format == "raw":
                evfile.write(ct.string_at(data, ct.sizeof(MwEvent)))
                return
            ev = as_event(data)
            d = event_dict(ev, clock, args.pid)
            evfile.write(json.dumps(d) + "\n")
            if lat_by is not None:
                for view, key in (("op", d["opcode"]), ("cmd", d["command"]),
                                  ("conn", d["fd"])):
                    lat_by.setdefault((view, key), []).append(ev.latency_ns)
        ev_reader = Events(b, ringbuf, on_event)

    on_sigterm()
    # The banner goes to stderr in machine modes so stdout stays data, and
    # readers still learn that the programs are attached.
    machine = args.json or args.slices
    print(sizing_line(tool, args.max_connections, by_conn), file=sys.stderr)
    print("Tracing MongoDB wire protocol of PID %d (%s syscalls)... "
          "Hit Ctrl-C to end." % (args.pid, SYSCALLS),
          file=sys.stderr if machine else sys.stdout)
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
    state = {"rep": Report(), "prev": None, "lost_events": 0, "answered": {}}

    def poll_slices(final):
        """Read the slices that are over into the current report."""
        slices = take_slices(b, final)
        cur = raw_counts(b)
        for k in sorted(slices):
            state["rep"].add_slice(slices[k])
            if args.slices:
                print(slice_line(k, slices[k], clock, read_counts(
                    cur, ev_reader.lost if ev_reader else 0, pid=args.pid)))
        if args.slices:
            sys.stdout.flush()
        return cur

    def report(final):
        if ev_reader:
            ev_reader.drain(final)
            evfile.flush()
        cur = poll_slices(final)
        lost_ev = ev_reader.lost if ev_reader else 0
        if args.slices:
            if final:
                tot = read_counts(cur, lost_ev, outstanding(b), args.pid, fresh=True)
                print(json.dumps({"end": True, "counts": tot["counts"],
                                  "lost": tot["lost"], "untraced": tot["untraced"],
                                  "full": tot["full"], "tls": tot["tls"],
                                  "spilled": tot["spilled"],
                                  "answered_no_reply_by_command": answered_by_command(b)}))
                sys.stdout.flush()
            return read_counts(cur, lost_ev)
        prev = state["prev"]
        diff = cur if prev is None else [a - p for a, p in zip(cur, prev)]
        totals = read_counts(diff, lost_ev - state["lost_events"],
                             outstanding(b) if final else 0, args.pid, fresh=final)
        # the interval's replies to requests that asked for none, per command
        answered = answered_by_command(b)
        totals["answered_no_reply_by_command"] = {c: n - state["answered"].get(c, 0)
                                       for c, n in answered.items()
                                       if n > state["answered"].get(c, 0)}
        state["answered"] = answered
        if args.json:
            print(json.dumps(json_report(state["rep"], args.pid, totals, lat_by)))
        else:
            if args.timestamp:
                print("\n%s" % time.strftime("%H:%M:%S"), end="")
            print_text(state["rep"], views, args.pid, unit, totals)
        sys.stdout.flush()
        state["rep"], state["prev"], state["lost_events"] = Report(), cur, lost_ev
        if lat_by is not None:
            lat_by.clear()
        return totals

    # Ctrl-C or SIGTERM while a report prints: finish it, then the last one
    stop = {"now": False}

    def deferred(signum, frame):
        stop["now"] = True

    next_slice = start + 0.25
    while True:
        try:
            now = time.monotonic()
            stops = [t for t in (next_print, end, next_slice) if t is not None]
            wait = max(0.0, min(min(stops) - now, 1.0))
            if ev_reader:
                ev_reader.poll(int(wait * 1000))
            else:
                time.sleep(wait)
            now = time.monotonic()
            if now >= next_slice:
                next_slice = now + 0.25
                SPILL.drain()       # its ring must not fill between reports
                if args.slices:
                    # a Ctrl-C in the middle would lose the slices read so far
                    # (their kernel entries deleted): it waits for the read
                    signal.signal(signal.SIGINT, deferred)
                    signal.signal(signal.SIGTERM, deferred)
                    poll_slices(False)
                    on_sigterm()
                    if stop["now"]:
                        raise KeyboardInterrupt
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
            if not machine:
                print()
        signal.signal(signal.SIGINT, deferred)
        signal.signal(signal.SIGTERM, deferred)
        if gone:
            print("%s: PID %d exited" % (tool, args.pid), file=sys.stderr)
        if not exiting:
            report(False)
            exiting = stop["now"]
        if exiting:
            # the last report, and the detaching of the probes, are not cut
            # short by a second Ctrl-C/SIGTERM
            signal.signal(signal.SIGINT, signal.SIG_IGN)
            signal.signal(signal.SIGTERM, signal.SIG_IGN)
            report(True)
            break
        on_sigterm()

    if evfile:
        evfile.close()
    dropped_hint(tool, ev_reader.lost if ev_reader else 0, ringbuf)
    full_hint(tool, raw_counts(b), args.max_connections)
    detach_at_once(b)
    return 0


if __name__ == "__main__":
    sys.exit(main())
