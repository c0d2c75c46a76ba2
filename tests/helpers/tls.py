"""wireclient's scenarios over TLS against tests/wireserver.py's TLS patterns, every
pattern in one server process (a port each), traced by tracers started together: a
tracer start is what costs, so one start sees every pattern. (The embedded FerretDB
serving TLS is the session fixture ``tls_target`` in conftest.py.)"""

from __future__ import annotations

import json
import os
import signal
import ssl
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import pytest

import wireclient
from helpers.cli import READY, at_once, watch_stderr
from helpers.wire import ATTACH_TIMEOUT, CONNECTIONS, TESTS, _ready_line, _stop_server


# --- every TLS pattern in one process --------------------------------------------------

# (mode, BIO) the TLS tests trace: on memory BIOs asyncio reads the plaintext in chunks
# of up to 256 KiB whatever the mode, so readwrite would repeat mongod; split still
# splits the writes
PATTERNS = (("mongod", "socket"), ("readwrite", "socket"), ("split", "socket"),
            ("mongod", "memory"), ("split", "memory"))

# One process, a listener per "MODE-BIO" argument: socket-BIO connections served by
# wireserver.handle in a thread each (as wireserver.py does), memory-BIO ones by
# asyncio's TLS transport (wireserver.serve_memory_bio); BIO "plain" (CERT "-"): no
# TLS, served as wireserver.py serves MODE. Everything is accepted on the
# main thread's event loop, so no other thread exists when a tracer grabs the process
# (helpers.wire.SERVE_ALL_MODES says why). SIGUSR1 writes the requests served so far
# (wireserver --counts' form) to COUNTS.N, N = 1, 2, ...: a test's phases counted apart.
SERVE_PATTERNS = """
import asyncio, json, os, signal, socket, ssl, sys, threading
import wireserver
log_file, cert, key, counts, *patterns = sys.argv[1:]
log = wireserver.Log(log_file)
tls = None
if cert != "-":
    tls = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    tls.load_cert_chain(cert, key)
dumps = 0

def dump(*_):
    global dumps
    dumps += 1
    with wireserver.SERVED_LOCK:
        served = dict(wireserver.SERVED)
    with open(f"{counts}.tmp", "w") as fh:
        json.dump(served, fh)
    os.rename(f"{counts}.tmp", f"{counts}.{dumps}")

signal.signal(signal.SIGUSR1, dump)

async def accept_threads(listener, mode):
    loop = asyncio.get_running_loop()
    while True:
        sock, _ = await loop.sock_accept(listener)
        sock.setblocking(True)
        threading.Thread(target=wireserver.handle, args=(sock, mode, log, tls),
                         daemon=True).start()

async def main():
    tasks, ports = [], []
    for pattern in patterns:
        mode, bio = pattern.rsplit("-", 1)
        listener = socket.create_server(("127.0.0.1", 0))
        # no Nagle (accepted sockets inherit it): a split reply's pieces each waited
        # for the client's delayed ACK, 40 ms a reply (mongod sets TCP_NODELAY too)
        listener.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        listener.setblocking(False)
        ports.append(f"{pattern}={listener.getsockname()[1]}")
        tasks.append(wireserver.serve_memory_bio(listener, mode, log, tls) if bio == "memory"
                     else accept_threads(listener, mode))
    print("READY", *ports, flush=True)
    await asyncio.gather(*tasks)

asyncio.run(main())
"""


@dataclass
class PatternServer:
    pid: int
    ports: dict[tuple[str, str], int]   # (mode, BIO) -> port
    counts: Path                        # served counts: COUNTS.N after the Nth snapshot()
    proc: subprocess.Popen = field(repr=False)
    dumps: int = 0

    def snapshot(self) -> Counter:
        """The requests served so far ("OPCODE command" -> n), as the server counts them."""
        self.dumps += 1
        path = self.counts.with_name(f"{self.counts.name}.{self.dumps}")
        self.proc.send_signal(signal.SIGUSR1)
        deadline = time.monotonic() + 10
        while not path.exists():
            if time.monotonic() > deadline:
                pytest.fail(f"the pattern server wrote no {path.name}")
            time.sleep(0.02)
        return Counter(json.loads(path.read_text()))


@contextmanager
def pattern_server(workdir: Path, cert_key: tuple[Path, Path] | None,
                   patterns=PATTERNS) -> Iterator[PatternServer]:
    """tests/wireserver.py's TLS patterns (mode, BIO) in one process, a port each;
    without cert_key, plain ones (mode, "plain"). Fails if it reported errors."""
    err = workdir / "server.err"
    with open(err, "w") as errfile:
        proc = subprocess.Popen([sys.executable, "-c", SERVE_PATTERNS,
                                 str(workdir / "server.log"),
                                 *(map(str, cert_key) if cert_key else ("-", "-")),
                                 str(workdir / "served.json"),
                                 *(f"{mode}-{bio}" for mode, bio in patterns)],
                                cwd=TESTS, stdout=subprocess.PIPE, stderr=errfile, text=True,
                                env={**os.environ, "PYTHONPATH": os.pathsep.join(
                                    [str(TESTS), os.environ.get("PYTHONPATH", "")])})
    try:
        line = _ready_line(proc, "the pattern server", err)
        ports = {}
        for kv in line.split()[1:]:
            pattern, port = kv.split("=")
            mode, bio = pattern.rsplit("-", 1)
            ports[mode, bio] = int(port)
        yield PatternServer(proc.pid, ports, workdir / "served.json", proc)
    finally:
        _stop_server(proc)
    assert err.read_text() == "", f"the pattern server reported errors:\n{err.read_text()}"


