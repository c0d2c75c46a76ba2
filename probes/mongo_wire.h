/*
 * mongo_wire.h - in-kernel MongoDB wire-protocol decoder shared by the bcc
 *                tools mongolatency.py and mongosnoop.py.
 *                For Linux, uses BCC, eBPF. Syscall tracepoints only.
 *
 * This is the BPF C program itself (not a normal header): each tool reads it,
 * prepends its #define switches, and hands the text to BPF(text=...).
 * The algorithm is the one documented in probes/README.md: a per-connection
 * state machine keyed by (pid, fd), framing of receives and sends, a ring of 4
 * outstanding requests per connection, command-name extraction, loss counters.
 *
 * Layout: the sys_enter_* programs save the buffer (first iovec for the
 * vectored calls) per thread; the sys_exit_* programs frame what was
 * transferred. One program decodes the continuation and the first header of a
 * syscall; the 2nd..8th headers are decoded by mw_rx_more/mw_tx_more, chained
 * by tail calls through mw_jmp (the tools load them and fill mw_jmp): a
 * bounded loop of 8 full decodes is more than the verifier will explore.
 * Each request's first MW_PFX bytes are kept per connection (pfx) so a name
 * whose bytes arrive in a later receive (mongod reads the header alone) is
 * still found; bcc 0.26 has no .rodata, hence the immediate-store names.
 *
 * Switches (set by the tools):
 *   MW_TARGET_PID   tgid to trace (required; filtered in the kernel)
 *   MW_HIST_OP      aggregate per opcode    (hist_op, stats_op, max_op)
 *   MW_HIST_CMD     aggregate per command   (hist_cmd, stats_cmd, max_cmd)
 *   MW_HIST_CONN    aggregate per (pid, fd) (hist_conn, stats_conn, max_conn)
 *   MW_FACTOR       divisor applied to latencies before the log2 slot (1, 1000,
 *                   1000000); sums and maxima are always in nanoseconds
 *   MW_EVENTS       emit one event per request at its first reply
 *   MW_RINGBUF      use BPF_RINGBUF_OUTPUT for events, else BPF_PERF_OUTPUT
 *
 * Copyright 2025 mongoprobe authors. Licensed under the Apache License 2.0.
 */
#include <uapi/linux/ptrace.h>

#ifndef MW_TARGET_PID
#error "MW_TARGET_PID must be defined"
#endif
#ifndef MW_FACTOR
#define MW_FACTOR 1
#endif

#define MW_HDR      16          /* message header: length, requestID, responseTo, opCode */
#define MW_MAXLEN   48000000    /* largest valid message (maxMessageSizeBytes) */
#define MW_NAME     32          /* command names are read as at most 32 bytes */
#define MW_SLOTS    4           /* outstanding requests kept per connection */
#define MW_MAXMSG   8           /* headers decoded per syscall */
#define MW_PFX      160         /* first bytes of each request kept for its name */
#define MW_CONNS    16384

/* keep clang from folding away a bound the verifier needs to see */
#define MW_OPAQUE(x) asm volatile("" : "+r"(x))

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

/* counters (index into the per-CPU array "counts") */
#define C_REQUESTS   0          /* complete requests */
#define C_REPLIES    1          /* first replies matched to a request (timed) */
#define C_STREAM     2          /* further replies of a moreToCome stream */
#define C_NOREPLY    3          /* no reply due: OP_MSG moreToCome, legacy writes */
#define C_UNMATCHED  4          /* replies that matched no outstanding request */
#define C_NOREPLY_LOST 5        /* requests freed by close() or evicted unanswered */
#define C_MALFORMED  6          /* invalid/split headers on a known connection */
#define C_DROPPED    7          /* ring/perf buffer reserve failures, full maps */
#define C_MAX        8

struct mw_slot {
    u64 ts;                     /* return of the receive that completed it */
    u32 req_id;
    u32 opcode;
    u32 bytes;
    u32 pad;
    char cmd[MW_NAME];
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
    u8 tx_have;                 /* bytes of a reply header split across sends */
    u8 pad;
    /* send side */
    u32 tx_rem;                 /* bytes of the outgoing message still to go */
    u32 stream_id;              /* requestID of the last reply with moreToCome */
    u64 tx_ts;                  /* entry of the send that began the split header */
    char tx_hdr[48];            /* its bytes (header + flags: 20; 48: verifier bound) */
    char rx_cmd[MW_NAME];
    struct mw_slot slots[MW_SLOTS];
    char pfx[2 * MW_PFX];       /* first MW_PFX bytes of the request (2x: verifier bound) */
};

