/*
 * mongo_tls.h - TLS plaintext for the in-kernel wire-protocol decoder of
 *               mongo_wire.h: uprobes on the server's TLS library feed the
 *               plaintext it reads and writes into the same per-connection
 *               state machine as the syscall path.
 *               For Linux, uses BCC, eBPF. Uprobes and syscall tracepoints.
 *
 * Appended to mongo_wire.h by mongolatency.py / mongosnoop.py only when a TLS
 * library is hooked (--tls auto|on): without one, none of this is compiled or
 * attached, and the syscall path costs what it did.
 *
 * Libraries:
 *   MW_TLS_OPENSSL  OpenSSL's SSL_read, SSL_write (int return: bytes) and
 *                   SSL_read_ex, SSL_write_ex (return 1, bytes in *readbytes/
 *                   *written), in libssl or linked statically into the
 *                   server: uprobes at entry (buffer, length, SSL *) and
 *                   uretprobes at return. A call is keyed by its thread.
 *   MW_TLS_GO       Go's crypto/tls.(*Conn).Read and Write: a uprobe at entry
 *                   (register ABI: receiver in ax, the slice's pointer in bx,
 *                   its length in cx) and one at each RET instruction of the
 *                   function (found by disassembling it in user space), where
 *                   ax holds n. No uretprobes: they replace the return address
 *                   on the goroutine's stack, which Go moves when it grows.
 *                   A call is keyed by its goroutine (r14 holds the g pointer
 *                   in Go code), which may change threads during the call.
 *
 * The connection: the fd of the socket syscall made inside the call:
 * mongo_wire.h's own syscall programs (compiled with MW_TLS) hand it to
 * mw_tls_nested, which stops at once when no TLS call is in flight (tls_live),
 * and records it into the call in flight of the thread (OpenSSL) or of the
 * goroutine (Go: r14 of the user registers saved at the syscall). A call that
 * made none (its bytes were already decrypted in the library's buffer) takes
 * the fd last seen for its SSL * / *tls.Conn (tls_conn_fd).
 *
 * Memory BIOs (MW_TLS_BIO: OpenSSL with SSL_free found): a server that drives
 * OpenSSL through memory BIOs (asio's ssl::stream, as mongod does; Python's
 * asyncio transport) makes no socket syscall inside SSL_read/SSL_write: its
 * ciphertext moves in syscalls of its own, before SSL_read and after
 * SSL_write. A call with plaintext, no nested syscall and no fd remembered for
 * its SSL * keys the connection by the SSL * itself: tls_bio gives the SSL * a
 * number of its own (this CPU's next one, the CPU in its top 8 bits, claimed
 * by an atomic insert into tls_bio_owner; LLVM 14 has no fetch-and-add that
 * returns), and its state is conns[MW_TLS_FD | MW_TLS_SSL | number]: a key
 * space apart from fds (fd | MW_TLS_FD, fds being below 2^30) and from plain
 * fds. Requests and replies go through the same state machine. SSL_free (a
 * uprobe) forgets it: its conns entry (outstanding requests counted as
 * unanswered, C_NOREPLY_LOST, as at close), tls_bio, tls_bio_owner, and for
 * any SSL * the fd last seen for it (tls_conn_fd: an SSL *'s address comes
 * back for a later connection). Without SSL_free such calls stay counted
 * (T_NOFD): their state would never be freed.
 *
 * The tie to the socket (x86-64): after an SSL_write of an untied SSL *, the
 * thread's next read/write-family syscall (one chance; tls_live is held open
 * until then) ties it when it is a send (write, writev, sendto, sendmsg: the
 * saved orig_ax) on an fd whose first received bytes were TLS records
 * (tls_fds): asio writes the records SSL_write left in the BIO at once, on the
 * same thread, and so does asyncio (checked: every connection of
 * tests/wireserver.py --tls-bio memory tied). The tie costs nothing on the hot
 * path (the gate is open only between an untied SSL_write and the next send)
 * and is only a name: the state stays keyed by the SSL *; tls_bio_fd (key ->
 * fd, an LRU kept after SSL_free, as keys are not reused until a CPU's 2^22
 * numbers wrap) lets user space print the socket's fd for events and -c rows,
 * and (TLS on memory BIOs: socket not known) with the key's number when no
 * tie was made (a connection accepted before tracing, whose ClientHello was
 * not seen). The receive before SSL_read would tie it earlier, but every
 * receive of the process would then record its fd. T_BIO counts the
 * connections keyed by SSL * (also in T_DECODED, at their first plaintext
 * read: their socket's ClientHello counted C_TLS), T_TIED those tied. T_NOFD
 * is left with what still cannot be decoded: Go calls with no fd, OpenSSL
 * without SSL_free, or tls_bio full (MW_CONNS SSL objects at once).
 *
 * The state of a TLS connection on a socket is conns[fd | MW_TLS_FD]: a key
 * apart from the fd's own (its ciphertext, which the syscall path sees as
 * non-protocol bytes and counts once as a TLS connection, C_TLS). Requests
 * complete at the return of the read call that completed them (after
 * decryption); replies are timed at the entry of the write call that carries
 * their first bytes (before encryption): the server's time, without the
 * crypto of either side.
 *
 * Cost of memory BIOs (bpf_stats, through BPF_ENABLE_STATS; a pymongo ping
 * loop on 2 connections over TLS to tests/wireserver.py --tls-bio memory, 3
 * alternating 4 s runs with and without mongolatency.py, 2-CPU VM shared with
 * other test runs): asyncio calls SSL_read_ex twice per request (the second
 * returns WANT_READ), so a request runs 2 read entries (449 ns each), 3
 * returns (520 ns a call, the decoding included), 1 write entry (483 ns),
 * plus the syscall programs (recvfrom exit 617 ns, sendto 258 + 169 ns);
 * SSL_free 1.9 us once per connection. The return program costs no more than
 * on the socket path (630 ns a call on the threaded SSLSocket server, same
 * loop): the SSL * key is two hash lookups, the tie one syscall program run
 * per connection. Throughput with the probe: 0.72x and 0.80x of untraced
 * (~7,000-8,800 req/s) in two runs of this, mostly the 6 uprobe traps per
 * request (~10 us each here, probes/README.md), not the BPF time.
 *
 * Copyright 2025 mongoprobe authors. Licensed under the Apache License 2.0.
 */

