"""mongoprobe series and compare on real recordings of the embedded FerretDB: a series
over the built-in load's insert rate, its columns in numeric order and the doubled rate
told from noise; the document size's series, whose KB written per operation rises.

The recordings need no latency probe (the tool's own rates and iostat carry what is
checked), so each costs a FerretDB start and its load. Needs root (iostat's devices,
the target) and the FerretDB that setup builds; skips with the reason elsewhere."""

from __future__ import annotations

import json
import sys

import pytest

from helpers.cli import mp

pytestmark = [pytest.mark.target]


def _series(tmp_path_factory, name: str, vary: str, phases: str, probes: str, *load: str):
    from mongoprobe.run import target

    if not target.ferretdb_binary().exists():
        pytest.skip(f"{target.ferretdb_binary()} not built: run scripts/setup.sh")
    out = tmp_path_factory.mktemp(name) / "series"
    r = mp("series", "-o", str(out), "--repeat", "1", "--vary", vary, "--target", "embedded",
           "--probes", probes, "--", sys.executable, "-m", "mongoprobe", "load",
           "--phases", phases, *load, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    return out


@pytest.fixture(scope="module")
def rates(tmp_path_factory):
    # given out of order: the columns come out in numeric order (test_compare.py checks
    # an order that differs from the strings'); 9 blocks of 1 s a side, so the doubled
    # rate stays significant after Holm's correction however the seconds jitter
    return _series(tmp_path_factory, "rates", "rate=40,20", "1i@{rate}.0q:10s", "vmstat")


@pytest.fixture(scope="module")
def pads(tmp_path_factory):
    # 1-s blocks of iostat's KB written are noisy (SQLite's writes come in bursts): 11
    # a side, enough for a p under 0.05 after Holm's correction over the table
    return _series(tmp_path_factory, "pads", "pad=256,4096", "2i.0q:12s", "vmstat,iostat",
                   "--pad", "{pad}")


def test_a_series_is_recorded_interleaved_and_labelled(rates):
    meta = json.loads((rates / "series.json").read_text())
    assert meta["runs"] == ["rate=40.1", "rate=20.1"]
    m = json.loads((rates / "rate=20.1" / "manifest.json").read_text())
    assert m["labels"] == {"rate": "20", "rep": "1"}


def test_the_series_columns_in_numeric_order_and_a_doubled_rate(rates):
    r = mp("compare", str(rates), "--json")
    assert r.returncode == 0, r.stderr
    c = json.loads(r.stdout)
    assert list(c["groups"]) == ["rate=20", "rate=40"]      # numeric order, the first base
    (p,) = c["phases"]
    ips = p["metrics"]["ips_avg"]
    assert ips["delta_pct"]["rate=40"] == pytest.approx(100, abs=5)
    assert ips["significant"] == {"rate=40": True}, ips
    assert any("matched by their order" in w for w in c["warnings"])  # 1i@20.0q, 1i@40.0q
    text = mp("compare", str(rates)).stdout
    head = next(line for line in text.splitlines() if "rate=20" in line and "rate=40" in line)
    assert head.index("rate=20") < head.index("rate=40")
    assert max(len(line) for line in text.splitlines()) < 80


def test_larger_documents_write_more_per_operation(pads):
    c = json.loads(mp("compare", str(pads), "--json").stdout)
    (p,) = c["phases"]
    w = p["metrics"]["wkb_per_op"]
    assert w["values"]["pad=4096"] > w["values"]["pad=256"]
    assert w["significant"]["pad=4096"] is True, w
