/* uprobe_trap.c - calls an empty function N times and prints ns per call: run with
 * and without a uprobe on f, the difference is what one uprobe hit costs (the
 * breakpoint trap and the kernel's uprobe handling: bpf_stats does not see it).
 * USAGE: uprobe_trap N [WAIT_S]   (WAIT_S: seconds to sleep first, for a tracer) */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

__attribute__((noinline)) int f(int x) { asm volatile(""); return x + 1; }

int main(int argc, char **argv)
{
    int n = argc > 1 ? atoi(argv[1]) : 100000, s = 0;
    struct timespec a, b;
    if (argc > 2)
        sleep(atoi(argv[2]));
    clock_gettime(CLOCK_MONOTONIC, &a);
    for (int i = 0; i < n; i++)
        s = f(s);
    clock_gettime(CLOCK_MONOTONIC, &b);
    printf("%.1f %d\n", ((b.tv_sec - a.tv_sec) * 1e9 + (b.tv_nsec - a.tv_nsec)) / n, s);
    return 0;
}