#define MW_TLS_FD 0x80000000U   /* conns key of a TLS connection's plaintext */
#define MW_TLS_SSL 0x40000000U  /* with MW_TLS_FD: keyed by its SSL * (memory BIOs) */

/* counters of the TLS hooks (per-CPU array "tls_counts"; cumulative) */
#define T_DECODED   0           /* TLS connections whose plaintext was fed */
#define T_NOFD      1           /* TLS calls with plaintext and no connection to key */
#define T_CALLS     2           /* TLS read/write calls that returned bytes */
#define T_BIO       3           /* of T_DECODED: keyed by their SSL * (memory BIOs) */
#define T_TIED      4           /* of T_BIO: tied to their socket's fd */
#define T_MAX       5

#ifndef MW_TLS_CALLS_MAX
#define MW_TLS_CALLS_MAX 65536      /* calls in flight (threads, goroutines) */
#endif

/* one TLS read or write in flight, from its entry to its return */
struct mw_tcall {
    u64 buf;                    /* plaintext buffer */
    u64 len;                    /* its size (read) or the bytes to write */
    u64 conn;                   /* SSL * or *tls.Conn: the fd cache's key */
    u64 ts;                     /* entry time (replies are timed at write entry) */
    u64 nptr;                   /* SSL_*_ex: where the byte count is returned */
    u32 fd;                     /* of a socket syscall made inside the call */
    u8 has_fd;
    u8 live;
    u8 tx;
    u8 tie;                     /* returned: the thread's next send may tie conn */
};

/* LRU: an entry whose call never returned (a thread killed in it) ages out */
BPF_F_TABLE("lru_hash", u64, struct mw_tcall, tls_calls, MW_TLS_CALLS_MAX, 0);
BPF_F_TABLE("lru_hash", u64, u32, tls_conn_fd, MW_CONNS, 0);
/* the programs that frame what a TLS call returned, reached by tail call (tail
 * calls need programs of the caller's type: these are uprobes, mw_jmp's are
 * tracepoints): its first message (MW_JMP_RX1/TX1: one program per direction,
 * so that the decoder is compiled and verified once, not in every return
 * program, for a tail call's few ns beside a uprobe's microseconds), and its
 * 2nd..8th (MW_JMP_RX/TX, chaining themselves) */
BPF_PROG_ARRAY(mw_jmp_tls, 4);
#define MW_JMP_RX1 2
#define MW_JMP_TX1 3
BPF_PERCPU_ARRAY(tls_counts, u64, T_MAX);
/* TLS calls in flight in the target, all threads: the nested-syscall programs
 * stop at this when it is 0, so a server with a TLS library and no TLS traffic
 * pays one array read per read/write. (It may drift up when a call never
 * returns, which only keeps the gate open; it never drifts down.) */
