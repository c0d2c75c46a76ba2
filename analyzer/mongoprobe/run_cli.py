"""Subcommands of recorded runs: ``mongoprobe load`` and ``mongoprobe record``.

cli.py imports this module and calls ``register(subparsers)``; each subcommand is
one ``cmd_<name>(args)`` living beside its subject (load.py, record.py), which are
imported only when the subcommand runs.
"""

from __future__ import annotations

import argparse


def cmd_load(args: argparse.Namespace) -> int:
    from . import load
    return load.cmd_load(args)


def cmd_record(args: argparse.Namespace) -> int:
    from . import record
    return record.cmd_record(args)


def register(sub) -> None:
    from . import load, record

    lp = sub.add_parser("load", help="built-in insert/query workload (insert benchmark style)",
                        description=load.__doc__.split("\n")[0],
                        formatter_class=argparse.RawDescriptionHelpFormatter,
                        epilog=load.EXAMPLES)
    load.add_arguments(lp)
    lp.set_defaults(func=cmd_load)

    rp = sub.add_parser("record", help="run a load command while probes record the server",
                        description=record.__doc__.split("\n")[0],
                        formatter_class=argparse.RawDescriptionHelpFormatter,
                        epilog=record.EXAMPLES)
    record.add_arguments(rp)
    rp.set_defaults(func=cmd_record)
