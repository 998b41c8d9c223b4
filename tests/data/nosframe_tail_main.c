/*
 * For tests/unit/verdicts/test_causes.py, linked with nosframe_tail.S: this file is compiled with
 * SFrame (-Wa,--gsframe), nosframe_tail.S without, as a static program's own code and the C
 * library's objects are.
 *
 *   nosframe_tail [next|trap|fde|sonly]
 *
 * main calls tail_exit() (nosframe_tail.S; with "next", tail_exit_next()), whose last instruction
 * calls die(), which makes getppid syscalls forever.  die is this file's first function: linked
 * after nosframe_tail.S's object, it starts where tail_exit_next ends.  With "trap", main calls
 * tail_trap (assembly here, so with SFrame): its FDE ends right after its call of die, its symbol
 * two bytes later, after a ud2 (a trap after the call that never returns, outside the CFI).  With
 * "fde", tail_trap_fde: the same, its ud2 in an FDE of its own inside the one symbol.  With
 * "sonly", tail_sframe_only (assembly here, after main: this object's last function), which ends
 * in its call of die where sframe_only_next.S's function, linked next, starts.
 * Compiled with -fno-toplevel-reorder, so that die, tail_trap and main come in this order.
 */
#include <sys/syscall.h>

static volatile long sink;

void tail_exit(void);
void tail_exit_next(void);
void tail_trap(void);
void tail_trap_fde(void);
void tail_sframe_only(void);


__attribute__((noreturn, noinline)) void die(void)
{
	for (;;) {
		long ret;
		__asm__ volatile("syscall" : "=a"(ret) : "a"(SYS_getppid) : "rcx", "r11", "memory");
		sink += ret;
	}
}

__asm__(
	".text\n"
	".globl tail_trap\n"
	".type tail_trap,@function\n"
	"tail_trap:\n"
	"  .cfi_startproc\n"
	"  sub $8, %rsp\n"
	"  .cfi_adjust_cfa_offset 8\n"
	"  call die\n"
	"  .cfi_endproc\n"
	"  ud2\n"
	".size tail_trap, .-tail_trap\n"
	".globl tail_trap_fde\n"
	".type tail_trap_fde,@function\n"
	"tail_trap_fde:\n"
	"  .cfi_startproc\n"
	"  sub $8, %rsp\n"
	"  .cfi_adjust_cfa_offset 8\n"
	"  call die\n"
	"  .cfi_endproc\n"
	"  .cfi_startproc\n"
	"  ud2\n"
	"  .cfi_endproc\n"
	".size tail_trap_fde, .-tail_trap_fde\n");

int main(int argc, char **argv)
{
	if (argc > 1 && argv[1][0] == 't')
		tail_trap();
	else if (argc > 1 && argv[1][0] == 'f')
		tail_trap_fde();
	else if (argc > 1 && argv[1][0] == 's')
		tail_sframe_only();
	else if (argc > 1)
		tail_exit_next();
	else
		tail_exit();
	return (int)sink;
}

__asm__(
	".text\n"
	".globl tail_sframe_only\n"
	".type tail_sframe_only,@function\n"
	"tail_sframe_only:\n"
	"  .cfi_startproc\n"
	"  sub $8, %rsp\n"
	"  .cfi_adjust_cfa_offset 8\n"
	"  call die\n"
	"  .cfi_endproc\n"
	".size tail_sframe_only, .-tail_sframe_only\n");
