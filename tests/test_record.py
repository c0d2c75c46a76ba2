"""mongoprobe record and load_run, for real: the embedded target, the latency probe,
a collector (iostat) killed mid-run, a target pid that exits mid-run, and the committed
sample run.

The end-to-end run (conftest's ``recorded_run``, shared with test_end_to_end and
test_traffic) is recorded once and checked from several sides: the manifest is complete, the probe's per-request events agree with its own in-kernel
counters, with FerretDB's /debug/metrics and with what the load's command monitoring
saw — over the whole run and phase by phase.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from helpers import recorded
from helpers.cli import mp
import mongoprobe
from mongoprobe.analysis import phase_table as phases
from mongoprobe.run import tracer as probes, run_folder as rundir, target

SAMPLE = Path(__file__).resolve().parents[1] / "samples" / "load" / "run-ferretdb"
SPEC, NAMES, KILLED = recorded.SPEC, recorded.NAMES, recorded.KILLED
LOAD = recorded.LOAD
_wait_for, _load_text = recorded.wait_for, recorded.load_text
LOAD_COMMANDS = ("insert", "find", "drop", "createIndexes", "endSessions")


# --- one recorded run, looked at from every side ----------------------------------------


@pytest.fixture(scope="module")
def recorded(recorded_run):
    """The session's recorded run (tests/helpers/recorded.py), with its load_run."""
    return SimpleNamespace(**vars(recorded_run), run=mongoprobe.load_run(recorded_run.path))


def test_record_completes_with_a_full_manifest(recorded):
    assert recorded.rc == 0, recorded.stderr
    m = recorded.run.manifest
    assert m["status"] == "complete" and m["ended_by"] == "command"
    assert m["format"] == "mongoprobe-run" and m["version"] == 1
    assert m["record_argv"][:2] == ["mongoprobe", "record"]
    assert m["command"]["argv"][-2:] == ["--phases", SPEC]
    assert m["command"]["returncode"] == 0
    assert m["command"]["env"]["MONGOPROBE_URI"] == m["target"]["uri"]
    assert recorded.t0 < m["start"] < m["command"]["start"] < m["command"]["end"] \
        < m["end"] < recorded.t1

    t = m["target"]
    assert t["kind"] == "embedded" and t["exe"].endswith("/ferretdb")
    assert t["version"] == target.FERRETDB_VERSION and t["exited_at"] is None
    assert t["metrics_url"].startswith("http://127.0.0.1:")
    assert not os.path.exists(f"/proc/{t['pid']}") or \
        open(f"/proc/{t['pid']}/stat").read().split(")")[1].split()[0] == "Z"

    for k in ("bpftrace", "perf", "tshark", "vmstat", "sysstat", "python", "pandas",
              "pymongo", "mongoprobe", "ferretdb"):
        assert m["tools"][k], k
    assert m["tools"]["bpftrace"].startswith("bpftrace v")
    assert m["kernel"]["release"] == os.uname().release
    assert m["host"]["cpus"] == os.cpu_count() and m["host"]["hostname"]

    # The monotonic -> wall mapping, measured at both ends.
    c = m["clock"]
    for end in ("start", "end"):
        assert c[end]["offset_ns"] == c[end]["realtime_ns"] - c[end]["monotonic_ns"]
        assert c[end]["uncertainty_ns"] < 1_000_000
    assert abs(c["drift_ns"]) < 50_000_000

    lat = m["collectors"]["latency"]
    assert lat["status"] == "stopped" and lat["returncode"] == 0
    assert lat["started"] < lat["ready"] <= m["command"]["start"]
    assert m["latency_engine"] == {"engine": "bpftrace", "why": "asked (--engine)"}
    assert lat["argv"][:3] == ["bpftrace", "-f", "json"] and lat["argv"][-3:] == [str(t["pid"]), "0", "1"]  # every request (--events)
    assert m["metrics"]["before"] is not None and m["metrics"]["after"] is not None
    files = recorded.run.files
    for key in ("latency", "vmstat", "load_out", "load_stdout", "metrics_before",
                "metrics_after", "target_log"):
        assert key in files and files[key].exists(), key


