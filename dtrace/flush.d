#!/usr/sbin/dtrace -s
/*
 * flush.d	Flushes of one process: msync (memcntl MC_SYNC on illumos), fsync,
 *		fdatasync (fdsync on illumos), sync_file_range, syncfs latency, bytes,
 *		threads, files and the user stacks that call them.
 *		For illumos/SmartOS, FreeBSD, macOS and Linux (Oracle DTrace), uses DTrace.
 *
 * USAGE: dtrace -s flush.d -p PID [SECONDS]
 *        (without SECONDS it runs until Ctrl-C and prints at END)
 *
 * The DTrace version of probes/flush.bt, and the seed's
 *   dtrace -n 'syscall::memcntl:entry /pid == $target && tid == 3/
 *              { @[ustack()] = count(); } tick-60s { exit(0); }' -p `pgrep mongod`
 * that found mongod's DataFileSync thread in msync(3C) -> memcntl(2), with the
 * time each call took. Per call name (msync, fsync, fdatasync) it prints, in
 * flush.bt's layout (mongoprobe.formats.flush_output reads both):
 *
 *   flush_ns:                     title, then one quantize (ns) per name
 *   @flush_stats[NAME]: count N, average N, total N      latency in ns
 *   @flush_bytes[NAME]: N         msync length summed
 *   @flush_errors[NAME]: N        calls that failed
 *   @flush_by_thread[TID, EXECNAME, NAME]: N
 *   @flush_by_fd[NAME, FD]: N     (-1 for msync: it takes an address)
 *   @msync_by_addr[ADDR, LEN, FLAGS]: N
 *   @flush_stacks[NAME, ustack]: N
 *
 * The histograms are DTrace quantize output, not bpftrace hist() rows; the
 * stacks are printa %k output (module`function+0xoffset).
 *
 * Syscalls by OS (names are listed; "zdefs" lets the missing ones match nothing):
 *   illumos/SmartOS  memcntl (cmd MC_SYNC only; libc msync() calls it),
 *                    fdsync (fsync(3C) passes FSYNC, fdatasync(3C) FDSYNC)
 *   FreeBSD          msync, fsync, fdatasync
 *   macOS            msync, msync_nocancel, fsync, fsync_nocancel, fdatasync
 *   Linux            msync, fsync, fdatasync, sync_file_range, syncfs
 *
 * CHECKED: Oracle DTrace 2.0 on Linux 6.18 (dtrace-utils 8a1264bf, x86-64):
 * compiled and run on tests/flushloop.c (tests/test_dtrace.py): exact counts
 * of msync, fsync, fdatasync, sync_file_range and syncfs, bytes, threads, fds
 * and user stacks down to main().
 * NOT CHECKED on illumos/SmartOS, FreeBSD or macOS: no run there yet. Unchecked
 * there: the memcntl and fdsync paths (only illumos has them) and that the
 * MC_SYNC (1) and FSYNC/FDSYNC values match <sys/mman.h> and <sys/file.h>;
 * check the "matched N probes" line on the first run.
 *
 * Example (tests/flushloop.c on Linux, Oracle DTrace; stack trimmed):
 *   @flush_stats[msync]: count 50, average 126787, total 6339386
 *   @flush_stacks[msync,
 *   libc.so.6`msync+0x10
 *   flushloop`main+0xc4
 *   ]: 50
 * Read it as: 50 msync calls averaging 127 us, all from main(). The seed's
 * memcntl stacks on SmartOS (libc.so.1`memcntl+0xa, libc.so.1`msync+0xc9,
 * mongod`_ZN5mongo14PosixFlushable5flushEv+0x3e, ... : 19) are what
 * @flush_stacks[msync, ...] holds there.
 *
 * Overhead: two probe firings per flush call of the pid and a ustack() walk;
 * flushes are rare next to that.
 *
 * Caveats: a call in progress at the start is not timed. On illumos msync()
 * is memcntl(MC_SYNC); other memcntl commands are not flushes and are skipped.
 * fdsync flag values: FSYNC 0x10, FDSYNC 0x40 (illumos <sys/file.h>).
 *
 * Copyright the mongoprobe authors. Licensed under the Apache License, Version 2.0.
 */

#pragma D option quiet
#pragma D option zdefs
#pragma D option defaultargs
#pragma D option strsize=32

inline int MC_SYNC = 1;		/* illumos <sys/mman.h> */
inline int FDSYNC = 0x40;	/* illumos <sys/file.h> */

