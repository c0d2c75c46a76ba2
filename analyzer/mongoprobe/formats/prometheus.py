"""Prometheus text exposition format (FerretDB's /debug/metrics) -> DataFrame.

Columns:
    name    str    metric name, e.g. ``ferretdb_client_requests_total``
    labels  dict   label name -> value
    value   float  sample value

Comment lines (``# HELP``, ``# TYPE``) and timestamps are skipped.
"""

from __future__ import annotations

import re

import pandas as pd

from .errors import FormatError

_SAMPLE = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})?\s+(\S+)(?:\s+\d+)?$')
_LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')


def is_prometheus(text: str) -> bool:
    return "# TYPE " in text[:4096] or "# HELP " in text[:4096]


def parse_prometheus(text: str, source: str = "<metrics>") -> pd.DataFrame:
    rows = []
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip() or line.startswith("#"):
            continue
        m = _SAMPLE.match(line)
        if not m:
            raise FormatError(source, n, "a sample line 'name{labels} value'", line)
        labels = {k: bytes(v, "utf-8").decode("unicode_escape") for k, v in _LABEL.findall(m[2] or "")}
        rows.append((m[1], labels, float(m[3])))
    return pd.DataFrame(rows, columns=["name", "labels", "value"])
