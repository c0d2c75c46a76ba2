#!/usr/sbin/dtrace -s
/*
 * mongo_time.d	MongoDB wire-protocol server latency, per opcode and command.
 *		For illumos/SmartOS, FreeBSD and macOS, uses DTrace.
 *
 * USAGE: dtrace -s mongo_time.d -p PID [-x dynvarsize=64m]
 *        (or ./mongo_time.d -p `pgrep mongod`; runs until Ctrl-C, prints at END)
 *
 * The DTrace version of probes/mongo_latency.bt. Times each request of a
 * MongoDB-protocol server (mongod, FerretDB, ...) from the return of the receive
 * syscall that completed it to the entry of the send syscall carrying its reply:
 * the server's own time, without network or client. Decodes the 16-byte MsgHeader
 * (messageLength, requestID, responseTo, opCode) and the command name (OP_MSG:
 * first key of the kind-0 body; OP_QUERY on "db.$cmd": first key of the query,
 * else "find"; legacy opcodes: the opcode name). Copies headers and names only,
 * never document contents.
 *
 * At END (Ctrl-C) it prints, each after a title line a parser can key on:
 *   latency_ns_by_op:       quantize of latency (ns) per request opcode name
 *   latency_ns_by_command:  quantize of latency (ns) per command
 *   requests_by_op:, requests_by_command:   completed requests
 *   avg_ns_by_op:, avg_ns_by_command:       mean latency (ns)
 * then the footer shared with the Linux tools (parse_scalars reads it):
 *   requests: N  replies: N  stream replies: N  no-reply (moreToCome): N
 *   lost: unmatched replies N, requests without reply N, malformed headers N, dropped events N
 *
 * Syscalls hooked, on one pid (-p), with their first iovec for the vector forms:
 *   illumos/SmartOS: read readv recv recvfrom recvmsg (requests, at return)
 *                    write writev send sendto sendmsg (replies, at entry)  close
 *   FreeBSD:         read readv recvfrom recvmsg / write writev sendto sendmsg
 *                    close (no recv/send syscalls: libc uses recvfrom/sendto)
 *   macOS:           the FreeBSD set plus each *_nocancel variant
 * Names are listed rather than globbed (syscall::read*: would also match readlink
 * and readv, whose arguments differ); "#pragma D option zdefs" lets the names an
 * OS lacks match nothing. (zdefs also hides a misspelt probe name: check the
 * "matched N probes" line dtrace prints.)
 *
 * State is kept per connection, keyed by (pid, fd), never by requestID alone,
 * and freed on close(). The state machine follows probes/README.md with one
 * outstanding request per connection (MongoDB servers answer one request at a
 * time per connection; exhaust cursors are followed as stream replies).
 *
 * Fixed from Max Bruning's 2014 mongo_time.d (shared/seeds/004): his global
 * t[requestID] collided when two connections used the same requestID, and
 * "self->resTO = 0; t[self->resTO] = 0;" freed t[0] instead of the request's
 * entry, so the array only grew (hence his dynvarsize=256m). Here a reply is
 * timed only if its responseTo equals the requestID stored for its connection.
 *
 * CHECKED: nowhere yet. Not yet run on a DTrace system (written on Linux, where
 * DTrace is not available); treat the first run as a test and compare its
 * counts with the server's own (FerretDB /debug/metrics, mongod serverStatus
 * opcounters).
 *
 * Example: none from this script yet (see CHECKED). Its histograms have the form
 * of the original script's, shown as printed in 2014 during a YCSB load of mongod
 * on SmartOS (samples/quantize/dtrace-mongo_time-load.txt):
 *
 *     distribution in nsecs
 *              value  ------------- Distribution ------------- count
 *              16384 |                                         0
 *              32768 |@@@@@@@@@@@@@@@@@@@@@@@@@@@              304521
 *              65536 |@@@@@@@@@@@@                             133288
 *             131072 |@                                        5643
 *             262144 |                                         271
 *             524288 |                                         6
 *            1048576 |                                         0
 *
 *     avg                                                           65688
 *     total requests handled                                       443729
 *
 * Read it as: 304521 requests took 32-65 us inside the server, 6 took 0.5-1 ms.
 * This script prints one such histogram per opcode name under the title
 * "latency_ns_by_op:" and one per command under "latency_ns_by_command:", each
 * keyed by the name (e.g. "  OP_MSG", "  find") where the original printed
 * "distribution in nsecs"; requests and averages follow as printa lines
 * ("  find    443729"), then the footer.
 *
 * Overhead: every read/write-family syscall of the pid runs a few hundred DIF
 * instructions and a few dynamic-variable lookups; nothing is printed per request,
 * so the cost stays in the kernel. At Bruning's ~13000 syscalls/s it is small;
 * measure with alternating runs (bench/) before trusting a number.
 *
 * Caveats:
 * - LP64, little-endian targets only (x86-64, arm64): iovec/msghdr offsets are
 *   the 64-bit ones, header fields are read as native int32.
 * - Only the first message of a buffer is decoded. Bytes after it (a client that
 *   pipelines several messages into one write, a server that reads several at
 *   once) count once as "malformed" and framing resynchronises on the next valid
 *   header. Drivers send one request and wait for its reply, so this is rare.
 * - A header split across two receives (1-15 bytes at a message boundary) counts
 *   as malformed and resets the framing.
 * - Invalid headers on a connection that never showed a valid one are not
 *   protocol traffic (log and data files of the same pid) and are ignored; a
 *   header is valid when 16 <= messageLength <= 48000000 and the opcode is known.
 * - Command names are read from the receive that holds them (mongod reads the
 *   header, then the body: the name is taken from the body's receive), cut at 32
 *   bytes. OP_COMPRESSED bodies give "[compressed]"; an unreadable name "-".
 * - A new request on a connection whose previous one is still unanswered counts
 *   the previous one as "requests without reply"; so do requests outstanding
 *   when their connection closes and at END (about one per busy connection when
 *   tracing stops under load). Replies to requests received before tracing
 *   started count as unmatched replies.
 * - Command and opcode name strings stay in dynamic arrays per (pid, fd) until
 *   the fd is reused (a string dynamic variable cannot be freed portably); the numeric
 *   state is freed on close(). fds closed by other means (closefrom, dup2 over,
 *   exit) keep their state until the fd number is reused.
 * - dropped events: printed as 0. DTrace counts its own losses and reports them
 *   on stderr ("N dynamic variable drops": raise -x dynvarsize; "N drops on CPU":
 *   raise -x bufsize). Check stderr after each run.
 * - macOS: System Integrity Protection must allow DTrace (csrutil enable
 *   --without dtrace), or the syscall provider is unavailable.
 *
 * Copyright the mongoprobe authors. Licensed under the Apache License, Version 2.0.
 * Derived from mongo_time.d by Max Bruning (Joyent, 2014).
 * Generated from mongo_wire.d.in by probes/mkbt.py: edit the template, not this file.
 */

