/*
 * Several threads, each spinning in its own known call chain; the shadow stack is per thread.
 *
 *   threads [NTHREADS] [MODE]
 *
 * Thread k (1..NTHREADS) runs worker -> chain_k -> ... -> leaf: thread 1 goes through one, thread
 * 2 through two, thread 3 through three levels (then it wraps), so every thread's stack has a
 * depth of its own.  The main thread spins in main -> a -> b -> leaf.  MODE "raw" makes getppid
 * with an inline syscall from the leaf (a syscall-entry request sees the whole chain); "spin"
 * (the default) makes no syscalls.  Runs until it is killed.
 */
#define HARNESS_SHADOW_TLS
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/syscall.h>
#include "shadow.h"

#define MAX_THREADS 8

static volatile unsigned long sink;
static int raw;

__attribute__((no_instrument_function)) static inline long raw_getppid(void)
{
	long ret;
	__asm__ volatile("syscall" : "=a"(ret) : "a"((long)SYS_getppid) : "rcx", "r11", "memory");
	return ret;
}

__attribute__((noinline)) void leaf(long n)
{
	for (long i = 0; i < n; i++) {
		sink += i;
		if (raw && (i & 63) == 0)
			sink += raw_getppid();
	}
	__asm__ volatile("" ::: "memory");
}

__attribute__((noinline)) void chain_1(long n) { leaf(n); __asm__ volatile("" ::: "memory"); }
__attribute__((noinline)) void chain_2(long n) { chain_1(n); __asm__ volatile("" ::: "memory"); }
__attribute__((noinline)) void chain_3(long n) { chain_2(n); __asm__ volatile("" ::: "memory"); }

__attribute__((noinline)) void a(long n) { leaf(n); __asm__ volatile("" ::: "memory"); }
__attribute__((noinline)) void b(long n) { a(n); __asm__ volatile("" ::: "memory"); }

void *worker(void *arg)
{
	long k = (long)arg;
	for (;;) {
		switch (k % 3) {
		case 1: chain_1(4096); break;
		case 2: chain_2(4096); break;
		default: chain_3(4096); break;
		}
	}
	return NULL;
}

int main(int argc, char **argv)
{
	int n = argc > 1 ? atoi(argv[1]) : 3;
	pthread_t t[MAX_THREADS];
	if (n < 1 || n > MAX_THREADS)
		n = 3;
	raw = argc > 2 && !strcmp(argv[2], "raw");
	for (long k = 1; k <= n; k++)
		if (pthread_create(&t[k - 1], NULL, worker, (void *)k) != 0) {
			perror("pthread_create");
			return 1;
		}
	for (;;)
		b(4096);
	return 0;
}
