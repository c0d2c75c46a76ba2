/*
 * mongo_wire.h - in-kernel MongoDB wire-protocol decoder shared by the bcc
 *                tools mongolatency.py and mongosnoop.py.
 *                For Linux, uses BCC, eBPF. Syscall tracepoints only.
 *
 * This is the BPF C program itself (not a normal header): each tool reads it,
 * prepends its #define switches, and hands the text to BPF(text=...).
 * The algorithm is the one documented in probes/README.md: a per-connection
 * state machine keyed by fd (one traced pid), framing of receives and sends, a
 * ring of 4 outstanding requests per connection, command-name extraction, loss
 * counters.
 *
 * Cost (the point of this layout; bench/probe_cost.py measures it with the
 * kernel's bpf_stats):
 * - every map is looked up once per program run and modified in place: the
 *   per-thread syscall arguments stay in their entry between calls (a "live"
 *   flag instead of an update and a delete per syscall), a connection's state
 *   is one struct;
 * - a command name is three 8-byte words (24 bytes, zeroed after its NUL), read
 *   with the header in one copy from user memory when the request starts with
 *   an OP_MSG body section (every driver's case); other layouts take the
 *   prefix path (mw_capture/mw_decode);
 * - a reply costs one per-CPU hash lookup: the slice's (command, opcode) entry
 *   holds count, sum, max and a log-linear histogram that is incremented in
 *   place; requests are counted where they end (timed at the reply, or
 *   no-reply), so a request adds no map update of its own;
 * - sends on non-protocol fds stop at the connection lookup of the exit.
 *
 * Aggregation: the kernel time is cut into slices of MW_SLICE_NS (1 s); the
 * key of each aggregate carries its slice, so user space reads a slice once it
 * is over and deletes it: nothing is cleared under a writer, nothing is lost.
 * Histogram buckets are log-linear (mongoprobe.model.loglinear_buckets: 32 sub-buckets per
 * power of two, so a percentile read from them is within 1.6%); values from
 * 2^36 ns (69 s) up share the last bucket.
 *
 * Layout: the sys_enter_* programs save the buffer (first iovec for the
 * vectored calls) per thread; the sys_exit_* programs frame what was
 * transferred (on x86-64 receives need no entry program and write/sendto are
 * framed at entry: MW_REGS). One program serves every syscall of a role (all
 * receives; write and sendto; writev and sendmsg): the tools attach it to each
 * (SHARED_PROGRAMS), so the decoder is compiled and verified once per role.
 * One program decodes the continuation and the first header of a syscall;
 * the 2nd..8th headers are decoded by mw_rx_more/mw_tx_more, chained by tail
 * calls through mw_jmp (the tools load them and fill mw_jmp): a bounded loop
 * of 8 full decodes is more than the verifier will explore.
 *
 * Switches (set by the tools):
 *   MW_TARGET_PID   tgid to trace (required; filtered in the kernel)
 *   MW_SLICE_NS     aggregation slice, ns (default 1 s)
 *   MW_BY_CONN      also aggregate per connection (fd)
 *   MW_EVENTS       emit one event per request at its first reply
 *   MW_SAMPLE       with MW_EVENTS: emit one request in MW_SAMPLE (random)
 *   MW_RINGBUF      the kernel has ring buffers: latencies the maps cannot take
 *                   go to the ring buffer spill_rb (else to the hash lat_spill),
 *                   and events use BPF_RINGBUF_OUTPUT (else BPF_PERF_OUTPUT)
 *   MW_SPILL_PAGES  with MW_RINGBUF: spill_rb's pages (a power of 2)
 *                   (with MW_EVENTS: an OP_COMPRESSED request's first MW_PFX bytes
 *                   also go out, as a struct mw_cpfx record, for user space to
 *                   decompress its command name from)
 *   MW_CONNS        connections traced at once (--max-connections; default 10000):
 *                   each fd below it, and as many others (larger fds, TLS keys)
 *   MW_CACHE_SETS, MW_CACHE_BITS  lat_cache: sets, and log2 of the slots a set
 *   MW_AGGS         aggregates (slice, command, opcode) at once (default 4096);
 *                   with MW_BY_CONN, lat_conn holds 3 per connection
 *   MW_TLS          a TLS library is hooked: probes/mongo_tls.h follows this
 *                   program, and the syscall programs hand it their fds
 *
 * Copyright 2025 mongoprobe authors. Licensed under the Apache License 2.0.
 */
#include <uapi/linux/ptrace.h>
#include <asm/unistd.h>              /* __NR_*: which syscall a shared program serves */

#ifndef MW_TARGET_PID
#error "MW_TARGET_PID must be defined"
#endif
#ifndef MW_SLICE_NS
#define MW_SLICE_NS 1000000000ULL
#endif

#define MW_HDR      16          /* message header: length, requestID, responseTo, opCode */
#define MW_MAXLEN   48000000    /* largest valid message (maxMessageSizeBytes) */
#define MW_FAST     50          /* header, flagBits, kind 0, doclen, type, 24 name bytes */
#define MW_NAME     24          /* command names: at most 24 bytes, as 3 words */
#define MW_SLOTS    4           /* outstanding requests kept per connection */
#define MW_MAXMSG   8           /* headers decoded per syscall */
#define MW_PFX      128         /* slow path: first bytes of a request kept for its name */
#ifndef MW_CONNS
#define MW_CONNS    10000       /* connections traced at once (preallocated, twice) */
#endif
#ifndef MW_AGGS
#define MW_AGGS     4096        /* aggregates at once (allocated as they come) */
#endif
#define MW_SPILL    64          /* preallocated aggregates for when lat cannot allocate */
#define MW_SUB_BITS 5           /* log-linear: 32 sub-buckets per power of two */
#define MW_NB       1024        /* buckets 0..1023: up to 2^36 ns, then the last */

/* keep clang from folding away a bound the verifier needs to see */
#define MW_OPAQUE(x) asm volatile("" : "+r"(x))

/* User memory is read through these, the helpers called by their ids: bcc up to 0.26
 * (Debian 12's) rereads /proc/kallsyms at every bpf_probe_read_user{,_str} call it
 * finds in the source, to choose a helper for kernels without them (before 5.5):
 * ~55 ms each, a second of every start here. It does not look at these. */
#define mw_read_user(dst, size, src) \
    ((long (*)(void *, __u32, const void *))BPF_FUNC_probe_read_user)(dst, size, src)
#define mw_read_user_str(dst, size, src) \
    ((long (*)(void *, __u32, const void *))BPF_FUNC_probe_read_user_str)(dst, size, src)

/* opcodes */
#define OP_REPLY        1
#define OP_UPDATE       2001
#define OP_INSERT       2002
#define OP_QUERY        2004
#define OP_GET_MORE     2005
#define OP_DELETE       2006
#define OP_KILL_CURSORS 2007
#define OP_COMPRESSED   2012
#define OP_MSG          2013

#define MSG_MORE_TO_COME 2      /* OP_MSG flagBits bit 1 */
#define MW_MSG_PEEK      2      /* recv flag: data stays queued, not consumed */

/* counters (index into the per-CPU array "counts"); cumulative */
#define C_REQUESTS   0          /* complete requests */
#define C_REPLIES    1          /* first replies matched to a request (timed) */
#define C_STREAM     2          /* further replies of a moreToCome stream */
#define C_NOREPLY    3          /* no reply due: OP_MSG moreToCome, legacy writes */
#define C_UNMATCHED  4          /* replies that matched no outstanding request */
#define C_NOREPLY_LOST 5        /* requests freed by close() or evicted unanswered */
#define C_MALFORMED  6          /* invalid/split headers on a known connection */
#define C_DROPPED    7          /* ring/perf buffer reserve failures, full maps */
#define C_MMSG       8          /* recvmmsg/sendmmsg calls: not decoded (detection only) */
#define C_URING      9          /* io_uring_enter calls: not decoded (detection only) */
#define C_TLS        10         /* connections whose first bytes are TLS records */
#define C_FULL_CONNS 11         /* of C_DROPPED: conns full (a connection not traced) */
#define C_FULL_LAT   12         /* of C_DROPPED: lat and the spill full (a request
                                   counted, its latency not aggregated) */
#define C_SPILLED    13         /* latencies through spill_rb (aggregated in user space) */
#define C_ANSWERED   14         /* replies to a request that asked for none (moreToCome):
                                   not unmatched, counted per command in "answered" */
#define C_MAX        15

union mw_name {
    char c[MW_NAME];
    u64 w[3];
};

struct mw_slot {
    u64 ts;                     /* return of the receive that completed it */
    union mw_name name;
    u32 req_id;
    u32 opcode;
    u32 bytes;
    u32 pad;
};

