/*
 * The kernel's floor for idle keep-alive traffic: N loopback TCP connections, each carrying one
 * small message each way every PERIOD seconds (spread evenly, as SignalR's 15 s pings are), with a
 * client that does nothing but wait in epoll, read, and write its own messages on time. The server
 * is a child process. Prints the client's CPU (user + system) over the measuring window as a share
 * of a core, so it compares with Benchmarks/Scripts/load.sh's idle CPU.
 * Build and run:  cc -O2 -o /tmp/idle_floor Benchmarks/Scripts/idle_floor.c && /tmp/idle_floor 10000 15 30
 */
#include <arpa/inet.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec / 1e9;
}

static double cpu(void) {
    struct rusage u;
    getrusage(RUSAGE_SELF, &u);
    return u.ru_utime.tv_sec + u.ru_utime.tv_usec / 1e6 + u.ru_stime.tv_sec + u.ru_stime.tv_usec / 1e6;
}

/* Both sides: every connection sends MESSAGE bytes once per period, connection i at offset
 * i/n of the period, and reads whatever arrives. Runs for `seconds`. */
static void run(int *fds, int n, double period, double seconds, int report) {
    static const char message[11] = "{\"type\":6}\x1e";
    int ep = epoll_create1(0);
    for (int i = 0; i < n; i++) {
        struct epoll_event event = {.events = EPOLLIN, .data.u32 = i};
        epoll_ctl(ep, EPOLL_CTL_ADD, fds[i], &event);
    }
    struct epoll_event events[256];
    char buffer[4096];
    double start = now(), cpuStart = cpu(), next = start;
    long sent = 0, received = 0, wakeups = 0;
    int turn = 0;
    while (now() - start < seconds) {
        double wait = next - now();
        int ready = epoll_wait(ep, events, 256, wait > 0 ? (int)(wait * 1000) + 1 : 0);
        wakeups++;
        for (int k = 0; k < ready; k++) {
            ssize_t got = read(fds[events[k].data.u32], buffer, sizeof buffer);
            if (got > 0) received++;
        }
        while (now() >= next) {
            if (write(fds[turn], message, sizeof message) == sizeof message) sent++;
            turn = (turn + 1) % n;
            next += period / n;
        }
    }
    if (report) {
        double used = cpu() - cpuStart, elapsed = now() - start;
        printf("%d connections, a message each way every %.0f s: %ld sent, %ld received, %ld wake-ups in %.1f s; "
               "client CPU %.2f %% of a core (%.1f us per message)\n",
               n, period, sent, received, wakeups, elapsed, 100 * used / elapsed, 1e6 * used / (sent + received));
    }
}

int main(int argc, char **argv) {
    int n = argc > 1 ? atoi(argv[1]) : 10000;
    double period = argc > 2 ? atof(argv[2]) : 15, seconds = argc > 3 ? atof(argv[3]) : 30;
    struct rlimit limit;
    getrlimit(RLIMIT_NOFILE, &limit);
    limit.rlim_cur = limit.rlim_max;
    setrlimit(RLIMIT_NOFILE, &limit);
    int listener = socket(AF_INET, SOCK_STREAM, 0), one = 1;
    setsockopt(listener, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    struct sockaddr_in address = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t length = sizeof address;
    bind(listener, (struct sockaddr *)&address, sizeof address);
    listen(listener, 4096);
    getsockname(listener, (struct sockaddr *)&address, &length);
    int *fds = calloc(n, sizeof(int));
    pid_t child = fork();
    if (child == 0) {
        for (int i = 0; i < n; i++) {
            fds[i] = accept(listener, 0, 0);
            setsockopt(fds[i], IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
        }
        run(fds, n, period, seconds + 5, 0);
        _exit(0);
    }
    close(listener);
    for (int i = 0; i < n; i++) {
        fds[i] = socket(AF_INET, SOCK_STREAM, 0);
        setsockopt(fds[i], IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
        if (connect(fds[i], (struct sockaddr *)&address, sizeof address) != 0) { perror("connect"); return 1; }
    }
    sleep(1);
    run(fds, n, period, seconds, 1);
    kill(child, SIGKILL);
    waitpid(child, 0, 0);
    return 0;
}
