#!/usr/sbin/dtrace -s
/*
 * mongo_time.d	MongoDB wire-protocol server latency, per opcode, command and
 *		connection, printed at END.
 *		For illumos/SmartOS, FreeBSD, macOS and Linux (Oracle DTrace), uses DTrace.
 *
 * USAGE: dtrace -s mongo_time.d -p PID [NO_CONN] [-x dynvarsize=64m] [-x aggsize=80m]
 *        (until Ctrl-C or SIGTERM; mongoprobe latency --engine dtrace runs it)
 *   NO_CONN: 1 leaves out the latency per connection (mongoprobe latency does
 *   without --by conn); 0 or none keeps it.
 *
 * BUILD OUTPUT: generated from dtrace/mongo_wire.d.in by probes/mkbt.py. Do not
 * edit it: edit the template (its comments explain the decoding) and run
 * probes/mkbt.py; tests/test_probe_sources.py fails while the two differ.
 *
 * Output format, caveats, measured cost: docs/probes.md, "mongo_time.d, mongo_snoop.d".
 * The idea in 60 lines: dtrace/mongo_latency_simple.d.
 * CHECKED: Oracle DTrace 2.0 on Linux 6.18 (dtrace-utils 8a1264bf, x86-64).
 * NOT CHECKED on illumos/SmartOS, FreeBSD or macOS (docs/probes.md says what).
 * Derived from mongo_time.d by Max Bruning (Joyent, 2014).
 * Copyright the mongoprobe authors. Licensed under the Apache License, Version 2.0.
 */

#pragma D option quiet
#pragma D option zdefs
#pragma D option strsize=64
/*
 * No dynvarsize/bufsize pragma: a pragma overrides the command line's -x (checked
 * on Oracle DTrace: -x dynvarsize=64 did not shrink a pragma's 16m), so the sizes
 * are left to -x. mongoprobe's --max-connections N (default 10,000) passes
 * dynvarsize = max(16m, 4 KB x N) (a connection's state, its 4 request slots
 * included) and, for mongo_time.d with --by conn, aggsize = max(4m, 8 KB x N) (its
 * per-connection quantize, sum and max; 2 KB each lost updates at 10,000
 * connections), else 4m (NO_CONN: none per connection); bufsize=8m for snoop. At
 * 10,000 connections: -x dynvarsize=40m -x aggsize=80m, exact.
 */
/* the per-connection argument below may be left out (then 0) */
#pragma D option defaultargs

inline int OP_REPLY = 1;
inline int OP_UPDATE = 2001;
inline int OP_INSERT = 2002;
inline int OP_QUERY = 2004;
inline int OP_GET_MORE = 2005;
inline int OP_DELETE = 2006;
inline int OP_KILL_CURSORS = 2007;
inline int OP_COMPRESSED = 2012;
inline int OP_MSG = 2013;
inline int MAX_MESSAGE = 48000000;	/* the server's maxMessageSizeBytes */
inline int SLOTS = 4;			/* outstanding requests kept per connection */
inline int TLS_FD = 0x40000000;		/* fd | TLS_FD: a TLS connection's plaintext state */
/*
 * 1: no latency per connection (mongoprobe latency without --by conn). At 10,000
 * connections those three aggregations are most of the work at END: DTrace's
 * consumer spent 25-50 s of CPU on them before printing a line.
 */
inline int NO_CONN = $1;

/*
 * Per connection, keyed [pid, fd] (probes/README.md): declared here because the
 * D compiler wants every variable declared or assigned before it is read.
 * A zero value frees a dynamic variable. The pid is written $target: every
 * clause keyed so runs for the traced process only, and the builtin pid is a
 * function call at each use (Oracle DTrace), the macro a constant.
 */
int known[int, int];		/* the fd has shown a valid request header */
int64_t rxrem[int, int];	/* bytes of the incoming message still to come */
int64_t rxpos[int, int];	/* bytes of it received so far */
int rxneed[int, int];		/* its command name is still to be read */
int rxop[int, int];		/* its opCode, requestID, messageLength, moreToCome */
int rxrid[int, int];
int64_t rxlen[int, int];
int rxmtc[int, int];
string rxcmd[int, int];		/* its command name */
string opnames[int];		/* [opCode]: its name (BEGIN fills it; see OPNAME); [0]: "[compressed]" */
int64_t head[int, int];		/* ring of SLOTS outstanding requests: head - tail */
int64_t tail[int, int];
int slot_rid[int, int, int];	/* [pid, fd, n % SLOTS]: requestID, time, ... */
uint64_t slot_ts[int, int, int];
int slot_op[int, int, int];
int64_t slot_len[int, int, int];
string slot_cmd[int, int, int];
int64_t txrem[int, int];	/* bytes of the outgoing message still to come */
int stream[int, int];		/* exhaust: requestID of the last moreToCome reply */
/* the last complete request that expected no reply (C1n): 2^32 | its requestID
 * (0: none, or already answered; the 2^32 tells a requestID 0 from none), and its
 * command name: a server may answer it anyway (P3n) */
int64_t nrid[int, int];
string nrcmd[int, int];
int64_t txhave[int, int];	/* 1-39 of a reply's first 40 bytes split across sends, */
uint64_t txh0[int, int];	/* kept as five little-endian words */
uint64_t txh1[int, int];
uint64_t txh2[int, int];
uint64_t txh3[int, int];
uint64_t txh4[int, int];
uint64_t txts[int, int];	/* and the time of that first send */
int tlsfd[int, int];		/* 1: its bytes are TLS records; 2: its plaintext was decoded */

/* Clause-local variables, typed once (an untyped "this->x = 0" is an int). */
this int fd;
this int64_t ret;		/* bytes the syscall moved */
this int64_t n;			/* of them, bytes in the first buffer (iovec) */
this uint64_t buf;		/* user address of the first buffer */
this int64_t off;		/* offset of the next header in the buffer */
this int64_t rem;
this int stop;
this int it;			/* this unrolled round has a header to read */
this int64_t len;
this int rid;
this int rto;
this int op;
this int o;
this int valid;
this int fin;			/* the message is complete */
this int want;			/* read the command name from this->b */
this int rop;			/* ... of a message of this opCode */
this uint64_t na;		/* user address of the command name (0: none) */
this uint64_t b;		/* user address of message offset 16 (the body) */
this uint64_t k0;
this int kind;
this string ns;			/* OP_QUERY namespace */
this int64_t nslen;
this int cmdns;
this int nr;			/* no reply expected */
this int64_t hd;
this int64_t tl;
this int64_t k;
this int64_t s;
this int mtc;
this uint64_t ts;
this int64_t lat;
this int64_t have;
this uint64_t *w;		/* a reply's first 40 bytes, gathered (alloca) */
this uint64_t w0;		/* ... as five words */
this uint64_t w1;
this uint64_t w2;
this uint64_t w3;
this uint64_t w4;
this uint8_t *p;		/* bytes copied in (alloca): a header, a body's first */
this uint64_t q;		/* ... and a little-endian word of them */
this int64_t got;		/* of them, bytes known */
this int cut;			/* a send ends inside a reply's first 40 bytes */
this int sp;			/* the reply was gathered: its failure test is done */
this string opname;
this int64_t err;		/* the reply failed: its code, -1 (none); 0: it did not */
this int64_t e;			/* message offset of its first document's first element */
this int64_t ep;		/* of the element after ok: 0, or of $err */
this int64_t es;
this uint64_t ey;
this uint64_t et;
this int64_t vs;
this uint64_t v;
this int32_t ec;
this uint32_t y;		/* a receive's first bytes: a TLS record header? */
this int tls;
this int rx_go;			/* this receive is framed (R0) */
this int tx_go;			/* this send is framed (T0) */

BEGIN
{
	/* Counters print even when zero (printa skips empty aggregations). */
	@requests = sum(0); @replies = sum(0); @stream = sum(0); @noreply = sum(0);
	@unmatched = sum(0); @without = sum(0); @malformed = sum(0); @answered = sum(0);
	@tls_conns = sum(0);
	opnames[OP_MSG] = "OP_MSG"; opnames[OP_QUERY] = "OP_QUERY";
	opnames[OP_COMPRESSED] = "OP_COMPRESSED"; opnames[OP_INSERT] = "OP_INSERT";
	opnames[OP_UPDATE] = "OP_UPDATE"; opnames[OP_DELETE] = "OP_DELETE";
	opnames[OP_GET_MORE] = "OP_GET_MORE"; opnames[OP_KILL_CURSORS] = "OP_KILL_CURSORS";
	opnames[OP_REPLY] = "OP_REPLY"; opnames[0] = "[compressed]";
	epoch = timestamp;
	/* maps DTrace's timestamp to the wall clock (walltimestamp is ns since the epoch) */
	printf("# clock timestamp_ns=%d walltimestamp_ns=%d\n", timestamp, walltimestamp);
	printf("Tracing MongoDB wire protocol of PID %d (read/write/readv/writev/recv*/send*)... Hit Ctrl-C to end.\n",
	    $target);
}





/* Where a message's bytes come from: the receive syscalls' returns and, in the
 * _tls scripts, the returns of OpenSSL's reads (their plaintext). */


/* The opCode's name: a lookup (BEGIN fills opnames), not a ternary over nine
 * string constants, each a copy with fault checks of its own that the verifier
 * walks at every use. Every opCode that gets here was checked to be a request's
 * or a reply's. */

/* A MsgHeader at this->off, read as two words (messageLength, requestID;
 * responseTo, opCode): one copy in, two reads of it, each checked (see B1). */






/* ---- receives: remember fd and buffer (first iovec) at entry ----------------- */

syscall::read:entry, syscall::read_nocancel:entry,
syscall::recv:entry, syscall::recvfrom:entry, syscall::recvfrom_nocancel:entry
/pid == $target/
{
	self->rx_fd = (int)arg0;
	self->rx_buf = (uint64_t)arg1;
	self->rx_cap = (int64_t)arg2;
	self->rx_armed = 1;
}

syscall::readv:entry, syscall::readv_nocancel:entry
/pid == $target && (int)arg2 > 0/
{
	/* struct iovec { void *iov_base; size_t iov_len; } (LP64) */
	self->rx_fd = (int)arg0;
	self->rx_buf = *(uint64_t *)copyin(arg1, 8);
	self->rx_cap = *(int64_t *)copyin(arg1 + 8, 8);
	self->rx_armed = 1;
}

syscall::recvmsg:entry, syscall::recvmsg_nocancel:entry
/pid == $target/
{
	/* struct msghdr (LP64): msg_iov @16, msg_iovlen @24 */
	self->rx_iov = *(uint64_t *)copyin(arg1 + 16, 8);
	self->rx_iovlen = *(int64_t *)copyin(arg1 + 24, 8);
	self->rx_fd = (int)arg0;
}

syscall::recvmsg:entry, syscall::recvmsg_nocancel:entry
/pid == $target && self->rx_iovlen > 0 && self->rx_iov != 0/
{
	self->rx_buf = *(uint64_t *)copyin(self->rx_iov, 8);
	self->rx_cap = *(int64_t *)copyin(self->rx_iov + 8, 8);
	self->rx_armed = 1;
}

syscall::recvmsg:entry, syscall::recvmsg_nocancel:entry
/pid == $target/
{
	self->rx_iov = 0;
	self->rx_iovlen = 0;
}

/* ---- receives at return: framing, headers, command names ---------------------- */

/*
 * R0: every this-> variable a later clause reads is set here or before it in
 * the same firing (clause-local variables are undefined until assigned);
 * this->rx_go guards the rest of this firing. A clause-local flag, not a
 * thread-local one: each of the hundred-odd predicates below then reads it
 * from scratch memory instead of looking it up in the dynamic-variable space,
 * on every receive of every process (Oracle DTrace: a function call each).
 */
syscall::read:return, syscall::read_nocancel:return,
syscall::recv:return, syscall::recvfrom:return, syscall::recvfrom_nocancel:return,
syscall::readv:return, syscall::readv_nocancel:return,
syscall::recvmsg:return, syscall::recvmsg_nocancel:return
{
	this->rx_go = 0;
}

syscall::read:return, syscall::read_nocancel:return,
syscall::recv:return, syscall::recvfrom:return, syscall::recvfrom_nocancel:return,
syscall::readv:return, syscall::readv_nocancel:return,
syscall::recvmsg:return, syscall::recvmsg_nocancel:return
/self->rx_armed/
{
	this->ret = (int64_t)arg1;	/* arg0 and arg1 both hold the return value */
	this->fd = self->rx_fd;
	this->buf = self->rx_buf;
	/* bytes that landed in the first buffer: only there can a header be read */
	this->n = this->ret < self->rx_cap ? this->ret : self->rx_cap;
	this->rem = rxrem[$target, this->fd];
	this->off = 0;
	this->stop = 0;
	this->it = 0;
	this->fin = 0;
	this->want = 0;
	this->kind = 0;
	this->cmdns = 0;
	this->rx_go = this->ret > 0;
}

/*
 * R0t: a connection whose bytes are TLS records (handshake 0x16 or application
 * data 0x17, version 3.x; OpenSSL reads a record's 5-byte header alone, Go's
 * crypto/tls whole records) is not protocol traffic: counted once (@tls_conns,
 * "tls:" at END), as the Linux probes count it. Never on a connection that
 * has shown a request header.
 */
syscall::read:return, syscall::read_nocancel:return,
syscall::recv:return, syscall::recvfrom:return, syscall::recvfrom_nocancel:return,
syscall::readv:return, syscall::readv_nocancel:return,
syscall::recvmsg:return, syscall::recvmsg_nocancel:return
/this->rx_go && ((this->ret == 5 && this->n == 5) || this->n >= 16) && !known[$target, this->fd] &&
    tlsfd[$target, this->fd] == 0/
{
	this->y = *(uint32_t *)copyin(this->buf, 4);
	this->tls = ((this->y & 0xff) == 0x16 || (this->y & 0xff) == 0x17) &&
	    ((this->y >> 8) & 0xff) == 3 && ((this->y >> 16) & 0xff) <= 4;
	@tls_conns = sum(this->tls);
	tlsfd[$target, this->fd] = this->tls;
}

/* R1: the buffer continues a message whose header came earlier. */
syscall::read:return, syscall::read_nocancel:return,
syscall::recv:return, syscall::recvfrom:return, syscall::recvfrom_nocancel:return,
syscall::readv:return, syscall::readv_nocancel:return,
syscall::recvmsg:return, syscall::recvmsg_nocancel:return
/this->rx_go && this->rem > 0/
{
	this->off = this->rem < this->ret ? this->rem : this->ret;
	/* mongod's pattern: the header came alone, the body (offset 16) starts here */
	this->want = rxneed[$target, this->fd] && rxpos[$target, this->fd] == 16 && this->n >= 16;
	this->rop = rxop[$target, this->fd];
	this->b = this->buf;
	this->fin = this->off == this->rem;
	rxrem[$target, this->fd] = this->rem - this->off;
	rxpos[$target, this->fd] = this->fin ? 0 : rxpos[$target, this->fd] + this->off;
}
/* B1: the command name from the body at this->b (message offset 16): B1-B3
 * find where it starts (this->na, 0: nowhere), B4 reads it. OP_MSG: flagBits
 * @0 (bit 1: moreToCome), first section kind @4; kind 0: the body document,
 * its first key (the command) @10. The first 9 bytes are read at once: each
 * read of user memory adds fault checks, and the verifier walks DTrace's error
 * path once per check (docs/probes.md, D, "Cost"). */
syscall::read:return, syscall::read_nocancel:return,
syscall::recv:return, syscall::recvfrom:return, syscall::recvfrom_nocancel:return,
syscall::readv:return, syscall::readv_nocancel:return,
syscall::recvmsg:return, syscall::recvmsg_nocancel:return
/this->rx_go && this->want/
{
	this->na = 0;
}

syscall::read:return, syscall::read_nocancel:return,
syscall::recv:return, syscall::recvfrom:return, syscall::recvfrom_nocancel:return,
syscall::readv:return, syscall::readv_nocancel:return,
syscall::recvmsg:return, syscall::recvmsg_nocancel:return
/this->rx_go && this->want && this->rop == OP_MSG/
{
	this->p = (uint8_t *)copyin(this->b, 9);
	this->q = *(uint64_t *)this->p;
	this->kind = (this->q >> 32) & 0xff;
	rxmtc[$target, this->fd] = (this->q & 2) != 0;
	this->na = this->kind == 0 ? this->b + 10 : 0;
	/* where a kind-1 section (its int32 size @5) ends: alloca'd bytes last
	 * only to the end of the clause */
	this->k0 = this->b + 5 + (int32_t)(*(uint64_t *)(this->p + 1) >> 32);
}

/* B2: a kind-1 document sequence first: the body follows it. */
syscall::read:return, syscall::read_nocancel:return,
syscall::recv:return, syscall::recvfrom:return, syscall::recvfrom_nocancel:return,
syscall::readv:return, syscall::readv_nocancel:return,
syscall::recvmsg:return, syscall::recvmsg_nocancel:return
/this->rx_go && this->want && this->rop == OP_MSG && this->kind == 1/
{
	this->na = *(uint8_t *)copyin(this->k0, 1) == 0 ? this->k0 + 6 : 0;
}

/* B3: OP_QUERY: flags @0, namespace @4; on "db.$cmd" (its last 5 bytes read as
 * one word) the query's first key, at 4 + nslen + 1 (nul) + 8 (skip, return) +
 * 4 (size) + 1 (type); else "find". */
syscall::read:return, syscall::read_nocancel:return,
syscall::recv:return, syscall::recvfrom:return, syscall::recvfrom_nocancel:return,
syscall::readv:return, syscall::readv_nocancel:return,
syscall::recvmsg:return, syscall::recvmsg_nocancel:return
/this->rx_go && this->want && this->rop == OP_QUERY/
{
	this->ns = copyinstr(this->b + 4, 63);
	this->nslen = strlen(this->ns);
	this->cmdns = this->nslen >= 5 &&
	    (*(uint64_t *)copyin(this->b + this->nslen - 1, 8) & 0xffffffffff) == 0x646d63242e;
	this->na = this->cmdns ? this->b + this->nslen + 18 : 0;
	rxcmd[$target, this->fd] = "find";
}

/* old drivers wrap the command: {$query: {cmd: ...}}: "$query" and its nul,
 * then 4 + 1 bytes on */
syscall::read:return, syscall::read_nocancel:return,
syscall::recv:return, syscall::recvfrom:return, syscall::recvfrom_nocancel:return,
syscall::readv:return, syscall::readv_nocancel:return,
syscall::recvmsg:return, syscall::recvmsg_nocancel:return
/this->rx_go && this->want && this->rop == OP_QUERY && this->cmdns/
{
	this->na = (*(uint64_t *)copyin(this->na, 8) & 0xffffffffffffff) == 0x797265757124 ?
	    this->na + 12 : this->na;
}

/* B4: the name. */
syscall::read:return, syscall::read_nocancel:return,
syscall::recv:return, syscall::recvfrom:return, syscall::recvfrom_nocancel:return,
syscall::readv:return, syscall::readv_nocancel:return,
syscall::recvmsg:return, syscall::recvmsg_nocancel:return
/this->rx_go && this->want && this->na != 0/
{
	rxcmd[$target, this->fd] = copyinstr(this->na, 32);
}

syscall::read:return, syscall::read_nocancel:return,
syscall::recv:return, syscall::recvfrom:return, syscall::recvfrom_nocancel:return,
syscall::readv:return, syscall::readv_nocancel:return,
syscall::recvmsg:return, syscall::recvmsg_nocancel:return
/this->rx_go && this->want/
{
	rxneed[$target, this->fd] = 0;
}
/* C1: the request is complete: count it. moreToCome and the legacy insert,
 * update, delete and killCursors expect no reply. */
syscall::read:return, syscall::read_nocancel:return,
syscall::recv:return, syscall::recvfrom:return, syscall::recvfrom_nocancel:return,
syscall::readv:return, syscall::readv_nocancel:return,
syscall::recvmsg:return, syscall::recvmsg_nocancel:return
/this->rx_go && this->fin/
{
	this->o = rxop[$target, this->fd];
	this->opname = opnames[this->o];
	this->nr = rxmtc[$target, this->fd] || this->o == OP_INSERT || this->o == OP_UPDATE ||
	    this->o == OP_DELETE || this->o == OP_KILL_CURSORS;
	@requests = sum(1);
	@noreply = sum(this->nr);
	@requests_by_op[this->opname] = count();
	@requests_by_cmd[rxcmd[$target, this->fd]] = count();
	rxneed[$target, this->fd] = 0;
	this->hd = head[$target, this->fd];
}

/* C1n: it expects no reply: its requestID and name are remembered, in case the
 * server answers it anyway (FerretDB answers the endSessions the Node.js driver
 * sends with moreToCome as it closes): P3n counts that reply as answered_no_reply,
 * not unmatched. A store of values already read: no copyin. Cost at start (one
 * day's 2-core machine, Oracle DTrace 8a1264bf): with P3n, mongo_time.d verifies
 * 2.15 million instructions instead of 2.08 (3.6% more; the name's copy about 30
 * thousand of the 75, nine unrolled copies of this clause in each receive program). */
syscall::read:return, syscall::read_nocancel:return,
syscall::recv:return, syscall::recvfrom:return, syscall::recvfrom_nocancel:return,
syscall::readv:return, syscall::readv_nocancel:return,
syscall::recvmsg:return, syscall::recvmsg_nocancel:return
/this->rx_go && this->fin && this->nr/
{
	nrid[$target, this->fd] = 0x100000000 | (uint32_t)rxrid[$target, this->fd];
	nrcmd[$target, this->fd] = rxcmd[$target, this->fd];
}

/* C2: the ring is full: the oldest request never got its reply (it stays
 * counted in @without, which every request taking a slot adds to). */
syscall::read:return, syscall::read_nocancel:return,
syscall::recv:return, syscall::recvfrom:return, syscall::recvfrom_nocancel:return,
syscall::readv:return, syscall::readv_nocancel:return,
syscall::recvmsg:return, syscall::recvmsg_nocancel:return
/this->rx_go && this->fin && !this->nr && this->hd - tail[$target, this->fd] >= SLOTS/
{
	tail[$target, this->fd] = tail[$target, this->fd] + 1;
}

/* C3: it expects a reply: take a slot, start its clock. */
syscall::read:return, syscall::read_nocancel:return,
syscall::recv:return, syscall::recvfrom:return, syscall::recvfrom_nocancel:return,
syscall::readv:return, syscall::readv_nocancel:return,
syscall::recvmsg:return, syscall::recvmsg_nocancel:return
/this->rx_go && this->fin && !this->nr/
{
	this->s = this->hd % SLOTS;
	slot_rid[$target, this->fd, this->s] = rxrid[$target, this->fd];
	slot_ts[$target, this->fd, this->s] = timestamp;
	slot_op[$target, this->fd, this->s] = this->o;
	slot_len[$target, this->fd, this->s] = rxlen[$target, this->fd];
	slot_cmd[$target, this->fd, this->s] = rxcmd[$target, this->fd];
	head[$target, this->fd] = this->hd + 1;
	@without = sum(1);
}

syscall::read:return, syscall::read_nocancel:return,
syscall::recv:return, syscall::recvfrom:return, syscall::recvfrom_nocancel:return,
syscall::readv:return, syscall::readv_nocancel:return,
syscall::recvmsg:return, syscall::recvmsg_nocancel:return
/this->rx_go/
{
	this->want = 0;
	this->fin = 0;
}

/* R2: new messages, each starting with a MsgHeader: at most 8 per receive
 * (D has no loops: the same clauses, unrolled). */
/* M: a new message at this->off, starting with a MsgHeader. */
syscall::read:return, syscall::read_nocancel:return,
syscall::recv:return, syscall::recvfrom:return, syscall::recvfrom_nocancel:return,
syscall::readv:return, syscall::readv_nocancel:return,
syscall::recvmsg:return, syscall::recvmsg_nocancel:return
/this->rx_go/
{
	this->it = !this->stop && this->off + 16 <= this->n;
}

syscall::read:return, syscall::read_nocancel:return,
syscall::recv:return, syscall::recvfrom:return, syscall::recvfrom_nocancel:return,
syscall::readv:return, syscall::readv_nocancel:return,
syscall::recvmsg:return, syscall::recvmsg_nocancel:return
/this->rx_go && this->it/
{
	this->p = (uint8_t *)copyin(this->buf + this->off, 16);
	this->q = *(uint64_t *)this->p;
	this->len = (int32_t)(this->q & 0xffffffff);
	this->rid = (int32_t)(this->q >> 32);
	this->q = *(uint64_t *)(this->p + 8);
	this->rto = (int32_t)(this->q & 0xffffffff);
	this->op = (int32_t)(this->q >> 32);
	this->valid = this->len >= 16 && this->len <= MAX_MESSAGE &&
	    (this->op == OP_MSG || this->op == OP_QUERY || this->op == OP_COMPRESSED ||
	    this->op == OP_INSERT || this->op == OP_UPDATE || this->op == OP_DELETE ||
	    this->op == OP_GET_MORE || this->op == OP_KILL_CURSORS);
}

/* not a request header: on a protocol connection it is malformed (framing is
 * reset), elsewhere (a log or data file of the same pid) it is not ours */
syscall::read:return, syscall::read_nocancel:return,
syscall::recv:return, syscall::recvfrom:return, syscall::recvfrom_nocancel:return,
syscall::readv:return, syscall::readv_nocancel:return,
syscall::recvmsg:return, syscall::recvmsg_nocancel:return
/this->rx_go && this->it && !this->valid/
{
	@malformed = sum(known[$target, this->fd] ? 1 : 0);
	rxrem[$target, this->fd] = 0; rxpos[$target, this->fd] = 0; rxneed[$target, this->fd] = 0;
	this->off = this->ret;
	this->stop = 1;
}

