"""sysstat ``pidstat`` reports -> one DataFrame, the tables of each interval joined.

Checked on real sysstat 12.6.1 output (``samples/sysstat/``): ``pidstat -u -d -w -r -p
PID 1 3`` (four tables per interval: CPU, memory, I/O, context switches), the same with
``-t`` (a process row, then one ``|__`` row per thread), and ``-h`` (one line per
process per interval, tables headed ``# Time``) with ``-H`` (epoch-seconds clock, as
``mongoprobe record`` runs it) and ``-t``::

    Linux 6.18.44-fc-v595 (vm) 	11/22/26 	_x86_64_	(2 CPU)

    10:31:22      UID      TGID       TID    %usr %system  %guest   %wait    %CPU   CPU  Command
    10:31:23        0      1064         -   36.00    5.00    0.00    0.00   41.00     0  python3
    10:31:23        0         -      1107   33.00    0.00    0.00   65.00   33.00     0  |__python3

Columns, one row per process (and per thread with ``-t``) per interval:

    time      float64  end of the interval, seconds since the epoch (banner date + the
                       row's clock, read in ``tz``, default local; a day added when the
                       clock goes back past midnight; with ``-H`` the printed epoch
                       seconds)
    sample    int64    interval number, 0 for the first
    uid       Int64    UID column (<NA> when not printed; ``-U`` prints ``user`` str)
    pid       int64    the process (PID, or TGID with ``-t``; a thread row gets its
                       process's)
    tid       Int64    the thread (TID with ``-t``; <NA> for process rows)
    thread    bool     True for a ``-t`` thread row (``|__`` before the command)
    command   str      command name (the whole command line with ``-l``)
    ...                every other column as the headers name them, in order of first
                       appearance. Int64: CPU (the processor last run on), VSZ and RSS
                       (KiB), iodelay (clock ticks), threads, fd-nr, StkSize, StkRef (KiB),
                       prio. float64: percentages (%usr %system %guest %wait %CPU %MEM),
                       rates (minflt/s majflt/s kB_rd/s kB_wr/s kB_ccwr/s cswch/s
                       nvcswch/s ...). str: policy. A value a table did not give is <NA>/NaN

The ``Average:`` tables are left out unless ``averages=True`` (``time`` NaN, ``sample``
-1; their ``CPU`` is printed ``-``: <NA>; ``-h`` prints none). ``df.attrs`` holds
``ncpu``, ``host``, ``kernel``, ``date``. A row with fewer fields than its header, a
value that is not a number, or a line outside the tables raises ``FormatError`` naming
the file and line.

USAGE::

    from mongoprobe.formats.pidstat import parse_pidstat
    df = parse_pidstat("samples/sysstat/pidstat-t-udwr-p-1-3.txt")
    df[df.thread][["time", "tid", "%CPU", "cswch/s"]]
"""

from __future__ import annotations

import math
import os
from typing import IO

import pandas as pd

from .errors import FormatError
from .sysstat import Clock, split_label, parse_banner, scan_timed, to_float
from .source import read_input

_INT_COLS = {"CPU", "VSZ", "RSS", "iodelay", "threads", "fd-nr", "StkSize", "StkRef", "prio"}
_STR_COLS = {"policy"}
_KEYS = {"UID": "uid", "USER": "user", "PID": "pid", "TGID": "pid", "TID": "tid"}


def is_pidstat(text: str) -> bool:
    """Cheap check: a sysstat banner and a pidstat header (``... PID ... Command``)."""
    lines = text[:65536].splitlines()
    if not any(parse_banner(s) for s in lines[:3]):
        return False
    for s in lines[:40]:
        p = split_label(s)
        if p:
            h = p[1].split()
            return h[-1:] == ["Command"] and ("PID" in h or "TGID" in h)
    return False



def _int(tok: str, src: str, n: int, col: str, line: str):
    if tok == "-":
        return pd.NA
    try:
        return int(tok)
    except ValueError:
        raise FormatError(src, n, f"an integer in column {col!r}", line) from None


