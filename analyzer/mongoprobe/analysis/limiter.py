"""What limits each phase: the active-benchmarking verdict, from what a run recorded.

A closed-loop load tool's threads are always somewhere: inside the server (the
latency probe's time, split by what the server's threads do), on the network, or in
the tool itself. ``figures(run, table)`` measures, per phase, how many threads (in
thread-seconds per second) each resource holds; ``decide(fig)`` turns one phase's
figures into a :class:`Verdict`: the limiting resource, the others ranked, each with
its share (its thread-seconds over all of them) and its evidence in figures.

Where the time is measured (per phase, thread-seconds per second):

    server-cpu         the server's threads on a CPU + waiting for one (treestat.txt:
                       schedstat of every thread of its process tree)
    server-disk        its threads off-CPU under fsync/fdatasync or an I/O wait
                       (offcpu.bt's stacks, ``offcpu_reason``)
    server-lock        off-CPU in a lock wait (SQLite's busy handler, futex locks)
    server-downstream  off-CPU waiting on another process (a storage backend's socket)
                       for what that process's own figures do not explain
    load-tool          the tool's process tree on a CPU + waiting for one (treestat;
                       a CPU quota's throttling counts as waiting)
    network            the time the tool's requests spend outside the server that the
                       tool's CPU does not explain, when the sockets' queues show
                       bytes waiting (else that time is the tool's idle time)

The time outside the server comes from each connection's gaps between a reply and
its next request (``record --events``), else from the tool's client latency minus
the server's. A resource is *saturated* when its own figures say so (the thresholds
below); the limiter is the saturated resource with the largest share, ``none`` when
nothing is saturated (a rate-limited phase). What was not recorded is named, with
the probe or option that would measure it, never guessed.

A server with a local storage backend (FerretDB on PostgreSQL) waits on it: the
requests' time in the server beyond its own threads' is spent there. That process is
not a resource: its figures (treestat's ``downstream`` lines: its CPU and run queue,
its threads' time in flush and lock-wait syscalls, sampled) say which resource the
wait is, and that resource is charged: the backend's CPU to server-cpu (the same
cores), its fsync/fdatasync to server-disk (the flush the server's writes wait for,
made by another process), its lock waits to server-lock. server-downstream is what
its backends did while serving that the samples cannot name (blocked in another
syscall); the part of the wait its processes do not account for at all (a Go server's
goroutines queued for a thread) is not the downstream's and is charged to nothing.

The server's side's thread-seconds (a Go runtime's threads, the backend's processes)
can outnumber the requests inside it: they are scaled to the requests' time inside,
so every share is of the benchmark's threads.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field

from mongoprobe.model.phase import Phase, phases_from

RESOURCES = ("load-tool", "network", "server-cpu", "server-disk", "server-lock",
             "server-downstream", "none")

# Saturation thresholds (each says why):
# a CPU consumer whose threads wait for a CPU a quarter as long as they run is queued
# (the USE method's saturation); on a shared machine that is also others' load,
# which is still the CPU the benchmark gets
RUNQ_SATURATED = 0.25
# ... and waits at least a twentieth of a thread: less holds nothing (a CPU quota
# holds a tool to little CPU, so the floor is on the wait, not on its CPU)
RUNQ_FLOOR = 0.05
# ... or one using nearly every core is busy whatever its queue
CPU_BUSY = 0.85
# ... or more requests inside the server than cores, its threads on a CPU or queued for
# one nearly all their busy time: the demand beyond the cores waits. A runtime with a
# scheduler of its own (Go's) queues the goroutines beyond its threads itself, out of
# the kernel's run queue, so the queue above does not show it
CPU_DEMAND = 0.9
# a flush in flight half of the phase's time: the disk is the serial path (SQLite
# commits one transaction at a time, each ending in an fsync)
DISK_SERIAL = 0.5
# a quarter of a thread always waiting on a lock (or another process) is contention
WAIT_SATURATED = 0.25
# bytes waiting in the sockets' queues on average: loopback acknowledges at once, so
# a queue this deep means packets wait on the path (a shaped or slow link)
NET_QUEUED_BYTES = 2048

# Why a server thread was off-CPU, from its stack (kernel and user frames); checked
# in this order, the first that matches decides.
REASONS = [
    ("disk", re.compile(r"fsync|fdatasync|sync_file_range|io_schedule|submit_bio|"
                        r"folio_wait|wait_on_page|blkdev_issue_flush|jbd2|_unixSync|"
                        r"full_fsync|msync")),
    ("lock", re.compile(r"_unixSleep|BusyCallback|BusyHandler|pthread_mutex|__lll_lock|"
                        r"rwsem|mutex_lock|flock|fcntl_setlk|posix_lock|semacquire")),
    # (FerretDB's SQLite runs in-process under database/sql: not a downstream wait)
    ("downstream", re.compile(r"pgconn|pgx|pgproto3|libpq|PQexec|PQgetResult")),
    ("preempted", re.compile(r"irqentry_exit|exit_to_user_mode_loop|sched_yield|"
                             r"preempt_schedule|osyield")),
    ("idle", re.compile(r"epoll_wait|epoll_pwait|runtime\.(?:stopm|notesleep|mPark|"
                        r"findRunnable|findrunnable|usleep|netpoll|sysmon)|do_sys_poll|"
                        r"accept|futex")),
]


def offcpu_reason(frames: str) -> str:
    """disk | lock | downstream | preempted | idle | other for an off-CPU stack."""
    for name, rx in REASONS:
        if rx.search(frames):
            return name
    return "other"


@dataclass
class Figures:
    """One phase's measured figures (None: not recorded; the name in ``missing``)."""
    phase: str
    seconds: float
    ncpu: int | None = None
    ops: float | None = None
    server_s: float | None = None         # requests inside the server (thread-s/s)
    server_us: float | None = None        # its mean time per request
    client_us: float | None = None        # the tool's mean latency (weighted), if any
    outside_s: float | None = None        # tool threads outside the server (thread-s/s)
    outside_how: str | None = None
    conns: int | None = None
    srv_cpu: float | None = None
    srv_runq: float | None = None
    down_cpu: float | None = None         # the server's downstream processes (treestat)
    down_runq: float | None = None
    down_flush: float | None = None       # its threads in flush syscalls (thread-s/s)
    down_lock: float | None = None        # ... in lock-wait syscalls, or a lock (title)
    down_other: float | None = None       # its backends serving, blocked in anything else
    down_flush_by: dict = field(default_factory=dict)   # {process kind: thread-s/s}
    tool_cpu: float | None = None
    tool_runq: float | None = None
    sendq: float | None = None            # mean queued bytes, server's + tool's sockets
    wire_kbs: float | None = None         # requests + replies, KB/s (the events' sizes)
    off: dict | None = None               # {reason: thread-s/s} of the server's threads
    off_top: dict = field(default_factory=dict)   # {reason: (frame, share of reason)}
    categories: dict = field(default_factory=dict)   # on-CPU category shares
    machine_busy: float | None = None     # vmstat us+sy: every process's CPU, %
    disk_util: float | None = None        # iostat %util (busiest device)
    disk_await: float | None = None       # iostat await ms of that device
    missing: list = field(default_factory=list)


