"""Which TCP peer is behind a server's file descriptor (from /proc).

The probes key connections by (pid, fd); people think in client addresses. This
maps each socket fd of a pid to its local and remote (address, port), reading
``/proc/PID/fd`` (socket inodes) and ``/proc/net/tcp`` / ``tcp6``. It is a
snapshot: resolve while the connections are open.
"""

from __future__ import annotations

import ipaddress
import os
import re
import socket
import struct

_SOCK = re.compile(r"socket:\[(\d+)\]")


def _addr(hexaddr: str) -> tuple[str, int]:
    ip, port = hexaddr.split(":")
    raw = bytes.fromhex(ip)
    if len(raw) == 4:
        host = socket.inet_ntop(socket.AF_INET, raw[::-1])
    else:
        # /proc prints IPv6 as four host-endian 32-bit words
        host = str(ipaddress.IPv6Address(b"".join(struct.pack("<I", w) for w in
                                                  struct.unpack(">4I", raw))))
    return host, int(port, 16)


def tcp_sockets() -> dict[int, tuple[tuple[str, int], tuple[str, int]]]:
    """inode -> (local, remote) for every TCP socket on the host."""
    out = {}
    for name in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            with open(name) as f:
                next(f)
                for line in f:
                    p = line.split()
                    out[int(p[9])] = (_addr(p[1]), _addr(p[2]))
        except OSError:
            continue
    return out


def socket_peers(pid: int) -> dict[int, tuple[tuple[str, int], tuple[str, int]]]:
    """fd -> (local, remote) for the TCP sockets pid has open now."""
    socks = tcp_sockets()
    out = {}
    fddir = f"/proc/{pid}/fd"
    for fd in os.listdir(fddir):
        try:
            m = _SOCK.match(os.readlink(f"{fddir}/{fd}"))
        except OSError:
            continue
        if m and int(m[1]) in socks:
            out[int(fd)] = socks[int(m[1])]
    return out


def io_uring_instances(pid: int) -> int:
    """How many io_uring instances the process holds (its ``anon_inode:[io_uring]``
    fds; with SQPOLL one moves messages without any syscall), 0 when unreadable."""
    n = 0
    try:
        fds = os.listdir(f"/proc/{pid}/fd")
    except OSError:
        return 0
    for fd in fds:
        try:
            n += os.readlink(f"/proc/{pid}/fd/{fd}") == "anon_inode:[io_uring]"
        except OSError:
            pass
    return n


def fd_path(pid: int, fd: int) -> str:
    """What a pid's file descriptor is open on, while it is (``-1``: a mapping)."""
    if fd < 0:
        return "(mapped memory)"
    try:
        return os.readlink(f"/proc/{pid}/fd/{fd}")
    except OSError:
        return "(closed by now)"
