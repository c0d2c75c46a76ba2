"""Shared fixtures: the embedded FerretDB target and the kernel-tracing skip reasons; the
test programs in C built on demand."""

from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
import signal
import subprocess
import tempfile
import time
import uuid
from pathlib import Path

import pytest

from mongoprobe.run import tracer as probes, target

# Every process the session starts, however deep and even once orphaned, carries this
# in its environment: what the leftover check below looks for. Under pytest-xdist each
# worker has its own (the run's mark and the worker's name), so that a worker checks
# only what its own tests started.
SESSION_MARK = "MONGOPROBE_TEST_SESSION"
RUN_MARK = "MONGOPROBE_TEST_RUN"


# The probes' maps sized for 64 connections unless a test asks for more: a bpftrace
# start preallocates them (10,000 connections take seconds more). The tests about the
# default sizing and the scale tests clear it or pass --max-connections.
TEST_MAX_CONNECTIONS = "64"


def pytest_configure(config) -> None:
    # Started in the background (`bash .ci/run &`, nohup), the session inherits SIGINT
    # ignored, and so would every child: the tests that stop a tool with SIGINT (as a
    # user's Ctrl-C) would wait out their timeouts. A handler (not SIG_IGN) is reset to
    # the default in each exec'd child.
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    run = os.environ.setdefault(RUN_MARK, uuid.uuid4().hex)     # workers inherit it
    worker = _worker(config)
    os.environ[SESSION_MARK] = f"{run}-{worker}" if worker else run
    os.environ.setdefault("MONGOPROBE_MAX_CONNECTIONS", TEST_MAX_CONNECTIONS)


def _worker(config) -> str | None:
    """This process's xdist worker id (gw0...), None in the controller or without xdist;
    from the config, not PYTEST_XDIST_WORKER, which a pytest run by a test inherits."""
    return getattr(config, "workerinput", {}).get("workerid")


def _cpu_times() -> tuple[int, int]:
    """(busy, all) jiffies of every CPU since boot, from /proc/stat."""
    f = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    idle = f[3] + f[4]              # idle, iowait
    return sum(f) - idle, sum(f)


_SESSION_CPU: list[tuple[int, int]] = []


def pytest_sessionstart(session) -> None:
    if not _worker(session.config):
        _SESSION_CPU.append(_cpu_times())


def pytest_terminal_summary(terminalreporter) -> None:
    if _CPU_BY_TEST and max(_CPU_BY_TEST.values()) >= 1.0:
        by_file: dict[str, float] = {}
        for nodeid, cpu in _CPU_BY_TEST.items():
            f = nodeid.split("::", 1)[0]
            by_file[f] = by_file.get(f, 0.0) + cpu
        w = terminalreporter.write_line
        w(f"CPU seconds of the tests' own processes: {sum(by_file.values()):.0f} in all.")
        w("The files that used the most, beside their tests' time (time far over CPU is "
          "waiting):")
        w("   CPU s  time s  file")
        for f, cpu in sorted(by_file.items(), key=lambda kv: -kv[1])[:20]:
            if cpu >= 1.0:
                w(f"{cpu:8.1f}{_WALL_BY_FILE.get(f, 0.0):8.1f}  {f}")
        w("the tests that used the most (setup, call and teardown):")
        for t, cpu in sorted(_CPU_BY_TEST.items(), key=lambda kv: -kv[1])[:15]:
            if cpu >= 1.0:
                w(f"{cpu:8.1f}  {t}")
    if _ROOM_WAIT and sum(_ROOM_WAIT.values()) >= 1.0:
        # the price of the serial tests: workers idle while one runs alone, or while
        # the tests under way end before it can start
        waits = sorted(_ROOM_WAIT.items(), key=lambda kv: -kv[1])
        terminalreporter.write_line(
            f"workers waited {sum(_ROOM_WAIT.values()):.0f} s in all for a serial test; "
            "the longest: " + ", ".join(f"{t.split('::', 1)[0].split('/')[-1]} {w:.0f} s"
                                        for t, w in waits[:4] if w >= 1.0))
    # How busy the machine's CPUs were over the session: the measure of whether more
    # workers (scripts/test.sh) could shorten it, or the tests wait on CPU already.
    if _SESSION_CPU:
        (b0, a0), (b1, a1) = _SESSION_CPU[0], _cpu_times()
        terminalreporter.write_line(f"CPU busy {100 * (b1 - b0) / max(a1 - a0, 1):.0f}% of "
                                    f"{os.cpu_count()} CPUs over the session (all processes)")