#pragma D option quiet
#pragma D option zdefs
#pragma D option strsize=64
#pragma D option dynvarsize=16m

inline int OP_REPLY = 1;
inline int OP_QUERY = 2004;
inline int OP_COMPRESSED = 2012;
inline int OP_MSG = 2013;
inline int MAX_MESSAGE = 48000000;	/* the server's maxMessageSizeBytes */

BEGIN
{
	/* Counters print even when zero (printa skips empty aggregations). */
	@requests = sum(0); @replies = sum(0); @stream = sum(0); @noreply = sum(0);
	@unmatched = sum(0); @without = sum(0); @malformed = sum(0);
	printf("Tracing MongoDB wire protocol of PID %d... Hit Ctrl-C to end.\n", $target);
}

/* ---- receives: remember fd and buffer (first iovec) at entry ----------------- */

syscall::read:entry, syscall::read_nocancel:entry,
syscall::recv:entry, syscall::recvfrom:entry, syscall::recvfrom_nocancel:entry
/pid == $target/
{
	self->rx_fd = (int)arg0;
	self->rx_buf = arg1;
	self->rx_cap = (int64_t)arg2;
	self->rx_armed = 1;
}

syscall::readv:entry, syscall::readv_nocancel:entry
/pid == $target && (int)arg2 > 0/
{
	/* struct iovec { void *iov_base; size_t iov_len; } */
	this->iov = (uint64_t *)copyin(arg1, 16);
	self->rx_fd = (int)arg0;
	self->rx_buf = this->iov[0];
	self->rx_cap = (int64_t)this->iov[1];
	self->rx_armed = 1;
}

