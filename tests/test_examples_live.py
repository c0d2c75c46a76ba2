"""The examples of test_examples.py that run as processes (through bash): those that
trace, start a server or a capture, drive a load, or need a shell. Their substitutions
and checks are test_examples.py's (``helpers/examples.py``).

They run several at once (``helpers.examples.Runner``: a tracer compiles on one CPU
while others wait out their ``-d``, their probes' detaching or a server's start), the
longest first, each in its own scratch directory, all within the first test's setup;
each test checks its own example's result. A tracing example sees a short load (``mixedload``, one run at a time) once its
banner says it is attached, and one without ``-d`` is then stopped with SIGINT, as
Ctrl-C would. Tracing examples skip with the reason when this machine cannot trace (no
root, no bpftrace; bcc, DTrace, perf, tshark for theirs).
"""

from __future__ import annotations

import pytest

from helpers import examples as ex

LIVE = [e for e in ex.EXAMPLES if not ex.in_process(e)]


@pytest.fixture(scope="module")
def runner(request, tmp_path_factory):
    """Every selected example of this file that can run here, run (PARALLEL at once)."""
    selected = {item.callspec.params["example"] for item in request.session.items
                if item.path == request.path and hasattr(item, "callspec")}
    todo = [e for e in LIVE if e in selected and not ex.why_not(ex.needs_of(e))]
    target = (request.getfixturevalue("ferretdb")
              if any("target" in ex.needs_of(e) for e in todo) else None)
    r = ex.Runner(todo, target, tmp_path_factory)
    # every one ended before the first test goes on: none runs between this file's tests,
    # when a serial test on another worker may be running alone (conftest.py)
    r.close()
    return r


@pytest.mark.parametrize("example", ex.params(LIVE))
def test_example(example: str, request) -> None:
    assert example in ex.EXPECT, f"no EXPECT entry for {example!r}"
    why = ex.why_not(ex.needs_of(example))
    if why:
        pytest.skip(why)
    cmd, rc, out, err, tmp = request.getfixturevalue("runner").result(example)
    ex.check(example, cmd, rc, out, err, tmp)
