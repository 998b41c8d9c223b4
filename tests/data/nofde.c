/*
 * For tests/unit/verdicts/test_causes.py: code without unwind tables, and an execve of itself.
 *
 *   nofde [exec]
 *
 * Built with -fno-asynchronous-unwind-tables -fno-unwind-tables: .eh_frame has no FDE for spin or
 * main (only for the C library's code).  main calls spin() forever; spin makes 64 getppid
 * syscalls per call with an inline syscall instruction.  With "exec", main execve()s the program
 * itself (no arguments, no environment) after its first call to spin.
 */
#include <sys/syscall.h>

static volatile long sink;

static inline long raw_syscall3(long nr, long a1, long a2, long a3)
{
	long ret;
	__asm__ volatile("syscall" : "=a"(ret) : "a"(nr), "D"(a1), "S"(a2), "d"(a3) : "rcx", "r11", "memory");
	return ret;
}

__attribute__((noinline)) void spin(long n)
{
	for (long i = 0; i < n; i++)
		sink += raw_syscall3(SYS_getppid, 0, 0, 0);
	__asm__ volatile("" ::: "memory");
}

int main(int argc, char **argv)
{
	spin(64);
	if (argc > 1) {
		char *args[] = { argv[0], 0 }, *env[] = { 0 };
		raw_syscall3(SYS_execve, (long)argv[0], (long)args, (long)env);
	}
	for (;;)
		spin(64);
}
