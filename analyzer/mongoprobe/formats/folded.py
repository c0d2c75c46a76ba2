"""Folded stacks (``ROOT;frame;...;leaf COUNT``): the hub format every stack tool of the
field reads and writes (FlameGraph's stackcollapse-*, inferno-collapse-*).

Each line is one stack, root first, and its count; the stack is taken whole (no comm
is split off) and has no time. Damaged lines raise :class:`FormatError`.
"""

from __future__ import annotations

import math
import re
from typing import IO, Iterator

from .errors import FormatError

NAME = "folded"
HEAD_BYTES = 65536

_LINE = re.compile(r"(.+) (\d+)$")


def is_format(head: str) -> bool:
    """Every non-blank line of the head is ``STACK COUNT`` (the last may be cut)."""
    lines = [x for x in head.splitlines() if x.strip()]
    if len(head) >= HEAD_BYTES and lines:
        lines = lines[:-1]
    return bool(lines) and all(_LINE.match(x) for x in lines)


def read(fh: IO, source: str = "<folded>", stats: dict | None = None) -> Iterator[tuple]:
    """Samples ``(time, pid, tid, comm, frames, count, weight)``, streamed."""
    st = stats if stats is not None else {}
    st.update({"samples": 0})
    for n, raw in enumerate(fh, 1):
        line = (raw.decode("utf-8", "replace") if isinstance(raw, bytes) else raw).rstrip()
        if not line:
            continue
        m = _LINE.match(line)
        if not m:
            raise FormatError(source, n, "a folded stack 'frame;frame;... COUNT'", line)
        c = int(m.group(2))
        st["samples"] += c
        yield (math.nan, -1, -1, "", m.group(1), c, c)