struct mw_conn {
    /* receive side */
    u32 rx_rem;                 /* bytes of the incoming message still to come */
    u32 rx_pos;                 /* bytes of it received so far */
    u32 rx_len;
    u32 rx_id;
    u32 rx_op;
    u32 rx_flags;               /* OP_MSG flagBits (0 until read) */
    u32 pfx_len;                /* bytes of pfx filled (contiguous from offset 0) */
    u8 rx_need;                 /* the command name is still to be read */
    u8 rx_sync;                 /* framing in sync (else skip silently to a valid header) */
    u8 tx_sync;
    u8 stream;                  /* last reply had moreToCome */
    u8 head;                    /* oldest slot */
    u8 nslots;                  /* outstanding requests */
    u8 tx_have;                 /* bytes of a reply's first 40 split across sends */
    u8 live;                    /* a connection's state (else a free slot of conns) */
    /* send side */
    u32 tx_rem;                 /* bytes of the outgoing message still to go */
    u32 stream_id;              /* requestID of the last reply with moreToCome */
    u32 tx_ahead;               /* bytes framed at a send's entry that its exit
                                   found unsent: the next sends repeat them */
    u32 nr_id;                  /* requestID of the last request due no reply */
    u64 tx_ts;                  /* entry of the send that began the split header */
    char tx_hdr[48];            /* its bytes (MW_RHDR: 40; 48: verifier bound) */
    union mw_name rx_name;
    union mw_name nr_name;      /* its command; zero once answered (or none yet) */
    struct mw_slot slots[MW_SLOTS];
    char pfx[2 * MW_PFX];       /* slow path: first MW_PFX bytes (2x: verifier bound) */
};

/* arguments of a receive/send in flight, per thread (kept between calls) */
struct mw_args {
    u64 buf;                    /* user buffer (first iovec for the vectored calls) */
    u64 cap;                    /* bytes of that buffer (ret beyond it is unreadable) */
    u64 ts;                     /* entry time (replies are timed at send entry) */
    u64 now;                    /* return time (requests complete at receive return) */
    u64 ret;                    /* bytes transferred */
    u64 off;                    /* bytes of them framed so far */
    u32 fd;
    u32 iter;                   /* headers decoded so far */
    u32 live;                   /* set at entry, cleared at exit */
    u32 pad;
};

struct mw_hdr {
    s32 len;
    u32 req_id;
    u32 resp_to;
    u32 op;
    u32 flags;                  /* first 4 body bytes (OP_MSG flagBits) */
};

/* a reply's first 40 bytes: its header, and an OP_MSG's flagBits, section kind,
 * body length and first element (where a failed command's ok: 0 is) */
#define MW_RHDR 40
struct mw_rhdr {
    struct mw_hdr h;            /* bytes 0..19 */
    u8 b[20];                   /* bytes 20..39 */
};

struct mw_iovec {
    u64 base;
    u64 len;
};

/* an aggregate: one slice, one command and opcode (or, MW_BY_CONN, one fd) */
struct mw_key {
    u64 slice;                  /* bpf_ktime_get_ns() / MW_SLICE_NS */
    union mw_name name;         /* zero in the per-connection view */
    u32 op;                     /* zero in the per-connection view */
    u32 fd;                     /* zero in the per-command view */
};

struct mw_val {
    u64 count;                  /* timed requests (answered by a first reply) */
    u64 sum_ns;
    u64 max_ns;
    u64 noreply;                /* complete requests that expect no reply */
    u64 errors;                 /* of the timed ones, replies with ok: 0 */
    u32 hist[MW_NB];            /* log-linear buckets of the latencies */
};

struct mw_event {
    u64 ts;                     /* entry of the send that carried the first reply */
    u64 latency_ns;
    union mw_name name;
    u32 tid;
    u32 fd;
    u32 request_id;
    u32 opcode;
    u32 bytes_in;
    u32 bytes_out;
    u32 stream;
    s32 error_code;             /* 0: ok (or not an OP_MSG reply); the reply's code
                                 * when it had ok: 0 (-1: none readable) */
};

/* failed replies of one slice, command, opcode and error code (a rare path) */
struct mw_ekey {
    u64 slice;
    union mw_name name;
    u32 op;
    s32 code;                   /* -1: the reply had no readable code */
};

/* Connection state, by key (the fd; a TLS plaintext key: mongo_tls.h): an fd
 * below MW_CONNS has the slot of its number in conns, an array (its lookup is
 * inlined: ~45 ns a lookup less than a hash's, measured, and a request takes two);
 * any other key one of the MW_CONNS slots above, given out by conn_free (filled
 * by the tools at load) and found through conn_ix. A slot is a connection's while
 * live is set (mw_conn_of, mw_conn_new, mw_conn_free). */
BPF_ARRAY(conns, struct mw_conn, 2 * MW_CONNS);
BPF_HASH(conn_ix, u32, u32, MW_CONNS);
BPF_QUEUE(conn_free, u32, MW_CONNS);
/* per-thread syscall arguments: task-local storage (hangs off the task, which
 * is in cache anyway; freed with it) */
BPF_TASK_STORAGE(inflight, struct mw_args);
BPF_PERCPU_ARRAY(counts, u64, C_MAX);
BPF_PERCPU_ARRAY(zero_val, struct mw_val, 1);     /* never written: init value */
BPF_F_TABLE("percpu_hash", struct mw_key, struct mw_val, lat, MW_AGGS, BPF_F_NO_PREALLOC);
/* Most aggregates of the current second are in lat_cache, a per-CPU array (its
 * lookup is inlined: a hash map's costs ~45 ns, measured): MW_CACHE_SETS sets,
 * a second's set by slice % MW_CACHE_SETS, of MW_CACHE_WAYS slots, a slot by a
 * hash of the command and opcode (each CPU's copy of a slot holds one aggregate);
 * an aggregate whose slot another holds goes to lat. The reader takes a slot when
 * its second is over, then zeroes it; the set is written again 3 s later (the
 * reader skips the sets of the current and the next second: none is zeroed
 * under a writer). */
#ifndef MW_CACHE_SETS
#define MW_CACHE_SETS 4
#define MW_CACHE_BITS 4
#endif
#define MW_CACHE_WAYS (1 << MW_CACHE_BITS)
struct mw_agg {
    struct mw_key k;            /* k.slice 0: a free slot */
    struct mw_val v;
};
BPF_PERCPU_ARRAY(lat_cache, struct mw_agg, MW_CACHE_SETS * MW_CACHE_WAYS);
/* lat allocates its entries as they come (preallocating MW_AGGS histograms per CPU
 * would take megabytes), from a per-CPU cache the kernel refills after the
 * program returns; it holds only ~3 per-CPU values, so a burst of new keys (a
 * new second, 100 new command names) finds it empty. Such a request's latency
 * goes to user space as a record of its own, through a ring buffer sized from
 * MW_CONNS, which the reader drains every 0.25 s and aggregates: a bounded
 * hash here (64 keys, read only at the end of a run) filled in 3 of 8 bursty
 * runs. Without ring buffers, a preallocated hash the reader adds. */
#ifdef MW_RINGBUF
struct mw_spill {
    struct mw_key k;
    u64 lat;
    u32 bucket;
    s32 err;
    u32 timed;
    u32 pad;
};
#ifndef MW_SPILL_PAGES
#define MW_SPILL_PAGES 512      /* 2 MiB: ~29,000 records */
#endif
BPF_RINGBUF_OUTPUT(spill_rb, MW_SPILL_PAGES);
#else
BPF_F_TABLE("percpu_hash", struct mw_key, struct mw_val, lat_spill, MW_SPILL, 0);
#endif
/* fds of the target whose first received bytes were TLS records (counted once
 * per connection; freed at close): as many as connections */
BPF_HASH(tls_fds, u32, u8, MW_CONNS);
/* failed replies per code (rare: a plain hash, preallocated) */
BPF_HASH(errs, struct mw_ekey, u64, 4096);
/* replies to requests that asked for none, per command (cumulative; a rare path) */
BPF_HASH(answered, union mw_name, u64, 1024);

#if defined(MW_EVENTS) && defined(MW_RINGBUF)
#define MW_CPFX
/* an OP_COMPRESSED request's first bytes (its body is compressed: user space
 * decompresses the command name from them), written before its event */
struct mw_cpfx {
    u32 fd;
    u32 request_id;
    u32 len;                    /* the message's length */
    u32 have;                   /* bytes of pfx received (contiguous from 0) */
    char pfx[MW_PFX];
};
#endif

#ifdef MW_BY_CONN
/* The per-connection aggregates: one value for all CPUs (a connection's replies
 * seldom race; the counts are atomic adds), allocated as they come, 3 slices of
 * MW_CONNS at most. Per-CPU values here would take 4 KiB per CPU per connection
 * each second from the kernel's per-CPU allocator, whose atomic reserve a new
 * second's burst of thousands of new keys empties (1,117 of 20,000 requests of
 * 5,000 connections lost their aggregate when they were per-CPU). */
BPF_F_TABLE("hash", struct mw_key, struct mw_val, lat_conn, 3 * MW_CONNS, BPF_F_NO_PREALLOC);
#endif

#ifdef MW_EVENTS
#ifdef MW_RINGBUF
BPF_RINGBUF_OUTPUT(events, 1024);     /* pages: 4 MiB */
#else
BPF_PERF_OUTPUT(events);
#endif
#endif

