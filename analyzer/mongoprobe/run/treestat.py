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

    # treestat v2 time role seconds cpu_s runq_s procs threads sendq_bytes recvq_bytes flush_s lock_s flush_by
    1795607660.001 server 1.000 0.912 0.104 1 14 0 0 - - - -
    1795607660.001 downstream 1.000 0.402 0.051 9 9 - - 0.880 0.320 0.012 backend=0.840,walwriter=0.040
    1795607660.001 tool 1.000 0.531 0.020 1 6 - - - - - -

``time`` is the sample's wall clock (epoch s), ``seconds`` the time since the previous
one, ``cpu_s`` and ``runq_s`` the tree's thread-seconds on a CPU and waiting for one
in that time; ``sendq_bytes``/``recvq_bytes`` the summed send and receive queues of the
tree's TCP sockets at the sample (the server's own process; every process of the
tool's session, in its own network namespace); ``-`` when none could be read.

v2 adds, on the downstream's lines only (``-`` elsewhere), why its threads were off
CPU, in thread-seconds: ``flush_s`` inside a flush syscall (fsync, fdatasync,
sync_file_range, msync); ``lock_s`` in a lock-wait syscall (futex, semop, flock, fcntl)
or, for a PostgreSQL process, while its title says ``waiting`` (a heavyweight lock:
a row's or a transaction's, which PostgreSQL waits for on its latch, in epoll_wait);
``other_s`` a backend blocked in any other syscall while its title does not say
``idle`` (serving a statement: a read, a wait none of the above names; not a send,
which waits for the client to read); and
``flush_by``, the flush time by kind of process (``backend=0.81,walwriter=0.04``: a
backend's title names its client's address, the others are named by their title).
A backend whose title says ``idle`` waits for its client: that time is not counted.
The offcpu probe traces the server's own process only; these come from sampling each
downstream thread's ``/proc/PID/task/TID/syscall`` (the syscall it is blocked in, also
while a tracer holds it at its entry) and its process's title at ``WAIT_HZ``, each
sample counting for the time since the last one: an estimate, good to a few
hundredths of a thread over a phase of seconds.
"""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

HEADER = ("# treestat v2 time role seconds cpu_s runq_s procs threads sendq_bytes "
          "recvq_bytes flush_s lock_s other_s flush_by")
COLUMNS = HEADER.split()[3:]

# downstream wait sampling: often enough for a few hundred samples per thread in a
# phase of seconds, rarely enough to cost ~1% of a core for a dozen threads
WAIT_HZ = 25
# syscall numbers (/proc/PID/syscall's first field) by architecture
_FLUSH = {"x86_64": {74, 75, 277, 26}, "aarch64": {82, 83, 84, 227}}
# a backend blocked sending (write, writev, sendto, sendmsg) waits for its client to
# read its reply: the server's time, not the downstream's
_SEND = {"x86_64": {1, 20, 44, 46}, "aarch64": {64, 66, 206, 211}}
# PostgreSQL's titles of a backend waiting for its client
IDLE = (" idle", " idle in transaction", " idle in transaction (aborted)")
_LOCK = {"x86_64": {202, 65, 220, 73, 72, 449}, "aarch64": {98, 193, 192, 32, 25, 449}}


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


def blocked_in(pid: int, tid: int) -> int | None:
    """The syscall number thread ``tid`` is blocked in, None when it runs or is gone."""
    try:
        with open(f"/proc/{pid}/task/{tid}/syscall") as fh:
            first = fh.read().split(" ", 1)[0]
    except OSError:
        return None
    return int(first) if first.lstrip("-").isdigit() and first != "-1" else None


def title(pid: int) -> str:
    """The process's title (its command line, which PostgreSQL rewrites to say what
    each process does: ``postgres: USER DB 127.0.0.1(PORT) INSERT waiting``)."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as fh:
            return fh.read().replace(b"\0", b" ").decode(errors="replace").strip()
    except OSError:
        return ""


