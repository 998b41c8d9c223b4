/*
 * For tests/unit/verdicts/test_causes.py, linked with nosframe_tail.S: this file is compiled with
 * SFrame (-Wa,--gsframe), nosframe_tail.S without, as a static program's own code and the C
 * library's objects are.
 *
 *   nosframe_tail
 *
 * main calls tail_exit() (nosframe_tail.S), whose last instruction calls die(), which makes
 * getppid syscalls forever.
 */
#include <sys/syscall.h>

static volatile long sink;

void tail_exit(void);

__attribute__((noreturn, noinline)) void die(void)
{
	for (;;) {
		long ret;
		__asm__ volatile("syscall" : "=a"(ret) : "a"(SYS_getppid) : "rcx", "r11", "memory");
		sink += ret;
	}
}

int main(void)
{
	tail_exit();
	return (int)sink;
}
