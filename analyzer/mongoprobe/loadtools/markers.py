"""Adapter for any tool that prints phase markers (``formats/phase_markers.py``)::

    ### phase start name=NAME [time=EPOCH_SECONDS]
    ### phase end name=NAME [time=EPOCH_SECONDS]

on stdout or stderr; a marker without ``time=`` takes the line's receive time. The
markers give phases only: such a tool prints no rates the analyzer can read, so the
phase table's throughput comes from the server's own request counts.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from ..formats import phase_markers
from . import PHASE_COLUMNS, ToolOutput, frame

NAME = "markers"


def refuses(out: pd.DataFrame) -> str | None:
    if phase_markers.is_phase_markers("\n".join(out["text"])):
        return None
    return "no '### phase start|end name=NAME' lines"


def read(out: pd.DataFrame, source: str) -> ToolOutput:
    times = out["time"].to_numpy(dtype=float)
    ph = phase_markers.parse_phase_markers(
        list(out["text"]), source, receive_times=list(times) if np.isfinite(times).any()
        else None)
    return ToolOutput(NAME, frame([[p.name, p.start, p.end, NAME, ""]
                                   for p in ph.itertuples(index=False)], PHASE_COLUMNS),
                      notes=["the tool prints phase markers but no rates: throughput is the "
                             "server's request rate"])
