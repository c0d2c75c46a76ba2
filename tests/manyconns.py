"""A plain-socket client for many connections at once, for the probes' map sizes.

``rounds(host, port, n, k)`` opens ``n`` connections to a MongoDB-protocol server and,
round by round, sends a ``ping`` on every connection before reading any reply (the
requests are pipelined across connections, so thousands are outstanding at once), every
connection using the same requestID in a round (requestIDs overlap across
connections). ``churn(host, port, n, at_once)`` opens ``n`` short connections,
``at_once`` at a time, one ping each, closed at once after the reply (the kernel reuses
their fds). Both check every reply (opcode, responseTo) and return the number of
requests answered, so a count that differs is the probe's.

One thread, non-blocking sockets and a selector: thousands of connections need no
thread each. RLIMIT_NOFILE is raised to what the connections need (up to the hard
limit).
"""

from __future__ import annotations

import resource
import selectors
import socket
import struct
import time

from mongoprobe.wire.decode import OP_MSG
from mongoprobe.wire.encode import encode_op_msg

HEADER = struct.Struct("<iiii")
TIMEOUT = 60.0


def raise_nofile(n: int) -> int:
    """Raise the soft RLIMIT_NOFILE to at least ``n`` (within the hard limit); the new
    soft limit."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = n if hard == resource.RLIM_INFINITY else min(n, hard)
    if soft != resource.RLIM_INFINITY and soft < want:
        resource.setrlimit(resource.RLIMIT_NOFILE, (want, hard))
        soft = want
    return soft


def _connect(host: str, port: int) -> socket.socket:
    s = socket.create_connection((host, port), timeout=TIMEOUT)
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return s


def open_connections(host: str, port: int, n: int) -> list[socket.socket]:
    raise_nofile(n + 256)
    conns = []
    try:
        for _ in range(n):
            conns.append(_connect(host, port))
    except OSError:
        for s in conns:
            s.close()
        raise
    return conns


def _ping(request_id: int) -> bytes:
    return encode_op_msg(request_id, 0, {"ping": 1, "$db": "admin"})


def _exchange(conns: list[socket.socket], request_id: int) -> int:
    """Send one ping (requestID ``request_id``) on every connection, then read every
    reply; the number of replies that answered their request."""
    msg = _ping(request_id)
    for s in conns:
        s.setblocking(True)
        s.sendall(msg)
        s.setblocking(False)
    sel = selectors.DefaultSelector()
    bufs: dict[socket.socket, bytes] = {}
    for s in conns:
        sel.register(s, selectors.EVENT_READ)
        bufs[s] = b""
    answered = 0
    deadline = time.monotonic() + TIMEOUT
    try:
        while bufs:
            if time.monotonic() > deadline:
                raise TimeoutError(f"{len(bufs)} of {len(conns)} replies missing")
            for key, _ in sel.select(timeout=1.0):
                s = key.fileobj
                try:
                    chunk = s.recv(65536)
                except BlockingIOError:
                    continue
                if not chunk:
                    raise ConnectionError("the server closed a connection")
                buf = bufs[s] + chunk
                if len(buf) >= 16:
                    length, _rid, resp_to, op = HEADER.unpack_from(buf)
                    if len(buf) >= length:
                        if op != OP_MSG or resp_to != request_id or len(buf) != length:
                            raise AssertionError(f"bad reply: op {op} responseTo {resp_to}")
                        answered += 1
                        sel.unregister(s)
                        del bufs[s]
                        continue
                bufs[s] = buf
    finally:
        sel.close()
    return answered


def rounds(host: str, port: int, n: int, k: int) -> int:
    """``k`` rounds of a ping on each of ``n`` connections (requestID = round number);
    the requests answered."""
    conns = open_connections(host, port, n)
    try:
        return sum(_exchange(conns, r) for r in range(1, k + 1))
    finally:
        for s in conns:
            s.close()


def churn(host: str, port: int, n: int, at_once: int = 100) -> int:
    """``n`` short connections, ``at_once`` open at a time, one ping each (requestID 1);
    the requests answered."""
    raise_nofile(at_once + 256)
    answered = 0
    while n > 0:
        batch = [_connect(host, port) for _ in range(min(at_once, n))]
        try:
            answered += _exchange(batch, 1)
        finally:
            for s in batch:
                s.close()
        n -= len(batch)
    return answered


if __name__ == "__main__":
    import argparse
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("port", type=int)
    p.add_argument("-n", type=int, default=1000, help="connections")
    p.add_argument("-k", type=int, default=10, help="rounds")
    p.add_argument("--churn", action="store_true")
    a = p.parse_args()
    t = time.monotonic()
    got = churn("127.0.0.1", a.port, a.n) if a.churn else rounds("127.0.0.1", a.port, a.n, a.k)
    print(f"{got} answered in {time.monotonic() - t:.1f} s")