/* arguments of a receive/send in flight, per thread */
struct mw_args {
    u64 buf;                    /* user buffer (first iovec for the vectored calls) */
    u64 cap;                    /* bytes of that buffer (ret beyond it is unreadable) */
    u64 ts;                     /* entry time (replies are timed at send entry) */
    u64 now;                    /* return time (requests complete at receive return) */
    u64 ret;                    /* bytes transferred */
    u64 off;                    /* bytes of them framed so far */
    u32 fd;
    u32 iter;                   /* headers decoded so far */
};

struct mw_hdr {
    s32 len;
    u32 req_id;
    u32 resp_to;
    u32 op;
    u32 flags;                  /* first 4 body bytes (OP_MSG flagBits) */
};

struct mw_iovec {
    u64 base;
    u64 len;
};

/* cumulative (user space prints differences between intervals, no clearing
 * races); the maxima live in the max_* maps, cleared at each interval */
struct mw_stat {
    u64 requests;               /* complete requests */
    u64 count;                  /* timed (replied) requests */
    u64 sum_ns;
};

struct mw_cmd_key {
    char cmd[MW_NAME];
};
struct mw_cmd_slot {
    char cmd[MW_NAME];
    u64 slot;
};
struct mw_u64_slot {
    u64 key;
    u64 slot;
};

struct mw_event {
    u64 ts;                     /* entry of the send that carried the first reply */
    u64 latency_ns;
    u32 pid;
    u32 tid;
    u32 fd;
    u32 request_id;
    u32 opcode;
    u32 bytes_in;
    u32 bytes_out;
    u32 stream;
    char cmd[MW_NAME];
};

BPF_HASH(conns, u64, struct mw_conn, MW_CONNS);
BPF_HASH(inflight, u64, struct mw_args, 10240);
BPF_PERCPU_ARRAY(counts, u64, C_MAX);
BPF_PERCPU_ARRAY(zero_conn, struct mw_conn, 1);   /* never written: init value */

#ifdef MW_HIST_OP
BPF_HISTOGRAM(hist_op, struct mw_u64_slot, 4096);
BPF_HASH(stats_op, u64, struct mw_stat, 64);
BPF_HASH(max_op, u64, u64, 64);
#endif
#ifdef MW_HIST_CMD
BPF_HISTOGRAM(hist_cmd, struct mw_cmd_slot, 16384);
BPF_HASH(stats_cmd, struct mw_cmd_key, struct mw_stat, 1024);
BPF_HASH(max_cmd, struct mw_cmd_key, u64, 1024);
#endif
#ifdef MW_HIST_CONN
BPF_HISTOGRAM(hist_conn, struct mw_u64_slot, 65536);
BPF_HASH(stats_conn, u64, struct mw_stat, MW_CONNS);
BPF_HASH(max_conn, u64, u64, MW_CONNS);
#endif
#ifdef MW_EVENTS
#ifdef MW_RINGBUF
BPF_RINGBUF_OUTPUT(events, 128);
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

/* dst = constant string s (n bytes with the NUL, n < MW_NAME); a macro so
 * that clang turns the copy into immediate stores (no .rodata in bcc) */
#define mw_setname(dst, s, n) do {                  \
        __builtin_memset((dst), 0, MW_NAME);        \
        __builtin_memcpy((dst), (s), (n));          \
    } while (0)

/* Fixed names: legacy opcodes are named after the opcode, compressed bodies
 * carry no readable command. Returns 1 when the opcode has a fixed name. */
static __always_inline int mw_fixed_name(struct mw_conn *c, u32 op)
{
    switch (op) {
    case OP_COMPRESSED:   mw_setname(c->rx_cmd, "[compressed]", 13); return 1;
    case OP_INSERT:       mw_setname(c->rx_cmd, "OP_INSERT", 10); return 1;
    case OP_UPDATE:       mw_setname(c->rx_cmd, "OP_UPDATE", 10); return 1;
    case OP_DELETE:       mw_setname(c->rx_cmd, "OP_DELETE", 10); return 1;
    case OP_GET_MORE:     mw_setname(c->rx_cmd, "OP_GET_MORE", 12); return 1;
    case OP_KILL_CURSORS: mw_setname(c->rx_cmd, "OP_KILL_CURSORS", 16); return 1;
    }
    return 0;
}

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
    if (bpf_probe_read_user(&c->pfx[pos], n, (void *)src) == 0)
        c->pfx_len = pos + n;
}