def short_expected(n: int) -> wireclient.Expected:
    """What wireclient.short_connections(port, n) must be counted as: n pings, each
    answered."""
    return wireclient.Expected(by_command=Counter(ping=n), by_op=Counter(OP_MSG=n),
                               replies_by_command=Counter(ping=n))


@dataclass
class PatternsRun:
    """One traffic pass over every pattern's scenarios (and short connections), seen by
    every tracer attached to the server meanwhile."""
    by_pattern: dict[tuple[str, str], wireclient.Expected]   # what each port's client expects
    expected: wireclient.Expected       # the whole pass's, summed
    short: int = 0                      # short connections (one ping each) on top
    outputs: dict[str, list[str]] = field(default_factory=dict)   # tracer -> its stdout
    tracers: dict[str, object] = field(default_factory=dict)      # tracer -> Probe|CliTracer
    served: Counter | None = None       # what the server served, where a drive() says

    @property
    def connections(self) -> int:
        """TLS connections the client opened: CONNECTIONS per scenario per pattern, and
        the short ones."""
        return CONNECTIONS * len(wireclient.SCENARIOS) * len(self.by_pattern) + self.short

    def on_memory_bio(self) -> int:
        """Of them, those to a memory-BIO port (the short ones are)."""
        per_pattern = CONNECTIONS * len(wireclient.SCENARIOS)
        return per_pattern * sum(bio == "memory" for _, bio in self.by_pattern) + self.short


def drive_patterns(server: PatternServer, cert: Path, patterns=PATTERNS,
                   short: tuple[tuple[str, str], int] | None = None):
    """wireclient's scenarios on CONNECTIONS connections over TLS on each pattern's port
    in turn, then `short` (pattern, n): n short connections on its port: ({pattern: what
    its client expects}, the sum)."""
    ctx = ssl.create_default_context(cafile=str(cert))
    by_pattern = {p: wireclient.run(server.ports[p], connections=CONNECTIONS, tls=ctx)
                  for p in patterns}
    total = wireclient.Expected()
    for e in by_pattern.values():
        total = total + e
    if short:
        wireclient.short_connections(server.ports[short[0]], short[1], ctx)
        total = total + short_expected(short[1])
    time.sleep(0.3)     # a reply's return probe may run after the client has the bytes
    return by_pattern, total