syscall::read:return, syscall::read_nocancel:return,
syscall::recv:return, syscall::recvfrom:return, syscall::recvfrom_nocancel:return,
syscall::readv:return, syscall::readv_nocancel:return,
syscall::recvmsg:return, syscall::recvmsg_nocancel:return
/this->rx_go && this->it && this->valid/
{
	known[$target, this->fd] = 1;
	rxop[$target, this->fd] = this->op;
	rxrid[$target, this->fd] = this->rid;
	rxlen[$target, this->fd] = this->len;
	rxmtc[$target, this->fd] = 0;
	/* until the body names it: the opCode's name, "[compressed]" for OP_COMPRESSED */
	rxcmd[$target, this->fd] = opnames[this->op == OP_COMPRESSED ? 0 : this->op];
	/* the header alone (mongod reads 16 bytes first): the name comes next */
	this->want = this->n - this->off > 16;
	this->rop = this->op;
	this->b = this->buf + this->off + 16;
	rxneed[$target, this->fd] = !this->want;
	this->fin = this->len <= this->ret - this->off;
	rxrem[$target, this->fd] = this->fin ? 0 : this->len - (this->ret - this->off);
	rxpos[$target, this->fd] = this->fin ? 0 : this->ret - this->off;
	this->off = this->fin ? this->off + this->len : this->ret;
}
/* B1: the command name from the body at this->b (message offset 16): B1-B3
 * find where it starts (this->na, 0: nowhere), B4 reads it. OP_MSG: flagBits
 * @0 (bit 1: moreToCome), first section kind @4; kind 0: the body document,
 * its first key (the command) @10. The first 9 bytes are read at once: each
 * read of user memory adds fault checks, and the verifier walks DTrace's error
 * path once per check (docs/probes.md, D, "Cost"). */
syscall::read:return, syscall::read_nocancel:return,
syscall::recv:return, syscall::recvfrom:return, syscall::recvfrom_nocancel:return,
syscall::readv:return, syscall::readv_nocancel:return,
syscall::recvmsg:return, syscall::recvmsg_nocancel:return
/this->rx_go && this->want/
{
	this->na = 0;
}

syscall::read:return, syscall::read_nocancel:return,
syscall::recv:return, syscall::recvfrom:return, syscall::recvfrom_nocancel:return,
syscall::readv:return, syscall::readv_nocancel:return,
syscall::recvmsg:return, syscall::recvmsg_nocancel:return
/this->rx_go && this->want && this->rop == OP_MSG/
{
	this->p = (uint8_t *)copyin(this->b, 9);
	this->q = *(uint64_t *)this->p;
	this->kind = (this->q >> 32) & 0xff;
	rxmtc[$target, this->fd] = (this->q & 2) != 0;
	this->na = this->kind == 0 ? this->b + 10 : 0;
	/* where a kind-1 section (its int32 size @5) ends: alloca'd bytes last
	 * only to the end of the clause */
	this->k0 = this->b + 5 + (int32_t)(*(uint64_t *)(this->p + 1) >> 32);
}

/* B2: a kind-1 document sequence first: the body follows it. */
syscall::read:return, syscall::read_nocancel:return,
syscall::recv:return, syscall::recvfrom:return, syscall::recvfrom_nocancel:return,
syscall::readv:return, syscall::readv_nocancel:return,
syscall::recvmsg:return, syscall::recvmsg_nocancel:return
/this->rx_go && this->want && this->rop == OP_MSG && this->kind == 1/
{
	this->na = *(uint8_t *)copyin(this->k0, 1) == 0 ? this->k0 + 6 : 0;
}

/* B3: OP_QUERY: flags @0, namespace @4; on "db.$cmd" (its last 5 bytes read as
 * one word) the query's first key, at 4 + nslen + 1 (nul) + 8 (skip, return) +
 * 4 (size) + 1 (type); else "find". */
syscall::read:return, syscall::read_nocancel:return,
syscall::recv:return, syscall::recvfrom:return, syscall::recvfrom_nocancel:return,
syscall::readv:return, syscall::readv_nocancel:return,
syscall::recvmsg:return, syscall::recvmsg_nocancel:return
/this->rx_go && this->want && this->rop == OP_QUERY/
{
	this->ns = copyinstr(this->b + 4, 63);
	this->nslen = strlen(this->ns);
	this->cmdns = this->nslen >= 5 &&
	    (*(uint64_t *)copyin(this->b + this->nslen - 1, 8) & 0xffffffffff) == 0x646d63242e;
	this->na = this->cmdns ? this->b + this->nslen + 18 : 0;
	rxcmd[$target, this->fd] = "find";
}

/* old drivers wrap the command: {$query: {cmd: ...}}: "$query" and its nul,
 * then 4 + 1 bytes on */
syscall::read:return, syscall::read_nocancel:return,
syscall::recv:return, syscall::recvfrom:return, syscall::recvfrom_nocancel:return,
syscall::readv:return, syscall::readv_nocancel:return,
syscall::recvmsg:return, syscall::recvmsg_nocancel:return
/this->rx_go && this->want && this->rop == OP_QUERY && this->cmdns/
{
	this->na = (*(uint64_t *)copyin(this->na, 8) & 0xffffffffffffff) == 0x797265757124 ?
	    this->na + 12 : this->na;
}

/* B4: the name. */
syscall::read:return, syscall::read_nocancel:return,
syscall::recv:return, syscall::recvfrom:return, syscall::recvfrom_nocancel:return,
syscall::readv:return, syscall::readv_nocancel:return,
syscall::recvmsg:return, syscall::recvmsg_nocancel:return
/this->rx_go && this->want && this->na != 0/
{
	rxcmd[$target, this->fd] = copyinstr(this->na, 32);
}

syscall::read:return, syscall::read_nocancel:return,
syscall::recv:return, syscall::recvfrom:return, syscall::recvfrom_nocancel:return,
syscall::readv:return, syscall::readv_nocancel:return,
syscall::recvmsg:return, syscall::recvmsg_nocancel:return
/this->rx_go && this->want/
{
	rxneed[$target, this->fd] = 0;
}
/* C1: the request is complete: count it. moreToCome and the legacy insert,
 * update, delete and killCursors expect no reply. */
syscall::read:return, syscall::read_nocancel:return,
syscall::recv:return, syscall::recvfrom:return, syscall::recvfrom_nocancel:return,
syscall::readv:return, syscall::readv_nocancel:return,
syscall::recvmsg:return, syscall::recvmsg_nocancel:return
/this->rx_go && this->fin/
{
	this->o = rxop[$target, this->fd];
	this->opname = opnames[this->o];
	this->nr = rxmtc[$target, this->fd] || this->o == OP_INSERT || this->o == OP_UPDATE ||
	    this->o == OP_DELETE || this->o == OP_KILL_CURSORS;
	@requests = sum(1);
	@noreply = sum(this->nr);
	@requests_by_op[this->opname] = count();
	@requests_by_cmd[rxcmd[$target, this->fd]] = count();
	rxneed[$target, this->fd] = 0;
	this->hd = head[$target, this->fd];
}

/* C1n: it expects no reply: its requestID and name are remembered, in case the
 * server answers it anyway (FerretDB answers the endSessions the Node.js driver
 * sends with moreToCome as it closes): P3n counts that reply as answered_no_reply,
 * not unmatched. A store of values already read: no copyin. Cost at start (one
 * day's 2-core machine, Oracle DTrace 8a1264bf): with P3n, mongo_time.d verifies
 * 2.15 million instructions instead of 2.08 (3.6% more; the name's copy about 30
 * thousand of the 75, nine unrolled copies of this clause in each receive program). */
syscall::read:return, syscall::read_nocancel:return,
syscall::recv:return, syscall::recvfrom:return, syscall::recvfrom_nocancel:return,
syscall::readv:return, syscall::readv_nocancel:return,
syscall::recvmsg:return, syscall::recvmsg_nocancel:return
/this->rx_go && this->fin && this->nr/
{
	nrid[$target, this->fd] = 0x100000000 | (uint32_t)rxrid[$target, this->fd];
	nrcmd[$target, this->fd] = rxcmd[$target, this->fd];
}

/* C2: the ring is full: the oldest request never got its reply (it stays
 * counted in @without, which every request taking a slot adds to). */
syscall::read:return, syscall::read_nocancel:return,
syscall::recv:return, syscall::recvfrom:return, syscall::recvfrom_nocancel:return,
syscall::readv:return, syscall::readv_nocancel:return,
syscall::recvmsg:return, syscall::recvmsg_nocancel:return
/this->rx_go && this->fin && !this->nr && this->hd - tail[$target, this->fd] >= SLOTS/
{
	tail[$target, this->fd] = tail[$target, this->fd] + 1;
}

/* C3: it expects a reply: take a slot, start its clock. */
syscall::read:return, syscall::read_nocancel:return,
syscall::recv:return, syscall::recvfrom:return, syscall::recvfrom_nocancel:return,
syscall::readv:return, syscall::readv_nocancel:return,
syscall::recvmsg:return, syscall::recvmsg_nocancel:return
/this->rx_go && this->fin && !this->nr/
{
	this->s = this->hd % SLOTS;
	slot_rid[$target, this->fd, this->s] = rxrid[$target, this->fd];
	slot_ts[$target, this->fd, this->s] = timestamp;
	slot_op[$target, this->fd, this->s] = this->o;
	slot_len[$target, this->fd, this->s] = rxlen[$target, this->fd];
	slot_cmd[$target, this->fd, this->s] = rxcmd[$target, this->fd];
	head[$target, this->fd] = this->hd + 1;
	@without = sum(1);
}

syscall::read:return, syscall::read_nocancel:return,
syscall::recv:return, syscall::recvfrom:return, syscall::recvfrom_nocancel:return,
syscall::readv:return, syscall::readv_nocancel:return,
syscall::recvmsg:return, syscall::recvmsg_nocancel:return
/this->rx_go/
{
	this->want = 0;
	this->fin = 0;
}
/* M: a new message at this->off, starting with a MsgHeader. */
syscall::read:return, syscall::read_nocancel:return,
syscall::recv:return, syscall::recvfrom:return, syscall::recvfrom_nocancel:return,
syscall::readv:return, syscall::readv_nocancel:return,
syscall::recvmsg:return, syscall::recvmsg_nocancel:return
/this->rx_go/
{
	this->it = !this->stop && this->off + 16 <= this->n;
}

syscall::read:return, syscall::read_nocancel:return,
syscall::recv:return, syscall::recvfrom:return, syscall::recvfrom_nocancel:return,
syscall::readv:return, syscall::readv_nocancel:return,
syscall::recvmsg:return, syscall::recvmsg_nocancel:return
/this->rx_go && this->it/
{
	this->p = (uint8_t *)copyin(this->buf + this->off, 16);
	this->q = *(uint64_t *)this->p;
	this->len = (int32_t)(this->q & 0xffffffff);
	this->rid = (int32_t)(this->q >> 32);
	this->q = *(uint64_t *)(this->p + 8);
	this->rto = (int32_t)(this->q & 0xffffffff);
	this->op = (int32_t)(this->q >> 32);
	this->valid = this->len >= 16 && this->len <= MAX_MESSAGE &&
	    (this->op == OP_MSG || this->op == OP_QUERY || this->op == OP_COMPRESSED ||
	    this->op == OP_INSERT || this->op == OP_UPDATE || this->op == OP_DELETE ||
	    this->op == OP_GET_MORE || this->op == OP_KILL_CURSORS);
}

/* not a request header: on a protocol connection it is malformed (framing is
 * reset), elsewhere (a log or data file of the same pid) it is not ours */
syscall::read:return, syscall::read_nocancel:return,
syscall::recv:return, syscall::recvfrom:return, syscall::recvfrom_nocancel:return,
syscall::readv:return, syscall::readv_nocancel:return,
syscall::recvmsg:return, syscall::recvmsg_nocancel:return
/this->rx_go && this->it && !this->valid/
{
	@malformed = sum(known[$target, this->fd] ? 1 : 0);
	rxrem[$target, this->fd] = 0; rxpos[$target, this->fd] = 0; rxneed[$target, this->fd] = 0;
	this->off = this->ret;
	this->stop = 1;
}

syscall::read:return, syscall::read_nocancel:return,
syscall::recv:return, syscall::recvfrom:return, syscall::recvfrom_nocancel:return,
syscall::readv:return, syscall::readv_nocancel:return,
syscall::recvmsg:return, syscall::recvmsg_nocancel:return
/this->rx_go && this->it && this->valid/
{
	known[$target, this->fd] = 1;
	rxop[$target, this->fd] = this->op;
	rxrid[$target, this->fd] = this->rid;
	rxlen[$target, this->fd] = this->len;
	rxmtc[$target, this->fd] = 0;
	/* until the body names it: the opCode's name, "[compressed]" for OP_COMPRESSED */
	rxcmd[$target, this->fd] = opnames[this->op == OP_COMPRESSED ? 0 : this->op];
	/* the header alone (mongod reads 16 bytes first): the name comes next */
	this->want = this->n - this->off > 16;
	this->rop = this->op;
	this->b = this->buf + this->off + 16;
	rxneed[$target, this->fd] = !this->want;
	this->fin = this->len <= this->ret - this->off;
	rxrem[$target, this->fd] = this->fin ? 0 : this->len - (this->ret - this->off);
	rxpos[$target, this->fd] = this->fin ? 0 : this->ret - this->off;
	this->off = this->fin ? this->off + this->len : this->ret;
}
/* B1: the command name from the body at this->b (message offset 16): B1-B3
 * find where it starts (this->na, 0: nowhere), B4 reads it. OP_MSG: flagBits
 * @0 (bit 1: moreToCome), first section kind @4; kind 0: the body document,
 * its first key (the command) @10. The first 9 bytes are read at once: each
 * read of user memory adds fault checks, and the verifier walks DTrace's error
 * path once per check (docs/probes.md, D, "Cost"). */
syscall::read:return, syscall::read_nocancel:return,
syscall::recv:return, syscall::recvfrom:return, syscall::recvfrom_nocancel:return,
syscall::readv:return, syscall::readv_nocancel:return,
syscall::recvmsg:return, syscall::recvmsg_nocancel:return
/this->rx_go && this->want/
{
	this->na = 0;
}

syscall::read:return, syscall::read_nocancel:return,
syscall::recv:return, syscall::recvfrom:return, syscall::recvfrom_nocancel:return,
syscall::readv:return, syscall::readv_nocancel:return,
syscall::recvmsg:return, syscall::recvmsg_nocancel:return
/this->rx_go && this->want && this->rop == OP_MSG/
{
	this->p = (uint8_t *)copyin(this->b, 9);
	this->q = *(uint64_t *)this->p;
	this->kind = (this->q >> 32) & 0xff;
	rxmtc[$target, this->fd] = (this->q & 2) != 0;
	this->na = this->kind == 0 ? this->b + 10 : 0;
	/* where a kind-1 section (its int32 size @5) ends: alloca'd bytes last
	 * only to the end of the clause */
	this->k0 = this->b + 5 + (int32_t)(*(uint64_t *)(this->p + 1) >> 32);
}

/* B2: a kind-1 document sequence first: the body follows it. */
syscall::read:return, syscall::read_nocancel:return,
syscall::recv:return, syscall::recvfrom:return, syscall::recvfrom_nocancel:return,
syscall::readv:return, syscall::readv_nocancel:return,
syscall::recvmsg:return, syscall::recvmsg_nocancel:return
/this->rx_go && this->want && this->rop == OP_MSG && this->kind == 1/
{
	this->na = *(uint8_t *)copyin(this->k0, 1) == 0 ? this->k0 + 6 : 0;
}

/* B3: OP_QUERY: flags @0, namespace @4; on "db.$cmd" (its last 5 bytes read as
 * one word) the query's first key, at 4 + nslen + 1 (nul) + 8 (skip, return) +
 * 4 (size) + 1 (type); else "find". */
syscall::read:return, syscall::read_nocancel:return,
syscall::recv:return, syscall::recvfrom:return, syscall::recvfrom_nocancel:return,
syscall::readv:return, syscall::readv_nocancel:return,
syscall::recvmsg:return, syscall::recvmsg_nocancel:return
/this->rx_go && this->want && this->rop == OP_QUERY/
{
	this->ns = copyinstr(this->b + 4, 63);
	this->nslen = strlen(this->ns);
	this->cmdns = this->nslen >= 5 &&
	    (*(uint64_t *)copyin(this->b + this->nslen - 1, 8) & 0xffffffffff) == 0x646d63242e;
	this->na = this->cmdns ? this->b + this->nslen + 18 : 0;
	rxcmd[$target, this->fd] = "find";
}

/* old drivers wrap the command: {$query: {cmd: ...}}: "$query" and its nul,
 * then 4 + 1 bytes on */
syscall::read:return, syscall::read_nocancel:return,
syscall::recv:return, syscall::recvfrom:return, syscall::recvfrom_nocancel:return,
syscall::readv:return, syscall::readv_nocancel:return,
syscall::recvmsg:return, syscall::recvmsg_nocancel:return
/this->rx_go && this->want && this->rop == OP_QUERY && this->cmdns/
{
	this->na = (*(uint64_t *)copyin(this->na, 8) & 0xffffffffffffff) == 0x797265757124 ?
	    this->na + 12 : this->na;
}

/* B4: the name. */
syscall::read:return, syscall::read_nocancel:return,
syscall::recv:return, syscall::recvfrom:return, syscall::recvfrom_nocancel:return,
syscall::readv:return, syscall::readv_nocancel:return,
syscall::recvmsg:return, syscall::recvmsg_nocancel:return
/this->rx_go && this->want && this->na != 0/
{
	rxcmd[$target, this->fd] = copyinstr(this->na, 32);
}

syscall::read:return, syscall::read_nocancel:return,
syscall::recv:return, syscall::recvfrom:return, syscall::recvfrom_nocancel:return,
syscall::readv:return, syscall::readv_nocancel:return,
syscall::recvmsg:return, syscall::recvmsg_nocancel:return
/this->rx_go && this->want/
{
	rxneed[$target, this->fd] = 0;
}
/* C1: the request is complete: count it. moreToCome and the legacy insert,
 * update, delete and killCursors expect no reply. */
syscall::read:return, syscall::read_nocancel:return,
syscall::recv:return, syscall::recvfrom:return, syscall::recvfrom_nocancel:return,
syscall::readv:return, syscall::readv_nocancel:return,
syscall::recvmsg:return, syscall::recvmsg_nocancel:return
/this->rx_go && this->fin/
{
	this->o = rxop[$target, this->fd];
	this->opname = opnames[this->o];
	this->nr = rxmtc[$target, this->fd] || this->o == OP_INSERT || this->o == OP_UPDATE ||
	    this->o == OP_DELETE || this->o == OP_KILL_CURSORS;
	@requests = sum(1);
	@noreply = sum(this->nr);
	@requests_by_op[this->opname] = count();
	@requests_by_cmd[rxcmd[$target, this->fd]] = count();
	rxneed[$target, this->fd] = 0;
	this->hd = head[$target, this->fd];
}

/* C1n: it expects no reply: its requestID and name are remembered, in case the
 * server answers it anyway (FerretDB answers the endSessions the Node.js driver
 * sends with moreToCome as it closes): P3n counts that reply as answered_no_reply,
 * not unmatched. A store of values already read: no copyin. Cost at start (one
 * day's 2-core machine, Oracle DTrace 8a1264bf): with P3n, mongo_time.d verifies
 * 2.15 million instructions instead of 2.08 (3.6% more; the name's copy about 30
 * thousand of the 75, nine unrolled copies of this clause in each receive program). */
syscall::read:return, syscall::read_nocancel:return,
syscall::recv:return, syscall::recvfrom:return, syscall::recvfrom_nocancel:return,
syscall::readv:return, syscall::readv_nocancel:return,
syscall::recvmsg:return, syscall::recvmsg_nocancel:return
/this->rx_go && this->fin && this->nr/
{
	nrid[$target, this->fd] = 0x100000000 | (uint32_t)rxrid[$target, this->fd];
	nrcmd[$target, this->fd] = rxcmd[$target, this->fd];
}

/* C2: the ring is full: the oldest request never got its reply (it stays
 * counted in @without, which every request taking a slot adds to). */
syscall::read:return, syscall::read_nocancel:return,
syscall::recv:return, syscall::recvfrom:return, syscall::recvfrom_nocancel:return,
syscall::readv:return, syscall::readv_nocancel:return,
syscall::recvmsg:return, syscall::recvmsg_nocancel:return
/this->rx_go && this->fin && !this->nr && this->hd - tail[$target, this->fd] >= SLOTS/
{
	tail[$target, this->fd] = tail[$target, this->fd] + 1;
}

/* C3: it expects a reply: take a slot, start its clock. */
syscall::read:return, syscall::read_nocancel:return,
syscall::recv:return, syscall::recvfrom:return, syscall::recvfrom_nocancel:return,
syscall::readv:return, syscall::readv_nocancel:return,
syscall::recvmsg:return, syscall::recvmsg_nocancel:return
/this->rx_go && this->fin && !this->nr/
{
	this->s = this->hd % SLOTS;
	slot_rid[$target, this->fd, this->s] = rxrid[$target, this->fd];
	slot_ts[$target, this->fd, this->s] = timestamp;
	slot_op[$target, this->fd, this->s] = this->o;
	slot_len[$target, this->fd, this->s] = rxlen[$target, this->fd];
	slot_cmd[$target, this->fd, this->s] = rxcmd[$target, this->fd];
	head[$target, this->fd] = this->hd + 1;
	@without = sum(1);
}

syscall::read:return, syscall::read_nocancel:return,
syscall::recv:return, syscall::recvfrom:return, syscall::recvfrom_nocancel:return,
syscall::readv:return, syscall::readv_nocancel:return,
syscall::recvmsg:return, syscall::recvmsg_nocancel:return
/this->rx_go/
{
	this->want = 0;
	this->fin = 0;
}
/* M: a new message at this->off, starting with a MsgHeader. */
syscall::read:return, syscall::read_nocancel:return,
syscall::recv:return, syscall::recvfrom:return, syscall::recvfrom_nocancel:return,
syscall::readv:return, syscall::readv_nocancel:return,
syscall::recvmsg:return, syscall::recvmsg_nocancel:return
/this->rx_go/
{
	this->it = !this->stop && this->off + 16 <= this->n;
}

syscall::read:return, syscall::read_nocancel:return,
syscall::recv:return, syscall::recvfrom:return, syscall::recvfrom_nocancel:return,
syscall::readv:return, syscall::readv_nocancel:return,
syscall::recvmsg:return, syscall::recvmsg_nocancel:return
/this->rx_go && this->it/
{
	this->p = (uint8_t *)copyin(this->buf + this->off, 16);
	this->q = *(uint64_t *)this->p;
	this->len = (int32_t)(this->q & 0xffffffff);
	this->rid = (int32_t)(this->q >> 32);
	this->q = *(uint64_t *)(this->p + 8);
	this->rto = (int32_t)(this->q & 0xffffffff);
	this->op = (int32_t)(this->q >> 32);
	this->valid = this->len >= 16 && this->len <= MAX_MESSAGE &&
	    (this->op == OP_MSG || this->op == OP_QUERY || this->op == OP_COMPRESSED ||
	    this->op == OP_INSERT || this->op == OP_UPDATE || this->op == OP_DELETE ||
	    this->op == OP_GET_MORE || this->op == OP_KILL_CURSORS);
}

/* not a request header: on a protocol connection it is malformed (framing is
 * reset), elsewhere (a log or data file of the same pid) it is not ours */
syscall::read:return, syscall::read_nocancel:return,
syscall::recv:return, syscall::recvfrom:return, syscall::recvfrom_nocancel:return,
syscall::readv:return, syscall::readv_nocancel:return,
syscall::recvmsg:return, syscall::recvmsg_nocancel:return
/this->rx_go && this->it && !this->valid/
{
	@malformed = sum(known[$target, this->fd] ? 1 : 0);
	rxrem[$target, this->fd] = 0; rxpos[$target, this->fd] = 0; rxneed[$target, this->fd] = 0;
	this->off = this->ret;
	this->stop = 1;
}

syscall::read:return, syscall::read_nocancel:return,
syscall::recv:return, syscall::recvfrom:return, syscall::recvfrom_nocancel:return,
syscall::readv:return, syscall::readv_nocancel:return,
syscall::recvmsg:return, syscall::recvmsg_nocancel:return
/this->rx_go && this->it && this->valid/
{
	known[$target, this->fd] = 1;
	rxop[$target, this->fd] = this->op;
	rxrid[$target, this->fd] = this->rid;
	rxlen[$target, this->fd] = this->len;
	rxmtc[$target, this->fd] = 0;
	/* until the body names it: the opCode's name, "[compressed]" for OP_COMPRESSED */
	rxcmd[$target, this->fd] = opnames[this->op == OP_COMPRESSED ? 0 : this->op];
	/* the header alone (mongod reads 16 bytes first): the name comes next */
	this->want = this->n - this->off > 16;
	this->rop = this->op;
	this->b = this->buf + this->off + 16;
	rxneed[$target, this->fd] = !this->want;
	this->fin = this->len <= this->ret - this->off;
	rxrem[$target, this->fd] = this->fin ? 0 : this->len - (this->ret - this->off);
	rxpos[$target, this->fd] = this->fin ? 0 : this->ret - this->off;
	this->off = this->fin ? this->off + this->len : this->ret;
}
/* B1: the command name from the body at this->b (message offset 16): B1-B3
 * find where it starts (this->na, 0: nowhere), B4 reads it. OP_MSG: flagBits
 * @0 (bit 1: moreToCome), first section kind @4; kind 0: the body document,
 * its first key (the command) @10. The first 9 bytes are read at once: each
 * read of user memory adds fault checks, and the verifier walks DTrace's error
 * path once per check (docs/probes.md, D, "Cost"). */
