"""A run's ``load.out``: the load command's stdout and stderr, each line stamped.

``mongoprobe record`` writes one line per line the command printed::

    EPOCH<TAB>STREAM<TAB>TEXT

EPOCH is the wall clock (seconds since the epoch, 6 decimals) when record received the
line, STREAM is ``stdout`` or ``stderr``. Load tools print on both (YCSB: status lines
on stderr, its summary on stdout), so every adapter reads both, in receive order.

``read_load_out(lines)`` -> DataFrame, one row per printed line::

    time    float64  receive time, wall seconds (NaN for a plain capture: no stamps)
    stream  str      stdout | stderr ("" for a plain capture)
    text    str      the line as printed, without its newline

A line without a stamp in a stamped file continues the previous one (a tool printed a
bare carriage return). ``read_output(text)`` takes either shape -- a ``load.out`` or a
plain capture of one or both streams -- so every parser reads a run's output as well as
a file the user saved. ``is_load_out(text)`` is the cheap check.
"""

from __future__ import annotations

import math
import re
from typing import Iterable

import pandas as pd

COLUMNS = ("time", "stream", "text")
STAMPED = re.compile(r"^(\d+\.\d+)\t(stdout|stderr)\t(.*)$", re.S)


def is_load_out(text: str) -> bool:
    """Cheap check: the first non-empty line is a stamped one."""
    for line in text[:65536].splitlines():
        if line.strip():
            return bool(STAMPED.match(line))
    return False


def _frame(rows: list) -> pd.DataFrame:
    return pd.DataFrame(rows, columns=list(COLUMNS)).astype(
        {"time": "float64", "stream": str, "text": str})


def read_load_out(lines: Iterable[str]) -> pd.DataFrame:
    """Stamped ``load.out`` lines -> (time, stream, text)."""
    rows: list[list] = []
    for line in lines:
        line = line.rstrip("\n")
        m = STAMPED.match(line)
        if m:
            rows.append([float(m[1]), m[2], m[3]])
        elif rows:  # a stray line without a stamp continues the previous one
            rows[-1][2] += "\n" + line
    return _frame(rows)


def read_output(text: str) -> pd.DataFrame:
    """A ``load.out`` or a plain capture of a tool's output -> (time, stream, text);
    a plain capture has no receive times (NaN) and no stream names."""
    if is_load_out(text):
        return read_load_out(text.splitlines())
    return _frame([[math.nan, "", s] for s in text.splitlines()])


def plain_text(text: str) -> str:
    """The printed text alone (both streams, in receive order) when ``text`` is a
    ``load.out``; ``text`` itself otherwise."""
    if not is_load_out(text):
        return text
    return "".join(t + "\n" for t in read_load_out(text.splitlines())["text"])