BPF_ARRAY(tls_live, s64, 1);

#if defined(MW_TLS_BIO) && defined(__x86_64__)
#define MW_TLS_TIE 1
#define MW_REGS_ORIG_AX 120     /* offsetof(struct pt_regs, orig_ax): the syscall */
#define MW_NR_WRITE     1
#define MW_NR_WRITEV    20
#define MW_NR_SENDTO    44
#define MW_NR_SENDMSG   46
#endif

#ifdef MW_TLS_BIO
/* an SSL * whose calls make no socket syscall (memory BIOs): its plaintext
 * state is conns[key], key = MW_TLS_FD | MW_TLS_SSL | a number of its own */
struct mw_tbio {
    u32 key;
    u32 fd;                     /* its socket, once tied */
    u8 tied;
    u8 counted;                 /* counted in T_DECODED (first plaintext read) */
    u8 pad[2];
};
/* freed by SSL_free (with the conns entry); a plain hash: never evicted live */
BPF_HASH(tls_bio, u64, struct mw_tbio, MW_CONNS);
/* the ties (key -> socket fd) for user space to show the connection; kept
 * after SSL_free (keys are not reused) and aged out by the LRU */
BPF_F_TABLE("lru_hash", u32, u32, tls_bio_fd, MW_CONNS, 0);
/* key -> SSL *: who holds a key (claimed with an atomic insert; freed by SSL_free) */
BPF_HASH(tls_bio_owner, u32, u64, MW_CONNS);
BPF_PERCPU_ARRAY(tls_bio_next, u32, 1);   /* the last number this CPU gave */
#endif

static __always_inline void mw_tls_count(u32 idx)
{
    u64 *v = tls_counts.lookup(&idx);
    if (v)
        *v += 1;
}

static __always_inline int mw_tls_ours(void)
{
    return (bpf_get_current_pid_tgid() >> 32) == MW_TARGET_PID;
}

static __always_inline void mw_tls_enter(u64 key, u64 conn, u64 buf, u64 len, u64 nptr,
                                         int tx)
{
    struct mw_tcall t = {.buf = buf, .len = len, .conn = conn, .nptr = nptr,
                         .live = 1, .tx = tx};
    if (tx)
        t.ts = bpf_ktime_get_ns();
    struct mw_tcall *old = tls_calls.lookup(&key);
    /* a re-entry (Go's stack growth) is not a new call; a pending tie hands its
     * count of tls_live over to this call */
    if (!old || (!old->live && !old->tie)) {
        u32 z = 0;
        s64 *n = tls_live.lookup(&z);
        if (n)
            __sync_fetch_and_add(n, 1);
    }
    tls_calls.update(&key, &t);
}

#ifdef MW_TLS_TIE
/* the socket syscall that follows an untied memory-BIO SSL_write on its thread:
 * a send (write, writev, sendto, sendmsg: the saved orig_ax) on an fd whose
 * received bytes were TLS records (tls_fds) carries that SSL's ciphertext */
static __always_inline void mw_tls_tie(u64 ssl, u64 fd)
{
    u64 nr = ~0ULL;
    struct pt_regs *p = (struct pt_regs *)bpf_task_pt_regs(
        (struct task_struct *)bpf_get_current_task_btf());
    bpf_probe_read_kernel(&nr, sizeof(nr), (char *)p + MW_REGS_ORIG_AX);
    if (nr != MW_NR_WRITE && nr != MW_NR_WRITEV && nr != MW_NR_SENDTO &&
        nr != MW_NR_SENDMSG)
        return;
    u32 f = fd;
    if (!tls_fds.lookup(&f))
        return;
    struct mw_tbio *b = tls_bio.lookup(&ssl);
    if (!b || b->tied)
        return;
    b->tied = 1;
    b->fd = f;
    u32 k = b->key;
    tls_bio_fd.update(&k, &f);
    mw_tls_count(T_TIED);
}
#endif

/* a socket syscall of the target (called by mongo_wire.h's programs once the pid
 * is known to be the target's): its fd goes to the TLS call in flight, if any,
 * of this thread (OpenSSL) or goroutine (Go); after a memory-BIO SSL_write, it
 * may tie that SSL to its socket (mw_tls_tie) */
