"""Per-second CPU and run-queue time of two process trees: the server and the load tool.

``record`` runs a :class:`Sampler` beside the command and keeps its lines as
``RUN/treestat.txt``; ``read(path)`` gives them back as a DataFrame. It answers the
USE method's two CPU questions for each side of a benchmark: how much CPU it used
(utilisation, in cores) and how long its runnable threads waited for a CPU
(saturation: the scheduler's ``run_delay``, which also counts the time a CPU quota
throttled them). The server's connected sockets' queues say whether its replies wait
on the network (bytes not yet acknowledged by the peer, and requests not yet read).

Sources, per thread of every process of a tree (``/proc/PID/task/TID/schedstat``:
on-CPU ns, run-queue ns, timeslices); a thread seen in two samples adds the
difference (one that ends between two samples loses its last piece). The kernel adds
a wait to the run-queue time when it ends, so one second can hold a piece of the one
before: read them over a phase, not one by one. The trees:

    server      the target pid and its descendants
    downstream  the local processes the server is a client of (a storage backend
                such as FerretDB's PostgreSQL: the process listening on a port the
                server's connections go to, and its children); no line without one
    tool     the command's session: record starts it as a session leader, so every
             process it forks (a JVM, a shell's children) shares its session id

Format (whitespace-separated, one line per tree and sample)::

    # treestat v1 time role seconds cpu_s runq_s procs threads sendq_bytes recvq_bytes
    1795607660.001 server 1.000 0.912 0.104 1 14 0 0
    1795607660.001 tool 1.000 0.531 0.020 1 6 - -

``time`` is the sample's wall clock (epoch s), ``seconds`` the time since the previous
one, ``cpu_s`` and ``runq_s`` the tree's thread-seconds on a CPU and waiting for one
in that time; ``sendq_bytes``/``recvq_bytes`` the summed send and receive queues of the
tree's TCP sockets at the sample (the server's own process; every process of the
tool's session, in its own network namespace); ``-`` when none could be read.
"""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

HEADER = ("# treestat v1 time role seconds cpu_s runq_s procs threads sendq_bytes "
          "recvq_bytes")
COLUMNS = HEADER.split()[3:]


def _stat_fields(pid: int) -> list[str] | None:
    try:
        with open(f"/proc/{pid}/stat") as fh:
            s = fh.read()
    except OSError:
        return None
    return s[s.rindex(")") + 2:].split()


def _all_pids() -> list[int]:
    return [int(p) for p in os.listdir("/proc") if p.isdigit()]


def children_map() -> dict[int, list[int]]:
    """{parent pid: [child pids]} of every process now."""
    children: dict[int, list[int]] = {}
    for pid in _all_pids():
        f = _stat_fields(pid)
        if f is not None:
            children.setdefault(int(f[1]), []).append(pid)
    return children


def tree_of(root: int, children: dict[int, list[int]] | None = None) -> list[int]:
    """root and its descendants (by parent pid)."""
    children = children_map() if children is None else children
    out, todo = [], [root]
    while todo:
        p = todo.pop()
        out.append(p)
        todo.extend(children.get(p, []))
    return out


def session_of(sid: int) -> list[int]:
    """Every process whose session id is ``sid``."""
    out = []
    for pid in _all_pids():
        f = _stat_fields(pid)
        if f is not None and int(f[3]) == sid:
            out.append(pid)
    return out


def thread_times(pids: list[int]) -> dict[tuple[int, int], tuple[int, int]]:
    """{(pid, tid): (on-CPU ns, run-queue ns)} of every thread of ``pids``."""
    out = {}
    for pid in pids:
        try:
            tids = os.listdir(f"/proc/{pid}/task")
        except OSError:
            continue
        for tid in tids:
            try:
                with open(f"/proc/{pid}/task/{tid}/schedstat") as fh:
                    on, rq, _ = fh.read().split()
            except (OSError, ValueError):
                continue
            out[(pid, int(tid))] = (int(on), int(rq))
    return out


def socket_queues(pid: int) -> tuple[int, int] | None:
    """(send, receive) queue bytes summed over pid's TCP sockets, from its network
    namespace's /proc/PID/net/tcp{,6}; None when they cannot be read."""
    inodes = set()
    try:
        for fd in os.listdir(f"/proc/{pid}/fd"):
            try:
                link = os.readlink(f"/proc/{pid}/fd/{fd}")
            except OSError:
                continue
            if link.startswith("socket:["):
                inodes.add(link[8:-1])
    except OSError:
        return None
    tx = rx = 0
    for name in ("tcp", "tcp6"):
        try:
            with open(f"/proc/{pid}/net/{name}") as fh:
                next(fh)
                for line in fh:
                    f = line.split()
                    if len(f) > 9 and f[9] in inodes and f[3] != "0A":   # 0A: listening
                        t, r = f[4].split(":")
                        tx += int(t, 16)
                        rx += int(r, 16)
        except OSError:
            continue
    return tx, rx


