"""One statistic in every view: the same requests give the same count, p50, p95, p99 and
max in ``latency --json`` (from events, and from a run's histograms), ``phases`` (whose
figures ``report``'s table prints), ``pcap --json``, and ``probes/mongolatency.py -j``
run under the system python3, which has no pandas (``mongoprobe.wire.facts``).

Input: a real recorded run, ``samples/probes/mongo_latency-ferretdb-packed.json``
(bpftrace, FerretDB v1.24.0, every request's event and the per-second log-linear
histograms), and a real capture, ``samples/pcap/ferretdb-mixedload.pcapng``. The
expected figures are computed here from their definitions, independently of wirefacts:
exact values by nearest rank; from buckets, the middle integer of the bucket of that
rank, at most the exact max.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from mongoprobe.model import log2_histogram as histogram, loglinear_buckets as loglinear
from mongoprobe.model import latency_summary as latency
from mongoprobe.analysis import phase_table as phases
from mongoprobe.wire import facts as wirefacts
from mongoprobe.formats.bpftrace_latency import read_bpftrace_latency
from mongoprobe.model.latencies import Latencies

ROOT = Path(__file__).resolve().parents[1]
SAMPLE = ROOT / "samples" / "probes" / "mongo_latency-ferretdb-packed.json"
TOOL = ROOT / "probes" / "mongolatency.py"
QS = (50, 95, 99)
KEYS = ("count", "p50_ns", "p95_ns", "p99_ns", "max_ns")
SYSTEM_PYTHON = "/usr/bin/python3"


def _rank(q: int, n: int) -> int:
    return max(-(-q * n // 100), 1)          # ceil(q n / 100), in integers


def exact_figures(values) -> dict:
    v = np.sort(np.asarray(values, dtype=np.int64))
    return {"count": len(v), **{f"p{q}_ns": int(v[_rank(q, len(v)) - 1]) for q in QS},
            "max_ns": int(v[-1])}


def bucket_figures(values, log2: bool = False) -> dict:
    """The figures a histogram of ``values`` gives: each percentile the middle integer of
    the bucket holding the value of its rank, at most the exact max."""
    v = np.sort(np.asarray(values, dtype=np.int64))
    out = {"count": len(v), "max_ns": int(v[-1])}
    for q in QS:
        x = int(v[_rank(q, len(v)) - 1])
        lo, hi = histogram.bucket_of(x) if log2 else loglinear.bounds(loglinear.bucket(x))
        out[f"p{q}_ns"] = min(lo + (hi - lo - 1) // 2, int(v[-1]))
    return out


def pick(d: dict) -> dict:
    return {k: d[k] for k in KEYS}


def from_us(d: dict) -> dict:
    """phases' µs figures back in integer ns (they are ns / 1e3)."""
    return {"count": d["count"], **{f"{k}_ns": round(d[k] * 1e3) for k in
                                    ("p50", "p95", "p99", "max")}}


@pytest.fixture(scope="module")
def run():
    with open(SAMPLE) as f:
        slices, events, counts, lost, _ = read_bpftrace_latency(f, SAMPLE.name)
    # the run's clock: the kernel's seconds as they are (offset 0)
    events = events.assign(time=events["mono_ns"] / 1e9)
    by_cmd = {c: g["latency_ns"].to_numpy() for c, g in events.groupby("command")}
    assert len(by_cmd) >= 4 and len(events) > 1000
    return slices, events, counts, lost, by_cmd


def _window(lat: Latencies) -> tuple[float, float]:
    t = lat.totals["time"]
    return float(t.min()), float((t + lat.totals["length_s"]).max())


