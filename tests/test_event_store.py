"""mongoprobe.model.event_store: the figures read in batches -- from a DataFrame or from a
run's Parquet file, row group by row group -- equal those computed directly on the
whole table with numpy/pandas: counts, exact latency sums, nearest-rank percentiles
and maxima over any window, per-second counts and busy time, requests per interval.
Small batches and row groups make every window cut through batches."""

from __future__ import annotations

import io

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from mongoprobe import progress
from mongoprobe.model import event_store, latencies, loglinear_buckets as loglinear
from mongoprobe.analysis import traffic_phases as traffic
from mongoprobe.formats import wire_events

T0 = 1_795_000_000.0
CMDS = ["find", "insert", "update", "hello", "getMore"]


def _events(n: int = 30000, seconds: int = 30, seed: int = 3) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    t = T0 + np.sort(rng.uniform(0, seconds, n))
    cmd = rng.choice(CMDS, n, p=[0.5, 0.25, 0.15, 0.05, 0.05])
    ns = rng.lognormal(mean=12, sigma=1.5, size=n).astype(np.int64) + 1
    ns[::997] = rng.integers(1 << 32, 1 << 40, len(ns[::997]))   # beyond 32 bits too
    t[5::1009] = np.nan                                          # no wall time known
    df = pd.DataFrame({"time": t, "elapsed_s": np.nan, "pid": 1, "tid": 2,
                       "fd": rng.integers(5, 9, n), "request_id": np.arange(n),
                       "opcode": "OP_MSG", "command": cmd, "bytes_in": 100,
                       "bytes_out": 50, "latency_ns": ns, "stream": False})
    return wire_events.typed(df)


def _direct(ev: pd.DataFrame, start: float, end: float) -> dict:
    part = ev[(ev["time"] >= start) & (ev["time"] < end)]
    out = {}
    for cmd, p in part.groupby("command", sort=True):
        v = np.sort(p["latency_ns"].to_numpy())
        out[cmd] = {"count": len(v), "sum": int(v.sum()), "max": int(v[-1]),
                    **{f"p{q}": int(v[int(np.ceil(q / 100 * len(v))) - 1])
                       for q in (50, 95, 99)}}
    return out


@pytest.fixture
def small_batches(monkeypatch):
    monkeypatch.setattr(event_store, "BATCH", 1000)


@pytest.fixture(params=["frame", "parquet"])
def source(request, tmp_path, small_batches):
    ev = _events()
    if request.param == "frame":
        return ev, event_store.FrameEvents(ev)
    path = tmp_path / "latency.events.parquet"
    # row groups of 4,096 rows, as record's writer would cut a longer run
    pq.write_table(pa.Table.from_pandas(ev, preserve_index=False), path,
                   row_group_size=4096, compression="zstd")
    src = event_store.ParquetEvents(path)
    assert src._pf.metadata.num_row_groups > 5
    return ev, src


WINDOWS = [(T0, T0 + 30), (T0 + 3.3, T0 + 17.9), (T0 + 12.25, T0 + 12.5), (T0 - 5, T0 + 100),
           (T0 + 40, T0 + 50)]


def test_windows_equal_the_direct_figures(source):
    ev, src = source
    assert len(src) == len(ev)
    for start, end in WINDOWS:
        want = _direct(ev, start, end)
        w = src.window(start, end)
        got = w.stats()
        assert set(got) == set(want)
        for cmd, s in want.items():
            g = got[cmd]
            assert g["count"] == s["count"]
            assert g["avg"] == s["sum"] / s["count"]
            assert w.sum_ns[w.commands.index(cmd)] == s["sum"]        # exact integers
            for k in ("p50", "p95", "p99", "max"):
                assert g[k] == s[k], (start, end, cmd, k)
            part = ev[(ev["time"] >= start) & (ev["time"] < end) & (ev["command"] == cmd)]
            b, n = np.unique(loglinear.index(part["latency_ns"].to_numpy()),
                             return_counts=True)
            assert w.histogram(cmd) == dict(zip(b.tolist(), n.tolist()))
        assert w.counts() == {c: s["count"] for c, s in
                              sorted(want.items(), key=lambda x: (-x[1]["count"], x[0]))}


def test_many_windows_and_their_latency_bins_in_one_prepare(source):
    # a comparison's blocks: 58 one-second windows that overlap the batches' edges,
    # prepared with the phases' latency bins, each equal to the direct figures
    ev, src = source
    blocks = [(T0 + 0.5 + k / 2, T0 + 1.5 + k / 2) for k in range(58)]
    edges = (256e3, 1e6, 4e6)
    src.prepare(blocks + WINDOWS[:2], binned=[(a, b, edges) for a, b in WINDOWS[:2]])
    for start, end in blocks[::7]:
        want = _direct(ev, start, end)
        got = src.window(start, end).stats()
        assert {c: (g["count"], g["p99"], g["max"]) for c, g in got.items()} == {
            c: (s["count"], s["p99"], s["max"]) for c, s in want.items()}
    for start, end in WINDOWS[:2]:
        bins = src.binned(start, end, edges)
        for cmd in ("find", "insert"):
            part = ev[(ev["time"] >= start) & (ev["time"] < end) & (ev["command"] == cmd)]
            want = np.bincount(np.searchsorted(edges, part["latency_ns"].to_numpy(),
                                               side="left"), minlength=4)
            assert bins[src.code_of(cmd)].tolist() == want.tolist()