def pytest_unconfigure(config) -> None:
    if not _worker(config):
        for lock in _room_locks():
            with contextlib.suppress(OSError):
                lock.unlink()


# --- tests that must run alone --------------------------------------------------------
#
# The suite runs on several workers (scripts/test.sh: pytest-xdist, a file per worker).
# A test marked ``serial`` measures time or CPU (a verdict, a probe's cost, a rate): it
# runs with no other test running but, at most, one quiet test. Every test holds a
# shared lock on a "room" file for its setup, call and teardown; a serial one holds it
# exclusively. A turnstile lock in front keeps the serial test from waiting forever
# behind a stream of others, and a serial test that waits for the turnstile goes before
# the others (it says so with a shared lock on a "waiting" file, which they read).
#
# A quiet test (QUIET_FILES, neither root nor target: it parses, folds and renders in
# its own process, with hardly a syscall and no child that does I/O) is the exception:
# while a serial test waits or runs, it runs beside it, one at a time (the "quiet" lock)
# and at nice 19 (_niced), instead of waiting with the others. The serial tests then
# share the machine with one CPU-bound Python process at most, which takes the CPU they
# leave idle and hardly any they want: at the start of a session the serial tests run
# back to back for 90 s, which left a CPU of the two idle for most of it. What the probe
# cost and bcc's bursts measure holds beside one: the probe cost's programs count the few
# syscalls of such a process among tens of thousands of requests, and the bursts still
# spill (their docstrings say so). The verdict recordings need the nice: beside a quiet
# test at nice 0, PostgreSQL's writers once read server-lock 0.23 against server-cpu
# 0.41, over the half their test allows; beside a nice-19 busy loop, 0.14-0.18 against
# 0.50-0.54 (test_verdicts.py).


def _room_locks() -> tuple[Path, ...]:
    run = os.environ[RUN_MARK]
    d = Path(tempfile.gettempdir())
    return tuple(d / f"mongoprobe-tests-{run}.{name}"
                 for name in ("turnstile", "room", "quiet", "waiting", "turns"))


