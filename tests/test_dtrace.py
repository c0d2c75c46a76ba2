"""The D scripts (dtrace/*.d) under a real DTrace, and ``--engine dtrace``.

Oracle DTrace for Linux (dtrace-utils, "Oracle D 2.0"), built by scripts/setup.sh from the
shared kit (``../shared/dtrace-linux``), runs the same D a SmartOS user runs: its compiler
makes illumos DTrace's checks. Each script is compiled (``dtrace -e``) and run with the
checks the Linux probes get:

* mongo_time.d / mongo_snoop.d on FerretDB: per-command counts equal FerretDB's
  /debug/metrics and the bpftrace probe's on the same workload, nothing lost (the
  mongod-pattern server's scenarios for mongo_time.d are in test_probe_patterns.py,
  mongo_snoop.d's here);
* flush.d on tests/flushloop.c (exact counts, user stacks), syscount_linux.d (exact count);
* profile.d -> mongoprobe fold --format dtrace -> a flame graph with FerretDB's frames.

Tests that trace skip with ``probes.why_cannot_dtrace()``'s reason (no root, no dtrace and
why: the shared kit absent or not built, debugfs not mounted). The parser and adapter tests
run anywhere, on the real outputs in samples/dtrace/.
"""

from __future__ import annotations

import json
import re
import signal
import subprocess
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import pytest

import golden
import wireclient
from helpers.cli import at_once, can_render_svg, mp, start_cli, stop_cli
from helpers.ferretdb import metrics_delta
from helpers.flushloop import flushloop, loop  # noqa: F401 (fixtures)
from helpers.wire import Probe, all_modes_server
from mongoprobe.run import dtrace_runner as dtrace_engine, tracer as probes, target
from mongoprobe.model import latency_summary as latency
from mongoprobe.load import mixed_workload as mixedload
from mongoprobe.formats import dtrace_drops, dtrace_latency, stack_table, wire_events

ROOT = Path(__file__).resolve().parents[1]
DTRACE = ROOT / "dtrace"
SAMPLES = ROOT / "samples" / "dtrace"
D_SCRIPTS = sorted(p.name for p in DTRACE.glob("*.d"))
WIRE_MODES = ["mongod", "readwrite", "vector", "split", "sendto"]


# --- helpers ------------------------------------------------------------------------------


# --- no tracing: the parsers and the adapter on real D output --------------------------------


def test_latency_summary_from_the_ferretdb_sample():
    """mongo_time.d's END output -> the latency summary every engine feeds (golden)."""
    text = (SAMPLES / "mongo_time-ferretdb.txt").read_text()
    s = latency.from_dtrace_quantize(dtrace_latency.parse_dtrace_latency(text),
                                     dtrace_latency.parse_dtrace_latency_totals(text))
    j = s.to_json()
    golden.check_json("dtrace/mongo_time-ferretdb.latency.json", j)
    golden.check("dtrace/mongo_time-ferretdb.latency.txt", s.render(by="command", unit="us"))
    # FerretDB's /debug/metrics counted these requests over the run (samples/dtrace/README.md)
    assert j["requests_by_command"] == {
        "aggregate": 20, "count": 20, "delete": 20, "drop": 4, "endSessions": 4, "find": 120,
        "getMore": 180, "hello": 3, "insert": 200, "ismaster": 8, "update": 20}
    assert j["counts"] == {"requests": 599, "replies": 599, "stream_replies": 0, "no_reply": 0,
                           "answered_no_reply": 0}
    for name, g in j["by_command"].items():
        assert g["count"] == j["requests_by_command"][name]
        assert g["percentiles"] == "log2 bucket middle"
        assert g["p50_ns"] <= g["p95_ns"] <= g["p99_ns"] <= g["max_ns"]
        # the middle integer of a power-of-two bucket [2^k, 2^(k+1)) (wirefacts' one
        # estimator), or the exact max() when that is lower
        for q in ("p50_ns", "p99_ns"):
            v = int(g[q])
            lo = 1 << (v.bit_length() - 1) if v > 1 else v
            assert v == lo + (lo - 1) // 2 or v == g["max_ns"], (name, q, v)
    conns = j["by_conn"]
    assert all(re.fullmatch(r"\d+,\d+", k) for k in conns)
    assert sum(g["count"] for g in conns.values()) == 599
    assert "log2 buckets" in s.render()


