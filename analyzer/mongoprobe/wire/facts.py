"""Wire facts and printers: the one copy the analyzer and the bcc tools share.

``probes/mongolatency.py`` and ``probes/mongosnoop.py`` run under the system python3,
which has bcc but not this package's dependencies (pandas, numpy): they load this one
file by its path (``probes/mongolatency.py``, ``wirefacts()``), so it imports nothing
but the standard library and runs on Python 3.9 or later. The package imports it as
``mongoprobe.wire.facts``. What is here:

* opcode names (:func:`opcode_name`; an unknown opcode is ``OP_UNKNOWN(n)``);
* the error codes of failed replies (:data:`ERROR_NAMES`, from mongod's
  ``src/mongo/base/error_codes.yml``) and how they print;
* the footer every latency tool prints, and its TLS and "not traced" lines;
* the log-linear buckets the probes count latencies in (:func:`bucket`, :func:`bounds`);
* the one latency statistic (:func:`stats`) and its percentiles;
* a connection's peer and the process's io_uring instances, from /proc;
* :class:`Agg`, one key's aggregate in one of the kernel's one-second slices.

**Buckets.** Bucket ``b`` holds the integers ``lo <= v < hi`` (half-open, as bpftrace's
``hist()`` and bcc's log2 tables print them, and as the kernel computes the index: the
value shifted right, so a bucket ends where the next begins). Below 32 ns a value is
its own bucket; from 32 ns, ``e = floor(log2 v)``, ``s = (v >> (e - 5)) - 32`` (0..31)
and ``b = 32 * (e - 4) + s``: 32 buckets per power of two, each at most 1/32 of its
``lo`` wide. The probes keep buckets 0..1023; the last also holds 2^36 ns and up.

**The statistic.** Percentiles are nearest-rank: the ``q`` percentile of ``n`` values
is the ``ceil(q n / 100)``-th smallest (at least the first), one of the values, never an
interpolation between two. From exact values (per-request events) that is exact. From
a histogram it is that ranked value's bucket, estimated by the bucket's middle integer
``lo + (hi - lo - 1) // 2``: the bucket's own value below 32 ns (exact), and within
``(hi - lo) / 2 <= lo / 64`` (1.56%, ``MAX_ERROR``) of every value of a log-linear
bucket -- the "within 1.6%" the design promises. The middle rather than the upper
bound: half the worst error, and no bias upwards. (For DTrace's log2 ``quantize()``
buckets the same middle is at most half the true value off.) An estimate never exceeds
the exact maximum when the probe counted one: a bucket's middle can pass the largest
value in it. Without an exact max, the maximum is the last bucket's largest value,
``hi - 1``.
"""

from __future__ import annotations

import bisect
import itertools
import math
import os
import socket
from fractions import Fraction

# --- opcodes ---------------------------------------------------------------------------

OPCODES = {
    1: "OP_REPLY", 2001: "OP_UPDATE", 2002: "OP_INSERT", 2004: "OP_QUERY",
    2005: "OP_GET_MORE", 2006: "OP_DELETE", 2007: "OP_KILL_CURSORS",
    2012: "OP_COMPRESSED", 2013: "OP_MSG",
}


def opcode_name(op):
    """``OP_MSG``, ..., or ``OP_UNKNOWN(n)`` for an opcode the protocol does not define."""
    op = int(op)
    return OPCODES.get(op, "OP_UNKNOWN(%d)" % op)


# --- failed replies --------------------------------------------------------------------

