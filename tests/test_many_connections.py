"""Thousands of connections: every engine exact at 10,000, and its state freed on close.

A plain socket client (tests/manyconns.py, one thread, a selector) opens the connections
to the embedded FerretDB and sends, round by round, a ping on every connection before
reading any reply: requests pipelined across connections (thousands outstanding at
once), every connection using the same requestID in a round. The probe runs through
``mongoprobe latency --json`` (the real CLI, the real probe) with the default
``--max-connections``; its counts must equal the client's and FerretDB's own
/debug/metrics, nothing lost. The churn tests open thousands of short connections (fds
reused) and check, while the probe still runs, that its per-connection maps are back to
(nearly) empty (bpftrace, bcc; DTrace's dynamic variables cannot be listed: exactness
only). A test with the maps sized too small checks that the loss is named with its fix.

A tracer start costs seconds (a DTrace start ~6 s of CPU, its END and the analyzer's
reading of 10,000 connections more), so the tracers share two runs (the tests check one
aspect each of a run; a tracer that fails fails only its own tests):

* the scale run: every engine's 10,000-connection tracer (bpftrace, bcc, bcc --by conn,
  DTrace) attached together, the 10,000-connection rounds, then a DTrace sized for
  1,000 connections attached and CHURN short connections, the maps of bpftrace and bcc
  read while they still run, every tracer stopped. The 10,000-connection tracers saw
  the rounds and the churn: their counts are exact over both.
* the too-small run, on a second FerretDB while the scale run's tracers end: each
  engine with ``--max-connections 500`` (DTrace with ``--by conn``: its aggregations
  per connection fill first); bpftrace and bcc through 1,500 connections, then DTrace
  alone through 3,000 more.

10,000 connections need 10,000 descriptors in the client and in FerretDB (both inherit
this process's RLIMIT_NOFILE, raised towards its hard limit here); with a lower hard
limit the tests run at the highest count it allows, and fail below 5,000 saying so.
"""

from __future__ import annotations

import ctypes
import json
import os
import platform
import re
import resource
import shutil
import signal
import subprocess
import time
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import pytest

import manyconns
from helpers.cli import at_once, start_cli
from helpers.ferretdb import metrics_delta
from mongoprobe.run import target, tracer as probes

pytestmark = [pytest.mark.root, pytest.mark.scale]

CONNECTIONS = 10_000
ROUNDS = 3
CHURN = 12_000          # short connections, 200 open at a time (their fds reused)


