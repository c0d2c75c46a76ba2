"""Folded stacks -> SVG flame graphs, by inferno or Brendan Gregg's flamegraph.pl.

Which renderer (``renderer()``), first found wins:

1. ``$FLAMEGRAPH_DIR/flamegraph.pl`` when ``FLAMEGRAPH_DIR`` names a FlameGraph
   checkout (run with ``perl``);
2. ``inferno-flamegraph`` installed by ``scripts/setup.sh`` into the tool folder:
   ``$MONGOPROBE_TOOLS/inferno-INFERNO_VERSION/bin`` (default ``~/.cache/mongoprobe``);
3. ``inferno-flamegraph`` on ``PATH``.

Both read the same folded lines and take the same options used here (``--title``,
``--subtitle``, ``--countname``, ``--colors``, ``--cp``). Frames that match a category
rule (``flamegraphs/categories.toml``) are drawn in that category's colour through the
renderers' consistent-palette file (``palette.map`` in the directory they run in, one
``NAME->rgb(R,G,B)`` per line); other frames keep the ``hot`` palette. A differential
graph takes ``stack count_before count_after`` lines (``stacks.diff_folded``, as
``difffolded.pl`` / ``inferno-diff-folded`` write them): the renderer colours frames
red where the second profile has more, blue where less.

Titles name the run, the phase and the pid (``title_for``).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

INFERNO_VERSION = "0.12.8"      # scripts/setup.sh installs this version


class RenderError(RuntimeError):
    """No renderer, or the renderer failed: the message says which and how to fix it."""


@dataclass(frozen=True)
class Renderer:
    kind: str            # "flamegraph.pl" or "inferno"
    argv: tuple[str, ...]
    version: str


def inferno_bin(tool: str = "inferno-flamegraph") -> Path:
    from mongoprobe.run.target import tools_dir
    return tools_dir() / f"inferno-{INFERNO_VERSION}" / "bin" / tool


def renderer() -> Renderer:
    fg_dir = os.environ.get("FLAMEGRAPH_DIR")
    if fg_dir:
        pl = Path(fg_dir) / "flamegraph.pl"
        if not pl.exists():
            raise RenderError(f"FLAMEGRAPH_DIR={fg_dir}: no flamegraph.pl there")
        perl = shutil.which("perl")
        if not perl:
            raise RenderError("FLAMEGRAPH_DIR is set but perl is not installed")
        return Renderer("flamegraph.pl", (perl, str(pl)), "FlameGraph")
    b = inferno_bin()
    if b.exists():
        return Renderer("inferno", (str(b),), INFERNO_VERSION)
    found = shutil.which("inferno-flamegraph")
    if found:
        return Renderer("inferno", (found,), "PATH")
    raise RenderError(f"no flame-graph renderer: {b} is missing (run scripts/setup.sh) "
                      "and FLAMEGRAPH_DIR is not set")


def title_for(run: str, phase: str | None = None, pid: int | str | None = None,
              diff: bool = False, time: str | None = None) -> str:
    """``RUN - phase NAME - pid N`` (the parts that are known)."""
    parts = [("Differential: " if diff else "") + str(run)]
    if phase:
        parts.append(f"phase {phase}")
    if time:
        parts.append(time)
    if pid not in (None, "", -1):
        parts.append(f"pid {pid}")
    return " - ".join(parts)


def palette(stacks: dict[str, int] | list[str], rules=None) -> dict[str, str]:
    """{frame name: rgb(...)} for the frames that match a category rule (each frame by
    its own name, first matching rule in file order)."""
    from mongoprobe.analysis.cpu_categories import Categorizer

    cat = Categorizer(rules)
    colors = {r.name: r.color for r in cat.rules}
    out: dict[str, str] = {}
    seen: set[str] = set()
    for stack in stacks:
        for f in stack.split(";"):
            if f in seen:
                continue
            seen.add(f)
            c = cat.frame(f)
            if c and colors.get(c) and "->" not in f:
                out[f] = colors[c]
    return out


def _run(r: Renderer, lines_text: str, out: Path, args: list[str], cwd: str) -> None:
    src = Path(cwd) / "input.folded"
    src.write_text(lines_text)
    argv = [*r.argv, *args, str(src)]
    try:
        p = subprocess.run(argv, cwd=cwd, capture_output=True, timeout=600)
    except OSError as e:
        raise RenderError(f"{argv[0]}: {e}")
    if p.returncode != 0 or not p.stdout:
        err = p.stderr.decode("utf-8", "replace").strip().splitlines()
        raise RenderError(f"{r.kind} failed (exit {p.returncode}): "
                          f"{err[-1] if err else 'no output'}")
    tmp = out.with_name(out.name + ".tmp")
    tmp.write_bytes(p.stdout)
    tmp.replace(out)


def _common(title: str, subtitle: str | None, countname: str) -> list[str]:
    args = ["--title", title, "--countname", countname]
    if subtitle:
        args += ["--subtitle", subtitle]
    return args


def render(counts: dict[str, int] | str | os.PathLike, out: str | os.PathLike,
           title: str = "Flame Graph", subtitle: str | None = None,
           countname: str = "samples", colors: str = "hot", categories: bool = True,
           rules=None) -> Path:
    """Write the SVG flame graph of folded ``counts`` ({stack: count}, or the path of
    a folded file) to ``out``."""
    from mongoprobe.model.stack_samples import folded_lines, read_folded

    if isinstance(counts, (str, os.PathLike)):
        counts = read_folded(counts)
    if not counts or not any(counts.values()):
        raise RenderError("no samples to draw (the profile or the slice is empty)")
    out = Path(out)
    r = renderer()
    args = _common(title, subtitle, countname) + ["--colors", colors]
    with tempfile.TemporaryDirectory(prefix="mongoprobe-fg-") as tmp:
        if categories:
            pal = palette(counts, rules)
            if pal:
                Path(tmp, "palette.map").write_text(
                    "".join(f"{k}->{v}\n" for k, v in sorted(pal.items())))
                args.append("--cp")
        _run(r, "".join(folded_lines(counts)), out, args, tmp)
    return out


def render_diff(before: dict[str, int], after: dict[str, int], out: str | os.PathLike,
                title: str = "Differential Flame Graph", subtitle: str | None = None,
                countname: str = "samples", normalize: bool = True,
                scale: float | None = None) -> Path:
    """Write the differential flame graph of two folded profiles: frames sized by
    ``after``, red where ``after`` has more, blue where it has less (``normalize``
    scales ``before`` to ``after``'s total first, as ``difffolded.pl -n``; ``scale``
    multiplies ``before`` by that factor instead, and the subtitle should say why)."""
    from mongoprobe.model.stack_samples import diff_folded, diff_lines

    rows = diff_folded(before, after, normalize=normalize, scale=scale)
    if not rows or not any(b for _s, _a, b in rows):
        raise RenderError("no samples to draw in the second profile of the diff")
    out = Path(out)
    r = renderer()
    sub = subtitle or ("red: more in the second profile, blue: less"
                       + (" (first scaled to the second's total)" if normalize else ""))
    with tempfile.TemporaryDirectory(prefix="mongoprobe-fg-") as tmp:
        _run(r, "".join(diff_lines(rows)), out, _common(title, sub, countname), tmp)
    return out
