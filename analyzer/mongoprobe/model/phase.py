"""The one phase (window) type: a named time range [start, end), half-open, in the time
base of what it slices (a run's phases: wall-clock epoch seconds).

Tables between stages keep phases as the documented columns ``name, start, end`` (a
load tool's ``loadtools.PHASE_COLUMNS``, ``traffic_phases.infer``, the phase markers,
``phases --json``); code that works on a phase takes a :class:`Phase`, converted at the
edge with :func:`phases_from`, and :func:`frame` makes the table back.
"""

from __future__ import annotations

import io
import math
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

COLUMNS = {"name": "str", "start": "float64", "end": "float64"}


@dataclass(frozen=True)
class Phase:
    """A named time range [start, end) (``end`` NaN: not ended)."""
    name: str
    start: float
    end: float

    @classmethod
    def of(cls, row: Any) -> "Phase":
        """A phase from anything with name, start and end: a Phase, a table's row
        (``itertuples``), a record (dict)."""
        if isinstance(row, Phase):
            return row
        get = row.get if isinstance(row, dict) else (lambda k: getattr(row, k))
        return cls(str(get("name")), float(get("start")), float(get("end")))

    @property
    def seconds(self) -> float:
        return self.end - self.start

    @property
    def span(self) -> tuple[float, float]:
        return self.start, self.end

    def contains(self, t):
        """Whether ``t`` (a number, numpy array or Series of times) is inside [start, end)."""
        return (t >= self.start) & (t < self.end)

    def whole_seconds(self):
        """The starts of the phase's whole seconds, counted from its start."""
        import numpy as np
        n = int(math.floor(self.seconds)) if self.end > self.start else 0
        return self.start + np.arange(n, dtype=float)


def phases_from(obj: Any) -> list[Phase]:
    """Phases from a table or records with name/start/end, Phases, a ``{"phases": [...]}``
    dict (``mongoprobe phases --json``), or a JSON / CSV file holding either."""
    if isinstance(obj, (str, os.PathLike)):
        text = Path(obj).read_text()
        if text.lstrip().startswith(("{", "[")):
            import json
            obj = json.loads(text)
        else:
            import pandas as pd
            obj = pd.read_csv(io.StringIO(text))
    if isinstance(obj, dict):
        obj = obj.get("phases", [])
    if hasattr(obj, "itertuples"):
        obj = obj.itertuples(index=False)
    return [Phase.of(r) for r in obj]


def frame(phases):
    """The table (columns COLUMNS) of ``phases``."""
    import pandas as pd
    rows = [(p.name, p.start, p.end) for p in phases]
    df = (pd.DataFrame(rows, columns=list(COLUMNS)) if rows else
          pd.DataFrame({c: pd.Series(dtype=t) for c, t in COLUMNS.items()}))
    return df.astype(COLUMNS)
