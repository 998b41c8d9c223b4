/*
 * For tests/unit/verdicts/test_causes.py: a signal restorer of the program's own whose FDE starts
 * at its first byte (glibc's __restore_rt has its FDE start one byte before it, at a nop, so that
 * an unwinder's lookup of the return address - 1 lands inside it).
 *
 *   own_restorer
 *
 * SIGALRM's handler is installed with the raw rt_sigaction syscall (glibc's sigaction() installs
 * its own __restore_rt whatever sa_restorer says), with SA_RESTORER and own_restore_rt: the code
 * of glibc's (mov $15,%rax; syscall), its CFI glibc's rules too (CIE augmentation 'S', the CFA
 * and every register a DW_OP_breg7 expression over the ucontext at rsp), but its FDE starting at
 * its first instruction.  main calls spin() forever; spin makes a getppid syscall and sends the
 * task SIGALRM with an inline kill syscall (the signal interrupts spin's body, its frame set up).
 */
#include <signal.h>
#include <sys/syscall.h>

#define SA_RESTORER_FLAG 0x04000000

static volatile long sink;

void own_restore_rt(void);

/* DW_CFA_expression reg: DW_OP_breg7 (rsp) OFFSET, the offset an SLEB128 of one or two bytes. */
__asm__(
	".macro own_expr regno, offset\n"
	"  .if \\offset < 64\n"
	"  .cfi_escape 0x10, \\regno, 0x02, 0x77, \\offset\n"
	"  .else\n"
	"  .cfi_escape 0x10, \\regno, 0x03, 0x77, (\\offset & 0x7f) | 0x80, \\offset >> 7\n"
	"  .endif\n"
	".endm\n"
	".text\n"
	".p2align 4\n"
	".globl own_restore_rt\n"
	".type own_restore_rt,@function\n"
	"own_restore_rt:\n"
	"  .cfi_startproc simple\n"
	"  .cfi_signal_frame\n"
	/* DW_CFA_def_cfa_expression: DW_OP_breg7 (rsp) 160 (uc_mcontext.rsp); DW_OP_deref */
	"  .cfi_escape 0x0f, 0x04, 0x77, 0xa0, 0x01, 0x06\n"
	/* DWARF register, offset of its slot in the ucontext (40 + its sigcontext offset) */
	"  own_expr 8, 40\n  own_expr 9, 48\n  own_expr 10, 56\n  own_expr 11, 64\n"
	"  own_expr 12, 72\n  own_expr 13, 80\n  own_expr 14, 88\n  own_expr 15, 96\n"
	"  own_expr 5, 104\n  own_expr 4, 112\n  own_expr 6, 120\n  own_expr 3, 128\n"
	"  own_expr 1, 136\n  own_expr 0, 144\n  own_expr 2, 152\n  own_expr 7, 160\n"
	"  own_expr 16, 168\n"
	"  movq $15, %rax\n"
	"  syscall\n"
	"  .cfi_endproc\n"
	".size own_restore_rt, .-own_restore_rt\n"
	/* bytes no FDE covers after it: the address right past the restorer is nobody's */
	"  int3\n  int3\n  int3\n  int3\n  int3\n  int3\n  int3\n");

struct kernel_sigaction {
	void (*handler)(int);
	unsigned long flags;
	void (*restorer)(void);
	unsigned long mask;
};

static inline long raw_syscall4(long nr, long a1, long a2, long a3, long a4)
{
	long ret;
	register long r10 __asm__("r10") = a4;
	__asm__ volatile("syscall" : "=a"(ret) : "a"(nr), "D"(a1), "S"(a2), "d"(a3), "r"(r10)
			 : "rcx", "r11", "memory");
	return ret;
}

__attribute__((noinline)) void on_alarm(int sig)
{
	sink += sig;
}

/* not a leaf, so that it sets up a frame pointer (gcc keeps none in a leaf without stack use) */
__attribute__((noinline)) void spin(long pid)
{
	on_alarm(0);
	sink += raw_syscall4(SYS_getppid, 0, 0, 0, 0);
	sink += raw_syscall4(SYS_kill, pid, SIGALRM, 0, 0);
	__asm__ volatile("" ::: "memory");
}

int main(void)
{
	struct kernel_sigaction sa = { on_alarm, SA_RESTORER_FLAG, own_restore_rt, 0 };
	long pid = raw_syscall4(SYS_getpid, 0, 0, 0, 0);

	if (raw_syscall4(SYS_rt_sigaction, SIGALRM, (long)&sa, 0, sizeof(sa.mask)))
		return 1;
	for (;;)
		spin(pid);
}
