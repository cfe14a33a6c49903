// epoll_frames: a minimal epoll frame client, the reference bench/frames_peer.sh sets
// blaster's frames beside (tcpkali, the reference, is not packaged here; this
// does per message what tcpkali does: a write per connection when its message is due,
// an epoll wait and a read per readable connection, nothing measured per frame).
//
//   epoll_frames HOST PORT N TICK_MS FRAME_BYTES SECONDS
//
// Opens N TCP connections to HOST:PORT (nonblocking, TCP_NODELAY), then for SECONDS
// sends FRAME_BYTES on each connection once per TICK_MS, connection i at phase
// i * TICK_MS / N within the tick (spread, as blaster spreads its members), driven by a
// 1 ms timerfd (wrk2's resolution): each expiry writes every frame that has come due.
// Everything the server sends back is read and counted. Prints one line of JSON:
// frames sent, bytes received (and frames = bytes / FRAME_BYTES), and the seconds.
// CPU is measured from outside (/usr/bin/time).
//
// Build: cc -O2 -o epoll_frames epoll_frames.c
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/timerfd.h>
#include <time.h>
#include <unistd.h>

static uint64_t now_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (uint64_t)t.tv_sec * 1000000000ull + (uint64_t)t.tv_nsec;
}

static void die(const char *what) {
    fprintf(stderr, "epoll_frames: %s: %s\n", what, strerror(errno));
    exit(1);
}

int main(int argc, char **argv) {
    if (argc != 7) {
        fprintf(stderr, "usage: epoll_frames HOST PORT N TICK_MS FRAME_BYTES SECONDS\n");
        return 2;
    }
    const char *host = argv[1];
    int port = atoi(argv[2]), n = atoi(argv[3]), tick_ms = atoi(argv[4]);
    int frame = atoi(argv[5]), seconds = atoi(argv[6]);
    if (n < 1 || tick_ms < 1 || frame < 1 || frame > 65536 || seconds < 1) {
        fprintf(stderr, "epoll_frames: bad arguments\n");
        return 2;
    }
    struct sockaddr_in to = {.sin_family = AF_INET, .sin_port = htons(port)};
    if (inet_pton(AF_INET, host, &to.sin_addr) != 1) {
        fprintf(stderr, "epoll_frames: bad host %s\n", host);
        return 2;
    }
    int ep = epoll_create1(0);
    if (ep < 0) die("epoll_create1");
    int *fds = calloc(n, sizeof(int));
    uint64_t *due = calloc(n, sizeof(uint64_t));
    char *out = malloc(frame), in[65536];
    memset(out, 'x', frame);
    for (int i = 0; i < n; i++) {
        int fd = socket(AF_INET, SOCK_STREAM, 0), one = 1;
        if (fd < 0) die("socket");
        if (connect(fd, (struct sockaddr *)&to, sizeof to) < 0) die("connect");
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
        fcntl(fd, F_SETFL, O_NONBLOCK);
        struct epoll_event ev = {.events = EPOLLIN, .data.u32 = (uint32_t)i};
        if (epoll_ctl(ep, EPOLL_CTL_ADD, fd, &ev) < 0) die("epoll_ctl");
        fds[i] = fd;
    }
    int tfd = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK);
    if (tfd < 0) die("timerfd_create");
    struct itimerspec every = {.it_interval = {0, 1000000}, .it_value = {0, 1000000}};
    if (timerfd_settime(tfd, 0, &every, NULL) < 0) die("timerfd_settime");
    struct epoll_event tev = {.events = EPOLLIN, .data.u32 = UINT32_MAX};
    if (epoll_ctl(ep, EPOLL_CTL_ADD, tfd, &tev) < 0) die("epoll_ctl timer");

    uint64_t tick = (uint64_t)tick_ms * 1000000ull, start = now_ns();
    uint64_t end = start + (uint64_t)seconds * 1000000000ull;
    for (int i = 0; i < n; i++) due[i] = start + tick * (uint64_t)i / (uint64_t)n;
    // The connections in phase order are 0..n-1, so the next due one is a cursor.
    int next = 0;
    uint64_t sent = 0, received = 0, short_writes = 0;
    struct epoll_event evs[1024];
    while (now_ns() < end) {
        int k = epoll_wait(ep, evs, 1024, 100);
        if (k < 0 && errno != EINTR) die("epoll_wait");
        for (int e = 0; e < k; e++) {
            uint32_t id = evs[e].data.u32;
            if (id == UINT32_MAX) {
                uint64_t expiries;
                if (read(tfd, &expiries, sizeof expiries) < 0 && errno != EAGAIN) die("read timerfd");
                uint64_t t = now_ns();
                while (due[next] <= t && t < end) {
                    ssize_t w = write(fds[next], out, frame);
                    if (w == frame) sent++;
                    else short_writes++;
                    due[next] += tick;
                    next = (next + 1) % n;
                }
                continue;
            }
            for (;;) {
                ssize_t r = read(fds[id], in, sizeof in);
                if (r > 0) { received += (uint64_t)r; continue; }
                if (r == 0) { fprintf(stderr, "epoll_frames: the server closed a connection\n"); return 1; }
                if (errno == EAGAIN || errno == EINTR) break;
                die("read");
            }
        }
    }
    double secs = (double)(now_ns() - start) / 1e9;
    printf("{\"connections\":%d,\"sent\":%llu,\"short_writes\":%llu,\"received_bytes\":%llu,"
           "\"received\":%llu,\"seconds\":%.3f}\n",
           n, (unsigned long long)sent, (unsigned long long)short_writes,
           (unsigned long long)received, (unsigned long long)(received / (uint64_t)frame), secs);
    return 0;
}