static __always_inline void mw_count(u32 idx, u64 n)
{
    u64 *v = counts.lookup(&idx);
    if (v)
        *v += n;                /* per-CPU: no atomics needed */
}

/* the state of connection key, or 0 */
static __always_inline struct mw_conn *mw_conn_of(u32 key)
{
    u32 i = key;
    if (key >= MW_CONNS) {
        u32 *p = conn_ix.lookup(&key);
        if (!p)
            return 0;
        i = *p;
    }
    struct mw_conn *c = conns.lookup(&i);
    return c && c->live ? c : 0;
}

/* a new connection's zeroed state, or 0 when conns has no slot left for it */
static __always_inline struct mw_conn *mw_conn_new(u32 key)
{
    u32 i = key;
    if (key >= MW_CONNS) {
        if (conn_free.pop(&i) != 0)
            return 0;
        if (conn_ix.insert(&key, &i) != 0) {
            /* another thread gave it a slot first */
            conn_free.push(&i, 0);
            return mw_conn_of(key);
        }
    }
    struct mw_conn *c = conns.lookup(&i);
    if (!c)
        return 0;
    __builtin_memset(c, 0, sizeof(*c));
    c->live = 1;
    return c;
}

/* connection key (state c) is gone: its outstanding requests had no reply */
static __always_inline void mw_conn_free(u32 key, struct mw_conn *c)
{
    if (c->nslots)
        mw_count(C_NOREPLY_LOST, c->nslots);
    c->live = 0;
    if (key < MW_CONNS)
        return;
    u32 *p = conn_ix.lookup(&key);
    if (!p)
        return;
    u32 i = *p;
    conn_ix.delete(&key);
    conn_free.push(&i, 0);
}

/* b: the first 3 bytes of a receive on a connection that is not protocol
 * traffic; a TLS record there (handshake 0x16 or application data 0x17, version
 * 3.x) means a TLS connection whose plaintext is not seen: count it once */
static __always_inline void mw_tls_seen(u32 fd, u64 b)
{
    u8 t = b & 0xff, major = (b >> 8) & 0xff, minor = (b >> 16) & 0xff;
    if ((t != 0x16 && t != 0x17) || major != 3 || minor > 4)
        return;
    u8 one = 1;
    if (tls_fds.lookup(&fd))
        return;
    if (tls_fds.insert(&fd, &one) == 0)
        mw_count(C_TLS, 1);
}

static __always_inline int mw_req_op(u32 op)
{
    return op == OP_MSG || op == OP_QUERY || op == OP_COMPRESSED ||
           op == OP_INSERT || op == OP_UPDATE || op == OP_DELETE ||
           op == OP_GET_MORE || op == OP_KILL_CURSORS;
}

static __always_inline int mw_reply_op(u32 op)
{
    return op == OP_MSG || op == OP_REPLY || op == OP_COMPRESSED;
}

static __always_inline int mw_valid(struct mw_hdr *h, int request)
{
    if (h->len < MW_HDR || h->len > MW_MAXLEN)
        return 0;
    return request ? mw_req_op(h->op) : mw_reply_op(h->op);
}

/* v with every byte from its first NUL on zeroed; *ended set when it had one.
 * (The lowest flagged byte of the classic has-zero-byte test is exact.) */
static __always_inline u64 mw_cut(u64 v, int *ended)
{
    u64 t = (v - 0x0101010101010101ULL) & ~v & 0x8080808080808080ULL;
    if (!t)
        return v;
    *ended = 1;
    return v & (((t & -t) >> 7) - 1);
}

/* the name in raw (24 bytes from the name's first byte, maybe past its end) */
static __always_inline void mw_name_words(union mw_name *n, const u64 *raw)
{
    int end = 0;
    n->w[0] = mw_cut(raw[0], &end);
    n->w[1] = end ? 0 : mw_cut(raw[1], &end);
    n->w[2] = end ? 0 : mw_cut(raw[2], &end);
}

/* dst = constant string s (n bytes with the NUL, n <= MW_NAME); a macro so
 * that clang turns the copy into immediate stores (no .rodata in bcc) */
#define mw_setname(dst, s, n) do {                  \
        (dst)->w[0] = 0; (dst)->w[1] = 0; (dst)->w[2] = 0; \
        __builtin_memcpy((dst)->c, (s), (n));       \
    } while (0)

/* Fixed names: legacy opcodes are named after the opcode, compressed bodies
 * carry no readable command. Returns 1 when the opcode has a fixed name. */
static __always_inline int mw_fixed_name(struct mw_conn *c, u32 op)
{
    switch (op) {
#ifndef MW_CPFX
    case OP_COMPRESSED:   mw_setname(&c->rx_name, "[compressed]", 13); return 1;
#endif
    case OP_INSERT:       mw_setname(&c->rx_name, "OP_INSERT", 10); return 1;
    case OP_UPDATE:       mw_setname(&c->rx_name, "OP_UPDATE", 10); return 1;
    case OP_DELETE:       mw_setname(&c->rx_name, "OP_DELETE", 10); return 1;
    case OP_GET_MORE:     mw_setname(&c->rx_name, "OP_GET_MORE", 12); return 1;
    case OP_KILL_CURSORS: mw_setname(&c->rx_name, "OP_KILL_CURSORS", 16); return 1;
    }
    return 0;
}

/* ---- the slow path: a request whose name is not in its first chunk ------ */

/*
 * Copy the chunk of the current request that starts at message offset pos
 * (r readable bytes at user address src) into the prefix buffer, while the
 * name is still needed and the prefix is contiguous.
 */
static __always_inline void mw_capture(struct mw_conn *c, u64 src, u64 r, u64 pos)
{
    if (!c->rx_need || pos != c->pfx_len || pos >= MW_PFX || r == 0)
        return;
    u64 n = MW_PFX - pos;
    if (n > r)
        n = r;
    MW_OPAQUE(n);
    MW_OPAQUE(pos);
    if (n > MW_PFX || pos >= MW_PFX)
        return;
    if (mw_read_user(&c->pfx[pos], n, (void *)src) == 0)
        c->pfx_len = pos + n;
}

/* rx_name = the NUL-terminated name read by a str copy into tmp (n its result) */
static __always_inline void mw_take_name(struct mw_conn *c, char *tmp)
{
    u64 raw[3];
    __builtin_memcpy(raw, tmp, MW_NAME);
    mw_name_words(&c->rx_name, raw);
}

/*
 * Copy the name at message offset off from the prefix. Returns 1 when the name
 * is final (terminated inside the received prefix, or nothing more can come),
 * 0 when more prefix bytes may still arrive.
 */
static __always_inline int mw_name_from_pfx(struct mw_conn *c, u32 off, int more)
{
    u32 have = c->pfx_len;
    char tmp[MW_NAME + 8] = {};
    if (off >= MW_PFX)
        return 1;
    long n = bpf_probe_read_kernel_str(tmp, sizeof(tmp), &c->pfx[off]);
    mw_take_name(c, tmp);
    /* pfx beyond pfx_len is zeroed at each new request, so the copy stops there */
    if (n > 0 && off + (u32)n - 1 < have)
        return 1;               /* NUL inside the received bytes */
    if (n > MW_NAME)
        return 1;               /* longer than 24 characters: cut */
    return !more;
}

/*
 * Decode the command name of the current request from its prefix (and, for an
 * OP_MSG whose kind-1 section comes first, from the chunk just received: user
 * address src holds message bytes [pos, pos + r)). more: further bytes of this
 * request can still be captured into the prefix.
 */
