/* A function that realigns its stack through a DRAP register (tests/unit/verdicts/test_causes.py):
 * gcc -O1 -fomit-frame-pointer gives realigned() the prologue lea 0x8(%rsp),%r10; and $-32,%rsp;
 * push -0x8(%r10); push %rbp; mov %rsp,%rbp; push %r10, and gas cannot describe it in SFrame
 * V1/V2 (no FDE): the kernel's walk falls back to frame pointers there, and rbp + 16 is the
 * realigned copy of the return address, not the CFA.
 *
 *   drap [ITERATIONS] [0|1]    1: through shim(), one 16-byte frame deeper */
#include <stdlib.h>
#include <sys/syscall.h>

static volatile long sink;

static inline long raw_getppid(void)
{
	long ret;
	__asm__ volatile("syscall" : "=a"(ret) : "a"((long)SYS_getppid) : "rcx", "r11", "memory");
	return ret;
}

__attribute__((noinline)) void target(long n)
{
	for (long i = 0; i < n; i++)
		sink += raw_getppid();
}

__attribute__((noinline)) void realigned(long n)
{
	char vla[(n & 7) + 1];
	char wide[64] __attribute__((aligned(32)));
	vla[0] = (char)n;
	wide[n & 63] = vla[0];
	target(n);
	sink += wide[(n + 1) & 63] + vla[n & 7 & (sizeof vla - 1)];
}

/* One more frame of 16 bytes between main and realigned: the realignment's padding is 0 on one of
 * the two paths and 16 on the other (rsp mod 32 differs by 16), so one of them shows the wrong sp. */
__attribute__((noinline)) void shim(long n)
{
	realigned(n);
	sink++;
}

int main(int argc, char **argv)
{
	long n = argc > 1 ? atol(argv[1]) : 1000000;
	if (argc > 2 && argv[2][0] == '1')
		shim(n);
	else
		realigned(n);
	return 0;
}
