/*
 * A known call chain main -> a -> b -> c that spins and makes syscalls.
 *
 *   callchain [ITERATIONS] [MODE]
 *
 * MODE: "raw" (default) makes getppid with an inline syscall instruction from c(), so c stays
 * on the chain; "libc" goes through glibc's syscall() wrapper (a leaf without a frame: the FP
 * unwinder loses c); "spin" makes no syscalls at all (only interrupts enter the kernel).
 * Prints "callchain: done N" and exits 0.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/syscall.h>
#include "shadow.h"

static volatile unsigned long sink;
static int mode; /* 0 raw, 1 libc, 2 spin */

/* Not instrumented: an inlined function would get a shadow frame with its caller's call site. */
__attribute__((no_instrument_function)) static inline long raw_getppid(void)
{
	long ret;
#if defined(__x86_64__)
	__asm__ volatile("syscall" : "=a"(ret) : "a"((long)SYS_getppid) : "rcx", "r11", "memory");
#else
	__asm__ volatile("int $0x80" : "=a"(ret) : "a"((long)SYS_getppid) : "memory");
#endif
	return ret;
}

__attribute__((noinline)) void c(long n)
{
	for (long i = 0; i < n; i++) {
		sink += i;
		if (mode == 0)
			sink += raw_getppid();
		else if (mode == 1)
			sink += syscall(SYS_getppid);
	}
	__asm__ volatile("" ::: "memory");
}

__attribute__((noinline)) void b(long n) { c(n); __asm__ volatile("" ::: "memory"); }
__attribute__((noinline)) void a(long n) { b(n); __asm__ volatile("" ::: "memory"); }

int main(int argc, char **argv)
{
	long iterations = argc > 1 ? atol(argv[1]) : 1000;
	if (argc > 2)
		mode = !strcmp(argv[2], "libc") ? 1 : !strcmp(argv[2], "spin") ? 2 : 0;
	for (long i = 0; i < iterations; i++)
		a(64);
	printf("callchain: done %ld\n", iterations);
	return 0;
}
