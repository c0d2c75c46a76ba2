"""formats.quantize: DTrace quantize, bpftrace hist and bcc print_log2_hist text.

Every real sample in samples/quantize/ is diffed against its golden CSVs in
tests/expected/quantize/ (tests/golden.py: MONGOPROBE_BLESS=1 re-blesses them), and checked
against what the tool itself printed next to it (DTrace's "total requests handled",
bpftrace's @count per key). Damaged copies of the samples must fail on the right line.
"""

from __future__ import annotations

import io
from pathlib import Path

import pytest

import golden
from mongoprobe.formats.errors import FormatError
from mongoprobe.formats.quantize import (
    HIST_COLUMNS,
    is_quantize,
    parse_quantize,
    parse_scalars,
    to_histograms,
)

ROOT = Path(__file__).resolve().parent.parent
SAMPLES = ROOT / "samples" / "quantize"
CASES = sorted(p.name.removesuffix(".txt") for p in SAMPLES.glob("*.txt"))


def _sample(case: str) -> Path:
    return SAMPLES / f"{case}.txt"


# --- golden files ------------------------------------------------------------------------


def test_every_sample_has_golden_files_and_back() -> None:
    assert len(CASES) >= 6
    stems = {p.name.removesuffix(".scalars.csv").removesuffix(".csv")
             for p in golden.files("quantize")}  # fmt: skip
    assert stems == set(CASES), "stale golden files (a sample gone): remove them"


@pytest.mark.parametrize("case", CASES)
def test_sample_matches_golden(case: str) -> None:
    df = parse_quantize(_sample(case))
    assert list(df.columns) == list(HIST_COLUMNS)
    assert [str(df[c].dtype) for c in ("lo", "hi", "count")] == ["int64"] * 3
    golden.check(f"quantize/{case}.csv", df.to_csv(index=False, lineterminator="\n"))
    sc = parse_scalars(_sample(case))
    assert list(sc.columns) == ["name", "key", "value"]
    golden.check(f"quantize/{case}.scalars.csv", sc.to_csv(index=False, lineterminator="\n"))


@pytest.mark.parametrize("case", CASES)
def test_is_quantize_on_samples(case: str) -> None:
    assert is_quantize(_sample(case).read_text())


def test_is_quantize_rejects_other_text() -> None:
    assert not is_quantize("")
    assert not is_quantize("# HELP x\n# TYPE x counter\nx 1\n")
    assert not is_quantize("  [OVERALL], RunTime(ms), 771609.0\n  #\n")


# --- DTrace: the seed's mongo_time.d runs -------------------------------------------------


@pytest.mark.parametrize("case, total, avg", [("dtrace-mongo_time-load", 443729, 65688),
                                              ("dtrace-mongo_time-run", 512532, 548253)])
def test_dtrace_totals_match_what_dtrace_counted(case: str, total: int, avg: int) -> None:
    df = parse_quantize(_sample(case))
    assert set(df["format"]) == {"dtrace"}
    assert set(zip(df["name"], df["key"])) == {("", "distribution in nsecs")}
    assert df["count"].sum() == total
    sc = parse_scalars(_sample(case))
    assert dict(zip(sc["key"], sc["value"])) == {"avg": avg, "total requests handled": total}
    # the zero rows DTrace prints around the data are kept, the buckets are contiguous
    assert df["count"].iloc[0] == 0 and df["count"].iloc[-1] == 0
    assert (df["lo"].iloc[1:].to_numpy() == df["hi"].iloc[:-1].to_numpy()).all()
    assert (df["hi"] == 2 * df["lo"]).all()


def test_dtrace_load_rows() -> None:
    df = parse_quantize(_sample("dtrace-mongo_time-load"))
    assert list(df[["lo", "count"]].itertuples(index=False, name=None)) == [
        (16384, 0), (32768, 304521), (65536, 133288), (131072, 5643),
        (262144, 271), (524288, 6), (1048576, 0),
    ]  # fmt: skip


