"""mongoprobe series and compare on real recordings of the embedded FerretDB: a series
over the built-in load's insert threads (1, 2 and 4, each held to 20 inserts/s), one
table with its columns in numeric order and the doubled rate told from noise; four
interleaved runs of one configuration against four more, where nothing may differ;
the document size's series, whose KB written per operation rises.

The recordings need no latency probe (the tool's own rates and iostat carry what is
checked), so each costs a FerretDB start and its load. Needs root (iostat's devices,
the target) and the FerretDB that setup builds; skips with the reason elsewhere."""

from __future__ import annotations

import json
import sys

import pytest

from helpers.cli import mp

pytestmark = [pytest.mark.target]


def _series(tmp_path_factory, name: str, vary: str, phases: str, probes: str, *load: str,
            repeat: int = 1, prefix: list[str] | None = None):
    from mongoprobe.run import target

    if not target.ferretdb_binary().exists():
        pytest.skip(f"{target.ferretdb_binary()} not built: run scripts/setup.sh")
    out = tmp_path_factory.mktemp(name) / "series"
    r = mp("series", "-o", str(out), "--repeat", str(repeat), "--vary", vary, "--target",
           "embedded", "--probes", probes, "--", *(prefix or []), sys.executable, "-m",
           "mongoprobe", "load", "--phases", phases, *load, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    return out


@pytest.fixture(scope="module")
def threads(tmp_path_factory):
    # given out of order: the columns come out in numeric order (test_compare.py checks
    # an order that differs from the strings'); 9 blocks of 1 s a side, so the doubled
    # rate stays significant after Holm's correction however the seconds jitter
    return _series(tmp_path_factory, "threads", "threads=4,1,2", "{threads}i@20.0q:10s",
                   "vmstat")


@pytest.fixture(scope="module")
def same(tmp_path_factory):
    # one configuration recorded 8 times, interleaved as two groups (env's CFG changes
    # nothing the load does); runs are the samples, so 1-s phases do
    return _series(tmp_path_factory, "same", "cfg=a,b", "1i@20.0q:1s", "vmstat",
                   repeat=4, prefix=["env", "CFG={cfg}"])


@pytest.fixture(scope="module")
def pads(tmp_path_factory):
    # 1-s blocks of iostat's KB written are noisy (SQLite's writes come in bursts, and
    # the device's count holds the other tests' writes): 11 a side, and 16-KB
    # documents (overflow pages) against 256-byte ones, whose inserts each write a few
    # pages anyway (4 KB: +40%, once not significant beside the suite)
    return _series(tmp_path_factory, "pads", "pad=256,16384", "2i.0q:12s",
                   "vmstat,iostat", "--pad", "{pad}")


def test_a_series_is_recorded_interleaved_and_labelled(threads, same):
    meta = json.loads((threads / "series.json").read_text())
    assert meta["runs"] == ["threads=4.1", "threads=1.1", "threads=2.1"]
    m = json.loads((threads / "threads=2.1" / "manifest.json").read_text())
    assert m["labels"] == {"threads": "2", "rep": "1"}
    # A B A B, not A A B B
    assert json.loads((same / "series.json").read_text())["runs"] == [
        f"cfg={c}.{k}" for k in range(1, 5) for c in "ab"]


def test_the_series_columns_in_numeric_order_and_a_doubled_rate(threads):
    r = mp("compare", str(threads), "--json")
    assert r.returncode == 0, r.stderr
    c = json.loads(r.stdout)
    assert list(c["groups"]) == ["threads=1", "threads=2", "threads=4"]  # the first: base
    (p,) = c["phases"]                                    # one table, matched by order
    assert any("matched by their order" in w for w in c["warnings"])  # 1i@20.0q, 2i@20.0q
    ips = p["metrics"]["ips_avg"]
    assert ips["delta_pct"]["threads=2"] == pytest.approx(100, abs=5)
    assert ips["delta_pct"]["threads=4"] == pytest.approx(300, abs=15)
    assert ips["significant"] == {"threads=2": True, "threads=4": True}, ips
    text = mp("compare", str(threads)).stdout
    head = next(line for line in text.splitlines() if "threads=1" in line and "threads=4" in line)
    assert head.index("threads=1") < head.index("threads=2") < head.index("threads=4")
    assert max(len(line) for line in text.splitlines()) < 80


def test_four_runs_against_four_of_one_configuration_differ_nowhere(same):
    c = json.loads(mp("compare", str(same), "--json").stdout)
    assert c["samples"] == "runs" and [len(v) for v in c["groups"].values()] == [4, 4]
    cells = [(ph["name"], m, cell) for ph in c["phases"] for m, cell in ph["metrics"].items()]
    assert cells and not [(n, m) for n, m, cell in cells if cell["significant"].get("cfg=b")]
    # 4 against 4, exact: no test can give under 2/70, and with the table's tests Holm's
    # correction leaves none able to pass, which the output says
    tested = [cell["p"]["cfg=b"] for _, _, cell in cells if "cfg=b" in cell["p"]]
    assert tested and min(tested) >= 2 / 70 - 1e-12
    assert any(w.startswith("no difference can be significant after Holm's correction")
               for w in c["warnings"]), c["warnings"]


def test_larger_documents_write_more_per_operation(pads):
    c = json.loads(mp("compare", str(pads), "--json").stdout)
    (p,) = c["phases"]
    w = p["metrics"]["wkb_per_op"]
    assert w["values"]["pad=16384"] > w["values"]["pad=256"]
    assert w["significant"]["pad=16384"] is True, w
