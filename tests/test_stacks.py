"""mongoprobe.model.stack_samples and its parsers (formats/perf_script, bpftrace_stacks, dtrace_stacks).

Every real sample in samples/stacks/ is folded and diffed against its golden files in
tests/expected/stacks/ (tests/golden.py: ``MONGOPROBE_BLESS=1`` re-blesses them; review
the diff). The perf script samples must fold byte for byte as inferno-collapse-perf folds them,
and the DTrace sample as inferno-collapse-dtrace; diffs as inferno-diff-folded. Damaged
copies of the samples must fail on the right line.
"""

from __future__ import annotations

import io
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from helpers.cli import mp
import golden
from mongoprobe.analysis import cpu_categories as categories
from mongoprobe.model import stack_samples as stacks
from mongoprobe.formats import bpftrace_stacks, perf_script
from mongoprobe.formats.errors import FormatError

ROOT = Path(__file__).resolve().parent.parent

SAMPLES = ROOT / "samples" / "stacks"
CASES = sorted(p.name for p in SAMPLES.iterdir()
               if p.name.startswith(("perf-", "bpftrace-", "dtrace-")))
FORMAT_OF = {"perf": "perf", "bpftrace": "bpftrace", "dtrace": "dtrace"}
TABLE_CASES = ["perf-ferretdb-small.txt", "bpftrace-ferretdb-ms.txt",
               "dtrace-mongod-memcntl-ustack.txt"]
PERF_CASES = [c for c in CASES if c.startswith("perf-")]


def _sample(case: str) -> Path:
    return SAMPLES / case


def _stem(case: str) -> str:
    return case.rsplit(".", 1)[0]


def render(case: str) -> dict[str, str]:
    """The golden files of one sample (paths under tests/expected/), as text."""
    p = _sample(case)
    out = {f"stacks/{_stem(case)}.folded": "".join(stacks.folded_lines(stacks.fold(p)))}
    df = stacks.load(p)
    out[f"stacks/{_stem(case)}.categories.csv"] = categories.category_table(df).to_csv(
        index=False, lineterminator="\n", float_format="%.6f")
    if case in TABLE_CASES:
        out[f"stacks/{_stem(case)}.table.csv"] = df.to_csv(
            index=False, lineterminator="\n", float_format="%.6f")
    return out


def _inferno(tool: str) -> Path:
    from mongoprobe.views.flamegraph import inferno_bin
    b = inferno_bin(tool)
    if not b.exists():
        pytest.skip(f"{b} not installed: run scripts/setup.sh")
    return b


# --- golden files -------------------------------------------------------------------------


def test_samples_are_there_and_small() -> None:
    kinds = {c.split("-")[0] for c in CASES}
    assert kinds >= {"perf", "bpftrace", "dtrace"}
    assert len(PERF_CASES) >= 2
    for c in CASES:
        assert _sample(c).stat().st_size < 3_000_000, c


@pytest.mark.parametrize("case", CASES)
def test_sample_matches_golden(case: str) -> None:
    for rel, text in render(case).items():
        golden.check(rel, text)


def test_every_golden_file_has_its_sample() -> None:
    stems = {_stem(c) for c in CASES}
    for p in golden.files("stacks"):
        assert p.name.split(".")[0] in stems, f"stale golden file {p.name}"


@pytest.mark.parametrize("case", CASES)
def test_detect_each_sample(case: str) -> None:
    with stacks.open_input(_sample(case)) as (fh, src):
        assert stacks.detect(stacks._peek(fh), src) == case.split("-")[0]


def test_detect_rejects_other_text(tmp_path) -> None:
    p = tmp_path / "x.txt"
    p.write_text("procs -----------memory----------\n r  b   swpd   free\n")
    with pytest.raises(FormatError) as e:
        stacks.load(p)
    assert e.value.line == 1 and "perf script" in e.value.expected
    # the other samples' formats are not taken for stacks
    snoop = ROOT / "samples" / "probes" / "mongo_snoop-ferretdb.txt"
    with pytest.raises(FormatError):
        stacks.detect(snoop.read_text()[:65536], str(snoop))