static __always_inline void mw_decode(struct mw_conn *c, u64 src, u32 r, u32 pos, int more,
                                      u32 fd)
{
    u32 have = c->pfx_len;
    u32 off;

    if (!c->rx_need)
        return;
#ifdef MW_CPFX
    if (c->rx_op == OP_COMPRESSED) {
        /* its first bytes (all of them, or MW_PFX) go out; the name stays
         * [compressed] in the kernel's aggregates */
        if (more)
            return;
        struct mw_cpfx *e = events.ringbuf_reserve(sizeof(struct mw_cpfx));
        if (e) {
            e->fd = fd;
            e->request_id = c->rx_id;
            e->len = c->rx_len;
            e->have = have;
            bpf_probe_read_kernel(e->pfx, MW_PFX, c->pfx);
            events.ringbuf_submit(e, BPF_RB_NO_WAKEUP);
        } else {
            mw_count(C_DROPPED, 1);
        }
        mw_setname(&c->rx_name, "[compressed]", 13);
        c->rx_need = 0;
        return;
    }
#endif
    if (c->rx_op == OP_MSG) {
        if (have < 21)
            goto need;
        c->rx_flags = *(u32 *)&c->pfx[16];
        u8 kind = c->pfx[20];
        if (kind == 0) {
            off = 26;           /* flags(4) kind(1) doclen(4) type(1) */
        } else if (kind == 1) {
            if (have < 25)
                goto need;
            u32 size = *(u32 *)&c->pfx[21];
            if (size > MW_MAXLEN)
                goto unknown;
            off = 21 + size + 6;    /* the kind-0 body follows the sequence */
            if (off + 1 > MW_PFX) {
                /* beyond the prefix: read it where this chunk holds it */
                if (off >= pos && off < pos + r) {
                    u32 d = off - pos;
                    char tmp[MW_NAME + 8] = {};
                    long n = mw_read_user_str(tmp, sizeof(tmp), (void *)(src + d));
                    if (n <= 0)
                        goto unknown;
                    if (d + (u32)n - 1 > r)     /* ran past the chunk */
                        tmp[(r - d) & (MW_NAME - 1)] = 0;
                    mw_take_name(c, tmp);
                    c->rx_need = 0;
                    return;
                }
                if (off >= pos + r && c->rx_rem > 0)
                    return;     /* a later chunk may hold it */
                goto unknown;
            }
        } else {
            goto unknown;
        }
    } else if (c->rx_op == OP_QUERY) {
        char ns[128];
        if (have < 21)
            goto need;
        long n = bpf_probe_read_kernel_str(ns, sizeof(ns), &c->pfx[20]);
        if (n <= 0 || n >= (long)sizeof(ns))
            goto unknown;       /* no namespace is that long */
        u32 nslen = n - 1;
        if (20 + nslen >= have)
            goto need;          /* namespace not complete yet */
        if (nslen < 5) {
            mw_setname(&c->rx_name, "find", 5);
            c->rx_need = 0;
            return;
        }
        char tail[8] = {};
        bpf_probe_read_kernel(tail, 5, &c->pfx[(20 + nslen - 5) & 0x7f]);
        if (!(tail[0] == '.' && tail[1] == '$' && tail[2] == 'c' &&
              tail[3] == 'm' && tail[4] == 'd')) {
            mw_setname(&c->rx_name, "find", 5);
            c->rx_need = 0;
            return;
        }
        /* cstring, numberToSkip(4), numberToReturn(4), doclen(4), type(1) */
        off = 20 + nslen + 1 + 4 + 4 + 4 + 1;
    } else {
        if (!mw_fixed_name(c, c->rx_op))
            goto unknown;
        c->rx_need = 0;
        return;
    }
    if (off >= have) {
        if (more && off < MW_PFX)
            return;
        goto unknown;
    }
    if (!mw_name_from_pfx(c, off, more))
        return;
    /* "$query\0" as a little-endian word */
    if (c->rx_op == OP_QUERY && c->rx_name.w[0] == 0x0000797265757124ULL) {
        /* {$query: {cmd: ...}, $readPreference: ...}: the command is the first key
         * of the wrapped document: "$query\0" (7), its length (4), its type (1) */
        off += 12;
        if (off >= MW_PFX || (off >= have && !more))
            goto unknown;
        if (!mw_name_from_pfx(c, off, more))
            return;
    }
    c->rx_need = 0;
    return;
need:
    if (more)
        return;
unknown:
    mw_setname(&c->rx_name, "[unknown]", 10);
    c->rx_need = 0;
}

/* ---- failed replies ------------------------------------------------------ */

/*
 * A command that failed is answered {ok: 0, errmsg: "...", code: N, codeName:
 * "..."}: mongod and FerretDB put ok first in a failed reply (and last in a
 * successful one). So a reply is a failure when it is an OP_MSG whose body
 * section comes first and whose first element is "ok" with a zero value
 * (double, int32, int64 or bool): a test on bytes the reply's header read
 * already holds (r: its first n bytes). Only then, at user address src (the
 * reply's byte 0; its bytes from low up to readable are there), read on to the code:
 * the element after ok (errmsg, whose length says where it ends, or code).
 * Returns 0 (not failed), the code, or -1 (failed, no code readable).
 */
/* the element at user address src + p: its int32 value when it is "code" (-1
 * when 0 or not readable), -2 when it is the string "errmsg", else -1 */
static __always_inline s32 mw_code_at(u64 src, u64 p, u64 low, u64 readable)
{
    u8 e[16] = {};
    if (p < low || p + 10 > readable ||
        mw_read_user(e, 10, (void *)(src + p)) != 0)
        return -1;
    u64 w = *(u64 *)e;
    if ((w & 0xffffffffffffULL) == 0x0065646f6310ULL)          /* 0x10 "code\0" */
        return *(s32 *)&e[6] ? *(s32 *)&e[6] : -1;
    return w == 0x0067736d72726502ULL ? -2 : -1;                /* 0x02 "errmsg\0" */
}

/* the code after a string element at src + p, errmsg (skip is 8: its type and
 * name) or $err (6), whose int32 length follows the name; -1 when none */
static __always_inline s32 mw_code_after_str(u64 src, u64 p, u64 skip, u64 low,
                                             u64 readable)
{
    u32 len = 0;
    if (p + skip < low || mw_read_user(&len, 4, (void *)(src + p + skip)) != 0 ||
        len > MW_MAXLEN)
        return -1;
    s32 code = mw_code_at(src, p + skip + 4 + len, low, readable);
    return code == -2 ? -1 : code;
}

/*
 * A legacy OP_REPLY (to an OP_QUERY; the rare opcode, read from user memory)
 * failed when its responseFlags have QueryFailure (bit 1), or its document's
 * first element (message offset 40) is $err (a legacy query's failure: mongod
 * sets the flag, FerretDB appends ok: 0 instead) or ok with a zero value (a
 * legacy command's failure, as in an OP_MSG); the code as after ok or $err.
 */
static __always_inline s32 mw_failed_legacy(u32 flags, s32 len, u64 src, u64 readable)
{
    u8 e[16] = {};
    s32 fail = flags & 2 ? -1 : 0;
    if (len < 45 || readable < 45)         /* up to a bool ok's value */
        return fail;
    u64 m = readable - 40;
    if (m > 16)
        m = 16;
    MW_OPAQUE(m);
    if (m < 5 || m > 16 || mw_read_user(e, m, (void *)(src + 40)) != 0)
        return fail;
    u64 w = *(u64 *)e;
    if ((w & 0xffffffffffffULL) == 0x007272652402ULL)          /* 0x02 "$err\0" */
        return mw_code_after_str(src, 40, 6, 0, readable);
    if ((w & 0xffffff00ULL) != 0x006b6f00ULL)                   /* "ok\0" */
        return fail;
    u8 t = e[0];
    u64 v = *(u64 *)&e[4];
    u32 vs;
    if ((t == 0x01 || t == 0x12) && m >= 12 && len >= 52)
        vs = 8, v = t == 0x01 ? v << 1 : v;
    else if (t == 0x10 && m >= 8 && len >= 48)
        vs = 4, v &= 0xffffffffULL;
    else if (t == 0x08)
        vs = 1, v &= 0xff;
    else
        return fail;
    if (v)
        return fail;
    s32 code = mw_code_at(src, 44 + vs, 0, readable);
    return code == -2 ? mw_code_after_str(src, 44 + vs, 8, 0, readable) : code;
}

static __always_inline s32 mw_failed(struct mw_rhdr *r, u64 n, u64 src, u64 low,
                                     u64 readable)
{
    if (r->h.op != OP_MSG)
        return r->h.op == OP_REPLY && n >= 20 ?
            mw_failed_legacy(r->h.flags, r->h.len, src, readable) : 0;
    if (n < 30 || r->b[0] != 0 ||
        r->b[6] != 'o' || r->b[7] != 'k' || r->b[8] != 0)
        return 0;
    u8 t = r->b[5];
    u64 v = 0;
    u32 vs;
    __builtin_memcpy(&v, &r->b[9], 8);  /* bytes 29..36 (those past n: below) */
    if (t == 0x01 && n >= 37)
        v <<= 1, vs = 8;                /* double: +0 and -0 */
    else if (t == 0x12 && n >= 37)
        vs = 8;
    else if (t == 0x10 && n >= 33)
        v &= 0xffffffffULL, vs = 4;
    else if (t == 0x08)
        v &= 0xff, vs = 1;
    else
        return 0;
    if (v)
        return 0;
    /* the rare path: the element after ok is code, or errmsg and then code */
    u64 p = 29 + vs;
    s32 code = mw_code_at(src, p, low, readable);
    return code == -2 ? mw_code_after_str(src, p, 8, low, readable) : code;
}

/* ---- accounting ---------------------------------------------------------- */

/* log-linear bucket of v (mongoprobe.model.loglinear_buckets.bucket, capped at MW_NB - 1) */
static __always_inline u32 mw_bucket(u64 v)
{
    if (v < (1 << MW_SUB_BITS))
        return v;
    u32 e = bpf_log2l(v) - 1;   /* floor(log2 v): bcc's log2l is 1 + that */
    u64 b = ((u64)(e - MW_SUB_BITS + 1) << MW_SUB_BITS) + (v >> (e - MW_SUB_BITS))
            - (1 << MW_SUB_BITS);
    return b < MW_NB ? b : MW_NB - 1;
}

