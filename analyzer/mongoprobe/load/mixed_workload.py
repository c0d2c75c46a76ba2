"""A fixed mixed pymongo workload with known counts per command.

Used by the demo, the probe tests and the overhead benchmark. Each of ``threads``
workers has its own MongoClient (one pooled connection) and its own collection, and
runs insert, find, update, delete, aggregate, count and a small-batch find that needs
getMore. Command monitoring records every command a worker sent: its connection's
local port, requestID, name and client-observed duration — the client's side of each
request, to set beside the server-side latency the probes measure.

``overlap_ids=True`` makes every worker number its requests 1, 2, 3, … (pymongo
draws them at random otherwise), so connections share requestIDs: exactly the case
that breaks probes keying replies by requestID alone.
"""

from __future__ import annotations

import collections
import contextlib
import threading
import time
from dataclasses import dataclass, field

import pandas as pd

CLIENT_COLUMNS = ["thread", "local_port", "request_id", "command", "duration_us"]


@dataclass
class LoadResult:
    """What the client did. ``client`` columns: thread, local_port, request_id,
    command, duration_us (pymongo's duration of the command)."""

    client: pd.DataFrame
    counts: dict[str, int] = field(default_factory=dict)
    seconds: float = 0.0
    operations: int = 0


class _Recorder:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.started: dict[tuple[int, int], tuple[int, str]] = {}
        self.rows: list[tuple] = []

    # pymongo.monitoring.CommandListener's interface
    def started_event(self, e) -> None:  # noqa: D401
        with self.lock:
            self.started[(threading.get_ident(), e.request_id)] = (e.request_id, e.command_name)

    def _done(self, e) -> None:
        with self.lock:
            rid, name = self.started.pop((threading.get_ident(), e.request_id), (e.request_id,
                                                                                 e.command_name))
            self.rows.append((threading.get_ident(), rid, name, e.duration_micros))

    succeeded = failed = _done

    def as_listener(self):
        from pymongo import monitoring

        rec = self

        class Listener(monitoring.CommandListener):
            def started(self, e):
                rec.started_event(e)

            def succeeded(self, e):
                rec._done(e)

            def failed(self, e):
                rec._done(e)

        return Listener()


@contextlib.contextmanager
def sequential_request_ids():
    """Every thread numbers its wire requests 1, 2, 3, … while inside."""
    from pymongo import message

    local = threading.local()
    original = message._randint

    def next_id() -> int:
        local.n = getattr(local, "n", 0) + 1
        return local.n

    def op_msg(flags, command, identifier, docs, opts):
        # pymongo's C extension draws its own random requestID: use the Python path.
        data, total, max_bson = message._op_msg_no_header(flags, command, identifier, docs, opts)
        rid, msg = getattr(message, "__pack_message")(2013, data)
        return rid, msg, total, max_bson

    saved = message._op_msg_uncompressed
    message._randint, message._op_msg_uncompressed = next_id, op_msg
    try:
        yield
    finally:
        message._randint, message._op_msg_uncompressed = original, saved


def _local_port(client) -> int | None:
    # pymongo keeps the pooled socket here in 4.x; only used to label rows.
    try:
        server = client._topology.select_server_by_address(client.address, "find")
        return server.pool.conns[0].conn.sock.getsockname()[1]
    except (AttributeError, IndexError, KeyError, OSError):  # pymongo's internals moved
        return None


def _worker(uri: str, i: int, rounds: int, rec: _Recorder, ports: dict, done: threading.Barrier,
            release: threading.Event, errors: list) -> None:
    import pymongo

    client = pymongo.MongoClient(uri, maxPoolSize=1, event_listeners=[rec.as_listener()],
                                 serverSelectionTimeoutMS=20000)
    try:
        coll = client.mongoprobe[f"mixed{i}"]
        coll.drop()      # repeatable on the same server
        for r in range(rounds):
            base = r * 10
            for j in range(10):
                coll.insert_one({"_id": base + j, "k": base + j, "pad": "x" * 256})
            for j in range(5):
                coll.find_one({"_id": base + j})
            list(coll.find({"_id": {"$lt": base + 10}}).batch_size(3))   # find + getMore
            coll.update_one({"_id": base}, {"$set": {"u": 1}})
            coll.delete_one({"_id": base + 9})
            list(coll.aggregate([{"$match": {"k": {"$gte": base}}}, {"$limit": 5}]))
            client.mongoprobe.command("count", f"mixed{i}")
        ports[threading.get_ident()] = _local_port(client)
    except Exception as e:  # noqa: BLE001 - reported by run()
        errors.append(e)
    finally:
        try:
            done.wait(60)
            release.wait(60)     # keep connections open until the caller is done looking
        finally:
            client.close()


def run(uri: str, threads: int = 8, rounds: int = 3, overlap_ids: bool = True,
        while_open=None) -> LoadResult:
    """Run the load; ``while_open()`` is called after the work, before the clients close."""
    rec = _Recorder()
    ports: dict[int, int | None] = {}
    errors: list = []
    done = threading.Barrier(threads + 1)
    release = threading.Event()
    ctx = sequential_request_ids() if overlap_ids else contextlib.nullcontext()
    with ctx:
        t0 = time.monotonic()
        workers = [threading.Thread(target=_worker, args=(uri, i, rounds, rec, ports, done,
                                                          release, errors))
                   for i in range(threads)]
        for w in workers:
            w.start()
        done.wait(600)
        seconds = time.monotonic() - t0
        try:
            if while_open:
                while_open()
        finally:
            release.set()
            for w in workers:
                w.join()
    if errors:
        raise RuntimeError(f"workload failed: {errors[0]!r}")
    df = pd.DataFrame([(t, ports.get(t), rid, name, dur) for t, rid, name, dur in rec.rows],
                      columns=CLIENT_COLUMNS)
    counts = dict(collections.Counter(df["command"]))
    ops = sum(v for k, v in counts.items() if k not in ("endSessions", "drop"))
    return LoadResult(df, counts, seconds, ops)


def main(argv: list[str] | None = None) -> int:
    import argparse

    p = argparse.ArgumentParser(prog="python -m mongoprobe.load.mixed_workload",
                                description="Drive the fixed mixed workload and print its counts.")
    p.add_argument("--uri", required=True)
    p.add_argument("--threads", type=int, default=8)
    p.add_argument("--rounds", type=int, default=3)
    a = p.parse_args(argv)
    r = run(a.uri, a.threads, a.rounds)
    print(f"{r.operations} operations in {r.seconds:.1f}s ({r.operations / r.seconds:.0f}/s): "
          + ", ".join(f"{k} {v}" for k, v in sorted(r.counts.items())))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