@dataclass
class Limit:
    resource: str
    share: float
    saturated: bool
    evidence: list[str]
    link: str | None = None               # the report's anchor that shows it

    def json(self) -> dict:
        return {"resource": self.resource, "share": round(float(self.share), 3),
                "saturated": bool(self.saturated), "evidence": list(self.evidence)}


@dataclass
class Verdict:
    phase: str
    limiter: Limit
    limits: list[Limit]
    time: dict                            # where a request's time goes (µs, shares)
    missing: list[str]
    decided: bool = True                  # False: evidence missing (``missing``)
    figures: Figures | None = None        # what it was decided from

    def json(self) -> dict:
        return {"limiter": {**self.limiter.json(), "decided": self.decided}, "limits": [x.json() for x in self.limits],
                "time_split": self.time, "evidence_missing": list(self.missing)}


# --- the rule --------------------------------------------------------------------------


def _f(v, fmt=".2f") -> str:
    return "?" if v is None else format(v, fmt)


def decide(fig: Figures) -> Verdict:
    """The verdict of one phase from its figures (the module doc's rule)."""
    off = fig.off or {}
    comp: dict[str, float | None] = {}
    ev: dict[str, list[str]] = {r: [] for r in RESOURCES}
    sat: dict[str, bool] = {r: False for r in RESOURCES}
    ncpu = fig.ncpu or 1

    # the downstream process's share of the requests' time, split by its own figures
    down = _downstream(fig, off)
    # the server's CPU (with the downstream's: the same cores, the same requests)
    if fig.srv_cpu is not None:
        cpu, runq = fig.srv_cpu + down["cpu"], fig.srv_runq + down["runq"]
        comp["server-cpu"] = cpu + runq
        blocked = sum(off.get(k) or 0.0 for k in ("disk", "lock", "downstream", "other"))
        on_cpu = (cpu + runq) / (cpu + runq + blocked) if fig.off and cpu + runq else None
        demand = (on_cpu is not None and fig.server_s is not None
                  and fig.server_s >= ncpu and on_cpu >= CPU_DEMAND)
        sat["server-cpu"] = (runq >= RUNQ_SATURATED * cpu and runq >= RUNQ_FLOOR
                             or cpu >= CPU_BUSY * ncpu or demand)
        line = (f"server CPU {cpu:.2f} of {ncpu} cores, its threads waited "
                f"{runq:.2f} s/s for a CPU")
        if fig.down_cpu is not None:
            line += (f" (its downstream's {fig.down_cpu:.2f} and {fig.down_runq:.2f} of "
                     "them)")
        if fig.machine_busy is not None and cpu < CPU_BUSY * ncpu:
            line += (f"; the machine's CPUs {fig.machine_busy:.0f}% busy (vmstat): "
                     "other processes take the rest")
        ev["server-cpu"].append(line)
        if demand:
            ev["server-cpu"].append(
                f"{fig.server_s:.2f} requests inside the server on {ncpu} cores, its "
                f"threads on a CPU or queued for one {on_cpu:.0%} of their busy time")
        if fig.categories:
            cat, share = max(fig.categories.items(), key=lambda kv: kv[1])
            ev["server-cpu"].append(f"{share:.0%} of on-CPU samples in {cat}")
    # the server's off-CPU reasons, and the downstream's
    if fig.off is not None:
        disk = off.get("disk", 0.0) + down["flush"]
        lock = off.get("lock", 0.0) + down["lock"]
        comp["server-disk"], comp["server-lock"] = disk, lock
        comp["server-downstream"] = (down["rest"] if fig.down_cpu is not None
                                     else off.get("downstream", 0.0))
        for r, k in (("server-disk", "disk"), ("server-lock", "lock"),
                     ("server-downstream", "downstream")):
            what = {"disk": "in fsync/fdatasync or I/O waits", "lock": "in lock waits",
                    "downstream": "waiting on another process"}[k]
            line = f"server threads {what} {off.get(k, 0.0):.2f} s/s"
            top = fig.off_top.get(k)
            if top:
                line += f" ({top[1]:.0%} under {top[0]})"
            ev[r].append(line)
        if down["flush"] > 0:
            by = ", ".join(f"{k} {v:.2f}" for k, v in fig.down_flush_by.items() if v >= 0.005)
            ev["server-disk"].insert(0, (
                f"its downstream's processes in fsync/fdatasync {down['flush']:.2f} s/s"
                + (f" ({by})" if by else "") + f", while requests waited on it "
                f"{down['wait']:.2f} s/s: the disk, reached through another process"))
        if down["lock"] > 0:
            ev["server-lock"].insert(0, f"its downstream's processes in lock waits "
                                        f"{down['lock']:.2f} s/s (futex, semop, flock, or "
                                        "a row's or transaction's lock)")
        if disk >= DISK_SERIAL and lock > 0:
            # writers queue on the lock the flushing writer holds: the disk's queue
            comp["server-disk"], comp["server-lock"] = disk + lock, 0.0
            ev["server-disk"].insert(1, f"lock waits {lock:.2f} s/s queue behind a flush in "
                                        f"flight {min(disk, 1.0):.0%} of the time: the disk's queue")
        sat["server-disk"] = comp["server-disk"] >= DISK_SERIAL or (
            fig.disk_util is not None and fig.disk_util >= 80)
        sat["server-lock"] = comp["server-lock"] >= WAIT_SATURATED
        sat["server-downstream"] = comp["server-downstream"] >= WAIT_SATURATED
    if fig.down_cpu is not None:
        ev["server-downstream"] = [
            f"requests waited on another process {down['wait']:.2f} s/s (their time in the "
            f"server beyond its threads' {down['mine']:.2f}); its backends serving, "
            f"blocked in other syscalls {down['rest']:.2f} s/s"
            + (f"; {down['outside']:.2f} s/s of the wait not in its processes (the "
               "server's own queueing)" if down["outside"] >= 0.005 else ""),
            f"its processes on CPU {fig.down_cpu:.2f} cores, waited "
            f"{fig.down_runq:.2f} s/s for one"]
        if fig.down_other is None:
            ev["server-downstream"].append("its threads' flush and lock waits not sampled "
                                           "(treestat v1, or an unknown architecture): "
                                           "the wait its CPU does not explain is counted")
    if fig.disk_util is not None:
        ev["server-disk"].append(f"disk {fig.disk_util:.0f}% busy, await "
                                 f"{_f(fig.disk_await, '.1f')} ms (iostat)")
    # the load tool and the network
    tool = None
    if fig.tool_cpu is not None:
        tool = fig.tool_cpu + fig.tool_runq
        sat["load-tool"] = (fig.tool_runq >= RUNQ_SATURATED * fig.tool_cpu
                            and fig.tool_runq >= RUNQ_FLOOR
                            or fig.tool_cpu >= CPU_BUSY * ncpu)
        ev["load-tool"].append(f"load tool CPU {fig.tool_cpu:.2f} of {ncpu} cores, its "
                               f"threads waited {fig.tool_runq:.2f} s/s for a CPU")
    idle = 0.0
    unattributed = 0.0     # outside the server, where the tool's CPU is unknown
    queued = fig.sendq is not None and fig.sendq >= NET_QUEUED_BYTES
    if fig.sendq is not None:
        ev["network"].append(f"sockets' send queues hold {fig.sendq:,.0f} bytes on average"
                             + (f", {fig.wire_kbs:,.1f} KB/s of requests and replies"
                                if fig.wire_kbs is not None else ""))
    if fig.outside_s is not None:
        out = fig.outside_s
        comp["load-tool"] = min(out, tool) if tool is not None else None
        net = max(0.0, out - (tool or 0.0)) if queued else 0.0
        comp["network"] = net
        sat["network"] = queued and net > 0
        rest = max(0.0, out - (comp["load-tool"] or 0.0) - net)
        if tool is None:
            unattributed = rest
        else:
            idle = rest
        where = (f"{fig.outside_s:.2f} of the tool's threads (s/s) outside the server"
                 + (f" over {fig.conns} connections" if fig.conns else "")
                 + f" ({fig.outside_how})")
        ev["load-tool"].insert(0, where)
        if queued:
            ev["network"].insert(0, where)
        if fig.client_us is not None and fig.server_us is not None:
            ev["network"].append(f"client latency {fig.client_us:,.0f} us vs server "
                                 f"{fig.server_us:,.0f} us: {fig.client_us - fig.server_us:,.0f}"
                                 " us a request outside the server")
        if not queued and fig.sendq is not None:
            ev["network"].append("queues empty: the time outside the server is the tool's")
    elif tool is not None:
        comp["load-tool"] = tool
    if fig.server_s is not None:
        ev["server-cpu"].insert(0, f"{fig.server_s:.2f} requests inside the server on average"
                                f" ({_f(fig.server_us, ',.0f')} us each)")

    inside = [r for r in ("server-cpu", "server-disk", "server-lock", "server-downstream")
              if comp.get(r) is not None]
    held = sum(comp[r] for r in inside)
    if fig.server_s and held > fig.server_s:
        # the server's threads (a Go runtime's, its backend's processes) can spend more
        # thread-seconds than the benchmark's requests spent inside it: the shares are
        # of the benchmark's threads, so its time inside is split by what they did
        for r in inside:
            comp[r] *= fig.server_s / held
    known = {r: v for r, v in comp.items() if v is not None}
    total = sum(known.values()) + idle
    limits = []
    for r in RESOURCES[:-1]:
        share = known[r] / total if r in known and total > 0 else 0.0
        limits.append(Limit(r, share, sat[r], ev[r][:3] or ["not measured"], LINKS.get(r)))
    limits.sort(key=lambda x: (-x.share, RESOURCES.index(x.resource)))
    top = next((x for x in limits if x.saturated and x.share > 0), None)
    decided = True
    if top is not None and fig.off is None:
        # the server's off-CPU waits were not recorded: they are part of the requests'
        # time inside it, so at most what its CPU does not cover; a limiter larger
        # than that bound holds whatever they were
        bound = (None if fig.server_s is None or fig.srv_cpu is None
                 else max(0.0, fig.server_s - comp["server-cpu"]))
        if bound is None or known[top.resource] <= bound:
            top = None
        else:
            top.evidence = (top.evidence + [f"(server off-CPU waits not recorded: at most "
                                            f"{bound:.2f} s/s, less than this)"])[:3]
    if fig.outside_s is None:
        top = None      # the tool's and the network's part of the time is unmeasured
    if top is not None and unattributed >= known[top.resource]:
        top = None      # the tool's part of the time outside the server could be larger
    paced = top is not None and idle > known[top.resource]
    if paced:
        # the tool's threads idle longer than they wait on the busiest saturated
        # resource: the tool paces the phase (a rate limit, think time)
        top = None
    if top is None and (unattributed > 0 or fig.srv_cpu is None or fig.off is None
                        or fig.outside_s is None):
        # nothing saturated among what was measured, and something was not: no guess
        decided = False
        top = Limit("none", 0.0, False, ["undecided: " + "; ".join(fig.missing)], None)
    elif top is None:
        why = (f"nothing saturated; the tool's threads idle {idle / total:.0%} of the time"
               if total > 0 and idle > 0 else "nothing saturated")
        if paced:
            busiest = next(x for x in limits if x.saturated)
            why = (f"nothing saturated holds the tool: its threads idle {idle / total:.0%} "
                   f"of the time (paced), {busiest.resource} {busiest.share:.0%}")
        top = Limit("none", idle / total if total > 0 else 0.0, False,
                    [why] + [f"{x.resource} {x.share:.0%}" for x in limits[:2]], None)
    else:
        limits.remove(top)
    return Verdict(fig.phase, top, [top] + limits if top.resource != "none" else limits,
                   _time_split(fig, off), list(fig.missing), decided, fig)