/* the aggregate of key k in lat_cache, if its slot is free or k's (else 0) */
static __always_inline struct mw_val *mw_cached(struct mw_key *k)
{
    /* a multiplicative hash of the command (or fd) and opcode: its top bits */
    u64 h = (k->name.w[0] ^ k->name.w[1] ^ k->name.w[2] ^ ((u64)k->op << 32) ^ k->fd)
            * 0x9e3779b97f4a7c15ULL;
    u32 i = (k->slice % MW_CACHE_SETS) * MW_CACHE_WAYS + (h >> (64 - MW_CACHE_BITS));
    struct mw_agg *a = lat_cache.lookup(&i);
    if (!a || k->slice == 0)
        return 0;               /* slice 0 marks a free slot: the boot's first second */
    if (a->k.slice == 0) {
        a->k = *k;              /* this CPU's copy of the slot: no other writer */
        return &a->v;
    }
    if (a->k.slice == k->slice && a->k.op == k->op && a->k.fd == k->fd &&
        a->k.name.w[0] == k->name.w[0] && a->k.name.w[1] == k->name.w[1] &&
        a->k.name.w[2] == k->name.w[2])
        return &a->v;
    return 0;                   /* another aggregate's, or not read yet */
}

static __always_inline struct mw_val *mw_val_of(struct mw_key *k)
{
    struct mw_val *v = mw_cached(k);
    if (v)
        return v;
    v = lat.lookup(k);
    if (v)
        return v;
    u32 z0 = 0;
    struct mw_val *z = zero_val.lookup(&z0);
    if (!z)
        return 0;
    v = lat.lookup_or_try_init(k, z);
#ifndef MW_RINGBUF
    if (!v)
        v = lat_spill.lookup_or_try_init(k, z);
#endif
    return v;
}

/* one aggregate (key k, value v; 0: the maps had no room) gains a timed request
 * (latency lat, bucket b) or one that expects no reply; per-CPU values: no
 * atomics */
static __always_inline void mw_add(struct mw_key *k, struct mw_val *v, int timed,
                                   u64 lat, u32 b, s32 err)
{
    if (!v) {
#ifdef MW_RINGBUF
        /* written in the ring (the TLS programs have no stack to spare) */
        struct mw_spill *r = spill_rb.ringbuf_reserve(sizeof(struct mw_spill));
        if (r) {
            r->k = *k;
            r->lat = lat;
            r->bucket = b;
            r->err = err;
            r->timed = timed;
            r->pad = 0;
            /* no wakeup: the reader takes what is there every 0.25 s */
            spill_rb.ringbuf_submit(r, BPF_RB_NO_WAKEUP);
            mw_count(C_SPILLED, 1);
            return;
        }
#endif
        mw_count(C_DROPPED, 1);
        mw_count(C_FULL_LAT, 1);
        return;
    }
    if (!timed) {
        v->noreply++;
        return;
    }
    v->count++;
    v->sum_ns += lat;
    if (lat > v->max_ns)
        v->max_ns = lat;
    if (b < MW_NB)
        v->hist[b]++;
    v->errors += err != 0;
}

/* a timed request (timed == 1, latency lat) or one that expects no reply, at
 * time ts: its (second, command, opcode) aggregate, and its connection's */
static __always_inline void mw_account(union mw_name *name, u32 op, u32 fd, u64 ts,
                                       int timed, u64 lat, s32 err)
{
    struct mw_key k = {.slice = ts / MW_SLICE_NS, .op = op};
    k.name = *name;
    u32 b = mw_bucket(lat);
    mw_add(&k, mw_val_of(&k), timed, lat, b, err);
    if (err) {
        /* a failed reply: counted per code (rare: a plain hash, atomic add) */
        struct mw_ekey ek = {.slice = k.slice, .op = op, .code = err};
        ek.name = *name;
        u64 zero = 0;
        u64 *n = errs.lookup_or_try_init(&ek, &zero);
        if (n)
            __sync_fetch_and_add(n, 1);
        else
            mw_count(C_DROPPED, 1);
    }
#ifdef MW_BY_CONN
    struct mw_key ck = {.slice = ts / MW_SLICE_NS, .fd = fd};
    struct mw_val *cv = lat_conn.lookup(&ck);
    if (!cv) {
        u32 z0 = 0;
        struct mw_val *z = zero_val.lookup(&z0);
        if (z)
            cv = lat_conn.lookup_or_try_init(&ck, z);
    }
    if (!cv) {
        mw_add(&ck, mw_val_of(&ck), timed, lat, b, err);  /* lat, or the spill */
    } else if (!timed) {
        __sync_fetch_and_add(&cv->noreply, 1);
    } else {
        __sync_fetch_and_add(&cv->count, 1);
        __sync_fetch_and_add(&cv->sum_ns, lat);
        if (lat > cv->max_ns)
            cv->max_ns = lat;                       /* a rare race keeps the lower */
        if (b < MW_NB)
            __sync_fetch_and_add(&cv->hist[b], 1);
        if (err)
            __sync_fetch_and_add(&cv->errors, 1);
    }
#endif
}

/* the current request is complete: count it and queue it for its reply */
static __always_inline void mw_complete(struct mw_conn *c, u32 fd, u64 now)
{
    if (c->rx_need) {
        /* every decode with no more bytes to come settles the name; this
         * only guards against a path that did not decode at all */
        mw_setname(&c->rx_name, "[unknown]", 10);
        c->rx_need = 0;
    }
    mw_count(C_REQUESTS, 1);
    if ((c->rx_op == OP_MSG && (c->rx_flags & MSG_MORE_TO_COME)) ||
        c->rx_op == OP_INSERT || c->rx_op == OP_UPDATE ||
        c->rx_op == OP_DELETE || c->rx_op == OP_KILL_CURSORS) {
        /* no reply due: moreToCome, or a legacy write/killCursors opcode
         * (the protocol defines no reply for those); kept, in case the server
         * answers it anyway (FerretDB answers the Node.js driver's endSessions) */
        mw_count(C_NOREPLY, 1);
        mw_account(&c->rx_name, c->rx_op, fd, now, 0, 0, 0);
        c->nr_id = c->rx_id;
        c->nr_name = c->rx_name;
        return;
    }
    if (c->nslots >= MW_SLOTS) {
        /* ring full: the oldest request never got a reply */
        mw_count(C_NOREPLY_LOST, 1);
        c->head = (c->head + 1) & (MW_SLOTS - 1);
        c->nslots = MW_SLOTS - 1;
    }
    u32 i = (c->head + c->nslots) & (MW_SLOTS - 1);
    struct mw_slot *s = &c->slots[i];
    s->ts = now;
    s->req_id = c->rx_id;
    s->opcode = c->rx_op;
    s->bytes = c->rx_len;
    s->name = c->rx_name;
    c->nslots++;
}

/* a new request begins with header h; slow: its name is not in the first chunk */
static __always_inline void mw_start(struct mw_conn *c, struct mw_hdr *h, int slow)
{
    c->rx_len = h->len;
    c->rx_id = h->req_id;
    c->rx_op = h->op;
    c->rx_flags = 0;
    c->rx_need = slow;
    c->pfx_len = 0;
    if (slow) {
        __builtin_memset(c->pfx, 0, MW_PFX);
        c->rx_name.w[0] = 0; c->rx_name.w[1] = 0; c->rx_name.w[2] = 0;
    }
}

/* lost framing on a known connection: count it once, then skip silently
 * until a receive (or send) starts with a valid header */
static __always_inline void mw_desync_rx(struct mw_conn *c)
{
    if (c && c->rx_sync) {
        mw_count(C_MALFORMED, 1);
        c->rx_sync = 0;
    }
    if (c)
        c->rx_rem = 0;
}

static __always_inline void mw_desync_tx(struct mw_conn *c)
{
    if (c->tx_sync) {
        mw_count(C_MALFORMED, 1);
        c->tx_sync = 0;
    }
    c->tx_rem = 0;
    c->tx_have = 0;
}

/* ---- receives ------------------------------------------------------------ */

/*
 * Receive, step 1: the first bytes continue the current message, if any.
 * a->ret bytes were received; the first a->cap of them are readable at a->buf.
 */
static __always_inline void mw_rx_first(struct mw_args *a, struct mw_conn *c)
{
    u64 ret = a->ret;
    u64 avail = a->cap < ret ? a->cap : ret;

    if (!c || c->rx_rem == 0)
        return;
    u32 n = c->rx_rem < ret ? c->rx_rem : ret;
    u32 r = avail < n ? avail : n;
    u32 pos = c->rx_pos;
    mw_capture(c, a->buf, r, pos);
    c->rx_pos += n;
    c->rx_rem -= n;
    if (c->rx_need) {
        int more = c->rx_rem > 0 && c->pfx_len == c->rx_pos && c->pfx_len < MW_PFX;
        mw_decode(c, a->buf, r, pos, more, a->fd);
    }
    if (c->rx_rem == 0)
        mw_complete(c, a->fd, a->now);
    a->off = n;
}