syscall::recvmsg:entry, syscall::recvmsg_nocancel:entry
/pid == $target/
{
	/* struct msghdr: msg_name @0, msg_namelen @8, msg_iov @16, msg_iovlen @24 */
	this->mh = (uint64_t *)copyin(arg1, 32);
	self->rx_iov = this->mh[2];
	self->rx_iovlen = (int)this->mh[3];
}

syscall::recvmsg:entry, syscall::recvmsg_nocancel:entry
/pid == $target && self->rx_iovlen > 0 && self->rx_iov != 0/
{
	this->iov = (uint64_t *)copyin(self->rx_iov, 16);
	self->rx_fd = (int)arg0;
	self->rx_buf = this->iov[0];
	self->rx_cap = (int64_t)this->iov[1];
	self->rx_armed = 1;
}

syscall::recvmsg:entry, syscall::recvmsg_nocancel:entry
/pid == $target/
{
	self->rx_iov = 0;
	self->rx_iovlen = 0;
}

/* ---- receives at return: framing, header, command name ------------------------ */

/*
 * R0: every this-> variable the later clauses read is set here (clause-local
 * variables are undefined until assigned in the current firing); self->rx_go
 * guards the rest of this firing.
 */
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
	this->rem = rxrem[pid, this->fd];
	this->pos = 0;
	this->take = 0;
	this->extra = 0;
	this->complete = 0;
	this->valid = 0;
	this->len = 0; this->rid = 0; this->rto = 0; this->op = 0;
	this->want = 0;		/* read a command name from this buffer */
	this->body = 0;		/* user address of message offset 16 in this buffer */
	this->bavail = 0;	/* bytes of the message available from this->body */
	this->kind = 0; this->more = 0; this->seq = 0; this->nslen = 0; this->qcmd = 0;
	this->cmd = "-";
	self->rx_go = this->ret > 0 ? 1 : 0;
}

/* R1: the buffer continues a message whose header came earlier. */
syscall::read:return, syscall::read_nocancel:return,
syscall::recv:return, syscall::recvfrom:return, syscall::recvfrom_nocancel:return,
syscall::readv:return, syscall::readv_nocancel:return,
syscall::recvmsg:return, syscall::recvmsg_nocancel:return
/self->rx_go && this->rem > 0/
{
	this->pos = rxpos[pid, this->fd];
	this->take = this->ret < this->rem ? this->ret : this->rem;
	rxrem[pid, this->fd] = this->rem - this->take;
	rxpos[pid, this->fd] = this->pos + this->take;
	this->complete = this->take == this->rem;
	this->extra = this->ret - this->take;
	/* mongod's pattern: the header came alone, the body (offset 16) starts here */
	this->want = rxneed[pid, this->fd] && this->pos == 16;
	this->op = pend_op[pid, this->fd];
	this->body = this->buf;
	this->bavail = this->n < this->take ? this->n : this->take;
	rxneed[pid, this->fd] = 0;
}

/* R2: the buffer starts at a message boundary: read and check the header. */
syscall::read:return, syscall::read_nocancel:return,
syscall::recv:return, syscall::recvfrom:return, syscall::recvfrom_nocancel:return,
syscall::readv:return, syscall::readv_nocancel:return,
syscall::recvmsg:return, syscall::recvmsg_nocancel:return
/self->rx_go && this->rem == 0 && this->n >= 16/
{
	this->h = (int32_t *)copyin(this->buf, 16);
	this->len = this->h[0];
	this->rid = this->h[1];
	this->rto = this->h[2];
	this->op = this->h[3];
	this->valid = this->len >= 16 && this->len <= MAX_MESSAGE &&
	    (this->op == OP_MSG || this->op == OP_QUERY || this->op == OP_REPLY ||
	    this->op == OP_COMPRESSED || this->op == 2001 || this->op == 2002 ||
	    this->op == 2005 || this->op == 2006 || this->op == 2007);
}