def _downstream(fig: Figures, off: dict) -> dict:
    """The requests' wait on the downstream (``wait``: their time in the server beyond
    its own threads', ``mine``) and what the downstream's figures make of it, thread-s/s:
    its ``cpu`` and ``runq``, ``flush`` and ``lock`` waits (each its whole measured
    time: it is that resource's use by the server's side), ``rest`` its backends'
    time serving that the samples cannot name (server-downstream), ``outside`` the
    wait none of its processes accounts for. All zero without a downstream."""
    if fig.down_cpu is None:
        return dict(wait=0.0, mine=0.0, cpu=0.0, runq=0.0, flush=0.0, lock=0.0, rest=0.0,
                    outside=0.0)
    mine = ((fig.srv_cpu or 0.0) + (fig.srv_runq or 0.0) + off.get("disk", 0.0)
            + off.get("lock", 0.0))
    wait = max(0.0, (fig.server_s or 0.0) - mine)
    flush, lock = fig.down_flush or 0.0, fig.down_lock or 0.0
    named = fig.down_cpu + fig.down_runq + flush + lock
    if fig.down_other is None:
        # its waits not sampled: whatever its CPU does not explain may be in it
        rest = max(0.0, wait - named)
        outside = 0.0
    else:
        rest = min(wait, fig.down_other)
        outside = max(0.0, wait - named - rest)
    return dict(wait=wait, mine=mine, cpu=fig.down_cpu, runq=fig.down_runq, flush=flush,
                lock=lock, rest=rest, outside=outside)


