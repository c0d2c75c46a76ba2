"""What every parser reads: a text, a path, or an open file -> (text, source name).

One rule for all of them: a str holding no newline that names a file is read as a path
(one line cannot hold any of the formats: they all have a header and a row at least);
a str with newlines is the text itself; the source name is what error messages say.
"""

from __future__ import annotations

import io
import os
from pathlib import Path
from typing import IO


def read_input(text_or_path: str | os.PathLike[str] | IO[str], source: str | None
               ) -> tuple[str, str]:
    """(text, source name). A str with no newline that names a file is read as a path."""
    if isinstance(text_or_path, os.PathLike):
        p = Path(text_or_path)
        return p.read_text(errors="replace"), source or str(p)
    if isinstance(text_or_path, io.IOBase) or hasattr(text_or_path, "read"):
        name = getattr(text_or_path, "name", None)
        return text_or_path.read(), source or (str(name) if name else "<stream>")
    s = str(text_or_path)
    if s and "\n" not in s:
        if not os.path.isfile(s):
            raise FileNotFoundError(f"{s}: no such file (a one-line string is taken as a path)")
        return Path(s).read_text(errors="replace"), source or s
    return s, source or "<text>"