/*
 * Copy the name at message offset off from the prefix. Returns 1 when the name
 * is final (terminated inside the received prefix, or nothing more can come),
 * 0 when more prefix bytes may still arrive.
 */
static __always_inline int mw_name_from_pfx(struct mw_conn *c, u32 off, int more)
{
    u32 have = c->pfx_len;
    if (off >= MW_PFX)
        return 1;
    long n = bpf_probe_read_kernel_str(c->rx_cmd, MW_NAME, &c->pfx[off]);
    /* pfx beyond pfx_len is zeroed at each new request, so the copy stops there */
    if (n > 0 && off + (u32)n - 1 < have)
        return 1;               /* NUL inside the received bytes */
    if (n >= MW_NAME)
        return 1;               /* 31 characters: truncated name */
    return !more;
}

/*
 * Decode the command name of the current request from its prefix (and, for an
 * OP_MSG whose kind-1 section comes first, from the chunk just received: user
 * address src holds message bytes [pos, pos + r)). more: further bytes of this
 * request can still be captured into the prefix.
 */
static __always_inline void mw_decode(struct mw_conn *c, u64 src, u32 r, u32 pos, int more)
{
    u32 have = c->pfx_len;
    u32 off;

    if (!c->rx_need)
        return;
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
                    long n = bpf_probe_read_user_str(c->rx_cmd, MW_NAME,
                                                     (void *)(src + d));
                    if (n <= 0)
                        goto unknown;
                    if (d + (u32)n - 1 > r)     /* ran past the chunk */
                        c->rx_cmd[(r - d) & (MW_NAME - 1)] = 0;
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
            mw_setname(c->rx_cmd, "find", 5);
            c->rx_need = 0;
            return;
        }
        char tail[8] = {};
        bpf_probe_read_kernel(tail, 5, &c->pfx[(20 + nslen - 5) & 0xff]);
        if (!(tail[0] == '.' && tail[1] == '$' && tail[2] == 'c' &&
              tail[3] == 'm' && tail[4] == 'd')) {
            mw_setname(c->rx_cmd, "find", 5);
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
    if (c->rx_op == OP_QUERY && c->rx_cmd[0] == '$' && c->rx_cmd[1] == 'q' &&
        c->rx_cmd[2] == 'u' && c->rx_cmd[3] == 'e' && c->rx_cmd[4] == 'r' &&
        c->rx_cmd[5] == 'y' && c->rx_cmd[6] == 0) {
        /* {$query: {cmd: ...}, $readPreference: ...}: the command is the first key
         * of the wrapped document: "$query\0" (7), its length (4), its type (1) */
        off += 12;
        if (off >= MW_PFX || (off >= have && !more))
            goto unknown;
        /* names are map keys byte for byte: no "$query" tail after the inner name */
        __builtin_memset(c->rx_cmd, 0, MW_NAME);
        if (!mw_name_from_pfx(c, off, more))
            return;
    }
    c->rx_need = 0;
    return;
need:
    if (more)
        return;
unknown:
    mw_setname(c->rx_cmd, "[unknown]", 10);
    c->rx_need = 0;
}

/*
 * One view's accounting, given its map entries (NULL: the map is full; m and v
 * are only looked up for a latency): request count, or timed count, sum, max
 * and the log2 histogram slot. A full map counts as dropped.
 */
static __always_inline void mw_tally(struct mw_stat *s, u64 *m, u64 *v, int timed, u64 lat)
{
    if (!s) {
        mw_count(C_DROPPED, 1);
    } else if (!timed) {
        __sync_fetch_and_add(&s->requests, 1);
    } else {
        __sync_fetch_and_add(&s->count, 1);
        __sync_fetch_and_add(&s->sum_ns, lat);
    }
    if (timed) {
        if (m && lat > *m)
            *m = lat;           /* racy, rarely matters */
        if (v)
            __sync_fetch_and_add(v, 1);
        if (!m || !v)
            mw_count(C_DROPPED, 1);
    }
}