def test_a_collector_killed_mid_run_is_recorded_and_the_run_completes(recorded):
    assert "error" not in recorded.killed, recorded.killed
    m = recorded.run.manifest
    c = m["collectors"][KILLED]
    assert c["status"] == "died" and c["returncode"] == -signal.SIGKILL
    assert "signal 9" in c["error"]
    assert recorded.killed["at"] <= c["died_at"] < m["command"]["end"]
    assert any(n["what"].startswith(f"{KILLED} died") for n in m["notes"])
    assert f"{KILLED} died" in recorded.stderr
    # Partial output kept; the probe and the load went on to the end.
    assert "Device" in (recorded.path / f"{KILLED}.txt").read_text()
    assert m["collectors"]["latency"]["status"] == "stopped"
    assert list(recorded.run.phases["name"]) == NAMES
    # ... and the phase table says so, with when it died
    lost = recorded.run.lost
    assert [c["name"] for c in lost["collectors"]] == [KILLED], lost["collectors"]
    assert 0 < lost["collectors"][0]["died_at"] < m["end"] - m["start"]
    r = mp("phases", str(recorded.path))
    assert f"lost: collector {KILLED} died at " in r.stdout
    # record itself ends with the same losses, after the line saying where the run is
    tail = recorded.stderr[recorded.stderr.index("mongoprobe record: run recorded in"):]
    said = [s.removeprefix("mongoprobe record: ") for s in tail.splitlines()[1:]]
    assert said == rundir.lost_line(lost).splitlines()
    assert said[0].startswith("lost: unmatched replies ")


def test_long_lines_of_the_command_are_shown_cut_and_kept_whole(recorded):
    # the load's one-line JSON summary (kilobytes) stays out of the terminal
    shown = [s for s in recorded.stdout.splitlines() if s.startswith("### summary ")]
    assert len(shown) == 1 and "characters, kept in load.out)" in shown[0]
    assert len(shown[0]) < 120
    assert recorded.run.load_summary is not None    # whole in load.out


def test_probe_counts_equal_load_and_ferretdb_counts(recorded):
    r = recorded.run
    ev = r.events
    assert len(ev) > 100
    m = r.manifest
    assert (ev["time"] > m["command"]["start"]).all() and (ev["time"] < m["end"]).all()
    assert (ev["latency_ns"] > 0).all()
    probe = ev["command"].value_counts().to_dict()

    # Nothing lost; events == the probe's in-kernel counters == FerretDB's counts.
    assert r.latencies.lost == dict.fromkeys(r.latencies.lost, 0)
    assert r.lost["probe"] == r.latencies.lost
    assert probe == r.latency_counts
    assert r.latencies.counts["requests"] == len(ev)
    # the events left latency.bt.json for their Parquet file: histograms and counters stay
    # and the rest was compressed at the end (about 9 times smaller)
    assert not (recorded.path / "latency.bt.json").exists()
    with open(recorded.path / "latency.bt.json.zst", "rb") as raw:
        text = rundir.text_of(raw, recorded.path / "latency.bt.json.zst").read()
    assert '"@events0"' not in text and '"@e0"' not in text and '"@closed_requests"' in text
    assert r.manifest["files"]["latency_events"] == "latency.events.parquet"
    assert probe == r.metrics_delta          # handshakes (ismaster) included

    # ...== what the load's command monitoring saw, for every command it sent.
    total = r.load_summary["commands"]["total"]
    for cmd in LOAD_COMMANDS:
        assert probe[cmd] == total[cmd], cmd
    assert set(probe) - set(total) <= {"ismaster", "hello", "isMaster"}

    # Phase by phase: the events inside each phase's markers are its commands.
    for p in r.load_summary["phases"]:
        ph = r.phases.set_index("name").loc[p["name"]]
        inside = ev[(ev["time"] >= ph["start"]) & (ev["time"] <= ph["end"])]
        got = inside["command"].value_counts().to_dict()
        for cmd in ("insert", "find"):
            assert got.get(cmd, 0) == p["commands"].get(cmd, 0), (p["name"], cmd)
    assert r.load.phases.set_index("name").loc["0i.2q", "inserts"] == 0


def test_load_run_tables(recorded):
    r = recorded.run
    iv = r.load_intervals
    assert set(iv["phase"]) == set(NAMES)
    assert list(r.phases.columns[:3]) == ["name", "start", "end"]
    assert (r.phases["start"] < r.phases["end"]).all()
    ll = r.load_lines
    assert set(ll["stream"]) <= {"stdout", "stderr"}
    assert ll["time"].is_monotonic_increasing
    markers = ll[ll["text"].str.startswith("### phase ")]
    assert len(markers) == 2 * len(NAMES)
    assert r.wall(r.manifest["clock"]["start"]["monotonic_ns"]) == \
        pytest.approx(r.manifest["clock"]["start"]["realtime_ns"] / 1e9)


# --- the target exits mid-run ---------------------------------------------------------


