"""mongoprobe load: an insert-benchmark-style workload over pymongo.

After Mark Callaghan's insert benchmark (iibench for MongoDB): phases that each run
N insert threads and M query threads for a while, a per-thread insert rate limit,
documents with an increasing key, a pad field and three secondary indexes, range
queries on a secondary index that fetch at most QUERY_LIMIT documents, and per-
interval rates with client response-time histograms.

USAGE: mongoprobe load [--uri URI] --phases SPEC [--pad 256] [--query-limit 4]
                       [--interval 1] [--db NAME] [--collection NAME] [--batch 1]

The phase SPEC (``parse_spec``) is a comma-separated list of ``Ni[@RATE].Mq:LENGTH``:

    10i.1q:60s        10 insert threads, 1 query thread, for 60 seconds
    1i@1000.10q:5m    1 insert thread limited to 1000 documents/s, 10 query threads
    0i.10q:1h         queries only
    10i.0q:100000i    until 100,000 documents are inserted (in this phase)

LENGTH is seconds (``60``, ``60s``), minutes (``5m``), hours (``1h``) or a number of
documents to insert (``100000i``). A phase is named by its spec without the length
(``1i@1000.10q``); a name used twice gets ``-2``, ``-3``... appended.

The collection (``purchases_index``, as iibench names it) is dropped and recreated
with its indexes first, unless ``--keep``. Documents::

    {_id: N (increasing), dateandtime: <date>, cashregisterid: 0..999,
     customerid: 0..99999, productid: 0..9999, price: float, data: <pad chars>}

Secondary indexes (iibench's): {price, customerid}, {cashregisterid, price,
customerid}, {price, dateandtime, customerid}. A query picks one of the three in
turn and asks for documents at or above a random value of its first field, in index
order (a sort on the index keys: the plan of iibench's hinted query on mongod;
``--no-sort`` drops it), projected on the index fields, at most --query-limit of
them. FerretDB v1.24 with SQLite pushes neither the sort nor the limit down: its
queries scan the collection and slow down as it grows, a real property to observe.

OUTPUT (stdout; parsed by ``mongoprobe.formats.mongoprobe_load``)::

    ### load uri=mongodb://127.0.0.1:41617/ db=mongoprobe collection=purchases_index pad=256 query_limit=4 batch=1 interval=1 sort=1
    # time phase elapsed_s ips qps inserts queries insert_hist insert_max_s query_hist query_max_s
    # hist buckets (response time below): 256us,1ms,4ms,16ms,64ms,256ms,1s,4s,16s,gt
    ### phase start name=2i.1q time=1795343487.512345
    1795343488.513 2i.1q 1.001 812.2 121.9 813 122 0,402,395,15,1,0,0,0,0,0 0.071234 0,77,44,1,0,0,0,0,0,0 0.018512
    ...
    ### phase end name=2i.1q time=1795343490.516201
    # phase 2i.1q: 3.0 s, 2,438 inserts (812.4/s, p95 790.0/s), 366 queries (121.9/s)
    #         256us    1ms    4ms   16ms   64ms  256ms     1s     4s    16s     gt      max
    # insert      0   1199   1190     46      3      0      0      0      0      0 0.071234
    # query       0    235    128      3      0      0      0      0      0      0 0.018512
    ...
    ### summary {"phases": [...], "commands": {...}, ...}

One interval line every --interval seconds of each phase, and one for the last
partial interval (elapsed_s tells its length), so interval counts add up to the
phase totals. Columns: ``time`` wall clock at the interval's end (epoch seconds);
``phase``; ``elapsed_s`` since the phase start; ``ips`` documents inserted per second
and ``qps`` queries per second in the interval; ``inserts``, ``queries`` cumulative
in the phase; ``insert_hist``/``query_hist`` the interval's client response times,
counted per insert command / per query into the buckets "less than 256us", "less
than 1ms", ... "less than 16s", "16s or more"; ``*_max_s`` the interval's slowest.
The phase markers ``### phase start|end name=NAME time=EPOCH_SECONDS`` are the
documented generic format other tools emit too. The summary JSON (one line) has per
phase totals and p95 rates, response-time histograms per client thread, and the
commands pymongo's command monitoring saw, per phase and for setup/teardown.

``ips_p95``/``qps_p95`` are the insert benchmark's "rate at the 95th percentile": the
rate that 95% of the phase's full intervals reached (the 5th percentile of the
interval rates; partial intervals shorter than half an interval are left out).

Exit status: 0; 1 when an operation failed (the error is on stderr and in the
summary); 130 when interrupted (SIGINT/SIGTERM end the current phase early, which
is marked and summarised, and skip the rest).

Threads: each thread uses its own pooled connection of one shared MongoClient;
pymongo releases the GIL while it waits on the socket, so a 2-core machine runs the
client, the server and the probes together.
"""

