"""The test harness itself: what every other test relies on however the suite was
started (from a terminal, `bash .ci/run &`, nohup)."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

import conftest


def test_children_can_be_stopped_with_sigint():
    """A child started by a test takes SIGINT (Ctrl-C) as a user's tool would, even when
    the suite was started with SIGINT ignored: the tests that stop a tool that way rely
    on it."""
    r = subprocess.run([sys.executable, "-c",
                        "import signal; print(signal.getsignal(signal.SIGINT) is "
                        "signal.default_int_handler)"],
                       capture_output=True, text=True, check=True)
    assert r.stdout.strip() == "True"
    assert signal.getsignal(signal.SIGINT) is not signal.SIG_IGN


def test_session_mark_finds_children():
    """The leftover check finds a child by the session's mark, and only while it runs."""
    child = subprocess.Popen(["sleep", "30"], start_new_session=True)
    try:
        mark = os.environ[conftest.SESSION_MARK]
        assert child.pid in {pid for pid, _ in conftest._marked_processes(mark)}
    finally:
        child.kill()
        child.wait()
    assert child.pid not in {pid for pid, _ in conftest._marked_processes(mark)}


def _suite(tmp_path: Path, files: dict[str, str]) -> Path:
    """A folder with this conftest.py and ``files`` (name: the test module's code after
    a ``_rec(name, t0)`` that appends ``name t0 t1 session`` to the log); the log."""
    shutil.copy(Path(__file__).parent / "conftest.py", tmp_path / "conftest.py")
    log = tmp_path / "log"
    rec = ("import os, time, pytest\n"
           "def _rec(name, t0):\n"
           f"    with open({str(log)!r}, 'a') as f:\n"
           "        f.write(f\"{name} {t0} {time.time()} "
           "{os.environ.get('MONGOPROBE_TEST_SESSION')}\\n\")\n")
    for name, code in files.items():
        (tmp_path / name).write_text(rec + code)
    return log


def _run_suite(tmp_path: Path, *args: str, workers: int | None = 2) -> None:
    """pytest on that folder as a session of its own (on ``workers``, None: in one
    process), passed."""
    # (nor the timeline: its rows would join the outer session's)
    env = {k: v for k, v in os.environ.items()
           if k not in (conftest.SESSION_MARK, conftest.RUN_MARK, "MONGOPROBE_TEST_TIMELINE")}
    how = ["-p", "no:xdist"] if workers is None else ["-n", str(workers), "--dist", "loadfile"]
    r = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *how,
                        "-c", os.devnull, "--rootdir", str(tmp_path), str(tmp_path), *args],
                       capture_output=True, text=True, timeout=300, env=env, cwd=tmp_path)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]


def _rows(log: Path) -> dict[str, tuple[float, float, str]]:
    """The log's rows: {name: (start, end, session mark)}."""
    return {name: (float(t0), float(t1), mark) for name, t0, t1, mark in
            (ln.split() for ln in log.read_text().splitlines())}


def test_a_serial_test_runs_alone_on_workers(tmp_path):
    """Under pytest-xdist (scripts/test.sh), a test marked serial overlaps no other test,
    and each worker has its own session mark."""
    log = _suite(tmp_path, {
        "test_many.py": "@pytest.mark.parametrize('i', range(8))\n"
                        "def test_many(i):\n"
                        "    t0 = time.time(); time.sleep(0.3); _rec(f'many{i}', t0)\n",
        "test_one.py": "def test_first():\n"
                       "    t0 = time.time(); time.sleep(0.3); _rec('first', t0)\n"
                       "@pytest.mark.serial\n"
                       "def test_alone():\n"
                       "    t0 = time.time(); time.sleep(1.0); _rec('alone', t0)\n"})
    _run_suite(tmp_path)
    rows = _rows(log)
    assert len(rows) == 10
    a0, a1, _ = rows["alone"]
    for name, (t0, t1, _) in rows.items():
        if name != "alone":
            assert t1 <= a0 or t0 >= a1, (name, t0, t1, rows["alone"])
    marks = {mark for _, _, mark in rows.values()}
    assert len(marks) == 2 and all(m.endswith(("-gw0", "-gw1")) for m in marks), marks
    # the locks are gone with the run
    run = marks.pop().rsplit("-", 1)[0]
    assert not list(Path(tempfile.gettempdir()).glob(f"mongoprobe-tests-{run}.*"))


