"""The one reader of bpftrace's -f json output (mongoprobe.formats.bpftrace_json): records
to handlers by type and map name, the versions' differences, damaged lines named."""

import pytest

from mongoprobe.formats import bpftrace_json
from mongoprobe.formats.errors import FormatError

LINES = [
    '{"type": "attached_probes", "data": {"probes": 3}}',
    '{"type": "printf", "data": "# clock monotonic_ns=5 elapsed_ns=1\\n"}',
    '{"type": "map", "data": {"@calls": {"0": 3, "1": 4}, "@other": {"x": 1}}}',
    '{"type": "hist", "data": {"@lat": [{"min": 0, "max": 1, "count": 2}]}}',
    '{"type": "lost_events", "data": {"events": 7}}',          # bpftrace 0.17
    '{"type": "lost_events", "count": 5}',                     # bpftrace 0.27
    "",
]


def test_records_go_to_their_handlers_by_type_and_map_name() -> None:
    seen = []
    handlers = {
        "printf": lambda text, rec: seen.append(("printf", text, rec.lineno)),
        "@calls": lambda name, v, rec: seen.append(("calls", name, v)),
        "map": lambda name, v, rec: seen.append(("map", name, v)),
        "hist": lambda name, v, rec: seen.append(("hist", name, len(v))),
        "lost_events": lambda n, rec: seen.append(("lost", n)),
    }
    assert bpftrace_json.read_all(LINES, "t", handlers) == []
    assert seen == [("printf", "# clock monotonic_ns=5 elapsed_ns=1\n", 2),
                    ("calls", "@calls", {"0": 3, "1": 4}), ("map", "@other", {"x": 1}),
                    ("hist", "@lat", 1), ("lost", 7), ("lost", 5)]


def test_what_handlers_return_is_yielded_as_it_comes() -> None:
    def entries(name, m, rec):
        for k, v in m.items():
            yield (name, k, v)

    got = bpftrace_json.read(iter(LINES), "t", {"map": entries})
    assert next(got) == ("@calls", "0", 3)      # streamed: the rest not read yet
    assert list(got) == [("@calls", "1", 4), ("@other", "x", 1)]


def test_repeated_keys_each_reach_the_handler() -> None:
    line = '{"type": "map", "data": {"@s": {"a": 1, "a": 2, "b": 3}}}'
    got = bpftrace_json.read_all([line], "t", {"map": lambda n, m, rec: [list(m.items())]},
                                 repeated_keys=True)
    assert got == [[("a", 1), ("a", 2), ("b", 3)]]
    once = bpftrace_json.read_all([line], "t", {"map": lambda n, m, rec: [list(m.items())]})
    assert once == [[("a", 2), ("b", 3)]]


def test_text_lines_and_damaged_records() -> None:
    text = bpftrace_json.read_all(["Attaching 2 probes...", LINES[1]], "t",
                                  {"text": lambda s, rec: [s]})
    assert text == ["Attaching 2 probes..."]
    with pytest.raises(FormatError, match=r"t:1: expected a bpftrace JSON record"):
        bpftrace_json.read_all(["Attaching 2 probes..."], "t", {})
    with pytest.raises(FormatError, match=r"t:3: expected a bpftrace JSON record"):
        bpftrace_json.read_all([LINES[1], "", '{"type": "map", "data": {"@x": '], "t", {})
    with pytest.raises(FormatError, match=r"t:9: expected a bpftrace map record's maps"):
        bpftrace_json.read_all(['{"type": "map", "data": 3}'], "t", {}, first_lineno=9)


def test_a_handler_names_the_line_it_could_not_read() -> None:
    def calls(name, m, rec):
        raise rec.error(f"a syscount map {name}")

    with pytest.raises(FormatError, match=r"t:3: expected a syscount map @calls"):
        bpftrace_json.read_all(LINES, "t", {"@calls": calls})


def test_unescape_key() -> None:
    assert bpftrace_json.unescape_key("a,\\n f1\\n f2") == "a,\n f1\n f2"     # 0.23
    assert bpftrace_json.unescape_key("a,\n f1\\n") == "a,\n f1\\n"            # as meant
