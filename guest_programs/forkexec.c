/*
 * Fork, exec and exit, each from inside a known call chain, with every syscall an inline
 * `syscall` instruction (no glibc wrapper frame): a request at any of them sees the whole chain.
 *
 *   forkexec [WORK]                  the parent (runs until it is killed)
 *   forkexec exec-child WORK         what an exec'ing child becomes
 *
 * Each round the parent forks from main -> parent_round -> parent_fork.  The child (still in that
 * chain) spins WORK iterations in child_work (getppid every 1024) and then, on even rounds,
 * exits with exit_group from child_exit; on odd rounds it calls execve() of this program from
 * child_exec.  The exec'd image runs main -> exec_run -> exec_work and exits with exit_group from
 * exec_exit.  Meanwhile the parent spins a while in parent_wait -> parent_spin and then blocks
 * in wait4() until the child is gone: few syscalls per round, so requests at syscall entry reach
 * every kind of them, and the parent's work requested at wait4 stays pending while the child
 * runs, execs and exits.  A child whose parent is gone exits at once.
 */
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include "shadow.h"

static volatile unsigned long sink;
static long parent_pid;
static char *self_path;

__attribute__((no_instrument_function)) static inline long raw_syscall3(long nr, long a1, long a2, long a3)
{
	long ret;
	__asm__ volatile("syscall" : "=a"(ret) : "a"(nr), "D"(a1), "S"(a2), "d"(a3) : "rcx", "r11", "memory");
	return ret;
}

__attribute__((no_instrument_function)) static inline long raw_syscall4(long nr, long a1, long a2, long a3, long a4)
{
	long ret;
	register long r10 __asm__("r10") = a4;
	__asm__ volatile("syscall" : "=a"(ret) : "a"(nr), "D"(a1), "S"(a2), "d"(a3), "r"(r10) : "rcx", "r11", "memory");
	return ret;
}

__attribute__((noinline)) void exit_from_here(long code)
{
	raw_syscall3(SYS_exit_group, code, 0, 0);
	__builtin_unreachable();
}

/* Spin n iterations; leave at once when the parent is gone (reparented to init). */
__attribute__((noinline)) void child_work(long n)
{
	for (long i = 0; i < n; i++) {
		sink += i;
		if ((i & 1023) == 0 && raw_syscall3(SYS_getppid, 0, 0, 0) != parent_pid)
			exit_from_here(1);
	}
	__asm__ volatile("" ::: "memory");
}

__attribute__((noinline)) void child_exit(long n) { child_work(n); exit_from_here(0); }

__attribute__((noinline)) void child_exec(long n)
{
	char work[24];
	char *argv[] = { self_path, "exec-child", work, NULL };
	char *envp[] = { NULL };
	child_work(n / 2);
	/* the WORK argument, printed by hand (no stdio in a raw-forked child) */
	long v = n, len = 0;
	char tmp[24];
	do { tmp[len++] = '0' + v % 10; v /= 10; } while (v);
	for (long i = 0; i < len; i++) work[i] = tmp[len - 1 - i];
	work[len] = 0;
	raw_syscall3(SYS_execve, (long)self_path, (long)argv, (long)envp);
	exit_from_here(127);
}

__attribute__((noinline)) void parent_spin(long n)
{
	for (long i = 0; i < n; i++)
		sink += i;
	__asm__ volatile("" ::: "memory");
}

__attribute__((noinline)) void parent_wait(long n)
{
	int status;
	parent_spin(8 * n);
	raw_syscall4(SYS_wait4, -1, (long)&status, 0, 0);
	__asm__ volatile("" ::: "memory");
}

__attribute__((noinline)) long parent_fork(void) { return raw_syscall3(SYS_fork, 0, 0, 0); }

__attribute__((noinline)) void parent_round(long round, long work)
{
	long pid = parent_fork();
	if (pid == 0) {
		if (round & 1)
			child_exec(work);
		else
			child_exit(work);
	}
	if (pid > 0)
		parent_wait(work);
	__asm__ volatile("" ::: "memory");
}

__attribute__((noinline)) void exec_work(long n) { child_work(n); __asm__ volatile("" ::: "memory"); }
__attribute__((noinline)) void exec_exit(long n) { exec_work(n); exit_from_here(0); }
__attribute__((noinline)) void exec_run(long n) { exec_exit(n); }

int main(int argc, char **argv)
{
	self_path = argv[0];
	if (argc > 2 && !strcmp(argv[1], "exec-child")) {
		parent_pid = raw_syscall3(SYS_getppid, 0, 0, 0);
		exec_run(atol(argv[2]));
	}
	long work = argc > 1 ? atol(argv[1]) : 8192;
	for (long round = 0;; round++) {
		parent_pid = raw_syscall3(SYS_getpid, 0, 0, 0);
		parent_round(round, work);
	}
	return 0;
}
