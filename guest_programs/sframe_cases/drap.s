# Stack realignment through a DRAP register, as gcc writes it for a function with an
# over-aligned local (gcc -O2: `char buf[64] __attribute__((aligned(64)))` passed to a call):
# the CFA is first r10-based, then *(rbp - 8).  V3 describes it with a flexible FDE ("F");
# gas 2.40-2.45 cannot (a CFA neither SP- nor FP-based) and skip the function.
	.text
	.globl	drap
	.type	drap, @function
drap:
	.cfi_startproc
	leaq	8(%rsp), %r10
	.cfi_def_cfa 10, 0
	andq	$-64, %rsp
	pushq	-8(%r10)
	pushq	%rbp
	movq	%rsp, %rbp
	.cfi_escape 0x10,0x6,0x2,0x76,0
	pushq	%r10
	.cfi_escape 0xf,0x3,0x76,0x78,0x6
	subq	$88, %rsp
	movq	%rsp, %rdi
	call	use
	movq	-8(%rbp), %r10
	.cfi_def_cfa 10, 0
	leave
	leaq	-8(%r10), %rsp
	.cfi_def_cfa 7, 8
	ret
	.cfi_endproc
	.size	drap, .-drap

	.globl	use
	.type	use, @function
use:
	.cfi_startproc
	ret
	.cfi_endproc
	.size	use, .-use
	.section	.note.GNU-stack,"",@progbits
