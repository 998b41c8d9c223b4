/*
 * A program that tries to break the harness's channels from inside the guest, then spins in a
 * known call chain so that it can be sampled like any other:
 *
 *   hostile FLOOD_LINES MILLISECONDS
 *
 * On stdout and stderr it prints kernel death headers ("Oops: ...", "Kernel panic - not
 * syncing: ...", in syslog form too), forged /init replies ("@@H exit ...", "@@H pid ...",
 * "@@H done ..."), every byte value, FLOOD_LINES numbered lines, and last a line without its
 * newline; it writes a panic header to /dev/kmsg and tries to open /dev/console, saying what
 * happened.  Then main -> a -> b spins for MILLISECONDS of the guest's CLOCK_MONOTONIC (0:
 * forever) and it exits 0.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include "shadow.h"

static volatile unsigned long sink;

static long now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void put(int fd, const char *s) { write(fd, s, strlen(s)); }

static void try_device(const char *path, const char *text)
{
	char line[200];
	int fd = open(path, O_WRONLY | O_NOCTTY);
	if (fd < 0) {
		snprintf(line, sizeof line, "open %s: %s\n", path, strerror(errno));
	} else {
		ssize_t n = write(fd, text, strlen(text));
		snprintf(line, sizeof line, "write %s: %zd\n", path, n);
		close(fd);
	}
	put(1, line);
}

__attribute__((noinline)) void b(long ms)
{
	long end = now_ms() + ms;
	while (ms == 0 || now_ms() < end)
		for (int i = 0; i < 10000; i++)
			sink += i;
}

__attribute__((noinline)) void a(long ms) { b(ms); __asm__ volatile("" ::: "memory"); }

int main(int argc, char **argv)
{
	long flood = argc > 1 ? atol(argv[1]) : 1000;
	long ms = argc > 2 ? atol(argv[2]) : 0;
	char line[100];
	unsigned char bytes[256];

	put(1, "Oops: 0002 [#1] PREEMPT SMP NOPTI\n");
	put(1, "Kernel panic - not syncing: hostile stdout\n");
	put(2, "<0>[    1.000000] Kernel panic - not syncing: hostile stderr\n");
	put(2, "BUG: kernel NULL pointer dereference, address: 0000000000000000\n");
	for (int id = 1; id <= 64; id++) {
		snprintf(line, sizeof line, "@@H exit %d 0\n@@H pid %d 1\n@@H done %d 0\n", id, id, id);
		put(id % 2 ? 1 : 2, line);
	}
	put(1, "@@H ready forged cpus=64\n");
	try_device("/dev/kmsg", "<0>Kernel panic - not syncing: hostile /dev/kmsg\n");
	try_device("/dev/console", "<0>[    1.000000] Kernel panic - not syncing: hostile /dev/console\n");
	for (int i = 0; i < 256; i++)
		bytes[i] = (unsigned char)i;
	write(1, bytes, sizeof bytes);
	put(1, "\n");
	for (long i = 0; i < flood; i++) {
		snprintf(line, sizeof line, "flood %08ld @@H exit %ld 0 Oops: \n", i, i);
		put(1, line);
	}
	put(1, "the end, without a newline @@H exit 1 0");
	a(ms);
	return 0;
}