def _listeners() -> dict[int, str]:
    """{port: socket inode} of the host's listening TCP sockets."""
    out = {}
    for name in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            with open(name) as fh:
                next(fh)
                for line in fh:
                    f = line.split()
                    if f[3] == "0A":
                        out[int(f[1].rsplit(":", 1)[1], 16)] = f[9]
        except OSError:
            continue
    return out


def _owner(inode: str) -> int | None:
    """The process holding socket ``inode`` (a scan of /proc/*/fd)."""
    want = f"socket:[{inode}]"
    for pid in _all_pids():
        try:
            for fd in os.listdir(f"/proc/{pid}/fd"):
                if os.readlink(f"/proc/{pid}/fd/{fd}") == want:
                    return pid
        except OSError:
            continue
    return None


class Sampler:
    """Samples the server's tree and the tool's session every ``interval`` seconds
    into ``path`` until ``stop()``."""

    def __init__(self, path: Path, server_pid: int, tool_sid: int | None,
                 interval: float = 1.0):
        self.path, self.server, self.tool = Path(path), server_pid, tool_sid
        self.interval = interval
        self._stop = threading.Event()
        self._last: dict[str, tuple[float, dict]] = {}
        self._owners: dict[str, int | None] = {}     # listener inode -> its process
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def start(self) -> None:
        with open(self.path, "w") as fh:
            fh.write(HEADER + "\n")
        self._sample(write=False)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(10)

    def _loop(self) -> None:
        nxt = time.monotonic() + self.interval
        while not self._stop.wait(max(0.0, nxt - time.monotonic())):
            nxt += self.interval
            self._sample(write=True)
        self._sample(write=True)       # the last piece, up to stop()

    def _sample(self, write: bool) -> None:
        lines = []
        now = time.time()
        kids = children_map()
        trees = {"server": tree_of(self.server, kids)}
        down = [p for d in self.downstreams() for p in tree_of(d, kids)]
        if down:
            trees["downstream"] = down
        if self.tool is not None:
            trees["tool"] = session_of(self.tool)
        for role, pids in trees.items():
            times = thread_times(pids)
            last = self._last.get(role)
            self._last[role] = (now, times)
            if last is None or not write:
                continue
            t0, before = last
            cpu = rq = 0
            for key, (on, q) in times.items():
                on0, q0 = before.get(key, (0, 0))
                cpu, rq = cpu + on - on0, rq + q - q0
            qs = None
            for q in map(socket_queues, {"server": [self.server], "tool": pids}.get(role, [])):
                if q is not None:
                    qs = (q[0] + qs[0], q[1] + qs[1]) if qs else q
            lines.append(f"{now:.3f} {role} {now - t0:.3f} {cpu / 1e9:.6f} {rq / 1e9:.6f} "
                         f"{len(pids)} {len(times)} "
                         + (f"{qs[0]} {qs[1]}" if qs else "- -"))
        if lines:
            with open(self.path, "a") as fh:
                fh.write("".join(s + "\n" for s in lines))


    def downstreams(self) -> list[int]:
        """The local processes listening on the ports the server's connections go to."""
        from .procnet import socket_peers

        try:
            peers = socket_peers(self.server)
        except OSError:
            return []
        listening = _listeners()
        mine = {local[1] for local, remote in peers.values() if remote[1] == 0}
        out = []
        for local, remote in peers.values():
            port = remote[1]
            if port == 0 or port in mine or port not in listening:
                continue
            inode = listening[port]
            if inode not in self._owners:
                self._owners[inode] = _owner(inode)
            pid = self._owners[inode]
            if pid is not None and pid != self.server and pid not in out:
                out.append(pid)
        return out


def read(path: str | os.PathLike):
    """``treestat.txt`` -> DataFrame: time, seconds, cpu_s, runq_s (float64), role
    (str), procs, threads (int64), sendq_bytes, recvq_bytes (float64, NaN for ``-``)."""
    import pandas as pd

    from .formats.errors import FormatError

    rows = []
    with open(path) as fh:
        for n, line in enumerate(fh, 1):
            if not line.strip() or line.startswith("#"):
                continue
            f = line.split()
            if len(f) != 9:
                raise FormatError(str(path), n, "treestat line (9 fields)", line.strip())
            rows.append([float(f[0]), f[1], float(f[2]), float(f[3]), float(f[4]),
                         int(f[5]), int(f[6]),
                         float("nan") if f[7] == "-" else float(f[7]),
                         float("nan") if f[8] == "-" else float(f[8])])
    cols = ["time", "role", "seconds", "cpu_s", "runq_s", "procs", "threads",
            "sendq_bytes", "recvq_bytes"]
    return pd.DataFrame(rows, columns=cols)