class CliTracer:
    """``python -m mongoprobe ARGS`` beside other tracers: started at once, attached once
    its banner is on stderr (read by a thread: several start together); its stdout to a
    file (snoop prints as it goes). ``said``: its stderr lines up to the banner."""

    def __init__(self, workdir: Path, name: str, *args: str) -> None:
        self.args = args
        self.stdout = workdir / f"{name}.stdout"
        with open(self.stdout, "w") as out:
            self.proc = subprocess.Popen([sys.executable, "-m", "mongoprobe", *args],
                                         stdout=out, stderr=subprocess.PIPE, text=True)
        self.err, self.reader, self.attached_event = watch_stderr(self.proc)
        self.said: list[str] = []

    def describe(self) -> str:
        return f"mongoprobe {' '.join(self.args)} (exit {self.proc.returncode}):\n" \
               f"{''.join(self.err)[-3000:]}"

    def wait_attached(self) -> None:
        if not self.attached_event.wait(ATTACH_TIMEOUT) or \
                not any(READY[1] in line for line in self.err):
            self.stop(check=False)
            pytest.fail(f"did not attach: {self.describe()}")
        self.said = self.err[:next(i for i, ln in enumerate(self.err) if READY[1] in ln) + 1]

    def stop(self, timeout: float = 180, check: bool = True) -> list[str]:
        """SIGINT (a user's Ctrl-C); its stdout lines once it has ended (with status 0,
        if check)."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
                pytest.fail(f"did not end within {timeout} s: {self.describe()}")
        self.reader.join(10)
        if check and self.proc.returncode != 0:
            pytest.fail(f"failed: {self.describe()}")
        return self.stdout.read_text().splitlines(keepends=True)

    @property
    def stderr(self) -> str:
        return "".join(self.err)


@dataclass
class Job:
    """A TLS pattern server of its own, the tracers start(pid, tracers) starts on it
    (each put in tracers as it starts: {name: Probe or CliTracer}, stopped even when a
    later one fails to start), and the traffic sent while they trace: drive(server)
    when given (a PatternsRun), else drive_patterns(server, cert, patterns, short)."""
    start: Callable[[int, dict], None]
    patterns: tuple = PATTERNS
    short: tuple[tuple[str, str], int] | None = None
    drive: Callable[[PatternServer], PatternsRun] | None = None


def traced_jobs(workdir: Path, cert_key: tuple[Path, Path],
                jobs: dict[str, Job]) -> dict[str, PatternsRun | BaseException]:
    """Every job's server and tracers started together (a tracer start is the cost: the
    compiles overlap; DTrace grabs its process, so two D tracers need two servers), then,
    once a job's tracers are all attached, its traffic, job after job; every tracer
    stopped whatever fails. Per job: its run, or what failed (skipped, did not attach,
    failed), raised by the tests that use it."""
    results: dict[str, PatternsRun | BaseException] = {}
    tracers: dict[str, dict] = {}
    with ExitStack() as servers_stack:
        servers = {}
        for name, job in jobs.items():
            (workdir / name).mkdir(exist_ok=True)
            servers[name] = servers_stack.enter_context(
                pattern_server(workdir / name, cert_key, job.patterns))
        try:
            for name, job in jobs.items():
                tracers[name] = {}
                try:
                    job.start(servers[name].pid, tracers[name])
                except (Exception, pytest.skip.Exception, pytest.fail.Exception) as exc:
                    results[name] = exc
            for name, job in jobs.items():
                if name in results:
                    continue
                try:
                    for tracer in tracers[name].values():
                        tracer.wait_attached()
                    if job.drive:
                        results[name] = job.drive(servers[name])
                    else:
                        by_pattern, total = drive_patterns(servers[name], cert_key[0],
                                                           job.patterns, job.short)
                        results[name] = PatternsRun(by_pattern, total,
                                                    job.short[1] if job.short else 0)
                except (Exception, pytest.skip.Exception, pytest.fail.Exception) as exc:
                    results[name] = exc
        finally:
            # every job's tracers at once
            got = _stopped({(name, t): tracer for name, started in tracers.items()
                            for t, tracer in started.items()})
            for name, started in tracers.items():
                outputs, failures = _split({t: got[name, t] for t in started})
                run = results.get(name)
                if isinstance(run, BaseException):
                    for failed in failures:     # said with the first failure
                        run.add_note(f"and on stopping: {failed}")
                elif failures:
                    results[name] = failures[0]
                elif run is not None:
                    bad = [t for t in started.values() if t.proc.returncode != 0]
                    if bad:
                        try:
                            pytest.fail(f"probe failed: {bad[0].describe()}")
                        except pytest.fail.Exception as exc:
                            results[name] = exc
                    else:
                        run.outputs, run.tracers = outputs, started
    return results


def _stopped(tracers: dict) -> dict:
    """Every tracer stopped at once (five one after another idled a worker 10 s):
    {key: its stdout lines, or what its stop raised}, in the tracers' order."""
    return at_once(lambda tracer: tracer.stop(), tracers)


def _split(got: dict) -> tuple[dict[str, list[str]], list[BaseException]]:
    """_stopped's results as (the stdout lines of those that stopped, the failures)."""
    return ({k: v for k, v in got.items() if not isinstance(v, BaseException)},
            [v for v in got.values() if isinstance(v, BaseException)])


def stop_all(tracers: dict) -> tuple[dict[str, list[str]], list[BaseException]]:
    """Every tracer stopped (at once), even when one fails to stop: (their stdout lines,
    the failures)."""
    return _split(_stopped(tracers))


def stop_all_or_raise(tracers: dict, error: BaseException | None = None) -> dict[str, list[str]]:
    """Every tracer stopped (stop_all). With ``error``, the failure of the block that ran
    them: the failures to stop noted on it, and it raised. Else the first failure to stop
    raised, or their stdout lines returned."""
    outputs, failures = stop_all(tracers)
    if error is not None:
        for failed in failures:     # said with the first failure
            error.add_note(f"and on stopping: {failed}")
        raise error
    if failures:
        raise failures[0]
    return outputs


def assert_exact_counts(r: dict, run: "PatternsRun") -> None:
    """A tracer's --json report ``r`` of a shared run counts exactly what the run sent:
    every pattern's scenarios and the short connections' pings, nothing lost."""
    e = run.expected
    assert r["requests_by_command"] == dict(e.by_command)
    assert r["requests_by_command"]["ping"] == \
        sum(p.by_command["ping"] for p in run.by_pattern.values()) + run.short
    assert r["counts"] == {"requests": e.requests, "replies": e.replies,
                           "stream_replies": e.stream_replies, "no_reply": e.no_reply,
                           "answered_no_reply": e.answered_no_reply.total()}
    assert r["lost"] == dict.fromkeys(r["lost"], 0)


def once_per_key(factory: Callable[..., object]) -> Callable[..., object]:
    """factory(*key) made once per key; a skip or failure is raised again for every
    test that asks (the pattern of tests/test_probe_patterns.py's ``traced``)."""
    runs: dict = {}

    def get(*key):
        if key not in runs:
            try:
                runs[key] = factory(*key)
            except (Exception, pytest.skip.Exception, pytest.fail.Exception) as exc:
                runs[key] = exc
        run = runs[key]
        if isinstance(run, BaseException):
            raise run
        return run

    return get