def test_an_untied_memory_bio_connection_is_named_in_the_text():
    """A memory-BIO TLS connection whose socket is not known has the fd 2^30 + its number
    in every engine: the text says which it is; JSON keeps the key."""
    text = (SAMPLES / "mongo_time-ferretdb.txt").read_text()
    s = latency.from_dtrace_quantize(dtrace_latency.parse_dtrace_latency(text),
                                     dtrace_latency.parse_dtrace_latency_totals(text))
    key = next(iter(s.by_conn))
    untied = f"{key.split(',')[0]},{latency.UNTIED_BIO + 3}"
    s.by_conn[untied] = s.by_conn.pop(key)
    out = s.render(by="conn")
    assert f"conn = {untied} (ssl #3: TLS on memory BIOs, its socket not known)   count" in out
    assert sum(" (ssl #" in line for line in out.splitlines()) == 1
    assert untied in s.to_json()["by_conn"]


def test_dtrace_losses_are_counted_as_dropped_events():
    """A starved run (-x dynvarsize=1k): DTrace's stderr line becomes "dropped events"."""
    drops = dtrace_drops.parse_dtrace_drops(SAMPLES / "mongo_time-dynvarsize-1k.stderr.txt")
    assert dtrace_drops.lost_events(drops) == 196
    assert dtrace_drops.summary(drops) == \
        "DTrace lost: dynamic variable 196 (raise -x dynvarsize)"
    text = (SAMPLES / "mongo_time-dynvarsize-1k.txt").read_text()
    s = latency.from_dtrace_quantize(dtrace_latency.parse_dtrace_latency(text),
                                     dtrace_latency.parse_dtrace_latency_totals(text),
                                     dropped=dtrace_drops.lost_events(drops))
    assert s.lost == {"unmatched_replies": 0, "requests_without_reply": 0, "malformed": 1,
                      "dropped": 196}
    assert "dropped events 196" in s.render()


def test_drop_and_probe_error_lines():
    lines = ["dtrace: script 'x.d' matched 12 probes",
             "dtrace: 5 drops on CPU 1", "dtrace: 1 aggregation drop on CPU 0",
             "dtrace: 3 dynamic variable drops with non-empty dirty list",
             "dtrace: error on enabled probe ID 7 (ID 812: syscall:vmlinux:read:return): "
             "invalid address (0xffffffffce20a760) in action #3 at DIF offset 40"]
    df = dtrace_drops.parse_dtrace_drops(lines)
    assert df[["kind", "cpu", "count"]].values.tolist() == [
        ["principal", 1, 5], ["aggregation", 0, 1], ["dynamic variable", -1, 3],
        ["probe error", -1, 1]]
    assert dtrace_drops.lost_events(df) == 10
    assert dtrace_drops.parse_dtrace_drops(lines[:1]).empty


def test_truncated_output_is_refused():
    text = (SAMPLES / "mongo_time-ferretdb.txt").read_text()
    cut = text[: text.index("\nrequests: ")]
    with pytest.raises(ValueError, match="footer"):
        dtrace_latency.parse_dtrace_latency_totals(cut, "cut.txt")


@pytest.mark.parametrize("script", D_SCRIPTS)
def test_header_says_where_it_was_checked(script):
    head = (DTRACE / script).read_text().split("*/", 1)[0]
    # checked with the DTrace the package pins and setup builds, not another one
    m = re.search(r"CHECKED: Oracle DTrace (\S+) on Linux [\d.]+ \(dtrace-utils (\w+),", head)
    assert m, head
    assert m.group(2) == probes.DTRACE_COMMIT
    if probes.dtrace_version() and probes.DTRACE_COMMIT in probes.dtrace_version():
        assert probes.dtrace_version().startswith(f"Oracle D {m.group(1)} ")
    assert "NOT CHECKED on illumos/SmartOS, FreeBSD or macOS" in head
    assert re.search(r"USAGE: dtrace -s " + re.escape(script), head)


