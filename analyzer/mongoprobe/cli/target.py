"""``mongoprobe target start|stop|status``: the embedded FerretDB (``mongoprobe.run.target``)."""

from __future__ import annotations

import argparse
import json

from .common import RAW, CommandError

EXAMPLES = """examples:
  mongoprobe target start                 # start the embedded FerretDB, print pid/uri
  mongoprobe target status --json         # {"pid", "uri", "metrics_url"}
  mongoprobe target start --tls --json    # TLS only: the uri carries tls=true and the CA
  mongoprobe target start --backend postgresql   # FerretDB on a private PostgreSQL
  mongoprobe target stop
"""


def cmd_target(args: argparse.Namespace) -> int:
    from mongoprobe.run import target

    if args.action == "start":
        try:
            info = target.start(tls=args.tls, backend=args.backend)
        except target.TargetError as e:
            raise CommandError(str(e)) from None
    elif args.action == "stop":
        stopped = target.stop()
        if not args.json:
            print("stopped" if stopped else "not running")
        return 0
    else:
        info = target.status()
        if info is None:
            if args.json:
                print(json.dumps({"pid": None, "uri": None, "metrics_url": None}))
            else:
                print("not running")
            return 1
    if args.json:
        print(info.json())
    else:
        print(f"pid          {info.pid}\nuri          {info.uri}\nmetrics_url  {info.metrics_url}")
        if info.backend_pid:
            print(f"backend      {info.backend} (pid {info.backend_pid})")
    return 0


def register(sub) -> None:
    t = sub.add_parser("target", help="the embedded FerretDB target", formatter_class=RAW,
                       epilog=EXAMPLES,
                       description="Start, stop or look at the embedded FerretDB (SQLite "
                       "or PostgreSQL backend; state under $MONGOPROBE_TARGET_DIR).")
    t.add_argument("action", choices=["start", "stop", "status"])
    t.add_argument("--json", action="store_true")
    t.add_argument("--tls", action="store_true",
                   help="start: serve TLS only, with a self-signed certificate (the uri "
                        "carries tls=true and its CA file)")
    t.add_argument("--backend", choices=["sqlite", "postgresql"], default="sqlite",
                   help="start: where FerretDB stores data: SQLite files (default) or a "
                        "private PostgreSQL cluster started and stopped with it")
    t.set_defaults(func=cmd_target)