def _time_split(fig: Figures, off: dict) -> dict:
    """A request's time: client = server + outside; the server's split by what its
    threads did (shares of their non-idle time)."""
    parts = {"on_cpu": fig.srv_cpu, "run_queue": fig.srv_runq,
             **{k: off.get(k) for k in ("disk", "lock", "downstream", "other")}}
    known = {k: v for k, v in parts.items() if v is not None}
    tot = sum(known.values())
    return {"client_us": fig.client_us, "server_us": fig.server_us,
            "outside_us": (None if fig.client_us is None or fig.server_us is None
                           else fig.client_us - fig.server_us),
            "server_split": {k: round(float(v / tot), 3) for k, v in known.items()} if tot else {}}


# the report's anchors of the plots and tables each resource's evidence is in
LINKS = {"server-cpu": "cpu", "server-disk": "offcpu", "server-lock": "offcpu",
         "server-downstream": "cpu", "load-tool": "cpu", "network": "cpu"}
# ... and of each kind of evidence line, the first that matches deciding
LINE_LINKS = [(re.compile(r"on-CPU samples"), "flamegraphs"),
              (re.compile(r"\(iostat\)"), "system"),
              (re.compile(r"requests inside the server|client latency"), "latency"),
              (re.compile(r"fsync|lock waits|server threads"), "offcpu")]


