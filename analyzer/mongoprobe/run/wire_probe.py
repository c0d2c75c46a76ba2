"""The wire-protocol latency probes, run live: bpftrace's ``mongo_latency.bt`` or bcc's
``mongolatency.py --slices``, read into one stream of per-second slices and, at the end,
one :class:`mongoprobe.model.latencies.Latencies` -- what ``latency``, ``snoop`` and tests use.

Events (per request) are asked for with ``events_every``: 0 none, 1 every request, N
one in N at random (the histograms still count every request). bpftrace prints them as
lines among its slices; bcc writes its kernel records to a file that is read at the end.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path
from typing import Iterator

import pandas as pd

from mongoprobe.run import map_memory as mapmem, tracer as probes, procnet
from mongoprobe.formats import wire_events
from mongoprobe.formats.bpftrace_latency import BpftraceLatency
from mongoprobe.formats.wire_slices import BccSlices, Slice, read_raw_events
from mongoprobe.model.clock import Clock
from mongoprobe.model.latencies import Latencies

# the maps that fill, per engine, and what refilling them lost (the fix is always
# --max-connections)
FULL_WHAT = {"conns": "requests on connections not traced",
             "lat_spill": "latencies not aggregated",
             "@slot_cmd": "request slots refused (their requests lost)",
             "@conn": "connections refused (their requests lost)"}


class WireProbe:
    """A running wire probe of ``pid``; ``slices()`` yields what it prints, ``finish()``
    (after ``probe.stop()``) gives the whole run."""

    def __init__(self, engine: str, pid: int, by_conn: bool = False, events_every: int = 0,
                 attach_timeout: float = 120.0, max_connections: int | None = None,
                 tls: str = "auto", sizing_error: bool = True):
        """``max_connections`` None: the default for this machine
        (``mapmem.default_connections``). Refused before loading when the maps would
        take over a quarter of the memory available; once loaded, bpftrace's maps are
        checked to have the size asked (a mismatch is a ProbeError with
        ``sizing_error``, else a line in ``notes``)."""
        self.engine, self.pid, self.events_every = engine, pid, events_every
        self.tls_hook = None        # bpftrace: the tlshooks.Hook its TLS tool hooks
        self.tls_notes: list[str] = []      # bpftrace: what was hooked, or why not
        self.notes: list[str] = []          # what the sizing check found
        self.clock = Clock.measure()      # bpf times are CLOCK_MONOTONIC
        self._tmp: str | None = None
        if engine == "bpftrace":
            self.tls_hook, self.tls_notes = bpftrace_tls_hook(pid, tls)
            # with an OpenSSL to hook, the tool with the TLS section (the library's
            # path its 4th argument); else the syscall tool alone, at its own cost
            script = "mongo_latency_tls.bt" if self.tls_hook else "mongo_latency.bt"
        elif engine == "bcc":
            script = "mongolatency.py"
        else:
            raise probes.ProbeError(f"the wire probe has no engine {engine!r}")
        self.cpus = probes.possible_cpus()
        self.lowered = max_connections is None and mapmem.default_connections(
            engine, script, self.cpus, bool(events_every)) < probes.MAX_CONNECTIONS
        self.max_connections = max_connections or mapmem.default_connections(
            engine, script, self.cpus, bool(events_every))
        self.estimate = mapmem.wire_bytes(engine, script, self.max_connections, self.cpus,
                                          bool(events_every))
        too_much = mapmem.too_much(self.estimate)
        if too_much:
            raise probes.ProbeError(
                f"{script}: maps sized for {self.max_connections} connections would pin "
                f"{too_much}: lower --max-connections")
        if engine == "bcc":
            self.reader = BccSlices()
            argv = (["-p", pid, "--slices", "--max-connections", self.max_connections,
                     "--tls", tls] + (["-c"] if by_conn else []))
            if events_every:
                self._tmp = tempfile.mkdtemp(prefix="mongoprobe-events-")
                argv += ["--events", str(Path(self._tmp) / "events.raw"),
                         "--events-format", "raw", "--events-sample", events_every]
            self.probe = probes.bcc(script, *argv, attach_timeout=attach_timeout)
        else:
            lib = [self.tls_hook.path] if self.tls_hook else []
            self.reader = BpftraceLatency(script)
            env = probes.bpftrace_keys(self.max_connections)
            self.probe = probes.bpftrace(script, pid, 1 if by_conn else 0, events_every, *lib,
                                         env=env, attach_timeout=attach_timeout)
            wrong = probes.bpftrace_size_mismatch(
                self.probe.proc.pid, probes.bpftrace_keys_for(self.max_connections), env)
            if wrong and sizing_error:
                self.probe.stop()
                raise probes.ProbeError(wrong)
            self.notes += [wrong] if wrong else []
        self.slices_seen: list[Slice] = []
        try:
            self.map_bytes = probes.map_memory(self.probe.proc.pid)[0]
        except OSError:
            self.map_bytes = None

    def sizing(self) -> str:
        """One line: what the maps are sized for, what they were to take (computed
        before loading) and what they take."""
        return sizing_line(self.probe.name, self.max_connections, self.lowered, self.cpus,
                           self.estimate, self.map_bytes)

    def full_hints(self) -> list[str]:
        """bcc-style, for the end of the run: each map that filled, what it lost and
        the fix; none when nothing filled."""
        full = self.reader.full
        return [f"{self.probe.name}: map {name} full: {n} {FULL_WHAT.get(name, 'refused')}: "
                f"raise --max-connections (now {self.max_connections})"
                for name, n in full.items() if n]

    def lines(self) -> Iterator[tuple[str, list[Slice]]]:
        """Each output line with the slices it completed."""
        for line in self.probe.lines():
            got = self.reader.feed(line)
            done = [got] if isinstance(got, Slice) else (got or [])
            self.slices_seen.extend(done)
            yield line, done

    def slices(self) -> Iterator[Slice]:
        for _line, done in self.lines():
            yield from done

    def events_mono(self) -> pd.DataFrame | None:
        """The events the probe gave (CLOCK_MONOTONIC times), None when not asked."""
        if not self.events_every:
            return None
        if self.engine == "bpftrace":
            from mongoprobe.formats.wire_slices import events_frame
            return events_frame(self.reader.events)
        path = Path(self._tmp) / "events.raw"
        try:
            with open(path, "rb") as fh:
                return read_raw_events(fh, str(path))[1]
        finally:
            shutil.rmtree(self._tmp, ignore_errors=True)

    def finish(self) -> Latencies:
        """The whole run once the probe has exited: slices, events on the wall clock,
        the final counters."""
        if self.engine == "bpftrace":
            self.slices_seen.extend(self.reader.close())
            counts, lost = self.reader.counts, self.reader.lost
            answered = self.reader.answered_no_reply
        else:
            final = self.reader.final or {}
            counts, lost = final.get("counts"), final.get("lost")
            answered = final.get("answered_no_reply")
        ev = self.events_mono()
        events = None if ev is None else wire_events.from_mono(ev, self.clock, self.pid)
        # events stand for every request only when none was lost
        complete = (self.events_every == 1 and ev is not None
                    and len(ev) == (counts or {}).get("replies"))
        lat = Latencies.from_slices(self.slices_seen, self.clock, events, counts, lost,
                                    events_complete=complete, answered_no_reply=answered)
        untraced = (self.reader.untraced if self.engine == "bpftrace"
                    else (self.reader.final or {}).get("untraced", {}))
        if self.engine == "bpftrace":
            untraced = {**untraced, "tls_hooked": 1 if self.tls_hook else 0}
        lat.untraced = {"mmsg_calls": int(untraced.get("mmsg_calls", 0)),
                        "io_uring_calls": int(untraced.get("io_uring_calls", 0)),
                        "io_uring_fds": procnet.io_uring_instances(self.pid),
                        "tls_connections": int(untraced.get("tls_connections", 0)),
                        "tls_hooked": int(untraced.get("tls_hooked", 0)),
                        "tls_calls_without_socket":
                            int(untraced.get("tls_calls_without_socket", 0))}
        # what the TLS hooks decoded ({"hooked": [...], "connections", "calls"})
        if self.engine == "bcc":
            lat.tls = (self.reader.final or {}).get("tls")
        else:
            lat.tls = ({"hooked": [self.tls_hook.describe()], **self.reader.tls}
                       if self.tls_hook else None)
        return lat

    def tls_lines(self) -> list[str]:
        """What the probe said about TLS (bcc on stderr; bpftrace: what this module
        chose to hook, or why not): the libraries it hooked, or why none, shown to the
        user as they are."""
        if self.engine == "bpftrace":
            return list(self.tls_notes)
        return said_about_tls(self.probe.stderr_lines)

    def close(self) -> None:
        if self._tmp and os.path.isdir(self._tmp):
            shutil.rmtree(self._tmp, ignore_errors=True)


def sizing_line(name: str, conns: int, lowered: bool, cpus: int, estimate: int,
                measured: int | None) -> str:
    why = (f"; the default lowered on {cpus} CPUs to stay under "
           f"{probes.human_bytes(mapmem.BUDGET)}" if lowered else "")
    mem = probes.human_bytes(estimate)
    if measured is not None and abs(measured - estimate) > estimate // 50:
        mem += f" computed, {probes.human_bytes(measured)} loaded"
    return (f"{name}: maps sized for {conns} connections (--max-connections{why}): "
            f"{mem} of kernel memory")


def said_about_tls(stderr_lines: list[str]) -> list[str]:
    """The lines a bcc tool printed about TLS (the library hooked, or why none)."""
    return [ln for ln in stderr_lines if ": TLS " in ln]


def bpftrace_tls_hook(pid: int, mode: str):
    """For ``--tls mode`` with bpftrace: (the OpenSSL tlshooks.Hook that
    mongo_latency_tls.bt hooks, or None; lines saying what was hooked or why not).
    bpftrace 0.17 as Debian ships it refuses a uprobe inside a function ("compiled
    without (k|u)probe offset support"), so Go's crypto/tls, whose returns are probed
    at its RET instructions, is left to bcc; OpenSSL needs uprobes and uretprobes only,
    on the four read/write functions and SSL_free (the tool attaches it: memory-BIO
    connections' state is freed there). ``on`` raises ProbeError when nothing can be
    hooked."""
    tool = "mongo_latency_tls.bt"
    if mode == "off":
        return None, []
    th = probes.probe_module("tlshooks")
    try:
        hooks = th.find(pid)
    except (OSError, th.TlsError) as e:
        if mode == "on":
            raise probes.ProbeError(f"--tls on: {e}") from None
        return None, [f"mongo_latency.bt: TLS library not hooked: {e}"]
    ssl = [h for h in hooks if h.kind == "openssl"]
    full = [h for h in ssl if set(h.funcs) == set(th.OPENSSL_FUNCS) and h.free]
    if full:
        hook = full[0]
        notes = [f"{tool}: TLS plaintext from {hook.describe()}"]
        notes += [f"{tool}: TLS not hooked (bpftrace hooks one library): {h.describe()}"
                  for h in hooks if h is not hook]
        return hook, notes
    why = []
    if ssl and set(ssl[0].funcs) != set(th.OPENSSL_FUNCS):
        why.append(f"OpenSSL without SSL_read_ex/SSL_write_ex in {ssl[0].shown} (before "
                   "1.1.1): mongo_latency_tls.bt hooks all four")
    elif ssl:
        why.append(f"OpenSSL without SSL_free in {ssl[0].shown}: mongo_latency_tls.bt "
                   "hooks it (memory-BIO connections are freed there)")
    if any(h.kind == "go" for h in hooks):
        # not a version's limit: the bpftrace tool has no probes at each RET of Go's
        # functions (uretprobes break Go's moving stacks); the bcc tool places them
        why.append("Go crypto/tls: mongo_latency_tls.bt does not decode it (its returns "
                   "need uprobes inside the function, which the bcc tool places)")
    if not why:
        if mode == "on":
            raise probes.ProbeError(f"--tls on: PID {pid} has no TLS library to hook "
                                    "(OpenSSL's libssl, or SSL_read in its executable)")
        return None, []
    if mode == "on":
        raise probes.ProbeError(f"--tls on: {'; '.join(why)}; --engine bcc decodes it")
    # (the syscall tool runs instead, and says so)
    return None, [f"mongo_latency.bt: TLS not hooked: {'; '.join(why)} (--engine bcc "
                  "decodes it)"]
