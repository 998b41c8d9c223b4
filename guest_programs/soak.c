/*
 * The soak's program: TASKS long-lived worker tasks that fork, exec and exit continuously, each
 * from inside a known call chain, with every syscall an inline `syscall` instruction (no glibc
 * wrapper frame), so a request anywhere sees the whole chain.
 *
 *   soak [TASKS [WORK]]            the first worker; it forks the other TASKS - 1 (default 8, 1048576)
 *   soak exec-child WORK           what an exec'ing child becomes
 *
 * Each worker runs rounds: worker_round -> worker_spin (4 * WORK iterations), then
 * worker_fork.  The child (still in that chain) spins WORK iterations in child_work and then,
 * on even rounds, exits with exit_group from child_exit; on odd rounds it execs this program
 * from child_exec, whose image runs main -> exec_run -> exec_work and exits from exec_exit.
 * The worker waits for its child in wait4() and starts the next round.
 *
 * Nothing outlives the first worker: the other workers and every child ask for SIGKILL when
 * their parent dies (PR_SET_PDEATHSIG, kept across execve of this non-setuid program) and
 * leave on their own when getppid() says the parent is gone.
 */
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
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

/* Die with the parent: SIGKILL when it exits, and leave now if it is already gone. */
__attribute__((noinline)) void follow_parent(long parent)
{
	raw_syscall3(SYS_prctl, PR_SET_PDEATHSIG, SIGKILL, 0);
	parent_pid = parent;
	if (raw_syscall3(SYS_getppid, 0, 0, 0) != parent)
		exit_from_here(1);
}

/* Spin n iterations; leave when the parent is gone (reparented; PDEATHSIG is the quick way out). */
__attribute__((noinline)) void child_work(long n)
{
	for (long i = 0; i < n; i++) {
		sink += i;
		if ((i & 0xfffff) == 0 && raw_syscall3(SYS_getppid, 0, 0, 0) != parent_pid)
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

__attribute__((noinline)) void worker_spin(long n) { child_work(n); __asm__ volatile("" ::: "memory"); }

__attribute__((noinline)) long worker_fork(void) { return raw_syscall3(SYS_fork, 0, 0, 0); }

__attribute__((noinline)) void worker_wait(long pid)
{
	int status;
	raw_syscall4(SYS_wait4, pid, (long)&status, 0, 0);
	__asm__ volatile("" ::: "memory");
}

__attribute__((noinline)) void worker_round(long round, long work)
{
	worker_spin(4 * work);
	long me = raw_syscall3(SYS_getpid, 0, 0, 0);
	long pid = worker_fork();
	if (pid == 0) {
		follow_parent(me);
		if (round & 1)
			child_exec(work);
		else
			child_exit(work);
	}
	if (pid > 0)
		worker_wait(pid);
	__asm__ volatile("" ::: "memory");
}

__attribute__((noinline)) void worker(long work)
{
	for (long round = 0;; round++)
		worker_round(round, work);
}

__attribute__((noinline)) void exec_work(long n) { child_work(n); __asm__ volatile("" ::: "memory"); }
__attribute__((noinline)) void exec_exit(long n) { exec_work(n); exit_from_here(0); }
__attribute__((noinline)) void exec_run(long n) { exec_exit(n); }

/* The first worker forks the others from here; each follows it (dies with it). */
__attribute__((noinline)) void start_workers(long tasks, long work)
{
	long first = raw_syscall3(SYS_getpid, 0, 0, 0);
	for (long i = 1; i < tasks; i++) {
		if (worker_fork() == 0) {
			follow_parent(first);
			worker(work);
		}
	}
	parent_pid = raw_syscall3(SYS_getppid, 0, 0, 0);
	worker(work);
}

int main(int argc, char **argv)
{
	self_path = argv[0];
	if (argc > 2 && !strcmp(argv[1], "exec-child")) {
		parent_pid = raw_syscall3(SYS_getppid, 0, 0, 0);
		exec_run(atol(argv[2]));
	}
	long tasks = argc > 1 ? atol(argv[1]) : 8;
	long work = argc > 2 ? atol(argv[2]) : 1048576;
	start_workers(tasks < 1 ? 1 : tasks, work);
	return 0;
}
