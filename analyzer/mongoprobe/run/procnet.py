"""Which TCP peer is behind a server's file descriptor (from /proc).

The probes key connections by (pid, fd); people think in client addresses. This
maps each socket fd of a pid to its local and remote (address, port), reading
``/proc/PID/fd`` (socket inodes) and ``/proc/PID/net/tcp`` / ``tcp6`` (the target's
network namespace: a container's, maybe not ours), with ``mongoprobe.wire.facts``, as
the bcc tools do. It is a snapshot: resolve while the connections are open.
"""

from __future__ import annotations

import os

from mongoprobe.wire import facts as wirefacts
from mongoprobe.wire.facts import io_uring_instances  # noqa: F401 (the API; the bcc tools' too)


def tcp_sockets(pid: int) -> dict[int, tuple[tuple[str, int], tuple[str, int]]]:
    """inode -> (local, remote) for every TCP socket of pid's network namespace."""
    return wirefacts.tcp_sockets(pid)


def socket_peers(pid: int) -> dict[int, tuple[tuple[str, int], tuple[str, int]]]:
    """fd -> (local, remote) for the TCP sockets pid has open now."""
    socks = wirefacts.tcp_sockets(pid)
    out = {}
    for fd in os.listdir(f"/proc/{pid}/fd"):
        ino = wirefacts.socket_inode(wirefacts.fd_link(pid, int(fd)))
        if ino in socks:
            out[int(fd)] = socks[ino]
    return out


def fd_path(pid: int, fd: int) -> str:
    """What a pid's file descriptor is open on, while it is (``-1``: a mapping)."""
    if fd < 0:
        return "(mapped memory)"
    try:
        return os.readlink(f"/proc/{pid}/fd/{fd}")
    except OSError:
        return "(closed by now)"