# A failed command is answered {ok: 0, errmsg, code, codeName} (mongod; FerretDB the
# same). The probes read the code, not the name (a string per failure would cost the
# kernel more than the code tells): the names are here. -1: a failed reply whose code
# could not be read. Codes such as 5739101 are assertion ids with no name.
NO_CODE = -1
ERROR_NAMES = {
    1: "InternalError", 2: "BadValue", 4: "NoSuchKey", 6: "HostUnreachable",
    8: "UnknownError", 9: "FailedToParse", 11: "UserNotFound", 13: "Unauthorized",
    14: "TypeMismatch", 18: "AuthenticationFailed", 20: "IllegalOperation",
    26: "NamespaceNotFound", 27: "IndexNotFound", 28: "PathNotViable",
    40: "ConflictingUpdateOperators", 43: "CursorNotFound", 48: "NamespaceExists",
    50: "MaxTimeMSExpired", 52: "DollarPrefixedFieldName", 59: "CommandNotFound",
    66: "ImmutableField", 67: "CannotCreateIndex", 72: "InvalidOptions",
    73: "InvalidNamespace", 85: "IndexOptionsConflict", 86: "IndexKeySpecsConflict",
    91: "ShutdownInProgress", 96: "OperationFailed", 112: "WriteConflict",
    115: "CommandNotSupported", 121: "DocumentValidationFailure",
    166: "CommandNotSupportedOnView", 189: "PrimarySteppedDown", 238: "NotImplemented",
    251: "NoSuchTransaction", 262: "ExceededTimeLimit", 352: "UnsupportedOpQueryCommand",
    10107: "NotWritablePrimary",
    11000: "DuplicateKey", 11600: "InterruptedAtShutdown", 11601: "Interrupted",
    13435: "NotPrimaryNoSecondaryOk", 13436: "NotPrimaryOrSecondary",
}


def error_name(code):
    """The code's name, None when it is not in the table (or the code was not read)."""
    return ERROR_NAMES.get(int(code))


def error_text(code):
    """"59 CommandNotFound", "12345", or "no code"."""
    code = int(code)
    if code == NO_CODE:
        return "no code"
    name = ERROR_NAMES.get(code)
    return "%d %s" % (code, name) if name else str(code)


def error_summary(codes):
    """"59 CommandNotFound: 3, 26 NamespaceNotFound: 1", the most frequent first."""
    return ", ".join("%s: %d" % (error_text(c), n) for c, n in
                     sorted(codes.items(), key=lambda kv: (-kv[1], kv[0])))


# --- the footer --------------------------------------------------------------------------

# answered_no_reply: replies the server sent anyway to requests that asked for none
# (OP_MSG moreToCome: the Node.js driver's endSessions, which FerretDB answers). Not a
# loss: the probe saw the request and its reply. Before it was counted, such a reply
# was an unmatched one.
COUNT_KEYS = ("requests", "replies", "stream_replies", "no_reply", "answered_no_reply")
LOST_KEYS = ("unmatched_replies", "requests_without_reply", "malformed", "dropped")


def footer(counts, lost, answered=None):
    """The two count and loss lines every mongoprobe latency tool prints
    (probes/README.md), and between them, when the server answered requests that asked
    for no reply, a line naming them (``answered``: {command: replies})."""
    out = ("requests: %d  replies: %d  stream replies: %d  no-reply (moreToCome): %d\n" % (
        counts["requests"], counts["replies"], counts["stream_replies"], counts["no_reply"]))
    if counts.get("answered_no_reply"):
        out += answered_line(counts["answered_no_reply"], answered) + "\n"
    return out + ("lost: unmatched replies %d, requests without reply %d, malformed "
                  "headers %d, dropped events %d" % (
                      lost["unmatched_replies"], lost["requests_without_reply"],
                      lost["malformed"], lost["dropped"]))


def answered_line(n, answered=None):
    """"answered though sent with moreToCome: 1 (endSessions 1)": the server replied to
    requests that asked for no reply. Not a probe's loss: a server's habit (FerretDB
    answers the Node.js driver's closing endSessions), shown so it is not read as one."""
    by = ", ".join("%s %d" % (c, k) for c, k in
                   sorted((answered or {}).items(), key=lambda kv: (-kv[1], kv[0])))
    return "answered though sent with moreToCome: %d%s" % (n, " (%s)" % by if by else "")


