/*
 * flushloop.c - a process that makes a known number of known calls, for the
 * probes' tests (tests/test_profile_probes.py compiles and drives it).
 *
 * USAGE: flushloop flush FILE N   msync N, fsync N+1, fdatasync N+2,
 *                                 sync_file_range N+3 (4096 bytes each), syncfs 1
 *        flushloop getppid N      getppid N times
 *        flushloop spin SEC       thread "spinner" burns a CPU for SEC seconds
 *                                 while the main thread "sleeper" sleeps
 *
 * Protocol, so a probe can attach first: it prints "ready PID" and waits for a
 * line on stdin; then it does the work, prints "done" and waits for another
 * line (or EOF) before exiting, so the probe can end while the pid lives.
 * The counts differ per syscall so that a probe mixing them up fails.
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#define MAP_BYTES (4 * 4096)

static void die(const char *what)
{
	perror(what);
	exit(1);
}

static void wait_line(void)
{
	char buf[64];
	if (!fgets(buf, sizeof(buf), stdin))
		return;
}

static double now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

/* Left open (and mapped) until exit, as a database keeps its files, so a tool can
 * still name the file behind the fd after the loop. */
static void do_flush(const char *path, long n)
{
	int fd = open(path, O_RDWR | O_CREAT | O_TRUNC, 0644);
	if (fd < 0)
		die("open");
	if (ftruncate(fd, MAP_BYTES) < 0)
		die("ftruncate");
	char *p = mmap(NULL, MAP_BYTES, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (p == MAP_FAILED)
		die("mmap");
	for (long i = 0; i < n; i++) {
		p[(i * 4096) % MAP_BYTES] = (char)i;	/* dirty a page, then flush it */
		if (msync(p, MAP_BYTES, MS_SYNC) < 0)
			die("msync");
	}
	for (long i = 0; i < n + 1; i++) {
		if (pwrite(fd, "x", 1, i % MAP_BYTES) != 1)
			die("pwrite");
		if (fsync(fd) < 0)
			die("fsync");
	}
	for (long i = 0; i < n + 2; i++)
		if (fdatasync(fd) < 0)
			die("fdatasync");
	for (long i = 0; i < n + 3; i++)
		if (sync_file_range(fd, 0, 4096, SYNC_FILE_RANGE_WRITE) < 0)
			die("sync_file_range");
	if (syncfs(fd) < 0)
		die("syncfs");
}

static double spin_until;

static void *spinner(void *arg)
{
	(void)arg;
	volatile unsigned long x = 0;
	while (now() < spin_until)
		for (int i = 0; i < 100000; i++)
			x += i;
	return NULL;
}

int main(int argc, char **argv)
{
	if (argc < 3) {
		fprintf(stderr, "USAGE: flushloop flush FILE N | getppid N | spin SEC\n");
		return 2;
	}
	printf("ready %d\n", (int)getpid());
	fflush(stdout);
	wait_line();
	if (strcmp(argv[1], "flush") == 0 && argc == 4) {
		do_flush(argv[2], atol(argv[3]));
	} else if (strcmp(argv[1], "getppid") == 0) {
		long n = atol(argv[2]);
		for (long i = 0; i < n; i++)
			syscall(SYS_getppid);
	} else if (strcmp(argv[1], "spin") == 0) {
		pthread_t t;
		spin_until = now() + atof(argv[2]);
		pthread_setname_np(pthread_self(), "sleeper");
		if (pthread_create(&t, NULL, spinner, NULL) != 0)
			die("pthread_create");
		pthread_setname_np(t, "spinner");
		while (now() < spin_until) {
			struct timespec ts = {0, 100 * 1000 * 1000};
			nanosleep(&ts, NULL);
		}
		pthread_join(t, NULL);
	} else {
		fprintf(stderr, "flushloop: unknown mode %s\n", argv[1]);
		return 2;
	}
	printf("done\n");
	fflush(stdout);
	wait_line();
	return 0;
}
