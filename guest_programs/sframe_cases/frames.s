# SFrame cases for gas --gsframe: one function per kind of frame (harness sframe dump/check
# against each toolchain's objdump --sframe; tests/unit/sframe/test_objects.py).
	.text

# An ordinary frame-pointer function.
	.globl	plain
	.type	plain, @function
plain:
	.cfi_startproc
	pushq	%rbp
	.cfi_def_cfa_offset 16
	.cfi_offset %rbp, -16
	movq	%rsp, %rbp
	.cfi_def_cfa_register %rbp
	call	leaf
	popq	%rbp
	.cfi_def_cfa %rsp, 8
	ret
	.cfi_endproc
	.size	plain, .-plain

# A leaf whose stack grows past 127 bytes: 2-byte CFA offsets.
	.globl	leaf
	.type	leaf, @function
leaf:
	.cfi_startproc
	subq	$1000, %rsp
	.cfi_def_cfa_offset 1008
	nop
	addq	$1000, %rsp
	.cfi_def_cfa_offset 8
	ret
	.cfi_endproc
	.size	leaf, .-leaf

# A signal trampoline (glibc's __restore_rt is one): V3 marks the FDE "S".
	.globl	sigtramp
	.type	sigtramp, @function
	nop
sigtramp:
	.cfi_startproc
	.cfi_signal_frame
	movq	$15, %rax
	syscall
	.cfi_endproc
	.size	sigtramp, .-sigtramp

# The outermost frame (_start): the return address is undefined.
	.globl	outermost
	.type	outermost, @function
outermost:
	.cfi_startproc
	.cfi_undefined %rip
	xorl	%ebp, %ebp
	call	plain
	hlt
	.cfi_endproc
	.size	outermost, .-outermost

# .cfi_remember_state at the function's entry, restored after an early exit.
	.globl	remember
	.type	remember, @function
remember:
	.cfi_startproc
	.cfi_remember_state
	testl	%edi, %edi
	je	1f
	pushq	%rbx
	.cfi_def_cfa_offset 16
	.cfi_offset %rbx, -16
	call	leaf
	popq	%rbx
	.cfi_restore_state
	ret
1:
	ret
	.cfi_endproc
	.size	remember, .-remember

# A function of no bytes.
	.globl	empty
	.type	empty, @function
empty:
	.cfi_startproc
	.cfi_endproc
	.size	empty, .-empty

# CFI that SFrame cannot express: the CFA based on %rbx (gas warns and writes no FDE).
	.globl	inexpressible
	.type	inexpressible, @function
inexpressible:
	.cfi_startproc
	movq	%rsp, %rbx
	.cfi_def_cfa_register %rbx
	call	leaf
	movq	%rbx, %rsp
	.cfi_def_cfa_register %rsp
	ret
	.cfi_endproc
	.size	inexpressible, .-inexpressible

# A function in a text section of its own (as -ffunction-sections puts it).
	.section	.text.own,"ax",@progbits
	.globl	own_section
	.type	own_section, @function
own_section:
	.cfi_startproc
	pushq	%r12
	.cfi_def_cfa_offset 16
	.cfi_offset %r12, -16
	popq	%r12
	.cfi_def_cfa_offset 8
	ret
	.cfi_endproc
	.size	own_section, .-own_section
	.section	.note.GNU-stack,"",@progbits
