"""What the wire probes pin in kernel memory, known before they load, and the sizing
that keeps it safe.

The maps each tool creates were measured once (``probes.map_entries`` and ``bpftool
map show`` on the running tool: type, key and value sizes, entries) and are listed
here; their kernel memory follows from the kernel's own accounting (Linux 6.x
``htab_map_mem_usage``, ``array_map_mem_usage``: the figure fdinfo's ``memlock``
shows), with the running kernel's structure sizes (``run.kernel_btf``), for any entry
count and any number of possible CPUs. Per-CPU maps take a value
per possible CPU, so on a 64-CPU machine they dominate. ``tests/test_map_memory.py``
checks the model against the real tools' ``memlock`` here.

bpftrace (0.17) has one entry limit for all its maps (``BPFTRACE_MAP_KEYS_MAX``), all
preallocated: ``mongo_latency.bt`` makes 26 hash maps and 23 per-CPU hash maps of that
many entries. The per-CPU ones are its counters (13 maps, one key used each) and the
per-second aggregates (``@noreply_cmd``, ``@lat_hist``, ``@conn_hist``, ``@failed``,
3 rotating copies each: keys per command, opcode and bucket), none of them per
connection, yet each holds 4 keys a connection. DTrace's are its own buffers (``-x
dynvarsize``, and ``-x aggsize`` per CPU for ``mongo_time.d``), modelled from a
measurement (below).
"""

from __future__ import annotations

import os

from mongoprobe.run import kernel_btf, tracer as probes

BUDGET = 256 << 20          # the default sizing stays under this, whatever the CPUs

HASH, ARRAY, PERCPU_HASH, PERCPU_ARRAY, LRU_HASH, QUEUE, RINGBUF = (
    "hash", "array", "percpu_hash", "percpu_array", "lru_hash", "queue", "ringbuf")

# kernel structures as memlock counts them: struct bpf_htab, struct bucket, struct
# htab_elem, struct bpf_array, their sizes the running kernel's (its BTF: a build's
# config changes them; bpf_htab was 832 bytes on one 6.18 build, 896 on another), else
# these (x86-64, Linux 6.x)
_SIZES = {"bpf_htab": 832, "bucket": 16, "htab_elem": 48, "bpf_array": 312}


def _struct(name: str) -> int:
    return kernel_btf.struct_size(name, _SIZES[name])


