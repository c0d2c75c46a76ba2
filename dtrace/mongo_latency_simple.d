#!/usr/sbin/dtrace -s
/*
 * mongo_latency_simple.d	MongoDB-protocol server latency per command, as
 *				distributions. Uses DTrace (Oracle DTrace on Linux,
 *				portable D: illumos, FreeBSD, macOS should run it too).
 *
 * USAGE: dtrace -s mongo_latency_simple.d -p PID [SECONDS]
 *        (prints at Ctrl-C, or after SECONDS when given)
 *
 * A teaching version of mongo_time.d: the idea in 60 lines. A client's
 * request arrives as one message: a 16-byte header (messageLength, requestID,
 * responseTo, opCode) and a body. The server reads it with a read() or
 * recvfrom() syscall and answers with the next write(), sendto() or sendmsg()
 * on the same socket fd. The time from the end of that read to the start of
 * that write is the server's latency for the request, without network or
 * client. For OP_MSG (opCode 2013) the command's name is the first key of the
 * body's section 0: a C string at byte 26 of the message.
 *
 * This script assumes one whole message per read: a read that returns more or
 * less than its messageLength (pipelined requests, a large insert read in
 * pieces), readv/recvmsg receives (mongod reads the header and the body with
 * two recvmsg calls), OP_QUERY and OP_COMPRESSED requests, TLS, and requests
 * with no reply (moreToCome) are left out, or mistimed. mongo_time.d handles
 * all of them and feeds `mongoprobe latency --engine dtrace`.
 *
 * CHECKED: Oracle DTrace 2.0 on Linux 6.18 (dtrace-utils 8a1264bf, x86-64),
 * by tests/test_teaching_probes.py.
 * NOT CHECKED on illumos/SmartOS, FreeBSD or macOS (nothing in it is Linux's).
 *
 * Example: dtrace -s mongo_latency_simple.d -p $(pgrep -n ferretdb) 10
 *
 *   find
 *            value  ------------- Distribution ------------- count
 *                8 |                                         0
 *               16 |@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@          11
 *               32 |@@@@@@@@@                                3
 *               64 |                                         0
 *
 * (eleven of the 14 finds answered 16 to 31 us after their read's end).
 */

#pragma D option quiet
/* $1 is 0 when SECONDS is not given */
#pragma D option defaultargs

dtrace:::BEGIN
{
	printf("Tracing MongoDB requests of PID %d... Hit Ctrl-C to end.\n", $target);
}

/* A receive: note the thread's fd and buffer until the syscall returns. */
syscall::read:entry, syscall::recvfrom:entry
/pid == $target/
{
	self->fd = arg0;
	self->buf = arg1;
}

/* It returned: a request if its bytes are one whole OP_MSG with a body section. */
syscall::read:return, syscall::recvfrom:return
/self->buf && (int)arg0 >= 27/
{
	/* (copyin's buffer lasts one clause: keep the values) */
	this->len = *(int32_t *)copyin(self->buf, 4);		/* messageLength */
	this->op = *(int32_t *)copyin(self->buf + 12, 4);	/* opCode */
	this->kind = *(uint8_t *)copyin(self->buf + 20, 1);	/* section kind */
}

syscall::read:return, syscall::recvfrom:return
/self->buf && (int)arg0 >= 27 && (int)arg0 == this->len &&
 this->op == 2013 && this->kind == 0/		/* OP_MSG, its body section */
{
	start[self->fd] = timestamp;
	command[self->fd] = copyinstr(self->buf + 26, 32);	/* the body's first key */
}

syscall::read:return, syscall::recvfrom:return
/self->buf/
{
	self->buf = 0;
	self->fd = 0;
}

/* The next send on a socket with a request pending carries the reply. */
syscall::write:entry, syscall::sendto:entry, syscall::sendmsg:entry
/pid == $target && start[arg0]/
{
	@usecs[command[arg0]] = quantize((timestamp - start[arg0]) / 1000);
	start[arg0] = 0;
}

profile:::tick-1s
/$1 > 0 && ++secs >= $1/
{
	exit(0);
}

dtrace:::END
{
	printf("\nLatency per command (read's end to reply's write), microseconds:\n");
	printa(@usecs);
}
