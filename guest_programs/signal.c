/*
 * A signal handler that spins in a known call chain: samples land on both sides of a signal
 * frame.
 *
 *   signal [MODE]
 *
 * main -> a -> b -> c spins; setitimer(ITIMER_REAL) raises SIGALRM every 20 ms and the handler
 * runs on_alarm -> h1 -> h2, which spins for about a third of the period: in "spin" mode a loop
 * count calibrated at start against CLOCK_MONOTONIC, in "raw" mode until CLOCK_MONOTONIC (the
 * vDSO) says the time is up (stops at syscall breakpoints slow the guest down unevenly).  The handler is installed with glibc's
 * sigaction(), so it returns to glibc's __restore_rt (SA_RESTORER), whose .eh_frame entry
 * describes the kernel's signal frame ("zRS" CIE, DW_CFA_expression rules over the ucontext).
 * MODE "raw" makes an inline getppid syscall every SYSCALL_GAP_US of guest time, in c and in h2;
 * "spin" (the default) makes no syscalls outside the calibration.  Runs until it is killed.
 */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <sys/syscall.h>
#include <sys/time.h>
#include "shadow.h"

#define PERIOD_US 20000
/* "raw" mode: a getppid syscall every SYSCALL_GAP_US of guest time, in the handler and outside
 * it alike, so that syscall-entry requests fall on both sides of the signal frame in proportion
 * to the time spent there (a third in the handler) on any QEMU.  A syscall every 64 iterations
 * put 30 requests inside a few microseconds of guest time: on QEMU 11.x, whose guest is not
 * slowed by retranslation after each stop, they could all come before the first SIGALRM. */
#define SYSCALL_GAP_US 1000

static volatile unsigned long sink;
static int raw;
static long handler_iters = 1000;

__attribute__((no_instrument_function)) static inline long raw_getppid(void)
{
	long ret;
	__asm__ volatile("syscall" : "=a"(ret) : "a"((long)SYS_getppid) : "rcx", "r11", "memory");
	return ret;
}

/* Guest time through the vDSO (no syscall: the only syscalls in "raw" mode are the getppids). */
__attribute__((no_instrument_function)) static inline long mono_us(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1000000L + ts.tv_nsec / 1000;
}

static long next_syscall_us;

/* Every 64 iterations: the getppid when its time has come. */
__attribute__((no_instrument_function)) static inline void raw_tick(long now)
{
	if (now >= next_syscall_us) {
		sink += raw_getppid();
		next_syscall_us = now + SYSCALL_GAP_US;
	}
}

__attribute__((noinline)) void h2(long n)
{
	if (raw) {
		/* Every handler run makes a getppid first, before it reads the clock: the guest's
		 * clock runs on while the guest is stopped at a breakpoint or the host schedules QEMU
		 * out, so a handler paced by the clock alone could end before any getppid was due
		 * (flake campaign runs b8, and b2 on 2026-12-05 after a first fix that made the first
		 * tick's getppid due but still checked the deadline before it: 30 syscall requests,
		 * two of them the handlers' rt_sigreturn, none inside a handler).  With one in every
		 * handler run, no 30 syscalls in a row miss the handler: outside it they are paced at
		 * one per SYSCALL_GAP_US, at most PERIOD_US / SYSCALL_GAP_US between two SIGALRMs. */
		sink += raw_getppid();
		long deadline = mono_us() + PERIOD_US / 3;
		next_syscall_us = deadline - PERIOD_US / 3 + SYSCALL_GAP_US;
		for (long i = 0;; i++) {
			sink += i;
			if ((i & 63) == 0) {
				long now = mono_us();
				if (now >= deadline)
					break;
				raw_tick(now);
			}
		}
	} else {
		for (long i = 0; i < n; i++)
			sink += i;
	}
	__asm__ volatile("" ::: "memory");
}

__attribute__((noinline)) void h1(long n) { h2(n); __asm__ volatile("" ::: "memory"); }

void on_alarm(int sig)
{
	(void)sig;
	h1(handler_iters);
}

__attribute__((noinline)) void c(long n)
{
	for (long i = 0; i < n; i++) {
		sink += i;
		if (raw && (i & 63) == 0)
			raw_tick(mono_us());
	}
	__asm__ volatile("" ::: "memory");
}

__attribute__((noinline)) void b(long n) { c(n); __asm__ volatile("" ::: "memory"); }
__attribute__((noinline)) void a(long n) { b(n); __asm__ volatile("" ::: "memory"); }

/* Microseconds h2(n) takes: the shortest of five runs.  One run that spans a pause of the
 * guest's execution while its clock runs on (the harness stops the guest while the program
 * starts, to read its pid and maps; the host may schedule QEMU out) measures the pause, and a
 * handler calibrated on it ends long before PERIOD_US / 3: with one run, handler_iters came out
 * 36k-250k where five give 1-2.6M, and on QEMU 11.x (whose loop is not slowed by retranslation
 * after each stop, as 7.2's is) NMI samples landed in the handler 0-7% of the time, not a third. */
static long h2_us(long n)
{
	long best = -1;
	for (int k = 0; k < 5; k++) {
		long t0 = mono_us();
		h2(n);
		long dt = mono_us() - t0;
		if (best < 0 || dt < best)
			best = dt;
	}
	return best;
}

/* The loop count of h2 that takes about PERIOD_US / 3 of guest time (in the chosen MODE). */
static long calibrate(void)
{
	long n = 1000;
	for (;;) {
		long dt = h2_us(n);
		if (dt >= 2000 || n > (1L << 40))
			return n * (PERIOD_US / 3) / (dt ? dt : 1);
		n *= 2;
	}
}

int main(int argc, char **argv)
{
	struct sigaction sa;
	struct itimerval it = { { 0, PERIOD_US }, { 0, PERIOD_US } };
	raw = argc > 1 && !strcmp(argv[1], "raw");
	if (!raw)
		handler_iters = calibrate();
	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = on_alarm;
	sa.sa_flags = SA_RESTART;
	sigemptyset(&sa.sa_mask);
	if (sigaction(SIGALRM, &sa, NULL) || setitimer(ITIMER_REAL, &it, NULL)) {
		perror("signal setup");
		return 1;
	}
	for (;;)
		a(1L << 20);
	return 0;
}
