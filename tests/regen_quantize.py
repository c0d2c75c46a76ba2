"""Regenerate the golden outputs of the quantize parser from the real samples.

USAGE (from the repository root):
    python -m tests.regen_quantize        # or: python tests/regen_quantize.py

For every samples/quantize/<case>.txt it writes tests/expected/quantize/<case>.csv
(parse_quantize) and <case>.scalars.csv (parse_scalars). Review the diff before
committing: the tests compare against these files byte for byte.
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SAMPLES = ROOT / "samples" / "quantize"
EXPECTED = ROOT / "tests" / "expected" / "quantize"


def render(sample: Path) -> dict[Path, str]:
    """The expected files for one sample, as text (what the tests compare against)."""
    from mongoprobe.formats.quantize import parse_quantize, parse_scalars

    stem = sample.name.removesuffix(".txt")
    return {
        EXPECTED / f"{stem}.csv": parse_quantize(sample).to_csv(index=False, lineterminator="\n"),
        EXPECTED / f"{stem}.scalars.csv": parse_scalars(sample).to_csv(
            index=False, lineterminator="\n"
        ),
    }


def main() -> int:
    sys.path.insert(0, str(ROOT / "analyzer"))  # works without an installed package too
    EXPECTED.mkdir(parents=True, exist_ok=True)
    for sample in sorted(SAMPLES.glob("*.txt")):
        for path, text in render(sample).items():
            old = path.read_text() if path.exists() else None
            path.write_text(text)
            state = "unchanged" if old == text else ("new" if old is None else "UPDATED")
            print(f"{state:9} {path.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