static __always_inline void mw_tls_nested(u64 fd)
{
    u32 z = 0;
    s64 *live = tls_live.lookup(&z);
    if (!live || *live <= 0)
        return;
    struct mw_tcall *t;
#ifdef MW_TLS_OPENSSL
    u64 tid = bpf_get_current_pid_tgid();
    t = tls_calls.lookup(&tid);
    if (t && t->live) {
        t->fd = fd;
        t->has_fd = 1;
    }
#ifdef MW_TLS_TIE
    else if (t && t->tie) {
        /* one chance: this syscall ties the SSL or nothing does (until its next
         * SSL_write) */
        t->tie = 0;
        __sync_fetch_and_add(live, -1);
        mw_tls_tie(t->conn, fd);
    }
#endif
#endif
#ifdef MW_TLS_GO
    /* r14 (the goroutine) of the registers saved at the syscall: struct
     * pt_regs begins r15, r14 */
    u64 g = 0;
    struct pt_regs *p = (struct pt_regs *)bpf_task_pt_regs(
        (struct task_struct *)bpf_get_current_task_btf());
    if (bpf_probe_read_kernel(&g, sizeof(g), (char *)p + 8) == 0 && g) {
        t = tls_calls.lookup(&g);
        if (t && t->live) {
            t->fd = fd;
            t->has_fd = 1;
        }
    }
#endif
}

/* close(fd) of the target (from mongo_wire.h's program): the plaintext state
 * goes too */
static __always_inline void mw_tls_close(u32 fd)
{
    u32 ck = fd | MW_TLS_FD;
    struct mw_conn *c = mw_conn_of(ck);
    if (c)
        mw_conn_free(ck, c);
}

/* the first plaintext of TLS connection fd: count it as decoded (and as a TLS
 * connection, if its ciphertext was not seen: C_TLS - T_DECODED is then
 * what was not decoded) */
static __always_inline void mw_tls_mark(u32 fd)
{
    u8 *v = tls_fds.lookup(&fd);
    if (v) {
        if (*v & 2)
            return;
        *v |= 2;
        mw_tls_count(T_DECODED);
        return;
    }
    u8 two = 2;
    if (tls_fds.insert(&fd, &two) == 0) {
        mw_count(C_TLS, 1);
        mw_tls_count(T_DECODED);
    }
}

/* mw_frame of mongo_wire.h, through mw_jmp_tls: the call's arguments go to the
 * thread's inflight entry (no syscall is in flight in it: a uprobe program may be
 * preempted, so a per-CPU slot could be another thread's by the tail call) */
static __always_inline int mw_tls_frame(void *ctx, struct mw_args *a, int tx)
{
    struct mw_args *m = mw_args_of_task(1);
    if (!m) {
        mw_count(C_DROPPED, 1);
        return 0;
    }
    __builtin_memcpy(m, a, sizeof(*m));
    m->live = 0;                /* not a syscall in flight */
    mw_jmp_tls.call(ctx, tx ? MW_JMP_TX1 : MW_JMP_RX1);
    /* the tail call failed (only before the tools fill mw_jmp_tls) */
    return 0;
}

#ifdef MW_TLS_BIO
/* the memory-BIO state of an SSL * whose calls make no socket syscall: its key,
 * given at its first such call (NULL when tls_bio is full) */
static __always_inline struct mw_tbio *mw_tls_bio(u64 ssl)
{
    struct mw_tbio *b = tls_bio.lookup(&ssl);
    if (b)
        return b;
    /* a number: this CPU's next one, with the CPU in its top 8 bits; taken
     * only if its insert into tls_bio_owner succeeds (a number still held
     * after 2^22 of one CPU, or raced for by a preempted program, is skipped) */
    u32 z = 0;
    u32 *next = tls_bio_next.lookup(&z);
    if (!next)
        return 0;
    u32 cpu = bpf_get_smp_processor_id() & 0xff;
    u32 key = 0;
    for (int i = 0; i < 4; i++) {
        if (key)
            break;
        u32 n = *next + 1;
        *next = n;
        u32 k = MW_TLS_FD | MW_TLS_SSL | (cpu << 22) | (n & 0x3fffff);
        if (tls_bio_owner.insert(&k, &ssl) == 0)
            key = k;
    }
    if (!key)
        return 0;
    struct mw_tbio nb = {.key = key};
    if (tls_bio.insert(&ssl, &nb) != 0) {
        tls_bio_owner.delete(&key);
        return 0;
    }
    tls_bio_fd.delete(&key);        /* a tie of an earlier holder of the number */
    return tls_bio.lookup(&ssl);
}
#endif

