#!/usr/sbin/dtrace -s
/*
 * syscount.d	System calls of one process: count, total time and errors per
 *		syscall name.
 *		For illumos/SmartOS, FreeBSD, macOS and Linux (Oracle DTrace), uses DTrace.
 *
 * USAGE: dtrace -s syscount.d -p PID [SECONDS]
 *        (without SECONDS it runs until Ctrl-C and prints at END)
 *
 * The DTrace version of probes/syscount.bt, and the seed's count
 *   dtrace -n 'syscall:::entry /pid == $target/ { @[probefunc] = count(); }'
 * with the time of each call and its errors. It prints, in syscount.bt's
 * layout with names for keys (mongoprobe.formats.syscount_output reads both):
 *
 *   @calls[NAME]: N      calls entered
 *   @time_ns[NAME]: N    total ns from entry to return of the calls that returned
 *   @errors[NAME]: N     calls that returned with errno set
 *
 * Probes: syscall:::entry, syscall:::return, tick-1s for SECONDS.
 * CHECKED: Oracle DTrace 2.0 on Linux 6.18 (dtrace-utils 8a1264bf, x86-64):
 * compiled and run on tests/flushloop.c (tests/test_dtrace.py): the exact
 * count of its getppid calls.
 * NOT CHECKED on illumos/SmartOS, FreeBSD or macOS: no run there yet (truss -c
 * -p PID gives counts to compare on the first run).
 *
 * Example (tests/flushloop.c getppid 1234 on Linux, Oracle DTrace; trimmed):
 *   @calls[getppid]: 1234
 *   @time_ns[getppid]: 797746
 *   @errors[getppid]: 0
 * Read it as: 1234 getppid calls took 798 us in all, none failed.
 *
 * Overhead: every syscall of the pid fires two probes; at 100k syscalls/s that
 * is a few percent of a CPU. Other processes pay the predicate only.
 *
 * Caveats: a call blocked across the end is counted in @calls, not @time_ns.
 * Names are the provider's probefunc (on illumos e.g. "fdsync" for fsync(3C),
 * "memcntl" for msync(3C); on macOS the *_nocancel variants separately).
 *
 * Copyright the mongoprobe authors. Licensed under the Apache License, Version 2.0.
 */

#pragma D option quiet
#pragma D option defaultargs

dtrace:::BEGIN
{
	secs = 0;
	printf("# clock hrtime_ns=%d elapsed_ns=0\n", timestamp);
	printf("Counting syscalls of PID %d (syscall provider)... Hit Ctrl-C to end.\n",
	    $target);
}

syscall:::entry
/pid == $target/
{
	@calls[probefunc] = count();
	self->ts = timestamp;
}

syscall:::return
/self->ts/
{
	@time_ns[probefunc] = sum(timestamp - self->ts);
	@errors[probefunc] = sum(errno != 0 ? 1 : 0);
	self->ts = 0;
}

tick-1s
/$1 != 0 && ++secs >= $1/
{
	exit(0);
}

dtrace:::END
{
	printa("@calls[%s]: %@d\n", @calls);
	printa("@time_ns[%s]: %@d\n", @time_ns);
	printa("@errors[%s]: %@d\n", @errors);
}
