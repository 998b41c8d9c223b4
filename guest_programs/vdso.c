/*
 * A loop in the vDSO: most of the time is spent in the kernel-provided clock_gettime().
 *
 *   vdso [CLOCK]
 *
 * main -> a -> b -> read_clock -> glibc's clock_gettime -> the vDSO's __vdso_clock_gettime, in a
 * loop.  CLOCK is "mono" (CLOCK_MONOTONIC, the default: the vDSO reads the clocksource, or makes
 * the syscall itself from inside the vDSO when the clocksource has no vDSO mode) or "coarse"
 * (CLOCK_MONOTONIC_COARSE: never a syscall).  The vDSO has no file: the harness reads its ELF
 * image (with its .eh_frame and .dynsym) from guest memory.  Runs until it is killed.
 */
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "shadow.h"

static volatile unsigned long sink;
static clockid_t clock_id = CLOCK_MONOTONIC;

__attribute__((noinline)) void read_clock(long n)
{
	struct timespec ts;
	for (long i = 0; i < n; i++) {
		clock_gettime(clock_id, &ts);
		sink += ts.tv_nsec;
	}
	__asm__ volatile("" ::: "memory");
}

__attribute__((noinline)) void b(long n) { read_clock(n); __asm__ volatile("" ::: "memory"); }
__attribute__((noinline)) void a(long n) { b(n); __asm__ volatile("" ::: "memory"); }

int main(int argc, char **argv)
{
	if (argc > 1 && !strcmp(argv[1], "coarse"))
		clock_id = CLOCK_MONOTONIC_COARSE;
	for (;;)
		a(4096);
	return 0;
}
