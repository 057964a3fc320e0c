// Counts a process's allocations (malloc, calloc, realloc) and prints the total on stderr when it
// exits: exact on a noisy machine, where times are not. Allocations per message are the difference
// between two runs of different lengths divided by the difference in messages (start-up cancels).
//
//   cc -O2 -shared -fPIC -o /tmp/malloc_count.so Benchmarks/Scripts/malloc_count.c
//   LD_PRELOAD=/tmp/malloc_count.so .build/release/EngineCompare socketio-emit URL 10000 1000
//   LD_PRELOAD=/tmp/malloc_count.so .build/release/EngineCompare socketio-emit URL 30000 1000
//   # (second MALLOCS - first) / 20000
#define _GNU_SOURCE
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

extern void *__libc_malloc(size_t);
extern void *__libc_calloc(size_t, size_t);
extern void *__libc_realloc(void *, size_t);

static atomic_long count;

void *malloc(size_t size) {
    atomic_fetch_add_explicit(&count, 1, memory_order_relaxed);
    return __libc_malloc(size);
}

void *calloc(size_t number, size_t size) {
    atomic_fetch_add_explicit(&count, 1, memory_order_relaxed);
    return __libc_calloc(number, size);
}

void *realloc(void *pointer, size_t size) {
    atomic_fetch_add_explicit(&count, 1, memory_order_relaxed);
    return __libc_realloc(pointer, size);
}

__attribute__((destructor)) static void report(void) {
    char line[64];
    int length = snprintf(line, sizeof line, "MALLOCS %ld\n", atomic_load(&count));
    if (length > 0) (void)!write(2, line, (size_t)length);
}