def link_for(line: str, resource: str) -> str | None:
    """The report section that shows an evidence line."""
    return next((a for rx, a in LINE_LINKS if rx.search(line)), LINKS.get(resource))


# --- the figures of a run --------------------------------------------------------------


def figures(run, table) -> list[Figures]:
    """Each phase's figures (``phases.phase_table``'s rows and the run's files)."""
    ncpu = (run.manifest.get("host") or {}).get("cpus")
    tree = _treestat(run)
    off, off_missing = _offcpu(run)
    gaps = _gaps(run, table)
    io = _iostat(run)
    out = []
    for r in table.itertuples():
        ph = Phase.of(r)
        f = Figures(ph.name, ph.seconds, ncpu, r.ops_avg)
        # (a command whose requests asked for no reply has no time to add)
        work = {c: d for c, d in r.latency_us.items() if c not in _admin() and d["count"]}
        n = sum(d["count"] for d in work.values())
        if n and r.server_s and r.server_s > 0:
            busy = sum(d["count"] * d["avg"] for d in work.values()) / 1e6
            f.server_s, f.server_us = busy / r.server_s, busy * 1e6 / n
        elif not r.latency_us:
            f.missing.append("server latency: record --probes latency")
        f.client_us = _client_avg(r.client_latency_us, r.client_vs_server)
        if r.name in gaps:
            f.outside_s, f.conns, f.wire_kbs = gaps[r.name]
            f.outside_how = "each connection's gaps between a reply and its next request"
        elif f.client_us is not None and f.server_us is not None:
            f.outside_s = sum(rate * _client_of(r, op) for op, rate in r.rates.items()
                              if _client_of(r, op) is not None) / 1e6 - \
                (f.server_s or 0.0)
            f.outside_s = max(0.0, f.outside_s)
            f.outside_how = "the tool's client latency minus the server's"
        else:
            f.missing.append("time outside the server: record --events (or a load tool "
                             "that prints its mean latency)")
        if tree is not None:
            for role in ("server", "tool", "downstream"):
                # (treestat's lines are stamped at their interval's end)
                t = tree[(tree["role"] == role) & (tree["time"] > ph.start + 0.5)
                         & (tree["time"] <= ph.end + 0.5)]
                if not len(t):
                    continue
                secs = t["seconds"].sum()
                cpu, rq = t["cpu_s"].sum() / secs, t["runq_s"].sum() / secs
                if role == "server":
                    f.srv_cpu, f.srv_runq = float(cpu), float(rq)
                elif role == "tool":
                    f.tool_cpu, f.tool_runq = float(cpu), float(rq)
                else:
                    f.down_cpu, f.down_runq = float(cpu), float(rq)
                    if t["flush_s"].notna().all():
                        f.down_flush = float(t["flush_s"].sum() / secs)
                        f.down_lock = float(t["lock_s"].sum() / secs)
                        f.down_other = float(t["other_s"].sum() / secs)
                        by: dict[str, float] = {}
                        for d in t["flush_by"]:
                            for k, v in d.items():
                                by[k] = by.get(k, 0.0) + v / secs
                        f.down_flush_by = dict(sorted(by.items(), key=lambda kv: -kv[1]))
            q = tree[(tree["time"] > ph.start) & (tree["time"] <= ph.end + 0.5)]
            sq = q.groupby("time")["sendq_bytes"].sum(min_count=1).dropna()
            f.sendq = float(sq.mean()) if len(sq) else None
        else:
            f.missing.append("server and load-tool CPU: treestat.txt (mongoprobe record "
                             "keeps it)")
        if off is not None:
            f.off, f.off_top = _off_phase(off, ph)
        else:
            f.missing.append(off_missing)
        f.categories = dict(r.categories or {})
        f.machine_busy = None if math.isnan(r.us_sy) else float(r.us_sy)
        if io is not None:
            p = io[(io["time"] > ph.start) & (io["time"] <= ph.end + 0.5)]
            if len(p):
                dev = p.groupby("device")["util"].mean()
                d = dev.idxmax()
                f.disk_util = float(dev.max())
                aw = p.loc[p["device"] == d, "await"] if "await" in p else None
                f.disk_await = float(aw.mean()) if aw is not None and len(aw) else None
        out.append(f)
    return out