def test_quiet_tests_run_beside_a_serial_one_by_one(tmp_path):
    """A quiet test (conftest.QUIET_FILES) runs beside a serial test, instead of waiting
    for it with the others, but one at a time and at nice 19: a serial test shares the
    machine with one quiet test at most, which takes hardly any CPU it wants."""
    quiet = "test_histogram.py"
    assert quiet in conftest.QUIET_FILES
    log = tmp_path / "log"
    # the serial test goes on until a quiet test has begun and ended beside it (30 s at
    # most: a quiet test made to wait for it would never come)
    log = _suite(tmp_path, {
        "test_many.py": "@pytest.mark.parametrize('i', range(4))\n"
                        "def test_many(i):\n"
                        "    t0 = time.time(); time.sleep(0.2)\n"
                        "    _rec(f'many{i}-nice{os.getpriority(os.PRIO_PROCESS, 0)}', t0)\n",
        quiet: "@pytest.mark.parametrize('i', range(12))\n"
               "def test_quiet(i):\n"
               "    t0 = time.time(); time.sleep(0.2)\n"
               "    _rec(f'quiet{i}-nice{os.getpriority(os.PRIO_PROCESS, 0)}', t0)\n",
        "test_one.py": "@pytest.mark.serial\n"
                       "def test_alone():\n"
                       "    t0 = time.time()\n"
                       "    while time.time() < t0 + 30:\n"
                       f"        rows = [r.split() for r in open({str(log)!r})] "
                       f"if os.path.exists({str(log)!r}) else []\n"
                       "        if any(r[0].startswith('quiet') and float(r[1]) >= t0 "
                       "for r in rows):\n"
                       "            break\n"
                       "        time.sleep(0.05)\n"
                       "    time.sleep(0.5)\n"
                       "    _rec('alone', t0)\n"})
    _run_suite(tmp_path, workers=3)
    rows = _rows(log)
    assert len(rows) == 17
    a0, a1, _ = rows["alone"]

    def beside(t0: float, t1: float) -> bool:
        return t1 > a0 and t0 < a1

    assert not [name for name, (t0, t1, _) in rows.items()
                if name.startswith("many") and beside(t0, t1)]
    with_it = sorted((t0, t1) for name, (t0, t1, _) in rows.items()
                     if name.startswith("quiet") and beside(t0, t1))
    assert with_it, rows
    assert all(b[0] >= a[1] for a, b in zip(with_it, with_it[1:])), with_it
    # at nice 19 beside it (as root, who can set it back; also while it waited for the
    # room), and the workers' other tests at 0 again
    nice = {name: (int(name.rsplit("nice", 1)[1]), beside(t0, t1))
            for name, (t0, t1, _) in rows.items() if "-nice" in name}
    want = 19 if os.geteuid() == 0 else 0
    assert all(n == want for name, (n, b) in nice.items()
               if b and name.startswith("quiet")), nice
    assert all(n == 0 for name, (n, b) in nice.items() if name.startswith("many")), nice


def test_the_serial_files_take_their_turns_in_order(tmp_path):
    """The serial tests of conftest.SERIAL_FILES run in that order, whichever worker
    gets to the turnstile first: here the later file's test asks a second before the
    earlier one's, and still runs after it."""
    first, then = conftest.SERIAL_FILES[:2]
    log = _suite(tmp_path, {
        first: "def test_before():\n    time.sleep(1.0)\n"
               "@pytest.mark.serial\n"
               "def test_first():\n"
               "    t0 = time.time(); time.sleep(0.3); _rec('first', t0)\n",
        then: "@pytest.mark.serial\n"
              "def test_then():\n"
              "    t0 = time.time(); time.sleep(0.3); _rec('then', t0)\n"})
    _run_suite(tmp_path)
    rows = _rows(log)
    assert rows["first"][1] <= rows["then"][0], rows


def test_the_first_test_that_makes_a_measuring_fixture_is_serial(tmp_path):
    """A module names its measuring fixtures (serial_fixtures): the first selected test
    that uses one runs serial, as it makes it; the tests that read it after, and those
    that never use it, do not."""
    log = _suite(tmp_path, {
        "test_made.py": "pytestmark = pytest.mark.serial_fixtures('made')\n"
                        "@pytest.fixture(scope='module')\n"
                        "def made():\n    return 1\n"
                        "def _serial(request):\n"
                        "    _rec(request.node.name + "
                        "str(request.node.get_closest_marker('serial') is not None), 0)\n"
                        "def test_before(request):\n    _serial(request)\n"
                        "def test_maker(made, request):\n    _serial(request)\n"
                        "def test_reader(made, request):\n    _serial(request)\n"})

    def run(*args: str) -> set[str]:
        log.unlink(missing_ok=True)
        _run_suite(tmp_path, *args, workers=None)
        return set(_rows(log))

    assert run() == {"test_beforeFalse", "test_makerTrue", "test_readerFalse"}
    # selected alone, the reader makes it
    assert run("-k", "reader") == {"test_readerTrue"}