syscall::read:return, syscall::read_nocancel:return,
syscall::recv:return, syscall::recvfrom:return, syscall::recvfrom_nocancel:return,
syscall::readv:return, syscall::readv_nocancel:return,
syscall::recvmsg:return, syscall::recvmsg_nocancel:return
/this->rx_go && this->want/
{
	this->na = 0;
}

syscall::read:return, syscall::read_nocancel:return,
syscall::recv:return, syscall::recvfrom:return, syscall::recvfrom_nocancel:return,
syscall::readv:return, syscall::readv_nocancel:return,
syscall::recvmsg:return, syscall::recvmsg_nocancel:return
/this->rx_go && this->want && this->rop == OP_MSG/
{
	this->p = (uint8_t *)copyin(this->b, 9);
	this->q = *(uint64_t *)this->p;
	this->kind = (this->q >> 32) & 0xff;
	rxmtc[$target, this->fd] = (this->q & 2) != 0;
	this->na = this->kind == 0 ? this->b + 10 : 0;
	/* where a kind-1 section (its int32 size @5) ends: alloca'd bytes last
	 * only to the end of the clause */
	this->k0 = this->b + 5 + (int32_t)(*(uint64_t *)(this->p + 1) >> 32);
}

/* B2: a kind-1 document sequence first: the body follows it. */
syscall::read:return, syscall::read_nocancel:return,
syscall::recv:return, syscall::recvfrom:return, syscall::recvfrom_nocancel:return,
syscall::readv:return, syscall::readv_nocancel:return,
syscall::recvmsg:return, syscall::recvmsg_nocancel:return
/this->rx_go && this->want && this->rop == OP_MSG && this->kind == 1/
{
	this->na = *(uint8_t *)copyin(this->k0, 1) == 0 ? this->k0 + 6 : 0;
}

/* B3: OP_QUERY: flags @0, namespace @4; on "db.$cmd" (its last 5 bytes read as
 * one word) the query's first key, at 4 + nslen + 1 (nul) + 8 (skip, return) +
 * 4 (size) + 1 (type); else "find". */
syscall::read:return, syscall::read_nocancel:return,
syscall::recv:return, syscall::recvfrom:return, syscall::recvfrom_nocancel:return,
syscall::readv:return, syscall::readv_nocancel:return,
syscall::recvmsg:return, syscall::recvmsg_nocancel:return
/this->rx_go && this->want && this->rop == OP_QUERY/
{
	this->ns = copyinstr(this->b + 4, 63);
	this->nslen = strlen(this->ns);
	this->cmdns = this->nslen >= 5 &&
	    (*(uint64_t *)copyin(this->b + this->nslen - 1, 8) & 0xffffffffff) == 0x646d63242e;
	this->na = this->cmdns ? this->b + this->nslen + 18 : 0;
	rxcmd[$target, this->fd] = "find";
}

/* old drivers wrap the command: {$query: {cmd: ...}}: "$query" and its nul,
 * then 4 + 1 bytes on */
syscall::read:return, syscall::read_nocancel:return,
syscall::recv:return, syscall::recvfrom:return, syscall::recvfrom_nocancel:return,
syscall::readv:return, syscall::readv_nocancel:return,
syscall::recvmsg:return, syscall::recvmsg_nocancel:return
/this->rx_go && this->want && this->rop == OP_QUERY && this->cmdns/
{
	this->na = (*(uint64_t *)copyin(this->na, 8) & 0xffffffffffffff) == 0x797265757124 ?
	    this->na + 12 : this->na;
}

/* B4: the name. */
syscall::read:return, syscall::read_nocancel:return,
syscall::recv:return, syscall::recvfrom:return, syscall::recvfrom_nocancel:return,
syscall::readv:return, syscall::readv_nocancel:return,
syscall::recvmsg:return, syscall::recvmsg_nocancel:return
/this->rx_go && this->want && this->na != 0/
{
	rxcmd[$target, this->fd] = copyinstr(this->na, 32);
}

syscall::read:return, syscall::read_nocancel:return,
syscall::recv:return, syscall::recvfrom:return, syscall::recvfrom_nocancel:return,
syscall::readv:return, syscall::readv_nocancel:return,
syscall::recvmsg:return, syscall::recvmsg_nocancel:return
/this->rx_go && this->want/
{
	rxneed[$target, this->fd] = 0;
}
/* C1: the request is complete: count it. moreToCome and the legacy insert,
 * update, delete and killCursors expect no reply. */
syscall::read:return, syscall::read_nocancel:return,
syscall::recv:return, syscall::recvfrom:return, syscall::recvfrom_nocancel:return,
syscall::readv:return, syscall::readv_nocancel:return,
syscall::recvmsg:return, syscall::recvmsg_nocancel:return
/this->rx_go && this->fin/
{
	this->o = rxop[$target, this->fd];
	this->opname = opnames[this->o];
	this->nr = rxmtc[$target, this->fd] || this->o == OP_INSERT || this->o == OP_UPDATE ||
	    this->o == OP_DELETE || this->o == OP_KILL_CURSORS;
	@requests = sum(1);
	@noreply = sum(this->nr);
	@requests_by_op[this->opname] = count();
	@requests_by_cmd[rxcmd[$target, this->fd]] = count();
	rxneed[$target, this->fd] = 0;
	this->hd = head[$target, this->fd];
}

/* C1n: it expects no reply: its requestID and name are remembered, in case the
 * server answers it anyway (FerretDB answers the endSessions the Node.js driver
 * sends with moreToCome as it closes): P3n counts that reply as answered_no_reply,
 * not unmatched. A store of values already read: no copyin. Cost at start (one
 * day's 2-core machine, Oracle DTrace 8a1264bf): with P3n, mongo_time.d verifies
 * 2.15 million instructions instead of 2.08 (3.6% more; the name's copy about 30
 * thousand of the 75, nine unrolled copies of this clause in each receive program). */
syscall::read:return, syscall::read_nocancel:return,
syscall::recv:return, syscall::recvfrom:return, syscall::recvfrom_nocancel:return,
syscall::readv:return, syscall::readv_nocancel:return,
syscall::recvmsg:return, syscall::recvmsg_nocancel:return
/this->rx_go && this->fin && this->nr/
{
	nrid[$target, this->fd] = 0x100000000 | (uint32_t)rxrid[$target, this->fd];
	nrcmd[$target, this->fd] = rxcmd[$target, this->fd];
}

/* C2: the ring is full: the oldest request never got its reply (it stays
 * counted in @without, which every request taking a slot adds to). */
syscall::read:return, syscall::read_nocancel:return,
syscall::recv:return, syscall::recvfrom:return, syscall::recvfrom_nocancel:return,
syscall::readv:return, syscall::readv_nocancel:return,
syscall::recvmsg:return, syscall::recvmsg_nocancel:return
/this->rx_go && this->fin && !this->nr && this->hd - tail[$target, this->fd] >= SLOTS/
{
	tail[$target, this->fd] = tail[$target, this->fd] + 1;
}

/* C3: it expects a reply: take a slot, start its clock. */
syscall::read:return, syscall::read_nocancel:return,
syscall::recv:return, syscall::recvfrom:return, syscall::recvfrom_nocancel:return,
syscall::readv:return, syscall::readv_nocancel:return,
syscall::recvmsg:return, syscall::recvmsg_nocancel:return
/this->rx_go && this->fin && !this->nr/
{
	this->s = this->hd % SLOTS;
	slot_rid[$target, this->fd, this->s] = rxrid[$target, this->fd];
	slot_ts[$target, this->fd, this->s] = timestamp;
	slot_op[$target, this->fd, this->s] = this->o;
	slot_len[$target, this->fd, this->s] = rxlen[$target, this->fd];
	slot_cmd[$target, this->fd, this->s] = rxcmd[$target, this->fd];
	head[$target, this->fd] = this->hd + 1;
	@without = sum(1);
}

syscall::read:return, syscall::read_nocancel:return,
syscall::recv:return, syscall::recvfrom:return, syscall::recvfrom_nocancel:return,
syscall::readv:return, syscall::readv_nocancel:return,
syscall::recvmsg:return, syscall::recvmsg_nocancel:return
/this->rx_go/
{
	this->want = 0;
	this->fin = 0;
}
/* M: a new message at this->off, starting with a MsgHeader. */
syscall::read:return, syscall::read_nocancel:return,
syscall::recv:return, syscall::recvfrom:return, syscall::recvfrom_nocancel:return,
syscall::readv:return, syscall::readv_nocancel:return,
syscall::recvmsg:return, syscall::recvmsg_nocancel:return
/this->rx_go/
{
	this->it = !this->stop && this->off + 16 <= this->n;
}

syscall::read:return, syscall::read_nocancel:return,
syscall::recv:return, syscall::recvfrom:return, syscall::recvfrom_nocancel:return,
syscall::readv:return, syscall::readv_nocancel:return,
syscall::recvmsg:return, syscall::recvmsg_nocancel:return
/this->rx_go && this->it/
{
	this->p = (uint8_t *)copyin(this->buf + this->off, 16);
	this->q = *(uint64_t *)this->p;
	this->len = (int32_t)(this->q & 0xffffffff);
	this->rid = (int32_t)(this->q >> 32);
	this->q = *(uint64_t *)(this->p + 8);
	this->rto = (int32_t)(this->q & 0xffffffff);
	this->op = (int32_t)(this->q >> 32);
	this->valid = this->len >= 16 && this->len <= MAX_MESSAGE &&
	    (this->op == OP_MSG || this->op == OP_QUERY || this->op == OP_COMPRESSED ||
	    this->op == OP_INSERT || this->op == OP_UPDATE || this->op == OP_DELETE ||
	    this->op == OP_GET_MORE || this->op == OP_KILL_CURSORS);
}

/* not a request header: on a protocol connection it is malformed (framing is
 * reset), elsewhere (a log or data file of the same pid) it is not ours */
syscall::read:return, syscall::read_nocancel:return,
syscall::recv:return, syscall::recvfrom:return, syscall::recvfrom_nocancel:return,
syscall::readv:return, syscall::readv_nocancel:return,
syscall::recvmsg:return, syscall::recvmsg_nocancel:return
/this->rx_go && this->it && !this->valid/
{
	@malformed = sum(known[$target, this->fd] ? 1 : 0);
	rxrem[$target, this->fd] = 0; rxpos[$target, this->fd] = 0; rxneed[$target, this->fd] = 0;
	this->off = this->ret;
	this->stop = 1;
}

syscall::read:return, syscall::read_nocancel:return,
syscall::recv:return, syscall::recvfrom:return, syscall::recvfrom_nocancel:return,
syscall::readv:return, syscall::readv_nocancel:return,
syscall::recvmsg:return, syscall::recvmsg_nocancel:return
/this->rx_go && this->it && this->valid/
{
	known[$target, this->fd] = 1;
	rxop[$target, this->fd] = this->op;
	rxrid[$target, this->fd] = this->rid;
	rxlen[$target, this->fd] = this->len;
	rxmtc[$target, this->fd] = 0;
	/* until the body names it: the opCode's name, "[compressed]" for OP_COMPRESSED */
	rxcmd[$target, this->fd] = opnames[this->op == OP_COMPRESSED ? 0 : this->op];
	/* the header alone (mongod reads 16 bytes first): the name comes next */
	this->want = this->n - this->off > 16;
	this->rop = this->op;
	this->b = this->buf + this->off + 16;
	rxneed[$target, this->fd] = !this->want;
	this->fin = this->len <= this->ret - this->off;
	rxrem[$target, this->fd] = this->fin ? 0 : this->len - (this->ret - this->off);
	rxpos[$target, this->fd] = this->fin ? 0 : this->ret - this->off;
	this->off = this->fin ? this->off + this->len : this->ret;
}
/* B1: the command name from the body at this->b (message offset 16): B1-B3
 * find where it starts (this->na, 0: nowhere), B4 reads it. OP_MSG: flagBits
 * @0 (bit 1: moreToCome), first section kind @4; kind 0: the body document,
 * its first key (the command) @10. The first 9 bytes are read at once: each
 * read of user memory adds fault checks, and the verifier walks DTrace's error
 * path once per check (docs/probes.md, D, "Cost"). */
syscall::read:return, syscall::read_nocancel:return,
syscall::recv:return, syscall::recvfrom:return, syscall::recvfrom_nocancel:return,
syscall::readv:return, syscall::readv_nocancel:return,
syscall::recvmsg:return, syscall::recvmsg_nocancel:return
/this->rx_go && this->want/
{
	this->na = 0;
}

syscall::read:return, syscall::read_nocancel:return,
syscall::recv:return, syscall::recvfrom:return, syscall::recvfrom_nocancel:return,
syscall::readv:return, syscall::readv_nocancel:return,
syscall::recvmsg:return, syscall::recvmsg_nocancel:return
/this->rx_go && this->want && this->rop == OP_MSG/
{
	this->p = (uint8_t *)copyin(this->b, 9);
	this->q = *(uint64_t *)this->p;
	this->kind = (this->q >> 32) & 0xff;
	rxmtc[$target, this->fd] = (this->q & 2) != 0;
	this->na = this->kind == 0 ? this->b + 10 : 0;
	/* where a kind-1 section (its int32 size @5) ends: alloca'd bytes last
	 * only to the end of the clause */
	this->k0 = this->b + 5 + (int32_t)(*(uint64_t *)(this->p + 1) >> 32);
}

/* B2: a kind-1 document sequence first: the body follows it. */
syscall::read:return, syscall::read_nocancel:return,
syscall::recv:return, syscall::recvfrom:return, syscall::recvfrom_nocancel:return,
syscall::readv:return, syscall::readv_nocancel:return,
syscall::recvmsg:return, syscall::recvmsg_nocancel:return
/this->rx_go && this->want && this->rop == OP_MSG && this->kind == 1/
{
	this->na = *(uint8_t *)copyin(this->k0, 1) == 0 ? this->k0 + 6 : 0;
}

/* B3: OP_QUERY: flags @0, namespace @4; on "db.$cmd" (its last 5 bytes read as
 * one word) the query's first key, at 4 + nslen + 1 (nul) + 8 (skip, return) +
 * 4 (size) + 1 (type); else "find". */
syscall::read:return, syscall::read_nocancel:return,
syscall::recv:return, syscall::recvfrom:return, syscall::recvfrom_nocancel:return,
syscall::readv:return, syscall::readv_nocancel:return,
syscall::recvmsg:return, syscall::recvmsg_nocancel:return
/this->rx_go && this->want && this->rop == OP_QUERY/
{
	this->ns = copyinstr(this->b + 4, 63);
	this->nslen = strlen(this->ns);
	this->cmdns = this->nslen >= 5 &&
	    (*(uint64_t *)copyin(this->b + this->nslen - 1, 8) & 0xffffffffff) == 0x646d63242e;
	this->na = this->cmdns ? this->b + this->nslen + 18 : 0;
	rxcmd[$target, this->fd] = "find";
}

/* old drivers wrap the command: {$query: {cmd: ...}}: "$query" and its nul,
 * then 4 + 1 bytes on */
syscall::read:return, syscall::read_nocancel:return,
syscall::recv:return, syscall::recvfrom:return, syscall::recvfrom_nocancel:return,
syscall::readv:return, syscall::readv_nocancel:return,
syscall::recvmsg:return, syscall::recvmsg_nocancel:return
/this->rx_go && this->want && this->rop == OP_QUERY && this->cmdns/
{
	this->na = (*(uint64_t *)copyin(this->na, 8) & 0xffffffffffffff) == 0x797265757124 ?
	    this->na + 12 : this->na;
}

/* B4: the name. */
syscall::read:return, syscall::read_nocancel:return,
syscall::recv:return, syscall::recvfrom:return, syscall::recvfrom_nocancel:return,
syscall::readv:return, syscall::readv_nocancel:return,
syscall::recvmsg:return, syscall::recvmsg_nocancel:return
/this->rx_go && this->want && this->na != 0/
{
	rxcmd[$target, this->fd] = copyinstr(this->na, 32);
}

syscall::read:return, syscall::read_nocancel:return,
syscall::recv:return, syscall::recvfrom:return, syscall::recvfrom_nocancel:return,
syscall::readv:return, syscall::readv_nocancel:return,
syscall::recvmsg:return, syscall::recvmsg_nocancel:return
/this->rx_go && this->want/
{
	rxneed[$target, this->fd] = 0;
}
/* C1: the request is complete: count it. moreToCome and the legacy insert,
 * update, delete and killCursors expect no reply. */
syscall::read:return, syscall::read_nocancel:return,
syscall::recv:return, syscall::recvfrom:return, syscall::recvfrom_nocancel:return,
syscall::readv:return, syscall::readv_nocancel:return,
syscall::recvmsg:return, syscall::recvmsg_nocancel:return
/this->rx_go && this->fin/
{
	this->o = rxop[$target, this->fd];
	this->opname = opnames[this->o];
	this->nr = rxmtc[$target, this->fd] || this->o == OP_INSERT || this->o == OP_UPDATE ||
	    this->o == OP_DELETE || this->o == OP_KILL_CURSORS;
	@requests = sum(1);
	@noreply = sum(this->nr);
	@requests_by_op[this->opname] = count();
	@requests_by_cmd[rxcmd[$target, this->fd]] = count();
	rxneed[$target, this->fd] = 0;
	this->hd = head[$target, this->fd];
}

/* C1n: it expects no reply: its requestID and name are remembered, in case the
 * server answers it anyway (FerretDB answers the endSessions the Node.js driver
 * sends with moreToCome as it closes): P3n counts that reply as answered_no_reply,
 * not unmatched. A store of values already read: no copyin. Cost at start (one
 * day's 2-core machine, Oracle DTrace 8a1264bf): with P3n, mongo_time.d verifies
 * 2.15 million instructions instead of 2.08 (3.6% more; the name's copy about 30
 * thousand of the 75, nine unrolled copies of this clause in each receive program). */
syscall::read:return, syscall::read_nocancel:return,
syscall::recv:return, syscall::recvfrom:return, syscall::recvfrom_nocancel:return,
syscall::readv:return, syscall::readv_nocancel:return,
syscall::recvmsg:return, syscall::recvmsg_nocancel:return
/this->rx_go && this->fin && this->nr/
{
	nrid[$target, this->fd] = 0x100000000 | (uint32_t)rxrid[$target, this->fd];
	nrcmd[$target, this->fd] = rxcmd[$target, this->fd];
}

/* C2: the ring is full: the oldest request never got its reply (it stays
 * counted in @without, which every request taking a slot adds to). */
syscall::read:return, syscall::read_nocancel:return,
syscall::recv:return, syscall::recvfrom:return, syscall::recvfrom_nocancel:return,
syscall::readv:return, syscall::readv_nocancel:return,
syscall::recvmsg:return, syscall::recvmsg_nocancel:return
/this->rx_go && this->fin && !this->nr && this->hd - tail[$target, this->fd] >= SLOTS/
{
	tail[$target, this->fd] = tail[$target, this->fd] + 1;
}

/* C3: it expects a reply: take a slot, start its clock. */
syscall::read:return, syscall::read_nocancel:return,
syscall::recv:return, syscall::recvfrom:return, syscall::recvfrom_nocancel:return,
syscall::readv:return, syscall::readv_nocancel:return,
syscall::recvmsg:return, syscall::recvmsg_nocancel:return
/this->rx_go && this->fin && !this->nr/
{
	this->s = this->hd % SLOTS;
	slot_rid[$target, this->fd, this->s] = rxrid[$target, this->fd];
	slot_ts[$target, this->fd, this->s] = timestamp;
	slot_op[$target, this->fd, this->s] = this->o;
	slot_len[$target, this->fd, this->s] = rxlen[$target, this->fd];
	slot_cmd[$target, this->fd, this->s] = rxcmd[$target, this->fd];
	head[$target, this->fd] = this->hd + 1;
	@without = sum(1);
}

syscall::read:return, syscall::read_nocancel:return,
syscall::recv:return, syscall::recvfrom:return, syscall::recvfrom_nocancel:return,
syscall::readv:return, syscall::readv_nocancel:return,
syscall::recvmsg:return, syscall::recvmsg_nocancel:return
/this->rx_go/
{
	this->want = 0;
	this->fin = 0;
}
/* M: a new message at this->off, starting with a MsgHeader. */
syscall::read:return, syscall::read_nocancel:return,
syscall::recv:return, syscall::recvfrom:return, syscall::recvfrom_nocancel:return,
syscall::readv:return, syscall::readv_nocancel:return,
syscall::recvmsg:return, syscall::recvmsg_nocancel:return
/this->rx_go/
{
	this->it = !this->stop && this->off + 16 <= this->n;
}

syscall::read:return, syscall::read_nocancel:return,
syscall::recv:return, syscall::recvfrom:return, syscall::recvfrom_nocancel:return,
syscall::readv:return, syscall::readv_nocancel:return,
syscall::recvmsg:return, syscall::recvmsg_nocancel:return
/this->rx_go && this->it/
{
	this->p = (uint8_t *)copyin(this->buf + this->off, 16);
	this->q = *(uint64_t *)this->p;
	this->len = (int32_t)(this->q & 0xffffffff);
	this->rid = (int32_t)(this->q >> 32);
	this->q = *(uint64_t *)(this->p + 8);
	this->rto = (int32_t)(this->q & 0xffffffff);
	this->op = (int32_t)(this->q >> 32);
	this->valid = this->len >= 16 && this->len <= MAX_MESSAGE &&
	    (this->op == OP_MSG || this->op == OP_QUERY || this->op == OP_COMPRESSED ||
	    this->op == OP_INSERT || this->op == OP_UPDATE || this->op == OP_DELETE ||
	    this->op == OP_GET_MORE || this->op == OP_KILL_CURSORS);
}

/* not a request header: on a protocol connection it is malformed (framing is
 * reset), elsewhere (a log or data file of the same pid) it is not ours */
syscall::read:return, syscall::read_nocancel:return,
syscall::recv:return, syscall::recvfrom:return, syscall::recvfrom_nocancel:return,
syscall::readv:return, syscall::readv_nocancel:return,
syscall::recvmsg:return, syscall::recvmsg_nocancel:return
/this->rx_go && this->it && !this->valid/
{
	@malformed = sum(known[$target, this->fd] ? 1 : 0);
	rxrem[$target, this->fd] = 0; rxpos[$target, this->fd] = 0; rxneed[$target, this->fd] = 0;
	this->off = this->ret;
	this->stop = 1;
}

syscall::read:return, syscall::read_nocancel:return,
syscall::recv:return, syscall::recvfrom:return, syscall::recvfrom_nocancel:return,
syscall::readv:return, syscall::readv_nocancel:return,
syscall::recvmsg:return, syscall::recvmsg_nocancel:return
/this->rx_go && this->it && this->valid/
{
	known[$target, this->fd] = 1;
	rxop[$target, this->fd] = this->op;
	rxrid[$target, this->fd] = this->rid;
	rxlen[$target, this->fd] = this->len;
	rxmtc[$target, this->fd] = 0;
	/* until the body names it: the opCode's name, "[compressed]" for OP_COMPRESSED */
	rxcmd[$target, this->fd] = opnames[this->op == OP_COMPRESSED ? 0 : this->op];
	/* the header alone (mongod reads 16 bytes first): the name comes next */
	this->want = this->n - this->off > 16;
	this->rop = this->op;
	this->b = this->buf + this->off + 16;
	rxneed[$target, this->fd] = !this->want;
	this->fin = this->len <= this->ret - this->off;
	rxrem[$target, this->fd] = this->fin ? 0 : this->len - (this->ret - this->off);
	rxpos[$target, this->fd] = this->fin ? 0 : this->ret - this->off;
	this->off = this->fin ? this->off + this->len : this->ret;
}
/* B1: the command name from the body at this->b (message offset 16): B1-B3
 * find where it starts (this->na, 0: nowhere), B4 reads it. OP_MSG: flagBits
 * @0 (bit 1: moreToCome), first section kind @4; kind 0: the body document,
 * its first key (the command) @10. The first 9 bytes are read at once: each
 * read of user memory adds fault checks, and the verifier walks DTrace's error
 * path once per check (docs/probes.md, D, "Cost"). */
syscall::read:return, syscall::read_nocancel:return,
syscall::recv:return, syscall::recvfrom:return, syscall::recvfrom_nocancel:return,
syscall::readv:return, syscall::readv_nocancel:return,
syscall::recvmsg:return, syscall::recvmsg_nocancel:return
/this->rx_go && this->want/
{
	this->na = 0;
}

syscall::read:return, syscall::read_nocancel:return,
syscall::recv:return, syscall::recvfrom:return, syscall::recvfrom_nocancel:return,
syscall::readv:return, syscall::readv_nocancel:return,
syscall::recvmsg:return, syscall::recvmsg_nocancel:return
/this->rx_go && this->want && this->rop == OP_MSG/
{
	this->p = (uint8_t *)copyin(this->b, 9);
	this->q = *(uint64_t *)this->p;
	this->kind = (this->q >> 32) & 0xff;
	rxmtc[$target, this->fd] = (this->q & 2) != 0;
	this->na = this->kind == 0 ? this->b + 10 : 0;
	/* where a kind-1 section (its int32 size @5) ends: alloca'd bytes last
	 * only to the end of the clause */
	this->k0 = this->b + 5 + (int32_t)(*(uint64_t *)(this->p + 1) >> 32);
}

/* B2: a kind-1 document sequence first: the body follows it. */
syscall::read:return, syscall::read_nocancel:return,
syscall::recv:return, syscall::recvfrom:return, syscall::recvfrom_nocancel:return,
syscall::readv:return, syscall::readv_nocancel:return,
syscall::recvmsg:return, syscall::recvmsg_nocancel:return
/this->rx_go && this->want && this->rop == OP_MSG && this->kind == 1/
{
	this->na = *(uint8_t *)copyin(this->k0, 1) == 0 ? this->k0 + 6 : 0;
}