def bcc_tool_json(slices, events=None) -> dict:
    """``mongolatency.py -j``'s report of these slices (and events), computed by the tool
    itself under the system python3 (no pandas, no mongoprobe on its path)."""
    if not shutil.which(SYSTEM_PYTHON):
        pytest.skip("no system python3")
    rows = [[cmd, op, a.row()] for s in slices for (cmd, op), a in s.rows.items()]
    ev = ([[c, o, int(x)] for c, o, x in zip(events["command"], events["opcode"],
                                               events["latency_ns"])]
          if events is not None else None)
    script = f"""
import importlib.util, json, sys
spec = importlib.util.spec_from_file_location("mongolatency", {str(TOOL)!r})
tool = importlib.util.module_from_spec(spec)
spec.loader.exec_module(tool)
assert "pandas" not in sys.modules and "mongoprobe" not in sys.modules
d = json.load(sys.stdin)
rep = tool.Report()
for cmd, op, row in d["rows"]:
    rep.add_slice({{("cmd", (cmd, op)): tool.Agg.from_row(row)}})
lat_by = None
if d["events"] is not None:
    lat_by = {{}}
    for cmd, op, ns in d["events"]:      # as main() files them
        lat_by.setdefault(("cmd", cmd), []).append(ns)
        lat_by.setdefault(("op", op), []).append(ns)
out = {{"cmd": tool.json_view(rep, "cmd", 0, lat_by, {{}}),
       "op": tool.json_view(rep, "op", 0, lat_by, {{}}),
       "footer": tool.wf.loss_lines(*d["totals"]), "module": tool.wf.__file__}}
print(json.dumps(out))
"""
    p = subprocess.run([SYSTEM_PYTHON, "-c", script], input=json.dumps(
        {"rows": rows, "events": ev, "totals": [slices[-1].counts, slices[-1].lost]}),
        capture_output=True, text=True, cwd="/", timeout=120)
    assert p.returncode == 0, p.stderr
    return json.loads(p.stdout)


def test_four_events_give_one_p50_everywhere():
    """The issue's example: 100, 200, 300 and 400 ns gave p50 = 250 in ``latency --json``
    (interpolated) and 200 in ``phases``; nearest rank gives 200 in both."""
    ev = pd.DataFrame({"time": [10.1, 10.2, 10.3, 10.4], "latency_ns": [100, 200, 300, 400],
                       "command": "find", "opcode": "OP_MSG"})
    j = latency.from_events(ev).to_json()["by_command"]["find"]
    ph = from_us(phases._server(Latencies.from_events(ev), 10.0, 11.0)[0]["find"])
    assert pick(j) == ph == {"count": 4, "p50_ns": 200, "p95_ns": 400, "p99_ns": 400,
                             "max_ns": 400}


def test_every_view_of_a_runs_events_agrees(run):
    slices, events, counts, lost, by_cmd = run
    want = {c: exact_figures(v) for c, v in by_cmd.items()}
    # latency --json on the run's events
    a = latency.from_events(events).to_json()["by_command"]
    # the run as `record` keeps it (histograms and every event), through latency and phases
    lat = Latencies.from_slices(slices, 0, events=events, counts=counts, lost=lost)
    b = latency.from_latencies(lat).to_json()["by_command"]
    ph = phases._server(lat, *_window(lat))[0]
    # the bcc tool -j, with its events
    tool = bcc_tool_json(slices, events)["cmd"]
    for c in want:
        assert pick(a[c]) == pick(b[c]) == from_us(ph[c]) == pick(tool[c]) == want[c], c


def test_every_view_of_a_runs_histograms_agrees(run):
    """Without events: bucket middles capped by the exact max, the same in every view,
    each within 1.6% of the exact nearest-rank value."""
    slices, events, counts, lost, by_cmd = run
    want = {c: bucket_figures(v) for c, v in by_cmd.items()}
    lat = Latencies.from_slices(slices, 0, counts=counts, lost=lost)
    assert not lat.exact
    j = latency.from_latencies(lat).to_json()
    ph = phases._server(lat, *_window(lat))[0]
    tool = bcc_tool_json(slices)
    for c in want:
        assert pick(j["by_command"][c]) == from_us(ph[c]) == pick(tool["cmd"][c]) == want[c], c
        ex = exact_figures(by_cmd[c])
        for q in QS:
            k = f"p{q}_ns"
            assert abs(want[c][k] - ex[k]) <= wirefacts.MAX_ERROR * ex[k], (c, q)
    for op, g in j["by_op"].items():
        assert pick(g) == pick(tool["op"][op]), op
        assert g["avg_ns"] == pytest.approx(tool["op"][op]["avg_ns"], rel=1e-12)
    # the bcc tool found the analyzer's own file, by its path
    assert Path(tool["module"]).resolve() == Path(wirefacts.__file__).resolve()