/*
 * Account a complete request (timed == 0) or a latency (timed == 1) in each
 * view. (bcc refuses map calls inside macros, so each view spells out its three
 * lookups; mw_tally does the rest.)
 */
static __always_inline void mw_account(u32 op, char *cmd, u64 connkey, int timed, u64 lat)
{
    struct mw_stat zs = {};
    u64 slot = bpf_log2l(lat / MW_FACTOR);
    u64 zero = 0;

#ifdef MW_HIST_OP
    u64 opk = op;
    struct mw_u64_slot ohk = {.key = op, .slot = slot};
    mw_tally(stats_op.lookup_or_try_init(&opk, &zs),
             timed ? max_op.lookup_or_try_init(&opk, &zero) : 0,
             timed ? hist_op.lookup_or_try_init(&ohk, &zero) : 0, timed, lat);
#endif
#ifdef MW_HIST_CMD
    struct mw_cmd_key ck = {};
    struct mw_cmd_slot chk = {};
    bpf_probe_read_kernel(ck.cmd, MW_NAME, cmd);
    __builtin_memcpy(chk.cmd, ck.cmd, MW_NAME);
    chk.slot = slot;
    mw_tally(stats_cmd.lookup_or_try_init(&ck, &zs),
             timed ? max_cmd.lookup_or_try_init(&ck, &zero) : 0,
             timed ? hist_cmd.lookup_or_try_init(&chk, &zero) : 0, timed, lat);
#endif
#ifdef MW_HIST_CONN
    struct mw_u64_slot khk = {.key = connkey, .slot = slot};
    mw_tally(stats_conn.lookup_or_try_init(&connkey, &zs),
             timed ? max_conn.lookup_or_try_init(&connkey, &zero) : 0,
             timed ? hist_conn.lookup_or_try_init(&khk, &zero) : 0, timed, lat);
#endif
}

