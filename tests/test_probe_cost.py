"""bench/probe_cost.py for real: one quick bpftrace-histogram row on mongo-java-server.

Checks the report's structure and that its figures agree with one another (requests
served, programs run, the BPF time per request, the probe's own request count), and,
when the bench counts through the bpf_stats sysctl, that it is back to what it was.
No absolute time is asserted.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

BENCH = Path(__file__).resolve().parents[1] / "bench" / "probe_cost.py"

# The bench run is made alone on the machine (conftest.py: the first test that uses the
# fixture runs serial; the other only reads it): the ratios of CPU are measured side by
# side, and a tracepoint's programs run on every process's syscalls (testing the pid), so
# another test's syscalls would count in the programs' runs per request (54 against the
# floor's 9, once tried without). The one neighbour a serial test may have, a quiet
# test (conftest.py: parsing in its own process, a few syscalls a test), changes
# neither: both tests passed beside a loop of them in 2 runs of 2.
pytestmark = pytest.mark.serial_fixtures("quick")


def load_bench():
    spec = importlib.util.spec_from_file_location("probe_cost", BENCH)
    mod = importlib.util.module_from_spec(spec)
    sys.modules["probe_cost"] = mod        # dataclasses look their module up there
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture(scope="module")
def quick():
    """One quick bench run on mongo-java-server (one JVM, one warm-up): bpftrace's
    histogram row, and bcc's with the floor, idle and sock rows beside it; each test
    reads its engine's rows, and skips where its engine cannot run."""
    bench = load_bench()
    why = {e: bench.why_cannot_run([e], ["java"]) for e in ("bpftrace", "bcc")}
    engines = [e for e, w in why.items() if not w]
    if not engines:
        pytest.skip("; ".join(why.values()))
    sysctl_before = bench.STATS_SYSCTL.read_text()
    r = subprocess.run([sys.executable, str(BENCH), "--quick", "--engines", ",".join(engines),
                        "--modes", "hist,floor,idle,sock", "--targets", "java", "--json"],
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr
    return SimpleNamespace(bench=bench, report=json.loads(r.stdout), why=why,
                           sysctl_before=sysctl_before)


def rows_of(quick, engine: str) -> dict:
    """``engine``'s rows by mode (skips where it cannot run)."""
    if quick.why[engine]:
        pytest.skip(quick.why[engine])
    return {row["mode"]: row for row in quick.report["rows"] if row["engine"] == engine}


@pytest.mark.root
def test_quick_bpftrace_hist_on_java_server(quick):
    bench, report = quick.bench, quick.report
    rows = rows_of(quick, "bpftrace")
    assert set(rows) == {"hist"}        # the floors are bcc programs
    row = rows["hist"]
    # Counting by BPF_ENABLE_STATS leaves the global sysctl alone (others on the
    # machine may be switching it); counting by the sysctl puts it back.
    assert report["config"]["stats_via"] in ("BPF_ENABLE_STATS", "sysctl")
    if report["config"]["stats_via"] == "sysctl":
        assert bench.STATS_SYSCTL.read_text() == quick.sysctl_before

    assert report["config"]["reps"] == 1
    assert set(report["none_ops_per_s"]) == {"java"} and report["none_ops_per_s"]["java"] > 0
    assert (row["target"], row["engine"], row["mode"]) == ("java", "bpftrace", "hist")

    bpf = row["bpf"]
    [w] = bpf["windows"]
    assert w["requests"] > 0 and bpf["requests"] == w["requests"]
    # every request is at least one receive and one send by the server, each running
    # one of the probe's programs at least
    assert w["run_cnt"] >= 2 * w["requests"]
    assert w["run_time_ns"] > 0
    assert bpf["ns_per_request"] == pytest.approx(w["run_time_ns"] / w["requests"])
    assert bpf["runs_per_request"] == pytest.approx(w["run_cnt"] / w["requests"])
    # the per-program detail adds up to the window's totals
    assert sum(p["run_cnt"] for p in w["programs"]) == w["run_cnt"]
    assert sum(p["run_time_ns"] for p in w["programs"]) == w["run_time_ns"]
    assert sum(p["run_time_ns"] for p in bpf["programs"]) == w["run_time_ns"]
    # a program accrues time only when it runs
    assert all(p["run_cnt"] > 0 or p["run_time_ns"] == 0 for p in w["programs"])
    assert len({p["id"] for p in w["programs"]}) == len(w["programs"])
    # the probe counted the finds the client was answered, no more, no fewer
    assert bpf["seen"] == pytest.approx(1.0, abs=0.01)
    # bpftrace's own CPU time (user + system, in clock ticks) over the window's requests
    ticks = w["probe_cpu_s"] * os.sysconf("SC_CLK_TCK")
    assert ticks == pytest.approx(round(ticks))
    assert bpf["probe_cpu_us_per_request"] == pytest.approx(w["probe_cpu_s"] * 1e6 / w["requests"])
    assert row["goal_ns_per_request"] == 2000

    th = row["throughput"]
    assert len(th["ratios"]) == len(th["ops_per_s"]) == len(th["none_ops_per_s"]) == 1
    assert th["ratios"][0] == pytest.approx(th["ops_per_s"][0] / th["none_ops_per_s"][0])
    assert th["ratio_min"] <= th["ratio_median"] <= th["ratio_max"]

    text = bench.render(report)
    assert max(len(line) for line in text.splitlines()) < 80
    assert "java     bpftrace hist" in text


@pytest.mark.root
def test_quick_floor_beside_bcc_hist(quick):
    """The floor row runs on the bcc probe's own tracepoints, hit as often per request;
    its programs only test the pid, so it costs less than the probe's. The idle row's
    syscall tracepoint is never hit; the sock row's programs are on the socket
    tracepoints, hit by every socket receive and send."""
    bench = quick.bench
    rows = rows_of(quick, "bcc")
    assert set(rows) == {"hist", "floor", "idle", "sock"}
    hist, floor = rows["hist"]["bpf"], rows["floor"]["bpf"]

    def attached(bpf):      # a probe's program may serve several tracepoints
        return {t for p in bpf["programs"] for t in p["attached"] if t.startswith("sys_")}

    assert attached(floor) == attached(hist) and "sys_exit_read" in attached(floor)
    assert floor["runs_per_request"] == pytest.approx(hist["runs_per_request"], abs=0.5)
    assert floor["ns_per_request"] < hist["ns_per_request"]
    assert floor["seen"] is None and rows["floor"]["goal_ns_per_request"] is None
    idle, sock = rows["idle"]["bpf"], rows["sock"]["bpf"]
    assert idle["runs_per_request"] == 0 and idle["ns_per_request"] == 0
    assert {p["name"] for p in sock["programs"]} == {"sock_recv_length", "sock_send_length"}
    assert sock["runs_per_request"] >= 2    # the server's receive and send, at least
    text = bench.render(quick.report)
    assert "java     bcc floor" in text and "java     bcc idle" in text
    assert "where the BPF time goes: java, bcc idle" not in text
