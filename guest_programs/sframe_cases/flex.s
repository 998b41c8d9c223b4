# Flexible FDEs (SFrame V3, binutils 2.46+: attr "F"): every form gas writes for x86-64 CFI that
# a default FDE cannot hold -- a CFA based on a register other than SP and FP, or read from
# memory; the FP or the RA kept in a register, or saved at a register-based place or at a
# CFA-based place other than the fixed one; the RA undefined (the outermost frame) under a flex
# CFA.  objdump --sframe brackets a dereferenced register-based value "(fp+0)" and prints a
# CFA-based one as a default FDE's "c-16" (libsframe reads the deref bit only with a register).
# gas 2.40-2.45 cannot describe most of them (2.41+ skip such functions with a warning).
	.text

# binutils' gas test cfi-sframe-x86_64-ra-undefined-flex-1's shape: a flex CFA (r10-based), the
# FP saved at CFA-16, then the RA undefined.
	.globl	ra_undefined_flex
	.type	ra_undefined_flex, @function
ra_undefined_flex:
	.cfi_startproc
	leaq	8(%rsp), %r10
	.cfi_def_cfa %r10, 0
	pushq	%rbp
	.cfi_offset %rbp, -16
	nop
	.cfi_undefined %rip
	nop
	.cfi_endproc
	.size	ra_undefined_flex, .-ra_undefined_flex

# The FP kept in another register.
	.globl	fp_in_reg
	.type	fp_in_reg, @function
fp_in_reg:
	.cfi_startproc
	movq	%rbp, %r12
	.cfi_register %rbp, %r12
	nop
	movq	%r12, %rbp
	.cfi_restore %rbp
	ret
	.cfi_endproc
	.size	fp_in_reg, .-fp_in_reg

# The CFA read from memory (DW_CFA_def_cfa_expression: DW_OP_breg6 -8; DW_OP_deref).
	.globl	cfa_deref
	.type	cfa_deref, @function
cfa_deref:
	.cfi_startproc
	pushq	%rbp
	.cfi_def_cfa_offset 16
	.cfi_offset %rbp, -16
	movq	%rsp, %rbp
	.cfi_escape 0xf,0x3,0x76,0x78,0x6
	nop
	popq	%rbp
	.cfi_def_cfa %rsp, 8
	.cfi_restore %rbp
	ret
	.cfi_endproc
	.size	cfa_deref, .-cfa_deref

# The FP saved at a register-based place (DW_CFA_expression rbp: DW_OP_breg6 0).
	.globl	fp_at_reg
	.type	fp_at_reg, @function
fp_at_reg:
	.cfi_startproc
	pushq	%rbp
	.cfi_def_cfa_offset 16
	movq	%rsp, %rbp
	.cfi_escape 0x10,0x6,0x2,0x76,0
	nop
	popq	%rbp
	.cfi_restore %rbp
	.cfi_def_cfa_offset 8
	ret
	.cfi_endproc
	.size	fp_at_reg, .-fp_at_reg

# The RA kept in a register.
	.globl	ra_in_reg
	.type	ra_in_reg, @function
ra_in_reg:
	.cfi_startproc
	popq	%r11
	.cfi_def_cfa_offset 0
	.cfi_register %rip, %r11
	nop
	pushq	%r11
	.cfi_def_cfa_offset 8
	.cfi_offset %rip, -8
	ret
	.cfi_endproc
	.size	ra_in_reg, .-ra_in_reg

# The RA saved at CFA-16, not at the fixed CFA-8.
	.globl	ra_at_cfa
	.type	ra_at_cfa, @function
ra_at_cfa:
	.cfi_startproc
	subq	$8, %rsp
	.cfi_def_cfa_offset 16
	.cfi_offset %rip, -16
	nop
	addq	$8, %rsp
	.cfi_def_cfa_offset 8
	.cfi_offset %rip, -8
	ret
	.cfi_endproc
	.size	ra_at_cfa, .-ra_at_cfa

# 2- and 4-byte data words: a register-based CFA past 127 and 32767 bytes, the FP saved below them.
	.globl	big_flex
	.type	big_flex, @function
big_flex:
	.cfi_startproc
	leaq	8(%rsp), %r10
	.cfi_def_cfa %r10, 1000
	nop
	.cfi_def_cfa %r10, 100000
	nop
	pushq	%rbp
	.cfi_offset %rbp, -100016
	nop
	popq	%rbp
	.cfi_restore %rbp
	.cfi_def_cfa %rsp, 8
	ret
	.cfi_endproc
	.size	big_flex, .-big_flex

# A signal frame whose CFA is register-based: attr "SF".
	.globl	sig_flex
	.type	sig_flex, @function
sig_flex:
	.cfi_startproc
	.cfi_signal_frame
	movq	%rsp, %r12
	.cfi_def_cfa %r12, 8
	nop
	.cfi_endproc
	.size	sig_flex, .-sig_flex
	.section	.note.GNU-stack,"",@progbits
