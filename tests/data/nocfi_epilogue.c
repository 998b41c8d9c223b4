/*
 * For tests/unit/verdicts/test_causes.py: a function that keeps a frame pointer and has no CFI.
 *
 *   nocfi_epilogue
 *
 * bare() is written in assembly without .cfi directives: .eh_frame has no FDE for it, and an
 * assembler that makes SFrame data from the CFI (-Wa,--gsframe) makes no SFrame FDE for it either.
 * It sets up its frame (push %rbp; mov %rsp,%rbp), makes a getppid syscall and returns through
 * pop %rbp; ret, so at its ret rbp is its caller's frame pointer again.  Int3 padding follows it.
 * main calls caller() forever, which calls bare() (not in tail position).
 */
static volatile long sink;

long bare(void);

__asm__(
	".text\n"
	".p2align 4\n"
	".globl bare\n"
	".type bare,@function\n"
	"bare:\n"
	"  push %rbp\n"
	"  mov %rsp, %rbp\n"
	"  mov $110, %eax\n" /* SYS_getppid */
	"  syscall\n"
	"  pop %rbp\n"
	"  ret\n"
	".size bare, .-bare\n"
	"  int3\n  int3\n  int3\n  int3\n");

__attribute__((noinline)) long caller(void)
{
	return bare() + 1;
}

int main(void)
{
	for (;;)
		sink += caller();
}