def tls_line(tls):
    """What the TLS hooks decoded, in one line; "" when none ran."""
    if not tls or not tls.get("hooked"):
        return ""
    bio = ("; %d on memory BIOs, %d of them tied to their socket"
           % (tls["memory_bio"], tls.get("memory_bio_tied", 0))
           if tls.get("memory_bio") else "")
    return "tls: %d connections decoded (%d calls with plaintext%s)" % (
        tls["connections"], tls["calls"], bio)


def untraced_line(u):
    """One line when the target moved messages the probe cannot decode (recvmmsg,
    sendmmsg, io_uring; TLS connections with no TLS library hooked: probes/README.md),
    else ""."""
    if not u:
        return ""
    parts = []
    if u.get("mmsg_calls") or u.get("io_uring_calls") or u.get("io_uring_fds"):
        parts.append("%d recvmmsg/sendmmsg calls, %d io_uring_enter calls, %d io_uring "
                     "instances: the messages they carry are not decoded" % (
                         u.get("mmsg_calls", 0), u.get("io_uring_calls", 0),
                         u.get("io_uring_fds", 0)))
    if u.get("tls_connections"):
        parts.append("%d connections look like TLS (records 0x16/0x17 0x03) and %s: "
                     "their requests are not seen" % (
                         u["tls_connections"],
                         "the hooked TLS library gave none of their plaintext"
                         if u.get("tls_hooked") else "no TLS library is hooked"))
    if u.get("tls_calls_without_socket"):
        parts.append("%d TLS calls returned plaintext with no socket syscall inside them "
                     "nor earlier on their connection, and no SSL * to key them by (Go "
                     "crypto/tls on no socket; OpenSSL without SSL_free, or its map full: "
                     "raise --max-connections): not decoded" % u["tls_calls_without_socket"])
    return "not traced: " + "; ".join(parts) if parts else ""


def loss_lines(counts, lost, tls=None, untraced=None, answered=None):
    """The footer, then the TLS and "not traced" lines when there is something to say."""
    return "\n".join(x for x in (footer(counts, lost, answered), tls_line(tls),
                                 untraced_line(untraced)) if x)


# --- log-linear buckets ------------------------------------------------------------------

SUB_BITS = 5
SUB = 1 << SUB_BITS          # buckets per power of two
NB = 1024                    # buckets the probes keep (the last: 2^36 ns and up)
MAX_ERROR = 1 / (2 * SUB)    # a bucket's middle is within this of any of its values


def bucket(v):
    """The bucket of a latency ``v`` (integer nanoseconds; below 0 counts as 0)."""
    v = int(v)
    if v < SUB:
        return max(v, 0)
    e = v.bit_length() - 1
    return SUB * (e - SUB_BITS + 1) + (v >> (e - SUB_BITS)) - SUB


def bounds(b):
    """``(lo, hi)``: bucket ``b`` holds ``lo <= v < hi``."""
    b = int(b)
    if b < SUB:
        return b, b + 1
    e, s = b // SUB + SUB_BITS - 1, b % SUB
    return (SUB + s) << (e - SUB_BITS), (SUB + s + 1) << (e - SUB_BITS)


def middle(lo, hi):
    """The estimate of a value known to lie in [lo, hi): its middle integer."""
    return lo + (hi - lo - 1) // 2


# --- the statistic -------------------------------------------------------------------------

QUANTILES = (50, 95, 99)


def rank(q, n):
    """The 1-based rank of the nearest-rank ``q`` percentile (0 < q <= 100) of ``n``
    values: ceil(q n / 100), at least 1. Exact arithmetic (q as written: 95 * 20 / 100
    in floats is not always 19)."""
    f = _Q.get(q)
    if f is None:
        f = _Q[q] = Fraction(str(q)) / 100
    return max(math.ceil(f * n), 1)


_Q = {}     # q -> q / 100 as a Fraction (parsed once: stats asks for the same few)


def percentile(sorted_values, q):
    """The nearest-rank ``q`` percentile of sorted values (one of them); None if none."""
    if not len(sorted_values):
        return None
    return sorted_values[rank(q, len(sorted_values)) - 1]


