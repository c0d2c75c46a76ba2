"""Phases from the server's traffic (mongoprobe.analysis.traffic_phases), on a real recording: the
built-in load with three command mixes, its markers and header taken out of load.out
so that no adapter can read it (conftest's ``recorded_run``, shared with test_record and
test_end_to_end). Every boundary must fall within a second of the marker the load
printed, from the per-second histograms alone and from every request's event."""

from __future__ import annotations

import math
import shutil

import numpy as np
import pytest

import mongoprobe
from mongoprobe.analysis import phase_table as phases, traffic_phases as traffic

from helpers.recorded import NAMES

# the phases traffic.infer finds (2i.1q and 1i@50.2q have one mix), each named by its
# commands, the most requested first: the first one's order is what the load did
# (found), the others have one command each
FOUND = [None, "find", "insert"]
OF = [NAMES[0:2], NAMES[2:3], NAMES[3:4]]      # the load's phases each one spans


def _mix_names(run) -> set[str]:
    """The names the first found phase may have: its commands by the load's own counts
    (one insert command a document, one find a query), the most first; both orders
    when the two are within 5% (the found phase's edges are not the markers')."""
    ph = [p for p in run.load_summary["phases"] if p["name"] in OF[0]]
    ins, finds = sum(p["insert_ops"] for p in ph), sum(p["queries"] for p in ph)
    if abs(ins - finds) <= 0.05 * max(ins, finds):
        return {"insert+find", "find+insert"}
    return {"insert+find" if ins > finds else "find+insert"}


@pytest.fixture(scope="module")
def recorded(recorded_run):
    return recorded_run.path


def _stripped(src, dst, keep, events=True):
    """A copy of the run whose load.out keeps the lines ``keep`` says; without its
    events file when not ``events`` (as if recorded without --events)."""
    shutil.copytree(src, dst)
    lines = (dst / "load.out").read_text().splitlines(keepends=True)
    (dst / "load.out").write_text("".join(s for s in lines if keep(s.split("\t", 2)[2])))
    if not events:
        (dst / "latency.events.parquet").unlink()
    return mongoprobe.load_run(dst)


def _relative(table, t0) -> str:
    """A phase table with its times in seconds from t0, to the millisecond."""
    return table.assign(start=table["start"] - t0, end=table["end"] - t0).to_string(
        float_format=lambda v: f"{v:.3f}")


def _seconds(recorded, t0) -> str:
    """The work requests each second of the recording, by command: where a phase thinned
    out or stopped (a gap of two idle seconds splits a phase)."""
    ps = traffic.per_second(mongoprobe.load_run(recorded).latencies)
    t = ps.assign(second=ps["second"] - int(t0)).pivot_table(
        index="second", columns="command", values="requests", aggfunc="sum", fill_value=0)
    return t.to_string()


def _within_a_second(got, truth, recorded):
    """The phases found, each within a second of the markers of the phases it spans."""
    names = got["name"].tolist()
    # (the whole table and the markers when not, in seconds from the first marker's
    # start: which edge moved, and where)
    t0 = truth["start"].min()
    assert names[1:] == FOUND[1:] and names[0] in _mix_names(mongoprobe.load_run(recorded)), \
        (f"{_relative(got, t0)}\nmarkers:\n{_relative(truth, t0)}\n"
         f"per second (from the first marker's second):\n{_seconds(recorded, t0)}")
    for g, spans in zip(got.itertuples(), OF):
        start, end = truth.loc[spans[0], "start"], truth.loc[spans[-1], "end"]
        assert abs(g.start - start) < 1.0, (g.name, g.start - start)
        assert abs(g.end - end) < 1.0, (g.name, g.end - end)


def test_boundaries_within_a_second_of_the_markers(recorded, tmp_path):
    truth = mongoprobe.load_run(recorded).phases.set_index("name")
    assert truth.index.tolist() == NAMES
    run = _stripped(recorded, tmp_path / "run", lambda s: not s.startswith("###"),
                    events=False)
    assert run.tool_output.tool == "traffic"
    _within_a_second(run.phases, truth, recorded)
    # throughput then comes from the server: every work request of a phase counted once
    t = phases.phase_table(run)
    assert (t["ops_source"] == "server").all()
    # (the per-second histograms alone)
    assert run.events is None
    work = traffic.per_second(run.latencies)  # the load's setup (drop, createIndexes) too
    assert set(work["command"]) == {"insert", "find", "drop", "createIndexes"}
    # the server's rate over each found phase's whole seconds (the probe's, server_s of
    # them) is the load's own over the same seconds: its per-second lines, prorated
    # where one straddles an edge (one document per insert here). 0.95-1.20 in four
    # recordings (1.20: a find phase of 16 requests in its two whole seconds, where the
    # edges' proration weighs most); over the markers' lengths a found phase 2 s longer
    # than its markers (as the boundary check allows) read 0.69 in a CI run
    iv = mongoprobe.load_run(recorded).tool_output.intervals
    g = traffic.grid(run.latencies.totals)
    for r in t.itertuples():
        lo, hi = g + math.ceil(r.start - g), g + math.floor(r.end - g)
        assert hi - lo == pytest.approx(r.server_s), r.name
        inside = (np.minimum(iv["time"], hi) - np.maximum(iv["time"] - iv["length_s"], lo))
        own = float((iv["count"] * inside.clip(lower=0) / iv["length_s"]).sum()) / (hi - lo)
        assert r.ops_avg == pytest.approx(own, rel=0.3), r.name


