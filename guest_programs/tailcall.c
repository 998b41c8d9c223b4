/*
 * Calls in tail position: main -> outer -> middle -> die -> spin, where die and spin never
 * return.
 *
 *   tailcall [ITERATIONS] [MODE]
 *
 * die and spin are declared noreturn, so GCC calls them (it never turns a call to a noreturn
 * function into a jump) and puts nothing after the call: the last instruction of middle is
 * `call die`, the last instruction of die is `call spin`, and each pushes a return address equal
 * to its function's end.  A DWARF unwinder looks such a frame up at `return address - 1`, inside
 * the caller; the kernel's SFrame series looks it up with the return address itself
 * (REFERENCE.md section 3), which the caller's FDE does not cover.  The layout makes the two
 * outcomes of that lookup certain at every optimization level:
 *
 * * after middle, a gap: outer is 128-byte aligned and die + middle (which starts at die's end,
 *   die being 128-byte aligned) are shorter than that, so middle's end lies in padding that no
 *   FDE covers: the lookup finds nothing;
 * * after die, middle itself: aligned(1), it starts exactly at die's end, so the lookup finds
 *   middle's FDE, the WRONG function's, and its first row (CFA = sp + 8).
 *
 * This relies on GCC emitting callees before their callers (its default order, for IPA-RA):
 * leaf, spin, die, middle, outer, then main (.text.startup at -O2).  The tests check the layout.
 * noipa keeps the symbols as they are (no .constprop/.isra clones) and keeps GCC from
 * discovering that middle (and then outer) never returns: outer's call is followed by code.
 *
 * main makes one raw getppid before the chain starts (the "program is loaded" point the gdb
 * capture waits for), then spin loops ITERATIONS times (negative: until killed) and exits 0 with
 * "tailcall: done N" without ever returning.  MODE: "raw" (default) makes a getppid with an
 * inline syscall instruction from spin on every round, so spin stays the topmost user frame at
 * syscall entry; "spin" makes no syscalls (only interrupts enter the kernel).  Every round also
 * calls leaf(), a frame below spin.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/syscall.h>
#include "shadow.h"

static volatile unsigned long sink;
static int mode; /* 0 raw, 2 spin (the numbering of callchain.c) */

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

__attribute__((noipa)) void leaf(long i) { sink += i; }

__attribute__((noipa, noreturn)) void spin(long n)
{
	for (long i = 0;; i++) {
		leaf(i);
		if (mode == 0)
			sink += raw_getppid();
		if (n >= 0 && i >= n) {
			printf("tailcall: done %ld\n", n);
			fflush(stdout);
			_exit(0);
		}
	}
}

__attribute__((noipa, noreturn, aligned(128))) void die(long n)
{
	sink += n;
	spin(n); /* the last instruction of die: middle's first byte follows */
}

__attribute__((noipa, aligned(1))) void middle(long n)
{
	sink += n;
	die(n); /* the last instruction of middle: padding up to outer follows */
}

__attribute__((noipa, aligned(128))) void outer(long n)
{
	middle(n);
	__asm__ volatile("" ::: "memory");
}

int main(int argc, char **argv)
{
	long iterations = argc > 1 ? atol(argv[1]) : 1000;
	if (argc > 2)
		mode = !strcmp(argv[2], "spin") ? 2 : 0;
	sink += raw_getppid();
	outer(iterations);
	return 0;
}