def test_wire_scripts_keep_the_illumos_and_macos_syscalls():
    for script in ("mongo_time.d", "mongo_snoop.d"):
        text = (DTRACE / script).read_text()
        for probe in ("syscall::recv:entry", "syscall::send:entry", "syscall::read_nocancel:",
                      "syscall::sendmsg_nocancel:", "#pragma D option zdefs"):
            assert probe in text, (script, probe)


# --- under DTrace -------------------------------------------------------------------------


@pytest.mark.parametrize("script", D_SCRIPTS)
def test_script_compiles(script, need_dtrace):
    # the _tls scripts' pid provider needs a process, the OpenSSL module ($1) and whether
    # it has SSL_free ($2)
    tls = ["-c", "/bin/true", "libssl.so.3", "1"] if script.endswith("_tls.d") else []
    r = subprocess.run([probes.dtrace_binary(), "-e", "-s", str(DTRACE / script), *tls],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert "error" not in r.stderr.lower(), r.stderr


@dataclass
class SnoopRun:
    """mongo_snoop.d traced once over every WIRE_MODES pattern: the all-modes server
    (one process, a port per mode), the client's scenarios on each mode's port in turn.
    ``windows``: each mode's wall-clock span, its requests told apart by time."""
    expected: dict[str, wireclient.Expected]
    windows: dict[str, tuple[float, float]]
    lines: list[str]
    probe: Probe


@pytest.fixture(scope="module")
def snoop_run(tmp_path_factory) -> SnoopRun:
    """One mongo_snoop.d start for the five patterns (a start compiles its D and loads
    its programs: seconds of CPU each)."""
    why = probes.why_cannot_dtrace()
    if why:
        pytest.skip(why)
    workdir = tmp_path_factory.mktemp("snoop")
    expected, windows = {}, {}
    with all_modes_server(workdir) as (pid, ports):
        probe = Probe([probes.dtrace_binary(), "-x", "dynvarsize=16m", "-x", "bufsize=8m",
                       "-s", str(DTRACE / "mongo_snoop.d"), "-p", str(pid)],
                      lambda p: any("Tracing MongoDB" in line for line in p.lines),
                      workdir / "probe.err", stop_signal=signal.SIGTERM)
        try:
            probe.wait_attached()
            for mode in WIRE_MODES:
                t0 = time.time()
                expected[mode] = wireclient.run(ports[mode], connections=4)
                # a send's exit tracepoint may run after the client has the bytes: the
                # next mode starts once this one's last line is surely timed
                time.sleep(0.3)
                windows[mode] = (t0, time.time())
        finally:
            lines = probe.stop()
    assert probe.proc.returncode == 0, probe.describe()
    return SnoopRun(expected, windows, lines, probe)


@pytest.mark.parametrize("mode", WIRE_MODES)
def test_snoop_on_the_mongod_pattern_server(mode, need_dtrace, snoop_run):
    """mongo_snoop.d: one line per timed request, per command as the scenarios sent them;
    the footer's counters exact, nothing lost (DTrace's stderr included). One start
    traced every mode: each mode's lines are those of its time window, the footer
    counts all the modes'."""
    run, expected = snoop_run, snoop_run.expected[mode]
    everything = dtrace_engine.snoop_events(run.lines)
    t0, t1 = run.windows[mode]
    events = everything[(everything["time"] >= t0) & (everything["time"] < t1)]
    assert Counter(events["command"]) == expected.replies_by_command
    assert Counter(events["opcode"]) == expected.by_op - Counter(
        {"OP_MSG": expected.no_reply})          # moreToCome inserts get no line
    assert int(events["stream"].sum()) == Counter(
        events["command"])["exhaustTest"]         # each exhaust reply had moreToCome
    assert (events["latency_ns"] > 0).all()
    assert everything["time"].notna().all()
    # every line in some mode's window
    assert sum(((everything["time"] >= a) & (everything["time"] < b)).sum()
               for a, b in run.windows.values()) == len(everything)
    # failed replies (ok: 0 as double, int, long, bool; with or without errmsg and code)
    # in the ERR column; split too, whose writes of 10, 10 and the rest the script
    # gathers (probes/README.md, "Replies that failed")
    assert wire_events.snoop_checks_replies(run.lines)
    failed = events[events["error_code"] != 0]
    assert Counter(zip(failed["command"], failed["error_code"])) == expected.error_codes
    total = sum(run.expected.values(), wireclient.Expected())
    counts, lost = dtrace_engine.snoop_footer(run.lines)
    assert counts == {"requests": total.requests, "replies": total.replies,
                      "stream_replies": total.stream_replies, "no_reply": total.no_reply,
                      "answered_no_reply": total.answered_no_reply.total()}
    lost["dropped"] = dtrace_drops.lost_events(
        dtrace_drops.parse_dtrace_drops(run.probe.stderr.read_text().splitlines()))
    assert lost == dict.fromkeys(lost, 0)


@dataclass
class FerretRun:
    """The CLIs of the two FerretDB tests, started together: the counts test's on the
    session's FerretDB under the mixed pymongo workload, the failed-reply test's on a
    FerretDB of its own under helpers.ferretdb.refused_workload (FerretDB names no
    legacy OP_QUERY command in its request counts: the two workloads stay apart)."""
    outs: dict[str, tuple[str, str]]
    load: object                    # the mixed workload's LoadResult
    requests: tuple[dict, dict]     # the counts FerretDB's request counts before, after
    responses: tuple[dict, dict]    # the other FerretDB's response counts before, after
    events_files: dict[str, Path]


@pytest.fixture(scope="module")
def ferret_run(ferretdb, refused_target, tmp_path_factory) -> FerretRun:
    """On the session's FerretDB: latency --engine dtrace (mongo_time.d), latency
    --engine dtrace --events (mongo_snoop.d), snoop --engine dtrace --json and latency
    --engine bpftrace; on refused_target: mongo_time.d and mongo_snoop.d again. Every
    one started at once (their compiles overlap), then the workloads, one after the
    other, then every one stopped at once."""
    why = probes.why_cannot_dtrace()
    if why:
        pytest.skip(why)
    from helpers.ferretdb import refused_workload, response_counts

    folder = tmp_path_factory.mktemp("ferret-run")
    files = {"events": folder / "events.jsonl", "failed-events": folder / "failed-events.jsonl"}
    latency = ["latency", "--json", "--engine"]
    argv = {"time": (ferretdb, [*latency, "dtrace"]),
            "events": (ferretdb, [*latency, "dtrace", "--events", str(files["events"])]),
            "snoop": (ferretdb, ["snoop", "--json", "--engine", "dtrace"]),
            "bpftrace": (ferretdb, [*latency, "bpftrace"]),
            "failed-time": (refused_target, [*latency, "dtrace"]),
            "failed-events": (refused_target, [*latency, "dtrace", "--events",
                                               str(files["failed-events"])])}
    if probes.why_cannot_trace():       # (the counts test skips, saying why)
        del argv["bpftrace"]
    requests0 = target.request_counts(ferretdb.metrics_url)
    responses0 = response_counts(refused_target.metrics_url)
    starts = at_once(lambda ia: start_cli(ia[1][0], "-p", str(ia[0].pid), *ia[1][1:]), argv)
    clis = {name: s for name, s in starts.items() if not isinstance(s, BaseException)}
    try:
        for s in starts.values():
            if isinstance(s, BaseException):
                raise s
        load = mixedload.run(ferretdb.uri, threads=4, rounds=2)
        refused_workload(refused_target.uri)
        time.sleep(0.5)       # the last replies (endSessions) reach the probes
    finally:
        # stop_cli's SIGINT to each at once: their ENDs and summaries overlap
        outs = at_once(stop_cli, clis)
    for out in outs.values():
        if isinstance(out, BaseException):
            raise out
    return FerretRun(outs, load, (requests0, target.request_counts(ferretdb.metrics_url)),
                     (responses0, response_counts(refused_target.metrics_url)), files)


def test_ferretdb_counts_equal_metrics_and_bpftrace(ferret_run, need_dtrace, need_bpftrace):
    """On one pymongo workload (and the failed-reply requests after it), at once: latency
    --engine dtrace (mongo_time.d), latency --engine dtrace --events (mongo_snoop.d),
    snoop --engine dtrace --json and latency --engine bpftrace. Every per-command count
    equals FerretDB's own."""
    outs, load = ferret_run.outs, ferret_run.load
    metrics = metrics_delta(*ferret_run.requests)
    assert sum(metrics.values()) > 100 and load.counts["insert"] > 0

    nothing_lost = {"unmatched_replies": 0, "requests_without_reply": 0, "malformed": 0,
                    "dropped": 0}
    for name in ("time", "events", "bpftrace"):
        r = json.loads(outs[name][0].strip().splitlines()[-1])
        assert {k: v["count"] for k, v in r["by_command"].items()} == metrics, name
        assert r["lost"] == nothing_lost, name
        assert r["engine"] == ("bpftrace" if name == "bpftrace" else "dtrace")
        if name == "time":
            assert r["requests_by_command"] == metrics
            assert all(g["p99_ns"] <= g["max_ns"] for g in r["by_command"].values())
            # without --by conn, mongo_time.d was told to keep none per connection
            assert r["by_conn"] == {}, list(r["by_conn"])[:5]
    for name in ("time", "events", "snoop"):
        assert "DTrace reported no drops or errors" in outs[name][1], outs[name][1]
    snooped = [json.loads(line) for line in outs["snoop"][0].splitlines() if line.strip()]
    assert Counter(e["command"] for e in snooped) == metrics
    assert all(e["latency_ns"] > 0 and e["time"] > 1e9 for e in snooped)
    assert "lost: unmatched replies 0, requests without reply 0, malformed headers 0, " \
           "dropped events 0" in outs["snoop"][1]
    events = [json.loads(line) for line in
              ferret_run.events_files["events"].read_text().splitlines()]
    assert Counter(e["command"] for e in events) == metrics
    # wall-clock times from DTrace's walltimestamp, within the run
    assert all(abs(e["time"] - time.time()) < 600 for e in events)


def test_flush_counts_are_exact_on_the_msync_loop(loop, need_dtrace, tmp_path):
    data = tmp_path / "mapped.dat"
    lp = loop("flush", str(data), "50")
    cli = start_cli("flush", "-p", str(lp.pid), "--json", "--engine", "dtrace")
    lp.go()
    out, err = stop_cli(cli)
    j = json.loads(out)
    fl = j["flushes"]
    assert {k: v["count"] for k, v in fl.items()} == {
        "msync": 50, "fsync": 51, "fdatasync": 52, "sync_file_range": 53, "syncfs": 1}
    assert fl["msync"]["bytes"] == 50 * 16384
    assert fl["sync_file_range"]["bytes"] == 53 * 4096
    for v in fl.values():
        assert v["errors"] == 0 and sum(b["count"] for b in v["hist"]) == v["count"]
    assert {(t["tid"], t["syscall"]): t["count"] for t in j["threads"]} == {
        (lp.pid, "msync"): 50, (lp.pid, "fsync"): 51, (lp.pid, "fdatasync"): 52,
        (lp.pid, "sync_file_range"): 53, (lp.pid, "syncfs"): 1}
    assert j["msync_ranges"][0]["len"] == 16384 and j["msync_ranges"][0]["count"] == 50
    stacks = {s["syscall"]: s for s in j["stacks"]}
    assert stacks["msync"]["count"] == 50
    assert re.match(r"libc\.so\.\d+`msync\+0x", stacks["msync"]["frames"][0])   # leaf first
    assert any(f.startswith("flushloop`main+") for f in stacks["msync"]["frames"])
    assert j["lost"] == {"dropped": 0}
    assert "lost: DTrace reported no drops or errors" in err


def test_syscount_counts_getppid_exactly(loop, need_dtrace):
    lp = loop("getppid", "1234")
    cli = start_cli("syscount", "-p", str(lp.pid), "--json", "--engine", "dtrace")
    lp.go()
    out, err = stop_cli(cli)
    by = {r["syscall"]: r for r in json.loads(out)["syscalls"]}
    assert by["getppid"]["count"] == 1234
    assert by["getppid"]["errors"] == 0 and by["getppid"]["time_ns"] > 0
    assert "lost: DTrace reported no drops or errors" in err


def test_profile_ferretdb_flame_graph(ferretdb, tmp_path, need_dtrace):
    """profile.d's ustack() on FerretDB, folded (fold --format dtrace), drawn."""
    if not can_render_svg():
        pytest.skip("no flame-graph renderer (inferno from scripts/setup.sh, or FLAMEGRAPH_DIR)")
    svg = tmp_path / "cpu.svg"
    cli = start_cli("profile", "-p", str(ferretdb.pid), "--engine", "dtrace", "-F", "97",
                    "-o", str(svg))
    mixedload.run(ferretdb.uri, threads=4, rounds=10)
    _, err = stop_cli(cli)
    raw = tmp_path / "cpu.dtrace.txt"
    text = raw.read_text()
    total = int(re.search(r"^@samples_total: (\d+)$", text, re.M)[1])
    r = mp("fold", str(raw), "--format", "dtrace")
    assert r.returncode == 0, r.stderr
    folded = r.stdout
    lines = folded.splitlines()
    assert sum(int(ln.rsplit(" ", 1)[1]) for ln in lines) == total > 20   # every sample
    assert any("ferretdb`github.com/FerretDB/FerretDB/internal/" in ln for ln in lines)
    assert any("modernc.org/sqlite/lib." in ln for ln in lines)
    df = stack_table.parse_dtrace_stacks(raw)
    assert set(df["pid"]) == {ferretdb.pid}
    image = svg.read_text()
    assert "FerretDB/internal/clientconn" in image
    assert re.search(rf"wrote {re.escape(str(raw))}: {total} samples", err)
    assert "DTrace reported no drops or errors" in err


def test_run_manifest_records_the_dtrace_version(need_dtrace):
    """record's manifest ("tools") names the dtrace the D engine runs, pinned commit included."""
    from mongoprobe.run import record

    v = record.tool_versions()["dtrace"]
    assert v == probes.dtrace_version()
    assert v.startswith(("Oracle D ", "Sun D "))
    if Path(probes.dtrace_binary()).parent.name == f"dtrace-{probes.DTRACE_COMMIT}":
        assert v.endswith(f"(dtrace-utils {probes.DTRACE_COMMIT})")


def test_setup_pins_the_same_dtrace_commit():
    setup = (ROOT / "scripts" / "setup.sh").read_text()
    assert f"DTRACE_COMMIT={probes.DTRACE_COMMIT} " in setup


def test_failed_replies_match_ferretdb(ferret_run, need_dtrace):
    """test_latency_ferretdb's failed-reply requests (refused commands, endSessions, legacy
    OP_QUERY ones) under mongo_time.d and mongo_snoop.d at once: their failed replies per
    command and code == FerretDB's own failed responses, and the {$err} reply it counts
    "ok"; successes count none."""
    from helpers.ferretdb import check_failures, failed_responses

    outs = ferret_run.outs
    truth = failed_responses(*ferret_run.responses)
    assert truth[("buildinfo", "UnsupportedOpQueryCommand")] == 2
    truth["find", "5739101"] = 1      # the {$err} reply FerretDB counts "ok"
    check_failures(json.loads(outs["failed-time"][0].strip().splitlines()[-1]), truth, None)
    check_failures(json.loads(outs["failed-events"][0].strip().splitlines()[-1]), truth,
                   wire_events.parse_events_json(
                       ferret_run.events_files["failed-events"].read_text().splitlines()))