def test_boundaries_from_every_request(recorded, tmp_path):
    """With every request's event, a boundary sits on a request: within a second of
    the marker too."""
    truth = mongoprobe.load_run(recorded).phases.set_index("name")
    run = _stripped(recorded, tmp_path / "run", lambda s: not s.startswith("###"))
    assert run.events is not None
    _within_a_second(run.phases, truth, recorded)


def test_markers_without_the_loads_header(recorded, tmp_path):
    truth = mongoprobe.load_run(recorded).phases
    run = _stripped(recorded, tmp_path / "run", lambda s: not s.startswith("### load "))
    assert run.tool_output.tool == "markers"
    assert run.phases["name"].tolist() == truth["name"].tolist()
    assert run.phases["start"].tolist() == truth["start"].tolist()


def _lat(grid0, seconds):
    """Per-second totals only (no events), intervals starting at grid0 + k; a second
    is {command: (requests, busy_s[, longest_s])}."""
    from mongoprobe.model.latencies import Latencies, TOTAL_COLUMNS, HIST_COLUMNS
    import pandas as pd
    rows = [(grid0 + k, 1.0, cmd, "OP_MSG", v[0], int(v[0] * v[1] * 1e9),
             int(v[2] * 1e9) if len(v) > 2 else 0, 0, 0)
            for k, mix in enumerate(seconds) for cmd, v in mix.items()]
    tot = pd.DataFrame(rows, columns=list(TOTAL_COLUMNS)).astype(TOTAL_COLUMNS)
    return Latencies(pd.DataFrame({c: pd.Series(dtype=t) for c, t in HIST_COLUMNS.items()}),
                     tot)


def test_a_short_phase_of_its_own_and_a_handover_after_an_idle_second():
    """A second of aggregations between inserts and finds is a phase, however short; a
    hand-over second (finds and inserts) after an idle one (slow finds completing in
    the next) makes no phase: its neighbours are the active seconds around it (a CI
    run found a 7-ms phase there)."""
    ins, agg, find = {"insert": (300, 0.002)}, {"aggregate": (3, 0.3)}, {"find": (20, 0.09)}
    got = traffic.infer(_lat(1000.0, [ins] * 3 + [agg] + [find] * 3))
    assert got["name"].tolist() == ["insert", "aggregate", "find"]
    got = traffic.infer(_lat(1000.0, [find] * 3 + [{}] + [{**find, **ins}] + [ins] * 3))
    assert got["name"].tolist() == ["find", "insert"]


def test_a_handover_is_placed_by_each_sides_rate_on_the_probes_grid():
    # the CI run this was found on: finds at 12/s handing over to inserts at 1,200/s
    # 0.925 into an interval that starts 0.418 after the epoch second; by counts
    # (12 of 98) the boundary fell 1.2 s early
    find, ins = {"find": (12, 0.08)}, {"insert": (1200, 0.001)}
    lat = _lat(1000.418, [find] * 4 + [{"find": (12, 0.08), "insert": (86, 0.001)}]
               + [ins] * 4)
    got = traffic.infer(lat)
    assert got["name"].tolist() == ["find", "insert"]
    assert got["end"][0] == got["start"][1]
    # 12 finds take the 1 s they take next door; 86 inserts take 86/1200 s
    assert got["end"][0] == pytest.approx(1004.418 + 1 / (1 + 86 / 1200), abs=1e-9)
    # the other way round, and where only one side has a rate to go by
    lat = _lat(1000.7, [ins] * 3 + [{"insert": (300, 0.001), "find": (9, 0.08)}] + [find] * 3)
    got = traffic.infer(lat)
    assert got["name"].tolist() == ["insert", "find"]
    assert got["start"][1] == pytest.approx(1003.7 + 0.25 / (0.25 + 0.75), abs=1e-9)
    lat = _lat(1000.2, [ins] * 3 + [{"insert": (1200, 0.001), "find": (6, 0.08)}]
               + [{"insert": (1200, 0.001), "find": (12, 0.08)}] * 3)
    got = traffic.infer(lat)
    assert got["name"].tolist() == ["insert", "insert+find"]
    assert got["start"][1] == pytest.approx(1003.2 + 0.5, abs=1e-9)


def test_a_server_stall_is_not_an_idle_gap():
    """A server that stalls answers nothing for two seconds, then all at once: its
    requests were in flight all along (the longest latency of the second they complete
    in reaches back over the silent ones), so those seconds are not an idle gap that
    splits a phase in two of one mix. From the histograms alone, a CI run's 2i.1q came
    out as insert+find and insert+find-2 so."""
    mix = {"insert": (150, 0.9), "find": (30, 0.9)}
    finds = {"find": (25, 1.9)}
    def seconds(longest):
        return ([mix] * 3 + [{}, {}]
                + [{"insert": (450, 2.9, longest), "find": (90, 2.9, longest)}]
                + [mix] * 2 + [finds] * 3)
    got = traffic.infer(_lat(1000.3, seconds(2.6)))
    assert got["name"].tolist() == ["insert+find", "find"]
    # a second's longest request under 2 s cannot have spanned a whole earlier one
    got = traffic.infer(_lat(1000.3, seconds(1.5)))
    assert got["name"].tolist() == ["insert+find", "insert+find-2", "find"]
