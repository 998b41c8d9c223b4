/*
 * For tests/unit/verdicts/test_causes.py (with nosframe_tail_main.c): a function whose CFI the
 * assembler writes to .sframe only (.cfi_sections .sframe: no .eh_frame FDE).  Linked right after
 * nosframe_tail_main.c's object, it starts where that object's last function, tail_sframe_only,
 * ends; stripped, nothing but its SFrame FDE says a function is there.  It never runs.
 */
	.cfi_sections .sframe
	.text
	.globl	next_sframe_only
	.type	next_sframe_only, @function
next_sframe_only:
	.cfi_startproc
	ret
	.cfi_endproc
	.size	next_sframe_only, .-next_sframe_only
	.section	.note.GNU-stack,"",@progbits