def test_dtrace_log2_groups_use_the_same_estimator(run):
    """DTrace's quantize() gives log2 buckets: the summary it builds
    (``latency.from_dtrace_quantize``: a Group of log2 buckets with the exact sum and
    max) reads them with the same estimator, the bucket's middle capped by the max."""
    *_, by_cmd = run
    for c, v in by_cmd.items():
        g = latency.Group(histogram.from_values(v), int(v.sum()), int(v.max()),
                          bucket_bounds=True)
        d = g.to_json()
        assert pick(d) == bucket_figures(v, log2=True), c
        assert d["percentiles"] == "log2 bucket middle"


@pytest.mark.skipif(not shutil.which("tshark"), reason="tshark not installed")
def test_pcap_json_is_the_nearest_rank_of_its_pairs():
    """``pcap --json`` of a real capture: its figures are the nearest-rank ones of its
    request/reply pairs, as ``latency --json`` and ``phases`` give for those pairs."""
    from mongoprobe import pcap

    path = ROOT / "samples" / "pcap" / "ferretdb-mixedload.pcapng"
    port = json.loads(path.with_suffix(".json").read_text())["port"]
    msgs = pcap.messages(str(path), port)
    p = pcap.pairs(msgs)
    p = p[p["latency_ns"].notna()]
    got = pcap.summary_from_pairs(p).to_json()["by_command"]
    ev = pd.DataFrame({"time": p["reply_time"].to_numpy(float),
                       "latency_ns": p["latency_ns"].to_numpy(np.int64),
                       "command": p["command"].fillna("[unknown]").to_numpy(object),
                       "opcode": p["opcode"].to_numpy(object)})
    lat = Latencies.from_events(ev)
    ph = phases._server(lat, float(ev["time"].min()) - 1, float(ev["time"].max()) + 1)[0]
    by = latency.from_events(ev).to_json()["by_command"]
    assert len(got) >= 5
    for c, g in got.items():
        want = exact_figures(ev.loc[ev["command"] == c, "latency_ns"])
        assert pick(g) == pick(by[c]) == from_us(ph[c]) == want, c


def test_bcc_tool_prints_the_analyzers_lines(run, capsys):
    """Same input, same lines: the footer with its TLS and not-traced lines, the failed
    replies' codes, and opcode names, from the tool and from the analyzer."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("mongolatency", TOOL)
    tool = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(tool)
    slices, events, counts, lost, _ = run
    untraced = {"mmsg_calls": 3, "io_uring_calls": 0, "io_uring_fds": 1,
                "tls_connections": 2, "tls_hooked": 1, "tls_calls_without_socket": 4}
    tls = {"hooked": ["libssl.so.3"], "connections": 5, "calls": 40, "memory_bio": 2,
           "memory_bio_tied": 1}
    tool.footer({"counts": counts, "lost": lost, "tls": tls, "untraced": untraced})
    printed = capsys.readouterr().out
    s = latency.from_latencies(Latencies.from_slices(slices, 0, counts=counts, lost=lost))
    s.tls, s.untraced = tls, untraced
    assert printed == s.loss_lines() + "\n"
    assert printed.splitlines()[2:] == [latency.tls_line(tls), latency.untraced_line(untraced)]
    # the system python3 prints the same footer
    assert bcc_tool_json(slices)["footer"] == latency.footer(counts, lost)
    # failed replies: the tool's count line and the analyzer's render name the same codes
    agg = tool.Agg(count=9, errors=7, codes={59: 4, 11601: 2, -1: 1})
    text = s.render(by="command")
    for cmd, g in s.by_command.items():
        if g.errors:
            assert f"failed (ok: 0): {g.errors}   {wirefacts.error_summary(g.codes)}" in text
    assert tool.errors_text(agg) == ("  errors 7 (59 CommandNotFound: 4, 11601 Interrupted: "
                                     "2, no code: 1)")
    from mongoprobe.wire import decode as wire
    from mongoprobe.formats import wire_slices
    assert tool.opname(2010) == wire.opcode_name(2010) == wire_slices.opcode_name(2010) \
        == "OP_UNKNOWN(2010)"


def test_error_table_is_complete():
    """The 14 codes the bcc tool's copy lacked are named, by the one table."""
    from mongoprobe.wire import error_codes as errorcodes

    for code in (6, 8, 28, 40, 52, 66, 91, 96, 121, 189, 262, 352, 11601, 13436):
        assert wirefacts.error_name(code) and errorcodes.name(code) == wirefacts.error_name(code)
    assert len(wirefacts.ERROR_NAMES) == 43