/* the current request is complete: count it and queue it for its reply */
static __always_inline void mw_complete(struct mw_conn *c, u64 key, u64 now)
{
    if (c->rx_need) {
        /* every decode with no more bytes to come settles the name; this
         * only guards against a path that did not decode at all */
        mw_setname(c->rx_cmd, "[unknown]", 10);
        c->rx_need = 0;
    }
    mw_count(C_REQUESTS, 1);
    mw_account(c->rx_op, c->rx_cmd, key, 0, 0);
    if ((c->rx_op == OP_MSG && (c->rx_flags & MSG_MORE_TO_COME)) ||
        c->rx_op == OP_INSERT || c->rx_op == OP_UPDATE ||
        c->rx_op == OP_DELETE || c->rx_op == OP_KILL_CURSORS) {
        /* no reply due: moreToCome, or a legacy write/killCursors opcode
         * (the protocol defines no reply for those) */
        mw_count(C_NOREPLY, 1);
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
    bpf_probe_read_kernel(s->cmd, MW_NAME, c->rx_cmd);
    c->nslots++;
}

/* a new request begins with header h */
static __always_inline void mw_start(struct mw_conn *c, struct mw_hdr *h)
{
    c->rx_len = h->len;
    c->rx_id = h->req_id;
    c->rx_op = h->op;
    c->rx_flags = 0;
    c->rx_need = 1;
    c->pfx_len = 0;
    __builtin_memset(c->pfx, 0, MW_PFX);
    __builtin_memset(c->rx_cmd, 0, MW_NAME);
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

/*
 * Receive, step 1: the first bytes continue the current message, if any.
 * a->ret bytes were received; the first a->cap of them are readable at a->buf.
 */
static __always_inline void mw_rx_first(struct mw_args *a, u64 key)
{
    struct mw_conn *c = conns.lookup(&key);
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
        mw_decode(c, a->buf, r, pos, more);
    }
    if (c->rx_rem == 0)
        mw_complete(c, key, a->now);
    a->off = n;
}

/*
 * Receive, step 2: one whole header at a->off (steps are chained by tail
 * calls, at most MW_MAXMSG per receive). Returns 1 when the receive is done.
 */
static __always_inline int mw_rx_step(struct mw_args *a, u64 key)
{
    struct mw_conn *c = conns.lookup(&key);
    u64 ret = a->ret, off = a->off;
    u64 avail = a->cap < ret ? a->cap : ret;
    struct mw_hdr h;

    if (ret <= off)
        return 1;
    if (ret - off < MW_HDR || a->iter >= MW_MAXMSG) {
        /* step 3: a header split across receives, or too many messages */
        mw_desync_rx(c);
        return 1;
    }
    a->iter++;
    if (off + MW_HDR > avail) {
        /* the header lies beyond the first iovec: it cannot be read */
        mw_desync_rx(c);
        return 1;
    }
    __builtin_memset(&h, 0, sizeof(h));
    if (bpf_probe_read_user(&h, MW_HDR, (void *)(a->buf + off)) != 0)
        return 1;
    if (!mw_valid(&h, 1)) {
        /* unknown connection: not protocol traffic (files, pipes), ignored */
        mw_desync_rx(c);
        return 1;
    }
    if (!c) {
        u32 z0 = 0;
        struct mw_conn *z = zero_conn.lookup(&z0);
        if (!z)
            return 1;
        c = conns.lookup_or_try_init(&key, z);
        if (!c) {
            mw_count(C_DROPPED, 1);
            return 1;
        }
        c->tx_sync = 1;
    }
    c->rx_sync = 1;
    mw_start(c, &h);
    u64 left = ret - off;
    u32 n = (u64)h.len < left ? (u32)h.len : (u32)left;
    u32 r = avail - off < n ? avail - off : n;
    mw_capture(c, a->buf + off, r, 0);
    c->rx_pos = n;
    c->rx_rem = h.len - n;
    if (mw_fixed_name(c, h.op)) {
        c->rx_need = 0;
    } else {
        int more = c->rx_rem > 0 && c->pfx_len == c->rx_pos && c->pfx_len < MW_PFX;
        mw_decode(c, a->buf + off, r, 0, more);
    }
    if (c->rx_rem == 0)
        mw_complete(c, key, a->now);
    a->off = off + n;
    return a->off >= ret;
}

static __always_inline void mw_reply(void *ctx, struct mw_conn *c, u64 key,
                                     struct mw_hdr *h, u64 ts)
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
        mw_count(C_UNMATCHED, 1);
        return;
    }
    if (k > 0)
        mw_count(C_NOREPLY_LOST, k);
    struct mw_slot *s = &c->slots[(head + k) & (MW_SLOTS - 1)];
    u64 lat = ts > s->ts ? ts - s->ts : 0;
    mw_count(C_REPLIES, 1);
    mw_account(s->opcode, s->cmd, key, 1, lat);
#ifdef MW_EVENTS
    u64 id = bpf_get_current_pid_tgid();
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
        e->pid = id >> 32;
        e->tid = (u32)id;
        e->fd = (u32)key;
        e->request_id = s->req_id;
        e->opcode = s->opcode;
        e->bytes_in = s->bytes;
        e->bytes_out = h->len;
        e->stream = more;
        bpf_probe_read_kernel(e->cmd, MW_NAME, s->cmd);
#ifdef MW_RINGBUF
        events.ringbuf_submit(e, 0);
#else
        if (events.perf_submit(ctx, e, sizeof(*e)) != 0)
            mw_count(C_DROPPED, 1);
#endif
    }
#endif
    c->head = (head + k + 1) & (MW_SLOTS - 1);
    c->nslots = ns - (k + 1);
    c->stream = more;
    c->stream_id = h->req_id;
}

/*
 * Send, step 1: the first bytes continue the current reply, or complete a reply
 * header whose first 1-15 bytes ended the previous send (a reply written as
 * 10 bytes, then the rest): matched and timed from that first send.
 */