def test_dtrace_titles_keys_and_scalars() -> None:
    # The layout dtrace/mongo_time.d prints at END (titles, keyed printa, footer);
    # the numbers are the seed's. (The script itself has not run yet: no DTrace here.)
    text = (
        "Tracing pid 24426... Hit Ctrl-C to end.\n\n"
        "latency_ns_by_op:\n\n"
        "  OP_QUERY                                          \n"
        "           value  ------------- Distribution ------------- count    \n"
        "           16384 |                                         0        \n"
        "           32768 |@@@@@@@@@@@@@@@@@@@@@@@@@@@              304521   \n"
        "           65536 |@@@@@@@@@@@@@                            133288   \n"
        "          131072 |                                         0        \n\n"
        "  OP_INSERT                                         \n"
        "           value  ------------- Distribution ------------- count    \n"
        "          131072 |                                         0        \n"
        "          262144 |@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@ 271      \n"
        "          524288 |                                         0        \n\n"
        "requests_by_op:\n\n"
        "  OP_INSERT                                                       271\n"
        "  OP_QUERY                                                     437809\n\n"
        "requests: 438080  replies: 438080  stream replies: 0  no-reply (moreToCome): 0\n"
        "lost: unmatched replies 0, requests without reply 3, malformed headers 1, "
        "dropped events 0\n"
        "(dropped events: DTrace reports its own on stderr, e.g. \"dynamic variable drops\": "
        "raise -x dynvarsize)\n"
    )
    df = parse_quantize(text)
    assert df.groupby(["name", "key"], sort=False)["count"].sum().to_dict() == {
        ("latency_ns_by_op", "OP_QUERY"): 437809, ("latency_ns_by_op", "OP_INSERT"): 271,
    }  # fmt: skip
    sc = parse_scalars(io.StringIO(text))
    assert list(sc.itertuples(index=False, name=None)) == [
        ("requests_by_op", "OP_INSERT", 271), ("requests_by_op", "OP_QUERY", 437809),
        ("requests", "", 438080), ("replies", "", 438080), ("stream_replies", "", 0),
        ("no_reply", "", 0), ("unmatched_replies", "", 0), ("requests_without_reply", "", 3),
        ("malformed", "", 1), ("dropped", "", 0),
    ]  # fmt: skip
    hs = to_histograms(df)
    assert list(hs) == [("dtrace", "latency_ns_by_op", "OP_QUERY"),
                        ("dtrace", "latency_ns_by_op", "OP_INSERT")]
    assert hs[("dtrace", "latency_ns_by_op", "OP_INSERT")]["count"].tolist() == [0, 271, 0]


# --- bpftrace ----------------------------------------------------------------------------


def test_bpftrace_hist_agrees_with_its_count_map() -> None:
    path = _sample("bpftrace-read-openat")
    df, sc = parse_quantize(path), parse_scalars(path)
    assert set(df["format"]) == {"bpftrace"}
    counts = dict(zip(sc["key"], sc["value"]))
    assert set(sc["name"]) == {"count"}
    # one read() exit feeds @read_ns[comm, "read"], @read_bytes and @count[comm]
    per_comm = df[df["name"] == "read_ns"].groupby("key")["count"].sum()
    assert {k.rsplit(", ", 1)[0]: v for k, v in per_comm.items()} == counts
    assert df.loc[df["name"] == "read_bytes", "count"].sum() == sum(counts.values())
    assert "memfd:sealed-91, read" in set(df["key"])  # ':' inside a key


def test_bpftrace_bucket_labels() -> None:
    df = parse_quantize(_sample("bpftrace-read-openat"))
    ret = df[df["name"] == "openat_ret"]
    assert list(ret[["lo", "hi"]].head(4).itertuples(index=False, name=None)) == [
        (-(2**63), 0), (0, 1), (1, 2), (2, 4),  # (..., 0), [0], [1], [2, 4)
    ]  # fmt: skip
    ns = df[(df["name"] == "read_ns") & (df["key"] == "bash, read")]
    assert (524288, 1048576) in set(zip(ns["lo"], ns["hi"]))  # [512K, 1M)
    assert ns["hi"].max() == 2**30  # [512M, 1G)
    text = "@x[a]:\n[0, 1)   3 |@@@@|\n[1]    1 |@   |\n[2, 4)   2 |@@  |\n[4T, 8T)  0 | |\n"
    with pytest.raises(FormatError, match="<text>:5: "):  # a gap from [2, 4) to [4T, 8T)
        parse_quantize(text)
    assert parse_quantize(text.rsplit("\n", 2)[0])["count"].tolist() == [3, 1, 2]


# --- bcc ---------------------------------------------------------------------------------


