/*
 * untraced.c - a process that moves bytes with the syscalls the wire probes do not
 * decode: recvmmsg/sendmmsg on a UDP socket pair and io_uring_enter on an io_uring
 * instance (tests/test_untraced.py checks the probes say so).
 *
 * USAGE: untraced N   prints "ready", waits for a line on stdin, then makes N
 * sendmmsg, N recvmmsg and N io_uring_enter calls, prints "done" and waits for
 * another line (so its io_uring fd is still open when the probe looks), then exits.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <linux/io_uring.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>

int main(int argc, char **argv)
{
    int n = argc > 1 ? atoi(argv[1]) : 3;
    char line[64];
    struct io_uring_params p;
    memset(&p, 0, sizeof(p));
    int ring = syscall(__NR_io_uring_setup, 4, &p);
    int a = socket(AF_INET, SOCK_DGRAM, 0), b = socket(AF_INET, SOCK_DGRAM, 0);
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t sl = sizeof(sa);
    if (ring < 0 || a < 0 || b < 0 || bind(b, (struct sockaddr *)&sa, sizeof(sa)) != 0 ||
        getsockname(b, (struct sockaddr *)&sa, &sl) != 0 ||
        connect(a, (struct sockaddr *)&sa, sizeof(sa)) != 0) {
        perror("untraced: setup");
        return 1;
    }
    printf("ready\n");
    fflush(stdout);
    if (!fgets(line, sizeof(line), stdin))
        return 1;
    for (int i = 0; i < n; i++) {
        char buf[16] = "ping";
        struct iovec iov = {buf, sizeof(buf)};
        struct mmsghdr m;
        memset(&m, 0, sizeof(m));
        m.msg_hdr.msg_iov = &iov;
        m.msg_hdr.msg_iovlen = 1;
        if (sendmmsg(a, &m, 1, 0) != 1 || recvmmsg(b, &m, 1, 0, NULL) != 1) {
            perror("untraced: mmsg");
            return 1;
        }
        syscall(__NR_io_uring_enter, ring, 0, 0, 0, NULL, 0);
    }
    printf("done\n");
    fflush(stdout);
    if (!fgets(line, sizeof(line), stdin))
        return 1;
    return 0;
}
