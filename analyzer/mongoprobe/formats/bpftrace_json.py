"""The one reader of bpftrace's ``-f json`` output, for every parser of a bpftrace tool's
output (latency, stacks, flush, syscount, threads).

bpftrace prints one record per line, ``{"type": T, "data": D}``: ``printf`` (D the
text), ``map``, ``hist`` and ``stats`` (D ``{"@name": value}``), ``lost_events``,
``helper_error`` (0.23+), ``attached_probes``, ``time``... ``read`` hands each record to
its handler, a map record map by map::

    handlers = {"printf": on_text,        # fn(text, rec)
                "@calls": on_calls,       # fn(name, value, rec): this map
                "map": on_map,            # fn(name, value, rec): any other map of a
                                          #   "map" record ("hist", "stats" likewise)
                "lost_events": on_lost,   # fn(count, rec)
                "helper_error": ...,      # fn(data, rec), as any other type
                "text": on_line}          # fn(line, rec): a line that is no record

A record with no handler is skipped; a line that is not JSON, without a ``text``
handler, or a record that does not parse, is a FormatError naming the line. What the
handlers return, when not None, is an iterable ``read`` yields from, so a streaming
parser's handler can be a generator. Versions differ here, not in the parsers:
``lost_events`` is ``{"data": {"events": N}}`` in 0.17 and ``{"count": N}`` in 0.27;
0.23 escapes a stack key's newlines twice (``unescape_key``).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Iterator, Mapping

from .errors import FormatError

MAP_TYPES = ("map", "hist", "stats")


@dataclass(frozen=True)
class Record:
    """Where a record came from, for a handler's error message."""
    type: str
    source: str
    lineno: int
    line: str

    def error(self, expected: str) -> FormatError:
        return FormatError(self.source, self.lineno, expected, self.line)


class _Pairs(dict):
    """A JSON object that keeps repeated keys: ``.items()`` gives every pair in order
    (json.loads keeps only the last; bpftrace repeats a stack key once per thread)."""

    def __init__(self, pairs):
        super().__init__(pairs)
        self.pairs = pairs

    def items(self):
        return list(self.pairs)


def read(lines: Iterable[str], source: str, handlers: Mapping[str, Callable],
         first_lineno: int = 1, repeated_keys: bool = False) -> Iterator[Any]:
    """Each record of ``lines`` to its handler (the module docstring); yields what the
    handlers return. ``repeated_keys``: a map's repeated keys each reach the handler."""
    hook = _Pairs if repeated_keys else None
    for n, line in enumerate(lines, first_lineno):
        s = line.strip()
        if not s:
            continue
        if not s.startswith("{"):
            if "text" not in handlers:
                raise FormatError(source, n, "a bpftrace JSON record", s)
            out = handlers["text"](s, Record("text", source, n, s))
        else:
            try:
                obj = json.loads(s, object_pairs_hook=hook)
                kind = obj["type"]
            except (ValueError, KeyError, TypeError):
                raise FormatError(source, n, 'a bpftrace JSON record {"type": ..., '
                                  '"data": ...}', s) from None
            rec = Record(kind, source, n, s)
            data = obj.get("data")
            if kind in MAP_TYPES:
                if not isinstance(data, dict):
                    raise rec.error(f"a bpftrace {kind} record's maps")
                for name, value in data.items():
                    fn = handlers.get(name) or handlers.get(kind)
                    if fn is not None:
                        yield from fn(name, value, rec) or ()
                continue
            fn = handlers.get(kind)
            if fn is None:
                continue
            if kind == "printf":
                data = str(data)
            elif kind == "lost_events":
                data = int(data.get("events", 0) if data else obj.get("count", 0))
            out = fn(data, rec)
        if out is not None:
            yield from out


def read_all(lines: Iterable[str], source: str, handlers: Mapping[str, Callable],
             **kw) -> list:
    """``read`` to the end, for handlers that keep what they find: what they returned."""
    return list(read(lines, source, handlers, **kw))


def unescape_key(key: str) -> str:
    """A JSON map key as bpftrace meant it: 0.23 escapes the newlines of stack keys
    twice (``"\\\\n"`` in the JSON text), so they decode as backslash + n."""
    if "\n" not in key and "\\n" in key:
        return key.replace("\\n", "\n")
    return key