/*
 * Receive, step 2: one whole header at a->off (steps are chained by tail
 * calls, at most MW_MAXMSG per receive). Returns 1 when the receive is done.
 */
static __always_inline int mw_rx_step(struct mw_args *a, struct mw_conn *c)
{
    u64 ret = a->ret, off = a->off;
    u64 avail = a->cap < ret ? a->cap : ret;
    /* header, flagBits, kind, doclen, type and 24 name bytes, when readable
     * (one copy; fields read from the aligned words below) */
    u64 m[7] = {};
    struct mw_hdr *h = (struct mw_hdr *)m;   /* len, req_id, resp_to, op, flags */

    if (ret <= off)
        return 1;
    if (ret - off < MW_HDR || a->iter >= MW_MAXMSG) {
        /* step 3: a header split across receives, or too many messages */
        if (!c && off == 0 && ret == 5) {
            /* OpenSSL reads a record's 5-byte header alone */
            u64 b = 0;
            if (mw_read_user(&b, 3, (void *)a->buf) == 0)
                mw_tls_seen(a->fd, b);
        }
        mw_desync_rx(c);
        return 1;
    }
    a->iter++;
    if (off + MW_HDR > avail) {
        /* the header lies beyond the first iovec: it cannot be read */
        mw_desync_rx(c);
        return 1;
    }
    u64 left = ret - off;
    u64 r0 = avail - off;       /* readable bytes from the header on */
    int fast = r0 >= MW_FAST;
    if (mw_read_user(m, fast ? MW_FAST : MW_HDR, (void *)(a->buf + off)) != 0)
        return 1;
    if (!mw_valid(h, 1)) {
        /* unknown connection: not protocol traffic (files, pipes), ignored;
         * TLS records there are counted (their plaintext is not seen) */
        if (!c && off == 0)
            mw_tls_seen(a->fd, m[0]);
        mw_desync_rx(c);
        return 1;
    }
    u32 fd = a->fd;
    if (!c) {
        c = mw_conn_new(fd);
        if (!c) {
            mw_count(C_DROPPED, 1);
            mw_count(C_FULL_CONNS, 1);
            return 1;
        }
        c->tx_sync = 1;
    }
    c->rx_sync = 1;
    u32 n = (u64)h->len < left ? (u32)h->len : (u32)left;
    /* the fast path: an OP_MSG whose body section comes first and whose first
     * 50 bytes are in this chunk (the name cut at 24 bytes if it is longer) */
    u8 kind = (m[2] >> 32) & 0xff;          /* byte 20 */
    fast = fast && n >= MW_FAST && h->op == OP_MSG && kind == 0;
    mw_start(c, h, !fast);
    c->rx_pos = n;
    c->rx_rem = h->len - n;
    if (fast) {
        /* the name starts at byte 26: words from the aligned ones around it */
        u64 raw[3] = {(m[3] >> 16) | (m[4] << 48), (m[4] >> 16) | (m[5] << 48),
                      (m[5] >> 16) | (m[6] << 48)};
        c->rx_flags = h->flags;
        mw_name_words(&c->rx_name, raw);
    } else if (mw_fixed_name(c, h->op)) {
        c->rx_need = 0;
    } else {
        u32 r = r0 < n ? r0 : n;
        mw_capture(c, a->buf + off, r, 0);
        int more = c->rx_rem > 0 && c->pfx_len == c->rx_pos && c->pfx_len < MW_PFX;
        mw_decode(c, a->buf + off, r, 0, more, fd);
    }
    if (c->rx_rem == 0)
        mw_complete(c, fd, a->now);
    a->off = off + n;
    return a->off >= ret;
}

/* ---- sends --------------------------------------------------------------- */

static __always_inline void mw_reply(void *ctx, struct mw_conn *c, u32 fd,
                                     struct mw_hdr *h, u64 ts, s32 err)
{
    int more = h->op == OP_MSG && (h->flags & MSG_MORE_TO_COME);