class Verdicts(list):
    """The phases' verdicts, as the phase table keeps them (``attrs["verdicts"]``).
    pandas deep-copies a table's attrs at every operation on it; these are made once
    and only read, so a copy is the same list (a report spent a second copying them)."""

    def __deepcopy__(self, memo):
        return self


def verdicts(run, table) -> Verdicts:
    return Verdicts(decide(f) for f in figures(run, table))


def _admin():
    from mongoprobe.analysis.traffic_phases import ADMIN_COMMANDS
    return ADMIN_COMMANDS


def _client_of(r, op: str) -> float | None:
    c = (r.client_latency_us or {}).get(op) or {}
    return c.get("avg")


def _client_avg(client: dict, versus: dict) -> float | None:
    """The tool's mean latency over its operations that have a server command."""
    tot = n = 0.0
    for op, d in (versus or {}).items():
        c = d["client"]
        if c.get("avg") is None or not c.get("count"):
            continue
        tot, n = tot + c["avg"] * c["count"], n + c["count"]
    return tot / n if n else None


def _treestat(run):
    p = run.file("treestat")
    if p is None:
        return None
    from mongoprobe.run.treestat import read
    return read(p)


def _offcpu(run):
    """(off-CPU table with a reason per row, why missing)."""
    if run.file("offcpu") is None:
        return None, ("the server's off-CPU reasons (disk, locks): record --probes offcpu")
    from mongoprobe.formats.errors import FormatError
    from mongoprobe.analysis.run_profile import run_stacks
    try:
        df = run_stacks(run, "offcpu")
    except FormatError as e:     # a probe cut short: said, and the verdict waits for it
        return None, (f"the server's off-CPU reasons: {e} (record --probes offcpu "
                      "again; a long run needs a longer stop)")
    reasons = {f: offcpu_reason(f) for f in df["frames"].unique()}
    df["reason"] = df["frames"].map(reasons)
    return df, None


