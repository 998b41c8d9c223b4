/*
 * For tests/unit/verdicts/test_causes.py: a call in tail position from a function built without
 * the shadow stack's hooks, right before one built with them.  Built with guest_programs/shadow.h
 * (-finstrument-functions -DHARNESS_SHADOW -I guest_programs), -O2, frame pointers.
 *
 *   shadow_tail
 *
 * main -> loud -> quiet -> spin.  quiet is not instrumented (no_instrument_function) and never
 * returns: its last instruction is its call of spin, and loud (aligned(1), emitted after its callee
 * quiet, as GCC orders them) starts right there, so quiet's return address is loud's first byte.
 * loud is instrumented, as are spin and main; spin makes getppid syscalls forever.
 */
#include <sys/syscall.h>
#include "shadow.h"

static volatile unsigned long sink;

__attribute__((no_instrument_function)) static inline long raw_getppid(void)
{
	long ret;
	__asm__ volatile("syscall" : "=a"(ret) : "a"((long)SYS_getppid) : "rcx", "r11", "memory");
	return ret;
}

__attribute__((noipa, noreturn)) void spin(long n)
{
	for (;;)
		sink += raw_getppid() + n;
}

__attribute__((noipa, noreturn, no_instrument_function, aligned(128))) void quiet(long n)
{
	sink += n;
	spin(n); /* the last instruction of quiet: loud's first byte follows */
}

__attribute__((noipa, aligned(1))) void loud(long n)
{
	sink += n;
	quiet(n);
}

int main(void)
{
	loud(1);
	return 0;
}