/*
 * R3: not a header. On a connection that never spoke the protocol these are
 * other bytes (files, pipes) and are ignored; on a known one the framing is lost:
 * count once, then resynchronise silently on the next valid header.
 */
syscall::read:return, syscall::read_nocancel:return,
syscall::recv:return, syscall::recvfrom:return, syscall::recvfrom_nocancel:return,
syscall::readv:return, syscall::readv_nocancel:return,
syscall::recvmsg:return, syscall::recvmsg_nocancel:return
/self->rx_go && this->rem == 0 && !this->valid && known[pid, this->fd] &&
    !rxsync[pid, this->fd]/
{
	@malformed = sum(1);
	rxsync[pid, this->fd] = 1;
	rxneed[pid, this->fd] = 0;
}

/* R4: a valid header: frame the message and remember it until it is complete. */
syscall::read:return, syscall::read_nocancel:return,
syscall::recv:return, syscall::recvfrom:return, syscall::recvfrom_nocancel:return,
syscall::readv:return, syscall::readv_nocancel:return,
syscall::recvmsg:return, syscall::recvmsg_nocancel:return
/self->rx_go && this->rem == 0 && this->valid/
{
	known[pid, this->fd] = 1;
	rxsync[pid, this->fd] = 0;
	this->take = this->ret < this->len ? this->ret : this->len;
	rxrem[pid, this->fd] = this->len - this->take;
	rxpos[pid, this->fd] = this->take;
	this->complete = this->take == this->len;
	this->extra = this->ret - this->take;
	/* a request: client-to-server opcodes; OP_MSG/OP_COMPRESSED with responseTo 0 */
	this->isreq = this->op != OP_REPLY &&
	    (this->rto == 0 || (this->op >= 2001 && this->op <= 2007));
	pend_id[pid, this->fd] = this->rid;
	pend_op[pid, this->fd] = this->op;
	pend_isreq[pid, this->fd] = this->isreq;
	pend_more[pid, this->fd] = 0;
	pend_cmd[pid, this->fd] = this->op == OP_COMPRESSED ? "[compressed]" :
	    this->op == 2002 ? "OP_INSERT" : this->op == 2001 ? "OP_UPDATE" :
	    this->op == 2006 ? "OP_DELETE" : this->op == 2005 ? "OP_GET_MORE" :
	    this->op == 2007 ? "OP_KILL_CURSORS" : "-";
	this->want = this->isreq && (this->op == OP_MSG || this->op == OP_QUERY);
	this->body = this->buf + 16;
	this->bavail = (this->n < this->take ? this->n : this->take) - 16;
	/* header alone (mongod reads 16 bytes first): the name is in the next buffer */
	rxneed[pid, this->fd] = this->want && this->take == 16 && this->len > 16;
}

/* R5: OP_MSG: flagBits @0 (bit 1: moreToCome), first section kind @4. */
syscall::read:return, syscall::read_nocancel:return,
syscall::recv:return, syscall::recvfrom:return, syscall::recvfrom_nocancel:return,
syscall::readv:return, syscall::readv_nocancel:return,
syscall::recvmsg:return, syscall::recvmsg_nocancel:return
/self->rx_go && this->want && this->op == OP_MSG && this->bavail >= 11/
{
	this->b = (uint8_t *)copyin(this->body, 5);
	this->more = (*(uint32_t *)this->b & 2) != 0;
	this->kind = this->b[4];
	/* kind 0: int32 size @5, element type @9, the first key (the command) @10 */
	this->cmd = this->kind == 0 ? copyinstr(this->body + 10, 32) : "-";
	/* kind 1 (a document sequence) first: its int32 size @5; the body follows */
	this->seq = this->kind == 1 && this->bavail >= 9 ?
	    *(int32_t *)copyin(this->body + 5, 4) : 0;
}

syscall::read:return, syscall::read_nocancel:return,
syscall::recv:return, syscall::recvfrom:return, syscall::recvfrom_nocancel:return,
syscall::readv:return, syscall::readv_nocancel:return,
syscall::recvmsg:return, syscall::recvmsg_nocancel:return
/self->rx_go && this->want && this->op == OP_MSG && this->seq > 4 &&
    5 + this->seq + 7 <= this->bavail &&
    *(uint8_t *)copyin(this->body + 5 + this->seq, 1) == 0/
{
	this->cmd = copyinstr(this->body + 5 + this->seq + 6, 32);
}

