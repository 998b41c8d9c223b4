/*
 * For tests/unit/verdicts/test_causes.py (with nosframe_tail_main.c): a function whose object
 * carries no .sframe (assembled without --gsframe, as static glibc's objects are) and whose last
 * instruction is a call of a function that never returns (as glibc's exit() ends with its call of
 * __run_exit_handlers).  Its .eh_frame FDE ends right after the call; int3 padding follows, which
 * no symbol and no FDE covers.  It keeps no frame pointer.
 *
 * tail_exit_next is the same function with nothing after it: linked before the C file's object, its
 * end is the start of that object's first function, die, whose SFrame FDE starts there.
 */
	.text
	.p2align 4
	.globl	tail_exit
	.type	tail_exit, @function
tail_exit:
	.cfi_startproc
	sub	$8, %rsp
	.cfi_adjust_cfa_offset 8
	call	die
	.cfi_endproc
	.size	tail_exit, .-tail_exit
	int3
	int3
	int3
	int3

	.globl	tail_exit_next
	.type	tail_exit_next, @function
tail_exit_next:
	.cfi_startproc
	sub	$8, %rsp
	.cfi_adjust_cfa_offset 8
	call	die
	.cfi_endproc
	.size	tail_exit_next, .-tail_exit_next

	.section	.note.GNU-stack,"",@progbits