def _serial_waiting(w) -> bool:
    """Whether a serial test has said it waits or runs (a shared lock on ``w``)."""
    try:
        fcntl.flock(w, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    fcntl.flock(w, fcntl.LOCK_UN)
    return False


def _quiet(item) -> bool:
    return (item.path.name in QUIET_FILES and not item.get_closest_marker("root")
            and not item.get_closest_marker("target"))


# A serial test of SERIAL_FILES waits for its turn (its place among those selected, in
# SERIAL_FILES' order) before the turnstile: they are among the first files handed out
# (HANDED_OUT), and the turnstile is not first come, first served. Each one notes in
# the "turns" file when it starts and when it is done. It says it waits (the "waiting"
# lock, which keeps the others out) once the one before it has started: not before, as
# a test ahead of that one on its worker would then wait for it, and it for that one.
# (A turn not come in TURN_WAIT s is taken anyway: a worker lost.)
_SERIAL_TURN: dict[str, int] = {}
TURN_WAIT = 600.0


def _wait_turns(turns: Path, line: str) -> None:
    end = time.monotonic() + TURN_WAIT
    while time.monotonic() < end:
        if turns.exists() and line in turns.read_text().splitlines():
            return
        time.sleep(0.1)


def _note_turn(turns: Path, line: str) -> None:
    with open(turns, "a") as f:
        f.write(line + "\n")


@contextlib.contextmanager
def _room(alone: bool, quiet: bool = False, turn: int | None = None):
    turnstile, room, quiet_lock, waiting, turns = _room_locks()
    with (open(turnstile, "a") as t, open(room, "a") as r, open(quiet_lock, "a") as q,
          open(waiting, "a") as w):
        if alone:
            if turn:
                _wait_turns(turns, f"start {turn - 1}")
            # said before the turnstile, and held until it has run: a long test that
            # took the room between two serial ones would keep the second waiting, and
            # every other worker with it
            fcntl.flock(w, fcntl.LOCK_SH)
            if turn:
                _wait_turns(turns, f"done {turn - 1}")
            fcntl.flock(t, fcntl.LOCK_EX)
            fcntl.flock(r, fcntl.LOCK_EX)
            if turn is not None:
                _note_turn(turns, f"start {turn}")
            try:
                yield
            finally:
                fcntl.flock(r, fcntl.LOCK_UN)
                if turn is not None:
                    _note_turn(turns, f"done {turn}")
                fcntl.flock(w, fcntl.LOCK_UN)
                fcntl.flock(t, fcntl.LOCK_UN)
            return
        while True:
            if quiet and _serial_waiting(w):
                break
            fcntl.flock(t, fcntl.LOCK_EX)
            if not _serial_waiting(w):
                fcntl.flock(r, fcntl.LOCK_SH)
                fcntl.flock(t, fcntl.LOCK_UN)
                try:
                    yield
                finally:
                    fcntl.flock(r, fcntl.LOCK_UN)
                return
            fcntl.flock(t, fcntl.LOCK_UN)
            if quiet:
                break
            time.sleep(0.1)             # the serial tests first
        # beside a serial test that waits or runs, one quiet test at a time, niced
        fcntl.flock(q, fcntl.LOCK_EX)
        try:
            with _niced():
                yield
        finally:
            fcntl.flock(q, fcntl.LOCK_UN)


@contextlib.contextmanager
def _niced():
    """This thread (and the threads and processes it starts) at nice 19, then back: the
    scheduler then gives it the CPU a serial test leaves idle, and hardly any it wants
    (a nice-19 task weighs 15 against a nice-0 one's 1,024). Only where it can be set
    back (root): an unprivileged process cannot lower its nice again."""
    if os.geteuid() != 0:
        yield
        return
    before = os.getpriority(os.PRIO_PROCESS, 0)
    os.setpriority(os.PRIO_PROCESS, 0, 19)
    try:
        yield
    finally:
        os.setpriority(os.PRIO_PROCESS, 0, before)


# --- CPU per test -----------------------------------------------------------------------
#
# The suite's length on this machine is set by CPU (the CPUs are busy most of the run):
# each test's last report carries the CPU seconds the worker's own processes used over
# its setup, call and teardown (the worker, and every process carrying its session mark,
# alive or reaped by a marked parent: the tracers, the targets, the load tools, the BPF
# programs run in their syscalls), and the session ends with the files and tests that
# used the most. A module fixture's cost lands on the test that made it.


class _TreeCpu:
    """CPU seconds used so far by this process and the live processes marked with this
    session's mark (their reaped children included)."""

    def __init__(self) -> None:
        self.tick = os.sysconf("SC_CLK_TCK")
        self.marked: dict[tuple[str, str], bool] = {}     # (pid, start time) -> marked
        self.needle = None

    def __call__(self) -> float:
        if self.needle is None:
            self.needle = f"{SESSION_MARK}={os.environ[SESSION_MARK]}".encode()
        me = os.times()
        total = me.user + me.system + me.children_user + me.children_system
        ticks = 0
        seen = {}
        for d in os.scandir("/proc"):
            if not d.name.isdigit() or int(d.name) == os.getpid():
                continue
            try:
                with open(f"/proc/{d.name}/stat", "rb") as f:
                    f = f.read().rsplit(b")", 1)[1].split()
                key = (d.name, f[19])          # starttime: a reused pid is a new process
                marked = self.marked.get(key)
                if marked is None:
                    with open(f"/proc/{d.name}/environ", "rb") as e:
                        marked = self.needle in e.read().split(b"\0")
                seen[key] = marked
                if marked:
                    ticks += sum(int(x) for x in f[11:15])  # utime stime cutime cstime
            except OSError:                     # gone meanwhile, or not ours to read
                continue
        self.marked = seen
        return total + ticks / self.tick


_tree_cpu = _TreeCpu()
_CPU_BY_TEST: dict[str, float] = {}
_WALL_BY_FILE: dict[str, float] = {}
_ROOM_WAIT: dict[str, float] = {}


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_setup(item):
    item._mongoprobe_cpu0 = _tree_cpu()
    yield


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_teardown(item):
    yield
    item._mongoprobe_cpu = _tree_cpu() - item._mongoprobe_cpu0


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    rep = (yield).get_result()
    if call.when == "teardown" and hasattr(item, "_mongoprobe_cpu"):
        # setup, call and teardown: the report that crosses to the controller last
        rep.user_properties.append(("cpu_s", round(item._mongoprobe_cpu, 2)))
        rep.user_properties.append(("room_wait_s",
                                    round(getattr(item, "_mongoprobe_room_wait", 0.0), 2)))


def pytest_runtest_logreport(report) -> None:
    f = report.nodeid.split("::", 1)[0]
    _WALL_BY_FILE[f] = _WALL_BY_FILE.get(f, 0.0) + report.duration
    for name, value in report.user_properties:
        if name == "cpu_s":
            _CPU_BY_TEST[report.nodeid] = value
        elif name == "room_wait_s":
            _ROOM_WAIT[report.nodeid] = value


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    if not _worker(item.config):
        yield                       # one process: every test runs alone anyway
        return
    t0 = time.time()
    with _room(item.get_closest_marker("serial") is not None, _quiet(item),
               _SERIAL_TURN.get(item.nodeid)):
        t1 = time.time()
        item._mongoprobe_room_wait = t1 - t0
        yield
    timeline = os.environ.get("MONGOPROBE_TEST_TIMELINE")
    if timeline:
        # when each test waited for the room, ran, and ended, on which worker: where a
        # session's time goes (the serial tests, the tail)
        with open(timeline, "a") as f:
            f.write(f"{_worker(item.config)} {t0:.2f} {t1:.2f} {time.time():.2f} "
                    f"{getattr(item, '_mongoprobe_cpu', 0.0):.1f} {item.nodeid}\n")


# The markers follow from what a test uses (item.fixturenames holds every fixture a
# test needs, through other fixtures too), so a new test gets them by using the fixture:
# `pytest -m "not root"` is the quick offline tier.
ROOT_FIXTURES = {"need_bpftrace", "need_bcc", "need_dtrace", "need_capture",
                 "tracing_and_target"}
TARGET_FIXTURES = {"ferretdb", "refused_target", "tls_target", "tracing_and_target"}


# The files by their summed test time in a recent full run (seconds: the time column of
# the session's CPU table), the longest first: pytest-xdist hands the workers whole
# files in collection order (scripts/test.sh passes --no-loadscope-reorder: its own
# order is by number of tests), and a long file handed out last would run on alone
# while the other workers idle. The files of the serial tests and the quiet ones come
# before these (HANDED_OUT), as the serial ones leave the others idle wherever they run.
# A file not listed (fast, or new) goes after these, in its usual order.
FILE_SECONDS = {
    "test_examples_live.py": 86, "test_dtrace.py": 86, "test_pcap.py": 80,
    "test_record.py": 76, "test_dtrace_tls.py": 70, "test_tls_decode.py": 63,
    "test_many_connections.py": 62, "test_compare_record.py": 105,
    "test_probe_patterns.py": 41, "test_tracer_versions_profilers.py": 40,
    "test_ycsb_record.py": 35, "test_pcapfile.py": 31, "test_profile_probes.py": 30,
    "test_engine_select.py": 28, "test_wheel.py": 26, "test_latency_ferretdb.py": 22,
    "test_nodejs_record.py": 20, "test_compression.py": 20, "test_compare.py": 20,
    "test_tls_detect.py": 20, "test_end_to_end.py": 16, "test_load.py": 15,
    "test_longrun.py": 13, "test_untraced.py": 11, "test_teaching_probes.py": 11,
    "test_report.py": 11, "test_tracer_versions.py": 11, "test_no_reply_runs.py": 11,
    "test_one_statistic.py": 10,
}
# The files of the serial tests at a session's start, in the order they run (_room):
# the shortest first, so that its worker is soon free for the quiet files.
SERIAL_FILES = ("test_bcc_bursts.py", "test_probe_cost.py", "test_verdicts.py")
# Quiet files (see _room) run beside the serial tests, one test at a time. In the order
# they are handed out, the longest first; about 57 s of CPU in all, a little less than
# the serial tests leave idle (they ran out at 89 s of a session, the verdict
# recordings ended at 100 s).
QUIET_FILES = (
    "test_examples.py",
    # then two short ones: a worker that begins with test_probe_cost.py is handed one
    # with it, as its two tests are "almost depleted" to pytest-xdist, and runs it only
    # after them
    "test_phases_notes.py", "test_bpftrace_json.py",
    "test_formats.py", "test_wire_fuzz.py", "test_flamegraph.py", "test_loadtools.py",
    "test_normalize.py", "test_loglinear.py", "test_event_store.py", "test_histogram.py",
    "test_probe_output.py", "test_layout.py", "test_latencies.py", "test_wire.py",
    "test_docs.py", "test_quantize.py", "test_phase_window.py",
    "test_stacks.py",   # last: its one root test waits for the serial ones
)
# The order the files are handed out in (pytest-xdist gives each worker a file, and a
# second one to a worker whose first has 2 tests or fewer): the first serial file, the
# first quiet file, then the other serial files, then the other quiet ones. A worker
# that begins with a serial file runs nothing else until its test's turn has come and
# gone, so with the serial files first, no quiet test ran beside the first serial test
# (bcc's bursts, 15 s of a CPU left idle); the first quiet file's worker runs quiet
# tests from the start.
HANDED_OUT = (SERIAL_FILES[0], QUIET_FILES[0], *SERIAL_FILES[1:], *QUIET_FILES[1:])


def _file_rank(item) -> tuple:
    name = item.path.name
    if name in HANDED_OUT:
        return (0, HANDED_OUT.index(name))
    return (1, -FILE_SECONDS.get(name, 0))


# tryfirst: the markers below are there for the hooks after it
@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config, items) -> None:
    for item in items:
        names = set(item.fixturenames)
        if names & ROOT_FIXTURES and not item.get_closest_marker("root"):
            item.add_marker(pytest.mark.root)
        if names & TARGET_FIXTURES and not item.get_closest_marker("target"):
            item.add_marker(pytest.mark.target)
    items.sort(key=_file_rank)      # stable: a file's tests keep their order


