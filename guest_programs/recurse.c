/*
 * Recursion deeper than the kernel's UNWIND_MAX_ENTRIES (510 on x86-64): the deferred unwinder
 * truncates the trace at exactly that many entries, while the shadow stack goes on.
 *
 *   recurse [DEPTH]
 *
 * main -> descend -> rec(DEPTH) -> rec(DEPTH-1) -> ... -> rec(0) -> bottom, which spins; then the
 * whole recursion unwinds and starts again.  DEPTH defaults to 600 (the shadow stack holds 2048).
 */
#include <stdlib.h>
#include "shadow.h"

static volatile unsigned long sink;

__attribute__((noinline)) void bottom(long n)
{
	for (long i = 0; i < n; i++)
		sink += i;
	__asm__ volatile("" ::: "memory");
}

__attribute__((noinline)) void rec(long depth)
{
	if (depth > 0)
		rec(depth - 1);
	else
		bottom(1L << 20);
	__asm__ volatile("" ::: "memory"); /* no tail call: every level keeps its frame */
}

__attribute__((noinline)) void descend(long depth) { rec(depth); __asm__ volatile("" ::: "memory"); }

int main(int argc, char **argv)
{
	long depth = argc > 1 ? atol(argv[1]) : 600;
	if (depth < 0 || depth > 2000)
		depth = 600;
	for (;;)
		descend(depth);
	return 0;
}