/* R6: OP_QUERY: flags @0, namespace @4; on "db.$cmd" the query's first key. */
syscall::read:return, syscall::read_nocancel:return,
syscall::recv:return, syscall::recvfrom:return, syscall::recvfrom_nocancel:return,
syscall::readv:return, syscall::readv_nocancel:return,
syscall::recvmsg:return, syscall::recvmsg_nocancel:return
/self->rx_go && this->want && this->op == OP_QUERY && this->bavail >= 6/
{
	this->ns = copyinstr(this->body + 4, 63);
	this->nslen = strlen(this->ns);
	this->cmd = "find";
	/* key @ 4 + nslen + 1 (nul) + 8 (skip, return) + 4 (doc size) + 1 (type) */
	this->qcmd = this->nslen > 5 && substr(this->ns, this->nslen - 5) == ".$cmd" &&
	    this->nslen + 18 < this->bavail;
}

syscall::read:return, syscall::read_nocancel:return,
syscall::recv:return, syscall::recvfrom:return, syscall::recvfrom_nocancel:return,
syscall::readv:return, syscall::readv_nocancel:return,
syscall::recvmsg:return, syscall::recvmsg_nocancel:return
/self->rx_go && this->want && this->op == OP_QUERY && this->qcmd/
{
	this->cmd = copyinstr(this->body + this->nslen + 18, 32);
	/* old drivers wrap the command: {$query: {cmd: ...}}: 7 + 4 + 1 bytes on */
	this->cmd = this->cmd == "$query" && this->nslen + 30 < this->bavail ?
	    copyinstr(this->body + this->nslen + 30, 32) : this->cmd;
}

/* R7: keep what was read for the request. */
syscall::read:return, syscall::read_nocancel:return,
syscall::recv:return, syscall::recvfrom:return, syscall::recvfrom_nocancel:return,
syscall::readv:return, syscall::readv_nocancel:return,
syscall::recvmsg:return, syscall::recvmsg_nocancel:return
/self->rx_go && this->want/
{
	pend_cmd[pid, this->fd] = this->cmd;
	pend_more[pid, this->fd] = this->more;
}

/* R8: a complete request. moreToCome: the client expects no reply. */
syscall::read:return, syscall::read_nocancel:return,
syscall::recv:return, syscall::recvfrom:return, syscall::recvfrom_nocancel:return,
syscall::readv:return, syscall::readv_nocancel:return,
syscall::recvmsg:return, syscall::recvmsg_nocancel:return
/self->rx_go && this->complete && pend_isreq[pid, this->fd]/
{
	this->o = pend_op[pid, this->fd];
	this->opname = this->o == OP_MSG ? "OP_MSG" : this->o == OP_QUERY ? "OP_QUERY" :
	    this->o == OP_COMPRESSED ? "OP_COMPRESSED" : this->o == 2002 ? "OP_INSERT" :
	    this->o == 2001 ? "OP_UPDATE" : this->o == 2006 ? "OP_DELETE" :
	    this->o == 2005 ? "OP_GET_MORE" : this->o == 2007 ? "OP_KILL_CURSORS" :
	    "OP_UNKNOWN";
	@requests = sum(1);
	@requests_by_op[this->opname] = count();
	@requests_by_cmd[pend_cmd[pid, this->fd]] = count();
	@noreply = sum(pend_more[pid, this->fd] ? 1 : 0);
}

/* R9: it expects a reply: start its clock, take the connection's reply slot. */
syscall::read:return, syscall::read_nocancel:return,
syscall::recv:return, syscall::recvfrom:return, syscall::recvfrom_nocancel:return,
syscall::readv:return, syscall::readv_nocancel:return,
syscall::recvmsg:return, syscall::recvmsg_nocancel:return
/self->rx_go && this->complete && pend_isreq[pid, this->fd] &&
    !pend_more[pid, this->fd]/
{
	/*
	 * @without counts +1 here and -1 when the reply matches: what is left is the
	 * requests never answered (replaced by a newer one, closed, or at END).
	 */
	@without = sum(1);
	outstanding[pid, this->fd] = 1;
	reqid[pid, this->fd] = pend_id[pid, this->fd];
	reqop[pid, this->fd] = this->opname;
	reqcmd[pid, this->fd] = pend_cmd[pid, this->fd];
	start[pid, this->fd] = timestamp;
}

