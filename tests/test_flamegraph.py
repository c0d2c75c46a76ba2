"""Rendering: SVG flame graphs (inferno pinned by setup, or FLAMEGRAPH_DIR's
flamegraph.pl), differential graphs, category colours, and the sub-second heat maps
(PNG via matplotlib Agg) of CPU samples and request latency -- on the real samples.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

from helpers.cli import mp
from mongoprobe.analysis import cpu_categories as categories, run_profile
from mongoprobe.views import flamegraph, heatmap
from mongoprobe.model import stack_samples as stacks

SAMPLES = ROOT / "samples" / "stacks"
PERF = SAMPLES / "perf-ferretdb-mixedload.txt"
PROFILE_BT = SAMPLES / "bpftrace-profile-ferretdb.txt"
SNOOP = ROOT / "samples" / "probes" / "mongo_snoop-ferretdb.txt"
EVENTS = SAMPLES / "latency-events-ferretdb.jsonl"


@pytest.fixture
def inferno(monkeypatch) -> None:
    monkeypatch.delenv("FLAMEGRAPH_DIR", raising=False)
    if not flamegraph.inferno_bin().exists():
        pytest.skip(f"{flamegraph.inferno_bin()} not installed: run scripts/setup.sh")


def _svg_frames(svg: str) -> list[str]:
    return re.findall(r"<title>([^<]*?) \(", svg)


def test_setup_pins_the_same_inferno_version() -> None:
    text = (ROOT / "scripts" / "setup.sh").read_text()
    m = re.search(r"^INFERNO_VERSION=(\S+)", text, re.M)
    assert m and m.group(1) == flamegraph.INFERNO_VERSION
    assert "cargo\" install inferno --version \"$INFERNO_VERSION\" --locked" in text
    assert re.search(r"^\s+matplotlib==3\.11\.2$", (ROOT / "setup.cfg").read_text(), re.M)


def test_svg_has_ferretdb_go_frames_sqlite_and_the_title(inferno, tmp_path) -> None:
    out = tmp_path / "cpu.svg"
    r = mp("flamegraph", str(PERF), "--pid", "11868", "-o", str(out))
    assert r.returncode == 0, r.stderr
    assert r.stderr == f"mongoprobe: wrote {out} (894 samples)\n" and r.stdout == ""
    svg = out.read_text()
    assert svg.startswith("<?xml") and svg.rstrip().endswith("</svg>")
    frames = _svg_frames(svg)
    assert any(f.startswith("github.com/FerretDB/FerretDB/internal/clientconn.(*conn).run")
               for f in frames)
    assert any(f.startswith("modernc.org/sqlite/lib._sqlite3VdbeExec") for f in frames)
    assert "perf-ferretdb-mixedload - pid 11868" in svg
    # frames of a category carry its colour (palette.map through --cp)
    colors = {r.name: r.color for r in categories.load_rules()}
    assert f'fill="{colors["sqlite"]}"' in svg and f'fill="{colors["gc"]}"' in svg


def test_phase_flamegraph_title_names_run_phase_pid(inferno, tmp_path) -> None:
    df = stacks.load(PROFILE_BT)
    ph = tmp_path / "phases.json"
    ph.write_text(json.dumps({"phases": [{"name": "warm", "start": 0, "end": 2},
                                         {"name": "steady", "start": 2, "end": 10}]}))
    out = tmp_path / "steady.svg"
    r = mp("flamegraph", str(PROFILE_BT), "--phases", str(ph), "--phase", "steady",
           "-o", str(out))
    assert r.returncode == 0, r.stderr
    n = int(stacks.slice_time(df, 2, 10)["count"].sum())
    assert r.stderr == f"mongoprobe: wrote {out} ({n} samples)\n"
    svg = out.read_text()
    assert "bpftrace-profile-ferretdb - phase steady - pid 17259" in svg
    assert f"<title>all ({n:,} samples, 100%)" in svg
    r = mp("flamegraph", str(PROFILE_BT), "--phase", "steady", "-o", str(out))
    assert r.returncode == 1 and "--phases" in r.stderr


def test_time_range_and_differential(inferno, tmp_path) -> None:
    df = stacks.load(PERF)
    t0 = int(df["second"].min())
    out = tmp_path / "range.svg"
    r = mp("flamegraph", str(PERF), "--from", str(t0 + 2), "--to", str(t0 + 4), "-o", str(out))
    assert r.returncode == 0, r.stderr
    n = int(stacks.slice_time(df, t0 + 2, t0 + 4)["count"].sum())
    assert f"({n} samples)" in r.stderr
    dout = tmp_path / "diff.svg"
    r = mp("flamegraph", str(PERF), "--diff", f"{t0}:{t0 + 4}", f"{t0 + 4}:{t0 + 9}",
           "-o", str(dout))
    assert r.returncode == 0, r.stderr
    svg = dout.read_text()
    assert f"Differential: perf-ferretdb-mixedload - phase {t0}-{t0 + 4} s -&gt; " \
           f"{t0 + 4}-{t0 + 9} s" in svg or "Differential: perf-ferretdb-mixedload" in svg
    # differential hues: some frames red-ish (more), some blue-ish (less)
    fills = re.findall(r'fill="rgb\((\d+),(\d+),(\d+)\)"', svg)
    assert any(int(r_) == 255 and int(b) < 250 for r_, _g, b in fills)
    assert any(int(b) == 255 and int(r_) < 250 for r_, _g, b in fills)
    r = mp("flamegraph", str(PERF), "--diff", "nope", "x", "-o", str(dout))
    assert r.returncode == 1 and "FROM:TO" in r.stderr


def test_render_api_and_empty_slice(inferno, tmp_path) -> None:
    counts = stacks.fold(SAMPLES / "dtrace-mongod-memcntl-ustack.txt")
    out = flamegraph.render(counts, tmp_path / "d.svg", title=flamegraph.title_for(
        "seed", phase="load", pid=24426))
    svg = out.read_text()
    assert "seed - phase load - pid 24426" in svg and "libc.so.1`msync" in svg
    with pytest.raises(flamegraph.RenderError):
        flamegraph.render({}, tmp_path / "e.svg")
    # a folded file's path works too (mongoprobe profile -o X.svg renders its .folded)
    f = tmp_path / "d.folded"
    f.write_text("".join(stacks.folded_lines(counts)))
    assert "libc.so.1`msync" in flamegraph.render(f, tmp_path / "f.svg", title="t").read_text()
    r = mp("flamegraph", str(PERF), "--from", "0", "--to", "1", "-o", str(tmp_path / "x.svg"))
    assert r.returncode == 1 and "no samples" in r.stderr


def test_flamegraph_dir_selects_flamegraph_pl(tmp_path, monkeypatch) -> None:
    """FLAMEGRAPH_DIR wins over inferno; its flamegraph.pl gets the same options."""
    import shutil
    if not shutil.which("perl"):
        pytest.skip("perl is not installed")
    fg = tmp_path / "FlameGraph"
    fg.mkdir()
    # A stand-in with flamegraph.pl's interface: reads folded lines, writes an SVG.
    (fg / "flamegraph.pl").write_text(
        '#!/usr/bin/perl\nmy @a = @ARGV; my $n = 0; my $f = pop @a;\n'
        'open(F, $f); while (<F>) { $n += $1 if / (\\d+)$/ } close F;\n'
        'my $cp = -e "palette.map" ? "palette" : "nopalette";\n'
        'print "<svg>@a $n $cp</svg>\\n";\n')
    monkeypatch.setenv("FLAMEGRAPH_DIR", str(fg))
    r = flamegraph.renderer()
    assert r.kind == "flamegraph.pl" and r.argv[-1].endswith("flamegraph.pl")
    out = flamegraph.render({"a;msync": 3, "a;b": 4}, tmp_path / "o.svg", title="T")
    assert out.read_text() == "<svg>--title T --countname samples --colors hot --cp 7 " \
                              "palette</svg>\n"
    monkeypatch.setenv("FLAMEGRAPH_DIR", str(tmp_path / "none"))
    with pytest.raises(flamegraph.RenderError, match="no flamegraph.pl"):
        flamegraph.renderer()


def test_palette_colours_frames_by_their_category() -> None:
    pal = flamegraph.palette({"x;modernc.org/sqlite/lib._sqlite3VdbeExec;memcpy": 1})
    rules = {r.name: r.color for r in categories.load_rules()}
    assert pal == {"modernc.org/sqlite/lib._sqlite3VdbeExec": rules["sqlite"]}


# --- runs (RUN/ directories of mongoprobe record) ------------------------------------------


class _Run:
    """What run_profile uses of mongoprobe.run.run_folder.Run."""

    def __init__(self, tmp_path: Path):
        self.path = tmp_path / "run-1"
        self.manifest = {"target": {"pid": 17259}}
        self.offset_ns = 1_700_000_000_000_000_000

    def file(self, key: str):
        return PROFILE_BT if key == "profile" else None

    def stack_table(self, which: str):
        from mongoprobe.model.stack_samples import load
        return load(self.file(which), bucket=None)


def test_run_category_shares_and_flamegraphs(inferno, tmp_path) -> None:
    run = _Run(tmp_path)
    df = run_profile.run_stacks(run)
    meta = df.attrs["meta"]
    mono0, el0 = meta["clock"]
    base = (mono0 - el0 + run.offset_ns) / 1e9
    assert abs(df["time"].min() - base) < 5 and df["time"].min() >= base - 1
    ph = [{"name": "early", "start": base, "end": base + 2},
          {"name": "late", "start": base + 2, "end": base + 60}]
    shares = run_profile.run_category_shares(run, ph)
    assert set(shares) == {"early", "late"}
    assert abs(sum(shares["late"].values()) - 1) < 1e-4 and shares["late"]["sqlite"] > 0
    svgs = run_profile.run_flamegraphs(run, ph, diff=("early", "late"))
    titles = [t for t, _ in svgs]
    assert titles == ["run-1 - phase early - pid 17259", "run-1 - phase late - pid 17259",
                      "Differential: run-1 - phase early -> late - pid 17259"]
    assert all(s.startswith("<?xml") for _, s in svgs)


# --- heat maps ------------------------------------------------------------------------------


def test_cpu_heatmap_png(tmp_path) -> None:
    out = tmp_path / "cpu.png"
    r = mp("heatmap", str(PERF), "-o", str(out))
    assert r.returncode == 0, r.stderr
    assert out.stat().st_size > 5000
    assert heatmap.png_size(out) == heatmap.SIZE_PX


def test_heatmap_grid_counts_every_sample() -> None:
    df = stacks.load(PERF, bucket=None)
    t0, m = heatmap.grid(df["time"], df["count"], stat="sum")
    assert m.shape == (heatmap.ROWS, int(df["second"].max()) - int(df["second"].min()) + 1)
    assert int(m.sum()) == 894 and t0 == int(df["second"].min())
    # bpftrace with millisecond keys spreads over the second's offsets too
    bt = stacks.load(SAMPLES / "bpftrace-ferretdb-ms.txt", bucket=None)
    _t0, mb = heatmap.grid(bt["time"], bt["count"], stat="sum")
    # count: the events in a cell, whatever their values; sum: their values
    _t0, nb = heatmap.grid([0.1, 0.105, 1.5], [5.0, 7.0, 1.0], stat="count")
    _t0, sb = heatmap.grid([0.1, 0.105, 1.5], [5.0, 7.0, 1.0], stat="sum")
    assert (nb[5, 0], nb[25, 1], sb[5, 0], nb.sum()) == (2, 1, 12, 3)
    assert (mb.sum(axis=1) > 0).sum() > 40 and int(mb.sum()) == int(bt["count"].sum())


def test_latency_heatmap_png_from_real_events(tmp_path) -> None:
    from mongoprobe.formats import wire_events
    ev = wire_events.parse_snoop(SNOOP.read_text().splitlines(), str(SNOOP))
    assert len(ev) > 50
    out = heatmap.latency_heatmap(ev, tmp_path / "lat.png")
    assert heatmap.png_size(out) == heatmap.SIZE_PX and out.stat().st_size > 5000
    t0, m = heatmap.grid(ev["elapsed_s"], ev["latency_ns"] / 1e6, stat="max")
    assert abs(float(m[~(m != m)].max()) - ev["latency_ns"].max() / 1e6) < 1e-9
    out2 = tmp_path / "lat-count.png"
    r = mp("heatmap", str(SNOOP), "--what", "latency", "--stat", "count", "-o", str(out2))
    assert r.returncode == 0, r.stderr
    assert heatmap.png_size(out2) == heatmap.SIZE_PX


def test_latency_heatmap_of_a_run_from_batches_beyond_memory(tmp_path, monkeypatch) -> None:
    """A run's events are drawn batch by batch from its Parquet file: the same cells
    as from the whole table, also when the events are too many to hold as one table
    (the sample run's 2,316 with the limit at 10 and batches of 500)."""
    import numpy as np

    import mongoprobe
    from mongoprobe import cli
    from mongoprobe.model import event_store

    run_dir = ROOT / "samples" / "load" / "run-ferretdb"
    run = mongoprobe.load_run(run_dir)
    whole, t0 = run.events, run.manifest["start"]
    monkeypatch.setattr(event_store, "IN_MEMORY_MAX", 10)
    monkeypatch.setattr(event_store, "BATCH", 500)
    src = event_store.ParquetEvents(run_dir / "latency.events.parquet")
    with pytest.raises(event_store.TooManyEvents):
        src.frame()
    for stat in ("max", "mean", "count"):
        _t0, want = heatmap.grid(whole["time"], whole["latency_ns"] / 1e6, stat=stat, t0=t0)
        cells, batches = heatmap.Cells(t0, stat=stat), 0
        for t, _code, ns in src.batches():
            cells.feed(t, ns / 1e6)
            batches += 1
        assert batches == 5
        np.testing.assert_allclose(cells.matrix(), want, rtol=1e-12, equal_nan=True)
    assert int(want.sum()) == len(whole)                # count: every event drawn once
    out = tmp_path / "lat.png"
    assert cli.main(["heatmap", str(run_dir), "--what", "latency", "-o", str(out)]) == 0
    assert heatmap.png_size(out) == heatmap.SIZE_PX


def test_latency_heatmap_of_events_jsonl(tmp_path) -> None:
    """mongoprobe latency --events output (wall-clock times) under mixedload."""
    from mongoprobe.formats import wire_events
    ev = wire_events.parse_events_json(EVENTS.read_text().splitlines(), str(EVENTS))
    t0, m = heatmap.grid(ev["time"], None)
    assert int(m.sum()) == len(ev) > 1000 and m.shape[1] >= 3
    assert (m.sum(axis=0) > 0).all() and (m.sum(axis=1) > 0).sum() > 40
    out = tmp_path / "lat.png"
    r = mp("heatmap", str(EVENTS), "--what", "latency", "-o", str(out))
    assert r.returncode == 0, r.stderr
    assert heatmap.png_size(out) == heatmap.SIZE_PX and out.stat().st_size > 10000


def test_heatmap_of_untimed_input_fails_cleanly(tmp_path) -> None:
    r = mp("heatmap", str(SAMPLES / "dtrace-mongod-memcntl-ustack.txt"), "-o",
           str(tmp_path / "x.png"))
    assert r.returncode == 1 and r.stderr.count("\n") == 1 and "no timed events" in r.stderr
    assert not (tmp_path / "x.png").exists()


def test_heatmap_grid_counts_from_the_origin_given() -> None:
    """A run's heat maps count from the recording's start (as every plot of its report),
    not from the first event: the columns are the run's seconds, offsets from t0."""
    t0, m = heatmap.grid([10.5, 12.25], t0=10.2)
    assert t0 == 10.2 and m.shape == (heatmap.ROWS, 3)
    assert m[15, 0] == 1 and m[2, 2] == 1 and m.sum() == 2   # 0.3 s and 2.05 s in
    assert heatmap.grid([10.5, 12.25])[0] == 10           # no origin: the first second
    with pytest.raises(ValueError, match="after the origin"):
        heatmap.grid([10.5], t0=11)