def test_rank_is_exact_arithmetic():
    # 0.95 * 20 and 0.99 * 100 in floats could round up past the integer rank
    assert [wirefacts.rank(q, n) for q, n in ((95, 20), (99, 100), (50, 4), (99.9, 1000))] \
        == [19, 99, 2, 999]


def test_live_bcc_tool_json_is_the_analyzers_of_its_own_events(tmp_path):
    """A live probe: ``mongolatency.py -j --events FILE`` (system python3) on
    tests/wireserver.py while tests/wireclient.py runs every scenario (pipelining,
    OP_QUERY, OP_COMPRESSED, exhaust streams...). Its JSON figures per opcode are the ones
    ``latency --json`` computes from the events it wrote: exact, by nearest rank."""
    import wireclient
    from helpers.wire import BCC_TOOL, CONNECTIONS, Probe, tool_unavailable, wireserver

    from mongoprobe.formats import wire_events

    reason = tool_unavailable("bcc")
    if reason:
        pytest.skip(reason)
    events = tmp_path / "events.jsonl"
    with wireserver("readwrite", tmp_path) as (pid, port):
        probe = Probe([SYSTEM_PYTHON, str(BCC_TOOL), "-p", str(pid), "-j", "--events",
                       str(events)],
                      lambda p: "Tracing MongoDB" in p.stderr.read_text(), tmp_path / "probe.err")
        try:
            probe.wait_attached()
            wireclient.run(port, connections=CONNECTIONS)
            time.sleep(0.3)          # a send's exit tracepoint may run after the client reads
        finally:
            lines = probe.stop()
    assert probe.proc.returncode == 0, probe.describe()
    got = json.loads(lines[-1])
    ev = wire_events.parse_events_json(events.read_text().splitlines())
    want = latency.from_events(ev).to_json()
    assert len(got["by_op"]) >= 3
    for op, g in got["by_op"].items():
        v = ev.loc[ev["opcode"] == op, "latency_ns"]
        assert len(v) == g["count"], op            # one event per timed request
        assert pick(g) == pick(want["by_op"][op]) == exact_figures(v), op


@pytest.mark.parametrize("layout", ["_data/probes", "elsewhere"])
def test_bcc_tool_finds_wirefacts_installed_without_running_the_package(tmp_path, layout):
    """Installed, the tools live in the package (mongoprobe/_data/probes/) or anywhere
    with the package importable: they load its wire/facts.py by path, and the package's
    __init__ (pandas) never runs under the system python3."""
    if not shutil.which(SYSTEM_PYTHON):
        pytest.skip("no system python3")
    pkg = tmp_path / "site" / "mongoprobe"
    tools = pkg / "_data" / "probes" if layout == "_data/probes" else tmp_path / "elsewhere"
    tools.mkdir(parents=True)
    pkg.mkdir(parents=True, exist_ok=True)
    for f in (*TOOL.parent.glob("*.py"), *TOOL.parent.glob("*.h")):
        shutil.copy(f, tools / f.name)
    (pkg / "wire").mkdir()
    shutil.copy(wirefacts.__file__, pkg / "wire" / "facts.py")
    (pkg / "__init__.py").write_text('raise ImportError("the package ran: pandas needed")\n')
    script = ("import importlib.util, sys\n"
              f"spec = importlib.util.spec_from_file_location('t', {str(tools / TOOL.name)!r})\n"
              "tool = importlib.util.module_from_spec(spec)\n"
              "spec.loader.exec_module(tool)\n"
              "print(tool.wf.__file__, 'mongoprobe' in sys.modules)\n")
    p = subprocess.run([SYSTEM_PYTHON, "-c", script], capture_output=True, text=True,
                       cwd=tmp_path, env={"PYTHONPATH": str(pkg.parent)}, timeout=60)
    assert p.returncode == 0, p.stderr
    path, ran = p.stdout.split()
    assert Path(path).resolve() == (pkg / "wire" / "facts.py").resolve() and ran == "False"
