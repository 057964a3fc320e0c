/*
 * The kernel's floor for a sequential round trip on this machine: a 20-byte message over loopback
 * TCP between two threads, each waiting in epoll, as two event loops do. No WebSocket, no Socket.IO.
 * Build and run:  cc -O2 -o /tmp/tcp_pingpong Benchmarks/Scripts/tcp_pingpong.c -lpthread && /tmp/tcp_pingpong
 */
#include <arpa/inet.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <stdio.h>
#include <sys/epoll.h>
#include <time.h>
#include <unistd.h>

enum { ROUND_TRIPS = 20000, MESSAGE = 20 };

static int wait_readable(int fd) {
    int ep = epoll_create1(0);
    struct epoll_event event = {.events = EPOLLIN, .data.fd = fd};
    epoll_ctl(ep, EPOLL_CTL_ADD, fd, &event);
    return ep;
}

static void *echo(void *arg) {
    int listener = *(int *)arg, one = 1;
    int fd = accept(listener, 0, 0);
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    int ep = wait_readable(fd);
    char buffer[64];
    for (;;) {
        struct epoll_event event;
        epoll_wait(ep, &event, 1, -1);
        ssize_t n = read(fd, buffer, sizeof buffer);
        if (n <= 0) break;
        if (write(fd, buffer, (size_t)n) != n) break;
    }
    return 0;
}

int main(void) {
    struct sockaddr_in address = {.sin_family = AF_INET, .sin_port = 0, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t length = sizeof address;
    int listener = socket(AF_INET, SOCK_STREAM, 0), one = 1;
    bind(listener, (struct sockaddr *)&address, sizeof address);
    listen(listener, 1);
    getsockname(listener, (struct sockaddr *)&address, &length);
    pthread_t server;
    pthread_create(&server, 0, echo, &listener);
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    connect(fd, (struct sockaddr *)&address, sizeof address);
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    int ep = wait_readable(fd);
    char buffer[64] = "42[\"echo\",12345]";
    struct timespec start, end;
    clock_gettime(CLOCK_MONOTONIC, &start);
    for (int i = 0; i < ROUND_TRIPS; i++) {
        if (write(fd, buffer, MESSAGE) != MESSAGE) return 1;
        struct epoll_event event;
        epoll_wait(ep, &event, 1, -1);
        if (read(fd, buffer, sizeof buffer) <= 0) return 1;
    }
    clock_gettime(CLOCK_MONOTONIC, &end);
    double seconds = (double)(end.tv_sec - start.tv_sec) + (double)(end.tv_nsec - start.tv_nsec) / 1e9;
    printf("loopback TCP ping-pong, 2 threads in epoll: %.0f round trips/s, %.1f us each\n", ROUND_TRIPS / seconds, seconds / ROUND_TRIPS * 1e6);
    return 0;
}