def test_a_target_that_exits_ends_the_run_cleanly(tmp_path, tracing_and_target):
    state = tmp_path / "ferretdb"
    info = target.start(state)
    run = tmp_path / "RUN"
    try:
        proc = subprocess.Popen(
            [sys.executable, "-m", "mongoprobe", "record", "-p", str(info.pid), "--uri", info.uri,
             "--metrics-url", info.metrics_url, "-o", str(run), "--engine", "bpftrace",
             "--probes", "latency,pidstat",
             "--", *LOAD, "--phases", "1i.1q:60s"],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        _wait_for(lambda: "### phase start" in _load_text(run), 90, "the load to start")
        phase_start = time.monotonic()
        time.sleep(1)
        target.stop(state)
        gone = time.time()
        _, err = proc.communicate(timeout=90)
        ended = time.monotonic()
    finally:
        target.stop(state)
    assert proc.returncode == 0, err
    # ended by the exit, long before its 60 s phase would have (a bound of this test's
    # own making, not of the machine's speed: 45 s from the start once failed by 0.4 s
    # on a busy machine, most of it the probe's compile)
    assert ended < phase_start + 60 - 10
    r = mongoprobe.load_run(run)
    m = r.manifest
    assert m["status"] == "complete" and m["ended_by"] == "target_exit"
    assert m["target"]["kind"] == "pid" and m["target"]["pid"] == info.pid
    assert gone - 0.5 < m["target"]["exited_at"] < gone + 5
    assert m["command"]["returncode"] is not None and m["command"]["end"] < m["end"]
    assert m["collectors"]["latency"]["status"] == "stopped"
    # pidstat ends by itself when its pid is gone: that is not a death.
    assert m["collectors"]["pidstat"]["status"] == "stopped"
    assert "target pid" in err and "exited" in err
    # What was recorded before the exit is there.
    assert r.latency_counts.get("insert", 0) > 0
    assert len(r.phases) == 1 and r.phases["end"].iloc[0] <= m["command"]["end"]


# --- clear errors ------------------------------------------------------------------------


def test_record_errors_are_one_line(tmp_path):
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "x").write_text("x")
    r = mp("record", "-p", str(os.getpid()), "-o", str(tmp_path / "full"), "--", "true")
    assert r.returncode == 1
    assert r.stderr.strip() == f"mongoprobe: {tmp_path / 'full'} exists and is not an empty directory"
    r = mp("record", "-p", "999999", "-o", str(tmp_path / "a"), "--", "true")
    assert r.returncode == 1 and r.stderr.strip() == "mongoprobe: no process with pid 999999"
    assert not (tmp_path / "a").exists()
    r = mp("record", "-p", "1", "-o", str(tmp_path / "b"))
    assert r.returncode == 2 and "needs a command after --" in r.stderr
    r = mp("record", "-p", "1", "-o", str(tmp_path / "b"), "--probes", "latency,nope", "--", "true")
    assert r.returncode == 2 and "unknown probe or collector nope" in r.stderr


def test_missing_collectors_are_skipped_with_a_note(tmp_path):
    """A probe file this checkout lacks is skipped, noted, and the run goes on."""
    if os.geteuid() != 0:
        pytest.skip("tracing needs root")
    probes_dir = tmp_path / "probes"
    probes_dir.mkdir()      # an empty probes folder: every bpftrace probe is missing
    run = tmp_path / "RUN"
    r = subprocess.run(
        [sys.executable, "-m", "mongoprobe", "record", "-p", str(os.getpid()), "-o", str(run),
         "--probes", "profile,vmstat", "--", sys.executable, "-c", "print('hello')"],
        capture_output=True, text=True, timeout=120,
        env={**os.environ, "MONGOPROBE_PROBES": str(probes_dir)})
    assert r.returncode == 0, r.stderr
    m = mongoprobe.load_run(run).manifest
    prof = m["collectors"]["profile"]
    assert prof["status"] == "skipped" and "profile.bt does not exist" in prof["note"]
    assert m["collectors"]["vmstat"]["status"] == "stopped"
    assert "profile: skipped" in r.stderr
    assert (run / "load.stdout").read_text() == "hello\n"
    run_ = mongoprobe.load_run(run)
    assert list(run_.phases["name"]) == ["run"]         # no markers: one phase
    assert run_.load is None and run_.events is None


# --- the committed sample run (no root needed) ------------------------------------------


def test_sample_run_reads_back():
    r = mongoprobe.load_run(SAMPLE)
    assert r.manifest["status"] == "complete"
    ev = r.events
    probe = ev["command"].value_counts().to_dict()
    assert probe == r.latency_counts == r.metrics_delta
    total = r.load_summary["commands"]["total"]
    for cmd in LOAD_COMMANDS:
        assert probe[cmd] == total[cmd], cmd
    for p in r.load_summary["phases"]:
        ph = r.phases.set_index("name").loc[p["name"]]
        inside = ev[(ev["time"] >= ph["start"]) & (ev["time"] <= ph["end"])]
        for cmd in ("insert", "find"):
            assert (inside["command"] == cmd).sum() == p["commands"].get(cmd, 0)
    assert set(r.files) >= {"latency", "vmstat", "iostat", "pidstat", "load_out"}
    with pytest.raises(FileNotFoundError, match="no manifest"):
        mongoprobe.load_run(SAMPLE.parent)


