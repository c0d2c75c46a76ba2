"""The one error every parser raises on input it cannot read."""

from __future__ import annotations


class FormatError(ValueError):
    """Unknown or damaged input: names the file, the line and what was expected."""

    def __init__(self, source: str, line: int, expected: str, got: str = ""):
        self.source, self.line, self.expected = source, line, expected
        got = f": {got[:60]!r}" if got else ""
        super().__init__(f"{source}:{line}: expected {expected}{got}")
