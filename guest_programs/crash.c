/*
 * A known call chain that ends badly, for the engine's fault tests.
 *
 *   crash MILLISECONDS segv    spins in main -> a -> b, then dereferences NULL (SIGSEGV)
 *   crash MILLISECONDS panic   spins, then panics the guest kernel through /proc/sysrq-trigger
 *
 * The time is the guest's CLOCK_MONOTONIC, which stands still while a debugger holds the guest.
 */
#include <fcntl.h>
#include <time.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "shadow.h"

static volatile unsigned long sink;

static long now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

__attribute__((noinline)) void b(long ms, int panic)
{
	long end = now_ms() + ms;
	while (now_ms() < end)
		for (int i = 0; i < 10000; i++)
			sink += i;
	if (panic) {
		int fd = open("/proc/sysrq-trigger", O_WRONLY);
		if (fd >= 0)
			write(fd, "c", 1);
	}
	*(volatile int *)0 = 1;
}

__attribute__((noinline)) void a(long n, int panic) { b(n, panic); __asm__ volatile("" ::: "memory"); }

int main(int argc, char **argv)
{
	long n = argc > 1 ? atol(argv[1]) : 1000;
	a(n, argc > 2 && !strcmp(argv[2], "panic"));
	return 0;
}
