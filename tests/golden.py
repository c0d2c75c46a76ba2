"""Golden files: one tree (``tests/expected/``) and one way to re-bless them.

A test renders what it checks as text and calls :func:`check`; with
``MONGOPROBE_BLESS=1`` in the environment the file is (re)written instead, so after a
deliberate change ``MONGOPROBE_BLESS=1 scripts/test.sh`` and a review of ``git diff
tests/expected`` is the whole procedure."""

from __future__ import annotations

import json
import os
from pathlib import Path

EXPECTED = Path(__file__).resolve().parent / "expected"
BLESS = os.environ.get("MONGOPROBE_BLESS") == "1"


def check(rel: str | Path, text: str) -> None:
    """``text`` equals the golden file ``tests/expected/REL`` (written when blessing)."""
    path = EXPECTED / rel
    if BLESS:
        path.parent.mkdir(parents=True, exist_ok=True)
        if not path.exists() or path.read_text() != text:
            path.write_text(text)
    assert path.exists(), f"tests/expected/{rel} missing: run with MONGOPROBE_BLESS=1"
    assert text == path.read_text(), \
        f"tests/expected/{rel} differs (review, then MONGOPROBE_BLESS=1 re-blesses it)"


def check_json(rel: str | Path, data) -> None:
    check(rel, json.dumps(data, indent=1, sort_keys=True) + "\n")


def files(sub: str) -> set[Path]:
    """Every golden file under ``tests/expected/SUB`` (to find stale ones)."""
    return {p for p in (EXPECTED / sub).rglob("*") if p.is_file()}
