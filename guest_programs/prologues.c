/*
 * A prologue-heavy chain: tiny functions that do little but call the next one, so that samples
 * land on a function's first instruction (`push %rbp`, before `mov %rsp,%rbp`).  There the
 * frame-pointer unwinder loses the caller (mainline applies its function-entry rule only under a
 * uprobe); SFrame and CFI describe those instructions exactly.
 *
 *   prologues [ITERATIONS]
 *
 * main -> run -> t0 -> t1 -> ... -> t15, each t calling the next through a function pointer: TCG
 * takes an interrupt only where it enters a translation block from its main loop, i.e. after an
 * indirect jump (a `ret`, an indirect call), so an indirect call makes the callee's first
 * instruction a place where NMIs land.  Runs ITERATIONS rounds (default: until killed).
 */
#include <stdlib.h>
#include "shadow.h"

static volatile unsigned long sink;
typedef void (*tiny_fn)(long);
extern tiny_fn volatile next_fn[16];

__attribute__((noinline)) void t15(long x) { sink += x; }
#define TINY(n) \
	__attribute__((noinline)) void t##n(long x) { next_fn[n + 1](x + 1); __asm__ volatile("" ::: "memory"); }
TINY(14) TINY(13) TINY(12) TINY(11) TINY(10) TINY(9) TINY(8) TINY(7)
TINY(6) TINY(5) TINY(4) TINY(3) TINY(2) TINY(1) TINY(0)

tiny_fn volatile next_fn[16] = { t0, t1, t2, t3, t4, t5, t6, t7, t8, t9, t10, t11, t12, t13, t14, t15 };

__attribute__((noinline)) void run(long n)
{
	for (long i = 0; n < 0 || i < n; i++)
		next_fn[0](i);
}

int main(int argc, char **argv)
{
	run(argc > 1 ? atol(argv[1]) : -1);
	return 0;
}