def test_a_stack_probe_that_printed_no_map_is_empty(tmp_path) -> None:
    """offcpu.bt's whole output on an idle FerretDB for a 1 s recording: its header and
    no map (nothing past the threshold). Empty stacks, not an unreadable file."""
    p = tmp_path / "offcpu.bt.txt"
    p.write_text("Attaching 4 probes...\n"
                 "# clock monotonic_ns=43331269014115 elapsed_ns=348673\n"
                 "# offcpu.bt pid=18116 tid=0 unit=us\n"
                 "# keys: time_s,tid,comm,kstack,ustack\n"
                 "Tracing off-CPU time of PID 18116 (sched_switch)... Hit Ctrl-C to end.\n")
    df = stacks.load(p)
    assert len(df) == 0 and df.attrs["format"] == "bpftrace"
    assert df.attrs["meta"]["unit"] == "us" and df.attrs["meta"]["pid"] == 18116
    assert stacks.fold(p) == {}


# --- inferno byte compatibility ----------------------------------------------------------


@pytest.mark.parametrize("case", PERF_CASES)
def test_perf_fold_is_inferno_collapse_perf_byte_for_byte(case: str) -> None:
    b = _inferno("inferno-collapse-perf")
    want = subprocess.run([str(b), str(_sample(case))], capture_output=True, check=True).stdout
    got = "".join(stacks.folded_lines(stacks.fold(_sample(case)))).encode()
    assert got == want
    assert len(want.splitlines()) > 100


