"""Every example in a command's ``--help`` epilog runs here or in test_examples_live.py
(pyperf's rule: an example no test runs goes stale).

The examples are read from the parser itself (``mongoprobe.cli.build_parser``;
``helpers/examples.py`` reads them, and holds EXPECT and the runner).
``test_every_example_says_what_it_prints`` fails when an example has no entry in EXPECT
(what it must print) or an entry no longer has its example; ``test_example`` runs each
one, as printed, in a scratch directory: here those that neither trace, start a process
nor need a shell, through ``cli.main`` in this process; the others, as processes (through
bash), in test_examples_live.py. Only these are replaced:

    4127, 4133, 27017   the test FerretDB's pid, one of its threads, its port
    -d N / -i N         -d 2 / -i 1 (the same command, shorter)
    NiMq:LENGTH         a load phase of 2 s, or of 300 documents for a count (:Ni)
    RUN                 a copy of the recorded run samples/load/run-ferretdb

The files an example reads are real samples (INPUTS), ``samples/`` is linked into the
scratch directory, and ``runs/r1`` is the sample run for an example that reads it. Each
must exit 0, print no traceback, and print what EXPECT says.
"""

from __future__ import annotations

import argparse
import subprocess
import sys

import pytest

from mongoprobe.cli import build_parser
from helpers import examples as ex


def test_every_command_shows_examples() -> None:
    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    bare = [name for name, sp in sub.choices.items() if not ex.epilog_examples(sp.epilog)]
    assert not bare, f"commands whose --help has no examples: {bare}"


def test_the_parser_builds_without_the_heavy_modules() -> None:
    """A command's start (--help too) builds the whole parser: it imports neither pandas
    nor pymongo (half a second), only the command that runs imports what it needs."""
    code = ("import sys; from mongoprobe import cli; cli.build_parser(); "
            "print(sorted({'pandas', 'pymongo', 'numpy'} & set(sys.modules)))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True)
    assert out.stdout.strip() == "[]"


def test_every_example_says_what_it_prints() -> None:
    untested = sorted(set(ex.EXAMPLES) - set(ex.EXPECT))
    assert not untested, f"examples no test runs (add them to EXPECT): {untested}"
    stale = sorted(set(ex.EXPECT) - set(ex.EXAMPLES))
    assert not stale, f"EXPECT entries no --help shows any more: {stale}"


def test_epilog_reader() -> None:
    text = ("desc\n\nexamples:\n  mongoprobe a -x 1   # a comment\n  mongoprobe b \\\n"
            "      --long   # two lines\n  mongoprobe c\n                   # said below\n"
            "\nformats:\n  not an example\n")
    assert ex.epilog_examples(text) == ["mongoprobe a -x 1", "mongoprobe b --long",
                                        "mongoprobe c"]


@pytest.mark.parametrize("example", ex.params(e for e in ex.EXAMPLES if ex.in_process(e)))
def test_example(example: str, tmp_path, monkeypatch) -> None:
    assert example in ex.EXPECT, f"no EXPECT entry for {example!r}"
    why = ex.why_not(ex.needs_of(example))
    if why:
        pytest.skip(why)
    ex.scratch(tmp_path, example)
    env = ex.env_for(tmp_path, None)
    cmd = ex.adapt(example, None)
    rc, out, err = ex.run_in_process(cmd, tmp_path, env, monkeypatch)
    ex.check(example, cmd, rc, out, err, tmp_path)