from __future__ import annotations

import collections
import datetime
import itertools
import json
import math
import random
import re
import signal
import sys
import threading
import time
from dataclasses import dataclass, field

from pymongo.errors import PyMongoError

from mongoprobe.load import COLLECTION

# How often a phase's loop looks for a Ctrl-C (the signal handler only sets a flag)
POLL_S = 0.1
BUCKET_BOUNDS_S = (256e-6, 1e-3, 4e-3, 16e-3, 64e-3, 256e-3, 1.0, 4.0, 16.0)
BUCKETS = ("256us", "1ms", "4ms", "16ms", "64ms", "256ms", "1s", "4s", "16s", "gt")
INDEXES = (
    ("price", "customerid"),
    ("cashregisterid", "price", "customerid"),
    ("price", "dateandtime", "customerid"),
)
MAX_CASHREGISTER, MAX_CUSTOMER, MAX_PRODUCT, MAX_PRICE = 1000, 100_000, 10_000, 500.0
INTERVAL_COLUMNS = ("time", "phase", "elapsed_s", "ips", "qps", "inserts", "queries",
                    "insert_hist", "insert_max_s", "query_hist", "query_max_s")


class SpecError(ValueError):
    """A phase spec that does not parse: the message says which part and why."""


@dataclass(frozen=True)
class Phase:
    name: str
    insert_threads: int
    query_threads: int
    rate: float | None = None        # documents per second per insert thread
    seconds: float | None = None     # run this long...
    docs: int | None = None          # ...or until this many documents are inserted
    spec: str = ""


_PHASE = re.compile(r"^(\d+)i(?:@(\d+(?:\.\d+)?))?\.(\d+)q:(\d+(?:\.\d+)?)(s|m|h|i)?$")
_UNIT = {"s": 1, "": 1, "m": 60, "h": 3600}


def parse_spec(spec: str) -> list[Phase]:
    """``10i.1q:60s,1i@1000.10q:60s`` -> [Phase, ...] (see the module doc)."""
    phases: list[Phase] = []
    seen: collections.Counter = collections.Counter()
    for part in (p.strip() for p in spec.split(",")):
        m = _PHASE.match(part)
        if not m:
            raise SpecError(f"phase {part!r}: expected Ni[@RATE].Mq:LENGTH, e.g. 10i.1q:60s "
                            "or 1i@1000.10q:5m")
        ins, rate, qry, length, unit = int(m[1]), m[2], int(m[3]), float(m[4]), m[5] or ""
        if ins == 0 and qry == 0:
            raise SpecError(f"phase {part!r}: no insert and no query threads")
        if rate is not None and float(rate) <= 0:
            raise SpecError(f"phase {part!r}: the rate limit must be positive")
        if unit == "i" and ins == 0:
            raise SpecError(f"phase {part!r}: a phase with no insert thread cannot run "
                            "until N documents are inserted")
        if length <= 0:
            raise SpecError(f"phase {part!r}: the length must be positive")
        base = part.split(":")[0]
        seen[base] += 1
        name = base if seen[base] == 1 else f"{base}-{seen[base]}"
        phases.append(Phase(name, ins, qry, float(rate) if rate else None,
                            None if unit == "i" else length * _UNIT[unit],
                            int(length) if unit == "i" else None, part))
    return phases


# --- statistics ----------------------------------------------------------------------