/* the call of key returned n bytes (ok: it succeeded; for the _ex calls n is
 * read from where the call returned it) */
static __always_inline int mw_tls_return(void *ctx, u64 key, s64 n, int ok)
{
    struct mw_tcall *t = tls_calls.lookup(&key);
    if (!t || !t->live)
        return 0;
    t->live = 0;
    u32 z = 0;
    s64 *live = tls_live.lookup(&z);
    if (live)
        __sync_fetch_and_add(live, -1);
    if (!ok)
        return 0;
    if (t->nptr) {
        u64 got = 0;
        if (mw_read_user(&got, sizeof(got), (void *)t->nptr) != 0)
            return 0;
        n = got;
    }
    if (n <= 0)
        return 0;
    mw_tls_count(T_CALLS);
    u32 fd;                     /* the conns key without MW_TLS_FD */
    u64 conn = t->conn;
#ifdef MW_TLS_BIO
    struct mw_tbio *b = 0;
#endif
    if (t->has_fd) {
        fd = t->fd;
        u32 *old = tls_conn_fd.lookup(&conn);
        if (!old || *old != fd)
            tls_conn_fd.update(&conn, &fd);
    } else {
        u32 *old = tls_conn_fd.lookup(&conn);
        if (old) {
            fd = *old;
        } else {
#ifdef MW_TLS_BIO
            b = mw_tls_bio(conn);
            if (!b) {
                mw_tls_count(T_NOFD);
                return 0;
            }
            fd = b->key & ~MW_TLS_FD;
#ifdef MW_TLS_TIE
            if (t->tx && !b->tied) {
                /* the send that follows may tie it: keep the nested-syscall
                 * gate open until then */
                t->tie = 1;
                if (live)
                    __sync_fetch_and_add(live, 1);
            }
#endif
#else
            mw_tls_count(T_NOFD);
            return 0;
#endif
        }
    }
    u32 ck = fd | MW_TLS_FD;
    struct mw_conn *c = mw_conn_of(ck);
    struct mw_args a = {.buf = t->buf, .cap = t->len, .ret = n, .fd = ck, .ts = t->ts};
    /* one branch per direction, each with what the verifier must see of c */
    if (t->tx) {
        if (!c)
            return 0;           /* writes matter only on connections that sent a request */
        return mw_tls_frame(ctx, &a, 1);
    }
#ifdef MW_TLS_BIO
    if (b) {
        if (!b->counted) {
            b->counted = 1;
            mw_tls_count(T_DECODED);
            mw_tls_count(T_BIO);
        }
    } else
#endif
    if (!c)
        mw_tls_mark(fd);
    a.now = bpf_ktime_get_ns();
    return mw_tls_frame(ctx, &a, 0);
}

/* what the return program left for its tail call, to frame from its start */
static __always_inline struct mw_args *mw_tls_first_args(void)
{
    struct mw_args *a = mw_args_of_task(0);
    if (a) {
        a->off = 0;
        a->iter = 0;
    }
    return a;
}

int mw_rx_frame_tls(struct pt_regs *ctx)
{
    struct mw_args *a = mw_tls_first_args();
    if (!a)
        return 0;
    struct mw_conn *c = mw_conn_of(a->fd);
    mw_rx_first(a, c);
    if (!mw_rx_step(a, c))
        mw_jmp_tls.call(ctx, MW_JMP_RX);   /* the rest of its messages, in the entry */
    return 0;
}

int mw_tx_frame_tls(struct pt_regs *ctx)
{
    struct mw_args *a = mw_tls_first_args();
    struct mw_conn *c = a ? mw_conn_of(a->fd) : 0;
    if (!c)
        return 0;
    mw_tx_first(ctx, a, c);
    if (!mw_tx_step(ctx, a, c))
        mw_jmp_tls.call(ctx, MW_JMP_TX);
    return 0;
}

int mw_rx_more_tls(struct pt_regs *ctx)
{
    struct mw_args *a = mw_args_of_task(0);
    if (!a)
        return 0;
    u32 fd = a->fd;
    struct mw_conn *c = mw_conn_of(fd);
    if (!mw_rx_step(a, c))
        mw_jmp_tls.call(ctx, MW_JMP_RX);
    return 0;
}

int mw_tx_more_tls(struct pt_regs *ctx)
{
    struct mw_args *a = mw_args_of_task(0);
    if (!a)
        return 0;
    u32 fd = a->fd;
    struct mw_conn *c = mw_conn_of(fd);
    if (!c)
        return 0;
    if (!mw_tx_step(ctx, a, c))
        mw_jmp_tls.call(ctx, MW_JMP_TX);
    return 0;
}

