/* Debian's libcrypto hashing, sampled by a profiling timer: the first tick that interrupts
 * libcrypto inside one of the address ranges given as arguments (link-time start/end pairs, in
 * hex) makes a getppid in the handler, where a tracer stops it (tests/unit/verdicts/
 * test_cfi_libcrypto.py gives the rows of OpenSSL's perlasm whose CFA is *(rsp + N) + M).
 *
 * OPENSSL_ia32cap is read when libcrypto is loaded, so the program sets it and runs itself
 * again: ":~0x20000000" hides the SHA extensions, and SHA-256 runs the AVX2/AVX/SSSE3 code that
 * realigns its frame (the SHA-NI code keeps rsp and has no such rows). */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <sched.h>
#include <signal.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <time.h>
#include <ucontext.h>
#include <unistd.h>

unsigned char *SHA256(const unsigned char *d, size_t n, unsigned char *md);

#define MAX_RANGES 256
static uintptr_t lo[MAX_RANGES], hi[MAX_RANGES];
static int nranges;
static uintptr_t base;
static volatile sig_atomic_t hit;

static void on_prof(int sig, siginfo_t *si, void *uc)
{
	uintptr_t ip = (uintptr_t)((ucontext_t *)uc)->uc_mcontext.gregs[REG_RIP] - base;

	(void)sig;
	(void)si;
	for (int k = 0; k < nranges && !hit; k++) {
		if (lo[k] <= ip && ip < hi[k]) {
			hit = 1;
			getppid(); /* the tracer's stop */
		}
	}
}

int main(int argc, char **argv)
{
	static unsigned char buf[1 << 20];
	unsigned char md[32];
	struct sigaction sa;
	struct itimerval it = {{0, 1000}, {0, 1000}};
	Dl_info info;
	time_t until;

	if (!getenv("OPENSSL_ia32cap")) {
		setenv("OPENSSL_ia32cap", ":~0x20000000", 1);
		execv("/proc/self/exe", argv);
		return 3;
	}
	for (int k = 1; k + 1 < argc && nranges < MAX_RANGES; k += 2, nranges++) {
		lo[nranges] = strtoul(argv[k], NULL, 16);
		hi[nranges] = strtoul(argv[k + 1], NULL, 16);
	}
	if (!dladdr((void *)SHA256, &info))
		return 4;
	base = (uintptr_t)info.dli_fbase;
	memset(buf, 0x5a, sizeof(buf));
	memset(&sa, 0, sizeof(sa));
	sa.sa_sigaction = on_prof;
	sa.sa_flags = SA_SIGINFO | SA_RESTART;
	sigaction(SIGPROF, &sa, NULL);
	sched_yield(); /* the tracer's cue: the program and its libraries are loaded */
	setitimer(ITIMER_PROF, &it, NULL);
	until = time(NULL) + 60;
	while (!hit && time(NULL) < until)
		SHA256(buf, sizeof(buf), md);
	return hit ? 0 : 2;
}