def test_bcc_sections_and_wide_form() -> None:
    df = parse_quantize(_sample("bcc-read-write-nsecs"))
    assert set(df["format"]) == {"bcc"}
    assert list(dict.fromkeys(zip(df["name"], df["key"]))) == [("syscall", "read"),
                                                                 ("syscall", "write")]
    read = df[df["key"] == "read"]  # printed in bcc's wide form (a value above 2**32)
    assert (read["lo"].iloc[0], read["hi"].iloc[0]) == (0, 2)  # "0 -> 1": 0 and 1
    assert (read["lo"].iloc[-1], read["hi"].iloc[-1], read["count"].iloc[-1]) == (
        2**32, 2**33, 1)  # fmt: skip
    assert len(read) == 33 and len(df[df["key"] == "write"]) == 15


def test_bcc_plain_table_is_named_by_its_unit() -> None:
    df = parse_quantize(_sample("bcc-read-usecs"))
    assert set(zip(df["name"], df["key"])) == {("usecs", "")}
    assert df["count"].sum() == 653
    assert (df["lo"].iloc[1:].to_numpy() == df["hi"].iloc[:-1].to_numpy()).all()


def test_bcc_repr_section_keys_are_unquoted() -> None:
    text = ("\nop = b'OP_MSG'\n     nsecs               : count     distribution\n"
            "         0 -> 1          : 2        |****************************************|\n")  # fmt: skip
    assert parse_quantize(text)[["name", "key"]].iloc[0].tolist() == ["op", "OP_MSG"]


# --- inputs and damage -------------------------------------------------------------------


def test_input_kinds() -> None:
    path = _sample("dtrace-mongo_time-load")
    a = parse_quantize(path)
    for other in (str(path), io.StringIO(path.read_text()), path.read_text()):
        assert parse_quantize(other).equals(a)
    with pytest.raises(FileNotFoundError):
        parse_quantize(str(SAMPLES / "no-such-sample.txt"))


def _damaged(case: str, lineno: int, new: str | None) -> str:
    lines = _sample(case).read_text().splitlines()
    if new is None:
        del lines[lineno - 1]
    else:
        lines[lineno - 1] = new
    return "\n".join(lines) + "\n"


@pytest.mark.parametrize(
    "case, lineno, new, line, what",
    [
        # a row cut in the middle (the count is gone)
        ("dtrace-mongo_time-load", 7, "             65536 |@@@@@@@@@@@@", 7, "quantize row"),
        # a digit garbled
        ("dtrace-mongo_time-run", 8, "             1310x2 |@@@@@   64382", 8, "quantize row"),
        # a row lost: 65536 follows 16384
        ("dtrace-mongo_time-run", 6, None, 6, "following the previous one"),
        # lquantize-style values
        ("dtrace-mongo_time-load", 6, "             30000 |@@@@@@@@@  304521", 6, "power-of-2"),
        ("bpftrace-read-openat", 21, "[2, 4)               595 |@@@@@@@@@@", 21, "hist row"),
        ("bpftrace-read-openat", 29, "[2, 5)                 7 |    |", 29, "log2 bucket"),
        ("bcc-read-usecs", 4, "         2 -> 3          : 1x       |*   |", 4, "bcc log2 row"),
        ("bcc-read-write-nsecs", 9, None, 9, "following the previous one"),
    ],
)
def test_damaged_input_names_the_line(case: str, lineno: int, new: str | None, line: int,
                                      what: str) -> None:  # fmt: skip
    with pytest.raises(FormatError) as e:
        parse_quantize(_damaged(case, lineno, new), source=f"{case}.txt")
    assert e.value.line == line
    assert what in str(e.value)
    assert str(e.value).startswith(f"{case}.txt:{line}: expected ")


def test_header_without_rows_and_no_histogram_at_all() -> None:
    text = _sample("dtrace-mongo_time-load").read_text().splitlines()
    cut = "\n".join(text[:4]) + "\n"  # the transcript stops right after the header
    with pytest.raises(FormatError, match=r"<text>:5: expected quantize rows"):
        parse_quantize(cut)
    with pytest.raises(FormatError, match="none found"):
        parse_quantize("Attaching 2 probes...\n\n@count[find]: 3\n")
    with pytest.raises(FormatError, match="none found"):
        parse_quantize("")


def test_damaged_footer_names_the_line() -> None:
    text = "requests: 5  replies: 4  stream replies: 0  no-reply (moreToCome): 1\nlost: 3\n"
    with pytest.raises(FormatError, match=r"f\.txt:2: expected the probe footer"):
        parse_scalars(text, source="f.txt")
