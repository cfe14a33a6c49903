// epoll_hold: the simple epoll connection holder that bench/connections.sh compares
// blaster --hold with (tcpkali is not packaged here).
//
//   epoll_hold HOST PORT N SRC_FIRST SRC_COUNT SECONDS [CONNECT_TIMEOUT_S]
//
// Opens N nonblocking TCP connections to HOST:PORT, each bound (IP_BIND_ADDRESS_NO_PORT,
// so the kernel picks the port at connect time) to the next of SRC_COUNT source
// addresses starting at SRC_FIRST, round robin; keeps at most EPOLL_HOLD_PENDING
// (default 512) connects pending and waits for them with epoll; holds the established
// connections SECONDS seconds (a peer close is counted and the socket closed); then
// prints one line of JSON and exits. Connects still pending CONNECT_TIMEOUT_S (default
// 120) after the first one count as failed ("PENDING_AT_DEADLINE").
//
// Memory: rss_growth_bytes is the resident set (/proc/self/statm) after the connect
// phase minus before it, the same point blaster measures at; the holder keeps no
// per-connection state of its own beyond the fd (the epoll item and socket are kernel
// memory). Times are CLOCK_MONOTONIC, which is system-wide, so the script can merge the
// processes it runs in parallel (one process holds at most RLIMIT_NOFILE sockets):
// first_connect_ns / last_established_ns.
//
// With EPOLL_HOLD_WAIT_STDIN=1 it reads one byte from stdin after setup and before the
// first connect, so several processes can be started together. At exit the sockets
// are closed with SO_LINGER 0 (RST, no TIME_WAIT left behind for the next run); this
// happens after everything is measured.
//
// Build: cc -O2 -o epoll_hold epoll_hold.c
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#ifndef IP_BIND_ADDRESS_NO_PORT
#define IP_BIND_ADDRESS_NO_PORT 24
#endif

#define PENDING_TAG (1ULL << 32)
#define NERR 160 // errno slots; the last one counts "pending at the deadline"

static uint64_t now_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (uint64_t)t.tv_sec * 1000000000ULL + (uint64_t)t.tv_nsec;
}

static long rss_bytes(void) {
    long size = 0, resident = 0;
    FILE *f = fopen("/proc/self/statm", "r");
    if (!f) return 0;
    if (fscanf(f, "%ld %ld", &size, &resident) != 2) resident = 0;
    fclose(f);
    return resident * sysconf(_SC_PAGESIZE);
}

static const char *errno_name(int e) {
    if (e == NERR - 1) return "PENDING_AT_DEADLINE";
#if defined(__GLIBC__) && (__GLIBC__ > 2 || (__GLIBC__ == 2 && __GLIBC_MINOR__ >= 32))
    const char *n = strerrorname_np(e);
    if (n) return n;
#endif
    static char buf[16];
    snprintf(buf, sizeof buf, "E%d", e);
    return buf;
}

static void die(const char *what) {
    fprintf(stderr, "epoll_hold: %s: %s\n", what, strerror(errno));
    exit(1);
}