def process_kind(pid: int) -> str:
    """A downstream process's kind for the evidence: ``backend`` when its title names
    a client address (PostgreSQL's ``postgres: USER DB 127.0.0.1(PORT) ...``), else
    its title's first word after ``NAME:`` (``walwriter``), else its program's name."""
    import re
    title_ = title(pid)
    if not title_:
        return "?"
    if re.search(r"\(\d+\)|\[local\]", title_):
        return "backend"
    if ": " in title_:
        return (title_.split(": ", 1)[1].split() or ["?"])[0]
    return os.path.basename(title_.split(" ", 1)[0]) or "?"


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
        import platform
        arch = platform.machine()
        self._flush_nr, self._lock_nr = _FLUSH.get(arch), _LOCK.get(arch)
        self._send_nr = _SEND.get(arch)
        self._down: list[int] = []           # the downstream's pids, at the last sample
        self._kinds: dict[int, str] = {}
        self._waits = {"flush": 0.0, "lock": 0.0, "other": 0.0}
        self._flush_by: dict[str, float] = {}
        self._wlock = threading.Lock()
        self._wthread = threading.Thread(target=self._wait_loop, daemon=True)

    def start(self) -> None:
        with open(self.path, "w") as fh:
            fh.write(HEADER + "\n")
        self._sample(write=False)
        self._thread.start()
        if self._flush_nr is not None:     # an architecture whose numbers are known
            self._wthread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(10)
        if self._wthread.is_alive():
            self._wthread.join(10)

    def _wait_loop(self) -> None:
        """Samples what each downstream thread is blocked in, WAIT_HZ times a second."""
        last = time.monotonic()
        while not self._stop.wait(1.0 / WAIT_HZ):
            now = time.monotonic()
            dt, last = now - last, now
            for pid in list(self._down):
                try:
                    tids = [int(t) for t in os.listdir(f"/proc/{pid}/task")]
                except OSError:
                    continue
                if pid not in self._kinds:
                    self._kinds[pid] = process_kind(pid)
                kind, state = self._kinds[pid], None
                for tid in tids:
                    nr = blocked_in(pid, tid)
                    if nr is None:
                        continue        # on a CPU or runnable: schedstat has it
                    if nr in self._flush_nr:
                        what = "flush"
                    elif nr in self._lock_nr:
                        what = "lock"
                    else:
                        # PostgreSQL says in its title what a blocked backend waits for
                        state = title(pid) if state is None else state
                        if state.endswith(" waiting"):
                            what = "lock"
                        elif (kind == "backend" and nr not in self._send_nr
                              and not state.endswith(IDLE)):
                            what = "other"
                        else:
                            continue
                    if what is None:
                        continue
                    with self._wlock:
                        self._waits[what] += dt
                        if what == "flush":
                            self._flush_by[kind] = self._flush_by.get(kind, 0.0) + dt

    def _drain_waits(self) -> str:
        """The downstream's wait columns since the last line, and zero them."""
        if self._flush_nr is None:
            return "- - - -"
        with self._wlock:
            w, by = self._waits, self._flush_by
            self._waits, self._flush_by = {"flush": 0.0, "lock": 0.0, "other": 0.0}, {}
        named = ",".join(f"{k}={v:.3f}" for k, v in sorted(by.items(), key=lambda kv: -kv[1]))
        return f"{w['flush']:.3f} {w['lock']:.3f} {w['other']:.3f} {named or '-'}"

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
        self._down = down
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
                         + (f"{qs[0]} {qs[1]}" if qs else "- -")
                         + " " + (self._drain_waits() if role == "downstream" else "- - - -"))
        if lines:
            with open(self.path, "a") as fh:
                fh.write("".join(s + "\n" for s in lines))


    def downstreams(self) -> list[int]:
        """The local processes listening on the ports the server's connections go to."""
        from mongoprobe.run.procnet import socket_peers

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
    """``treestat.txt`` (v1 or v2) -> DataFrame: time, seconds, cpu_s, runq_s (float64),
    role (str), procs, threads (int64), sendq_bytes, recvq_bytes, flush_s, lock_s,
    other_s (float64, NaN for ``-`` and in v1), flush_by (dict {kind: thread-s}, empty
    for ``-``)."""
    import pandas as pd

    from mongoprobe.formats.errors import FormatError

    rows = []
    with open(path) as fh:
        for n, line in enumerate(fh, 1):
            if not line.strip() or line.startswith("#"):
                continue
            f = line.split()
            if len(f) == 9:
                f += ["-"] * 4        # v1: no wait columns
            if len(f) != 13:
                raise FormatError(str(path), n, "treestat line (9 or 13 fields)",
                                  line.strip())
            try:
                by = {} if f[12] == "-" else {k: float(v) for k, v in
                                              (kv.split("=") for kv in f[12].split(","))}
            except ValueError:
                raise FormatError(str(path), n, "flush_by as KIND=SECONDS,...", f[12])
            num = [float("nan") if x == "-" else float(x) for x in f[7:12]]
            rows.append([float(f[0]), f[1], float(f[2]), float(f[3]), float(f[4]),
                         int(f[5]), int(f[6]), *num, by])
    cols = ["time", "role", "seconds", "cpu_s", "runq_s", "procs", "threads",
            "sendq_bytes", "recvq_bytes", "flush_s", "lock_s", "other_s", "flush_by"]
    return pd.DataFrame(rows, columns=cols)