/* B3: OP_QUERY: flags @0, namespace @4; on "db.$cmd" (its last 5 bytes read as
 * one word) the query's first key, at 4 + nslen + 1 (nul) + 8 (skip, return) +
 * 4 (size) + 1 (type); else "find". */
syscall::read:return, syscall::read_nocancel:return,
syscall::recv:return, syscall::recvfrom:return, syscall::recvfrom_nocancel:return,
syscall::readv:return, syscall::readv_nocancel:return,
syscall::recvmsg:return, syscall::recvmsg_nocancel:return
/this->rx_go && this->want && this->rop == OP_QUERY/
{
	this->ns = copyinstr(this->b + 4, 63);
	this->nslen = strlen(this->ns);
	this->cmdns = this->nslen >= 5 &&
	    (*(uint64_t *)copyin(this->b + this->nslen - 1, 8) & 0xffffffffff) == 0x646d63242e;
	this->na = this->cmdns ? this->b + this->nslen + 18 : 0;
	rxcmd[$target, this->fd] = "find";
}

/* old drivers wrap the command: {$query: {cmd: ...}}: "$query" and its nul,
 * then 4 + 1 bytes on */
syscall::read:return, syscall::read_nocancel:return,
syscall::recv:return, syscall::recvfrom:return, syscall::recvfrom_nocancel:return,
syscall::readv:return, syscall::readv_nocancel:return,
syscall::recvmsg:return, syscall::recvmsg_nocancel:return
/this->rx_go && this->want && this->rop == OP_QUERY && this->cmdns/
{
	this->na = (*(uint64_t *)copyin(this->na, 8) & 0xffffffffffffff) == 0x797265757124 ?
	    this->na + 12 : this->na;
}

/* B4: the name. */
syscall::read:return, syscall::read_nocancel:return,
syscall::recv:return, syscall::recvfrom:return, syscall::recvfrom_nocancel:return,
syscall::readv:return, syscall::readv_nocancel:return,
syscall::recvmsg:return, syscall::recvmsg_nocancel:return
/this->rx_go && this->want && this->na != 0/
{
	rxcmd[$target, this->fd] = copyinstr(this->na, 32);
}

syscall::read:return, syscall::read_nocancel:return,
syscall::recv:return, syscall::recvfrom:return, syscall::recvfrom_nocancel:return,
syscall::readv:return, syscall::readv_nocancel:return,
syscall::recvmsg:return, syscall::recvmsg_nocancel:return
/this->rx_go && this->want/
{
	rxneed[$target, this->fd] = 0;
}
/* C1: the request is complete: count it. moreToCome and the legacy insert,
 * update, delete and killCursors expect no reply. */
syscall::read:return, syscall::read_nocancel:return,
syscall::recv:return, syscall::recvfrom:return, syscall::recvfrom_nocancel:return,
syscall::readv:return, syscall::readv_nocancel:return,
syscall::recvmsg:return, syscall::recvmsg_nocancel:return
/this->rx_go && this->fin/
{
	this->o = rxop[$target, this->fd];
	this->opname = opnames[this->o];
	this->nr = rxmtc[$target, this->fd] || this->o == OP_INSERT || this->o == OP_UPDATE ||
	    this->o == OP_DELETE || this->o == OP_KILL_CURSORS;
	@requests = sum(1);
	@noreply = sum(this->nr);
	@requests_by_op[this->opname] = count();
	@requests_by_cmd[rxcmd[$target, this->fd]] = count();
	rxneed[$target, this->fd] = 0;
	this->hd = head[$target, this->fd];
}

/* C1n: it expects no reply: its requestID and name are remembered, in case the
 * server answers it anyway (FerretDB answers the endSessions the Node.js driver
 * sends with moreToCome as it closes): P3n counts that reply as answered_no_reply,
 * not unmatched. A store of values already read: no copyin. Cost at start (one
 * day's 2-core machine, Oracle DTrace 8a1264bf): with P3n, mongo_time.d verifies
 * 2.15 million instructions instead of 2.08 (3.6% more; the name's copy about 30
 * thousand of the 75, nine unrolled copies of this clause in each receive program). */
syscall::read:return, syscall::read_nocancel:return,
syscall::recv:return, syscall::recvfrom:return, syscall::recvfrom_nocancel:return,
syscall::readv:return, syscall::readv_nocancel:return,
syscall::recvmsg:return, syscall::recvmsg_nocancel:return
/this->rx_go && this->fin && this->nr/
{
	nrid[$target, this->fd] = 0x100000000 | (uint32_t)rxrid[$target, this->fd];
	nrcmd[$target, this->fd] = rxcmd[$target, this->fd];
}

/* C2: the ring is full: the oldest request never got its reply (it stays
 * counted in @without, which every request taking a slot adds to). */
syscall::read:return, syscall::read_nocancel:return,
syscall::recv:return, syscall::recvfrom:return, syscall::recvfrom_nocancel:return,
syscall::readv:return, syscall::readv_nocancel:return,
syscall::recvmsg:return, syscall::recvmsg_nocancel:return
/this->rx_go && this->fin && !this->nr && this->hd - tail[$target, this->fd] >= SLOTS/
{
	tail[$target, this->fd] = tail[$target, this->fd] + 1;
}

/* C3: it expects a reply: take a slot, start its clock. */
syscall::read:return, syscall::read_nocancel:return,
syscall::recv:return, syscall::recvfrom:return, syscall::recvfrom_nocancel:return,
syscall::readv:return, syscall::readv_nocancel:return,
syscall::recvmsg:return, syscall::recvmsg_nocancel:return
/this->rx_go && this->fin && !this->nr/
{
	this->s = this->hd % SLOTS;
	slot_rid[$target, this->fd, this->s] = rxrid[$target, this->fd];
	slot_ts[$target, this->fd, this->s] = timestamp;
	slot_op[$target, this->fd, this->s] = this->o;
	slot_len[$target, this->fd, this->s] = rxlen[$target, this->fd];
	slot_cmd[$target, this->fd, this->s] = rxcmd[$target, this->fd];
	head[$target, this->fd] = this->hd + 1;
	@without = sum(1);
}

syscall::read:return, syscall::read_nocancel:return,
syscall::recv:return, syscall::recvfrom:return, syscall::recvfrom_nocancel:return,
syscall::readv:return, syscall::readv_nocancel:return,
syscall::recvmsg:return, syscall::recvmsg_nocancel:return
/this->rx_go/
{
	this->want = 0;
	this->fin = 0;
}
/* M: a new message at this->off, starting with a MsgHeader. */
syscall::read:return, syscall::read_nocancel:return,
syscall::recv:return, syscall::recvfrom:return, syscall::recvfrom_nocancel:return,
syscall::readv:return, syscall::readv_nocancel:return,
syscall::recvmsg:return, syscall::recvmsg_nocancel:return
/this->rx_go/
{
	this->it = !this->stop && this->off + 16 <= this->n;
}

syscall::read:return, syscall::read_nocancel:return,
syscall::recv:return, syscall::recvfrom:return, syscall::recvfrom_nocancel:return,
syscall::readv:return, syscall::readv_nocancel:return,
syscall::recvmsg:return, syscall::recvmsg_nocancel:return
/this->rx_go && this->it/
{
	this->p = (uint8_t *)copyin(this->buf + this->off, 16);
	this->q = *(uint64_t *)this->p;
	this->len = (int32_t)(this->q & 0xffffffff);
	this->rid = (int32_t)(this->q >> 32);
	this->q = *(uint64_t *)(this->p + 8);
	this->rto = (int32_t)(this->q & 0xffffffff);
	this->op = (int32_t)(this->q >> 32);
	this->valid = this->len >= 16 && this->len <= MAX_MESSAGE &&
	    (this->op == OP_MSG || this->op == OP_QUERY || this->op == OP_COMPRESSED ||
	    this->op == OP_INSERT || this->op == OP_UPDATE || this->op == OP_DELETE ||
	    this->op == OP_GET_MORE || this->op == OP_KILL_CURSORS);
}

/* not a request header: on a protocol connection it is malformed (framing is
 * reset), elsewhere (a log or data file of the same pid) it is not ours */
syscall::read:return, syscall::read_nocancel:return,
syscall::recv:return, syscall::recvfrom:return, syscall::recvfrom_nocancel:return,
syscall::readv:return, syscall::readv_nocancel:return,
syscall::recvmsg:return, syscall::recvmsg_nocancel:return
/this->rx_go && this->it && !this->valid/
{
	@malformed = sum(known[$target, this->fd] ? 1 : 0);
	rxrem[$target, this->fd] = 0; rxpos[$target, this->fd] = 0; rxneed[$target, this->fd] = 0;
	this->off = this->ret;
	this->stop = 1;
}

syscall::read:return, syscall::read_nocancel:return,
syscall::recv:return, syscall::recvfrom:return, syscall::recvfrom_nocancel:return,
syscall::readv:return, syscall::readv_nocancel:return,
syscall::recvmsg:return, syscall::recvmsg_nocancel:return
/this->rx_go && this->it && this->valid/
{
	known[$target, this->fd] = 1;
	rxop[$target, this->fd] = this->op;
	rxrid[$target, this->fd] = this->rid;
	rxlen[$target, this->fd] = this->len;
	rxmtc[$target, this->fd] = 0;
	/* until the body names it: the opCode's name, "[compressed]" for OP_COMPRESSED */
	rxcmd[$target, this->fd] = opnames[this->op == OP_COMPRESSED ? 0 : this->op];
	/* the header alone (mongod reads 16 bytes first): the name comes next */
	this->want = this->n - this->off > 16;
	this->rop = this->op;
	this->b = this->buf + this->off + 16;
	rxneed[$target, this->fd] = !this->want;
	this->fin = this->len <= this->ret - this->off;
	rxrem[$target, this->fd] = this->fin ? 0 : this->len - (this->ret - this->off);
	rxpos[$target, this->fd] = this->fin ? 0 : this->ret - this->off;
	this->off = this->fin ? this->off + this->len : this->ret;
}
/* B1: the command name from the body at this->b (message offset 16): B1-B3
 * find where it starts (this->na, 0: nowhere), B4 reads it. OP_MSG: flagBits
 * @0 (bit 1: moreToCome), first section kind @4; kind 0: the body document,
 * its first key (the command) @10. The first 9 bytes are read at once: each
 * read of user memory adds fault checks, and the verifier walks DTrace's error
 * path once per check (docs/probes.md, D, "Cost"). */
syscall::read:return, syscall::read_nocancel:return,
syscall::recv:return, syscall::recvfrom:return, syscall::recvfrom_nocancel:return,
syscall::readv:return, syscall::readv_nocancel:return,
syscall::recvmsg:return, syscall::recvmsg_nocancel:return
/this->rx_go && this->want/
{
	this->na = 0;
}

syscall::read:return, syscall::read_nocancel:return,
syscall::recv:return, syscall::recvfrom:return, syscall::recvfrom_nocancel:return,
syscall::readv:return, syscall::readv_nocancel:return,
syscall::recvmsg:return, syscall::recvmsg_nocancel:return
/this->rx_go && this->want && this->rop == OP_MSG/
{
	this->p = (uint8_t *)copyin(this->b, 9);
	this->q = *(uint64_t *)this->p;
	this->kind = (this->q >> 32) & 0xff;
	rxmtc[$target, this->fd] = (this->q & 2) != 0;
	this->na = this->kind == 0 ? this->b + 10 : 0;
	/* where a kind-1 section (its int32 size @5) ends: alloca'd bytes last
	 * only to the end of the clause */
	this->k0 = this->b + 5 + (int32_t)(*(uint64_t *)(this->p + 1) >> 32);
}

/* B2: a kind-1 document sequence first: the body follows it. */
syscall::read:return, syscall::read_nocancel:return,
syscall::recv:return, syscall::recvfrom:return, syscall::recvfrom_nocancel:return,
syscall::readv:return, syscall::readv_nocancel:return,
syscall::recvmsg:return, syscall::recvmsg_nocancel:return
/this->rx_go && this->want && this->rop == OP_MSG && this->kind == 1/
{
	this->na = *(uint8_t *)copyin(this->k0, 1) == 0 ? this->k0 + 6 : 0;
}

/* B3: OP_QUERY: flags @0, namespace @4; on "db.$cmd" (its last 5 bytes read as
 * one word) the query's first key, at 4 + nslen + 1 (nul) + 8 (skip, return) +
 * 4 (size) + 1 (type); else "find". */
syscall::read:return, syscall::read_nocancel:return,
syscall::recv:return, syscall::recvfrom:return, syscall::recvfrom_nocancel:return,
syscall::readv:return, syscall::readv_nocancel:return,
syscall::recvmsg:return, syscall::recvmsg_nocancel:return
/this->rx_go && this->want && this->rop == OP_QUERY/
{
	this->ns = copyinstr(this->b + 4, 63);
	this->nslen = strlen(this->ns);
	this->cmdns = this->nslen >= 5 &&
	    (*(uint64_t *)copyin(this->b + this->nslen - 1, 8) & 0xffffffffff) == 0x646d63242e;
	this->na = this->cmdns ? this->b + this->nslen + 18 : 0;
	rxcmd[$target, this->fd] = "find";
}

/* old drivers wrap the command: {$query: {cmd: ...}}: "$query" and its nul,
 * then 4 + 1 bytes on */
syscall::read:return, syscall::read_nocancel:return,
syscall::recv:return, syscall::recvfrom:return, syscall::recvfrom_nocancel:return,
syscall::readv:return, syscall::readv_nocancel:return,
syscall::recvmsg:return, syscall::recvmsg_nocancel:return
/this->rx_go && this->want && this->rop == OP_QUERY && this->cmdns/
{
	this->na = (*(uint64_t *)copyin(this->na, 8) & 0xffffffffffffff) == 0x797265757124 ?
	    this->na + 12 : this->na;
}

/* B4: the name. */
syscall::read:return, syscall::read_nocancel:return,
syscall::recv:return, syscall::recvfrom:return, syscall::recvfrom_nocancel:return,
syscall::readv:return, syscall::readv_nocancel:return,
syscall::recvmsg:return, syscall::recvmsg_nocancel:return
/this->rx_go && this->want && this->na != 0/
{
	rxcmd[$target, this->fd] = copyinstr(this->na, 32);
}

syscall::read:return, syscall::read_nocancel:return,
syscall::recv:return, syscall::recvfrom:return, syscall::recvfrom_nocancel:return,
syscall::readv:return, syscall::readv_nocancel:return,
syscall::recvmsg:return, syscall::recvmsg_nocancel:return
/this->rx_go && this->want/
{
	rxneed[$target, this->fd] = 0;
}
/* C1: the request is complete: count it. moreToCome and the legacy insert,
 * update, delete and killCursors expect no reply. */
syscall::read:return, syscall::read_nocancel:return,
syscall::recv:return, syscall::recvfrom:return, syscall::recvfrom_nocancel:return,
syscall::readv:return, syscall::readv_nocancel:return,
syscall::recvmsg:return, syscall::recvmsg_nocancel:return
/this->rx_go && this->fin/
{
	this->o = rxop[$target, this->fd];
	this->opname = opnames[this->o];
	this->nr = rxmtc[$target, this->fd] || this->o == OP_INSERT || this->o == OP_UPDATE ||
	    this->o == OP_DELETE || this->o == OP_KILL_CURSORS;
	@requests = sum(1);
	@noreply = sum(this->nr);
	@requests_by_op[this->opname] = count();
	@requests_by_cmd[rxcmd[$target, this->fd]] = count();
	rxneed[$target, this->fd] = 0;
	this->hd = head[$target, this->fd];
}

/* C1n: it expects no reply: its requestID and name are remembered, in case the
 * server answers it anyway (FerretDB answers the endSessions the Node.js driver
 * sends with moreToCome as it closes): P3n counts that reply as answered_no_reply,
 * not unmatched. A store of values already read: no copyin. Cost at start (one
 * day's 2-core machine, Oracle DTrace 8a1264bf): with P3n, mongo_time.d verifies
 * 2.15 million instructions instead of 2.08 (3.6% more; the name's copy about 30
 * thousand of the 75, nine unrolled copies of this clause in each receive program). */
syscall::read:return, syscall::read_nocancel:return,
syscall::recv:return, syscall::recvfrom:return, syscall::recvfrom_nocancel:return,
syscall::readv:return, syscall::readv_nocancel:return,
syscall::recvmsg:return, syscall::recvmsg_nocancel:return
/this->rx_go && this->fin && this->nr/
{
	nrid[$target, this->fd] = 0x100000000 | (uint32_t)rxrid[$target, this->fd];
	nrcmd[$target, this->fd] = rxcmd[$target, this->fd];
}

/* C2: the ring is full: the oldest request never got its reply (it stays
 * counted in @without, which every request taking a slot adds to). */
syscall::read:return, syscall::read_nocancel:return,
syscall::recv:return, syscall::recvfrom:return, syscall::recvfrom_nocancel:return,
syscall::readv:return, syscall::readv_nocancel:return,
syscall::recvmsg:return, syscall::recvmsg_nocancel:return
/this->rx_go && this->fin && !this->nr && this->hd - tail[$target, this->fd] >= SLOTS/
{
	tail[$target, this->fd] = tail[$target, this->fd] + 1;
}

/* C3: it expects a reply: take a slot, start its clock. */
syscall::read:return, syscall::read_nocancel:return,
syscall::recv:return, syscall::recvfrom:return, syscall::recvfrom_nocancel:return,
syscall::readv:return, syscall::readv_nocancel:return,
syscall::recvmsg:return, syscall::recvmsg_nocancel:return
/this->rx_go && this->fin && !this->nr/
{
	this->s = this->hd % SLOTS;
	slot_rid[$target, this->fd, this->s] = rxrid[$target, this->fd];
	slot_ts[$target, this->fd, this->s] = timestamp;
	slot_op[$target, this->fd, this->s] = this->o;
	slot_len[$target, this->fd, this->s] = rxlen[$target, this->fd];
	slot_cmd[$target, this->fd, this->s] = rxcmd[$target, this->fd];
	head[$target, this->fd] = this->hd + 1;
	@without = sum(1);
}

syscall::read:return, syscall::read_nocancel:return,
syscall::recv:return, syscall::recvfrom:return, syscall::recvfrom_nocancel:return,
syscall::readv:return, syscall::readv_nocancel:return,
syscall::recvmsg:return, syscall::recvmsg_nocancel:return
/this->rx_go/
{
	this->want = 0;
	this->fin = 0;
}
/* M: a new message at this->off, starting with a MsgHeader. */
syscall::read:return, syscall::read_nocancel:return,
syscall::recv:return, syscall::recvfrom:return, syscall::recvfrom_nocancel:return,
syscall::readv:return, syscall::readv_nocancel:return,
syscall::recvmsg:return, syscall::recvmsg_nocancel:return
/this->rx_go/
{
	this->it = !this->stop && this->off + 16 <= this->n;
}

syscall::read:return, syscall::read_nocancel:return,
syscall::recv:return, syscall::recvfrom:return, syscall::recvfrom_nocancel:return,
syscall::readv:return, syscall::readv_nocancel:return,
syscall::recvmsg:return, syscall::recvmsg_nocancel:return
/this->rx_go && this->it/
{
	this->p = (uint8_t *)copyin(this->buf + this->off, 16);
	this->q = *(uint64_t *)this->p;
	this->len = (int32_t)(this->q & 0xffffffff);
	this->rid = (int32_t)(this->q >> 32);
	this->q = *(uint64_t *)(this->p + 8);
	this->rto = (int32_t)(this->q & 0xffffffff);
	this->op = (int32_t)(this->q >> 32);
	this->valid = this->len >= 16 && this->len <= MAX_MESSAGE &&
	    (this->op == OP_MSG || this->op == OP_QUERY || this->op == OP_COMPRESSED ||
	    this->op == OP_INSERT || this->op == OP_UPDATE || this->op == OP_DELETE ||
	    this->op == OP_GET_MORE || this->op == OP_KILL_CURSORS);
}

/* not a request header: on a protocol connection it is malformed (framing is
 * reset), elsewhere (a log or data file of the same pid) it is not ours */
syscall::read:return, syscall::read_nocancel:return,
syscall::recv:return, syscall::recvfrom:return, syscall::recvfrom_nocancel:return,
syscall::readv:return, syscall::readv_nocancel:return,
syscall::recvmsg:return, syscall::recvmsg_nocancel:return
/this->rx_go && this->it && !this->valid/
{
	@malformed = sum(known[$target, this->fd] ? 1 : 0);
	rxrem[$target, this->fd] = 0; rxpos[$target, this->fd] = 0; rxneed[$target, this->fd] = 0;
	this->off = this->ret;
	this->stop = 1;
}

syscall::read:return, syscall::read_nocancel:return,
syscall::recv:return, syscall::recvfrom:return, syscall::recvfrom_nocancel:return,
syscall::readv:return, syscall::readv_nocancel:return,
syscall::recvmsg:return, syscall::recvmsg_nocancel:return
/this->rx_go && this->it && this->valid/
{
	known[$target, this->fd] = 1;
	rxop[$target, this->fd] = this->op;
	rxrid[$target, this->fd] = this->rid;
	rxlen[$target, this->fd] = this->len;
	rxmtc[$target, this->fd] = 0;
	/* until the body names it: the opCode's name, "[compressed]" for OP_COMPRESSED */
	rxcmd[$target, this->fd] = opnames[this->op == OP_COMPRESSED ? 0 : this->op];
	/* the header alone (mongod reads 16 bytes first): the name comes next */
	this->want = this->n - this->off > 16;
	this->rop = this->op;
	this->b = this->buf + this->off + 16;
	rxneed[$target, this->fd] = !this->want;
	this->fin = this->len <= this->ret - this->off;
	rxrem[$target, this->fd] = this->fin ? 0 : this->len - (this->ret - this->off);
	rxpos[$target, this->fd] = this->fin ? 0 : this->ret - this->off;
	this->off = this->fin ? this->off + this->len : this->ret;
}
/* B1: the command name from the body at this->b (message offset 16): B1-B3
 * find where it starts (this->na, 0: nowhere), B4 reads it. OP_MSG: flagBits
 * @0 (bit 1: moreToCome), first section kind @4; kind 0: the body document,
 * its first key (the command) @10. The first 9 bytes are read at once: each
 * read of user memory adds fault checks, and the verifier walks DTrace's error
 * path once per check (docs/probes.md, D, "Cost"). */
syscall::read:return, syscall::read_nocancel:return,
syscall::recv:return, syscall::recvfrom:return, syscall::recvfrom_nocancel:return,
syscall::readv:return, syscall::readv_nocancel:return,
syscall::recvmsg:return, syscall::recvmsg_nocancel:return
/this->rx_go && this->want/
{
	this->na = 0;
}

syscall::read:return, syscall::read_nocancel:return,
syscall::recv:return, syscall::recvfrom:return, syscall::recvfrom_nocancel:return,
syscall::readv:return, syscall::readv_nocancel:return,
syscall::recvmsg:return, syscall::recvmsg_nocancel:return
/this->rx_go && this->want && this->rop == OP_MSG/
{
	this->p = (uint8_t *)copyin(this->b, 9);
	this->q = *(uint64_t *)this->p;
	this->kind = (this->q >> 32) & 0xff;
	rxmtc[$target, this->fd] = (this->q & 2) != 0;
	this->na = this->kind == 0 ? this->b + 10 : 0;
	/* where a kind-1 section (its int32 size @5) ends: alloca'd bytes last
	 * only to the end of the clause */
	this->k0 = this->b + 5 + (int32_t)(*(uint64_t *)(this->p + 1) >> 32);
}

/* B2: a kind-1 document sequence first: the body follows it. */
syscall::read:return, syscall::read_nocancel:return,
syscall::recv:return, syscall::recvfrom:return, syscall::recvfrom_nocancel:return,
syscall::readv:return, syscall::readv_nocancel:return,
syscall::recvmsg:return, syscall::recvmsg_nocancel:return
/this->rx_go && this->want && this->rop == OP_MSG && this->kind == 1/
{
	this->na = *(uint8_t *)copyin(this->k0, 1) == 0 ? this->k0 + 6 : 0;
}

/* B3: OP_QUERY: flags @0, namespace @4; on "db.$cmd" (its last 5 bytes read as
 * one word) the query's first key, at 4 + nslen + 1 (nul) + 8 (skip, return) +
 * 4 (size) + 1 (type); else "find". */
syscall::read:return, syscall::read_nocancel:return,
syscall::recv:return, syscall::recvfrom:return, syscall::recvfrom_nocancel:return,
syscall::readv:return, syscall::readv_nocancel:return,
syscall::recvmsg:return, syscall::recvmsg_nocancel:return
/this->rx_go && this->want && this->rop == OP_QUERY/
{
	this->ns = copyinstr(this->b + 4, 63);
	this->nslen = strlen(this->ns);
	this->cmdns = this->nslen >= 5 &&
	    (*(uint64_t *)copyin(this->b + this->nslen - 1, 8) & 0xffffffffff) == 0x646d63242e;
	this->na = this->cmdns ? this->b + this->nslen + 18 : 0;
	rxcmd[$target, this->fd] = "find";
}

/* old drivers wrap the command: {$query: {cmd: ...}}: "$query" and its nul,
 * then 4 + 1 bytes on */
syscall::read:return, syscall::read_nocancel:return,
syscall::recv:return, syscall::recvfrom:return, syscall::recvfrom_nocancel:return,
syscall::readv:return, syscall::readv_nocancel:return,
syscall::recvmsg:return, syscall::recvmsg_nocancel:return
/this->rx_go && this->want && this->rop == OP_QUERY && this->cmdns/
{
	this->na = (*(uint64_t *)copyin(this->na, 8) & 0xffffffffffffff) == 0x797265757124 ?
	    this->na + 12 : this->na;
}

