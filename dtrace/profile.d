#!/usr/sbin/dtrace -s
/*
 * profile.d	On-CPU profile of one process: kernel + user stacks at 97 Hertz,
 *		per thread, in one-second time buckets.
 *		For illumos/SmartOS, FreeBSD, macOS and Linux (Oracle DTrace), uses DTrace.
 *
 * USAGE: dtrace -s profile.d -p PID [TID [SECONDS]]
 *        (TID 0 = every thread; without SECONDS it runs until Ctrl-C;
 *        add -x ustackframes=100 for deep stacks, -o FILE to keep the output)
 *
 * The DTrace version of probes/profile.bt, and the seed's
 *   dtrace -n 'profile-97 /pid == $target && tid == 3 && arg0/ {@[stack()] = count();}'
 * generalised: every sample of the pid (user and kernel mode, not only
 * arg0 != 0, the kernel ones), both stacks, per thread and per second.
 * At the end it prints, in the layout of profile.bt's bpftrace map print:
 *
 *   @[SECOND, TID, EXECNAME, kstack, ustack]: COUNT
 *   @samples_total: N
 *
 * SECOND counts from the start; "# clock hrtime_ns=N" (printed at the start)
 * is the DTrace timestamp of second 0. EXECNAME is the process name (DTrace
 * has no portable thread name). Frames are printed by printa's %k, DTrace's
 * stack form (module`function+0xoffset, one per line), not bpftrace's.
 * 97 Hz, not 99 or 100: prime, so sampling does not run in lockstep with
 * timers (the seed's choice).
 *
 * Probes: profile-97 (profile provider), tick-1s for SECONDS.
 * CHECKED: Oracle DTrace 2.0 on Linux 6.18 (dtrace-utils 8a1264bf, x86-64):
 * compiled and run on FerretDB v1.24.0 under load (tests/test_dtrace.py):
 * user stacks symbolised (Go and SQLite frames), folded by mongoprobe fold
 * --format dtrace into a flame graph, every sample printed (@samples_total).
 * NOT CHECKED on illumos/SmartOS, FreeBSD or macOS: no run there yet (compare
 * @samples_total with 97 x CPU-seconds of the pid, prstat -mLp PID).
 *
 * Example (FerretDB on Linux, Oracle DTrace; one entry, trimmed):
 *   @[0, 29058, ferretdb,
 *   vmlinux`do_sched_yield+0x71
 *   vmlinux`entry_SYSCALL_64_after_hwframe+0x76
 *   ,
 *   ferretdb`runtime.osyield.abi0+0x7
 *   ferretdb`runtime.sysmon+0x12a
 *   ferretdb`runtime.mstart.abi0+0xc
 *   ]: 1
 * Read it as: in second 0, thread 29058 was sampled once in sched_yield,
 * called from the Go runtime's sysmon. The seed's output for one thread of
 * mongod on SmartOS (2014) is the kernel half of such an entry: memcntl ->
 * as_ctl -> segvn_sync ... page lookups under msync().
 *
 * Overhead: one probe firing per CPU per sample (97 x CPUs a second) and two
 * stack walks when the pid is on-CPU; the aggregation is kept in the kernel.
 *
 * Caveats: nearly every sample is its own key (second x thread x stacks):
 * raise -x aggsize (e.g. 64m) for long runs; DTrace reports "aggregation
 * drops" on stderr when it is full. ustack() of a process that exited before
 * the end prints hex addresses. JIT frames need jstack() (not used here).
 *
 * Copyright the mongoprobe authors. Licensed under the Apache License, Version 2.0.
 */

#pragma D option quiet
#pragma D option defaultargs
#pragma D option aggsize=16m

dtrace:::BEGIN
{
	start = timestamp;
	secs = 0;
	printf("# clock hrtime_ns=%d elapsed_ns=0\n", start);
	printf("# profile.d pid=%d tid=%d hz=97\n", $target, $1);
	printf("Sampling PID %d at 97 Hertz (user + kernel stacks)... Hit Ctrl-C to end.\n",
	    $target);
}

profile-97
/pid == $target && ($1 == 0 || tid == $1)/
{
	@[(timestamp - start) / 1000000000, tid, execname, stack(), ustack()] = count();
	@samples_total = count();
}

tick-1s
/$2 != 0 && ++secs >= $2/
{
	exit(0);
}

dtrace:::END
{
	printa("@[%d, %d, %s, %k, %k]: %@d\n", @);
	printa("@samples_total: %@d\n", @samples_total);
}