def test_events_move_to_parquet_in_batches(tmp_path):
    """record's end moves the probe's event maps to Parquet a batch at a time (an hour of
    events does not fit in memory): in small batches, the same table as in one, and the
    JSON keeps everything else."""
    from mongoprobe.run import collectors
    from mongoprobe.formats import wire_events

    sample = Path(__file__).parent.parent / "samples/probes/mongo_latency-ferretdb.json"
    tables, kept = [], []
    for batch in (1_000_000, 7):
        run = tmp_path / f"b{batch}"
        run.mkdir()
        (run / "latency.bt.json").write_text(sample.read_text())
        out = collectors.events_to_parquet(run, offset_ns=10**18, pid=42, batch=batch)
        assert out == run / "latency.events.parquet"
        tables.append(wire_events.read_parquet(out))
        kept.append((run / "latency.bt.json").read_text())
    assert len(tables[0]) > 7 * 3
    assert tables[0].equals(tables[1])
    assert (tables[0]["pid"] == 42).all() and (tables[0]["time"] > 1e9).all()
    assert kept[0] == kept[1]
    assert '"@e0"' not in kept[0] and '"@e1"' not in kept[0] and '"@e2"' not in kept[0]
    lines = sample.read_text().splitlines(keepends=True)
    assert len(kept[0].splitlines()) == sum(
        not ln.startswith(tuple(f'{{"type": "map", "data": {{"@e{i}"' for i in range(3)))
        for ln in lines)


def test_failed_replies_in_events_and_phases(recorded):
    """FerretDB refuses endSessions (CommandNotFound): each is a failed reply in the events,
    with its code; the phase table counts the failed replies inside each phase, and
    `phases` shows them."""
    from mongoprobe.analysis import phase_table as phases

    ev = recorded.run.events
    failed = ev[ev["error_code"] != 0]
    ends = ev[ev["command"] == "endSessions"]
    assert len(ends) and (ends["error_code"] == 59).all()
    t = phases.phase_table(recorded.run)
    for r in t.itertuples():
        inside = failed[(failed["time"] >= r.start) & (failed["time"] < r.end)]
        want = {cmd: {str(c): int(n) for c, n in g["error_code"].value_counts().items()}
                for cmd, g in inside.groupby("command")}
        assert r.failed_replies == want, r.name
    text = phases.render(t)
    if len(t) and any(t["failed_replies"]):
        assert "failed replies (ok: 0), per command and error code" in text
        assert "59 CommandNotFound" in text


TLS_CLIENT = """
import json, ssl, sys
sys.path.insert(0, sys.argv[3])
import wireclient
e = wireclient.run(int(sys.argv[1]), connections=4,
                   tls=ssl.create_default_context(cafile=sys.argv[2]))
print(json.dumps({"by_command": dict(e.by_command), "requests": e.requests}))
"""


@pytest.mark.root
def test_record_tls_on_decodes_openssl(tmp_path):
    """record --tls on with a server on OpenSSL (tests/wireserver.py --tls, Python's
    ssl): the bpftrace latency probe runs mongo_latency_tls.bt, and the run's counts
    are the client's, command by command."""
    import shutil as sh
    from helpers.wire import UNAVAILABLE, wireserver
    if UNAVAILABLE or not sh.which(probes.bpftrace_binary()):
        pytest.skip(UNAVAILABLE or "bpftrace is not installed")
    try:
        cert, key = target._self_signed(tmp_path / "tls")
    except target.TargetError as e:
        pytest.skip(str(e))
    client = tmp_path / "client.py"
    client.write_text(TLS_CLIENT)
    run = tmp_path / "run"
    with wireserver("readwrite", tmp_path, (cert, key)) as (pid, port):
        r = mp("record", "-p", str(pid), "-o", str(run), "--engine", "bpftrace",
               "--probes", "latency", "--tls", "on",
               "--", sys.executable, str(client), str(port), str(cert),
               str(Path(__file__).parent), timeout=300)
    assert r.returncode == 0, r.stderr
    assert "mongo_latency_tls.bt: TLS plaintext from OpenSSL" in r.stderr
    loaded = rundir.load_run(run)
    assert loaded.manifest["latency_tls"]["decoded"] is True
    expected = json.loads((run / "load.stdout").read_text().splitlines()[-1])
    assert loaded.latencies.counts["requests"] == expected["requests"]
    assert loaded.latency_counts == expected["by_command"]
    assert loaded.latencies.lost == dict.fromkeys(loaded.latencies.lost, 0)
