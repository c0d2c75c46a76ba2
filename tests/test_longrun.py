"""bench/longrun.py at a small scale: the synthetic run it writes in record's formats
is read by the real readers, and ``phases``/``report`` on it give the figures computed
directly from the requests it generated -- exactly from the events (per-phase counts,
nearest-rank percentiles, maxima), within the log-linear bound from the histograms
over the phase's whole seconds. The timing machinery runs too; no time is asserted."""

from __future__ import annotations

import importlib.util
import json
import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from mongoprobe.model import event_store, loglinear_buckets as loglinear
from mongoprobe.analysis import phase_table as phases, traffic_phases as traffic
from mongoprobe.run.run_folder import load_run

TOP = Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location("longrun", TOP / "bench" / "longrun.py")
longrun = importlib.util.module_from_spec(_spec)
sys.modules["longrun"] = longrun          # dataclasses look their module up there
_spec.loader.exec_module(longrun)

SPEC = longrun.Spec(seconds=100, rate=1500, seed=5)


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    out = tmp_path_factory.mktemp("longrun")
    lines = []
    dirs, requests = longrun.write_runs(SPEC, out, ("hist", "events"), lines.append)
    assert lines and lines[-1].startswith(f"generating: {SPEC.seconds}/{SPEC.seconds} s, "
                                          f"{requests:,} requests")
    dirs["requests"] = requests
    return dirs


def _events(run_dir: Path) -> pd.DataFrame:
    return pd.read_parquet(run_dir / "latency.events.parquet",
                           columns=["time", "command", "latency_ns"])


def _exact(v: np.ndarray) -> dict:
    v = np.sort(v)
    return {"count": len(v), "max": v[-1] / 1e3,
            **{f"p{q}": v[math.ceil(q / 100 * len(v)) - 1] / 1e3 for q in (50, 95, 99)}}


def test_the_real_readers_parse_what_it_writes(runs):
    ev = _events(runs["events"])
    # the idle gaps between phases (5.4 s of 100 here) keep only monitoring
    assert len(ev) == runs["requests"] and 0.9 * SPEC.requests < len(ev) < SPEC.requests
    for v in ("hist", "events"):
        run = load_run(runs[v])
        lat = run.latencies
        # one slice per second of the run, every request counted in them
        assert lat.totals["time"].nunique() == SPEC.seconds
        assert int(lat.totals["count"].sum()) == len(ev) == lat.counts["replies"]
        assert lat.exact == (v == "events")
        assert sum(lat.lost.values()) == 0
        assert set(run.vmstat.columns) >= {"us", "sy", "cs"} and len(run.iostat)
    lat = load_run(runs["events"]).latencies
    assert isinstance(lat.source, event_store.ParquetEvents)
    assert lat.source._pf.metadata.num_row_groups == math.ceil(SPEC.seconds / longrun.CHUNK_S)


def test_phases_from_events_equal_the_direct_figures(runs, monkeypatch):
    monkeypatch.setattr(event_store, "BATCH", 10_000)   # windows cut through batches
    ev = _events(runs["events"])
    table = phases.phase_table(load_run(runs["events"]))
    bounds = SPEC.phase_bounds()
    assert table["name"].tolist() == [b[0] for b in bounds]
    for row, (name, a, b) in zip(table.itertuples(), bounds):
        start, end = longrun.T0 + a, longrun.T0 + b
        assert row.start == pytest.approx(start, abs=1e-6)
        assert row.end == pytest.approx(end, abs=1e-6)
        assert row.server_exact
        part = ev[(ev["time"] >= row.start) & (ev["time"] < row.end)]
        want = {c: _exact(p["latency_ns"].to_numpy()) for c, p in part.groupby("command")}
        got = row.latency_us
        assert set(got) == set(want) >= set(longrun.PHASES[bounds.index((name, a, b))][2])
        for cmd, w in want.items():
            for k in ("count", "p50", "p95", "p99", "max"):
                assert got[cmd][k] == w[k], (name, cmd, k)
            assert row.server_rates[cmd] == pytest.approx(w["count"] / (row.end - row.start))
        work = part[~part["command"].isin(traffic.ADMIN_COMMANDS)]
        assert row.ops_avg == pytest.approx(len(work) / (row.end - row.start))


def test_phases_from_histograms_over_whole_seconds(runs):
    ev = _events(runs["events"])
    table = phases.phase_table(load_run(runs["hist"]))
    for row in table.itertuples():
        assert not row.server_exact
        lo, hi = math.ceil(row.start), math.floor(row.end)    # the whole seconds inside
        part = ev[(ev["time"] >= lo) & (ev["time"] < hi)]
        for cmd, p in part.groupby("command"):
            w, g = _exact(p["latency_ns"].to_numpy()), row.latency_us[cmd]
            assert g["count"] == w["count"]
            assert g["max"] == w["max"]
            for q in ("p50", "p95", "p99"):
                assert abs(g[q] - w[q]) <= loglinear.MAX_ERROR * w[q] + 1e-3, (cmd, q)


def test_phases_inferred_from_the_events_traffic(runs, monkeypatch):
    """Without the tool's markers: per request, and per second from the events'
    counts when they are too many to hold (here made so), each boundary within two
    seconds of its marker."""
    lat = load_run(runs["events"]).latencies
    marks = [(n, longrun.T0 + a, longrun.T0 + b) for n, a, b in SPEC.phase_bounds()]
    for limit in (event_store.IN_MEMORY_MAX, 1000):
        monkeypatch.setattr(event_store, "IN_MEMORY_MAX", limit)
        got = traffic.infer(lat)
        assert len(got) == len(marks), (limit, got)
        for r, (_, a, b) in zip(got.itertuples(), marks):
            assert abs(r.start - a) < 2 and abs(r.end - b) < 2, (limit, r, a, b)


def test_the_bench_times_phases_and_report(runs):
    # compare too, on the histograms' run (two runs of the events' take longer)
    results = {v: longrun.measure(runs[v], compare=v == "hist") for v in ("hist", "events")}
    for v, r in results.items():
        for cmd, m in r.items():
            assert m["returncode"] == 0, (v, cmd, m["stderr"])
            assert m["wall_s"] > 0 and m["cpu_s"] > 0 and m["rss_bytes"] > 10 << 20
        assert (runs[v] / "report.html").stat().st_size > 10_000
        assert "server latency" in (runs[v] / "phases.txt").read_text()
    text = longrun.table(SPEC, runs["requests"], results)
    assert "hist      phases" in text and "events    report" in text
    assert "hist      compare" in text and "hist: compare of two runs / phases of one: " in text
    # the bench's own command line, on a run too short for it, says so
    p = subprocess.run([sys.executable, str(TOP / "bench" / "longrun.py"), "--hours", "0.01"],
                       capture_output=True, text=True)
    assert p.returncode == 2 and "at least a minute" in p.stderr


def test_phases_json_on_the_events_run(runs):
    p = subprocess.run([sys.executable, "-m", "mongoprobe", "phases", str(runs["events"]),
                        "--json"], capture_output=True, text=True,
                       env={"PYTHONPATH": str(TOP / "analyzer"), "PATH": "/usr/bin:/bin"})
    assert p.returncode == 0, p.stderr
    out = json.loads(p.stdout)
    assert [x["name"] for x in out["phases"]] == [b[0] for b in SPEC.phase_bounds()]
    assert out["phases"][0]["latency_us"]["insert"]["count"] > 0
