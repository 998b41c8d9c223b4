/*
 * For tests/unit/verdicts/test_causes.py: a function that moves rsp where its CFI does not say so
 * (as Go's runtime.nanotime1 realigns it for its vDSO call), in a position-independent program
 * (built -static-pie: loaded away from its link addresses).
 *
 *   untracked_sp
 *
 * realign (assembly) pushes rbp, then subtracts from rsp and aligns it with no CFI row saying so
 * (its row still takes the CFA as rsp + 16), zeroes the word that row names as its return
 * address, and calls target.  Right after the call (at the return address) a row takes the CFA
 * from rbp, which realign set up: a DWARF walk that looks the return address up at itself finds
 * that row; looked up at ra - 1 it finds the stale one.  main calls realign forever; target makes
 * a getppid syscall.
 */
#include <sys/syscall.h>

static volatile long sink;

void realign(void);

__asm__(
	".text\n"
	".globl realign\n"
	".type realign,@function\n"
	"realign:\n"
	"  .cfi_startproc\n"
	"  push %rbp\n"
	"  .cfi_def_cfa_offset 16\n"
	"  .cfi_offset %rbp, -16\n"
	"  mov %rsp, %rbp\n"
	"  sub $16, %rsp\n"
	"  and $-16, %rsp\n"
	"  movq $0, 8(%rsp)\n"
	"  call target\n"
	"  .cfi_def_cfa_register %rbp\n"
	"  mov %rbp, %rsp\n"
	"  pop %rbp\n"
	"  .cfi_def_cfa %rsp, 8\n"
	"  ret\n"
	"  .cfi_endproc\n"
	".size realign, .-realign\n");

__attribute__((noinline)) void tick(long v)
{
	sink += v;
}

/* not a leaf, so that it sets up a frame pointer; its locals make it move rsp after that (a row
 * taking the CFA from rbp, then sub $N,%rsp), which its CFI rightly does not follow */
__attribute__((noinline)) void target(void)
{
	volatile long buf[4];
	long ret;
	__asm__ volatile("syscall" : "=a"(ret) : "a"((long)SYS_getppid) : "rcx", "r11", "memory");
	buf[ret & 3] = ret;
	tick(buf[0]);
}

int main(void)
{
	for (;;)
		realign();
}
