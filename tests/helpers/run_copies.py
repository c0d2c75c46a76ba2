"""Changed copies of a recorded run folder, for the tests that read runs offline: as
recorded without --events, with other manifest keys."""

from __future__ import annotations

import json
from pathlib import Path


def edit_manifest(run: Path, **keys) -> Path:
    """``run``'s manifest.json with ``keys`` set (a value None removes its key)."""
    p = run / "manifest.json"
    m = json.loads(p.read_text())
    for k, v in keys.items():
        if v is None:
            m.pop(k, None)
        else:
            m[k] = v
    p.write_text(json.dumps(m))
    return run


def drop_events(run: Path) -> Path:
    """``run`` as if recorded without --events: the per-second histograms alone."""
    (run / "latency.events.parquet").unlink()
    return edit_manifest(run, latency_events_every=0)