def bucket_percentile(buckets, q, max_ns=None):
    """The nearest-rank ``q`` percentile of a histogram, ``buckets`` ``(lo, hi, count)``
    sorted by ``lo``: the middle of the bucket of that rank, at most ``max_ns``; None
    for an empty histogram."""
    rows, cum = _cumulative(buckets)
    return _bucket_at(rows, cum, q, max_ns) if rows else None


def _cumulative(buckets):
    """(the buckets that hold a value, their running counts)."""
    rows = [(lo, hi, c) for lo, hi, c in buckets if c > 0]
    return rows, list(itertools.accumulate(c for _, _, c in rows))


def _bucket_at(rows, cum, q, max_ns):
    """bucket_percentile of running counts: the first bucket whose count reaches the
    rank (found by bisection: an hour's per-second blocks ask for tens of thousands)."""
    lo, hi, _ = rows[bisect.bisect_left(cum, rank(q, cum[-1]))]
    v = middle(int(lo), int(hi))
    return v if max_ns is None else min(v, int(max_ns))


def hist_buckets(hist):
    """``(lo, hi, count)`` rows, sorted, of a ``{bucket: count}`` log-linear histogram."""
    return [bounds(b) + (int(c),) for b, c in sorted(hist.items()) if c]


def stats(buckets, sum_ns=None, max_ns=None, values=None, quantiles=QUANTILES):
    """``{"count", "avg_ns", "p50_ns", "p95_ns", "p99_ns", "max_ns"}`` of one command,
    opcode or connection: every view's figures come from here.

    ``values`` (every latency, sorted: a list, or a numpy array the caller sorted fast):
    exact, when there is one per request counted in ``buckets``; ``sum_ns``, if given,
    is their sum. Else from ``buckets`` (``(lo, hi, count)`` sorted by ``lo``): the
    percentiles are bucket middles capped by ``max_ns`` (the probe's exact max; without
    it the last bucket's largest value, ``hi - 1``), the average the exact ``sum_ns``
    over the count (None without it). Integers, in nanoseconds (averages: floats).
    """
    n = sum(int(c) for _, _, c in buckets)
    if values is not None and len(values) and (not n or len(values) == n):
        k = len(values)
        total = int(sum_ns) if sum_ns is not None else sum(int(x) for x in values)
        out = {"count": k, "avg_ns": total / k}
        out.update(("p%g_ns" % q, int(percentile(values, q))) for q in quantiles)
        out["max_ns"] = int(values[-1])
        return out
    if not n:
        out = {"count": 0, "avg_ns": None}
        out.update(("p%g_ns" % q, None) for q in quantiles)
        out["max_ns"] = None
        return out
    rows, cum = _cumulative(buckets)
    if max_ns is None:
        max_ns = int(rows[-1][1]) - 1
    out = {"count": n, "avg_ns": None if sum_ns is None else int(sum_ns) / n}
    out.update(("p%g_ns" % q, _bucket_at(rows, cum, q, max_ns)) for q in quantiles)
    out["max_ns"] = int(max_ns)
    return out


# --- one key's aggregate in one second ---------------------------------------------------