def _r8(n: int) -> int:
    return -(-n // 8) * 8


def _pow2(n: int) -> int:
    return 1 << max(0, (n - 1).bit_length())


def map_bytes(kind: str, key: int, value: int, entries: int, cpus: int,
              prealloc: bool = True) -> int:
    """One map's kernel memory as fdinfo's memlock gives it right after creation
    (a map without preallocation: its base, before any entry is used)."""
    if kind in (HASH, PERCPU_HASH, LRU_HASH):
        percpu = kind == PERCPU_HASH
        usage = (_struct("bpf_htab") + _struct("bucket") * _pow2(entries)
                 + 4 * cpus * 8)                                  # buckets, lock counters
        if not prealloc:
            return usage
        elem = _struct("htab_elem") + _r8(key) + (8 if percpu else _r8(value))
        n = entries + (cpus if kind == HASH else 0)       # per-CPU spare elements
        usage += elem * n
        if percpu:
            usage += _r8(value) * cpus * entries
        elif kind == HASH:
            usage += 8 * cpus
        return usage
    array = _struct("bpf_array")
    if kind == ARRAY:
        return array + _r8(value) * entries
    if kind == PERCPU_ARRAY:
        return array + 8 * entries + _r8(value) * cpus * entries
    if kind == QUEUE:
        return array + (entries + 1) * value
    if kind == RINGBUF:
        return entries + 29000    # data pages, and the header and page array's
    raise ValueError(f"no model for a {kind} map")


# --- bpftrace: (kind, key size, value size, maps) of BPFTRACE_MAP_KEYS_MAX entries each,
# as bpftrace 0.17 makes them for mongo_latency.bt (mongo_snoop runs it too)
BT_LATENCY = [
    (HASH, 8, 48, 2), (HASH, 16, 41, 4), (HASH, 8, 41, 1), (HASH, 16, 80, 3),
    (HASH, 8, 8, 4), (HASH, 8, 40, 1), (HASH, 8, 32, 3), (HASH, 40, 8, 3),
    (HASH, 16, 8, 3), (HASH, 16, 32, 1), (HASH, 16, 16, 1), (HASH, 8, 24, 1),
    (PERCPU_HASH, 8, 8, 13), (PERCPU_HASH, 32, 8, 3), (PERCPU_HASH, 40, 8, 6),
    (PERCPU_HASH, 16, 8, 3), (PERCPU_HASH, 24, 8, 1),     # (@noreply_last, @answered_no_reply)
]
# mongo_latency_tls.bt: the same, with the TLS state and counters
BT_LATENCY_TLS = BT_LATENCY + [(HASH, 8, 8, 5), (HASH, 8, 40, 1), (PERCPU_HASH, 8, 8, 5)]


def bpftrace_bytes(script: str, keys: int, cpus: int) -> int:
    maps = BT_LATENCY_TLS if script == "mongo_latency_tls.bt" else BT_LATENCY
    return (sum(n * map_bytes(k, ks, vs, keys, cpus) for k, ks, vs, n in maps)
            + map_bytes(HASH, 8, 8, 1, cpus) + 312 + 8 * cpus)   # @elapsed, printf's


def bpftrace_dominant(script: str, keys: int, cpus: int) -> list[tuple[str, int]]:
    """What the maps take by kind: [(kind, bytes)], largest first."""
    maps = BT_LATENCY_TLS if script == "mongo_latency_tls.bt" else BT_LATENCY
    by: dict[str, int] = {}
    for k, ks, vs, n in maps:
        by[k] = by.get(k, 0) + n * map_bytes(k, ks, vs, keys, cpus)
    return sorted(by.items(), key=lambda kv: -kv[1])


# --- bcc: mongo_wire.h's maps (mongolatency.py and mongosnoop.py), N = MW_CONNS
def bcc_bytes(conns: int, cpus: int, events: bool = False) -> int:
    """``events``: the ring buffer of per-request events (mongosnoop.py always,
    mongolatency.py --events), 4 MiB."""
    maps = [(ARRAY, 4, 608, 2 * conns),             # conns
            (HASH, 4, 4, conns),                    # conn_ix
            (QUEUE, 0, 4, conns),                   # conn_free
            (HASH, 4, 1, conns),                    # tls_fds
            (LRU_HASH, 8, 4, conns),                # tls_conn_fd
            (LRU_HASH, 8, 48, 65536),               # tls_calls
            (PERCPU_ARRAY, 4, 4176, 64),            # lat_cache
            (HASH, 40, 8, 4096),                    # errs
            (HASH, 24, 8, 1024),                    # answered
            (PERCPU_ARRAY, 4, 4136, 1),             # zero_val
            (PERCPU_ARRAY, 4, 8, 15), (PERCPU_ARRAY, 4, 8, 5)]    # counts, tls_counts
    total = sum(map_bytes(k, ks, vs, n, cpus) for k, ks, vs, n in maps)
    # lat (per-CPU, 4096 aggregates, allocated as used: its base here), the jump
    # tables, tls_live, the inflight task storage
    total += map_bytes(PERCPU_HASH, 40, 4136, 4096, cpus, prealloc=False) + 1456
    # spill_rb: what lat cannot take goes to user space (a kernel with ring buffers;
    # the tool sizes it from the connections)
    pages = probes.probe_module("mongolatency").spill_pages(conns)
    total += map_bytes(RINGBUF, 0, 0, pages * 4096, cpus)
    return total + (map_bytes(RINGBUF, 0, 0, 4 << 20, cpus) if events else 0)


# --- DTrace (Oracle DTrace 2.0 on Linux): measured here with mongo_time.d at
# dynvarsize=40m, aggsize=79m on 2 CPUs: dvars and tuples 89.6 MB (2.14 x dynvarsize),
# one aggregation map per CPU of 89.6 MB (1.08 x aggsize each)
DT_DYN, DT_AGG = 2.137, 1.082


def dtrace_bytes(options: tuple[str, ...], cpus: int) -> int:
    size = {}
    for o in options:
        name, _, v = o.partition("=")
        if v[-1:] in "kmg" and v[:-1].isdigit():
            size[name] = int(v[:-1]) << {"k": 10, "m": 20, "g": 30}[v[-1]]
    return int(DT_DYN * size.get("dynvarsize", 0) + DT_AGG * cpus * size.get("aggsize", 0))


def wire_bytes(engine: str, script: str, max_connections: int, cpus: int,
               events: bool = False, by_conn: bool = True) -> int:
    """What ``engine``'s wire tool pins sized for ``max_connections`` (``by_conn``:
    mongo_time.d with its aggregations per connection)."""
    if engine == "bpftrace":
        return bpftrace_bytes(script, probes.bpftrace_keys_for(max_connections), cpus)
    if engine == "bcc":
        return bcc_bytes(max_connections, cpus, events)
    from mongoprobe.run import dtrace_runner as dtrace_engine
    return dtrace_bytes(dtrace_engine.wire_options(script, max_connections, by_conn), cpus)


def default_connections(engine: str, script: str, cpus: int, events: bool = False,
                        by_conn: bool = True) -> int:
    """The default --max-connections on a machine of ``cpus`` possible CPUs: 10,000,
    or fewer where that would pin BUDGET or more (per-CPU maps grow with the CPUs).
    $MONGOPROBE_MAX_CONNECTIONS, when set, is the default instead: the test suite sets
    a small one, since preallocating 10,000 connections' maps makes every bpftrace
    start seconds longer."""
    env = os.environ.get("MONGOPROBE_MAX_CONNECTIONS")
    if env:
        return int(env)
    n = probes.MAX_CONNECTIONS
    if wire_bytes(engine, script, n, cpus, events, by_conn) < BUDGET:
        return n
    lo, hi = 1, n           # the most that stays under (memory grows with n)
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if wire_bytes(engine, script, mid, cpus, events, by_conn) < BUDGET:
            lo = mid
        else:
            hi = mid - 1
    return lo


def dtrace_sized(script: str, asked: int | None, cpus: int,
                 by_conn: bool = True) -> tuple[int, tuple[str, ...], int]:
    """(connections, -x options, bytes) of a D wire script: as asked, or this machine's
    default. DTrace keeps an aggregation buffer per CPU, so on many CPUs the default is
    lowered and, where even the smallest sizing (dtrace_engine's floors) would not
    stay under BUDGET, aggsize is lowered to fit. ``by_conn``: as wire_options."""
    from mongoprobe.run import dtrace_runner as dtrace_engine
    n = asked or default_connections("dtrace", script, cpus, by_conn=by_conn)
    options = dtrace_engine.wire_options(script, n, by_conn)
    size = dtrace_bytes(options, cpus)
    if asked is None and size >= BUDGET:
        # even the floors do not fit: half the budget for the dynamic variables (the
        # connections' state), the rest shared by the CPUs' aggregation buffers (1m
        # each at least: over about 150 CPUs that is more than the budget)
        n = probes.MAX_CONNECTIONS
        while n > 1 and dtrace_bytes(dtrace_engine.wire_options(script, n, by_conn)[:1],
                                     cpus) > BUDGET // 2:
            n = n * 9 // 10
        options = dtrace_engine.wire_options(script, n, by_conn)
        dyn = dtrace_bytes(options[:1], cpus)
        agg_mb = max(1, int((BUDGET - dyn) / (DT_AGG * cpus)) >> 20)
        options = tuple(f"aggsize={agg_mb}m" if o.startswith("aggsize=") else o
                        for o in options)
        size = dtrace_bytes(options, cpus)
    return n, options, size


def too_much(bytes_: int) -> str | None:
    """Why ``bytes_`` is not safe to pin here (over a quarter of MemAvailable), or None."""
    avail = probes.mem_available()
    if avail is not None and bytes_ > avail // 4:
        return (f"{probes.human_bytes(bytes_)} of kernel memory, over a quarter of the "
                f"{probes.human_bytes(avail)} available")
    return None
