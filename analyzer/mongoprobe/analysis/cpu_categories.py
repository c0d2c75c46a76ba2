"""Where the CPU goes: frame categories and a flat profile of a stack-sample table
(``mongoprobe.model.stack_samples``).

A sample's category: the frames are looked at from the leaf towards the root; the
first frame that matches any rule of ``flamegraphs/categories.toml`` decides, and among
the rules matching that frame the first in the file wins; a stack with no matching
frame is ``other``. So a malloc called from BSON parsing is ``allocator``, and a futex
wait in SQLite's locking is ``locks``.
"""

from __future__ import annotations

import os
import re
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable

from mongoprobe.formats.errors import FormatError
from mongoprobe.run.tracer import data_dir
from mongoprobe.model.phase import Phase
from mongoprobe.model.stack_samples import slice_phase

@dataclass(frozen=True)
class Rule:
    name: str
    title: str
    color: str
    regex: re.Pattern


def categories_file() -> Path:
    env = os.environ.get("MONGOPROBE_CATEGORIES")
    if env:
        return Path(env)
    return data_dir("flamegraphs") / "categories.toml"


def load_rules(path: str | os.PathLike | None = None) -> list[Rule]:
    """The category rules (``flamegraphs/categories.toml`` by default), in file order."""
    import tomllib

    p = Path(path) if path else categories_file()
    try:
        data = tomllib.loads(p.read_text())
    except FileNotFoundError:
        raise FileNotFoundError(f"{p}: no category rules (set MONGOPROBE_CATEGORIES)")
    except tomllib.TOMLDecodeError as e:
        raise FormatError(str(p), 0, "TOML category rules", str(e))
    rules = []
    for i, c in enumerate(data.get("category", []), 1):
        try:
            pats = c["match"]
            rx = re.compile("|".join(f"(?:{x})" for x in pats))
            rules.append(Rule(c["name"], c.get("title", c["name"]), c.get("color", ""), rx))
        except (KeyError, re.error) as e:
            raise FormatError(str(p), 0, f"category #{i} with name and match regexes",
                              str(e))
    return rules


OTHER = "other"


class Categorizer:
    """Frame -> rule and stack -> category, with caches (frames repeat a lot)."""

    def __init__(self, rules: list[Rule] | None = None):
        self.rules = load_rules() if rules is None else rules
        self._frame: dict[str, str | None] = {}
        self._stack: dict[str, str] = {}

    def frame(self, name: str) -> str | None:
        got = self._frame.get(name, False)
        if got is False:
            got = next((r.name for r in self.rules if r.regex.search(name)), None)
            self._frame[name] = got
        return got

    def stack(self, frames: str) -> str:
        got = self._stack.get(frames)
        if got is None:
            got = OTHER
            for f in reversed(frames.split(";")):
                c = self.frame(f)
                if c is not None:
                    got = c
                    break
            self._stack[frames] = got
        return got

    def series(self, df):
        import pandas as pd
        return pd.Series([self.stack(f) for f in df["frames"]], index=df.index,
                         dtype=object, name="category")


def category_table(df, phases: Iterable[Phase] | None = None,
                   rules: list[Rule] | None = None):
    """Share of samples by category, per phase (``all`` without phases).

    Columns: phase, category, samples (sum of count), weight (sum of weight), share
    (weight / the phase's total weight; perf's period for perf input, so shares match
    the flame graph's widths). Rows: each phase in order, categories by share."""
    import pandas as pd

    cat = Categorizer(rules)
    parts = [("all", df)] if phases is None else [(p.name, slice_phase(df, p))
                                                     for p in phases]
    rows = []
    for name, part in parts:
        c = cat.series(part)
        g = part.assign(category=c).groupby("category")[["count", "weight"]].sum()
        total = g["weight"].sum()
        g = g.sort_values(["weight", "count"], ascending=False)
        for k, r in g.iterrows():
            rows.append((name, k, int(r["count"]), int(r["weight"]),
                         float(r["weight"]) / total if total else 0.0))
    out = pd.DataFrame(rows, columns=["phase", "category", "samples", "weight", "share"])
    return out.astype({"samples": "int64", "weight": "int64", "share": "float64"})


def top_functions(df, n: int = 20):
    """perf report's flat profile: per function (frame name) ``self`` (weight of the
    samples it is the leaf of) and ``total`` (samples it is anywhere on the stack of,
    once per sample), with their percentages of all weight, by self then total."""
    import pandas as pd

    self_w: dict[str, int] = defaultdict(int)
    total_w: dict[str, int] = defaultdict(int)
    all_w = 0
    for frames, w in zip(df["frames"], df["weight"]):
        w = int(w)
        all_w += w
        fs = frames.split(";")
        self_w[fs[-1]] += w
        for f in set(fs):
            total_w[f] += w
    rows = sorted(total_w, key=lambda f: (-self_w.get(f, 0), -total_w[f], f))[:n]
    out = pd.DataFrame({
        "function": rows,
        "self": [self_w.get(f, 0) for f in rows],
        "total": [total_w[f] for f in rows]})
    out["self_pct"] = 100.0 * out["self"] / all_w if all_w else 0.0
    out["total_pct"] = 100.0 * out["total"] / all_w if all_w else 0.0
    return out.astype({"self": "int64", "total": "int64"})
