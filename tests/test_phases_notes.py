"""Which note explains a client percentile below the server's in `phases` and `report`:
the rank rule (same requests, the client's exact values: YCSB) or the different
requests the two cover (the server's whole seconds only)."""

import pandas as pd

from mongoprobe.analysis import phase_table as phases


def _table(diff: dict, how: str) -> pd.DataFrame:
    return pd.DataFrame([{"client_vs_server": {"READ": {"command": "find", "diff": diff}},
                          "client_how": {"READ": how}}])


def test_same_requests_exact_values_take_the_rank_note():
    t = _table({"count": 0, "p50": 5, "p99": -700}, "summary")
    assert phases.negative_percentile_diff(t)
    assert not phases.negative_diff_other_requests(t)


def test_different_requests_take_the_cover_note():
    t = _table({"p50": -28564, "p95": 10}, "bucket bound")   # no count: whole seconds only
    assert phases.negative_diff_other_requests(t)
    assert not phases.negative_percentile_diff(t)


def test_no_negative_diff_no_note():
    for t in (_table({"count": 0, "p50": 3, "p99": 0}, "summary"), _table({"p50": 1}, "bucket bound")):
        assert not phases.negative_percentile_diff(t)
        assert not phases.negative_diff_other_requests(t)