def bucket_of(seconds: float) -> int:
    for i, bound in enumerate(BUCKET_BOUNDS_S):
        if seconds < bound:
            return i
    return len(BUCKET_BOUNDS_S)


class Stats:
    """One thread's counts: the interval's (reset by take()) and the phase's."""

    def __init__(self, kind: str, thread: str):
        self.kind, self.thread = kind, thread
        self.lock = threading.Lock()
        self.items = 0                       # documents or queries, this interval
        self.hist = [0] * len(BUCKETS)       # per operation, this interval
        self.max_s = 0.0
        self.total_items = self.total_ops = 0
        self.total_hist = [0] * len(BUCKETS)
        self.total_max_s = 0.0

    def add(self, seconds: float, items: int) -> None:
        b = bucket_of(seconds)
        with self.lock:
            self.items += items
            self.hist[b] += 1
            if seconds > self.max_s:
                self.max_s = seconds
            self.total_items += items
            self.total_ops += 1
            self.total_hist[b] += 1
            if seconds > self.total_max_s:
                self.total_max_s = seconds

    def take(self) -> tuple[int, list[int], float]:
        with self.lock:
            out = (self.items, self.hist, self.max_s)
            self.items, self.hist, self.max_s = 0, [0] * len(BUCKETS), 0.0
        return out


def _sum_take(stats: list[Stats]) -> tuple[int, list[int], float]:
    items, hist, mx = 0, [0] * len(BUCKETS), 0.0
    for s in stats:
        n, h, m = s.take()
        items += n
        hist = [a + b for a, b in zip(hist, h)]
        mx = max(mx, m)
    return items, hist, mx


def _rate(r: float | None) -> str:
    return "-" if r is None else f"{r:.1f}/s"


def _p95(rates: list[float]) -> float | None:
    """normalize.p95_rate rounded for the summary; None without a full interval."""
    from mongoprobe.analysis.normalize import p95_rate    # imported by run() already

    r = p95_rate(rates)
    return None if math.isnan(r) else round(r, 3)


# --- command monitoring --------------------------------------------------------------


class CommandCounter:
    """pymongo command monitoring: commands started, per phase label of the thread."""

    def __init__(self) -> None:
        self.local = threading.local()
        self.lock = threading.Lock()
        self.counts: dict[str, collections.Counter] = collections.defaultdict(
            collections.Counter)

    def label(self, name: str) -> None:
        self.local.label = name

    def listener(self):
        from pymongo import monitoring

        counter = self

        class Listener(monitoring.CommandListener):
            def started(self, event):
                label = getattr(counter.local, "label", "other")
                with counter.lock:
                    counter.counts[label][event.command_name] += 1

            def succeeded(self, event):
                pass

            def failed(self, event):
                pass

        return Listener()

    def of(self, label: str) -> dict[str, int]:
        with self.lock:
            return dict(sorted(self.counts.get(label, {}).items()))


# --- the workload --------------------------------------------------------------------


@dataclass
class Options:
    uri: str
    phases: list[Phase]
    pad: int = 256
    query_limit: int = 4
    interval: float = 1.0
    db: str = "mongoprobe"
    collection: str = COLLECTION
    batch: int = 1
    keep: bool = False
    seed: int | None = None
    sort: bool = True


@dataclass
class _Run:
    opts: Options
    coll: object
    keys: itertools.count
    counter: CommandCounter
    stop: threading.Event = field(default_factory=threading.Event)
    interrupted: bool = False
    error: str | None = None
    inserted: int = 0                           # documents inserted in this phase
    lock: threading.Lock = field(default_factory=threading.Lock)


def _out(line: str) -> None:
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


def _fail(run: _Run, what: str, e: BaseException) -> None:
    with run.lock:
        if run.error is None:
            run.error = f"{what}: {type(e).__name__}: {e}"
            print(f"mongoprobe load: {run.error}", file=sys.stderr, flush=True)
    run.stop.set()