def test_perf_fold_from_stdin_cli_matches_inferno() -> None:
    b = _inferno("inferno-collapse-perf")
    case = _sample(PERF_CASES[0])
    want = subprocess.run([str(b), str(case)], capture_output=True, check=True).stdout
    with open(case, "rb") as fh:
        r = subprocess.run([sys.executable, "-m", "mongoprobe", "fold", "-"], stdin=fh,
                           capture_output=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert r.stdout == want and r.stderr == b""


def test_dtrace_fold_is_inferno_collapse_dtrace() -> None:
    b = _inferno("inferno-collapse-dtrace")
    p = _sample("dtrace-mongod-memcntl-ustack.txt")
    want = subprocess.run([str(b), str(p)], capture_output=True, check=True).stdout
    assert "".join(stacks.folded_lines(stacks.fold(p))).encode() == want


def test_perf_concatenated_input_folds_like_inferno(tmp_path) -> None:
    """Several chunks (the reader works in 4 MiB blocks): still the same bytes."""
    b = _inferno("inferno-collapse-perf")
    big = tmp_path / "big.perf"
    data = _sample("perf-ferretdb-mixedload.txt").read_bytes()
    big.write_bytes(data * 3)
    want = subprocess.run([str(b), str(big)], capture_output=True, check=True).stdout
    assert "".join(stacks.folded_lines(stacks.fold(big))).encode() == want
    # and with a tiny block size: records cut anywhere by the chunking
    with open(big, "rb") as fh:
        counts: dict[str, int] = {}
        for _t, _p, _i, comm, frames, _c, w in _read_small_chunks(fh):
            k = comm + ";" + frames
            counts[k] = counts.get(k, 0) + w
    assert "".join(stacks.folded_lines(counts)).encode() == want


def test_perf_comment_and_blank_looking_lines_fold_like_inferno(tmp_path) -> None:
    """Comment lines (perf script --header) are skipped and a line of spaces ends a
    sample, as in inferno: such records take the line-by-line path."""
    b = _inferno("inferno-collapse-perf")
    recs = _sample("perf-ferretdb-small.txt").read_text().split("\n\n")
    recs[0] = "# ========\n# captured on: x\n# ========\n#\n" + recs[0]
    for i in range(5, 60, 7):
        recs[i] = recs[i] + "\n   "                  # separator "\n   \n\n"
    for i in range(8, 60, 9):
        head, _, body = recs[i].partition("\n")
        recs[i] = head + "\n# a comment inside\n" + body
    p = tmp_path / "odd.perf"
    p.write_text("\n\n".join(recs))
    want = subprocess.run([str(b), str(p)], capture_output=True, check=True).stdout
    assert "".join(stacks.folded_lines(stacks.fold(p))).encode() == want


def _read_small_chunks(fh):
    folder = perf_script._Folder("big")
    for block, lineno in perf_script.text_blocks(fh, size=777):
        yield from perf_script._records(folder, block, lineno)


@pytest.mark.root
@pytest.mark.target
def test_live_perf_profile_of_ferretdb_folds_like_inferno(ferretdb, tmp_path) -> None:
    """A fresh perf profile of the real target under load: inferno's bytes, FerretDB's
    Go frames and SQLite in it."""
    import threading

    if os.geteuid() != 0 or not shutil.which("perf"):
        pytest.skip("needs root and perf (linux-perf)")
    b = _inferno("inferno-collapse-perf")
    from mongoprobe.load import mixed_workload as mixedload
    load = threading.Thread(target=mixedload.run, args=(ferretdb.uri, 4, 15), daemon=True)
    load.start()
    data = tmp_path / "perf.data"
    r = subprocess.run(["perf", "record", "-F", "99", "-g", "-p", str(ferretdb.pid), "-o",
                        str(data), "--", "sleep", "3"], capture_output=True, text=True,
                       timeout=120)
    load.join(300)
    if r.returncode != 0:
        pytest.skip(f"perf record failed here: {r.stderr.strip()[-200:]}")
    txt = tmp_path / "perf.txt"
    with open(txt, "w") as fh:
        subprocess.run(["perf", "script", "-i", str(data)], stdout=fh, check=True,
                       stderr=subprocess.DEVNULL, timeout=300)
    want = subprocess.run([str(b), str(txt)], capture_output=True, check=True).stdout
    counts = stacks.fold(txt)
    assert "".join(stacks.folded_lines(counts)).encode() == want
    text = want.decode()
    assert "github.com/FerretDB/FerretDB/internal/" in text and "modernc.org/sqlite" in text
    t = categories.category_table(stacks.load(txt))
    assert {"sqlite", "ferretdb"} <= set(t["category"])


# --- the table -----------------------------------------------------------------------------


@pytest.mark.parametrize("case", CASES)
def test_table_folds_like_the_stream(case: str) -> None:
    df = stacks.load(_sample(case))
    assert list(df.columns) == stacks.COLUMNS
    assert [str(df[c].dtype) for c in ("second", "pid", "tid", "count", "weight")] == \
        ["int64"] * 5
    assert stacks.folded(df) == stacks.fold(_sample(case))
    assert (df["count"] > 0).all() and (df["weight"] > 0).all()
    assert df.attrs["format"] == case.split("-")[0]


def test_perf_table_times_and_threads() -> None:
    df = stacks.load(_sample("perf-ferretdb-mixedload.txt"))
    assert df.attrs["stats"] == {"samples": 894, "skipped_events": 0, "empty": 0}
    assert int(df["count"].sum()) == 894
    assert (df["pid"] == -1).all()          # perf script printed tids only (-p PID)
    assert df["tid"].nunique() > 3 and set(df["comm"]) == {"ferretdb"}
    assert (df["second"] == df["time"].astype("int64")).all()
    assert df["second"].max() - df["second"].min() in (7, 8)
    fine = stacks.load(_sample("perf-ferretdb-mixedload.txt"), bucket=None)
    assert int(fine["count"].sum()) == 894 and fine["time"].nunique() > 800


def test_perf_pid_tid_form_and_period() -> None:
    """perf script -F comm,pid,tid,time,period,event,ip,sym,dso prints PID/TID."""
    text = _sample("perf-ferretdb-small.txt").read_text()
    rec = text.split("\n\n")[1]
    head, _, body = rec.partition("\n")
    comm, _pid, tid, rest = perf_script._event_parts(head)
    changed = head.replace(f" {tid} ", f" 4127/{tid} ", 1) + "\n" + body + "\n"
    (s,) = list(perf_script.read(io.BytesIO(changed.encode())))
    assert s[1] == 4127 and s[2] == int(tid) and s[3] == comm
    assert s[6] == int(rest.split(":")[1].split()[0])   # the period is the weight


def test_perf_other_events_are_skipped_and_counted() -> None:
    text = _sample("perf-ferretdb-small.txt").read_text()
    recs = text.split("\n\n")
    recs[3] = recs[3].replace(" cycles:", " instructions:", 1)
    stats: dict = {}
    got = list(perf_script.read(io.BytesIO("\n\n".join(recs).encode()), "x", stats))
    assert stats["skipped_events"] == 1 and len(got) == stats["samples"] == 155


def test_slices_partition_the_samples(tmp_path) -> None:
    df = stacks.load(_sample("perf-ferretdb-mixedload.txt"))
    t0, t1 = int(df["second"].min()), int(df["second"].max()) + 1
    mid = (t0 + t1) // 2
    a, b = stacks.slice_time(df, t0, mid), stacks.slice_time(df, mid, t1)
    assert len(a) and len(b)
    assert int(a["count"].sum() + b["count"].sum()) == int(df["count"].sum())
    assert a["time"].max() < mid <= b["time"].min()
    ph = tmp_path / "phases.json"
    ph.write_text(json.dumps({"phases": [{"name": "first", "start": t0, "end": mid},
                                         {"name": "second", "start": mid, "end": t1}]}))
    phases = stacks.phases_from(ph)
    assert [p.name for p in phases] == ["first", "second"]
    parts = stacks.by_phase(df, phases)
    assert parts["first"].equals(a) and parts["second"].equals(b)
    csv = tmp_path / "phases.csv"
    csv.write_text(f"name,start,end\nfirst,{t0},{mid}\n")
    assert stacks.phases_from(csv) == phases[:1]
    # no time at all (DTrace): dropped by any bound
    d = stacks.load(_sample("dtrace-mongod-memcntl-ustack.txt"))
    assert d["time"].isna().all() and (d["second"] == -1).all()
    assert len(stacks.slice_time(d, 0, 1e12)) == 0 and len(stacks.slice_time(d)) == 1


# --- differential ---------------------------------------------------------------------------


def _two_halves():
    df = stacks.load(_sample("perf-ferretdb-mixedload.txt"))
    mid = int(df["second"].median())
    return stacks.folded(stacks.slice_time(df, None, mid)), \
        stacks.folded(stacks.slice_time(df, mid, None))


@pytest.mark.parametrize("normalize", [False, True])
def test_diff_folded_is_inferno_diff_folded(tmp_path, normalize: bool) -> None:
    b = _inferno("inferno-diff-folded")
    a1, a2 = _two_halves()
    f1, f2 = tmp_path / "a.folded", tmp_path / "b.folded"
    f1.write_text("".join(stacks.folded_lines(a1)))
    f2.write_text("".join(stacks.folded_lines(a2)))
    argv = [str(b), *(["-n"] if normalize else []), str(f1), str(f2)]
    want = subprocess.run(argv, capture_output=True, check=True, text=True).stdout
    got = "".join(stacks.diff_lines(stacks.diff_folded(a1, a2, normalize=normalize)))
    assert sorted(got.splitlines()) == sorted(want.splitlines())   # inferno: hash order
    rows = stacks.diff_folded(a1, a2)
    assert any(x == 0 for _s, x, _y in rows) and any(y == 0 for _s, _x, y in rows)
    assert sum(x for _s, x, _y in rows) == sum(a1.values())
    assert sum(y for _s, _x, y in rows) == sum(a2.values())


# --- categories and the flat profile ------------------------------------------------------


@pytest.mark.parametrize("case", ["perf-ferretdb-mixedload.txt",
                                  "bpftrace-profile-ferretdb.txt",
                                  "bpftrace-ferretdb-s.json"])
def test_ferretdb_and_sqlite_categories(case: str) -> None:
    t = categories.category_table(stacks.load(_sample(case)))
    share = dict(zip(t["category"], t["share"]))
    assert abs(sum(share.values()) - 1) < 1e-9
    for c in ("ferretdb", "ferretdb-bson", "sqlite", "gc", "allocator"):
        assert share.get(c, 0) > 0.01, (c, share)
    assert share.get("other", 0) < 0.10
    assert set(share) <= {r.name for r in categories.load_rules()} | {"other"}


def test_dtrace_seed_stack_is_a_flush() -> None:
    t = categories.category_table(stacks.load(_sample("dtrace-mongod-memcntl-ustack.txt")))
    assert t.to_dict(orient="records") == [
        {"phase": "all", "category": "flush", "samples": 19, "weight": 19, "share": 1.0}]


def test_category_is_first_matching_frame_from_the_leaf(tmp_path) -> None:
    rules = tmp_path / "r.toml"
    rules.write_text('[[category]]\nname = "a"\nmatch = ["^alloc"]\n'
                     '[[category]]\nname = "b"\nmatch = ["^bs", "alloc_b"]\n')
    c = categories.Categorizer(categories.load_rules(rules))
    assert c.stack("main;bson_parse;alloc_x") == "a"      # leaf decides
    assert c.stack("main;bson_parse;memcpy") == "b"       # walk up past unmatched frames
    assert c.stack("main;alloc_b") == "a"                 # same frame: first rule in file
    assert c.stack("main;memcpy") == "other"
    rules.write_text('[[category]]\nname = "a"\nmatch = ["(unclosed"]\n')
    with pytest.raises(FormatError):
        categories.load_rules(rules)


def test_category_table_per_phase() -> None:
    df = stacks.load(_sample("bpftrace-ferretdb-ms.txt"))
    mid = float(df["time"].median())
    ph = [stacks.Phase("a", 0, mid), stacks.Phase("b", mid, 1e9)]
    t = categories.category_table(df, ph)
    assert list(t["phase"].unique()) == ["a", "b"]
    for _name, part in t.groupby("phase"):
        assert abs(part["share"].sum() - 1) < 1e-9
    assert int(t["samples"].sum()) == int(df["count"].sum())


def test_top_functions_flat_profile() -> None:
    df = stacks.load(_sample("perf-ferretdb-mixedload.txt"))
    t = categories.top_functions(df, 10000)
    assert abs(t["self_pct"].sum() - 100) < 1e-6
    assert (t["total"] >= t["self"]).all()
    top = categories.top_functions(df, 5)
    assert len(top) == 5 and list(top["self"]) == sorted(top["self"], reverse=True)
    root = t[t["function"] == "runtime.goexit.abi0"]
    assert float(root["total_pct"].iloc[0]) > 50 and int(root["self"].iloc[0]) == 0


# --- bpftrace specifics --------------------------------------------------------------------


def test_bpftrace_profile_bt_meta() -> None:
    stats, meta = {}, {}
    with open(_sample("bpftrace-profile-ferretdb.txt"), "rb") as fh:
        rows = list(bpftrace_stacks.read(fh, "p", stats, meta))
    assert meta["clock"][0] > meta["clock"][1] > 0
    assert meta["pid"] == 17259 and meta["scalars"]["samples_total"] == 282
    assert stats == {"entries": len(rows), "samples": 282, "empty": 0}
    assert {r[1] for r in rows} == {17259}
    assert {r[0] for r in rows} <= {0.0, 1.0, 2.0, 3.0, 4.0}


def test_bpftrace_keys_line_gives_ms_times_and_pid() -> None:
    df = stacks.load(_sample("bpftrace-ferretdb-ms.txt"), bucket=None)
    assert df.attrs["meta"]["keys"] == ["time_ms", "pid", "tid", "comm", "kstack", "ustack"]
    assert (df["pid"] == 17259).all()
    frac = df["time"] - df["time"].astype("int64")
    assert frac.nunique() > 100                      # sub-second resolution
    assert df.attrs["stats"]["empty"] == 1           # a stack-map collision, counted


def test_bpftrace_json_and_kernel_then_user_order() -> None:
    df = stacks.load(_sample("bpftrace-ferretdb-s.json"))
    assert df.attrs["format"] == "bpftrace"
    # user stack from its root first, kernel frames at the leaf end
    k = df[df["frames"].str.contains("entry_SYSCALL_64_after_hwframe")]
    assert len(k)
    for f in k["frames"]:
        fs = f.split(";")
        assert fs[0] == "runtime.goexit.abi0" or not fs[0].startswith("entry_")
        assert fs.index("entry_SYSCALL_64_after_hwframe") > 0


def test_bpftrace_split_key() -> None:
    key = ("1, 2, ferretdb, , \n    a.(*T).M[struct {},*x.Doc]+27\n    runtime.goexit+1\n")
    assert bpftrace_stacks.split_key(key, ", ") == [
        "1", "2", "ferretdb", "",
        "\n    a.(*T).M[struct {},*x.Doc]+27\n    runtime.goexit+1\n"]
    key = "1,2,ferretdb,\n    k+1\n,\n    u+2\n"
    assert bpftrace_stacks.split_key(key, ",") == ["1", "2", "ferretdb", "\n    k+1\n",
                                                   "\n    u+2\n"]
    assert bpftrace_stacks.frame_name("    0x7efede455b46") == "[unknown]"
    assert bpftrace_stacks.frame_name(
        "    7f01 runtime.mallocgc+0x12 (/usr/bin/ferretdb)") == "runtime.mallocgc"
    assert bpftrace_stacks.frame_name("    encoding/json.(*decodeState).value+178") == \
        "encoding/json.(*decodeState).value"


# --- damaged input -------------------------------------------------------------------------


def _damaged(tmp_path, case: str, lineno: int, new: str | None) -> Path:
    lines = _sample(case).read_text().splitlines(True)
    if new is None:
        lines = lines[:lineno]
    else:
        lines[lineno - 1] = new + "\n"
    p = tmp_path / case
    p.write_text("".join(lines))
    return p


def _line_of(case: str, pred, nth: int = 1) -> int:
    k = 0
    for n, line in enumerate(_sample(case).read_text().splitlines(), 1):
        if pred(line):
            k += 1
            if k == nth:
                return n
    raise AssertionError("no such line")


def test_perf_damaged_event_line(tmp_path) -> None:
    case = "perf-ferretdb-mixedload.txt"
    n = _line_of(case, lambda x: x.startswith("ferretdb"), 500)
    p = _damaged(tmp_path, case, n, "garbage where an event line should be")
    with pytest.raises(FormatError) as e:
        stacks.fold(p)
    assert (e.value.source, e.value.line) == (str(p), n)
    assert "event line" in str(e.value)


def test_perf_damaged_stack_line(tmp_path) -> None:
    case = "perf-ferretdb-mixedload.txt"
    n = _line_of(case, lambda x: x.startswith("\t"), 7000)
    p = _damaged(tmp_path, case, n, "\t55d0c0ffee runtime.mallocgc+0x12 no-module")
    with pytest.raises(FormatError) as e:
        stacks.load(p)
    assert e.value.line == n and "ADDRESS SYMBOL (MODULE)" in str(e.value)
    r = mp("fold", str(p))
    assert r.returncode == 1 and r.stdout == ""
    assert r.stderr == f"mongoprobe: {p}:{n}: expected a stack line 'ADDRESS SYMBOL " \
                       f"(MODULE)': '55d0c0ffee runtime.mallocgc+0x12 no-module'\n"


def test_perf_damaged_line_in_a_slow_path_record(tmp_path) -> None:
    """A record with a comment line inside is read line by line: errors still name
    the right line."""
    case = "perf-ferretdb-small.txt"
    lines = _sample(case).read_text().splitlines(True)
    n = _line_of(case, lambda x: x.startswith("\t"), 300)
    lines.insert(n - 1, "# a comment perf script --header would print\n")
    lines[n] = "\tnot a stack line\n"
    p = tmp_path / "slow.perf"
    p.write_text("".join(lines))
    with pytest.raises(FormatError) as e:
        stacks.fold(p)
    assert e.value.line == n + 1


def test_bpftrace_truncated_entry(tmp_path) -> None:
    case = "bpftrace-profile-ferretdb.txt"
    start = _line_of(case, lambda x: x.startswith("@["), 100)
    p = _damaged(tmp_path, case, start + 3, None)
    with pytest.raises(FormatError) as e:
        stacks.fold(p)
    assert e.value.line == start + 3 and f"begun on line {start}" in str(e.value)


def test_bpftrace_unindented_frame(tmp_path) -> None:
    case = "bpftrace-profile-ferretdb.txt"
    start = _line_of(case, lambda x: x.startswith("@["), 50)
    p = _damaged(tmp_path, case, start + 2, "garbage")
    with pytest.raises(FormatError) as e:
        stacks.fold(p)
    assert e.value.line == start + 2 and "indented stack frame" in str(e.value)


def test_dtrace_damaged(tmp_path) -> None:
    case = "dtrace-mongod-memcntl-ustack.txt"
    p = _damaged(tmp_path, case, 9, "this is not a frame")
    with pytest.raises(FormatError) as e:
        stacks.fold(p)
    assert e.value.line == 9
    p = _damaged(tmp_path, case, 10, None)
    with pytest.raises(FormatError) as e:
        stacks.fold(p, "dtrace")
    assert e.value.line == 10 and "ends inside" in str(e.value)


def test_folded_damaged(tmp_path) -> None:
    p = tmp_path / "x.folded"
    p.write_text("a;b 3\na;c 4\nbroken line\n")
    with pytest.raises(FormatError) as e:
        stacks.fold(p, "folded")
    assert e.value.line == 3
    p.write_text("a;b 3\na;c 4\na;b 1\n")
    assert stacks.fold(p) == {"a;b": 4, "a;c": 4}


# --- command line --------------------------------------------------------------------------


@pytest.mark.parametrize("case", CASES)
def test_cli_fold_prints_the_golden_file(case: str) -> None:
    r = mp("fold", str(_sample(case)))
    assert r.returncode == 0, r.stderr
    assert r.stdout == (golden.EXPECTED / "stacks" / f"{_stem(case)}.folded").read_text()
    if case == "bpftrace-ferretdb-ms.txt":
        assert r.stderr == "mongoprobe: 1 samples without a stack (bpftrace: stack map " \
                           "collisions; perf: all frames dropped)\n"
    else:
        assert r.stderr == ""


def test_cli_fold_wrong_format_and_missing_file(tmp_path) -> None:
    r = mp("fold", str(_sample("perf-ferretdb-small.txt")), "--format", "dtrace")
    assert r.returncode == 1 and r.stdout == "" and r.stderr.count("\n") == 1
    r = mp("fold", str(tmp_path / "nope.txt"))
    assert r.returncode == 1 and "No such file" in r.stderr


def test_cli_categories_and_top() -> None:
    r = mp("categories", str(_sample("perf-ferretdb-mixedload.txt")))
    assert r.returncode == 0 and r.stderr == ""
    lines = r.stdout.splitlines()
    assert lines[0].split() == ["PHASE", "CATEGORY", "SAMPLES", "SHARE"]
    assert any(x.split()[1] == "sqlite" for x in lines[1:])
    assert all(len(x) < 80 for x in lines)
    r = mp("categories", str(_sample("bpftrace-profile-ferretdb.txt")), "--json")
    doc = json.loads(r.stdout)
    assert doc["rules"].endswith("categories.toml")
    assert {"phase", "category", "samples", "weight", "share"} == set(doc["categories"][0])
    r = mp("top", str(_sample("perf-ferretdb-mixedload.txt")), "-n", "7")
    lines = r.stdout.splitlines()
    assert r.returncode == 0 and len(lines) == 8 and lines[0].split() == \
        ["SELF%", "TOTAL%", "FUNCTION"]
    assert all(len(x) < 80 for x in lines)
    r = mp("top", str(_sample("dtrace-mongod-memcntl-ustack.txt")), "--json")
    f = json.loads(r.stdout)["functions"]
    assert f[0]["function"] == "libc.so.1`memcntl" and f[0]["self_pct"] == 100.0


def test_cli_help_examples() -> None:
    for cmd in ("fold", "flamegraph", "heatmap", "categories", "top"):
        r = mp(cmd, "--help")
        assert r.returncode == 0 and "examples:" in r.stdout


def test_bpftrace_entry_with_an_empty_user_stack():
    # Real profile.bt output (a `mongoprobe record` run): a failed user-stack lookup
    # prints the key as "kstack, ]: N". The kernel frames are still a sample.
    from mongoprobe.model import stack_samples as stacks

    path = SAMPLES / "bpftrace-profile-empty-ustack.txt"
    df = stacks.load(path)
    assert int(df["count"].sum()) == 3
    kernel_only = df[df["frames"].str.endswith("try_to_wake_up;_raw_spin_unlock_irqrestore")]
    assert int(kernel_only["count"].sum()) == 1