def _off_phase(df, ph: Phase) -> tuple[dict, dict]:
    """({reason: thread-s/s}, {reason: (top frame, its share)}) in the phase (the
    off-CPU samples' whole seconds that start in it)."""
    start, end = ph.span
    p = df[(df["time"] >= math.floor(start)) & (df["time"] < end)]
    secs = max(1.0, math.ceil(end) - math.floor(start))
    by = p.groupby("reason")["weight"].sum() / 1e6 / secs    # µs -> s/s
    tops = {}
    for reason in ("disk", "lock", "downstream"):
        part = p[p["reason"] == reason]
        if not len(part):
            continue
        rx = dict(REASONS)[reason]
        names: dict[str, float] = {}
        for frames, w in zip(part["frames"], part["weight"]):
            hit = next((x for x in reversed(frames.split(";")) if rx.search(x)
                        and not x.startswith(("__", "do_", "ksys_"))), None) or next(
                (x for x in reversed(frames.split(";")) if rx.search(x)), "?")
            names[hit] = names.get(hit, 0.0) + w
        name, w = max(names.items(), key=lambda kv: kv[1])
        tops[reason] = (name.rsplit("/", 1)[-1], float(w / part["weight"].sum()))
    return {k: float(v) for k, v in by.items()}, tops


def _gaps(run, table) -> dict:
    """{phase: (thread-s/s outside the server, connections, KB/s on the wire)} from
    the events: per connection, the gaps between a reply and the next request's
    arrival; the requests' and first replies' bytes."""
    try:
        ev = run.events
    except LookupError:     # no latency probe, or too many events to hold
        return {}
    if ev is None or not len(ev):
        return {}
    import numpy as np
    w = ev[~ev["command"].isin(_admin())]
    out = {}
    for ph in phases_from(table):
        p = w[ph.contains(w["time"])]
        if not len(p):
            continue
        p = p.sort_values(["pid", "fd", "time"])
        arrive = p["time"].to_numpy() - p["latency_ns"].to_numpy() / 1e9
        reply = p["time"].to_numpy()
        same = (p["fd"].to_numpy()[1:] == p["fd"].to_numpy()[:-1]) & \
               (p["pid"].to_numpy()[1:] == p["pid"].to_numpy()[:-1])
        gap = np.clip(arrive[1:] - reply[:-1], 0, None)[same]
        secs = ph.seconds
        wire = float(p["bytes_in"].sum() + p["bytes_out"].sum()) / 1024 / secs
        out[ph.name] = (float(gap.sum()) / secs, int(p.groupby(["pid", "fd"]).ngroups), wire)
    return out


