/*
 * Odd frames for the SFrame decoder tests: what a plain call chain never produces.
 *
 *   - realigned(): force_align_arg_pointer + a 32-byte aligned local: gcc realigns the stack
 *     through a DRAP register (r10), so binutils 2.46+ emits a flexible (FLEX) FDE whose CFA is
 *     r10+0 and later *(rbp-16).
 *   - dyn_aligned(): a 64-byte aligned array plus alloca: stack realignment with a variable frame.
 *   - sig_tramp: hand-written CFI with .cfi_signal_frame (V3 marks the FDE as a signal frame).
 *   - outermost: .cfi_undefined rip, the outermost-frame marker (an FRE with no data words).
 *   - many libc calls, so a dynamic build has a .plt with several pltN entries (PCMASK FDE).
 *
 *   sframe_odd [N]   runs each once and prints "sframe_odd: done" (exit 0).
 */
#include <alloca.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static volatile long sink;

__attribute__((noinline, force_align_arg_pointer)) int realigned(int n)
{
	char buf[64] __attribute__((aligned(32)));
	memset(buf, n, sizeof buf);
	__asm__ volatile("" : : "r"(buf) : "memory");
	return buf[n & 63];
}

__attribute__((noinline)) int dyn_aligned(int n)
{
	double v[8] __attribute__((aligned(64)));
	for (int i = 0; i < 8; i++)
		v[i] = n * i;
	char *p = alloca(n + 16);
	memset(p, 1, n + 16);
	__asm__ volatile("" : : "r"(p), "r"(v) : "memory");
	return (int)v[n & 7] + p[n];
}

/* A signal-frame trampoline shape: CFI says "signal frame"; the body is an ordinary leaf. */
void sig_tramp(void);
__asm__(".text\n"
	".globl sig_tramp\n"
	".type sig_tramp, @function\n"
	"sig_tramp:\n"
	"	.cfi_startproc\n"
	"	.cfi_signal_frame\n"
	"	pushq %rbp\n"
	"	.cfi_adjust_cfa_offset 8\n"
	"	.cfi_offset rbp, -16\n"
	"	movq %rsp, %rbp\n"
	"	popq %rbp\n"
	"	.cfi_adjust_cfa_offset -8\n"
	"	.cfi_restore rbp\n"
	"	ret\n"
	"	.cfi_endproc\n"
	".size sig_tramp, .-sig_tramp\n");

/* An outermost frame: the return address is undefined from the second instruction on. */
void outermost(void);
__asm__(".text\n"
	".globl outermost\n"
	".type outermost, @function\n"
	"outermost:\n"
	"	.cfi_startproc\n"
	"	nop\n"
	"	.cfi_undefined rip\n"
	"	nop\n"
	"	ret\n"
	"	.cfi_endproc\n"
	".size outermost, .-outermost\n");

__attribute__((noinline)) static void libc_calls(int n)
{
	char a[64], b[64];
	snprintf(a, sizeof a, "%d", n);
	strncpy(b, a, sizeof b);
	sink += strlen(b) + strcmp(a, b) + atoi(a) + (long)getpid() * 0;
	void *m = malloc(n + 1);
	memcpy(m, a, 1);
	sink += memcmp(m, a, 1);
	free(m);
	sink += (long)strchr(a, '1') != 0;
	sink += abs(-n) + labs(-(long)n);
}

int main(int argc, char **argv)
{
	int n = argc > 1 ? atoi(argv[1]) : 3;
	sink += realigned(n);
	sink += dyn_aligned(n);
	sig_tramp();
	outermost();
	libc_calls(n);
	puts("sframe_odd: done");
	return 0;
}