    if (c->stream && h->resp_to == c->stream_id) {
        mw_count(C_STREAM, 1);
        c->stream_id = h->req_id;
        c->stream = more;
        return;
    }
    /* servers answer in order: match the oldest outstanding request; a match
     * further in the ring means the older ones were never answered */
    int k = -1;
    u8 head = c->head, ns = c->nslots;
#pragma unroll
    for (int j = 0; j < MW_SLOTS; j++) {
        if (k < 0 && j < ns && c->slots[(head + j) & (MW_SLOTS - 1)].req_id == h->resp_to)
            k = j;
    }
    if (k < 0) {
        if (c->nr_name.w[0] && h->resp_to == c->nr_id) {
            /* the answer to a request that asked for none: the server's doing */
            u64 zero = 0;
            u64 *n = answered.lookup_or_try_init(&c->nr_name, &zero);
            if (n)
                __sync_fetch_and_add(n, 1);
            else
                mw_count(C_DROPPED, 1);
            mw_count(C_ANSWERED, 1);
            c->nr_name.w[0] = 0;
            return;
        }
        mw_count(C_UNMATCHED, 1);
        return;
    }
    if (k > 0)
        mw_count(C_NOREPLY_LOST, k);
    struct mw_slot *s = &c->slots[(head + k) & (MW_SLOTS - 1)];
    u64 lat = ts > s->ts ? ts - s->ts : 0;
    mw_count(C_REPLIES, 1);
    mw_account(&s->name, s->opcode, fd, ts, 1, lat, err);
#ifdef MW_EVENTS
#if defined(MW_SAMPLE) && MW_SAMPLE > 1
    if (bpf_get_prandom_u32() % MW_SAMPLE == 0)
#endif
    {
#ifdef MW_RINGBUF
        struct mw_event *e = events.ringbuf_reserve(sizeof(struct mw_event));
        if (!e) {
            mw_count(C_DROPPED, 1);
        } else {
#else
        struct mw_event ev = {};
        struct mw_event *e = &ev;
        {
#endif
            e->ts = ts;
            e->latency_ns = lat;
            e->name = s->name;
            e->tid = (u32)bpf_get_current_pid_tgid();
            e->fd = fd;
            e->request_id = s->req_id;
            e->opcode = s->opcode;
            e->bytes_in = s->bytes;
            e->bytes_out = h->len;
            e->stream = more;
            e->error_code = err;
#ifdef MW_RINGBUF
            /* waking the reader costs microseconds per event: it takes what is
             * there every 100 ms instead (4 MiB hold ~58,000 events) */
            events.ringbuf_submit(e, BPF_RB_NO_WAKEUP);
#else
            if (events.perf_submit(ctx, e, sizeof(*e)) != 0)
                mw_count(C_DROPPED, 1);
#endif
        }
    }
#endif
    c->head = (head + k + 1) & (MW_SLOTS - 1);
    c->nslots = ns - (k + 1);
    c->stream = more;
    c->stream_id = h->req_id;
}

/*
 * Send, step 1: the first bytes continue the current reply, or complete the
 * first 40 bytes of a reply (its header, and the body's first element, where a
 * failure's ok: 0 is) whose start ended an earlier send (a reply written as 10
 * bytes, 10, then the rest): matched and timed from that first send.
 */
static __always_inline void mw_tx_first(void *ctx, struct mw_args *a, struct mw_conn *c)
{
    if (c->tx_ahead) {
        /* a send framed at its entry went out in part (or not at all): the
         * application sends its tail again, and those bytes were framed */
        u64 s = c->tx_ahead < a->ret ? c->tx_ahead : a->ret;
        c->tx_ahead -= s;
        a->buf += s;
        a->cap = a->cap > s ? a->cap - s : 0;
        a->ret -= s;
        if (a->ret == 0)
            return;             /* all of it sent again: nothing new (a reply's
                                 * first bytes kept from it stay kept) */
    }
    u64 ret = a->ret;
    u64 avail = a->cap < ret ? a->cap : ret;

    if (c->tx_have) {
        u64 have = c->tx_have;
        u64 take = MW_RHDR - have;      /* header, flagBits, an OP_MSG's ok */
        if (take > avail)
            take = avail;
        MW_OPAQUE(have);
        MW_OPAQUE(take);
        if (have >= MW_RHDR || take > MW_RHDR || take == 0) {
            mw_desync_tx(c);
            a->off = ret;
            return;
        }
        if (mw_read_user(&c->tx_hdr[have], take, (void *)a->buf) != 0) {
            mw_desync_tx(c);
            a->off = ret;
            return;
        }
        if (have + take < MW_HDR) {
            if (take < ret) {           /* the rest of this send is unreadable */
                mw_desync_tx(c);
                a->off = ret;
                return;
            }
            c->tx_have = have + take;   /* still short of a header: wait again */
            a->off = ret;
            return;
        }
        struct mw_rhdr r;
        __builtin_memcpy(&r, c->tx_hdr, MW_RHDR);   /* bytes past have + take: */
        if (have + take < 20)                       /* not this reply's */
            r.h.flags = 0;
        if (!mw_valid(&r.h, 0)) {
            mw_desync_tx(c);
            a->off = ret;
            return;
        }
        if (have + take < MW_RHDR && have + take < (u64)r.h.len && take == ret) {
            /* the header is here, not yet the bytes that say whether the
             * reply failed: wait for them (timed from the first send all
             * the same) */
            c->tx_have = have + take;
            a->off = ret;
            return;
        }
        c->tx_have = 0;
        c->tx_sync = 1;
        /* message byte k >= have is at a->buf + k - have; the bytes before have
         * were in earlier sends, maybe from another buffer: a code there is not
         * read (the reply counts as failed, its code -1) */
        mw_reply(ctx, c, a->fd, &r.h, c->tx_ts,
                 mw_failed(&r, have + take, a->buf - have, have, have + avail));
        /* bytes of this reply in this send */
        u64 rest = (u64)r.h.len - have;
        u64 n = rest < ret ? rest : ret;
        c->tx_rem = rest - n;
        a->off = n;
        return;
    }
    if (c->tx_rem == 0)
        return;
    u32 n = c->tx_rem < ret ? c->tx_rem : ret;
    c->tx_rem -= n;
    a->off = n;
}

/* Send, step 2: one reply header at a->off. Returns 1 when the send is done. */
static __always_inline int mw_tx_step(void *ctx, struct mw_args *a, struct mw_conn *c)
{
    u64 ret = a->ret, off = a->off;
    u64 avail = a->cap < ret ? a->cap : ret;
    struct mw_rhdr r;

    if (ret <= off)
        return 1;
    if (a->iter >= MW_MAXMSG) {
        mw_desync_tx(c);
        return 1;
    }
    if (ret - off < MW_HDR) {
        /* a reply header split across sends: keep its first bytes */
        u64 left = ret - off;
        MW_OPAQUE(left);
        if (off + left > avail || left >= MW_HDR || left == 0 ||
            mw_read_user(c->tx_hdr, left, (void *)(a->buf + off)) != 0) {
            mw_desync_tx(c);
            return 1;
        }
        c->tx_have = left;
        c->tx_ts = a->ts;
        return 1;
    }
    a->iter++;
    if (off + MW_HDR > avail) {
        mw_desync_tx(c);
        return 1;
    }
    /* the header and, in the same copy, the first element of an OP_MSG body */
    __builtin_memset(&r, 0, sizeof(r));
    u64 hl = avail - off;
    if (hl > MW_RHDR)
        hl = MW_RHDR;
    MW_OPAQUE(hl);
    if (hl > MW_RHDR || mw_read_user(&r, hl, (void *)(a->buf + off)) != 0)
        return 1;
    if (!mw_valid(&r.h, 0)) {
        mw_desync_tx(c);
        return 1;
    }
    u64 left = ret - off;
    if (left < MW_RHDR && left < (u64)r.h.len && hl == left) {
        /* this send ends inside the reply's first 40 bytes: keep them, match
         * it when the rest says whether it failed (split sends) */
        __builtin_memcpy(c->tx_hdr, &r, MW_RHDR);
        c->tx_have = left;
        c->tx_ts = a->ts;
        c->tx_sync = 1;
        return 1;
    }
    c->tx_sync = 1;
    mw_reply(ctx, c, a->fd, &r.h, a->ts, mw_failed(&r, hl, a->buf + off, 0, avail - off));
    u32 n = (u64)r.h.len < left ? (u32)r.h.len : (u32)left;
    c->tx_rem = r.h.len - n;
    a->off = off + n;
    return a->off >= ret;
}

/* ---- syscall tracepoints ---------------------------------------------- */

/* further headers of one receive/send: these programs chain themselves */
BPF_PROG_ARRAY(mw_jmp, 2);
#define MW_JMP_RX 0
#define MW_JMP_TX 1

static __always_inline struct mw_args *mw_args_of_task(int create)
{
    return inflight.task_storage_get(bpf_get_current_task_btf(), 0,
                                     create ? BPF_LOCAL_STORAGE_GET_F_CREATE : 0);
}

#ifdef MW_TLS
/* probes/mongo_tls.h, appended by the tools when a TLS library is hooked: a
 * socket syscall of the target gives its fd to the TLS call in flight around it
 * (a global count of such calls stops it at once when there is none), close
 * frees the TLS state of the fd */
static __always_inline void mw_tls_nested(u64 fd);
static __always_inline void mw_tls_close(u32 fd);
#endif

/* a syscall of the target on fd? (then the TLS call in flight around it, if
 * any, learns its socket) */
static __always_inline int mw_target(u64 fd)
{
    if ((bpf_get_current_pid_tgid() >> 32) != MW_TARGET_PID)
        return 0;
#ifdef MW_TLS
    mw_tls_nested(fd);
#endif
    return 1;
}

/* save a receive's or send's buffer for its exit, in the thread's storage */
static __always_inline int mw_enter(u64 fd, u64 buf, u64 cap, int tx)
{
    if (!mw_target(fd))
        return 0;
    struct mw_args *a = mw_args_of_task(1);
    if (!a) {
        mw_count(C_DROPPED, 1);
        return 0;
    }
    a->buf = buf;
    a->cap = cap;
    a->ts = tx ? bpf_ktime_get_ns() : 0;
    a->fd = fd;
    a->live = 1;
    return 0;
}

/* a receive whose bytes are not ours to take (MSG_PEEK, no iovec): its exit
 * must not use what an earlier call of the thread left */
static __always_inline int mw_enter_skip(void)
{
    u64 id = bpf_get_current_pid_tgid();
    if ((id >> 32) != MW_TARGET_PID)
        return 0;
    struct mw_args *a = mw_args_of_task(0);
    if (a)
        a->live = 0;
    return 0;
}

static __always_inline int mw_enter_vec(u64 fd, u64 vec, u64 vlen, int tx)
{
    struct mw_iovec iov = {};
    u64 id = bpf_get_current_pid_tgid();
    if ((id >> 32) != MW_TARGET_PID)
        return 0;
    if (vlen == 0 || mw_read_user(&iov, sizeof(iov), (void *)vec) != 0)
        return mw_enter_skip();
    return mw_enter(fd, iov.base, iov.len, tx);
}

static __always_inline int mw_enter_msg(u64 fd, u64 msg, u64 flags, int tx)
{
    u64 id = bpf_get_current_pid_tgid();
    u64 iov[2] = {};
    if ((id >> 32) != MW_TARGET_PID)
        return 0;
    if (!tx && (flags & MW_MSG_PEEK))
        return mw_enter_skip();
    /* struct user_msghdr: msg_name(8) msg_namelen(4+4) msg_iov(8) msg_iovlen(8) */
    if (mw_read_user(iov, sizeof(iov), (void *)(msg + 16)) != 0)
        return mw_enter_skip();
    return mw_enter_vec(fd, iov[0], iov[1], tx);
}

/* frame what a receive (tx 0) or send (tx 1) of a->ret bytes carried; a is on
 * the stack or in the thread's inflight entry; a 2nd..8th message continues in
 * mw_rx_more/mw_tx_more, from the inflight entry */
static __always_inline int mw_frame(void *ctx, struct mw_args *a, struct mw_conn *c, int tx)
{
    int done;
    a->off = 0;
    a->iter = 0;
    if (tx) {
        mw_tx_first(ctx, a, c);
        done = mw_tx_step(ctx, a, c);
    } else {
        mw_rx_first(a, c);
        done = mw_rx_step(a, c);
    }
    if (done)
        return 0;
    struct mw_args *m = mw_args_of_task(1);
    if (!m) {
        mw_count(C_DROPPED, 1);
        return 0;
    }
    if (m != a)
        __builtin_memcpy(m, a, sizeof(*m));
    mw_jmp.call(ctx, tx ? MW_JMP_TX : MW_JMP_RX);
    /* the tail call failed (only before the tools fill mw_jmp) */
    return 0;
}

static __always_inline int mw_exit(void *ctx, s64 ret, int tx)
{
    u64 id = bpf_get_current_pid_tgid();
    if ((id >> 32) != MW_TARGET_PID)
        return 0;
    struct mw_args *a = mw_args_of_task(0);
    if (!a || !a->live)
        return 0;
    a->live = 0;
    if (ret <= 0)
        return 0;
    u32 fd = a->fd;
    struct mw_conn *c = mw_conn_of(fd);
    if (tx && !c)
        return 0;               /* sends matter only on connections that sent a request */
    a->ret = ret;
    a->now = tx ? 0 : bpf_ktime_get_ns();
    return mw_frame(ctx, a, c, tx);
}

#if defined(__x86_64__) && !defined(MW_AT_ENTRY)
/*
 * On x86-64 the exit tracepoints read the syscall's arguments from the task's
 * saved user registers (di, si, dx, r10), which still hold them:
 * - receives need no entry program: one program run per receive instead of
 *   two, and no per-thread storage;
 * - write and sendto are framed at their entry, from the tracepoint's
 *   arguments, and their exit only compares the bytes sent with the length
 *   asked (a partial send sets tx_ahead: the application sends the tail again).
 * The registers are read by direct loads (bpf_task_pt_regs gives a BTF pointer;
 * a bpf_probe_read_kernel of them cost ~100 ns here, the loads ~30 ns) and
 * trusted only when they are this syscall's: orig_ax is its number and ax its
 * return value (else the call is counted as dropped).
 */
#define MW_REGS 1
struct mw_sysregs {
    u64 dx, si, di;
};

static __always_inline struct pt_regs *mw_regs(void)
{
    return (struct pt_regs *)bpf_task_pt_regs(
        (struct task_struct *)bpf_get_current_task_btf());
}

/* kind: 0 read(fd, buf, count), 1 readv(fd, iov, n), 2 recvfrom(fd, buf, len,
 * flags), 3 recvmsg(fd, msg, flags) */
static __always_inline int mw_exit_rx(void *ctx, int nr, s64 ret, int kind)
{
    /* the cheapest test first: ret is in the tracepoint's record, the pid a
     * helper call away; nothing received (Go's and Netty's EAGAIN, EOF, an
     * error) is the commonest receive of every process on a slow server */
    if (ret <= 0)
        return 0;
    u64 id = bpf_get_current_pid_tgid();
    if ((id >> 32) != MW_TARGET_PID)
        return 0;
    struct pt_regs *p = mw_regs();
    if (p->orig_ax != (u64)nr || (s64)p->ax != ret) {
        mw_count(C_DROPPED, 1);
        return 0;
    }
    struct mw_sysregs r = {.dx = p->dx, .si = p->si, .di = p->di};
    struct mw_args a = {.fd = r.di, .buf = r.si, .cap = r.dx};
#ifdef MW_TLS
    mw_tls_nested(r.di);
#endif
    if (kind == 2 && (p->r10 & MW_MSG_PEEK))
        return 0;
    if (kind == 3) {
        /* struct user_msghdr: msg_name(8) msg_namelen(4+4) msg_iov(8) msg_iovlen(8) */
        u64 iov[2] = {};
        if ((r.dx & MW_MSG_PEEK) ||
            mw_read_user(iov, sizeof(iov), (void *)(r.si + 16)) != 0)
            return 0;
        a.buf = iov[0];
        a.cap = iov[1];
        kind = 1;
    }
    if (kind == 1) {
        struct mw_iovec v = {};
        if (a.cap == 0 || mw_read_user(&v, sizeof(v), (void *)a.buf) != 0)
            return 0;
        a.buf = v.base;
        a.cap = v.len;
    }
    u32 fd = a.fd;
    struct mw_conn *c = mw_conn_of(fd);
    a.ret = ret;
    a.now = bpf_ktime_get_ns();
    return mw_frame(ctx, &a, c, 0);
}

/* write(fd, buf, count) or sendto(fd, buf, len, ...) at its entry: framed as
 * if all len bytes go out (they do, but for a full socket buffer, a signal, or
 * an error) */
static __always_inline int mw_send(void *ctx, u64 fd, u64 buf, u64 len)
{
    if (!mw_target(fd))
        return 0;
    u32 k = fd;
    struct mw_conn *c = mw_conn_of(k);
    if (!c || (s64)len <= 0)
        return 0;               /* sends matter only on connections that sent a request */
    struct mw_args a = {.fd = fd, .buf = buf, .cap = len, .ret = len,
                        .ts = bpf_ktime_get_ns()};
    return mw_frame(ctx, &a, c, 1);
}

/* its exit: the bytes framed at entry that did not go out (an error or
 * EAGAIN: all of them) come again at the start of the connection's next sends */
static __always_inline int mw_send_exit(int nr, s64 ret)
{
    u64 id = bpf_get_current_pid_tgid();
    if ((id >> 32) != MW_TARGET_PID)
        return 0;
    struct pt_regs *p = mw_regs();
    if (p->orig_ax != (u64)nr) {
        mw_count(C_DROPPED, 1);
        return 0;
    }
    s64 len = p->dx;
    if (ret == len || len <= 0)
        return 0;
    u32 fd = p->di;
    struct mw_conn *c = mw_conn_of(fd);
    if (c)
        c->tx_ahead += len - (ret > 0 ? ret : 0);
    return 0;
}
#endif

int mw_rx_more(void *ctx)
{
    struct mw_args *a = mw_args_of_task(0);
    if (!a)
        return 0;
    u32 fd = a->fd;
    struct mw_conn *c = mw_conn_of(fd);
    if (!mw_rx_step(a, c))
        mw_jmp.call(ctx, MW_JMP_RX);
    return 0;
}

int mw_tx_more(void *ctx)
{
    struct mw_args *a = mw_args_of_task(0);
    if (!a)
        return 0;
    u32 fd = a->fd;
    struct mw_conn *c = mw_conn_of(fd);
    if (!c)
        return 0;
    if (!mw_tx_step(ctx, a, c))
        mw_jmp.call(ctx, MW_JMP_TX);
    return 0;
}

/*
 * One program per decoding role, not per syscall: the tools attach it to the
 * syscalls that share its role (the tracepoints' records have the same layout:
 * the exits' ret, the first three arguments of write and sendto), so the
 * decoder is compiled and verified once per role, not once per syscall (a bcc
 * start took twice as long). The tools list them (SHARED_PROGRAMS):
 *   sys_exit_read    also readv, recvfrom, recvmsg (the number says which)
 *   sys_enter_write  also sendto
 *   sys_exit_write   also sendto
 *   sys_exit_writev  also sendmsg
 */
#ifdef MW_REGS
TRACEPOINT_PROBE(syscalls, sys_exit_read)
{
    int nr = args->__syscall_nr;
    int kind = nr == __NR_readv ? 1 : nr == __NR_recvfrom ? 2 : nr == __NR_recvmsg ? 3 : 0;
    return mw_exit_rx(args, nr, args->ret, kind);
}
#else
TRACEPOINT_PROBE(syscalls, sys_enter_read)
{ return mw_enter(args->fd, (u64)args->buf, args->count, 0); }
TRACEPOINT_PROBE(syscalls, sys_exit_read)
{ return mw_exit(args, args->ret, 0); }
TRACEPOINT_PROBE(syscalls, sys_enter_readv)
{ return mw_enter_vec(args->fd, (u64)args->vec, args->vlen, 0); }
TRACEPOINT_PROBE(syscalls, sys_enter_recvfrom)
{
    if (args->flags & MW_MSG_PEEK)
        return mw_enter_skip();
    return mw_enter(args->fd, (u64)args->ubuf, args->size, 0);
}
TRACEPOINT_PROBE(syscalls, sys_enter_recvmsg)
{ return mw_enter_msg(args->fd, (u64)args->msg, args->flags, 0); }
#endif

#ifdef MW_REGS
TRACEPOINT_PROBE(syscalls, sys_enter_write)
{ return mw_send(args, args->fd, (u64)args->buf, args->count); }
TRACEPOINT_PROBE(syscalls, sys_exit_write)
{ return mw_send_exit(args->__syscall_nr, args->ret); }
#else
TRACEPOINT_PROBE(syscalls, sys_enter_write)
{ return mw_enter(args->fd, (u64)args->buf, args->count, 1); }
TRACEPOINT_PROBE(syscalls, sys_exit_write)
{ return mw_exit(args, args->ret, 1); }
#endif
TRACEPOINT_PROBE(syscalls, sys_enter_writev)
{ return mw_enter_vec(args->fd, (u64)args->vec, args->vlen, 1); }
TRACEPOINT_PROBE(syscalls, sys_exit_writev)
{ return mw_exit(args, args->ret, 1); }
TRACEPOINT_PROBE(syscalls, sys_enter_sendmsg)
{ return mw_enter_msg(args->fd, (u64)args->msg, args->flags, 1); }

TRACEPOINT_PROBE(syscalls, sys_enter_close)
{
    u64 id = bpf_get_current_pid_tgid();
    if ((id >> 32) != MW_TARGET_PID)
        return 0;
    u32 fd = args->fd;
    tls_fds.delete(&fd);
#ifdef MW_TLS
    mw_tls_close(fd);
#endif
    struct mw_conn *c = mw_conn_of(fd);
    if (c)
        mw_conn_free(fd, c);
    return 0;
}

/* Syscalls whose messages are not decoded: counted so a server that uses them
 * is told it is not fully traced (the user-space side adds its io_uring fds). */
TRACEPOINT_PROBE(syscalls, sys_enter_recvmmsg)
{
    if ((bpf_get_current_pid_tgid() >> 32) == MW_TARGET_PID)
        mw_count(C_MMSG, 1);
    return 0;
}

TRACEPOINT_PROBE(syscalls, sys_enter_sendmmsg)
{
    if ((bpf_get_current_pid_tgid() >> 32) == MW_TARGET_PID)
        mw_count(C_MMSG, 1);
    return 0;
}

TRACEPOINT_PROBE(syscalls, sys_enter_io_uring_enter)
{
    if ((bpf_get_current_pid_tgid() >> 32) == MW_TARGET_PID)
        mw_count(C_URING, 1);
    return 0;
}
