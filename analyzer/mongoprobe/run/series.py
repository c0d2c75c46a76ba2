"""Recording a series: one command recorded once per value of what varies and per
repetition, interleaved, each run labelled (``mongoprobe series``).

The order is A B A B, not A A B B: the repetitions of a value are spread over the
whole series, so that a drift of the machine (a cache warming, another tenant, a
growing database) moves every value alike instead of passing for a difference. Run
``r`` of value ``v`` is ``DIR/KEY=v.r`` (``record`` with ``--label KEY=v --label
rep=r``); ``DIR/series.json`` lists the runs in the order they were recorded, and
``compare DIR`` groups them by KEY.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

SERIES_FILE = "series.json"


class SeriesError(Exception):
    """A series that cannot be recorded as asked (the message says why)."""


@dataclass
class Series:
    out: Path
    key: str
    values: list[str]
    repeat: int
    command: list[str]             # with {KEY} where the value goes
    record_args: list[str] = field(default_factory=list)   # --target embedded, --probes ...

    def order(self) -> list[tuple[str, int]]:
        """(value, repetition) in recording order: every value once, then again."""
        return [(v, r) for r in range(1, self.repeat + 1) for v in self.values]

    def argv(self, value: str, rep: int) -> list[str]:
        cmd = [a.replace("{" + self.key + "}", value) for a in self.command]
        return [sys.executable, "-m", "mongoprobe", "record", *self.record_args,
                "--label", f"{self.key}={value}", "--label", f"rep={rep}",
                "-o", str(self.out / self.run_name(value, rep)), "--", *cmd]

    def run_name(self, value: str, rep: int) -> str:
        return f"{self.key}={value}.{rep}"


def parse_vary(text: str) -> tuple[str, list[str]]:
    """KEY=V1,V2[,...] -> (KEY, [V1, V2, ...])."""
    key, eq, vals = text.partition("=")
    values = [v for v in vals.split(",") if v]
    if not eq or not key or len(values) < 2:
        raise SeriesError(f"--vary {text!r}: expected KEY=V1,V2[,...] (two values or more)")
    if len(set(values)) < len(values):
        raise SeriesError(f"--vary {text!r}: a value repeats")
    return key, values


def record(s: Series, log=sys.stderr) -> list[str]:
    """Record the series; the run folders, in order. Stops at the first run that fails
    (its folder and series.json are kept as far as they got)."""
    if not any("{" + s.key + "}" in a for a in s.command):
        raise SeriesError(f"the command has no {{{s.key}}} for the value to go in")
    s.out.mkdir(parents=True, exist_ok=True)
    if any(s.out.iterdir()):
        raise SeriesError(f"{s.out}: not empty")
    done: list[str] = []
    meta = {"key": s.key, "values": s.values, "repeat": s.repeat, "command": s.command,
            "record_args": s.record_args, "runs": done, "start": time.time(), "end": None}
    order = s.order()
    for i, (value, rep) in enumerate(order, 1):
        print(f"mongoprobe series: run {i} of {len(order)}: {s.key}={value} "
              f"(repetition {rep})", file=log, flush=True)
        r = subprocess.run(s.argv(value, rep), stdout=log, stderr=log)
        if r.returncode != 0:
            _write(s.out, meta)
            raise SeriesError(f"{s.run_name(value, rep)}: record exited {r.returncode} "
                              f"(the {len(done)} runs before it are kept)")
        done.append(s.run_name(value, rep))
        _write(s.out, meta)
    meta["end"] = time.time()
    _write(s.out, meta)
    return [str(s.out / d) for d in done]


def _write(out: Path, meta: dict) -> None:
    (out / SERIES_FILE).write_text(json.dumps(meta, indent=1) + "\n")


def read(path: str | Path) -> dict | None:
    """A series folder's series.json, None when ``path`` is not one."""
    p = Path(path) / SERIES_FILE
    return json.loads(p.read_text()) if p.is_file() else None