def connections_possible(want: int) -> int:
    """``want``, or fewer when the descriptor limit is too low (client and server each
    need one per connection, plus a margin)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    limit = hard if hard != resource.RLIM_INFINITY else want + 512
    return min(want, limit - 512)


@pytest.fixture(scope="module", autouse=True)
def real_default():
    """The probes sized by their own default (10,000 connections here), not the suite's
    small one: that default is what these tests check. (Module scope: the shared runs
    start their tracers once, for the module.)"""
    with pytest.MonkeyPatch.context() as mp:
        mp.delenv("MONGOPROBE_MAX_CONNECTIONS", raising=False)
        yield


@pytest.fixture(scope="module")
def big_target(tmp_path_factory, real_default):
    """A private FerretDB started with this process's RLIMIT_NOFILE at its hard limit
    (it inherits it), for thousands of connections."""
    if not target.ferretdb_binary().exists():
        pytest.skip(f"{target.ferretdb_binary()} not built: run scripts/setup.sh")
    manyconns.raise_nofile(CONNECTIONS + 512)
    with target.EmbeddedTarget(tmp_path_factory.mktemp("ferretdb-conns")) as info:
        yield info


@pytest.fixture(scope="module")
def small_target(tmp_path_factory, big_target):
    """A second private FerretDB (the descriptor limit raised by big_target): the
    too-small run's, traced while the scale run's tracers end."""
    with target.EmbeddedTarget(tmp_path_factory.mktemp("ferretdb-small")) as info:
        yield info


def need(engine: str, request) -> None:
    request.getfixturevalue({"bpftrace": "need_bpftrace", "bcc": "need_bcc",
                             "dtrace": "need_dtrace"}[engine])


WHY_NOT = {"bpftrace": probes.why_cannot_trace, "bcc": probes.why_cannot_bcc,
           "dtrace": probes.why_cannot_dtrace}


def port_of(info) -> int:
    return int(info.uri.rsplit(":", 1)[1].strip("/"))


def pings(info) -> int:
    return metrics_delta({}, target.request_counts(info.metrics_url)).get("ping", 0)


# --- starting and stopping several CLIs at once ----------------------------------------


@dataclass
class Tracers:
    """CLIs started together (``latency --json``), by name; what each gave once stopped:
    ``done[name]`` (stdout, stderr, exit status), or the exception its start raised."""
    clis: dict[str, subprocess.Popen] = field(default_factory=dict)
    done: dict[str, tuple[str, str, int] | BaseException] = field(default_factory=dict)

    def start(self, pid: int, wanted: dict[str, list[str]]) -> None:
        """Each of ``wanted`` (name: engine and options) whose engine can run here,
        attached (their compiles and map allocations overlap)."""
        wanted = {name: argv for name, argv in wanted.items()
                  if WHY_NOT[argv[argv.index("--engine") + 1]]() is None}

        def one(argv: list[str]) -> subprocess.Popen:
            return start_cli("latency", "-p", str(pid), "--json", *argv)

        for name, started in at_once(one, wanted).items():
            if isinstance(started, BaseException):
                self.done[name] = started   # pytest.fail's too: that tracer's tests fail
            else:
                self.clis[name] = started

    def stop(self, names: list[str] | None = None) -> None:
        """SIGINT (a user's Ctrl-C) to ``names`` (None: every one running), at once;
        returns once each has printed and exited."""
        names = list(self.clis) if names is None else names
        for name in names:
            self.clis[name].send_signal(signal.SIGINT)

        def wait(cli: subprocess.Popen) -> tuple[str, str, int]:
            try:
                out, err = cli.communicate(timeout=300)
            except subprocess.TimeoutExpired:
                cli.kill()
                out, err = cli.communicate()
                err += "\n(killed: not ended within 300 s of SIGINT)"
            return out, err, cli.returncode

        self.done.update(at_once(wait, {name: self.clis.pop(name) for name in names}))

    def result(self, name: str) -> tuple[dict, str]:
        """``name``'s last JSON line and its stderr; fails as its start or end did."""
        got = self.done[name]
        if isinstance(got, BaseException):
            raise got
        out, err, rc = got
        assert rc == 0, err
        return json.loads(out.strip().splitlines()[-1]), err


def tracer_pid(cli: subprocess.Popen) -> int:
    """The tracer a ``mongoprobe latency`` process runs (its one child)."""
    kids = [int(k) for task in Path(f"/proc/{cli.pid}/task").iterdir()
            for k in (task / "children").read_text().split()]
    assert len(kids) == 1, kids
    return kids[0]


# --- the scale run ---------------------------------------------------------------------

# the 10,000-connection tracers, named as the test ids; the 1,000-connection DTrace
BIG = {"bpftrace-command": ["--engine", "bpftrace", "--by", "command"],
       "bcc-command": ["--engine", "bcc", "--by", "command"],
       "bcc-conn": ["--engine", "bcc", "--by", "conn"],
       "dtrace-command": ["--engine", "dtrace", "--by", "command"]}
SMALL_DTRACE = {"dtrace-churn": ["--engine", "dtrace", "--max-connections", "1000"]}
# whose per-connection maps are read after the churn (the probes run as the CLI runs
# them, --by command)
CHURN_MAPS_OF = {"bpftrace": "bpftrace-command", "bcc": "bcc-command"}


@dataclass
class ScaleRun:
    n: int                  # connections of the rounds
    answered: int           # replies the client had in the rounds
    churned: int            # replies the client had in the churn
    ferretdb_pings: int     # FerretDB's own count over both
    tracers: Tracers
    left: dict[str, dict[str, int] | BaseException]   # map entries after the churn
    too_small: Future | None       # the too-small run (Tracers), made while these ended

    @property
    def sent(self) -> int:
        """Every ping the 10,000-connection tracers saw: the rounds', then the churn's."""
        return self.n * ROUNDS + CHURN


@pytest.fixture(scope="module")
def scale_run(big_target, small_target) -> ScaleRun:
    n = connections_possible(CONNECTIONS)
    assert n >= 5000, f"RLIMIT_NOFILE allows only {n} connections"
    port = port_of(big_target)
    tracers = Tracers()
    before = pings(big_target)
    ok, too_small = False, None
    try:
        tracers.start(big_target.pid, BIG)
        answered = manyconns.rounds("127.0.0.1", port, n, ROUNDS)
        time.sleep(1.0)
        tracers.start(big_target.pid, SMALL_DTRACE)
        churned = manyconns.churn("127.0.0.1", port, CHURN, at_once=200)
        time.sleep(1.0)
        left: dict = {}
        if shutil.which("bpftool"):
            for engine, name in CHURN_MAPS_OF.items():
                try:
                    left[engine] = map_entries(tracer_pid(tracers.clis[name]), CONN_MAPS[engine])
                except (KeyError, OSError, subprocess.CalledProcessError, AssertionError) as e:
                    left[engine] = e        # (KeyError: its tracer did not start)
        ok = True
    finally:
        # the too-small run, on a FerretDB of its own, while these tracers print and are
        # read (DTrace's END of 10,000 connections and its summary take a minute)
        with ThreadPoolExecutor(1) as pool:
            too_small = pool.submit(run_too_small, small_target) if ok else None
            tracers.stop()
    return ScaleRun(n, answered, churned, pings(big_target) - before, tracers, left, too_small)


@pytest.mark.parametrize("engine,by", [("bpftrace", "command"), ("bcc", "command"),
                                       ("bcc", "conn"), ("dtrace", "command")])
def test_ten_thousand_connections_exact(engine, by, scale_run, request):
    need(engine, request)
    run = scale_run
    assert run.answered == run.n * ROUNDS and run.churned == CHURN
    assert run.ferretdb_pings == run.sent      # FerretDB's own count
    result, err = run.tracers.result(f"{engine}-{by}")
    assert result["lost"] == {"unmatched_replies": 0, "requests_without_reply": 0,
                              "malformed": 0, "dropped": 0}, (result["counts"], err)
    assert result["by_command"]["ping"]["count"] == run.sent
    if by == "conn":
        # every connection's aggregate kept (per-connection view)
        assert sum(v["count"] for v in result["by_conn"].values()) >= run.sent
    else:
        # not asked for: no engine keeps latency per connection (DTrace's END would
        # spend most of its work on 10,000 of them)
        assert result["by_conn"] == {}, list(result["by_conn"])[:5]


def map_entries(pid: int, names: set[str]) -> dict[str, int]:
    """Entries of the maps named ``names`` that process ``pid`` holds (bpftool)."""
    ids = set()
    for fdinfo in Path(f"/proc/{pid}/fdinfo").iterdir():
        try:
            for line in fdinfo.read_text().splitlines():
                if line.startswith("map_id:"):
                    ids.add(int(line.split()[1]))
        except OSError:
            pass
    out = {}
    for i in ids:
        show = json.loads(subprocess.run(["bpftool", "map", "show", "id", str(i), "--json"],
                                         capture_output=True, text=True, check=True).stdout)
        if show.get("name") in names and show.get("type") == "array":
            out[show["name"]] = live_slots(i)
        elif show.get("name") in names:
            dump = subprocess.run(["bpftool", "map", "dump", "id", str(i), "--json"],
                                  capture_output=True, text=True, check=True).stdout
            out[show["name"]] = len(json.loads(dump))
    return out


def live_slots(map_id: int, field: str = "live") -> int:
    """Slots of an array map of structs (bcc's conns) whose one-byte member ``field`` is
    set, read with bpf(2) itself: bpftool's dump of 20,000 values of 584 bytes is ~100 MB
    of JSON. The member's offset comes from the map's BTF."""
    show = json.loads(subprocess.run(["bpftool", "map", "show", "id", str(map_id), "--json"],
                                     capture_output=True, text=True, check=True).stdout)
    btf = subprocess.run(["bpftool", "btf", "dump", "map", "id", str(map_id), "format", "raw"],
                         capture_output=True, text=True, check=True).stdout
    offset = int(re.search(rf"'{field}' type_id=\d+ bits_offset=(\d+)", btf).group(1)) // 8
    nr = {"x86_64": 321, "aarch64": 280}[platform.machine()]
    libc = ctypes.CDLL(None, use_errno=True)
    attr = ctypes.create_string_buffer(128)
    ctypes.c_uint32.from_buffer(attr, 0).value = map_id
    fd = libc.syscall(nr, 14, attr, 128)        # BPF_MAP_GET_FD_BY_ID
    assert fd >= 0, os.strerror(ctypes.get_errno())
    try:
        key, value = ctypes.c_uint32(), ctypes.create_string_buffer(show["bytes_value"])
        attr = ctypes.create_string_buffer(128)
        ctypes.c_uint32.from_buffer(attr, 0).value = fd
        ctypes.c_uint64.from_buffer(attr, 8).value = ctypes.addressof(key)
        ctypes.c_uint64.from_buffer(attr, 16).value = ctypes.addressof(value)
        live = 0
        for i in range(show["max_entries"]):
            key.value = i
            assert libc.syscall(nr, 1, attr, 128) == 0, os.strerror(ctypes.get_errno())
            live += value.raw[offset] != 0      # BPF_MAP_LOOKUP_ELEM, above
        return live
    finally:
        os.close(fd)


# the per-connection maps of each engine (kernel names: bpftrace prefixes AT_); bcc's
# conns is an array: its live slots are counted, conn_ix maps the fds beyond its first half
CONN_MAPS = {"bpftrace": {"AT_conn", "AT_slot_cmd", "AT_slot_hdr", "AT_rx_pending", "AT_tx_kept",
                          "AT_stream_rid", "AT_noreply_last"},
             "bcc": {"conns", "conn_ix"}}


@pytest.mark.parametrize("engine", ["bpftrace", "bcc"])
def test_churn_frees_connection_state(engine, scale_run, request):
    """CHURN short connections, 200 at a time (their fds reused), after the 10,000 closed:
    exact, and the per-connection maps back to (nearly) empty while the probe still
    runs."""
    need(engine, request)
    if shutil.which("bpftool") is None:
        pytest.skip("bpftool is not installed (Debian package bpftool)")
    run = scale_run
    result, err = run.tracers.result(CHURN_MAPS_OF[engine])
    left = run.left[engine]
    if isinstance(left, BaseException):
        raise left
    assert run.churned == CHURN
    assert result["lost"] == {"unmatched_replies": 0, "requests_without_reply": 0,
                              "malformed": 0, "dropped": 0}, err
    assert result["counts"]["replies"] == run.sent      # the rounds', then the churn's
    # a handful of FerretDB's own descriptors at most; thousands if close() freed nothing
    assert set(left) == CONN_MAPS[engine], left
    assert all(n <= 8 for n in left.values()), left


def test_churn_exact_on_dtrace(scale_run, request):
    """CHURN short connections (fds reused) through the smallest dynvarsize, 16m:
    exact, no dynamic variable dropped. (DTrace cannot list its dynamic variables, so
    that close() frees a connection's is not checked here: with fds reused, state left
    behind would be overwritten, not grow.)"""
    need("dtrace", request)
    result, err = scale_run.tracers.result("dtrace-churn")
    assert scale_run.churned == CHURN
    assert result["counts"]["replies"] == CHURN      # attached after the rounds
    assert result["lost"] == {"unmatched_replies": 0, "requests_without_reply": 0,
                              "malformed": 0, "dropped": 0}, err
    assert "DTrace reported no drops or errors" in err


# what a full map is called in each engine's hint (DTrace: its own buffers, of which
# -x aggsize fills first; its minimum, 4m, holds fewer than 3,000 connections)
TOO_SMALL = {"bpftrace": (1500, "map @slot_cmd full"), "bcc": (1500, "map conns full"),
             "dtrace": (3000, "aggregation space full")}


def run_too_small(info) -> Tracers:
    """Every engine with --max-connections 500, attached together: 5 rounds on
    TOO_SMALL's connections, the fewest first; an engine is stopped once its own have
    run, so that it sees no more."""
    tracers = Tracers()
    try:
        # DTrace's space that fills first is its aggregations', those per connection,
        # which only --by conn keeps
        tracers.start(info.pid, {engine: ["--engine", engine, "--max-connections", "500",
                                          *(["--by", "conn"] if engine == "dtrace" else [])]
                                 for engine in TOO_SMALL})
        for conns in sorted({c for c, _ in TOO_SMALL.values()}):
            manyconns.rounds("127.0.0.1", port_of(info), conns, 5)
            time.sleep(1.0)
            tracers.stop([e for e, (c, _) in TOO_SMALL.items()
                          if c == conns and e in tracers.clis])
    finally:
        tracers.stop()
    return tracers


@pytest.fixture(scope="module")
def too_small_run(scale_run) -> Tracers:
    """run_too_small's tracers (made in scale_run's end)."""
    if scale_run.too_small is None:
        pytest.fail("the scale run failed before the too-small run")
    return scale_run.too_small.result()


@pytest.mark.parametrize("engine", list(TOO_SMALL))
def test_too_small_maps_are_named(engine, too_small_run, request):
    """--max-connections below the connections: the loss is counted, and the map that
    filled and the fix are named once at the end."""
    need(engine, request)
    _, want = TOO_SMALL[engine]
    result, err = too_small_run.result(engine)
    assert sum(result["lost"].values()) > 0
    hints = [ln for ln in err.splitlines() if " full: " in ln]
    assert len(hints) == 1, err
    assert want in hints[0] and "raise --max-connections (now 500)" in hints[0]