def test_per_second_and_intervals_equal_the_direct_counts(source):
    ev, src = source
    timed = ev[ev["time"].notna()]
    sec = np.floor(timed["time"]).astype("int64")
    g = timed.assign(second=sec).groupby(["second", "command"], sort=True)
    want = pd.DataFrame({"requests": g.size(), "busy_s": g["latency_ns"].sum() / 1e9}
                        ).reset_index()
    got = src.per_second()
    pd.testing.assert_frame_equal(got[["second", "command", "requests"]],
                                  want[["second", "command", "requests"]],
                                  check_dtype=False)
    assert got["busy_s"].to_numpy() == pytest.approx(want["busy_s"].to_numpy(), rel=1e-12)
    lo = T0 + 0.4 + np.arange(29.0)
    for cmd in ("find", "hello", "nosuch"):
        t = timed.loc[timed["command"] == cmd, "time"].to_numpy()
        direct = [int(((t > a) & (t <= a + 1)).sum()) for a in lo]
        assert src.answered(cmd, lo, lo + 1).tolist() == direct


def test_latencies_over_a_parquet_source_too_big_to_hold(tmp_path, monkeypatch,
                                                          small_batches):
    """Above IN_MEMORY_MAX the whole table is refused in one line, the figures still come
    from the events, and phases are inferred per second from the events' counts."""
    ev = _events()
    path = tmp_path / "latency.events.parquet"
    wire_events.write_parquet(ev, path)
    monkeypatch.setattr(event_store, "IN_MEMORY_MAX", 1000)
    whole = latencies.Latencies.from_events(ev)
    lat = latencies.Latencies(whole.hist, whole.totals, event_store.ParquetEvents(path))
    assert lat.exact
    with pytest.raises(event_store.TooManyEvents, match="too many to hold in memory"):
        lat.events
    assert lat.stats(T0 + 2.5, T0 + 9) == whole.stats(T0 + 2.5, T0 + 9)
    assert lat.rates(T0 + 2.5, T0 + 9) == pytest.approx(whole.rates(T0 + 2.5, T0 + 9))
    pd.testing.assert_frame_equal(lat.per_second(), whole.per_second(), check_dtype=False)
    pd.testing.assert_frame_equal(traffic.per_second(lat), traffic.per_second(whole),
                                  check_dtype=False)
    got = traffic.infer(lat)       # per second: one mix all along, one phase
    assert len(got) == 1 and got["start"].iloc[0] >= T0 and got["end"].iloc[0] <= T0 + 31


def test_a_request_without_a_command_name_keeps_its_own_code(tmp_path):
    t = pa.table({"time": [T0, T0 + 0.1, T0 + 0.2], "command": ["find", None, "find"],
                  "latency_ns": [10, 20, 30]})
    path = tmp_path / "e.parquet"
    pq.write_table(t, path)
    w = event_store.ParquetEvents(path).window(T0, T0 + 1)
    assert w.counts() == {"find": 2, "": 1}


def test_progress_only_on_a_terminal():
    out = io.StringIO()
    line = progress.Line("latency.events.parquet: counts", 180e6, " rows", stream=out,
                         active=True)
    line.update(72e6)
    line.close()
    text = out.getvalue()
    assert "latency.events.parquet: counts:  40% (72/180 M rows)" in text
    assert text.endswith("\r") and text.startswith("\r")
    quiet = io.StringIO()                   # StringIO is not a terminal
    line = progress.Line("x", 10, " rows", stream=quiet)
    line.update(5)
    line.close()
    assert quiet.getvalue() == ""


def test_prepare_computes_everything_in_two_scans(tmp_path, small_batches):
    """What a table of phases asks for, prepared at once: two reads of the file, and
    the same figures as asked for one by one on a fresh source."""
    ev = _events()
    path = tmp_path / "latency.events.parquet"
    pq.write_table(pa.Table.from_pandas(ev, preserve_index=False), path,
                   row_group_size=4096)
    spans = [(T0 + 0.5, T0 + 9.7), (T0 + 11.2, T0 + 20), (T0 + 20, T0 + 29.9)]
    lo = np.concatenate([a + np.arange(int(b - a), dtype=float) for a, b in spans])
    src, one = event_store.ParquetEvents(path), event_store.ParquetEvents(path)
    scans = []
    read = src.batches
    src.batches = lambda *a, **k: (scans.append(k.get("what")), read(*a, **k))[1]
    src.prepare(spans, np.concatenate([lo, lo + 1]), per_second=True)
    assert scans == ["counts + per second", "percentiles + per interval"]
    for a, b in spans:
        assert src.window(a, b).stats() == one.window(a, b).stats()
        k = a + np.arange(int(b - a), dtype=float)
        for cmd in CMDS:
            assert (src.answered(cmd, k, k + 1) == one.answered(cmd, k, k + 1)).all()
    pd.testing.assert_frame_equal(src.per_second(), one.per_second())
    assert len(scans) == 2                    # everything above came from the two