dtrace:::BEGIN
{
	secs = 0;
	printf("# clock hrtime_ns=%d elapsed_ns=0\n", timestamp);
	printf("Tracing flushes of PID %d (msync fsync fdatasync sync_file_range syncfs)... Hit Ctrl-C to end.\n",
	    $target);
}

/* illumos: msync(3C) -> memcntl(addr, len, MC_SYNC, flags, 0, 0) */
syscall::memcntl:entry
/pid == $target && arg2 == MC_SYNC/
{
	self->kind = 1; self->ts = timestamp;
	@flush_bytes["msync"] = sum(arg1);
	@msync_by_addr[arg0, arg1, arg3] = count();
	@flush_by_fd["msync", -1] = count();
	@flush_stacks["msync", ustack()] = count();
}

/* FreeBSD, macOS: msync(addr, len, flags) */
syscall::msync:entry, syscall::msync_nocancel:entry
/pid == $target/
{
	self->kind = 1; self->ts = timestamp;
	@flush_bytes["msync"] = sum(arg1);
	@msync_by_addr[arg0, arg1, arg2] = count();
	@flush_by_fd["msync", -1] = count();
	@flush_stacks["msync", ustack()] = count();
}

/* illumos: fsync(3C) and fdatasync(3C) -> fdsync(fd, FSYNC or FDSYNC) */
syscall::fdsync:entry
/pid == $target/
{
	self->kind = (arg1 & FDSYNC) ? 3 : 2; self->ts = timestamp;
	this->name = self->kind == 3 ? "fdatasync" : "fsync";
	@flush_by_fd[this->name, (int)arg0] = count();
	@flush_stacks[this->name, ustack()] = count();
}

syscall::fsync:entry, syscall::fsync_nocancel:entry
/pid == $target/
{
	self->kind = 2; self->ts = timestamp;
	@flush_by_fd["fsync", (int)arg0] = count();
	@flush_stacks["fsync", ustack()] = count();
}

syscall::fdatasync:entry
/pid == $target/
{
	self->kind = 3; self->ts = timestamp;
	@flush_by_fd["fdatasync", (int)arg0] = count();
	@flush_stacks["fdatasync", ustack()] = count();
}

/* Linux (Oracle DTrace): sync_file_range(fd, offset, nbytes, flags), syncfs(fd) */
syscall::sync_file_range:entry
/pid == $target/
{
	self->kind = 4; self->ts = timestamp;
	@flush_bytes["sync_file_range"] = sum(arg2);
	@flush_by_fd["sync_file_range", (int)arg0] = count();
	@flush_stacks["sync_file_range", ustack()] = count();
}

syscall::syncfs:entry
/pid == $target/
{
	self->kind = 5; self->ts = timestamp;
	@flush_by_fd["syncfs", (int)arg0] = count();
	@flush_stacks["syncfs", ustack()] = count();
}

syscall::memcntl:return, syscall::msync:return, syscall::msync_nocancel:return,
syscall::fdsync:return, syscall::fsync:return, syscall::fsync_nocancel:return,
syscall::fdatasync:return, syscall::sync_file_range:return, syscall::syncfs:return
/self->ts/
{
	this->ns = timestamp - self->ts;
	this->name = self->kind == 1 ? "msync" : self->kind == 2 ? "fsync" :
	    self->kind == 3 ? "fdatasync" : self->kind == 4 ? "sync_file_range" : "syncfs";
	@flush_ns[this->name] = quantize(this->ns);
	@fl_count[this->name] = count();
	@fl_avg[this->name] = avg(this->ns);
	@fl_total[this->name] = sum(this->ns);
	@flush_by_thread[tid, execname, this->name] = count();
	@flush_errors[this->name] = sum(errno != 0 ? 1 : 0);
	self->ts = 0;
	self->kind = 0;
}

tick-1s
/$1 != 0 && ++secs >= $1/
{
	exit(0);
}

dtrace:::END
{
	printf("flush_ns:\n");
	printa(@flush_ns);
	printa("@flush_stats[%s]: count %@d, average %@d, total %@d\n",
	    @fl_count, @fl_avg, @fl_total);
	printa("@flush_bytes[%s]: %@d\n", @flush_bytes);
	printa("@flush_errors[%s]: %@d\n", @flush_errors);
	printa("@flush_by_thread[%d, %s, %s]: %@d\n", @flush_by_thread);
	printa("@flush_by_fd[%s, %d]: %@d\n", @flush_by_fd);
	printa("@msync_by_addr[%d, %d, %d]: %@d\n", @msync_by_addr);
	printa("@flush_stacks[%s, %k]: %@d\n", @flush_stacks);
}