def _doc(rng: random.Random, key: int, pad: int) -> dict:
    customer = rng.randrange(MAX_CUSTOMER)
    return {"_id": key,
            "dateandtime": datetime.datetime.now(datetime.timezone.utc),
            "cashregisterid": rng.randrange(MAX_CASHREGISTER),
            "customerid": customer,
            "productid": rng.randrange(MAX_PRODUCT),
            "price": round(rng.random() * MAX_PRICE + customer / 1000.0, 2),
            "data": rng.randbytes((pad + 1) // 2).hex()[:pad]}


def _db_size(run: _Run) -> int | None:
    """The database's size at phase end (dbStats totalSize: data + indexes), as the
    insert benchmark reports dbSize. Counted under its own label, after the phase's
    end marker, so it is not one of the phase's operations."""
    import pymongo

    run.counter.label("dbstats")
    # A run ended early may have lost its server: don't wait out server selection
    # (10 s) for a size after Ctrl-C. pymongo.timeout bounds the selection too.
    limit = 2.0 if run.interrupted or run.error else None
    try:
        with pymongo.timeout(limit):
            st = run.coll.database.command("dbStats")
        size = st.get("totalSize", st.get("storageSize", 0) + st.get("indexSize", 0))
        return int(size)
    except PyMongoError:  # a server without dbStats has no size to report
        return None
    finally:
        run.counter.label("setup")


def _insert_worker(run: _Run, phase: Phase, stats: Stats, seed: int) -> None:
    run.counter.label(phase.name)
    rng = random.Random(seed)
    opts, coll = run.opts, run.coll
    step = opts.batch / phase.rate if phase.rate else 0.0
    next_t = time.monotonic()
    try:
        while not run.stop.is_set():
            if step:
                wait = next_t - time.monotonic()
                if wait > 0 and run.stop.wait(wait):
                    break
                # Catch up after a stall, but by at most one second's worth.
                next_t = max(next_t + step, time.monotonic() - 1.0)
            n = opts.batch
            if phase.docs is not None:
                with run.lock:
                    n = min(n, phase.docs - run.inserted)
                    run.inserted += max(n, 0)
                if n <= 0:
                    run.stop.set()
                    break
            docs = [_doc(rng, next(run.keys), opts.pad) for _ in range(n)]
            t0 = time.perf_counter()
            if n == 1:
                coll.insert_one(docs[0])
            else:
                coll.insert_many(docs, ordered=False)
            stats.add(time.perf_counter() - t0, n)
    except PyMongoError as e:  # the server refused or went away: one line, the run ends
        _fail(run, f"insert ({phase.name})", e)


def _query_worker(run: _Run, phase: Phase, stats: Stats, seed: int, first: int) -> None:
    run.counter.label(phase.name)
    rng = random.Random(seed)
    limit, coll, sort = run.opts.query_limit, run.coll, run.opts.sort
    i = first
    try:
        while not run.stop.is_set():
            keys = INDEXES[i % len(INDEXES)]
            i += 1
            lead = keys[0]
            if lead == "price":
                lo = round(rng.random() * MAX_PRICE, 2)
            else:
                lo = rng.randrange(MAX_CASHREGISTER)
            proj = dict.fromkeys(keys, 1) | {"_id": 0}
            t0 = time.perf_counter()
            cur = coll.find({lead: {"$gte": lo}}, proj)
            if sort:
                cur = cur.sort([(k, 1) for k in keys])
            list(cur.limit(limit))
            stats.add(time.perf_counter() - t0, 1)
    except PyMongoError as e:
        _fail(run, f"query ({phase.name})", e)


def _hist_text(h: list[int]) -> str:
    return ",".join(map(str, h))


def _table(name: str, h: list[int], mx: float) -> str:
    return f"# {name:<6}" + "".join(f"{v:>7}" for v in h) + f" {mx:.6f}"


def _run_phase(run: _Run, phase: Phase, seeds: random.Random) -> dict:
    opts = run.opts
    run.inserted = 0
    ins = [Stats("insert", f"i{k}") for k in range(phase.insert_threads)]
    qry = [Stats("query", f"q{k}") for k in range(phase.query_threads)]
    threads = [threading.Thread(target=_insert_worker, args=(run, phase, s, seeds.getrandbits(64)),
                                name=f"{phase.name}/{s.thread}", daemon=True) for s in ins]
    threads += [threading.Thread(target=_query_worker,
                                 args=(run, phase, s, seeds.getrandbits(64), k),
                                 name=f"{phase.name}/{s.thread}", daemon=True)
                for k, s in enumerate(qry)]
    start = time.time()
    m0 = time.monotonic()
    _out(f"### phase start name={phase.name} time={start:.6f}")
    for t in threads:
        t.start()
    end_m = m0 + phase.seconds if phase.seconds is not None else math.inf
    cum_i = cum_q = 0
    rows: list[tuple[float, float, int, int]] = []   # (length, elapsed, inserts, queries)
    ihist_tot = [0] * len(BUCKETS)
    qhist_tot = [0] * len(BUCKETS)
    last_m = m0

    def report(now_m: float) -> None:
        nonlocal cum_i, cum_q, last_m
        ni, ih, im = _sum_take(ins)
        nq, qh, qm = _sum_take(qry)
        length = now_m - last_m
        if length <= 0:
            return
        cum_i += ni
        cum_q += nq
        for k in range(len(BUCKETS)):
            ihist_tot[k] += ih[k]
            qhist_tot[k] += qh[k]
        elapsed = now_m - m0
        rows.append((length, elapsed, ni, nq))
        _out(f"{time.time():.3f} {phase.name} {elapsed:.3f} {ni / length:.1f} {nq / length:.1f} "
             f"{cum_i} {cum_q} {_hist_text(ih)} {im:.6f} {_hist_text(qh)} {qm:.6f}")
        last_m = now_m

    k = 1
    while not run.stop.is_set() and not run.interrupted:
        due = min(m0 + k * opts.interval, end_m)
        if run.stop.wait(min(POLL_S, max(0.0, due - time.monotonic()))) or run.interrupted:
            break
        now = time.monotonic()
        if now >= end_m:
            break
        if now >= m0 + k * opts.interval:
            report(now)
            k += 1
    run.stop.set()
    # Ended early (Ctrl-C, a failed operation): threads stuck on a dead server get a
    # two seconds, then the phase is closed without them (they are daemons).
    join_by = time.monotonic() + 2 if run.interrupted or run.error else None
    for t in threads:
        t.join(None if join_by is None else max(0.0, join_by - time.monotonic()))
    report(time.monotonic())
    end = time.time()
    _out(f"### phase end name={phase.name} time={end:.6f}")
    db_size = _db_size(run)

    seconds = end - start
    full = [(ln, ni, nq) for ln, _, ni, nq in rows if ln >= opts.interval / 2]
    result = {
        "name": phase.name, "spec": phase.spec,
        "insert_threads": phase.insert_threads, "query_threads": phase.query_threads,
        "rate": phase.rate, "start": round(start, 6), "end": round(end, 6),
        "seconds": round(seconds, 6),
        "inserts": sum(s.total_items for s in ins),
        "insert_ops": sum(s.total_ops for s in ins),
        "queries": sum(s.total_items for s in qry),
        "ips_avg": round(cum_i / seconds, 3) if seconds > 0 else 0.0,
        "qps_avg": round(cum_q / seconds, 3) if seconds > 0 else 0.0,
        "ips_p95": _p95([ni / ln for ln, ni, _ in full]),
        "qps_p95": _p95([nq / ln for ln, _, nq in full]),
        "insert_hist": dict(zip(BUCKETS, ihist_tot)),
        "insert_max_s": round(max((s.total_max_s for s in ins), default=0.0), 6),
        "query_hist": dict(zip(BUCKETS, qhist_tot)),
        "query_max_s": round(max((s.total_max_s for s in qry), default=0.0), 6),
        "clients": [{"thread": s.thread, "kind": s.kind, "ops": s.total_ops,
                     "items": s.total_items, "hist": dict(zip(BUCKETS, s.total_hist)),
                     "max_s": round(s.total_max_s, 6)} for s in ins + qry],
        "interrupted": run.interrupted,
        "commands": run.counter.of(phase.name),
        "db_size_bytes": db_size,
    }
    _out(f"# phase {phase.name}: {seconds:.1f} s, {result['inserts']:,} inserts "
         f"({result['ips_avg']:.1f}/s, p95 {_rate(result['ips_p95'])}), "
         f"{result['queries']:,} queries ({result['qps_avg']:.1f}/s)")
    _out("#       " + "".join(f"{b:>7}" for b in BUCKETS) + "     max")
    _out(_table("insert", ihist_tot, result["insert_max_s"]))
    _out(_table("query", qhist_tot, result["query_max_s"]))
    return result


def redact(uri: str) -> str:
    """The URI without a password."""
    return re.sub(r"(://[^:/@]+):[^@/]*@", r"\1:***@", uri)


def run(opts: Options) -> tuple[int, dict]:
    """Run every phase; print the output described above; return (exit status, summary)."""
    import pymongo

    # imported before the first phase, not at its end (_p95: pandas, 0.3 s here and
    # seconds on a busy machine): the next phase started that much later, an idle gap
    # in the server's traffic that split a phase found from it in two
    import mongoprobe.analysis.normalize  # noqa: F401

    counter = CommandCounter()
    counter.label("setup")
    threads = max(p.insert_threads + p.query_threads for p in opts.phases)
    client = pymongo.MongoClient(opts.uri, maxPoolSize=threads + 1,
                                 serverSelectionTimeoutMS=10000,
                                 event_listeners=[counter.listener()])
    r = _Run(opts, client[opts.db][opts.collection], itertools.count(), counter)
    seeds = random.Random(opts.seed)

    def interrupt(*_):
        # A flag only: Event.set() takes the event's lock, which this (main) thread
        # holds inside Event.wait when the signal may land, and would wait for itself
        # forever while the workers load on (seen: Ctrl-C never ended a phase). The
        # phase's loop sees the flag within POLL_S and sets the event itself.
        r.interrupted = True

    old = {s: signal.signal(s, interrupt) for s in (signal.SIGINT, signal.SIGTERM)}
    t_start = time.time()
    _out(f"### load uri={redact(opts.uri)} db={opts.db} collection={opts.collection} "
         f"pad={opts.pad} query_limit={opts.query_limit} batch={opts.batch} "
         f"interval={opts.interval:g} sort={int(opts.sort)}")
    _out("# " + " ".join(INTERVAL_COLUMNS))
    _out("# hist buckets (response time below): " + ",".join(BUCKETS))
    results: list[dict] = []
    try:
        try:
            if opts.keep:
                last = r.coll.find_one({}, {"_id": 1}, sort=[("_id", -1)])
                first_key = int(last["_id"]) + 1 if last else 0
            else:
                r.coll.drop()
                first_key = 0
            r.coll.create_indexes([pymongo.IndexModel([(k, 1) for k in keys])
                                   for keys in INDEXES])
            r.keys = itertools.count(first_key)
        except PyMongoError as e:
            _fail(r, "setup", e)
        for phase in opts.phases:
            if r.stop.is_set() or r.interrupted:
                break
            results.append(_run_phase(r, phase, seeds))
            if not r.interrupted and r.error is None:
                r.stop.clear()
    finally:
        counter.label("teardown")
        client.close()
        for s, h in old.items():
            signal.signal(s, h)
    totals: collections.Counter = collections.Counter()
    for c in counter.counts.values():
        totals.update(c)
    summary = {
        "uri": redact(opts.uri), "db": opts.db, "collection": opts.collection,
        "pad": opts.pad, "query_limit": opts.query_limit, "batch": opts.batch,
        "sort": opts.sort, "interval": opts.interval,
        "start": round(t_start, 6), "end": round(time.time(), 6),
        "interrupted": r.interrupted, "error": r.error,
        "buckets": list(BUCKETS),
        "phases": results,
        "commands": {"setup": counter.of("setup"), "teardown": counter.of("teardown"),
                     "dbstats": counter.of("dbstats"),
                     "other": counter.of("other"), "total": dict(sorted(totals.items()))},
    }
    _out("### summary " + json.dumps(summary, separators=(",", ":")))
    return (130 if r.interrupted else 1 if r.error else 0), summary
