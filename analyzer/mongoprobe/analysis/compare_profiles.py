"""The on-CPU profiles of a comparison (``mongoprobe compare``): per matched phase, each
group's stack samples inside the phase (its runs' added up) beside its operations, so
that two groups are compared by CPU per *operation*, not per second: a configuration
that runs twice as fast spends twice the CPU per second for the same code.

record's profile samples every CPU at one rate (99 Hz) on every run, so a sample is the
same CPU time whichever run it comes from. :func:`scale` gives the factor a differential
flame graph applies to its first side (``stack_samples.diff_folded``'s ``scale``).
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass

from mongoprobe.model import stack_samples
from mongoprobe.model.phase import Phase

# how a differential graph scales its first side: per operation (the default), to the
# second side's total samples (difffolded.pl -n), or not at all
SCALES = ("op", "samples", "none")


@dataclass
class Side:
    """One group's profile in one phase."""
    folded: dict[str, int]          # stack -> samples, the group's runs added up
    operations: float               # their operations in the phase (ops/s x seconds)
    runs: int                       # the runs with a profile

    @property
    def samples(self) -> int:
        return sum(self.folded.values())

    @property
    def per_op(self) -> float:
        """On-CPU samples per operation (NaN without operations)."""
        return self.samples / self.operations if self.operations > 0 else math.nan


def phase_stacks(groups: list, comparison: dict) -> dict[str, dict[str, Side]]:
    """{matched phase: {group: Side}} from the runs that have an on-CPU profile (a
    group none of whose runs has one is left out); {} when no run has one. The phase's
    bounds and operations per run are the comparison's (``spans``, ``operations``)."""
    from mongoprobe.analysis.run_profile import run_stacks

    tables = {}
    for g in groups:
        for r, p in zip(g.runs, g.paths):
            try:
                tables[p] = run_stacks(r)
            except LookupError:         # (no profile in this run: ``without_profile``)
                continue
    if not tables:
        return {}
    out: dict[str, dict[str, Side]] = {}
    for ph in comparison["phases"]:
        sides = {}
        for g in groups:
            have = [p for p in g.paths if p in tables]
            if not have:
                continue
            folded: Counter = Counter()
            for p in have:
                start, end = ph["spans"][p]
                part = stack_samples.slice_phase(tables[p], Phase(ph["own_names"][p], start,
                                                                  end))
                folded.update(stack_samples.folded(part))
            sides[g.name] = Side(dict(folded), float(sum(ph["operations"][p] or 0
                                                         for p in have)), len(have))
        out[ph["name"]] = sides
    return out


def without_profile(groups: list) -> list[str]:
    """The runs of the groups that have no on-CPU profile."""
    return [p for g in groups for r, p in zip(g.runs, g.paths) if r.file("profile") is None]


def scale(before: Side, after: Side, how: str = "op") -> float | None:
    """The factor on ``before``'s counts so that the graph compares like with like:
    ``op`` its samples per operation times ``after``'s operations; ``samples`` its
    share of samples times ``after``'s total; ``none``: as sampled (None)."""
    if how == "none":
        return None
    if how == "samples":
        return after.samples / before.samples if before.samples else None
    if how != "op":
        raise ValueError(f"scale {how!r}: one of {', '.join(SCALES)}")
    if not before.operations > 0 or not after.operations > 0:
        raise ValueError("no operations counted on a side: a per-operation graph needs "
                         "them (--flamegraph-scale samples compares shares instead)")
    return after.operations / before.operations


def summary(stacks: dict[str, dict[str, Side]]) -> dict[str, dict[str, dict]]:
    """{phase: {group: {"samples", "operations", "samples_per_op", "runs"}}}: the
    ``profile`` key of ``compare --json``."""
    return {ph: {g: {"samples": s.samples, "operations": s.operations,
                     "samples_per_op": None if math.isnan(s.per_op) else s.per_op,
                     "runs": s.runs} for g, s in sides.items()}
            for ph, sides in stacks.items()}