/* R10: bytes after the message in the same buffer cannot be framed here. */
syscall::read:return, syscall::read_nocancel:return,
syscall::recv:return, syscall::recvfrom:return, syscall::recvfrom_nocancel:return,
syscall::readv:return, syscall::readv_nocancel:return,
syscall::recvmsg:return, syscall::recvmsg_nocancel:return
/self->rx_go && this->complete && this->extra > 0/
{
	@malformed = sum(1);
	rxsync[pid, this->fd] = 1;
}

syscall::read:return, syscall::read_nocancel:return,
syscall::recv:return, syscall::recvfrom:return, syscall::recvfrom_nocancel:return,
syscall::readv:return, syscall::readv_nocancel:return,
syscall::recvmsg:return, syscall::recvmsg_nocancel:return
/self->rx_armed/
{
	self->rx_armed = 0;
	self->rx_go = 0;
	self->rx_fd = 0;
	self->rx_buf = 0;
	self->rx_cap = 0;
}

/* ---- sends: read the header at entry, commit at return with the bytes sent ------ */

syscall::write:entry, syscall::write_nocancel:entry,
syscall::send:entry, syscall::sendto:entry, syscall::sendto_nocancel:entry
/pid == $target/
{
	self->tx_fd = (int)arg0;
	self->tx_buf = arg1;
	self->tx_cap = (int64_t)arg2;
	self->tx_armed = 1;
}

syscall::writev:entry, syscall::writev_nocancel:entry
/pid == $target && (int)arg2 > 0/
{
	this->iov = (uint64_t *)copyin(arg1, 16);
	self->tx_fd = (int)arg0;
	self->tx_buf = this->iov[0];
	self->tx_cap = (int64_t)this->iov[1];
	self->tx_armed = 1;
}

syscall::sendmsg:entry, syscall::sendmsg_nocancel:entry
/pid == $target/
{
	this->mh = (uint64_t *)copyin(arg1, 32);
	self->tx_iov = this->mh[2];
	self->tx_iovlen = (int)this->mh[3];
}

syscall::sendmsg:entry, syscall::sendmsg_nocancel:entry
/pid == $target && self->tx_iovlen > 0 && self->tx_iov != 0/
{
	this->iov = (uint64_t *)copyin(self->tx_iov, 16);
	self->tx_fd = (int)arg0;
	self->tx_buf = this->iov[0];
	self->tx_cap = (int64_t)this->iov[1];
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
	self->tx_hdr = 0;
	self->tx_flags = 0;
}

syscall::write:entry, syscall::write_nocancel:entry,
syscall::send:entry, syscall::sendto:entry, syscall::sendto_nocancel:entry,
syscall::writev:entry, syscall::writev_nocancel:entry,
syscall::sendmsg:entry, syscall::sendmsg_nocancel:entry
/self->tx_armed && txrem[pid, self->tx_fd] == 0 && self->tx_cap >= 16/
{
	this->h = (int32_t *)copyin(self->tx_buf, 16);
	self->tx_len = this->h[0];
	self->tx_rid = this->h[1];
	self->tx_rto = this->h[2];
	self->tx_op = this->h[3];
	self->tx_hdr = self->tx_len >= 16 && self->tx_len <= MAX_MESSAGE &&
	    (self->tx_op == OP_MSG || self->tx_op == OP_QUERY || self->tx_op == OP_REPLY ||
	    self->tx_op == OP_COMPRESSED || self->tx_op == 2001 || self->tx_op == 2002 ||
	    self->tx_op == 2005 || self->tx_op == 2006 || self->tx_op == 2007);
}

syscall::write:entry, syscall::write_nocancel:entry,
syscall::send:entry, syscall::sendto:entry, syscall::sendto_nocancel:entry,
syscall::writev:entry, syscall::writev_nocancel:entry,
syscall::sendmsg:entry, syscall::sendmsg_nocancel:entry
/self->tx_armed && self->tx_hdr && self->tx_op == OP_MSG && self->tx_cap >= 20/
{
	self->tx_flags = *(uint32_t *)copyin(self->tx_buf + 16, 4);
}