/* B4: the name. */
syscall::read:return, syscall::read_nocancel:return,
syscall::recv:return, syscall::recvfrom:return, syscall::recvfrom_nocancel:return,
syscall::readv:return, syscall::readv_nocancel:return,
syscall::recvmsg:return, syscall::recvmsg_nocancel:return
/this->rx_go && this->want && this->na != 0/
{
	rxcmd[$target, this->fd] = copyinstr(this->na, 32);
}

syscall::read:return, syscall::read_nocancel:return,
syscall::recv:return, syscall::recvfrom:return, syscall::recvfrom_nocancel:return,
syscall::readv:return, syscall::readv_nocancel:return,
syscall::recvmsg:return, syscall::recvmsg_nocancel:return
/this->rx_go && this->want/
{
	rxneed[$target, this->fd] = 0;
}
/* C1: the request is complete: count it. moreToCome and the legacy insert,
 * update, delete and killCursors expect no reply. */
syscall::read:return, syscall::read_nocancel:return,
syscall::recv:return, syscall::recvfrom:return, syscall::recvfrom_nocancel:return,
syscall::readv:return, syscall::readv_nocancel:return,
syscall::recvmsg:return, syscall::recvmsg_nocancel:return
/this->rx_go && this->fin/
{
	this->o = rxop[$target, this->fd];
	this->opname = opnames[this->o];
	this->nr = rxmtc[$target, this->fd] || this->o == OP_INSERT || this->o == OP_UPDATE ||
	    this->o == OP_DELETE || this->o == OP_KILL_CURSORS;
	@requests = sum(1);
	@noreply = sum(this->nr);
	@requests_by_op[this->opname] = count();
	@requests_by_cmd[rxcmd[$target, this->fd]] = count();
	rxneed[$target, this->fd] = 0;
	this->hd = head[$target, this->fd];
}

/* C1n: it expects no reply: its requestID and name are remembered, in case the
 * server answers it anyway (FerretDB answers the endSessions the Node.js driver
 * sends with moreToCome as it closes): P3n counts that reply as answered_no_reply,
 * not unmatched. A store of values already read: no copyin. Cost at start (one
 * day's 2-core machine, Oracle DTrace 8a1264bf): with P3n, mongo_time.d verifies
 * 2.15 million instructions instead of 2.08 (3.6% more; the name's copy about 30
 * thousand of the 75, nine unrolled copies of this clause in each receive program). */
syscall::read:return, syscall::read_nocancel:return,
syscall::recv:return, syscall::recvfrom:return, syscall::recvfrom_nocancel:return,
syscall::readv:return, syscall::readv_nocancel:return,
syscall::recvmsg:return, syscall::recvmsg_nocancel:return
/this->rx_go && this->fin && this->nr/
{
	nrid[$target, this->fd] = 0x100000000 | (uint32_t)rxrid[$target, this->fd];
	nrcmd[$target, this->fd] = rxcmd[$target, this->fd];
}

/* C2: the ring is full: the oldest request never got its reply (it stays
 * counted in @without, which every request taking a slot adds to). */
syscall::read:return, syscall::read_nocancel:return,
syscall::recv:return, syscall::recvfrom:return, syscall::recvfrom_nocancel:return,
syscall::readv:return, syscall::readv_nocancel:return,
syscall::recvmsg:return, syscall::recvmsg_nocancel:return
/this->rx_go && this->fin && !this->nr && this->hd - tail[$target, this->fd] >= SLOTS/
{
	tail[$target, this->fd] = tail[$target, this->fd] + 1;
}

/* C3: it expects a reply: take a slot, start its clock. */
syscall::read:return, syscall::read_nocancel:return,
syscall::recv:return, syscall::recvfrom:return, syscall::recvfrom_nocancel:return,
syscall::readv:return, syscall::readv_nocancel:return,
syscall::recvmsg:return, syscall::recvmsg_nocancel:return
/this->rx_go && this->fin && !this->nr/
{
	this->s = this->hd % SLOTS;
	slot_rid[$target, this->fd, this->s] = rxrid[$target, this->fd];
	slot_ts[$target, this->fd, this->s] = timestamp;
	slot_op[$target, this->fd, this->s] = this->o;
	slot_len[$target, this->fd, this->s] = rxlen[$target, this->fd];
	slot_cmd[$target, this->fd, this->s] = rxcmd[$target, this->fd];
	head[$target, this->fd] = this->hd + 1;
	@without = sum(1);
}

syscall::read:return, syscall::read_nocancel:return,
syscall::recv:return, syscall::recvfrom:return, syscall::recvfrom_nocancel:return,
syscall::readv:return, syscall::readv_nocancel:return,
syscall::recvmsg:return, syscall::recvmsg_nocancel:return
/this->rx_go/
{
	this->want = 0;
	this->fin = 0;
}
/* M: a new message at this->off, starting with a MsgHeader. */
syscall::read:return, syscall::read_nocancel:return,
syscall::recv:return, syscall::recvfrom:return, syscall::recvfrom_nocancel:return,
syscall::readv:return, syscall::readv_nocancel:return,
syscall::recvmsg:return, syscall::recvmsg_nocancel:return
/this->rx_go/
{
	this->it = !this->stop && this->off + 16 <= this->n;
}

syscall::read:return, syscall::read_nocancel:return,
syscall::recv:return, syscall::recvfrom:return, syscall::recvfrom_nocancel:return,
syscall::readv:return, syscall::readv_nocancel:return,
syscall::recvmsg:return, syscall::recvmsg_nocancel:return
/this->rx_go && this->it/
{
	this->p = (uint8_t *)copyin(this->buf + this->off, 16);
	this->q = *(uint64_t *)this->p;
	this->len = (int32_t)(this->q & 0xffffffff);
	this->rid = (int32_t)(this->q >> 32);
	this->q = *(uint64_t *)(this->p + 8);
	this->rto = (int32_t)(this->q & 0xffffffff);
	this->op = (int32_t)(this->q >> 32);
	this->valid = this->len >= 16 && this->len <= MAX_MESSAGE &&
	    (this->op == OP_MSG || this->op == OP_QUERY || this->op == OP_COMPRESSED ||
	    this->op == OP_INSERT || this->op == OP_UPDATE || this->op == OP_DELETE ||
	    this->op == OP_GET_MORE || this->op == OP_KILL_CURSORS);
}

/* not a request header: on a protocol connection it is malformed (framing is
 * reset), elsewhere (a log or data file of the same pid) it is not ours */
syscall::read:return, syscall::read_nocancel:return,
syscall::recv:return, syscall::recvfrom:return, syscall::recvfrom_nocancel:return,
syscall::readv:return, syscall::readv_nocancel:return,
syscall::recvmsg:return, syscall::recvmsg_nocancel:return
/this->rx_go && this->it && !this->valid/
{
	@malformed = sum(known[$target, this->fd] ? 1 : 0);
	rxrem[$target, this->fd] = 0; rxpos[$target, this->fd] = 0; rxneed[$target, this->fd] = 0;
	this->off = this->ret;
	this->stop = 1;
}

syscall::read:return, syscall::read_nocancel:return,
syscall::recv:return, syscall::recvfrom:return, syscall::recvfrom_nocancel:return,
syscall::readv:return, syscall::readv_nocancel:return,
syscall::recvmsg:return, syscall::recvmsg_nocancel:return
/this->rx_go && this->it && this->valid/
{
	known[$target, this->fd] = 1;
	rxop[$target, this->fd] = this->op;
	rxrid[$target, this->fd] = this->rid;
	rxlen[$target, this->fd] = this->len;
	rxmtc[$target, this->fd] = 0;
	/* until the body names it: the opCode's name, "[compressed]" for OP_COMPRESSED */
	rxcmd[$target, this->fd] = opnames[this->op == OP_COMPRESSED ? 0 : this->op];
	/* the header alone (mongod reads 16 bytes first): the name comes next */
	this->want = this->n - this->off > 16;
	this->rop = this->op;
	this->b = this->buf + this->off + 16;
	rxneed[$target, this->fd] = !this->want;
	this->fin = this->len <= this->ret - this->off;
	rxrem[$target, this->fd] = this->fin ? 0 : this->len - (this->ret - this->off);
	rxpos[$target, this->fd] = this->fin ? 0 : this->ret - this->off;
	this->off = this->fin ? this->off + this->len : this->ret;
}
/* B1: the command name from the body at this->b (message offset 16): B1-B3
 * find where it starts (this->na, 0: nowhere), B4 reads it. OP_MSG: flagBits
 * @0 (bit 1: moreToCome), first section kind @4; kind 0: the body document,
 * its first key (the command) @10. The first 9 bytes are read at once: each
 * read of user memory adds fault checks, and the verifier walks DTrace's error
 * path once per check (docs/probes.md, D, "Cost"). */
syscall::read:return, syscall::read_nocancel:return,
syscall::recv:return, syscall::recvfrom:return, syscall::recvfrom_nocancel:return,
syscall::readv:return, syscall::readv_nocancel:return,
syscall::recvmsg:return, syscall::recvmsg_nocancel:return
/this->rx_go && this->want/
{
	this->na = 0;
}

syscall::read:return, syscall::read_nocancel:return,
syscall::recv:return, syscall::recvfrom:return, syscall::recvfrom_nocancel:return,
syscall::readv:return, syscall::readv_nocancel:return,
syscall::recvmsg:return, syscall::recvmsg_nocancel:return
/this->rx_go && this->want && this->rop == OP_MSG/
{
	this->p = (uint8_t *)copyin(this->b, 9);
	this->q = *(uint64_t *)this->p;
	this->kind = (this->q >> 32) & 0xff;
	rxmtc[$target, this->fd] = (this->q & 2) != 0;
	this->na = this->kind == 0 ? this->b + 10 : 0;
	/* where a kind-1 section (its int32 size @5) ends: alloca'd bytes last
	 * only to the end of the clause */
	this->k0 = this->b + 5 + (int32_t)(*(uint64_t *)(this->p + 1) >> 32);
}

/* B2: a kind-1 document sequence first: the body follows it. */
syscall::read:return, syscall::read_nocancel:return,
syscall::recv:return, syscall::recvfrom:return, syscall::recvfrom_nocancel:return,
syscall::readv:return, syscall::readv_nocancel:return,
syscall::recvmsg:return, syscall::recvmsg_nocancel:return
/this->rx_go && this->want && this->rop == OP_MSG && this->kind == 1/
{
	this->na = *(uint8_t *)copyin(this->k0, 1) == 0 ? this->k0 + 6 : 0;
}

/* B3: OP_QUERY: flags @0, namespace @4; on "db.$cmd" (its last 5 bytes read as
 * one word) the query's first key, at 4 + nslen + 1 (nul) + 8 (skip, return) +
 * 4 (size) + 1 (type); else "find". */
syscall::read:return, syscall::read_nocancel:return,
syscall::recv:return, syscall::recvfrom:return, syscall::recvfrom_nocancel:return,
syscall::readv:return, syscall::readv_nocancel:return,
syscall::recvmsg:return, syscall::recvmsg_nocancel:return
/this->rx_go && this->want && this->rop == OP_QUERY/
{
	this->ns = copyinstr(this->b + 4, 63);
	this->nslen = strlen(this->ns);
	this->cmdns = this->nslen >= 5 &&
	    (*(uint64_t *)copyin(this->b + this->nslen - 1, 8) & 0xffffffffff) == 0x646d63242e;
	this->na = this->cmdns ? this->b + this->nslen + 18 : 0;
	rxcmd[$target, this->fd] = "find";
}

/* old drivers wrap the command: {$query: {cmd: ...}}: "$query" and its nul,
 * then 4 + 1 bytes on */
syscall::read:return, syscall::read_nocancel:return,
syscall::recv:return, syscall::recvfrom:return, syscall::recvfrom_nocancel:return,
syscall::readv:return, syscall::readv_nocancel:return,
syscall::recvmsg:return, syscall::recvmsg_nocancel:return
/this->rx_go && this->want && this->rop == OP_QUERY && this->cmdns/
{
	this->na = (*(uint64_t *)copyin(this->na, 8) & 0xffffffffffffff) == 0x797265757124 ?
	    this->na + 12 : this->na;
}

/* B4: the name. */
syscall::read:return, syscall::read_nocancel:return,
syscall::recv:return, syscall::recvfrom:return, syscall::recvfrom_nocancel:return,
syscall::readv:return, syscall::readv_nocancel:return,
syscall::recvmsg:return, syscall::recvmsg_nocancel:return
/this->rx_go && this->want && this->na != 0/
{
	rxcmd[$target, this->fd] = copyinstr(this->na, 32);
}

syscall::read:return, syscall::read_nocancel:return,
syscall::recv:return, syscall::recvfrom:return, syscall::recvfrom_nocancel:return,
syscall::readv:return, syscall::readv_nocancel:return,
syscall::recvmsg:return, syscall::recvmsg_nocancel:return
/this->rx_go && this->want/
{
	rxneed[$target, this->fd] = 0;
}
/* C1: the request is complete: count it. moreToCome and the legacy insert,
 * update, delete and killCursors expect no reply. */
syscall::read:return, syscall::read_nocancel:return,
syscall::recv:return, syscall::recvfrom:return, syscall::recvfrom_nocancel:return,
syscall::readv:return, syscall::readv_nocancel:return,
syscall::recvmsg:return, syscall::recvmsg_nocancel:return
/this->rx_go && this->fin/
{
	this->o = rxop[$target, this->fd];
	this->opname = opnames[this->o];
	this->nr = rxmtc[$target, this->fd] || this->o == OP_INSERT || this->o == OP_UPDATE ||
	    this->o == OP_DELETE || this->o == OP_KILL_CURSORS;
	@requests = sum(1);
	@noreply = sum(this->nr);
	@requests_by_op[this->opname] = count();
	@requests_by_cmd[rxcmd[$target, this->fd]] = count();
	rxneed[$target, this->fd] = 0;
	this->hd = head[$target, this->fd];
}

/* C1n: it expects no reply: its requestID and name are remembered, in case the
 * server answers it anyway (FerretDB answers the endSessions the Node.js driver
 * sends with moreToCome as it closes): P3n counts that reply as answered_no_reply,
 * not unmatched. A store of values already read: no copyin. Cost at start (one
 * day's 2-core machine, Oracle DTrace 8a1264bf): with P3n, mongo_time.d verifies
 * 2.15 million instructions instead of 2.08 (3.6% more; the name's copy about 30
 * thousand of the 75, nine unrolled copies of this clause in each receive program). */
syscall::read:return, syscall::read_nocancel:return,
syscall::recv:return, syscall::recvfrom:return, syscall::recvfrom_nocancel:return,
syscall::readv:return, syscall::readv_nocancel:return,
syscall::recvmsg:return, syscall::recvmsg_nocancel:return
/this->rx_go && this->fin && this->nr/
{
	nrid[$target, this->fd] = 0x100000000 | (uint32_t)rxrid[$target, this->fd];
	nrcmd[$target, this->fd] = rxcmd[$target, this->fd];
}

/* C2: the ring is full: the oldest request never got its reply (it stays
 * counted in @without, which every request taking a slot adds to). */
syscall::read:return, syscall::read_nocancel:return,
syscall::recv:return, syscall::recvfrom:return, syscall::recvfrom_nocancel:return,
syscall::readv:return, syscall::readv_nocancel:return,
syscall::recvmsg:return, syscall::recvmsg_nocancel:return
/this->rx_go && this->fin && !this->nr && this->hd - tail[$target, this->fd] >= SLOTS/
{
	tail[$target, this->fd] = tail[$target, this->fd] + 1;
}

/* C3: it expects a reply: take a slot, start its clock. */
syscall::read:return, syscall::read_nocancel:return,
syscall::recv:return, syscall::recvfrom:return, syscall::recvfrom_nocancel:return,
syscall::readv:return, syscall::readv_nocancel:return,
syscall::recvmsg:return, syscall::recvmsg_nocancel:return
/this->rx_go && this->fin && !this->nr/
{
	this->s = this->hd % SLOTS;
	slot_rid[$target, this->fd, this->s] = rxrid[$target, this->fd];
	slot_ts[$target, this->fd, this->s] = timestamp;
	slot_op[$target, this->fd, this->s] = this->o;
	slot_len[$target, this->fd, this->s] = rxlen[$target, this->fd];
	slot_cmd[$target, this->fd, this->s] = rxcmd[$target, this->fd];
	head[$target, this->fd] = this->hd + 1;
	@without = sum(1);
}

syscall::read:return, syscall::read_nocancel:return,
syscall::recv:return, syscall::recvfrom:return, syscall::recvfrom_nocancel:return,
syscall::readv:return, syscall::readv_nocancel:return,
syscall::recvmsg:return, syscall::recvmsg_nocancel:return
/this->rx_go/
{
	this->want = 0;
	this->fin = 0;
}

/* R3: a header split across receives, more than 8 messages, or bytes past the
 * first iovec: the framing is lost until the next valid header. */
syscall::read:return, syscall::read_nocancel:return,
syscall::recv:return, syscall::recvfrom:return, syscall::recvfrom_nocancel:return,
syscall::readv:return, syscall::readv_nocancel:return,
syscall::recvmsg:return, syscall::recvmsg_nocancel:return
/this->rx_go && this->off < this->ret && known[$target, this->fd]/
{
	@malformed = sum(1);
	rxrem[$target, this->fd] = 0; rxpos[$target, this->fd] = 0; rxneed[$target, this->fd] = 0;
}

syscall::read:return, syscall::read_nocancel:return,
syscall::recv:return, syscall::recvfrom:return, syscall::recvfrom_nocancel:return,
syscall::readv:return, syscall::readv_nocancel:return,
syscall::recvmsg:return, syscall::recvmsg_nocancel:return
/self->rx_armed/
{
	self->rx_armed = 0;
	self->rx_fd = 0;
	self->rx_buf = 0;
	self->rx_cap = 0;
}

/* ---- sends: the buffer and the time at entry, framing at return ---------------- */

/* only on connections that sent a valid request: log and data-file writes of
 * the same pid cost a dynamic-variable lookup and nothing more */
syscall::write:entry, syscall::write_nocancel:entry,
syscall::send:entry, syscall::sendto:entry, syscall::sendto_nocancel:entry
/pid == $target && known[$target, (int)arg0]/
{
	self->tx_fd = (int)arg0;
	self->tx_buf = (uint64_t)arg1;
	self->tx_cap = (int64_t)arg2;
	self->tx_armed = 1;
}

syscall::writev:entry, syscall::writev_nocancel:entry
/pid == $target && (int)arg2 > 0 && known[$target, (int)arg0]/
{
	self->tx_fd = (int)arg0;
	self->tx_buf = *(uint64_t *)copyin(arg1, 8);
	self->tx_cap = *(int64_t *)copyin(arg1 + 8, 8);
	self->tx_armed = 1;
}

syscall::sendmsg:entry, syscall::sendmsg_nocancel:entry
/pid == $target && known[$target, (int)arg0]/
{
	self->tx_iov = *(uint64_t *)copyin(arg1 + 16, 8);
	self->tx_iovlen = *(int64_t *)copyin(arg1 + 24, 8);
	self->tx_fd = (int)arg0;
}

syscall::sendmsg:entry, syscall::sendmsg_nocancel:entry
/pid == $target && self->tx_iovlen > 0 && self->tx_iov != 0/
{
	self->tx_buf = *(uint64_t *)copyin(self->tx_iov, 8);
	self->tx_cap = *(int64_t *)copyin(self->tx_iov + 8, 8);
	self->tx_armed = 1;
}

syscall::sendmsg:entry, syscall::sendmsg_nocancel:entry
/pid == $target/
{
	self->tx_iov = 0;
	self->tx_iovlen = 0;
}

/* The reply's clock stops here, at entry, before the kernel copies it out. */
syscall::write:entry, syscall::write_nocancel:entry,
syscall::send:entry, syscall::sendto:entry, syscall::sendto_nocancel:entry,
syscall::writev:entry, syscall::writev_nocancel:entry,
syscall::sendmsg:entry, syscall::sendmsg_nocancel:entry
/self->tx_armed/
{
	self->tx_ts = timestamp;
}

/* T0: see R0. */
syscall::write:return, syscall::write_nocancel:return,
syscall::send:return, syscall::sendto:return, syscall::sendto_nocancel:return,
syscall::writev:return, syscall::writev_nocancel:return,
syscall::sendmsg:return, syscall::sendmsg_nocancel:return
{
	this->tx_go = 0;
}

syscall::write:return, syscall::write_nocancel:return,
syscall::send:return, syscall::sendto:return, syscall::sendto_nocancel:return,
syscall::writev:return, syscall::writev_nocancel:return,
syscall::sendmsg:return, syscall::sendmsg_nocancel:return
/self->tx_armed/
{
	this->ret = (int64_t)arg1;
	this->fd = self->tx_fd;
	this->buf = self->tx_buf;
	this->n = this->ret < self->tx_cap ? this->ret : self->tx_cap;
	this->ts = self->tx_ts;
	this->rem = txrem[$target, this->fd];
	this->have = txhave[$target, this->fd];
	this->off = 0;
	this->stop = 0;
	this->it = 0;
	this->valid = 0;
	this->sp = 0;
	this->tx_go = this->ret > 0 && known[$target, this->fd];
}

/* T1: the rest of a reply split across sends. */
syscall::write:return, syscall::write_nocancel:return,
syscall::send:return, syscall::sendto:return, syscall::sendto_nocancel:return,
syscall::writev:return, syscall::writev_nocancel:return,
syscall::sendmsg:return, syscall::sendmsg_nocancel:return
/this->tx_go && this->rem > 0/
{
	this->off = this->rem < this->ret ? this->rem : this->ret;
	txrem[$target, this->fd] = this->rem - this->off;
}

/*
 * T2: a reply whose first this->have bytes (of its first 40: the header and the
 * body's first element, where a failure's ok: 0 is) came in earlier sends, kept
 * in txh0..txh4: add this send's. Until 40 (or the whole reply) are known it
 * waits; then it is matched and timed from its first send (this->off < 0: its
 * bytes past this->have are this buffer's), its failure decided here from the
 * 40 bytes (this->sp; the code, after them, from this buffer by F3/F4).
 */
syscall::write:return, syscall::write_nocancel:return,
syscall::send:return, syscall::sendto:return, syscall::sendto_nocancel:return,
syscall::writev:return, syscall::writev_nocancel:return,
syscall::sendmsg:return, syscall::sendmsg_nocancel:return
/this->tx_go && this->have > 0/
{
	this->w = (uint64_t *)alloca(48);
	this->w[0] = txh0[$target, this->fd]; this->w[1] = txh1[$target, this->fd];
	this->w[2] = txh2[$target, this->fd]; this->w[3] = txh3[$target, this->fd];
	this->w[4] = txh4[$target, this->fd]; this->w[5] = 0;
	this->got = this->n < 40 - this->have ? this->n : 40 - this->have;
	copyinto(this->buf, this->got, (char *)this->w + this->have);
	this->got = this->have + this->got;
	/* each word read once: every read through the pointer is checked, and
	 * the verifier walks DTrace's error path once per check */
	this->w0 = this->w[0]; this->w1 = this->w[1]; this->w2 = this->w[2];
	this->w3 = this->w[3]; this->w4 = this->w[4];
	this->len = (int32_t)(this->w0 & 0xffffffff);
	this->rid = (int32_t)(this->w0 >> 32);
	this->rto = (int32_t)(this->w1 & 0xffffffff);
	this->op = (int32_t)(this->w1 >> 32);
	this->valid = this->got >= 16 && this->len >= 16 && this->len <= MAX_MESSAGE &&
	    (this->op == OP_MSG || this->op == OP_REPLY || this->op == OP_COMPRESSED);
	/* more to wait for: not yet 40 bytes nor the whole reply, and this send
	 * ended there (a header not yet complete, or a valid one) */
	this->cut = this->got < 40 && !(this->valid && this->got >= this->len) &&
	    this->n == this->ret && (this->got < 16 || this->valid);
	this->stop = this->cut ? 2 : !this->valid;
	this->valid = this->valid && !this->cut;
	this->mtc = this->op == OP_MSG && this->got >= 20 && (this->w2 & 2) != 0;
	this->ts = txts[$target, this->fd];
	this->off = -this->have;
	/* the failure test on the gathered bytes (F, F1, F2 on a buffer): OP_MSG,
	 * kind 0 @20, ok @25 ("ok" @26), its value @29; OP_REPLY: QueryFailure
	 * (responseFlags @16) here, its document @40 by F1 from this buffer */
	this->sp = 1;
	this->ey = this->w3 >> 8 | this->w4 << 56;
	this->et = this->ey & 0xff;
	this->vs = !(this->op == OP_MSG && this->got >= 30 && ((this->w2 >> 32) & 0xff) == 0 &&
	    (this->ey & 0xffffff00) == 0x006b6f00) ? 0 :
	    (this->et == 1 || this->et == 0x12) && this->got >= 37 ? 8 :
	    this->et == 0x10 && this->got >= 33 ? 4 : this->et == 8 ? 1 : 0;
	this->vs = 29 + this->vs <= this->len ? this->vs : 0;
	this->v = this->w3 >> 40 | this->w4 << 24;
	this->v = this->vs == 8 ? this->v << (this->et == 1 ? 1 : 0) :
	    this->vs == 4 ? this->v & 0xffffffff : this->v & 0xff;
	this->ep = this->vs != 0 && this->v == 0 ? 29 + this->vs : 0;
	this->err = this->ep != 0 || (this->op == OP_REPLY && this->got >= 20 &&
	    (this->w2 & 2) != 0) ? -1 : 0;
	this->e = this->op == OP_REPLY && this->len >= 48 && this->off + 48 <= this->n ? 40 : 0;
	this->vs = 0;
	txh0[$target, this->fd] = this->cut ? this->w0 : 0;
	txh1[$target, this->fd] = this->cut ? this->w1 : 0;
	txh2[$target, this->fd] = this->cut ? this->w2 : 0;
	txh3[$target, this->fd] = this->cut ? this->w3 : 0;
	txh4[$target, this->fd] = this->cut ? this->w4 : 0;
	txhave[$target, this->fd] = this->cut ? this->got : 0;
	txts[$target, this->fd] = this->cut ? this->ts : 0;
	this->off = this->cut ? this->ret : this->off;
}