def parse_pidstat(
    text_or_path: str | os.PathLike[str] | IO[str], source: str | None = None,
    tz: str | None = None, averages: bool = False,
) -> pd.DataFrame:
    """pidstat's tables joined per process/thread and interval (columns: module docstring).

    ``text_or_path``: the text, a path (any one-line ``str`` is a path) or an open file.
    ``tz``: zone of the printed clock (None: local). ``averages``: keep ``Average:`` rows.
    Raises ``FormatError`` naming the file and line on damaged input.
    """
    text, src = read_input(text_or_path, source)
    lines = text.splitlines()
    banner, blocks = scan_timed(text, src, "pidstat")
    clock = Clock(banner.day if banner else None, tz)
    merged: dict[tuple, dict] = {}
    metrics: list[str] = []
    keys_seen: list[str] = []
    sample, last_label = -1, None
    for b in blocks:
        h = b.header
        if h[-1:] != ["Command"] or not ({"PID", "TGID"} & set(h)):
            raise FormatError(src, b.line, "a pidstat header 'HH:MM:SS  UID  PID ... "
                              "Command'", lines[b.line - 1])  # fmt: skip
        avg = b.label == "Average:"
        clock.observe(b.label)  # the header's clock too: it may be the day before
        if avg and not averages:
            continue
        ncols = len(h) - 1
        proc_pid = None
        for n, label, f in b.rows:
            line = lines[n - 1]
            if len(f) < len(h):
                raise FormatError(src, n, f"{len(h)} fields as in the pidstat header "
                                  f"(line {b.line})", line)  # fmt: skip
            if avg:
                key_sample, t = -1, math.nan
            else:
                if label != last_label:
                    sample, last_label = sample + 1, label
                    t = clock(label)
                key_sample = sample
            row: dict = {"uid": pd.NA, "pid": None, "tid": pd.NA}
            for col, tok in zip(h[:ncols], f[:ncols]):
                if col in _KEYS:
                    k = _KEYS[col]
                    row[k] = tok if k == "user" else _int(tok, src, n, col, line)
                    if col not in keys_seen:
                        keys_seen.append(col)
                elif col in _INT_COLS:
                    row[col] = _int(tok, src, n, col, line)
                elif col in _STR_COLS:
                    row[col] = tok
                else:
                    row[col] = to_float(tok, src, n, col, line)
                if col not in _KEYS and col not in metrics:
                    metrics.append(col)
            cmd = " ".join(f[ncols:])
            row["thread"] = cmd.startswith("|__")
            row["command"] = cmd[3:] if row["thread"] else cmd
            if row["pid"] is pd.NA or row["pid"] is None:
                if not row["thread"] or proc_pid is None:
                    raise FormatError(src, n, "a PID/TGID (a '-' only on '|__' thread "
                                      "rows under their process)", line)  # fmt: skip
                row["pid"] = proc_pid
            elif not row["thread"]:
                proc_pid = row["pid"]
            key = (key_sample, row["pid"], row["tid"] if row["tid"] is not pd.NA else -1,
                   row["thread"])  # fmt: skip
            cur = merged.setdefault(key, {"time": t, "sample": key_sample})
            for k, v in row.items():
                if k not in cur or cur[k] is pd.NA:
                    cur[k] = v
    if not merged:
        raise FormatError(src, max(len(lines), 1), "pidstat rows 'HH:MM:SS  UID  PID ... "
                          "Command'; none found")  # fmt: skip
    lead = ["time", "sample"] + (["user"] if "USER" in keys_seen else ["uid"]) + [
        "pid", "tid", "thread", "command"]
    df = pd.DataFrame(list(merged.values())).reindex(columns=lead + metrics)
    types = {"time": "float64", "sample": "int64", "pid": "int64", "tid": "Int64",
             "thread": "bool", "command": "str"}  # fmt: skip
    types["user" if "user" in lead else "uid"] = "str" if "user" in lead else "Int64"
    for c in metrics:
        types[c] = "Int64" if c in _INT_COLS else ("str" if c in _STR_COLS else "float64")
    df = df.astype(types)
    if banner:
        df.attrs.update(banner.attrs())
    return df
