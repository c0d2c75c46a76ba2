"""A recorded run's on-CPU profile (``RUN/profile.bt.txt``): its stack samples on the
wall clock its phases use, the category shares per phase (for the phase table) and
the flame graphs per phase and between two phases (for the report)."""

from __future__ import annotations

from pathlib import Path

from mongoprobe.analysis.cpu_categories import category_table
from mongoprobe.model.clock import Clock
from mongoprobe.model.phase import phases_from
from mongoprobe.model.stack_samples import folded, slice_phase

def run_stacks(run, which: str = "profile", bucket: float | None = 1.0):
    """The table of a run's profile (``profile.bt.txt``; ``offcpu`` for off-CPU), with
    ``time`` moved to wall-clock epoch seconds by the probe's ``# clock`` line and the
    run's clock offset, so phases (wall clock) slice it."""
    df = run.stack_table(which)
    clock = df.attrs.get("meta", {}).get("clock")
    if clock:
        # the probe's "# clock monotonic_ns=M elapsed_ns=E" pair maps bpftrace's
        # elapsed seconds to CLOCK_MONOTONIC, and the run's offset that to the wall
        mono0, elapsed0 = clock
        df["time"] = Clock(run.offset_ns).wall_s(mono0 - elapsed0 + df["time"] * 1e9)
    if bucket:
        df["time"] = (df["time"] // bucket) * bucket
    import numpy as np
    t = df["time"].to_numpy()
    df["second"] = np.where(np.isnan(t), -1, np.floor(np.nan_to_num(t, nan=-1.0))
                            ).astype("int64")
    return df


def run_category_shares(run, phases) -> dict[str, dict[str, float]]:
    """{phase: {category: share}} of a run's on-CPU profile (for the phase table)."""
    df = run_stacks(run)
    t = category_table(df, phases_from(phases))
    out: dict[str, dict[str, float]] = {}
    for r in t.itertuples(index=False):
        out.setdefault(r.phase, {})[r.category] = round(r.share, 6)
    return out


def run_flamegraphs(run, phases, diff: tuple[str, str] | None = None
                    ) -> list[tuple[str, str]]:
    """[(title, SVG text)] per phase of a run's profile, and the differential graph of
    ``diff`` = (phase A, phase B) when given (for the HTML report)."""
    import tempfile

    from mongoprobe.views import flamegraph

    df = run_stacks(run)
    ph = phases_from(phases)
    name = Path(run.path).name
    pid = run.manifest.get("target", {}).get("pid")
    out = []
    with tempfile.TemporaryDirectory() as tmp:
        for p in ph:
            part = slice_phase(df, p)
            if not len(part):
                continue
            title = flamegraph.title_for(name, phase=p.name, pid=pid)
            svg = Path(tmp) / f"{len(out)}.svg"
            flamegraph.render(folded(part), svg, title=title)
            out.append((title, svg.read_text()))
        if diff:
            a, b = (next(p for p in ph if p.name == d) for d in diff)
            title = flamegraph.title_for(name, phase=f"{a.name} -> {b.name}", pid=pid,
                                         diff=True)
            svg = Path(tmp) / "diff.svg"
            flamegraph.render_diff(folded(slice_phase(df, a)), folded(slice_phase(df, b)),
                                   svg, title=title)
            out.append((title, svg.read_text()))
    return out