/* ... not a reply header, or its first 40 bytes continue past the first iovec */
syscall::write:return, syscall::write_nocancel:return,
syscall::send:return, syscall::sendto:return, syscall::sendto_nocancel:return,
syscall::writev:return, syscall::writev_nocancel:return,
syscall::sendmsg:return, syscall::sendmsg_nocancel:return
/this->tx_go && this->have > 0 && this->stop == 1/
{
	@malformed = sum(1);
	this->off = this->ret;
}
/* P1: a reply header (this->len, rid, rto, op, mtc) at this->off (negative when
 * its first bytes came in an earlier send), sent at this->ts. Match it against
 * the outstanding requests, oldest first; older ones skipped over never got
 * their reply (they stay counted in @without). */
syscall::write:return, syscall::write_nocancel:return,
syscall::send:return, syscall::sendto:return, syscall::sendto_nocancel:return,
syscall::writev:return, syscall::writev_nocancel:return,
syscall::sendmsg:return, syscall::sendmsg_nocancel:return
/this->tx_go && this->valid/
{
	this->tl = tail[$target, this->fd];
	this->hd = head[$target, this->fd];
	this->k = this->tl < this->hd &&
	    slot_rid[$target, this->fd, this->tl % SLOTS] == this->rto ? 0 :
	    this->tl + 1 < this->hd &&
	    slot_rid[$target, this->fd, (this->tl + 1) % SLOTS] == this->rto ? 1 :
	    this->tl + 2 < this->hd &&
	    slot_rid[$target, this->fd, (this->tl + 2) % SLOTS] == this->rto ? 2 :
	    this->tl + 3 < this->hd &&
	    slot_rid[$target, this->fd, (this->tl + 3) % SLOTS] == this->rto ? 3 : SLOTS;
}

/*
 * F: did the matched reply fail? (probes/README.md, "Replies that failed"):
 * this->err 0 (no), its code, or -1 (failed, no code). this->e, the message
 * offset of the first element of its (first) document: an OP_MSG whose body
 * section comes first (kind 0 @20, the element @25); an OP_REPLY (responseFlags
 * @16, the document @36, the element @40), failed also when QueryFailure (bit
 * 1) is set. Read from this send's bytes, but for a reply gathered across
 * sends (this->sp): T2 did the test on its first 40 bytes (this->err,
 * this->ep, and this->e for an OP_REPLY's document); what lies past them is in
 * this buffer (F3 and F4 read only bytes of it: this->off + this->ep >= 0).
 */
syscall::write:return, syscall::write_nocancel:return,
syscall::send:return, syscall::sendto:return, syscall::sendto_nocancel:return,
syscall::writev:return, syscall::writev_nocancel:return,
syscall::sendmsg:return, syscall::sendmsg_nocancel:return
/this->tx_go && this->valid && this->k < SLOTS/
{
	/* responseFlags @16, an OP_MSG's first section kind @20: one read */
	this->q = !this->sp && this->off + 16 >= 0 && this->off + 24 <= this->n ?
	    *(uint64_t *)copyin(this->buf + this->off + 16, 8) : 0;
	this->e = this->sp ? this->e : this->op == OP_MSG && this->len >= 33 && this->off + 20 >= 0 &&
	    this->off + 33 <= this->n ? (((this->q >> 32) & 0xff) == 0 ? 25 : 0) :
	    this->op == OP_REPLY && this->len >= 48 && this->off + 16 >= 0 &&
	    this->off + 48 <= this->n ? 40 : 0;
	this->err = this->sp ? this->err : this->e == 40 && (this->q & 2) != 0 ? -1 : 0;
	this->ep = this->sp ? this->ep : 0;
	this->vs = 0;
}

/* F1: the first element: "ok" with a number or bool (its value's size), or, in an
 * OP_REPLY, "$err" (a string: a legacy query's failure). */
syscall::write:return, syscall::write_nocancel:return,
syscall::send:return, syscall::sendto:return, syscall::sendto_nocancel:return,
syscall::writev:return, syscall::writev_nocancel:return,
syscall::sendmsg:return, syscall::sendmsg_nocancel:return
/this->tx_go && this->valid && this->k < SLOTS && this->e != 0/
{
	this->ey = *(uint64_t *)copyin(this->buf + this->off + this->e, 8);
	this->et = this->ey & 0xff;
	this->vs = (this->ey & 0xffffff00) != 0x006b6f00 ? 0 :
	    this->et == 1 || this->et == 0x12 ? 8 : this->et == 0x10 ? 4 : this->et == 8 ? 1 : 0;
	this->ep = this->e == 40 && (this->ey & 0xffffffffffff) == 0x007272652402 ? 40 : 0;
	this->err = this->ep != 0 ? -1 : this->err;
}

/* F2: ok's value: zero (a double's sign ignored) is a failure; the code follows. */
syscall::write:return, syscall::write_nocancel:return,
syscall::send:return, syscall::sendto:return, syscall::sendto_nocancel:return,
syscall::writev:return, syscall::writev_nocancel:return,
syscall::sendmsg:return, syscall::sendmsg_nocancel:return
/this->tx_go && this->valid && this->k < SLOTS && this->vs != 0 &&
    this->e + 4 + this->vs <= this->len && this->off + this->e + 4 + this->vs <= this->n/
{
	this->v = this->vs == 8 ?
	    *(uint64_t *)copyin(this->buf + this->off + this->e + 4, 8) << (this->et == 1 ? 1 : 0) :
	    this->vs == 4 ? this->ey >> 32 : (this->ey >> 32) & 0xff;
	this->err = this->v == 0 ? -1 : this->err;
	this->ep = this->v == 0 ? this->e + 4 + this->vs : 0;
}

/* F3: a string element at this->ep, errmsg (after ok) or $err: skip it (its int32
 * length follows the name). */
syscall::write:return, syscall::write_nocancel:return,
syscall::send:return, syscall::sendto:return, syscall::sendto_nocancel:return,
syscall::writev:return, syscall::writev_nocancel:return,
syscall::sendmsg:return, syscall::sendmsg_nocancel:return
/this->tx_go && this->valid && this->k < SLOTS && this->ep != 0 &&
    this->off + this->ep >= 0 && this->ep + 12 <= this->len && this->off + this->ep + 12 <= this->n/
{
	this->p = (uint8_t *)copyin(this->buf + this->off + this->ep, 12);
	this->ey = *(uint64_t *)this->p;
	this->q = *(uint64_t *)(this->p + 4);	/* bytes 4-11: the length @8 or @6 */
	this->es = this->ey == 0x0067736d72726502 ? 8 :
	    (this->ey & 0xffffffffffff) == 0x007272652402 ? 6 : 0;
	this->ep = this->es == 0 ? this->ep : this->ep + this->es + 4 +
	    (int32_t)(this->es == 8 ? this->q >> 32 : (this->q >> 16) & 0xffffffff);
}

/* F4: the code: an int32 element "code" at this->ep. */
syscall::write:return, syscall::write_nocancel:return,
syscall::send:return, syscall::sendto:return, syscall::sendto_nocancel:return,
syscall::writev:return, syscall::writev_nocancel:return,
syscall::sendmsg:return, syscall::sendmsg_nocancel:return
/this->tx_go && this->valid && this->k < SLOTS && this->ep > this->e &&
    this->off + this->ep >= 0 && this->ep + 10 <= this->len && this->off + this->ep + 10 <= this->n/
{
	this->p = (uint8_t *)copyin(this->buf + this->off + this->ep, 10);
	this->ey = *(uint64_t *)this->p;
	this->ec = (this->ey & 0xffffffffffff) != 0x0065646f6310 ? 0 : *(int32_t *)(this->p + 6);
	this->err = this->ec != 0 ? this->ec : this->err;
}

/* P2: the reply to an outstanding request: its latency. */
syscall::write:return, syscall::write_nocancel:return,
syscall::send:return, syscall::sendto:return, syscall::sendto_nocancel:return,
syscall::writev:return, syscall::writev_nocancel:return,
syscall::sendmsg:return, syscall::sendmsg_nocancel:return
/this->tx_go && this->valid && this->k < SLOTS/
{
	this->tl = this->tl + this->k;
	this->s = this->tl % SLOTS;
	this->lat = this->ts - slot_ts[$target, this->fd, this->s];
	this->o = slot_op[$target, this->fd, this->s];
	this->opname = opnames[this->o];
	@by_op[this->opname] = quantize(this->lat);
	@by_cmd[slot_cmd[$target, this->fd, this->s]] = quantize(this->lat);
	@replies_cmd[slot_cmd[$target, this->fd, this->s]] = count();
	@total_op[this->opname] = sum(this->lat);
	@total_cmd[slot_cmd[$target, this->fd, this->s]] = sum(this->lat);
	@max_op[this->opname] = max(this->lat);
	@max_cmd[slot_cmd[$target, this->fd, this->s]] = max(this->lat);
	@replies = sum(1);
	@without = sum(-1);
	tail[$target, this->fd] = this->tl + 1;
	/* moreToCome: more replies follow, each answering the previous one */
	stream[$target, this->fd] = this->mtc ? this->rid : 0;
}

/* P2c: its latency per connection (unless NO_CONN). */
syscall::write:return, syscall::write_nocancel:return,
syscall::send:return, syscall::sendto:return, syscall::sendto_nocancel:return,
syscall::writev:return, syscall::writev_nocancel:return,
syscall::sendmsg:return, syscall::sendmsg_nocancel:return
/this->tx_go && this->valid && this->k < SLOTS && !NO_CONN/
{
	@by_conn[pid, this->fd & ~TLS_FD] = quantize(this->lat);
	@total_conn[pid, this->fd & ~TLS_FD] = sum(this->lat);
	@max_conn[pid, this->fd & ~TLS_FD] = max(this->lat);
}

/* P2x: a failed reply, per command and code (rare). */
syscall::write:return, syscall::write_nocancel:return,
syscall::send:return, syscall::sendto:return, syscall::sendto_nocancel:return,
syscall::writev:return, syscall::writev_nocancel:return,
syscall::sendmsg:return, syscall::sendmsg_nocancel:return
/this->tx_go && this->valid && this->k < SLOTS && this->err != 0/
{
	@failed_cmd[slot_cmd[$target, this->fd, this->s], this->err] = count();
	@failed_op[this->opname, this->err] = count();
}

/* P3: the next reply of an exhaust stream: counted, not timed again. */
syscall::write:return, syscall::write_nocancel:return,
syscall::send:return, syscall::sendto:return, syscall::sendto_nocancel:return,
syscall::writev:return, syscall::writev_nocancel:return,
syscall::sendmsg:return, syscall::sendmsg_nocancel:return
/this->tx_go && this->valid && this->k == SLOTS && stream[$target, this->fd] != 0 &&
    stream[$target, this->fd] == this->rto/
{
	@stream = sum(1);
	stream[$target, this->fd] = this->mtc ? this->rid : 0;
	this->k = SLOTS + 1;
}

/* P3n: the answer to the connection's last request that expected none (C1n):
 * counted per command, once (the id is forgotten: a second reply to it is
 * unmatched). Only on the unmatched path: one dynamic-variable lookup. */
syscall::write:return, syscall::write_nocancel:return,
syscall::send:return, syscall::sendto:return, syscall::sendto_nocancel:return,
syscall::writev:return, syscall::writev_nocancel:return,
syscall::sendmsg:return, syscall::sendmsg_nocancel:return
/this->tx_go && this->valid && this->k == SLOTS &&
    nrid[$target, this->fd] == (0x100000000 | (uint32_t)this->rto)/
{
	@answered = sum(1);
	@answered_cmd[nrcmd[$target, this->fd]] = count();
	nrid[$target, this->fd] = 0;
	this->k = SLOTS + 1;
}

/* P4: a reply to nothing this script saw. */
syscall::write:return, syscall::write_nocancel:return,
syscall::send:return, syscall::sendto:return, syscall::sendto_nocancel:return,
syscall::writev:return, syscall::writev_nocancel:return,
syscall::sendmsg:return, syscall::sendmsg_nocancel:return
/this->tx_go && this->valid && this->k == SLOTS/
{
	@unmatched = sum(1);
}

syscall::write:return, syscall::write_nocancel:return,
syscall::send:return, syscall::sendto:return, syscall::sendto_nocancel:return,
syscall::writev:return, syscall::writev_nocancel:return,
syscall::sendmsg:return, syscall::sendmsg_nocancel:return
/this->tx_go && this->valid/
{
	this->fin = this->len <= this->ret - this->off;
	txrem[$target, this->fd] = this->fin ? 0 : this->len - (this->ret - this->off);
	this->off = this->fin ? this->off + this->len : this->ret;
	this->valid = 0;
}

/* T3: replies, each starting with a MsgHeader: at most 4 per send. */
/* S: a reply header at this->off. */
syscall::write:return, syscall::write_nocancel:return,
syscall::send:return, syscall::sendto:return, syscall::sendto_nocancel:return,
syscall::writev:return, syscall::writev_nocancel:return,
syscall::sendmsg:return, syscall::sendmsg_nocancel:return
/this->tx_go/
{
	this->it = !this->stop && this->off + 16 <= this->n;
	this->valid = 0;
	this->sp = 0;
}

syscall::write:return, syscall::write_nocancel:return,
syscall::send:return, syscall::sendto:return, syscall::sendto_nocancel:return,
syscall::writev:return, syscall::writev_nocancel:return,
syscall::sendmsg:return, syscall::sendmsg_nocancel:return
/this->tx_go && this->it/
{
	this->p = (uint8_t *)copyin(this->buf + this->off, 16);
	this->q = *(uint64_t *)this->p;
	this->len = (int32_t)(this->q & 0xffffffff);
	this->rid = (int32_t)(this->q >> 32);
	this->q = *(uint64_t *)(this->p + 8);
	this->rto = (int32_t)(this->q & 0xffffffff);
	this->op = (int32_t)(this->q >> 32);
	this->valid = this->len >= 16 && this->len <= MAX_MESSAGE &&
	    (this->op == OP_MSG || this->op == OP_REPLY || this->op == OP_COMPRESSED);
	/* moreToCome on an OP_MSG reply: an exhaust stream follows */
	this->mtc = this->op == OP_MSG && this->n - this->off >= 20 ?
	    (*(uint32_t *)copyin(this->buf + this->off + 16, 4) & 2) != 0 : 0;
	/* the send ends inside the reply's first 40 bytes (those that say whether
	 * it failed): kept by T4, matched when the rest comes (T2) */
	this->cut = this->valid && this->n == this->ret && this->ret - this->off < 40 &&
	    this->ret - this->off < this->len;
	this->valid = this->valid && !this->cut;
	this->it = !this->cut;
	this->stop = this->cut ? 2 : 0;
}

syscall::write:return, syscall::write_nocancel:return,
syscall::send:return, syscall::sendto:return, syscall::sendto_nocancel:return,
syscall::writev:return, syscall::writev_nocancel:return,
syscall::sendmsg:return, syscall::sendmsg_nocancel:return
/this->tx_go && this->it && !this->valid/
{
	@malformed = sum(1);
	txrem[$target, this->fd] = 0;
	this->off = this->ret;
	this->stop = 1;
}
/* P1: a reply header (this->len, rid, rto, op, mtc) at this->off (negative when
 * its first bytes came in an earlier send), sent at this->ts. Match it against
 * the outstanding requests, oldest first; older ones skipped over never got
 * their reply (they stay counted in @without). */
syscall::write:return, syscall::write_nocancel:return,
syscall::send:return, syscall::sendto:return, syscall::sendto_nocancel:return,
syscall::writev:return, syscall::writev_nocancel:return,
syscall::sendmsg:return, syscall::sendmsg_nocancel:return
/this->tx_go && this->valid/
{
	this->tl = tail[$target, this->fd];
	this->hd = head[$target, this->fd];
	this->k = this->tl < this->hd &&
	    slot_rid[$target, this->fd, this->tl % SLOTS] == this->rto ? 0 :
	    this->tl + 1 < this->hd &&
	    slot_rid[$target, this->fd, (this->tl + 1) % SLOTS] == this->rto ? 1 :
	    this->tl + 2 < this->hd &&
	    slot_rid[$target, this->fd, (this->tl + 2) % SLOTS] == this->rto ? 2 :
	    this->tl + 3 < this->hd &&
	    slot_rid[$target, this->fd, (this->tl + 3) % SLOTS] == this->rto ? 3 : SLOTS;
}

/*
 * F: did the matched reply fail? (probes/README.md, "Replies that failed"):
 * this->err 0 (no), its code, or -1 (failed, no code). this->e, the message
 * offset of the first element of its (first) document: an OP_MSG whose body
 * section comes first (kind 0 @20, the element @25); an OP_REPLY (responseFlags
 * @16, the document @36, the element @40), failed also when QueryFailure (bit
 * 1) is set. Read from this send's bytes, but for a reply gathered across
 * sends (this->sp): T2 did the test on its first 40 bytes (this->err,
 * this->ep, and this->e for an OP_REPLY's document); what lies past them is in
 * this buffer (F3 and F4 read only bytes of it: this->off + this->ep >= 0).
 */
syscall::write:return, syscall::write_nocancel:return,
syscall::send:return, syscall::sendto:return, syscall::sendto_nocancel:return,
syscall::writev:return, syscall::writev_nocancel:return,
syscall::sendmsg:return, syscall::sendmsg_nocancel:return
/this->tx_go && this->valid && this->k < SLOTS/
{
	/* responseFlags @16, an OP_MSG's first section kind @20: one read */
	this->q = !this->sp && this->off + 16 >= 0 && this->off + 24 <= this->n ?
	    *(uint64_t *)copyin(this->buf + this->off + 16, 8) : 0;
	this->e = this->sp ? this->e : this->op == OP_MSG && this->len >= 33 && this->off + 20 >= 0 &&
	    this->off + 33 <= this->n ? (((this->q >> 32) & 0xff) == 0 ? 25 : 0) :
	    this->op == OP_REPLY && this->len >= 48 && this->off + 16 >= 0 &&
	    this->off + 48 <= this->n ? 40 : 0;
	this->err = this->sp ? this->err : this->e == 40 && (this->q & 2) != 0 ? -1 : 0;
	this->ep = this->sp ? this->ep : 0;
	this->vs = 0;
}

/* F1: the first element: "ok" with a number or bool (its value's size), or, in an
 * OP_REPLY, "$err" (a string: a legacy query's failure). */
syscall::write:return, syscall::write_nocancel:return,
syscall::send:return, syscall::sendto:return, syscall::sendto_nocancel:return,
syscall::writev:return, syscall::writev_nocancel:return,
syscall::sendmsg:return, syscall::sendmsg_nocancel:return
/this->tx_go && this->valid && this->k < SLOTS && this->e != 0/
{
	this->ey = *(uint64_t *)copyin(this->buf + this->off + this->e, 8);
	this->et = this->ey & 0xff;
	this->vs = (this->ey & 0xffffff00) != 0x006b6f00 ? 0 :
	    this->et == 1 || this->et == 0x12 ? 8 : this->et == 0x10 ? 4 : this->et == 8 ? 1 : 0;
	this->ep = this->e == 40 && (this->ey & 0xffffffffffff) == 0x007272652402 ? 40 : 0;
	this->err = this->ep != 0 ? -1 : this->err;
}

/* F2: ok's value: zero (a double's sign ignored) is a failure; the code follows. */
syscall::write:return, syscall::write_nocancel:return,
syscall::send:return, syscall::sendto:return, syscall::sendto_nocancel:return,
syscall::writev:return, syscall::writev_nocancel:return,
syscall::sendmsg:return, syscall::sendmsg_nocancel:return
/this->tx_go && this->valid && this->k < SLOTS && this->vs != 0 &&
    this->e + 4 + this->vs <= this->len && this->off + this->e + 4 + this->vs <= this->n/
{
	this->v = this->vs == 8 ?
	    *(uint64_t *)copyin(this->buf + this->off + this->e + 4, 8) << (this->et == 1 ? 1 : 0) :
	    this->vs == 4 ? this->ey >> 32 : (this->ey >> 32) & 0xff;
	this->err = this->v == 0 ? -1 : this->err;
	this->ep = this->v == 0 ? this->e + 4 + this->vs : 0;
}

/* F3: a string element at this->ep, errmsg (after ok) or $err: skip it (its int32
 * length follows the name). */
syscall::write:return, syscall::write_nocancel:return,
syscall::send:return, syscall::sendto:return, syscall::sendto_nocancel:return,
syscall::writev:return, syscall::writev_nocancel:return,
syscall::sendmsg:return, syscall::sendmsg_nocancel:return
/this->tx_go && this->valid && this->k < SLOTS && this->ep != 0 &&
    this->off + this->ep >= 0 && this->ep + 12 <= this->len && this->off + this->ep + 12 <= this->n/
{
	this->p = (uint8_t *)copyin(this->buf + this->off + this->ep, 12);
	this->ey = *(uint64_t *)this->p;
	this->q = *(uint64_t *)(this->p + 4);	/* bytes 4-11: the length @8 or @6 */
	this->es = this->ey == 0x0067736d72726502 ? 8 :
	    (this->ey & 0xffffffffffff) == 0x007272652402 ? 6 : 0;
	this->ep = this->es == 0 ? this->ep : this->ep + this->es + 4 +
	    (int32_t)(this->es == 8 ? this->q >> 32 : (this->q >> 16) & 0xffffffff);
}

/* F4: the code: an int32 element "code" at this->ep. */
syscall::write:return, syscall::write_nocancel:return,
syscall::send:return, syscall::sendto:return, syscall::sendto_nocancel:return,
syscall::writev:return, syscall::writev_nocancel:return,
syscall::sendmsg:return, syscall::sendmsg_nocancel:return
/this->tx_go && this->valid && this->k < SLOTS && this->ep > this->e &&
    this->off + this->ep >= 0 && this->ep + 10 <= this->len && this->off + this->ep + 10 <= this->n/
{
	this->p = (uint8_t *)copyin(this->buf + this->off + this->ep, 10);
	this->ey = *(uint64_t *)this->p;
	this->ec = (this->ey & 0xffffffffffff) != 0x0065646f6310 ? 0 : *(int32_t *)(this->p + 6);
	this->err = this->ec != 0 ? this->ec : this->err;
}

/* P2: the reply to an outstanding request: its latency. */
syscall::write:return, syscall::write_nocancel:return,
syscall::send:return, syscall::sendto:return, syscall::sendto_nocancel:return,
syscall::writev:return, syscall::writev_nocancel:return,
syscall::sendmsg:return, syscall::sendmsg_nocancel:return
/this->tx_go && this->valid && this->k < SLOTS/
{
	this->tl = this->tl + this->k;
	this->s = this->tl % SLOTS;
	this->lat = this->ts - slot_ts[$target, this->fd, this->s];
	this->o = slot_op[$target, this->fd, this->s];
	this->opname = opnames[this->o];
	@by_op[this->opname] = quantize(this->lat);
	@by_cmd[slot_cmd[$target, this->fd, this->s]] = quantize(this->lat);
	@replies_cmd[slot_cmd[$target, this->fd, this->s]] = count();
	@total_op[this->opname] = sum(this->lat);
	@total_cmd[slot_cmd[$target, this->fd, this->s]] = sum(this->lat);
	@max_op[this->opname] = max(this->lat);
	@max_cmd[slot_cmd[$target, this->fd, this->s]] = max(this->lat);
	@replies = sum(1);
	@without = sum(-1);
	tail[$target, this->fd] = this->tl + 1;
	/* moreToCome: more replies follow, each answering the previous one */
	stream[$target, this->fd] = this->mtc ? this->rid : 0;
}

/* P2c: its latency per connection (unless NO_CONN). */
syscall::write:return, syscall::write_nocancel:return,
syscall::send:return, syscall::sendto:return, syscall::sendto_nocancel:return,
syscall::writev:return, syscall::writev_nocancel:return,
syscall::sendmsg:return, syscall::sendmsg_nocancel:return
/this->tx_go && this->valid && this->k < SLOTS && !NO_CONN/
{
	@by_conn[pid, this->fd & ~TLS_FD] = quantize(this->lat);
	@total_conn[pid, this->fd & ~TLS_FD] = sum(this->lat);
	@max_conn[pid, this->fd & ~TLS_FD] = max(this->lat);
}

/* P2x: a failed reply, per command and code (rare). */
syscall::write:return, syscall::write_nocancel:return,
syscall::send:return, syscall::sendto:return, syscall::sendto_nocancel:return,
syscall::writev:return, syscall::writev_nocancel:return,
syscall::sendmsg:return, syscall::sendmsg_nocancel:return
/this->tx_go && this->valid && this->k < SLOTS && this->err != 0/
{
	@failed_cmd[slot_cmd[$target, this->fd, this->s], this->err] = count();
	@failed_op[this->opname, this->err] = count();
}

/* P3: the next reply of an exhaust stream: counted, not timed again. */
syscall::write:return, syscall::write_nocancel:return,
syscall::send:return, syscall::sendto:return, syscall::sendto_nocancel:return,
syscall::writev:return, syscall::writev_nocancel:return,
syscall::sendmsg:return, syscall::sendmsg_nocancel:return
/this->tx_go && this->valid && this->k == SLOTS && stream[$target, this->fd] != 0 &&
    stream[$target, this->fd] == this->rto/
{
	@stream = sum(1);
	stream[$target, this->fd] = this->mtc ? this->rid : 0;
	this->k = SLOTS + 1;
}

/* P3n: the answer to the connection's last request that expected none (C1n):
 * counted per command, once (the id is forgotten: a second reply to it is
 * unmatched). Only on the unmatched path: one dynamic-variable lookup. */