/* T0: see R0. */
syscall::write:return, syscall::write_nocancel:return,
syscall::send:return, syscall::sendto:return, syscall::sendto_nocancel:return,
syscall::writev:return, syscall::writev_nocancel:return,
syscall::sendmsg:return, syscall::sendmsg_nocancel:return
/self->tx_armed/
{
	this->ret = (int64_t)arg1;
	this->fd = self->tx_fd;
	this->rem = txrem[pid, this->fd];
	this->take = 0;
	this->extra = 0;
	this->isreply = 0;
	this->matched = 0;
	this->more = (self->tx_flags & 2) != 0;
	self->tx_go = this->ret > 0 ? 1 : 0;
}

/* T1: the send continues a message. */
syscall::write:return, syscall::write_nocancel:return,
syscall::send:return, syscall::sendto:return, syscall::sendto_nocancel:return,
syscall::writev:return, syscall::writev_nocancel:return,
syscall::sendmsg:return, syscall::sendmsg_nocancel:return
/self->tx_go && this->rem > 0/
{
	this->take = this->ret < this->rem ? this->ret : this->rem;
	txrem[pid, this->fd] = this->rem - this->take;
	this->extra = this->ret - this->take;
}

/* T2: not a header on a known connection (log writes elsewhere are ignored). */
syscall::write:return, syscall::write_nocancel:return,
syscall::send:return, syscall::sendto:return, syscall::sendto_nocancel:return,
syscall::writev:return, syscall::writev_nocancel:return,
syscall::sendmsg:return, syscall::sendmsg_nocancel:return
/self->tx_go && this->rem == 0 && !self->tx_hdr && known[pid, this->fd] &&
    !txsync[pid, this->fd]/
{
	@malformed = sum(1);
	txsync[pid, this->fd] = 1;
}

/* T3: a valid header. A reply: OP_MSG/OP_REPLY/OP_COMPRESSED with a responseTo. */
syscall::write:return, syscall::write_nocancel:return,
syscall::send:return, syscall::sendto:return, syscall::sendto_nocancel:return,
syscall::writev:return, syscall::writev_nocancel:return,
syscall::sendmsg:return, syscall::sendmsg_nocancel:return
/self->tx_go && this->rem == 0 && self->tx_hdr/
{
	known[pid, this->fd] = 1;
	txsync[pid, this->fd] = 0;
	this->take = this->ret < self->tx_len ? this->ret : self->tx_len;
	txrem[pid, this->fd] = self->tx_len - this->take;
	this->extra = this->ret - this->take;
	this->isreply = self->tx_rto != 0 && (self->tx_op == OP_MSG ||
	    self->tx_op == OP_REPLY || self->tx_op == OP_COMPRESSED);
}

/* T4: the reply to the connection's outstanding request: its latency. */
syscall::write:return, syscall::write_nocancel:return,
syscall::send:return, syscall::sendto:return, syscall::sendto_nocancel:return,
syscall::writev:return, syscall::writev_nocancel:return,
syscall::sendmsg:return, syscall::sendmsg_nocancel:return
/self->tx_go && this->isreply && outstanding[pid, this->fd] &&
    self->tx_rto == reqid[pid, this->fd]/
{
	this->ns = self->tx_ts - start[pid, this->fd];
	@by_op[reqop[pid, this->fd]] = quantize(this->ns);
	@by_cmd[reqcmd[pid, this->fd]] = quantize(this->ns);
	@avg_op[reqop[pid, this->fd]] = avg(this->ns);
	@avg_cmd[reqcmd[pid, this->fd]] = avg(this->ns);
	@replies = sum(1);
	@without = sum(-1);
	outstanding[pid, this->fd] = 0;
	reqid[pid, this->fd] = 0;
	start[pid, this->fd] = 0;
	this->matched = 1;
	/* moreToCome: more replies follow, each answering the previous one */
	streaming[pid, this->fd] = this->more;
	streamid[pid, this->fd] = self->tx_rid;
}

