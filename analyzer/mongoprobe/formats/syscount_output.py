"""``probes/syscount.bt`` (and ``dtrace/syscount.d``) output -> syscalls by name.

What it parses: the maps ``syscount.bt PID`` prints at its end, as bpftrace text
(``mongoprobe record`` stores ``syscount.bt.txt``) or JSON lines (``bpftrace -f
json``, what ``mongoprobe syscount`` runs); and ``dtrace/syscount.d``, which prints
the same lines with names for keys. Real example:
``samples/profile/ferretdb-syscount.bt.txt`` (FerretDB under mixedload)::

    @calls[202]: 8975
    @errors[202]: 37
    @time_ns[202]: 9531846021

Keys are syscall numbers on Linux (x86_64 numbering) and names on DTrace systems
(``@calls[write]: 12``). ``parse_syscount(text_or_lines, names=None)`` returns one
row per syscall, most called first:

    nr       int64  syscall number (-1 when the input gave a name)
    syscall  str    name (from ``names``, the caller's table; ``sys_NR``
                    when unknown)
    count    int64  calls entered
    time_ns  int64  total time of the calls that returned (0 when not measured)
    avg_ns   int64  time_ns / count (0 for no calls)
    errors   int64  calls that returned an error

Syscall numbers are named from the table the caller passes (``names``; the machine's
own is ``mongoprobe.run.syscall_table.names()``): a parser does no machine-dependent work.
Without a name a number is ``sys_N``. Damaged input raises :class:`FormatError`.
"""

from __future__ import annotations

import re
from typing import Iterable

import pandas as pd

from . import bpftrace_json
from .errors import FormatError

COLUMNS = ["nr", "syscall", "count", "time_ns", "avg_ns", "errors"]
MAPS = ("calls", "time_ns", "errors")

_LINE = re.compile(r"^@(calls|time_ns|errors)\[([^\]]+)\]: (-?\d+)$")


def _raw(lines: list[str], source: str) -> dict[str, dict[str, int]]:
    maps: dict[str, dict[str, int]] = {m: {} for m in MAPS}
    first = next((ln for ln in lines if ln.strip()), "")
    if first.lstrip().startswith("{"):
        def a_map(name: str, value, rec) -> None:
            try:
                maps[name[1:]].update({str(k): int(v) for k, v in value.items()})
            except (ValueError, AttributeError):
                raise rec.error(f"a syscount map {name}") from None

        bpftrace_json.read_all(lines, source, {f"@{m}": a_map for m in MAPS})
        return maps
    seen = False
    for n, line in enumerate(lines, 1):
        s = line.strip()
        m = _LINE.match(s)
        if m:
            maps[m[1]][m[2].strip()] = int(m[3])
            seen = True
        elif re.match(r"^@(calls|time_ns|errors)\b", s):
            raise FormatError(source, n, "a syscount line @calls[NR]: N", s)
        elif "Counting syscalls of PID" in s:
            seen = True
    if not seen:
        raise FormatError(source, 1, "syscount.bt / syscount.d output (@calls[...] lines)",
                          first)
    return maps


def parse_syscount(text_or_lines: str | Iterable[str], names: dict[int, str] | None = None,
                   source: str = "<syscount>") -> pd.DataFrame:
    """syscount.bt / syscount.d output -> one row per syscall (columns above)."""
    lines = (text_or_lines.splitlines() if isinstance(text_or_lines, str)
             else list(text_or_lines))
    maps = _raw(lines, source)
    table = names or {}
    rows = []
    for key in sorted(set(maps["calls"]) | set(maps["time_ns"]) | set(maps["errors"])):
        if key.lstrip("-").isdigit():
            nr, name = int(key), table.get(int(key), f"sys_{key}")
        else:
            nr, name = -1, key
        count = maps["calls"].get(key, 0)
        t = maps["time_ns"].get(key, 0)
        rows.append((nr, name, count, t, t // count if count else 0, maps["errors"].get(key, 0)))
    df = pd.DataFrame(rows, columns=COLUMNS)
    df = df.astype({c: "int64" for c in COLUMNS if c != "syscall"})
    return df.sort_values(["count", "syscall"], ascending=[False, True],
                          kind="stable").reset_index(drop=True)


def is_syscount_output(text: str) -> bool:
    head = text[:65536]
    return "Counting syscalls of PID" in head or bool(re.search(r"^@calls\[", head, re.M))