syscall::write:return, syscall::write_nocancel:return,
syscall::send:return, syscall::sendto:return, syscall::sendto_nocancel:return,
syscall::writev:return, syscall::writev_nocancel:return,
syscall::sendmsg:return, syscall::sendmsg_nocancel:return
/this->tx_go && this->valid && this->k == SLOTS &&
    nrid[$target, this->fd] == (0x100000000 | (uint32_t)this->rto)/
{
	@answered = sum(1);
	@answered_cmd[nrcmd[$target, this->fd]] = count();
	nrid[$target, this->fd] = 0;
	this->k = SLOTS + 1;
}

/* P4: a reply to nothing this script saw. */
syscall::write:return, syscall::write_nocancel:return,
syscall::send:return, syscall::sendto:return, syscall::sendto_nocancel:return,
syscall::writev:return, syscall::writev_nocancel:return,
syscall::sendmsg:return, syscall::sendmsg_nocancel:return
/this->tx_go && this->valid && this->k == SLOTS/
{
	@unmatched = sum(1);
}

syscall::write:return, syscall::write_nocancel:return,
syscall::send:return, syscall::sendto:return, syscall::sendto_nocancel:return,
syscall::writev:return, syscall::writev_nocancel:return,
syscall::sendmsg:return, syscall::sendmsg_nocancel:return
/this->tx_go && this->valid/
{
	this->fin = this->len <= this->ret - this->off;
	txrem[$target, this->fd] = this->fin ? 0 : this->len - (this->ret - this->off);
	this->off = this->fin ? this->off + this->len : this->ret;
	this->valid = 0;
}
/* S: a reply header at this->off. */
syscall::write:return, syscall::write_nocancel:return,
syscall::send:return, syscall::sendto:return, syscall::sendto_nocancel:return,
syscall::writev:return, syscall::writev_nocancel:return,
syscall::sendmsg:return, syscall::sendmsg_nocancel:return
/this->tx_go/
{
	this->it = !this->stop && this->off + 16 <= this->n;
	this->valid = 0;
	this->sp = 0;
}

syscall::write:return, syscall::write_nocancel:return,
syscall::send:return, syscall::sendto:return, syscall::sendto_nocancel:return,
syscall::writev:return, syscall::writev_nocancel:return,
syscall::sendmsg:return, syscall::sendmsg_nocancel:return
/this->tx_go && this->it/
{
	this->p = (uint8_t *)copyin(this->buf + this->off, 16);
	this->q = *(uint64_t *)this->p;
	this->len = (int32_t)(this->q & 0xffffffff);
	this->rid = (int32_t)(this->q >> 32);
	this->q = *(uint64_t *)(this->p + 8);
	this->rto = (int32_t)(this->q & 0xffffffff);
	this->op = (int32_t)(this->q >> 32);
	this->valid = this->len >= 16 && this->len <= MAX_MESSAGE &&
	    (this->op == OP_MSG || this->op == OP_REPLY || this->op == OP_COMPRESSED);
	/* moreToCome on an OP_MSG reply: an exhaust stream follows */
	this->mtc = this->op == OP_MSG && this->n - this->off >= 20 ?
	    (*(uint32_t *)copyin(this->buf + this->off + 16, 4) & 2) != 0 : 0;
	/* the send ends inside the reply's first 40 bytes (those that say whether
	 * it failed): kept by T4, matched when the rest comes (T2) */
	this->cut = this->valid && this->n == this->ret && this->ret - this->off < 40 &&
	    this->ret - this->off < this->len;
	this->valid = this->valid && !this->cut;
	this->it = !this->cut;
	this->stop = this->cut ? 2 : 0;
}

syscall::write:return, syscall::write_nocancel:return,
syscall::send:return, syscall::sendto:return, syscall::sendto_nocancel:return,
syscall::writev:return, syscall::writev_nocancel:return,
syscall::sendmsg:return, syscall::sendmsg_nocancel:return
/this->tx_go && this->it && !this->valid/
{
	@malformed = sum(1);
	txrem[$target, this->fd] = 0;
	this->off = this->ret;
	this->stop = 1;
}
/* P1: a reply header (this->len, rid, rto, op, mtc) at this->off (negative when
 * its first bytes came in an earlier send), sent at this->ts. Match it against
 * the outstanding requests, oldest first; older ones skipped over never got
 * their reply (they stay counted in @without). */
syscall::write:return, syscall::write_nocancel:return,
syscall::send:return, syscall::sendto:return, syscall::sendto_nocancel:return,
syscall::writev:return, syscall::writev_nocancel:return,
syscall::sendmsg:return, syscall::sendmsg_nocancel:return
/this->tx_go && this->valid/
{
	this->tl = tail[$target, this->fd];
	this->hd = head[$target, this->fd];
	this->k = this->tl < this->hd &&
	    slot_rid[$target, this->fd, this->tl % SLOTS] == this->rto ? 0 :
	    this->tl + 1 < this->hd &&
	    slot_rid[$target, this->fd, (this->tl + 1) % SLOTS] == this->rto ? 1 :
	    this->tl + 2 < this->hd &&
	    slot_rid[$target, this->fd, (this->tl + 2) % SLOTS] == this->rto ? 2 :
	    this->tl + 3 < this->hd &&
	    slot_rid[$target, this->fd, (this->tl + 3) % SLOTS] == this->rto ? 3 : SLOTS;
}

/*
 * F: did the matched reply fail? (probes/README.md, "Replies that failed"):
 * this->err 0 (no), its code, or -1 (failed, no code). this->e, the message
 * offset of the first element of its (first) document: an OP_MSG whose body
 * section comes first (kind 0 @20, the element @25); an OP_REPLY (responseFlags
 * @16, the document @36, the element @40), failed also when QueryFailure (bit
 * 1) is set. Read from this send's bytes, but for a reply gathered across
 * sends (this->sp): T2 did the test on its first 40 bytes (this->err,
 * this->ep, and this->e for an OP_REPLY's document); what lies past them is in
 * this buffer (F3 and F4 read only bytes of it: this->off + this->ep >= 0).
 */
syscall::write:return, syscall::write_nocancel:return,
syscall::send:return, syscall::sendto:return, syscall::sendto_nocancel:return,
syscall::writev:return, syscall::writev_nocancel:return,
syscall::sendmsg:return, syscall::sendmsg_nocancel:return
/this->tx_go && this->valid && this->k < SLOTS/
{
	/* responseFlags @16, an OP_MSG's first section kind @20: one read */
	this->q = !this->sp && this->off + 16 >= 0 && this->off + 24 <= this->n ?
	    *(uint64_t *)copyin(this->buf + this->off + 16, 8) : 0;
	this->e = this->sp ? this->e : this->op == OP_MSG && this->len >= 33 && this->off + 20 >= 0 &&
	    this->off + 33 <= this->n ? (((this->q >> 32) & 0xff) == 0 ? 25 : 0) :
	    this->op == OP_REPLY && this->len >= 48 && this->off + 16 >= 0 &&
	    this->off + 48 <= this->n ? 40 : 0;
	this->err = this->sp ? this->err : this->e == 40 && (this->q & 2) != 0 ? -1 : 0;
	this->ep = this->sp ? this->ep : 0;
	this->vs = 0;
}

/* F1: the first element: "ok" with a number or bool (its value's size), or, in an
 * OP_REPLY, "$err" (a string: a legacy query's failure). */
syscall::write:return, syscall::write_nocancel:return,
syscall::send:return, syscall::sendto:return, syscall::sendto_nocancel:return,
syscall::writev:return, syscall::writev_nocancel:return,
syscall::sendmsg:return, syscall::sendmsg_nocancel:return
/this->tx_go && this->valid && this->k < SLOTS && this->e != 0/
{
	this->ey = *(uint64_t *)copyin(this->buf + this->off + this->e, 8);
	this->et = this->ey & 0xff;
	this->vs = (this->ey & 0xffffff00) != 0x006b6f00 ? 0 :
	    this->et == 1 || this->et == 0x12 ? 8 : this->et == 0x10 ? 4 : this->et == 8 ? 1 : 0;
	this->ep = this->e == 40 && (this->ey & 0xffffffffffff) == 0x007272652402 ? 40 : 0;
	this->err = this->ep != 0 ? -1 : this->err;
}

/* F2: ok's value: zero (a double's sign ignored) is a failure; the code follows. */
syscall::write:return, syscall::write_nocancel:return,
syscall::send:return, syscall::sendto:return, syscall::sendto_nocancel:return,
syscall::writev:return, syscall::writev_nocancel:return,
syscall::sendmsg:return, syscall::sendmsg_nocancel:return
/this->tx_go && this->valid && this->k < SLOTS && this->vs != 0 &&
    this->e + 4 + this->vs <= this->len && this->off + this->e + 4 + this->vs <= this->n/
{
	this->v = this->vs == 8 ?
	    *(uint64_t *)copyin(this->buf + this->off + this->e + 4, 8) << (this->et == 1 ? 1 : 0) :
	    this->vs == 4 ? this->ey >> 32 : (this->ey >> 32) & 0xff;
	this->err = this->v == 0 ? -1 : this->err;
	this->ep = this->v == 0 ? this->e + 4 + this->vs : 0;
}

/* F3: a string element at this->ep, errmsg (after ok) or $err: skip it (its int32
 * length follows the name). */
syscall::write:return, syscall::write_nocancel:return,
syscall::send:return, syscall::sendto:return, syscall::sendto_nocancel:return,
syscall::writev:return, syscall::writev_nocancel:return,
syscall::sendmsg:return, syscall::sendmsg_nocancel:return
/this->tx_go && this->valid && this->k < SLOTS && this->ep != 0 &&
    this->off + this->ep >= 0 && this->ep + 12 <= this->len && this->off + this->ep + 12 <= this->n/
{
	this->p = (uint8_t *)copyin(this->buf + this->off + this->ep, 12);
	this->ey = *(uint64_t *)this->p;
	this->q = *(uint64_t *)(this->p + 4);	/* bytes 4-11: the length @8 or @6 */
	this->es = this->ey == 0x0067736d72726502 ? 8 :
	    (this->ey & 0xffffffffffff) == 0x007272652402 ? 6 : 0;
	this->ep = this->es == 0 ? this->ep : this->ep + this->es + 4 +
	    (int32_t)(this->es == 8 ? this->q >> 32 : (this->q >> 16) & 0xffffffff);
}

/* F4: the code: an int32 element "code" at this->ep. */
syscall::write:return, syscall::write_nocancel:return,
syscall::send:return, syscall::sendto:return, syscall::sendto_nocancel:return,
syscall::writev:return, syscall::writev_nocancel:return,
syscall::sendmsg:return, syscall::sendmsg_nocancel:return
/this->tx_go && this->valid && this->k < SLOTS && this->ep > this->e &&
    this->off + this->ep >= 0 && this->ep + 10 <= this->len && this->off + this->ep + 10 <= this->n/
{
	this->p = (uint8_t *)copyin(this->buf + this->off + this->ep, 10);
	this->ey = *(uint64_t *)this->p;
	this->ec = (this->ey & 0xffffffffffff) != 0x0065646f6310 ? 0 : *(int32_t *)(this->p + 6);
	this->err = this->ec != 0 ? this->ec : this->err;
}

/* P2: the reply to an outstanding request: its latency. */
syscall::write:return, syscall::write_nocancel:return,
syscall::send:return, syscall::sendto:return, syscall::sendto_nocancel:return,
syscall::writev:return, syscall::writev_nocancel:return,
syscall::sendmsg:return, syscall::sendmsg_nocancel:return
/this->tx_go && this->valid && this->k < SLOTS/
{
	this->tl = this->tl + this->k;
	this->s = this->tl % SLOTS;
	this->lat = this->ts - slot_ts[$target, this->fd, this->s];
	this->o = slot_op[$target, this->fd, this->s];
	this->opname = opnames[this->o];
	@by_op[this->opname] = quantize(this->lat);
	@by_cmd[slot_cmd[$target, this->fd, this->s]] = quantize(this->lat);
	@replies_cmd[slot_cmd[$target, this->fd, this->s]] = count();
	@total_op[this->opname] = sum(this->lat);
	@total_cmd[slot_cmd[$target, this->fd, this->s]] = sum(this->lat);
	@max_op[this->opname] = max(this->lat);
	@max_cmd[slot_cmd[$target, this->fd, this->s]] = max(this->lat);
	@replies = sum(1);
	@without = sum(-1);
	tail[$target, this->fd] = this->tl + 1;
	/* moreToCome: more replies follow, each answering the previous one */
	stream[$target, this->fd] = this->mtc ? this->rid : 0;
}

/* P2c: its latency per connection (unless NO_CONN). */
syscall::write:return, syscall::write_nocancel:return,
syscall::send:return, syscall::sendto:return, syscall::sendto_nocancel:return,
syscall::writev:return, syscall::writev_nocancel:return,
syscall::sendmsg:return, syscall::sendmsg_nocancel:return
/this->tx_go && this->valid && this->k < SLOTS && !NO_CONN/
{
	@by_conn[pid, this->fd & ~TLS_FD] = quantize(this->lat);
	@total_conn[pid, this->fd & ~TLS_FD] = sum(this->lat);
	@max_conn[pid, this->fd & ~TLS_FD] = max(this->lat);
}

/* P2x: a failed reply, per command and code (rare). */
syscall::write:return, syscall::write_nocancel:return,
syscall::send:return, syscall::sendto:return, syscall::sendto_nocancel:return,
syscall::writev:return, syscall::writev_nocancel:return,
syscall::sendmsg:return, syscall::sendmsg_nocancel:return
/this->tx_go && this->valid && this->k < SLOTS && this->err != 0/
{
	@failed_cmd[slot_cmd[$target, this->fd, this->s], this->err] = count();
	@failed_op[this->opname, this->err] = count();
}

/* P3: the next reply of an exhaust stream: counted, not timed again. */
syscall::write:return, syscall::write_nocancel:return,
syscall::send:return, syscall::sendto:return, syscall::sendto_nocancel:return,
syscall::writev:return, syscall::writev_nocancel:return,
syscall::sendmsg:return, syscall::sendmsg_nocancel:return
/this->tx_go && this->valid && this->k == SLOTS && stream[$target, this->fd] != 0 &&
    stream[$target, this->fd] == this->rto/
{
	@stream = sum(1);
	stream[$target, this->fd] = this->mtc ? this->rid : 0;
	this->k = SLOTS + 1;
}

/* P3n: the answer to the connection's last request that expected none (C1n):
 * counted per command, once (the id is forgotten: a second reply to it is
 * unmatched). Only on the unmatched path: one dynamic-variable lookup. */
syscall::write:return, syscall::write_nocancel:return,
syscall::send:return, syscall::sendto:return, syscall::sendto_nocancel:return,
syscall::writev:return, syscall::writev_nocancel:return,
syscall::sendmsg:return, syscall::sendmsg_nocancel:return
/this->tx_go && this->valid && this->k == SLOTS &&
    nrid[$target, this->fd] == (0x100000000 | (uint32_t)this->rto)/
{
	@answered = sum(1);
	@answered_cmd[nrcmd[$target, this->fd]] = count();
	nrid[$target, this->fd] = 0;
	this->k = SLOTS + 1;
}

/* P4: a reply to nothing this script saw. */
syscall::write:return, syscall::write_nocancel:return,
syscall::send:return, syscall::sendto:return, syscall::sendto_nocancel:return,
syscall::writev:return, syscall::writev_nocancel:return,
syscall::sendmsg:return, syscall::sendmsg_nocancel:return
/this->tx_go && this->valid && this->k == SLOTS/
{
	@unmatched = sum(1);
}

syscall::write:return, syscall::write_nocancel:return,
syscall::send:return, syscall::sendto:return, syscall::sendto_nocancel:return,
syscall::writev:return, syscall::writev_nocancel:return,
syscall::sendmsg:return, syscall::sendmsg_nocancel:return
/this->tx_go && this->valid/
{
	this->fin = this->len <= this->ret - this->off;
	txrem[$target, this->fd] = this->fin ? 0 : this->len - (this->ret - this->off);
	this->off = this->fin ? this->off + this->len : this->ret;
	this->valid = 0;
}
/* S: a reply header at this->off. */
syscall::write:return, syscall::write_nocancel:return,
syscall::send:return, syscall::sendto:return, syscall::sendto_nocancel:return,
syscall::writev:return, syscall::writev_nocancel:return,
syscall::sendmsg:return, syscall::sendmsg_nocancel:return
/this->tx_go/
{
	this->it = !this->stop && this->off + 16 <= this->n;
	this->valid = 0;
	this->sp = 0;
}

syscall::write:return, syscall::write_nocancel:return,
syscall::send:return, syscall::sendto:return, syscall::sendto_nocancel:return,
syscall::writev:return, syscall::writev_nocancel:return,
syscall::sendmsg:return, syscall::sendmsg_nocancel:return
/this->tx_go && this->it/
{
	this->p = (uint8_t *)copyin(this->buf + this->off, 16);
	this->q = *(uint64_t *)this->p;
	this->len = (int32_t)(this->q & 0xffffffff);
	this->rid = (int32_t)(this->q >> 32);
	this->q = *(uint64_t *)(this->p + 8);
	this->rto = (int32_t)(this->q & 0xffffffff);
	this->op = (int32_t)(this->q >> 32);
	this->valid = this->len >= 16 && this->len <= MAX_MESSAGE &&
	    (this->op == OP_MSG || this->op == OP_REPLY || this->op == OP_COMPRESSED);
	/* moreToCome on an OP_MSG reply: an exhaust stream follows */
	this->mtc = this->op == OP_MSG && this->n - this->off >= 20 ?
	    (*(uint32_t *)copyin(this->buf + this->off + 16, 4) & 2) != 0 : 0;
	/* the send ends inside the reply's first 40 bytes (those that say whether
	 * it failed): kept by T4, matched when the rest comes (T2) */
	this->cut = this->valid && this->n == this->ret && this->ret - this->off < 40 &&
	    this->ret - this->off < this->len;
	this->valid = this->valid && !this->cut;
	this->it = !this->cut;
	this->stop = this->cut ? 2 : 0;
}

syscall::write:return, syscall::write_nocancel:return,
syscall::send:return, syscall::sendto:return, syscall::sendto_nocancel:return,
syscall::writev:return, syscall::writev_nocancel:return,
syscall::sendmsg:return, syscall::sendmsg_nocancel:return
/this->tx_go && this->it && !this->valid/
{
	@malformed = sum(1);
	txrem[$target, this->fd] = 0;
	this->off = this->ret;
	this->stop = 1;
}
/* P1: a reply header (this->len, rid, rto, op, mtc) at this->off (negative when
 * its first bytes came in an earlier send), sent at this->ts. Match it against
 * the outstanding requests, oldest first; older ones skipped over never got
 * their reply (they stay counted in @without). */
syscall::write:return, syscall::write_nocancel:return,
syscall::send:return, syscall::sendto:return, syscall::sendto_nocancel:return,
syscall::writev:return, syscall::writev_nocancel:return,
syscall::sendmsg:return, syscall::sendmsg_nocancel:return
/this->tx_go && this->valid/
{
	this->tl = tail[$target, this->fd];
	this->hd = head[$target, this->fd];
	this->k = this->tl < this->hd &&
	    slot_rid[$target, this->fd, this->tl % SLOTS] == this->rto ? 0 :
	    this->tl + 1 < this->hd &&
	    slot_rid[$target, this->fd, (this->tl + 1) % SLOTS] == this->rto ? 1 :
	    this->tl + 2 < this->hd &&
	    slot_rid[$target, this->fd, (this->tl + 2) % SLOTS] == this->rto ? 2 :
	    this->tl + 3 < this->hd &&
	    slot_rid[$target, this->fd, (this->tl + 3) % SLOTS] == this->rto ? 3 : SLOTS;
}

/*
 * F: did the matched reply fail? (probes/README.md, "Replies that failed"):
 * this->err 0 (no), its code, or -1 (failed, no code). this->e, the message
 * offset of the first element of its (first) document: an OP_MSG whose body
 * section comes first (kind 0 @20, the element @25); an OP_REPLY (responseFlags
 * @16, the document @36, the element @40), failed also when QueryFailure (bit
 * 1) is set. Read from this send's bytes, but for a reply gathered across
 * sends (this->sp): T2 did the test on its first 40 bytes (this->err,
 * this->ep, and this->e for an OP_REPLY's document); what lies past them is in
 * this buffer (F3 and F4 read only bytes of it: this->off + this->ep >= 0).
 */
syscall::write:return, syscall::write_nocancel:return,
syscall::send:return, syscall::sendto:return, syscall::sendto_nocancel:return,
syscall::writev:return, syscall::writev_nocancel:return,
syscall::sendmsg:return, syscall::sendmsg_nocancel:return
/this->tx_go && this->valid && this->k < SLOTS/
{
	/* responseFlags @16, an OP_MSG's first section kind @20: one read */
	this->q = !this->sp && this->off + 16 >= 0 && this->off + 24 <= this->n ?
	    *(uint64_t *)copyin(this->buf + this->off + 16, 8) : 0;
	this->e = this->sp ? this->e : this->op == OP_MSG && this->len >= 33 && this->off + 20 >= 0 &&
	    this->off + 33 <= this->n ? (((this->q >> 32) & 0xff) == 0 ? 25 : 0) :
	    this->op == OP_REPLY && this->len >= 48 && this->off + 16 >= 0 &&
	    this->off + 48 <= this->n ? 40 : 0;
	this->err = this->sp ? this->err : this->e == 40 && (this->q & 2) != 0 ? -1 : 0;
	this->ep = this->sp ? this->ep : 0;
	this->vs = 0;
}

/* F1: the first element: "ok" with a number or bool (its value's size), or, in an
 * OP_REPLY, "$err" (a string: a legacy query's failure). */
syscall::write:return, syscall::write_nocancel:return,
syscall::send:return, syscall::sendto:return, syscall::sendto_nocancel:return,
syscall::writev:return, syscall::writev_nocancel:return,
syscall::sendmsg:return, syscall::sendmsg_nocancel:return
/this->tx_go && this->valid && this->k < SLOTS && this->e != 0/
{
	this->ey = *(uint64_t *)copyin(this->buf + this->off + this->e, 8);
	this->et = this->ey & 0xff;
	this->vs = (this->ey & 0xffffff00) != 0x006b6f00 ? 0 :
	    this->et == 1 || this->et == 0x12 ? 8 : this->et == 0x10 ? 4 : this->et == 8 ? 1 : 0;
	this->ep = this->e == 40 && (this->ey & 0xffffffffffff) == 0x007272652402 ? 40 : 0;
	this->err = this->ep != 0 ? -1 : this->err;
}

/* F2: ok's value: zero (a double's sign ignored) is a failure; the code follows. */
syscall::write:return, syscall::write_nocancel:return,
syscall::send:return, syscall::sendto:return, syscall::sendto_nocancel:return,
syscall::writev:return, syscall::writev_nocancel:return,
syscall::sendmsg:return, syscall::sendmsg_nocancel:return
/this->tx_go && this->valid && this->k < SLOTS && this->vs != 0 &&
    this->e + 4 + this->vs <= this->len && this->off + this->e + 4 + this->vs <= this->n/
{
	this->v = this->vs == 8 ?
	    *(uint64_t *)copyin(this->buf + this->off + this->e + 4, 8) << (this->et == 1 ? 1 : 0) :
	    this->vs == 4 ? this->ey >> 32 : (this->ey >> 32) & 0xff;
	this->err = this->v == 0 ? -1 : this->err;
	this->ep = this->v == 0 ? this->e + 4 + this->vs : 0;
}

/* F3: a string element at this->ep, errmsg (after ok) or $err: skip it (its int32
 * length follows the name). */
syscall::write:return, syscall::write_nocancel:return,
syscall::send:return, syscall::sendto:return, syscall::sendto_nocancel:return,
syscall::writev:return, syscall::writev_nocancel:return,
syscall::sendmsg:return, syscall::sendmsg_nocancel:return
/this->tx_go && this->valid && this->k < SLOTS && this->ep != 0 &&
    this->off + this->ep >= 0 && this->ep + 12 <= this->len && this->off + this->ep + 12 <= this->n/
{
	this->p = (uint8_t *)copyin(this->buf + this->off + this->ep, 12);
	this->ey = *(uint64_t *)this->p;
	this->q = *(uint64_t *)(this->p + 4);	/* bytes 4-11: the length @8 or @6 */
	this->es = this->ey == 0x0067736d72726502 ? 8 :
	    (this->ey & 0xffffffffffff) == 0x007272652402 ? 6 : 0;
	this->ep = this->es == 0 ? this->ep : this->ep + this->es + 4 +
	    (int32_t)(this->es == 8 ? this->q >> 32 : (this->q >> 16) & 0xffffffff);
}

/* F4: the code: an int32 element "code" at this->ep. */
syscall::write:return, syscall::write_nocancel:return,
syscall::send:return, syscall::sendto:return, syscall::sendto_nocancel:return,
syscall::writev:return, syscall::writev_nocancel:return,
syscall::sendmsg:return, syscall::sendmsg_nocancel:return
/this->tx_go && this->valid && this->k < SLOTS && this->ep > this->e &&
    this->off + this->ep >= 0 && this->ep + 10 <= this->len && this->off + this->ep + 10 <= this->n/
{
	this->p = (uint8_t *)copyin(this->buf + this->off + this->ep, 10);
	this->ey = *(uint64_t *)this->p;
	this->ec = (this->ey & 0xffffffffffff) != 0x0065646f6310 ? 0 : *(int32_t *)(this->p + 6);
	this->err = this->ec != 0 ? this->ec : this->err;
}