class Agg(object):
    """count (answered requests), sum_ns, max_ns, noreply (complete requests due no
    reply), hist ``{bucket: count}``, errors (answered with ok: 0) and codes
    ``{error code: count}`` of one (command, opcode) or connection; ``row()`` is its
    ``mongolatency.py --slices`` form, :meth:`from_row` reads it back."""
    __slots__ = ("count", "sum_ns", "max_ns", "noreply", "hist", "errors", "codes")

    def __init__(self, count=0, sum_ns=0, max_ns=0, noreply=0, hist=None, errors=0,
                 codes=None):
        self.count, self.sum_ns, self.max_ns, self.noreply = count, sum_ns, max_ns, noreply
        self.hist = {} if hist is None else hist
        self.errors = errors
        self.codes = {} if codes is None else codes

    def add(self, other):
        self.count += other.count
        self.sum_ns += other.sum_ns
        self.max_ns = max(self.max_ns, other.max_ns)
        self.noreply += other.noreply
        self.errors += other.errors
        for k, c in other.codes.items():
            self.codes[k] = self.codes.get(k, 0) + c
        for k, c in other.hist.items():
            self.hist[k] = self.hist.get(k, 0) + c
        return self

    def row(self):
        return [self.count, self.sum_ns, self.max_ns, self.noreply,
                sorted(self.hist.items()), self.errors, sorted(self.codes.items())]

    @classmethod
    def from_row(cls, row):
        # count, sum_ns, max_ns, noreply, hist[, errors, codes] (older lines: no errors)
        count, sum_ns, max_ns, noreply, hist, *err = row
        return cls(int(count), int(sum_ns), int(max_ns), int(noreply),
                   {int(b): int(n) for b, n in hist}, int(err[0]) if err else 0,
                   {int(c): int(n) for c, n in err[1]} if len(err) > 1 else {})

    def stats(self, values=None):
        """:func:`stats` of this aggregate (``values``: its exact latencies, sorted)."""
        return stats(hist_buckets(self.hist), self.sum_ns, self.max_ns, values)

    def __eq__(self, other):
        return isinstance(other, Agg) and all(
            getattr(self, k) == getattr(other, k) for k in self.__slots__)

    def __repr__(self):
        return "Agg(%s)" % ", ".join("%s=%r" % (k, getattr(self, k)) for k in self.__slots__)


# --- connections, from /proc -------------------------------------------------------------

def tcp_address(hexaddr):
    """``(host, port)`` of a /proc/net/tcp{,6} address (``0100007F:6989``); an IPv4
    address mapped into IPv6 is given as IPv4."""
    ip, port = hexaddr.split(":")
    raw = bytes.fromhex(ip)
    if len(raw) == 4:
        host = socket.inet_ntop(socket.AF_INET, raw[::-1])
    else:
        # four host-endian (little) 32-bit words
        host = socket.inet_ntop(socket.AF_INET6,
                                b"".join(raw[i:i + 4][::-1] for i in range(0, 16, 4)))
        if host.startswith("::ffff:") and "." in host:
            host = host[7:]
    return host, int(port, 16)


def address_text(addr):
    """``10.0.0.7:51234``, ``[::1]:51234``."""
    host, port = addr
    return ("[%s]:%d" if ":" in host else "%s:%d") % (host, port)


def tcp_sockets(pid):
    """``{socket inode: (local, remote)}`` of the TCP sockets in pid's network
    namespace (the target's, which may not be ours)."""
    out = {}
    for name in ("tcp", "tcp6"):
        try:
            with open("/proc/%d/net/%s" % (pid, name)) as f:
                next(f)
                for line in f:
                    p = line.split()
                    if len(p) > 9:
                        out[int(p[9])] = (tcp_address(p[1]), tcp_address(p[2]))
        except (OSError, StopIteration):
            continue
    return out


def fd_link(pid, fd):
    """What pid's fd is open on now (``socket:[123]``...), None once it is closed."""
    try:
        return os.readlink("/proc/%d/fd/%d" % (pid, fd))
    except OSError:
        return None


def socket_inode(link):
    """The inode of a ``socket:[N]`` fd link, else None."""
    if link and link.startswith("socket:[") and link.endswith("]"):
        return int(link[8:-1])
    return None


def peer_text(pid, fd, sockets):
    """A connection's remote address for printing (``sockets``: :func:`tcp_sockets`),
    or what the fd is when it is no TCP socket of the table."""
    link = fd_link(pid, fd)
    if link is None:
        return "(closed)"
    ino = socket_inode(link)
    if ino is None:
        return "(%s)" % link
    return address_text(sockets[ino][1]) if ino in sockets else "(socket)"


def io_uring_instances(pid):
    """How many io_uring instances the process holds (its ``anon_inode:[io_uring]``
    fds; with SQPOLL one moves messages without any syscall), 0 when unreadable."""
    try:
        fds = os.listdir("/proc/%d/fd" % pid)
    except OSError:
        return 0
    return sum(fd_link(pid, int(fd)) == "anon_inode:[io_uring]" for fd in fds)