static __always_inline void mw_tx_first(void *ctx, struct mw_args *a, u64 key)
{
    struct mw_conn *c = conns.lookup(&key);
    u64 ret = a->ret;
    u64 avail = a->cap < ret ? a->cap : ret;

    if (!c)
        return;
    if (c->tx_have) {
        u64 have = c->tx_have;
        u64 take = 20 - have;           /* header and the OP_MSG flagBits */
        if (take > avail)
            take = avail;
        MW_OPAQUE(have);
        MW_OPAQUE(take);
        if (have >= MW_HDR || take > 20 || take == 0) {
            mw_desync_tx(c);
            a->off = ret;
            return;
        }
        if (bpf_probe_read_user(&c->tx_hdr[have], take, (void *)a->buf) != 0) {
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
        struct mw_hdr h = {};
        __builtin_memcpy(&h, c->tx_hdr, MW_HDR);
        if (have + take >= sizeof(h))
            h.flags = *(u32 *)&c->tx_hdr[16];
        c->tx_have = 0;
        if (!mw_valid(&h, 0)) {
            mw_desync_tx(c);
            a->off = ret;
            return;
        }
        c->tx_sync = 1;
        mw_reply(ctx, c, key, &h, c->tx_ts);
        /* bytes of this reply in this send */
        u64 rest = (u64)h.len - have;
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
static __always_inline int mw_tx_step(void *ctx, struct mw_args *a, u64 key)
{
    struct mw_conn *c = conns.lookup(&key);
    u64 ret = a->ret, off = a->off;
    u64 avail = a->cap < ret ? a->cap : ret;
    struct mw_hdr h;

    if (!c || ret <= off)
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
            bpf_probe_read_user(c->tx_hdr, left, (void *)(a->buf + off)) != 0) {
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
    __builtin_memset(&h, 0, sizeof(h));
    u32 hl = off + sizeof(h) <= avail ? sizeof(h) : MW_HDR;
    if (bpf_probe_read_user(&h, hl, (void *)(a->buf + off)) != 0)
        return 1;
    if (!mw_valid(&h, 0)) {
        mw_desync_tx(c);
        return 1;
    }
    c->tx_sync = 1;
    mw_reply(ctx, c, key, &h, a->ts);
    u64 left = ret - off;
    u32 n = (u64)h.len < left ? (u32)h.len : (u32)left;
    c->tx_rem = h.len - n;
    a->off = off + n;
    return a->off >= ret;
}

/* ---- syscall tracepoints ---------------------------------------------- */

/* further headers of one receive/send: these programs chain themselves */
BPF_PROG_ARRAY(mw_jmp, 2);
#define MW_JMP_RX 0
#define MW_JMP_TX 1

static __always_inline int mw_enter(u64 fd, u64 buf, u64 cap, int tx)
{
    u64 id = bpf_get_current_pid_tgid();
    if ((id >> 32) != MW_TARGET_PID)
        return 0;
    if (tx) {
        /* sends matter only on connections that sent a request */
        u64 key = (id & 0xffffffff00000000ULL) | (u32)fd;
        if (!conns.lookup(&key))
            return 0;
    }
    struct mw_args a = {.buf = buf, .cap = cap, .ts = bpf_ktime_get_ns(), .fd = fd};
    inflight.update(&id, &a);
    return 0;
}

static __always_inline int mw_enter_vec(u64 fd, u64 vec, u64 vlen, int tx)
{
    struct mw_iovec iov = {};
    u64 id = bpf_get_current_pid_tgid();
    if ((id >> 32) != MW_TARGET_PID || vlen == 0)
        return 0;
    if (bpf_probe_read_user(&iov, sizeof(iov), (void *)vec) != 0)
        return 0;
    return mw_enter(fd, iov.base, iov.len, tx);
}

static __always_inline int mw_enter_msg(u64 fd, u64 msg, u64 flags, int tx)
{
    u64 id = bpf_get_current_pid_tgid();
    u64 iov[2] = {};
    if ((id >> 32) != MW_TARGET_PID)
        return 0;
    if (!tx && (flags & MW_MSG_PEEK))
        return 0;
    /* struct user_msghdr: msg_name(8) msg_namelen(4+4) msg_iov(8) msg_iovlen(8) */
    if (bpf_probe_read_user(iov, sizeof(iov), (void *)(msg + 16)) != 0)
        return 0;
    return mw_enter_vec(fd, iov[0], iov[1], tx);
}

static __always_inline int mw_exit(void *ctx, s64 ret, int tx)
{
    u64 id = bpf_get_current_pid_tgid();
    if ((id >> 32) != MW_TARGET_PID)
        return 0;
    struct mw_args *a = inflight.lookup(&id);
    if (!a)
        return 0;
    if (ret <= 0) {
        inflight.delete(&id);
        return 0;
    }
    u64 key = (id & 0xffffffff00000000ULL) | a->fd;
    a->ret = ret;
    a->now = bpf_ktime_get_ns();
    a->off = 0;
    a->iter = 0;
    if (tx) {
        mw_tx_first(ctx, a, key);
        if (!mw_tx_step(ctx, a, key))
            mw_jmp.call(ctx, MW_JMP_TX);
    } else {
        mw_rx_first(a, key);
        if (!mw_rx_step(a, key))
            mw_jmp.call(ctx, MW_JMP_RX);
    }
    /* done, or the tail call failed (only before the tools fill mw_jmp) */
    inflight.delete(&id);
    return 0;
}

int mw_rx_more(void *ctx)
{
    u64 id = bpf_get_current_pid_tgid();
    struct mw_args *a = inflight.lookup(&id);
    if (!a)
        return 0;
    u64 key = (id & 0xffffffff00000000ULL) | a->fd;
    if (!mw_rx_step(a, key))
        mw_jmp.call(ctx, MW_JMP_RX);
    inflight.delete(&id);
    return 0;
}

int mw_tx_more(void *ctx)
{
    u64 id = bpf_get_current_pid_tgid();
    struct mw_args *a = inflight.lookup(&id);
    if (!a)
        return 0;
    u64 key = (id & 0xffffffff00000000ULL) | a->fd;
    if (!mw_tx_step(ctx, a, key))
        mw_jmp.call(ctx, MW_JMP_TX);
    inflight.delete(&id);
    return 0;
}

TRACEPOINT_PROBE(syscalls, sys_enter_read)
{ return mw_enter(args->fd, (u64)args->buf, args->count, 0); }
TRACEPOINT_PROBE(syscalls, sys_exit_read)
{ return mw_exit(args, args->ret, 0); }
TRACEPOINT_PROBE(syscalls, sys_enter_readv)
{ return mw_enter_vec(args->fd, (u64)args->vec, args->vlen, 0); }
TRACEPOINT_PROBE(syscalls, sys_exit_readv)
{ return mw_exit(args, args->ret, 0); }
TRACEPOINT_PROBE(syscalls, sys_enter_recvfrom)
{
    if (args->flags & MW_MSG_PEEK)
        return 0;
    return mw_enter(args->fd, (u64)args->ubuf, args->size, 0);
}
TRACEPOINT_PROBE(syscalls, sys_exit_recvfrom)
{ return mw_exit(args, args->ret, 0); }
TRACEPOINT_PROBE(syscalls, sys_enter_recvmsg)
{ return mw_enter_msg(args->fd, (u64)args->msg, args->flags, 0); }
TRACEPOINT_PROBE(syscalls, sys_exit_recvmsg)
{ return mw_exit(args, args->ret, 0); }

TRACEPOINT_PROBE(syscalls, sys_enter_write)
{ return mw_enter(args->fd, (u64)args->buf, args->count, 1); }
TRACEPOINT_PROBE(syscalls, sys_exit_write)
{ return mw_exit(args, args->ret, 1); }
TRACEPOINT_PROBE(syscalls, sys_enter_writev)
{ return mw_enter_vec(args->fd, (u64)args->vec, args->vlen, 1); }
TRACEPOINT_PROBE(syscalls, sys_exit_writev)
{ return mw_exit(args, args->ret, 1); }
TRACEPOINT_PROBE(syscalls, sys_enter_sendto)
{ return mw_enter(args->fd, (u64)args->buff, args->len, 1); }
TRACEPOINT_PROBE(syscalls, sys_exit_sendto)
{ return mw_exit(args, args->ret, 1); }
TRACEPOINT_PROBE(syscalls, sys_enter_sendmsg)
{ return mw_enter_msg(args->fd, (u64)args->msg, args->flags, 1); }
TRACEPOINT_PROBE(syscalls, sys_exit_sendmsg)
{ return mw_exit(args, args->ret, 1); }

TRACEPOINT_PROBE(syscalls, sys_enter_close)
{
    u64 id = bpf_get_current_pid_tgid();
    if ((id >> 32) != MW_TARGET_PID)
        return 0;
    u64 key = (id & 0xffffffff00000000ULL) | (u32)args->fd;
    struct mw_conn *c = conns.lookup(&key);
    if (!c)
        return 0;
    if (c->nslots)
        mw_count(C_NOREPLY_LOST, c->nslots);
    conns.delete(&key);
    return 0;
}
