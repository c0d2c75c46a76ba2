#!/usr/sbin/dtrace -s
/*
 * syscount_linux.d	System calls of one process: count, total time and errors
 *			per syscall number. Linux (Oracle DTrace) only.
 *
 * USAGE: dtrace -s syscount_linux.d -p PID [SECONDS]
 *        (without SECONDS it runs until Ctrl-C and prints at END)
 *
 * syscount.d on two probes: the raw_syscalls tracepoints, which every syscall
 * passes, instead of the syscall provider's two probes per syscall (some 1,440
 * on Linux x86-64). Oracle DTrace attaches and detaches each of those one by
 * one: syscount.d took about 10 s to start and 56 s to exit on Linux 6.18,
 * this one about 3 s in all. The price is numbers for names, as in
 * probes/syscount.bt, whose layout it prints (mongoprobe.formats.syscount_output
 * reads both, and names the numbers from the machine's table):
 *
 *   @calls[NR]: N      calls entered
 *   @time_ns[NR]: N    total ns from entry to return of the calls that returned
 *   @errors[NR]: N     calls that returned an error (a return in -4095..-1)
 *
 * Probes: sdt:raw_syscalls::sys_enter (args[0] the number), sys_exit (args[1]
 * the return), tick-1s for SECONDS.
 * CHECKED: Oracle DTrace 2.0 on Linux 6.18 (dtrace-utils 8a1264bf, x86-64):
 * run on tests/flushloop.c (tests/test_dtrace.py): the exact count of its
 * getppid calls.
 * NOT CHECKED on illumos/SmartOS, FreeBSD or macOS: Linux only (there the
 * syscall provider is native and syscount.d is the tool).
 *
 * Example (tests/flushloop.c getppid 1234 on Linux; trimmed; 110 is getppid
 * on x86-64):
 *   @calls[110]: 1234
 *   @time_ns[110]: 797746
 *   @errors[110]: 0
 *
 * Overhead: every syscall on the machine fires both probes (the pid predicate
 * is checked in them); at 100k syscalls/s that is a few percent of a CPU.
 *
 * Caveats: a call blocked across the end is counted in @calls, not @time_ns.
 *
 * Copyright the mongoprobe authors. Licensed under the Apache License, Version 2.0.
 */

#pragma D option quiet
#pragma D option defaultargs

dtrace:::BEGIN
{
	secs = 0;
	printf("# clock hrtime_ns=%d elapsed_ns=0\n", timestamp);
	printf("Counting syscalls of PID %d (raw_syscalls)... Hit Ctrl-C to end.\n",
	    $target);
}

sdt:raw_syscalls::sys_enter
/pid == $target/
{
	@calls[args[0]] = count();
	self->nr = args[0];
	self->ts = timestamp;
}

sdt:raw_syscalls::sys_exit
/self->ts/
{
	@time_ns[self->nr] = sum(timestamp - self->ts);
	/* the kernel's error returns: -MAX_ERRNO (-4095) .. -1 */
	@errors[self->nr] = sum(args[1] < 0 && args[1] >= -4095 ? 1 : 0);
	self->ts = 0;
}

tick-1s
/$1 != 0 && ++secs >= $1/
{
	exit(0);
}

dtrace:::END
{
	printa("@calls[%d]: %@d\n", @calls);
	printa("@time_ns[%d]: %@d\n", @time_ns);
	printa("@errors[%d]: %@d\n", @errors);
}