def _iostat(run):
    try:
        io = run.iostat
    except LookupError:
        return None
    cols = {c.lower(): c for c in io.columns}
    if "time" not in io or "%util" not in cols and "util" not in cols:
        return None
    util = cols.get("%util") or cols.get("util")
    aw = next((cols[c] for c in ("w_await", "await", "r_await") if c in cols), None)
    dev = cols.get("device") or cols.get("dev")
    df = io[["time", dev, util] + ([aw] if aw else [])].copy()
    df.columns = ["time", "device", "util"] + (["await"] if aw else [])
    return df


# --- text ------------------------------------------------------------------------------


def request_line(t: dict) -> str:
    """Where a request's time goes: client = server + outside; the server's split."""
    if t.get("server_us") is None:
        return ""
    head = (f"a request: client {t['client_us']:,.0f} us = server {t['server_us']:,.0f} "
            f"+ outside {t['outside_us']:,.0f}" if t.get("client_us") is not None else
            f"a request: server {t['server_us']:,.0f} us (no client mean latency)")
    names = {"on_cpu": "on CPU", "run_queue": "run queue"}
    split = ", ".join(f"{names.get(k, k)} {x:.0%}" for k, x in
                      sorted(t["server_split"].items(), key=lambda kv: -kv[1]) if x >= 0.005)
    return head + (f"; the server's threads: {split}" if split else "")


def render(vs: list[Verdict], width: int = 14) -> str:
    """``phases``' first lines: one verdict per phase, then the evidence."""
    import textwrap

    lines = ["what limits each phase (share of the benchmark's thread time)"]
    for v in vs:
        rest = ", ".join(f"{x.resource} {x.share:.2f}" for x in v.limits
                         if x is not v.limiter and x.share >= 0.005)
        name = v.limiter.resource if v.decided else "undecided"
        row = f"{v.phase[:width]:{width}s} {name:17s} {v.limiter.share:4.2f}  {rest}"
        lines.append(row if len(row) <= 79 else row[:75].rsplit(",", 1)[0] + ", ...")
    for v in vs:
        text = f"{v.phase}: " + "; ".join(v.limiter.evidence)
        lines += textwrap.wrap(text, 79, initial_indent="  ", subsequent_indent="      ")
        split = request_line(v.time)
        if split:
            lines += textwrap.wrap(split, 79, initial_indent="    ",
                                   subsequent_indent="      ")
        for m in v.missing if v.decided else []:
            lines += textwrap.wrap(f"missing: {m}", 79, initial_indent="    ",
                                   subsequent_indent="      ")
    return "".join(s + "\n" for s in lines)
