"""Phases from the server's traffic (mongoprobe.traffic), on a real recording: the
built-in load with three command mixes, its markers and header taken out of load.out
so that no adapter can read it. Every boundary must fall within a second of the
marker the load printed."""

from __future__ import annotations

import shutil
import subprocess
import sys

import pytest

import mongoprobe
from mongoprobe import phases, traffic

SPEC = "2i.1q:4s,0i.2q:4s,2i.0q:4s"


@pytest.fixture(scope="module")
def recorded(tmp_path_factory, tracing_and_target):
    path = tmp_path_factory.mktemp("traffic") / "RUN"
    r = subprocess.run([sys.executable, "-m", "mongoprobe", "record", "--target", "embedded",
                        "-o", str(path), "--probes", "latency", "--", sys.executable, "-m",
                        "mongoprobe", "load", "--phases", SPEC],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    return path


def _stripped(src, dst, keep):
    shutil.copytree(src, dst)
    lines = (dst / "load.out").read_text().splitlines(keepends=True)
    (dst / "load.out").write_text("".join(s for s in lines if keep(s.split("\t", 2)[2])))
    return mongoprobe.load_run(dst)


def test_boundaries_within_a_second_of_the_markers(recorded, tmp_path):
    truth = mongoprobe.load_run(recorded).phases
    assert truth["name"].tolist() == ["2i.1q", "0i.2q", "2i.0q"]
    run = _stripped(recorded, tmp_path / "run", lambda s: not s.startswith("###"))
    assert run.tool_output.tool == "traffic"
    got = run.phases
    assert got["name"].tolist() == ["insert+find", "find", "insert"]
    for g, t in zip(got.itertuples(), truth.itertuples()):
        assert abs(g.start - t.start) < 1.0, (g.name, g.start - t.start)
        assert abs(g.end - t.end) < 1.0, (g.name, g.end - t.end)
    # throughput then comes from the server: every work request of a phase counted once
    t = phases.phase_table(run)
    assert (t["ops_source"] == "server").all()
    # (recorded without --events: the per-second histograms alone)
    assert run.events is None
    work = traffic.per_second(run.latencies)  # the load's setup (drop, createIndexes) too
    assert set(work["command"]) == {"insert", "find", "drop", "createIndexes"}
    # the server's rate over each phase's whole seconds (two or three of these 4-second
    # phases) is the load's own rate over the whole phase (one document per insert
    # here), within the second-to-second swing of FerretDB on this shared machine
    own = phases.phase_table(mongoprobe.load_run(recorded)).set_index("name")
    for r, name in zip(t.itertuples(), ["2i.1q", "0i.2q", "2i.0q"]):
        assert r.ops_avg == pytest.approx(own.loc[name, "ops_avg"], rel=0.3), name


def test_markers_without_the_loads_header(recorded, tmp_path):
    truth = mongoprobe.load_run(recorded).phases
    run = _stripped(recorded, tmp_path / "run", lambda s: not s.startswith("### load "))
    assert run.tool_output.tool == "markers"
    assert run.phases["name"].tolist() == truth["name"].tolist()
    assert run.phases["start"].tolist() == truth["start"].tolist()


def _lat(grid0, seconds):
    """Per-second totals only (no events), intervals starting at grid0 + k."""
    from mongoprobe.latencies import Latencies, TOTAL_COLUMNS, HIST_COLUMNS
    import pandas as pd
    rows = [(grid0 + k, 1.0, cmd, "OP_MSG", n, int(n * busy * 1e9), 0, 0, 0)
            for k, mix in enumerate(seconds) for cmd, (n, busy) in mix.items()]
    tot = pd.DataFrame(rows, columns=list(TOTAL_COLUMNS)).astype(TOTAL_COLUMNS)
    return Latencies(pd.DataFrame({c: pd.Series(dtype=t) for c, t in HIST_COLUMNS.items()}),
                     tot)


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
