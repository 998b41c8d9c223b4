/*
 * For tests/unit/verdicts/test_causes.py, linked with nosframe_tail.S: this file is compiled with
 * SFrame (-Wa,--gsframe), nosframe_tail.S without, as a static program's own code and the C
 * library's objects are.
 *
 *   nosframe_tail [next]
 *
 * main calls tail_exit() (nosframe_tail.S; with "next", tail_exit_next()), whose last instruction
 * calls die(), which makes getppid syscalls forever.  die is this file's first function: linked
 * after nosframe_tail.S's object, it starts where tail_exit_next ends.
 */
#include <sys/syscall.h>

static volatile long sink;

void tail_exit(void);
void tail_exit_next(void);

__attribute__((noreturn, noinline)) void die(void)
{
	for (;;) {
		long ret;
		__asm__ volatile("syscall" : "=a"(ret) : "a"(SYS_getppid) : "rcx", "r11", "memory");
		sink += ret;
	}
}

int main(int argc, char **argv)
{
	(void)argv;
	if (argc > 1)
		tail_exit_next();
	else
		tail_exit();
	return (int)sink;
}
