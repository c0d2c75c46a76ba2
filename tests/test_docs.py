"""The user's documentation names only what exists: README.md and docs/*.md.

Three kinds of name go stale when code moves, and each is checked in this process
(no subprocess per name, so the test takes well under a second):

  * a file of the repository (``probes/mongo_latency.bt``, ``tests/test_*.py``: a
    path under one of the repository's top-level folders, or a relative link);
  * a Python name ``mongoprobe.x.y`` (a module, or an attribute of one);
  * a command ``mongoprobe SUBCOMMAND`` in code (the parser of ``mongoprobe.cli``).

``test_the_checks_can_fail`` feeds them a page that names one of each that does not
exist, so the checks are known to find what they look for.
"""

from __future__ import annotations

import argparse
import importlib
import re
from pathlib import Path

import pytest

from mongoprobe import cli

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]

# Paths are recognised by their first folder: the repository's own top-level folders,
# not those .gitignore names (runs/, build/: outputs a page may show being written).
GITIGNORE = ROOT / ".gitignore"
IGNORED = ({x.strip().strip("/") for x in GITIGNORE.read_text().splitlines()}
           if GITIGNORE.exists() else set())
TOP = sorted(p.name for p in ROOT.iterdir()
             if p.is_dir() and not p.name.startswith(".") and p.name not in IGNORED
             and not p.name.endswith(".egg-info"))
PATH_RE = re.compile(r"(?<![\w./$-])((?:%s)/[\w.*/-]*[\w*])" % "|".join(map(re.escape, TOP)))
LINK_RE = re.compile(r"\]\(([^)#\s]+)(?:#[^)]*)?\)")
MODULE_RE = re.compile(r"(?<![\w./-])mongoprobe(?:\.[A-Za-z_]\w*)+")
CODE_RE = re.compile(r"```.*?```|`[^`\n]+`", re.S)
COMMAND_RE = re.compile(r"(?<![\w-])mongoprobe[ \t]+([a-z][\w-]*)")


def missing_paths(page: Path, text: str) -> list[str]:
    links = {m for m in LINK_RE.findall(text) if "://" not in m and not m.startswith("mailto:")}
    bad = []
    for name in sorted(set(PATH_RE.findall(text)) | links):
        # links are relative to the page, paths in prose to the repository's top
        bases = [page.parent, ROOT] if name in links else [ROOT]
        if not any(list(b.glob(name)) if "*" in name else (b / name).exists() for b in bases):
            bad.append(name)
    return bad


def resolves(name: str) -> bool:
    """NAME is a module, or an attribute of the longest importable prefix."""
    parts = name.split(".")
    for i in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:i]))
        except ModuleNotFoundError:
            continue
        for attr in parts[i:]:
            if not hasattr(obj, attr):
                return False
            obj = getattr(obj, attr)
        return True
    return False


def unknown_modules(text: str) -> list[str]:
    return sorted(n for n in set(MODULE_RE.findall(text)) if not resolves(n))


def subcommands() -> set[str]:
    parser = cli.build_parser()
    (sub,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    return set(sub.choices)


def unknown_commands(text: str, known: set[str]) -> list[str]:
    code = "\n".join(CODE_RE.findall(text))
    return sorted({c for c in COMMAND_RE.findall(code)} - known)


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_page_names_only_what_exists(page: Path) -> None:
    text = page.read_text()
    assert missing_paths(page, text) == [], f"{page.name}: files that do not exist"
    assert unknown_modules(text) == [], f"{page.name}: Python names that do not import"
    assert unknown_commands(text, subcommands()) == [], f"{page.name}: no such command"


def test_the_pages_are_checked() -> None:
    # the README names files, modules and commands: an extraction that finds none of
    # them has stopped looking
    text = (ROOT / "README.md").read_text()
    assert PATH_RE.findall(text) and MODULE_RE.findall(text)
    code = "\n".join(CODE_RE.findall(text))
    assert {"record", "phases", "latency"} <= set(COMMAND_RE.findall(code))


def test_the_checks_can_fail() -> None:
    page = ROOT / "README.md"
    text = ("see `probes/no_such_probe.bt`, [the notes](docs/no-such.md) and "
            "`bench/*.nothing`; `mongoprobe.no_such_module.x` and `mongoprobe.cli.no_attr`;\n"
            "```\n$ mongoprobe frobnicate -p 1\n$ mongoprobe record -o RUN -- true\n```\n"
            "prose: mongoprobe reads `mongoprobe.cli.build_parser`, `probes/README.md`")
    assert missing_paths(page, text) == ["bench/*.nothing", "docs/no-such.md",
                                         "probes/no_such_probe.bt"]
    assert unknown_modules(text) == ["mongoprobe.cli.no_attr", "mongoprobe.no_such_module.x"]
    assert unknown_commands(text, subcommands()) == ["frobnicate"]