# A module fixture that measures (a recording whose verdicts read CPU and waits) is made
# by the first test that uses it; the tests after it only read it. The module names
# such fixtures with ``pytest.mark.serial_fixtures(...)``, and that first test, among
# those selected (at the collection's end: after -k and -m have deselected), runs
# serial: the readers run beside other tests, and none waits for the room to empty
# without need.
def pytest_collection_finish(session) -> None:
    made: set[tuple[str, str]] = set()
    for item in session.items:
        for m in item.iter_markers("serial_fixtures"):
            for name in m.args:
                key = (str(item.path), name)
                if name in item.fixturenames and key not in made:
                    made.add(key)
                    item.add_marker(pytest.mark.serial)
    first = [item for item in session.items
             if item.path.name in SERIAL_FILES and item.get_closest_marker("serial")]
    first.sort(key=lambda item: SERIAL_FILES.index(item.path.name))     # (stable)
    _SERIAL_TURN.update({item.nodeid: n for n, item in enumerate(first)})


def _marked_processes(mark: str) -> list[tuple[int, str]]:
    """(pid, command line) of the live processes whose environment has the mark, but
    this one."""
    needle = f"{SESSION_MARK}={mark}".encode()
    found = []
    for d in Path("/proc").iterdir():
        if not d.name.isdigit() or int(d.name) == os.getpid():
            continue
        try:
            if needle not in (d / "environ").read_bytes().split(b"\0"):
                continue
            if (d / "stat").read_text().rsplit(")", 1)[1].split()[0] == "Z":
                continue
            cmd = (d / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:             # gone meanwhile, or not ours to read
            continue
        found.append((int(d.name), cmd.strip()))
    return found


@pytest.fixture(scope="session", autouse=True)
def no_leftover_processes():
    """Fails the session's last test when a test left a process running (a tracer, a
    tshark, a server): each test must stop what it starts. The leftovers are killed so
    the next run starts clean. Set up first, so torn down after the other session
    fixtures (the shared targets) have stopped theirs."""
    yield
    mark = os.environ[SESSION_MARK]
    left = _marked_processes(mark)
    for _ in range(20):             # a child being stopped right now may need a moment
        if not left:
            return
        time.sleep(0.25)
        left = _marked_processes(mark)
    for pid, _ in left:
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass
    pytest.fail("processes left running by the tests (killed now): "
                + "; ".join(f"{pid} {cmd[:120]}" for pid, cmd in left), pytrace=False)


def build_c(tmp_path_factory, name: str, *flags: str) -> Path:
    """tests/NAME.c compiled with FLAGS into a temporary folder (skips without a C
    compiler)."""
    cc = shutil.which("cc") or shutil.which("gcc")
    if not cc:
        pytest.skip(f"no C compiler (cc/gcc) to build tests/{name}.c")
    exe = tmp_path_factory.mktemp(name) / name
    subprocess.run([cc, *flags, "-o", str(exe), str(Path(__file__).parent / f"{name}.c")],
                   check=True)
    return exe


def _needs(reason: str | None) -> None:
    if reason:
        pytest.skip(reason)


@pytest.fixture
def need_bpftrace() -> None:
    _needs(probes.why_cannot_trace())


@pytest.fixture
def need_bcc() -> None:
    _needs(probes.why_cannot_bcc())


@pytest.fixture
def need_dtrace() -> None:
    _needs(probes.why_cannot_dtrace())


@pytest.fixture(scope="session")
def tracing_and_target() -> None:
    """Skips unless this machine can trace and setup built the embedded target: what
    every test recording a run on it needs."""
    _needs(probes.why_cannot_trace())
    if not target.ferretdb_binary().exists():
        pytest.skip(f"{target.ferretdb_binary()} not built: run scripts/setup.sh")


@pytest.fixture(scope="session")
def recorded_run(request, tmp_path_factory, tracing_and_target):
    """tests/helpers/recorded.py's run, recorded once for the whole run: (path, rc,
    stdout, stderr, t0, t1, killed). Under xdist the first worker to need it records it
    into the run's common temporary folder, under a lock, and the others read it there.
    Tests only read it (a test that changes it copies it)."""
    import json
    from types import SimpleNamespace

    from helpers import recorded

    base = tmp_path_factory.getbasetemp()
    # a worker's basetemp is the run's own, .../popen-gwN; without xdist, the session's
    shared = (base.parent if _worker(request.config) else base) / "recorded-run"
    shared.mkdir(exist_ok=True)
    with open(shared / "lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        done = shared / "recorded.json"
        if not done.exists():
            rec = recorded.record(shared / "RUN")
            done.write_text(json.dumps({**vars(rec), "path": str(rec.path)}))
    rec = SimpleNamespace(**json.loads(done.read_text()))
    rec.path = Path(rec.path)
    assert rec.rc == 0, rec.stderr[-3000:]
    return rec


@pytest.fixture(scope="session")
def tls_target(tmp_path_factory):
    """A private FerretDB serving TLS only (Go crypto/tls, a key made for it), shared by
    the session: TargetInfo with ca_file. Tests count by differences, as with
    ``ferretdb``."""
    if not target.ferretdb_binary().exists():
        pytest.skip(f"{target.ferretdb_binary()} not built: run scripts/setup.sh")
    state = tmp_path_factory.mktemp("tls-target")
    try:
        info = target.start(state, tls=True)
    except target.TargetError as e:
        pytest.fail(str(e))
    try:
        yield info
    finally:
        target.stop(state)


def _private_ferretdb(tmp_path_factory, name: str):
    if not target.ferretdb_binary().exists():
        pytest.skip(f"{target.ferretdb_binary()} not built: run scripts/setup.sh")
    with target.EmbeddedTarget(tmp_path_factory.mktemp(name)) as info:
        yield info


@pytest.fixture(scope="session")
def ferretdb(tmp_path_factory):
    """A private FerretDB for the test session: TargetInfo (pid, uri, metrics_url)."""
    yield from _private_ferretdb(tmp_path_factory, "ferretdb")


@pytest.fixture(scope="module")
def refused_target(tmp_path_factory):
    """A FerretDB of the module's own, for the requests it refuses: FerretDB's request
    counts label legacy OP_QUERY requests "unknown", so they are kept off the session's
    target, whose counts the tests compare with the probes' command by command."""
    yield from _private_ferretdb(tmp_path_factory, "ferretdb-refused")