int main(int argc, char **argv) {
    if (argc < 7 || argc > 8) {
        fprintf(stderr, "usage: %s HOST PORT N SRC_FIRST SRC_COUNT SECONDS [CONNECT_TIMEOUT_S]\n", argv[0]);
        return 2;
    }
    struct sockaddr_in dst = {.sin_family = AF_INET, .sin_port = htons((uint16_t)atoi(argv[2]))};
    struct in_addr first;
    if (inet_pton(AF_INET, argv[1], &dst.sin_addr) != 1 || inet_pton(AF_INET, argv[4], &first) != 1) {
        fprintf(stderr, "epoll_hold: HOST and SRC_FIRST must be IPv4 addresses\n");
        return 2;
    }
    long n = atol(argv[3]);
    long nsrc = atol(argv[5]);
    double seconds = atof(argv[6]);
    double connect_timeout = argc == 8 ? atof(argv[7]) : 120.0;
    const char *pw = getenv("EPOLL_HOLD_PENDING");
    long window = pw ? atol(pw) : 512;
    if (n < 1 || nsrc < 1 || window < 1) {
        fprintf(stderr, "epoll_hold: N, SRC_COUNT and EPOLL_HOLD_PENDING must be >= 1\n");
        return 2;
    }

    // Everything the program will need is set up before the "before" RSS sample.
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
        rl.rlim_cur = rl.rlim_max;
        setrlimit(RLIMIT_NOFILE, &rl);
    }
    struct sockaddr_in *src = calloc((size_t)nsrc, sizeof *src);
    if (!src) die("calloc");
    for (long i = 0; i < nsrc; i++) {
        src[i].sin_family = AF_INET;
        src[i].sin_addr.s_addr = htonl(ntohl(first.s_addr) + (uint32_t)i);
    }
    int ep = epoll_create1(EPOLL_CLOEXEC);
    if (ep < 0) die("epoll_create1");
    enum { NEV = 512 };
    static struct epoll_event evs[NEV];
    static long errs[NERR];
    memset(evs, 0, sizeof evs); // touch the static buffers now, not during the measurement
    memset(errs, 0, sizeof errs);
    const int one = 1;

    if (getenv("EPOLL_HOLD_WAIT_STDIN") && atoi(getenv("EPOLL_HOLD_WAIT_STDIN"))) {
        char c;
        if (read(0, &c, 1) < 0) die("read stdin");
    }
    long rss_before = rss_bytes();

    long started = 0, pending = 0, established = 0, failed = 0, closed = 0;
    uint64_t t_first = now_ns(), t_last = 0;
    uint64_t deadline = t_first + (uint64_t)(connect_timeout * 1e9);

    // Connect phase.
    for (;;) {
        while (pending < window && started < n) {
            struct sockaddr_in *s = &src[started % nsrc];
            started++;
            int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
            if (fd < 0) {
                errs[errno < NERR - 1 ? errno : 0]++;
                failed++;
                continue;
            }
            int r = setsockopt(fd, IPPROTO_IP, IP_BIND_ADDRESS_NO_PORT, &one, sizeof one);
            if (r == 0) r = bind(fd, (struct sockaddr *)s, sizeof *s);
            if (r == 0) r = connect(fd, (struct sockaddr *)&dst, sizeof dst);
            struct epoll_event ev = {0};
            if (r == 0) { // connected at once
                ev.events = EPOLLIN | EPOLLRDHUP;
                ev.data.u64 = (uint64_t)fd;
                if (epoll_ctl(ep, EPOLL_CTL_ADD, fd, &ev) < 0) die("epoll_ctl");
                established++;
                t_last = now_ns();
            } else if (errno == EINPROGRESS) {
                ev.events = EPOLLOUT;
                ev.data.u64 = (uint64_t)fd | PENDING_TAG;
                if (epoll_ctl(ep, EPOLL_CTL_ADD, fd, &ev) < 0) die("epoll_ctl");
                pending++;
            } else {
                errs[errno < NERR - 1 ? errno : 0]++;
                failed++;
                close(fd);
            }
        }
        if (pending == 0 && started == n) break;
        if (now_ns() >= deadline) break;
        int k = epoll_wait(ep, evs, NEV, 100);
        if (k < 0 && errno != EINTR) die("epoll_wait");
        for (int i = 0; i < k; i++) {
            int fd = (int)(evs[i].data.u64 & 0xffffffffULL);
            if (evs[i].data.u64 & PENDING_TAG) {
                int err = 0;
                socklen_t len = sizeof err;
                getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len);
                if (err == 0 && (evs[i].events & (EPOLLERR | EPOLLHUP))) err = ECONNRESET;
                pending--;
                if (err == 0) {
                    struct epoll_event ev = {.events = EPOLLIN | EPOLLRDHUP, .data.u64 = (uint64_t)fd};
                    if (epoll_ctl(ep, EPOLL_CTL_MOD, fd, &ev) < 0) die("epoll_ctl");
                    established++;
                    t_last = now_ns();
                } else {
                    errs[err < NERR - 1 ? err : 0]++;
                    failed++;
                    close(fd);
                }
            } else { // an established connection closed by the peer
                closed++;
                close(fd);
            }
        }
    }
    long rss_growth = rss_bytes() - rss_before;
    if (pending > 0 || started < n) { // deadline: whatever is left failed; a late
        long left = pending + (n - started); // completion is closed in the hold phase
        errs[NERR - 1] += left;
        failed += left;
    }

    // Hold phase.
    uint64_t end = now_ns() + (uint64_t)(seconds * 1e9);
    for (uint64_t t; (t = now_ns()) < end;) {
        int ms = (int)((end - t) / 1000000ULL) + 1;
        int k = epoll_wait(ep, evs, NEV, ms > 1000 ? 1000 : ms);
        if (k < 0 && errno != EINTR) die("epoll_wait");
        for (int i = 0; i < k; i++) {
            int fd = (int)(evs[i].data.u64 & 0xffffffffULL);
            if (!(evs[i].data.u64 & PENDING_TAG)) closed++; // else: left at the deadline
            close(fd);
        }
    }

    double establish_s = t_last > t_first ? (double)(t_last - t_first) / 1e9 : 0.0;
    printf("{\"established\": %ld, \"failed\": %ld, \"failed_by_errno\": {", established, failed);
    const char *sep = "";
    for (int e = 0; e < NERR; e++) {
        if (errs[e]) {
            printf("%s\"%s\": %ld", sep, errno_name(e), errs[e]);
            sep = ", ";
        }
    }
    printf("}, \"establish_s\": %.6f, \"first_connect_ns\": %llu, \"last_established_ns\": %llu, "
           "\"rss_growth_bytes\": %ld, \"bytes_per_connection\": %.1f, \"closed_during_hold\": %ld, "
           "\"held_at_end\": %ld}\n",
           establish_s, (unsigned long long)t_first, (unsigned long long)t_last, rss_growth,
           established ? (double)rss_growth / (double)established : 0.0, closed, established - closed);
    fflush(stdout);

    // Close with RST so no TIME_WAIT is left for the next measurement.
    struct linger lg = {.l_onoff = 1, .l_linger = 0};
    int maxfd = (int)(getrlimit(RLIMIT_NOFILE, &rl) == 0 ? rl.rlim_cur : 1 << 20);
    for (int fd = 3; fd < maxfd; fd++) {
        if (fd == ep) continue;
        if (setsockopt(fd, SOL_SOCKET, SO_LINGER, &lg, sizeof lg) == 0) close(fd);
    }
    return 0;
}
