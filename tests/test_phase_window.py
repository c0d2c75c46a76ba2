"""The one phase type (mongoprobe.model.phase): a named [start, end), read from every
shape phases come in (tables, records, phases --json, files), and the tables built back."""

import json
import math

import numpy as np
import pandas as pd
import pytest

from mongoprobe.analysis import phase_table, traffic_phases
from mongoprobe.model import phase, stack_samples
from mongoprobe.model.phase import Phase, phases_from


def test_half_open_bounds_and_seconds() -> None:
    p = Phase("load", 100.0, 102.5)
    assert p.seconds == 2.5 and p.span == (100.0, 102.5)
    assert p.contains(100.0) and p.contains(102.4999) and not p.contains(102.5)
    assert not p.contains(99.999)
    t = pd.Series([99.0, 100.0, 101.0, 102.5, 103.0])
    assert p.contains(t).tolist() == [False, True, True, False, False]
    assert p.contains(t.to_numpy()).tolist() == [False, True, True, False, False]
    # two phases that meet share no instant
    q = Phase("run", 102.5, 110.0)
    assert not (p.contains(t) & q.contains(t)).any()


def test_whole_seconds_count_from_the_start() -> None:
    assert Phase("a", 10.25, 13.0).whole_seconds().tolist() == [10.25, 11.25]
    assert Phase("a", 10.0, 13.0).whole_seconds().tolist() == [10.0, 11.0, 12.0]
    assert len(Phase("a", 10.0, 10.5).whole_seconds()) == 0
    assert len(Phase("a", 10.0, math.nan).whole_seconds()) == 0     # never ended


def test_phases_from_every_shape(tmp_path) -> None:
    want = [Phase("load", 1.0, 2.0), Phase("run", 2.0, 5.0)]
    table = pd.DataFrame({"name": ["load", "run"], "start": [1, 2], "end": [2.0, 5.0],
                          "tool": ["ycsb", "ycsb"]})       # more columns: ignored
    records = [{"name": "load", "start": 1, "end": 2}, {"name": "run", "start": 2, "end": 5}]
    assert phases_from(table) == want
    assert phases_from(records) == want
    assert phases_from({"phases": records}) == want
    assert phases_from(want) == want
    js, csv = tmp_path / "p.json", tmp_path / "p.csv"
    js.write_text(json.dumps({"phases": records}))
    table.to_csv(csv, index=False)
    assert phases_from(js) == want and phases_from(str(csv)) == want
    assert [Phase.of(r) for r in table.itertuples()] == want
    # the stack commands' and notebooks' names are the same type
    assert stack_samples.Phase is Phase and stack_samples.phases_from is phases_from


def test_frame_round_trip_and_empty() -> None:
    ph = [Phase("a", 1.0, 2.0), Phase("b", 2.0, 4.0)]
    df = phase.frame(ph)
    assert list(df.columns) == ["name", "start", "end"]
    assert df.dtypes.iloc[1:].astype(str).tolist() == ["float64", "float64"]
    assert phases_from(df) == ph
    empty = phase.frame([])
    assert len(empty) == 0 and list(empty.columns) == ["name", "start", "end"]
    assert str(empty["start"].dtype) == "float64"


def test_the_stages_give_the_same_table() -> None:
    # --phases and the traffic inference both build their tables from Phases
    t0 = 1_700_000_000.0
    parsed = phase_table.parse_phases("warm=0..10,run=10..25.5", t0)
    assert phases_from(parsed) == [Phase("warm", t0, t0 + 10), Phase("run", t0 + 10, t0 + 25.5)]
    with pytest.raises(phase_table.PhaseError):
        phase_table.parse_phases("x=5..1", t0)
    inferred = traffic_phases._table([["find", 1.0, 2.0], ["find", 3.0, 4.0]])
    assert phases_from(inferred) == [Phase("find", 1.0, 2.0), Phase("find-2", 3.0, 4.0)]
    assert inferred.dtypes.equals(parsed.dtypes)


def test_slices_of_a_stack_table_by_phase() -> None:
    df = pd.DataFrame({"time": [0.0, 1.0, 2.0, np.nan], "count": [1, 2, 3, 4]})
    part = stack_samples.slice_phase(df, Phase("x", 1.0, 2.0))
    assert part["count"].tolist() == [2]