/* ---- the library's functions ----------------------------------------------- */

#ifdef MW_TLS_OPENSSL
/* int SSL_read(SSL *s, void *buf, int num); int SSL_write(SSL *s, const void
 * *buf, int num); int SSL_read_ex(SSL *s, void *buf, size_t num, size_t
 * *readbytes); int SSL_write_ex(SSL *s, const void *buf, size_t num, size_t
 * *written) */
int mw_ssl_read_enter(struct pt_regs *ctx)
{
    if (mw_tls_ours())
        mw_tls_enter(bpf_get_current_pid_tgid(), PT_REGS_PARM1(ctx), PT_REGS_PARM2(ctx),
                     (u32)PT_REGS_PARM3(ctx), 0, 0);
    return 0;
}

int mw_ssl_write_enter(struct pt_regs *ctx)
{
    if (mw_tls_ours())
        mw_tls_enter(bpf_get_current_pid_tgid(), PT_REGS_PARM1(ctx), PT_REGS_PARM2(ctx),
                     (u32)PT_REGS_PARM3(ctx), 0, 1);
    return 0;
}

int mw_ssl_read_ex_enter(struct pt_regs *ctx)
{
    if (mw_tls_ours())
        mw_tls_enter(bpf_get_current_pid_tgid(), PT_REGS_PARM1(ctx), PT_REGS_PARM2(ctx),
                     PT_REGS_PARM3(ctx), PT_REGS_PARM4(ctx), 0);
    return 0;
}

int mw_ssl_write_ex_enter(struct pt_regs *ctx)
{
    if (mw_tls_ours())
        mw_tls_enter(bpf_get_current_pid_tgid(), PT_REGS_PARM1(ctx), PT_REGS_PARM2(ctx),
                     PT_REGS_PARM3(ctx), PT_REGS_PARM4(ctx), 1);
    return 0;
}

/* SSL_read/SSL_write: > 0 is the byte count */
int mw_ssl_return(struct pt_regs *ctx)
{
    if (!mw_tls_ours())
        return 0;
    s32 ret = PT_REGS_RC(ctx);
    return mw_tls_return(ctx, bpf_get_current_pid_tgid(), ret, ret > 0);
}

/* SSL_read_ex/SSL_write_ex: 1 on success, the count where their 4th argument points */
int mw_ssl_ex_return(struct pt_regs *ctx)
{
    if (!mw_tls_ours())
        return 0;
    s32 ret = PT_REGS_RC(ctx);
    return mw_tls_return(ctx, bpf_get_current_pid_tgid(), 0, ret == 1);
}

/* void SSL_free(SSL *s): its address may come back for another connection, so
 * what is known of it goes: the fd last seen for it and, on memory BIOs, its
 * plaintext state (outstanding requests counted unanswered, as at close) */
int mw_ssl_free(struct pt_regs *ctx)
{
    if (!mw_tls_ours())
        return 0;
    u64 s = PT_REGS_PARM1(ctx);
    tls_conn_fd.delete(&s);
#ifdef MW_TLS_BIO
    struct mw_tbio *b = tls_bio.lookup(&s);
    if (!b)
        return 0;
    u32 ck = b->key;
    tls_bio.delete(&s);
    tls_bio_owner.delete(&ck);
    struct mw_conn *c = mw_conn_of(ck);
    if (c)
        mw_conn_free(ck, c);
#endif
    return 0;
}
#endif

#ifdef MW_TLS_GO
/* func (c *Conn) Read(b []byte) (int, error); func (c *Conn) Write(b []byte)
 * (int, error): c in ax, b's pointer in bx and length in cx; at RET n in ax */
int mw_go_read_enter(struct pt_regs *ctx)
{
    if (mw_tls_ours())
        mw_tls_enter(ctx->r14, ctx->ax, ctx->bx, ctx->cx, 0, 0);
    return 0;
}

int mw_go_write_enter(struct pt_regs *ctx)
{
    if (mw_tls_ours())
        mw_tls_enter(ctx->r14, ctx->ax, ctx->bx, ctx->cx, 0, 1);
    return 0;
}

int mw_go_return(struct pt_regs *ctx)
{
    if (!mw_tls_ours())
        return 0;
    s64 n = ctx->ax;
    return mw_tls_return(ctx, ctx->r14, n, n > 0);
}
#endif