/* T5: a further reply of an exhaust stream. */
syscall::write:return, syscall::write_nocancel:return,
syscall::send:return, syscall::sendto:return, syscall::sendto_nocancel:return,
syscall::writev:return, syscall::writev_nocancel:return,
syscall::sendmsg:return, syscall::sendmsg_nocancel:return
/self->tx_go && this->isreply && !this->matched && streaming[pid, this->fd] &&
    self->tx_rto == streamid[pid, this->fd]/
{
	@stream = sum(1);
	this->matched = 1;
	streaming[pid, this->fd] = this->more;
	streamid[pid, this->fd] = self->tx_rid;
}

/* T6: a reply to nothing this script saw. */
syscall::write:return, syscall::write_nocancel:return,
syscall::send:return, syscall::sendto:return, syscall::sendto_nocancel:return,
syscall::writev:return, syscall::writev_nocancel:return,
syscall::sendmsg:return, syscall::sendmsg_nocancel:return
/self->tx_go && this->isreply && !this->matched/
{
	@unmatched = sum(1);
}

/* T7: see R10. */
syscall::write:return, syscall::write_nocancel:return,
syscall::send:return, syscall::sendto:return, syscall::sendto_nocancel:return,
syscall::writev:return, syscall::writev_nocancel:return,
syscall::sendmsg:return, syscall::sendmsg_nocancel:return
/self->tx_go && this->extra > 0/
{
	@malformed = sum(1);
	txsync[pid, this->fd] = 1;
}

syscall::write:return, syscall::write_nocancel:return,
syscall::send:return, syscall::sendto:return, syscall::sendto_nocancel:return,
syscall::writev:return, syscall::writev_nocancel:return,
syscall::sendmsg:return, syscall::sendmsg_nocancel:return
/self->tx_armed/
{
	self->tx_armed = 0;
	self->tx_go = 0;
	self->tx_fd = 0;
	self->tx_buf = 0;
	self->tx_cap = 0;
	self->tx_ts = 0;
	self->tx_hdr = 0;
	self->tx_flags = 0;
	self->tx_len = 0; self->tx_rid = 0; self->tx_rto = 0; self->tx_op = 0;
}

/* ---- close: free the connection's state ---------------------------------------- */

syscall::close:entry, syscall::close_nocancel:entry
/pid == $target && known[pid, (int)arg0]/
{
	/* an unanswered request stays counted in @without */
	this->fd = (int)arg0;
	known[pid, this->fd] = 0;
	rxrem[pid, this->fd] = 0; rxpos[pid, this->fd] = 0; rxneed[pid, this->fd] = 0;
	rxsync[pid, this->fd] = 0; txrem[pid, this->fd] = 0; txsync[pid, this->fd] = 0;
	pend_id[pid, this->fd] = 0; pend_op[pid, this->fd] = 0;
	pend_isreq[pid, this->fd] = 0; pend_more[pid, this->fd] = 0;
	outstanding[pid, this->fd] = 0; reqid[pid, this->fd] = 0; start[pid, this->fd] = 0;
	streaming[pid, this->fd] = 0; streamid[pid, this->fd] = 0;
}

/* ---- END: histograms, counts, then the footer every mongoprobe tool prints ------- */

END
{
	printf("\nlatency_ns_by_op:\n");
	printa(@by_op);
	printf("\nlatency_ns_by_command:\n");
	printa(@by_cmd);
	printf("\nrequests_by_op:\n");
	printa(@requests_by_op);
	printf("\nrequests_by_command:\n");
	printa(@requests_by_cmd);
	printf("\navg_ns_by_op:\n");
	printa(@avg_op);
	printf("\navg_ns_by_command:\n");
	printa(@avg_cmd);
	printf("\n");
	printa("requests: %@d  replies: %@d  stream replies: %@d  no-reply (moreToCome): %@d\n",
	    @requests, @replies, @stream, @noreply);
	printa("lost: unmatched replies %@d, requests without reply %@d, malformed headers %@d, dropped events 0\n",
	    @unmatched, @without, @malformed);
	printf("(dropped events: DTrace reports its own on stderr, e.g. \"dynamic variable drops\": raise -x dynvarsize)\n");
}