/* P2: the reply to an outstanding request: its latency. */
syscall::write:return, syscall::write_nocancel:return,
syscall::send:return, syscall::sendto:return, syscall::sendto_nocancel:return,
syscall::writev:return, syscall::writev_nocancel:return,
syscall::sendmsg:return, syscall::sendmsg_nocancel:return
/this->tx_go && this->valid && this->k < SLOTS/
{
	this->tl = this->tl + this->k;
	this->s = this->tl % SLOTS;
	this->lat = this->ts - slot_ts[$target, this->fd, this->s];
	this->o = slot_op[$target, this->fd, this->s];
	this->opname = opnames[this->o];
	@by_op[this->opname] = quantize(this->lat);
	@by_cmd[slot_cmd[$target, this->fd, this->s]] = quantize(this->lat);
	@replies_cmd[slot_cmd[$target, this->fd, this->s]] = count();
	@total_op[this->opname] = sum(this->lat);
	@total_cmd[slot_cmd[$target, this->fd, this->s]] = sum(this->lat);
	@max_op[this->opname] = max(this->lat);
	@max_cmd[slot_cmd[$target, this->fd, this->s]] = max(this->lat);
	@replies = sum(1);
	@without = sum(-1);
	tail[$target, this->fd] = this->tl + 1;
	/* moreToCome: more replies follow, each answering the previous one */
	stream[$target, this->fd] = this->mtc ? this->rid : 0;
}

/* P2c: its latency per connection (unless NO_CONN). */
syscall::write:return, syscall::write_nocancel:return,
syscall::send:return, syscall::sendto:return, syscall::sendto_nocancel:return,
syscall::writev:return, syscall::writev_nocancel:return,
syscall::sendmsg:return, syscall::sendmsg_nocancel:return
/this->tx_go && this->valid && this->k < SLOTS && !NO_CONN/
{
	@by_conn[pid, this->fd & ~TLS_FD] = quantize(this->lat);
	@total_conn[pid, this->fd & ~TLS_FD] = sum(this->lat);
	@max_conn[pid, this->fd & ~TLS_FD] = max(this->lat);
}

/* P2x: a failed reply, per command and code (rare). */
syscall::write:return, syscall::write_nocancel:return,
syscall::send:return, syscall::sendto:return, syscall::sendto_nocancel:return,
syscall::writev:return, syscall::writev_nocancel:return,
syscall::sendmsg:return, syscall::sendmsg_nocancel:return
/this->tx_go && this->valid && this->k < SLOTS && this->err != 0/
{
	@failed_cmd[slot_cmd[$target, this->fd, this->s], this->err] = count();
	@failed_op[this->opname, this->err] = count();
}

/* P3: the next reply of an exhaust stream: counted, not timed again. */
syscall::write:return, syscall::write_nocancel:return,
syscall::send:return, syscall::sendto:return, syscall::sendto_nocancel:return,
syscall::writev:return, syscall::writev_nocancel:return,
syscall::sendmsg:return, syscall::sendmsg_nocancel:return
/this->tx_go && this->valid && this->k == SLOTS && stream[$target, this->fd] != 0 &&
    stream[$target, this->fd] == this->rto/
{
	@stream = sum(1);
	stream[$target, this->fd] = this->mtc ? this->rid : 0;
	this->k = SLOTS + 1;
}

/* P3n: the answer to the connection's last request that expected none (C1n):
 * counted per command, once (the id is forgotten: a second reply to it is
 * unmatched). Only on the unmatched path: one dynamic-variable lookup. */
syscall::write:return, syscall::write_nocancel:return,
syscall::send:return, syscall::sendto:return, syscall::sendto_nocancel:return,
syscall::writev:return, syscall::writev_nocancel:return,
syscall::sendmsg:return, syscall::sendmsg_nocancel:return
/this->tx_go && this->valid && this->k == SLOTS &&
    nrid[$target, this->fd] == (0x100000000 | (uint32_t)this->rto)/
{
	@answered = sum(1);
	@answered_cmd[nrcmd[$target, this->fd]] = count();
	nrid[$target, this->fd] = 0;
	this->k = SLOTS + 1;
}

/* P4: a reply to nothing this script saw. */
syscall::write:return, syscall::write_nocancel:return,
syscall::send:return, syscall::sendto:return, syscall::sendto_nocancel:return,
syscall::writev:return, syscall::writev_nocancel:return,
syscall::sendmsg:return, syscall::sendmsg_nocancel:return
/this->tx_go && this->valid && this->k == SLOTS/
{
	@unmatched = sum(1);
}

syscall::write:return, syscall::write_nocancel:return,
syscall::send:return, syscall::sendto:return, syscall::sendto_nocancel:return,
syscall::writev:return, syscall::writev_nocancel:return,
syscall::sendmsg:return, syscall::sendmsg_nocancel:return
/this->tx_go && this->valid/
{
	this->fin = this->len <= this->ret - this->off;
	txrem[$target, this->fd] = this->fin ? 0 : this->len - (this->ret - this->off);
	this->off = this->fin ? this->off + this->len : this->ret;
	this->valid = 0;
}
/* S: a reply header at this->off. */
syscall::write:return, syscall::write_nocancel:return,
syscall::send:return, syscall::sendto:return, syscall::sendto_nocancel:return,
syscall::writev:return, syscall::writev_nocancel:return,
syscall::sendmsg:return, syscall::sendmsg_nocancel:return
/this->tx_go/
{
	this->it = !this->stop && this->off + 16 <= this->n;
	this->valid = 0;
	this->sp = 0;
}

syscall::write:return, syscall::write_nocancel:return,
syscall::send:return, syscall::sendto:return, syscall::sendto_nocancel:return,
syscall::writev:return, syscall::writev_nocancel:return,
syscall::sendmsg:return, syscall::sendmsg_nocancel:return
/this->tx_go && this->it/
{
	this->p = (uint8_t *)copyin(this->buf + this->off, 16);
	this->q = *(uint64_t *)this->p;
	this->len = (int32_t)(this->q & 0xffffffff);
	this->rid = (int32_t)(this->q >> 32);
	this->q = *(uint64_t *)(this->p + 8);
	this->rto = (int32_t)(this->q & 0xffffffff);
	this->op = (int32_t)(this->q >> 32);
	this->valid = this->len >= 16 && this->len <= MAX_MESSAGE &&
	    (this->op == OP_MSG || this->op == OP_REPLY || this->op == OP_COMPRESSED);
	/* moreToCome on an OP_MSG reply: an exhaust stream follows */
	this->mtc = this->op == OP_MSG && this->n - this->off >= 20 ?
	    (*(uint32_t *)copyin(this->buf + this->off + 16, 4) & 2) != 0 : 0;
	/* the send ends inside the reply's first 40 bytes (those that say whether
	 * it failed): kept by T4, matched when the rest comes (T2) */
	this->cut = this->valid && this->n == this->ret && this->ret - this->off < 40 &&
	    this->ret - this->off < this->len;
	this->valid = this->valid && !this->cut;
	this->it = !this->cut;
	this->stop = this->cut ? 2 : 0;
}

syscall::write:return, syscall::write_nocancel:return,
syscall::send:return, syscall::sendto:return, syscall::sendto_nocancel:return,
syscall::writev:return, syscall::writev_nocancel:return,
syscall::sendmsg:return, syscall::sendmsg_nocancel:return
/this->tx_go && this->it && !this->valid/
{
	@malformed = sum(1);
	txrem[$target, this->fd] = 0;
	this->off = this->ret;
	this->stop = 1;
}
/* P1: a reply header (this->len, rid, rto, op, mtc) at this->off (negative when
 * its first bytes came in an earlier send), sent at this->ts. Match it against
 * the outstanding requests, oldest first; older ones skipped over never got
 * their reply (they stay counted in @without). */
syscall::write:return, syscall::write_nocancel:return,
syscall::send:return, syscall::sendto:return, syscall::sendto_nocancel:return,
syscall::writev:return, syscall::writev_nocancel:return,
syscall::sendmsg:return, syscall::sendmsg_nocancel:return
/this->tx_go && this->valid/
{
	this->tl = tail[$target, this->fd];
	this->hd = head[$target, this->fd];
	this->k = this->tl < this->hd &&
	    slot_rid[$target, this->fd, this->tl % SLOTS] == this->rto ? 0 :
	    this->tl + 1 < this->hd &&
	    slot_rid[$target, this->fd, (this->tl + 1) % SLOTS] == this->rto ? 1 :
	    this->tl + 2 < this->hd &&
	    slot_rid[$target, this->fd, (this->tl + 2) % SLOTS] == this->rto ? 2 :
	    this->tl + 3 < this->hd &&
	    slot_rid[$target, this->fd, (this->tl + 3) % SLOTS] == this->rto ? 3 : SLOTS;
}

/*
 * F: did the matched reply fail? (probes/README.md, "Replies that failed"):
 * this->err 0 (no), its code, or -1 (failed, no code). this->e, the message
 * offset of the first element of its (first) document: an OP_MSG whose body
 * section comes first (kind 0 @20, the element @25); an OP_REPLY (responseFlags
 * @16, the document @36, the element @40), failed also when QueryFailure (bit
 * 1) is set. Read from this send's bytes, but for a reply gathered across
 * sends (this->sp): T2 did the test on its first 40 bytes (this->err,
 * this->ep, and this->e for an OP_REPLY's document); what lies past them is in
 * this buffer (F3 and F4 read only bytes of it: this->off + this->ep >= 0).
 */
syscall::write:return, syscall::write_nocancel:return,
syscall::send:return, syscall::sendto:return, syscall::sendto_nocancel:return,
syscall::writev:return, syscall::writev_nocancel:return,
syscall::sendmsg:return, syscall::sendmsg_nocancel:return
/this->tx_go && this->valid && this->k < SLOTS/
{
	/* responseFlags @16, an OP_MSG's first section kind @20: one read */
	this->q = !this->sp && this->off + 16 >= 0 && this->off + 24 <= this->n ?
	    *(uint64_t *)copyin(this->buf + this->off + 16, 8) : 0;
	this->e = this->sp ? this->e : this->op == OP_MSG && this->len >= 33 && this->off + 20 >= 0 &&
	    this->off + 33 <= this->n ? (((this->q >> 32) & 0xff) == 0 ? 25 : 0) :
	    this->op == OP_REPLY && this->len >= 48 && this->off + 16 >= 0 &&
	    this->off + 48 <= this->n ? 40 : 0;
	this->err = this->sp ? this->err : this->e == 40 && (this->q & 2) != 0 ? -1 : 0;
	this->ep = this->sp ? this->ep : 0;
	this->vs = 0;
}

/* F1: the first element: "ok" with a number or bool (its value's size), or, in an
 * OP_REPLY, "$err" (a string: a legacy query's failure). */
syscall::write:return, syscall::write_nocancel:return,
syscall::send:return, syscall::sendto:return, syscall::sendto_nocancel:return,
syscall::writev:return, syscall::writev_nocancel:return,
syscall::sendmsg:return, syscall::sendmsg_nocancel:return
/this->tx_go && this->valid && this->k < SLOTS && this->e != 0/
{
	this->ey = *(uint64_t *)copyin(this->buf + this->off + this->e, 8);
	this->et = this->ey & 0xff;
	this->vs = (this->ey & 0xffffff00) != 0x006b6f00 ? 0 :
	    this->et == 1 || this->et == 0x12 ? 8 : this->et == 0x10 ? 4 : this->et == 8 ? 1 : 0;
	this->ep = this->e == 40 && (this->ey & 0xffffffffffff) == 0x007272652402 ? 40 : 0;
	this->err = this->ep != 0 ? -1 : this->err;
}

/* F2: ok's value: zero (a double's sign ignored) is a failure; the code follows. */
syscall::write:return, syscall::write_nocancel:return,
syscall::send:return, syscall::sendto:return, syscall::sendto_nocancel:return,
syscall::writev:return, syscall::writev_nocancel:return,
syscall::sendmsg:return, syscall::sendmsg_nocancel:return
/this->tx_go && this->valid && this->k < SLOTS && this->vs != 0 &&
    this->e + 4 + this->vs <= this->len && this->off + this->e + 4 + this->vs <= this->n/
{
	this->v = this->vs == 8 ?
	    *(uint64_t *)copyin(this->buf + this->off + this->e + 4, 8) << (this->et == 1 ? 1 : 0) :
	    this->vs == 4 ? this->ey >> 32 : (this->ey >> 32) & 0xff;
	this->err = this->v == 0 ? -1 : this->err;
	this->ep = this->v == 0 ? this->e + 4 + this->vs : 0;
}

/* F3: a string element at this->ep, errmsg (after ok) or $err: skip it (its int32
 * length follows the name). */
syscall::write:return, syscall::write_nocancel:return,
syscall::send:return, syscall::sendto:return, syscall::sendto_nocancel:return,
syscall::writev:return, syscall::writev_nocancel:return,
syscall::sendmsg:return, syscall::sendmsg_nocancel:return
/this->tx_go && this->valid && this->k < SLOTS && this->ep != 0 &&
    this->off + this->ep >= 0 && this->ep + 12 <= this->len && this->off + this->ep + 12 <= this->n/
{
	this->p = (uint8_t *)copyin(this->buf + this->off + this->ep, 12);
	this->ey = *(uint64_t *)this->p;
	this->q = *(uint64_t *)(this->p + 4);	/* bytes 4-11: the length @8 or @6 */
	this->es = this->ey == 0x0067736d72726502 ? 8 :
	    (this->ey & 0xffffffffffff) == 0x007272652402 ? 6 : 0;
	this->ep = this->es == 0 ? this->ep : this->ep + this->es + 4 +
	    (int32_t)(this->es == 8 ? this->q >> 32 : (this->q >> 16) & 0xffffffff);
}

/* F4: the code: an int32 element "code" at this->ep. */
syscall::write:return, syscall::write_nocancel:return,
syscall::send:return, syscall::sendto:return, syscall::sendto_nocancel:return,
syscall::writev:return, syscall::writev_nocancel:return,
syscall::sendmsg:return, syscall::sendmsg_nocancel:return
/this->tx_go && this->valid && this->k < SLOTS && this->ep > this->e &&
    this->off + this->ep >= 0 && this->ep + 10 <= this->len && this->off + this->ep + 10 <= this->n/
{
	this->p = (uint8_t *)copyin(this->buf + this->off + this->ep, 10);
	this->ey = *(uint64_t *)this->p;
	this->ec = (this->ey & 0xffffffffffff) != 0x0065646f6310 ? 0 : *(int32_t *)(this->p + 6);
	this->err = this->ec != 0 ? this->ec : this->err;
}

/* P2: the reply to an outstanding request: its latency. */
syscall::write:return, syscall::write_nocancel:return,
syscall::send:return, syscall::sendto:return, syscall::sendto_nocancel:return,
syscall::writev:return, syscall::writev_nocancel:return,
syscall::sendmsg:return, syscall::sendmsg_nocancel:return
/this->tx_go && this->valid && this->k < SLOTS/
{
	this->tl = this->tl + this->k;
	this->s = this->tl % SLOTS;
	this->lat = this->ts - slot_ts[$target, this->fd, this->s];
	this->o = slot_op[$target, this->fd, this->s];
	this->opname = opnames[this->o];
	@by_op[this->opname] = quantize(this->lat);
	@by_cmd[slot_cmd[$target, this->fd, this->s]] = quantize(this->lat);
	@replies_cmd[slot_cmd[$target, this->fd, this->s]] = count();
	@total_op[this->opname] = sum(this->lat);
	@total_cmd[slot_cmd[$target, this->fd, this->s]] = sum(this->lat);
	@max_op[this->opname] = max(this->lat);
	@max_cmd[slot_cmd[$target, this->fd, this->s]] = max(this->lat);
	@replies = sum(1);
	@without = sum(-1);
	tail[$target, this->fd] = this->tl + 1;
	/* moreToCome: more replies follow, each answering the previous one */
	stream[$target, this->fd] = this->mtc ? this->rid : 0;
}

/* P2c: its latency per connection (unless NO_CONN). */
syscall::write:return, syscall::write_nocancel:return,
syscall::send:return, syscall::sendto:return, syscall::sendto_nocancel:return,
syscall::writev:return, syscall::writev_nocancel:return,
syscall::sendmsg:return, syscall::sendmsg_nocancel:return
/this->tx_go && this->valid && this->k < SLOTS && !NO_CONN/
{
	@by_conn[pid, this->fd & ~TLS_FD] = quantize(this->lat);
	@total_conn[pid, this->fd & ~TLS_FD] = sum(this->lat);
	@max_conn[pid, this->fd & ~TLS_FD] = max(this->lat);
}

/* P2x: a failed reply, per command and code (rare). */
syscall::write:return, syscall::write_nocancel:return,
syscall::send:return, syscall::sendto:return, syscall::sendto_nocancel:return,
syscall::writev:return, syscall::writev_nocancel:return,
syscall::sendmsg:return, syscall::sendmsg_nocancel:return
/this->tx_go && this->valid && this->k < SLOTS && this->err != 0/
{
	@failed_cmd[slot_cmd[$target, this->fd, this->s], this->err] = count();
	@failed_op[this->opname, this->err] = count();
}

/* P3: the next reply of an exhaust stream: counted, not timed again. */
syscall::write:return, syscall::write_nocancel:return,
syscall::send:return, syscall::sendto:return, syscall::sendto_nocancel:return,
syscall::writev:return, syscall::writev_nocancel:return,
syscall::sendmsg:return, syscall::sendmsg_nocancel:return
/this->tx_go && this->valid && this->k == SLOTS && stream[$target, this->fd] != 0 &&
    stream[$target, this->fd] == this->rto/
{
	@stream = sum(1);
	stream[$target, this->fd] = this->mtc ? this->rid : 0;
	this->k = SLOTS + 1;
}

/* P3n: the answer to the connection's last request that expected none (C1n):
 * counted per command, once (the id is forgotten: a second reply to it is
 * unmatched). Only on the unmatched path: one dynamic-variable lookup. */
syscall::write:return, syscall::write_nocancel:return,
syscall::send:return, syscall::sendto:return, syscall::sendto_nocancel:return,
syscall::writev:return, syscall::writev_nocancel:return,
syscall::sendmsg:return, syscall::sendmsg_nocancel:return
/this->tx_go && this->valid && this->k == SLOTS &&
    nrid[$target, this->fd] == (0x100000000 | (uint32_t)this->rto)/
{
	@answered = sum(1);
	@answered_cmd[nrcmd[$target, this->fd]] = count();
	nrid[$target, this->fd] = 0;
	this->k = SLOTS + 1;
}

/* P4: a reply to nothing this script saw. */
syscall::write:return, syscall::write_nocancel:return,
syscall::send:return, syscall::sendto:return, syscall::sendto_nocancel:return,
syscall::writev:return, syscall::writev_nocancel:return,
syscall::sendmsg:return, syscall::sendmsg_nocancel:return
/this->tx_go && this->valid && this->k == SLOTS/
{
	@unmatched = sum(1);
}

syscall::write:return, syscall::write_nocancel:return,
syscall::send:return, syscall::sendto:return, syscall::sendto_nocancel:return,
syscall::writev:return, syscall::writev_nocancel:return,
syscall::sendmsg:return, syscall::sendmsg_nocancel:return
/this->tx_go && this->valid/
{
	this->fin = this->len <= this->ret - this->off;
	txrem[$target, this->fd] = this->fin ? 0 : this->len - (this->ret - this->off);
	this->off = this->fin ? this->off + this->len : this->ret;
	this->valid = 0;
}

/* T4: a send that ends inside a reply's first 40 bytes (a header cut short, or
 * this->cut): keep them, with the time of this send. */
syscall::write:return, syscall::write_nocancel:return,
syscall::send:return, syscall::sendto:return, syscall::sendto_nocancel:return,
syscall::writev:return, syscall::writev_nocancel:return,
syscall::sendmsg:return, syscall::sendmsg_nocancel:return
/this->tx_go && this->off < this->ret && this->n == this->ret &&
    (this->ret - this->off < 16 || this->stop == 2)/
{
	this->have = this->ret - this->off;
	this->w = (uint64_t *)alloca(48);
	this->w[0] = 0; this->w[1] = 0; this->w[2] = 0; this->w[3] = 0; this->w[4] = 0;
	this->w[5] = 0;
	copyinto(this->buf + this->off, this->have, this->w);
	txh0[$target, this->fd] = this->w[0]; txh1[$target, this->fd] = this->w[1];
	txh2[$target, this->fd] = this->w[2]; txh3[$target, this->fd] = this->w[3];
	txh4[$target, this->fd] = this->w[4];
	txhave[$target, this->fd] = this->have;
	txts[$target, this->fd] = this->ts;
	this->off = this->ret;
}

/* T5: bytes that could not be framed (past the first iovec, more than 4 replies). */
syscall::write:return, syscall::write_nocancel:return,
syscall::send:return, syscall::sendto:return, syscall::sendto_nocancel:return,
syscall::writev:return, syscall::writev_nocancel:return,
syscall::sendmsg:return, syscall::sendmsg_nocancel:return
/this->tx_go && this->off < this->ret/
{
	@malformed = sum(1);
	txrem[$target, this->fd] = 0;
}

syscall::write:return, syscall::write_nocancel:return,
syscall::send:return, syscall::sendto:return, syscall::sendto_nocancel:return,
syscall::writev:return, syscall::writev_nocancel:return,
syscall::sendmsg:return, syscall::sendmsg_nocancel:return
/self->tx_armed/
{
	self->tx_armed = 0;
	self->tx_fd = 0;
	self->tx_buf = 0;
	self->tx_cap = 0;
	self->tx_ts = 0;
}

/* ---- close: free the connection's state ---------------------------------------- */


syscall::close:entry, syscall::close_nocancel:entry
/pid == $target && known[$target, (int)arg0]/
{
	/* requests still waiting never got a reply: they stay counted in @without */
	this->fd = (int)arg0;
	known[$target, this->fd] = 0;
	rxrem[$target, this->fd] = 0; rxpos[$target, this->fd] = 0; rxneed[$target, this->fd] = 0;
	rxop[$target, this->fd] = 0; rxrid[$target, this->fd] = 0; rxlen[$target, this->fd] = 0;
	rxmtc[$target, this->fd] = 0; head[$target, this->fd] = 0; tail[$target, this->fd] = 0;
	txrem[$target, this->fd] = 0; stream[$target, this->fd] = 0; txhave[$target, this->fd] = 0;
	nrid[$target, this->fd] = 0;
	txh0[$target, this->fd] = 0; txh1[$target, this->fd] = 0; txh2[$target, this->fd] = 0;
	txh3[$target, this->fd] = 0; txh4[$target, this->fd] = 0; txts[$target, this->fd] = 0;
	slot_rid[$target, this->fd, 0] = 0; slot_ts[$target, this->fd, 0] = 0;
	slot_op[$target, this->fd, 0] = 0; slot_len[$target, this->fd, 0] = 0;
	slot_rid[$target, this->fd, 1] = 0; slot_ts[$target, this->fd, 1] = 0;
	slot_op[$target, this->fd, 1] = 0; slot_len[$target, this->fd, 1] = 0;
	slot_rid[$target, this->fd, 2] = 0; slot_ts[$target, this->fd, 2] = 0;
	slot_op[$target, this->fd, 2] = 0; slot_len[$target, this->fd, 2] = 0;
	slot_rid[$target, this->fd, 3] = 0; slot_ts[$target, this->fd, 3] = 0;
	slot_op[$target, this->fd, 3] = 0; slot_len[$target, this->fd, 3] = 0;
}

syscall::close:entry, syscall::close_nocancel:entry
/pid == $target && tlsfd[$target, (int)arg0] != 0/
{
	tlsfd[$target, (int)arg0] = 0;
}

/* ---- END ------------------------------------------------------------------------ */

END
{
	printf("\nlatency_ns_by_op:\n");
	printa(@by_op);
	printf("\nlatency_ns_by_command:\n");
	printa(@by_cmd);
	printf("\nlatency_ns_by_conn:\n");
	printa(@by_conn);
	printf("\nrequests_by_op:\n");
	printa("  %-32s  %@d\n", @requests_by_op);
	printf("\nrequests_by_command:\n");
	printa("  %-32s  %@d\n", @requests_by_cmd);
	printf("\nreplies_by_command:\n");
	printa("  %-32s  %@d\n", @replies_cmd);
	printf("\ntotal_ns_by_op:\n");
	printa("  %-32s  %@d\n", @total_op);
	printf("\ntotal_ns_by_command:\n");
	printa("  %-32s  %@d\n", @total_cmd);
	printf("\ntotal_ns_by_conn:\n");
	printa("  %d,%d  %@d\n", @total_conn);
	printf("\nmax_ns_by_op:\n");
	printa("  %-32s  %@d\n", @max_op);
	printf("\nmax_ns_by_command:\n");
	printa("  %-32s  %@d\n", @max_cmd);
	printf("\nmax_ns_by_conn:\n");
	printa("  %d,%d  %@d\n", @max_conn);
	/* failed replies (ok: 0, $err, QueryFailure) per command and code */
	printf("\nfailed_by_command:\n");
	printa("  %s,%d  %@d\n", @failed_cmd);
	printf("\nfailed_by_op:\n");
	printa("  %s,%d  %@d\n", @failed_op);
	printf("\n");
	printa("requests: %@d  replies: %@d  stream replies: %@d  no-reply (moreToCome): %@d\n",
	    @requests, @replies, @stream, @noreply);
	/* replies the server sent anyway to requests that expected none (P3n): not lost */
	printa("answered though sent with moreToCome: %@d\n", @answered);
	printa("lost: unmatched replies %@d, requests without reply %@d, malformed headers %@d, dropped events 0\n",
	    @unmatched, @without, @malformed);
	/* ... per command (the request's), as requests_by_command */
	printf("\nanswered_no_reply_by_command:\n");
	printa("  %-32s  %@d\n", @answered_cmd);
	/* TLS connections: whose bytes were TLS records, or whose plaintext came */
	printf("\ntls:\n");
	printa("  connections  %@d\n", @tls_conns);
	printf("(dropped events: DTrace reports its own on stderr, e.g. \"dynamic variable drops\": raise -x dynvarsize)\n");
}
