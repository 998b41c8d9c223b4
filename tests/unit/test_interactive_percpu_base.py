"""Which base ``harness shell`` adds to ``current_task``'s per-CPU offset on a stopped vCPU."""

from harness.interactive import percpu_base

KERNEL = 0xFFFF88801F400000  # a per-CPU base: a kernel address
USER = 0x7F1234560000        # a user's gs_base, were a program to set one (ours leave it 0)
KCS, UCS = 0x10, 0x33


def test_kernel_mode_after_swapgs_takes_gs_base():
    assert percpu_base({"cs": KCS, "gs_base": KERNEL, "k_gs_base": USER}) == KERNEL


def test_user_mode_takes_kernel_gs_base():
    assert percpu_base({"cs": UCS, "gs_base": USER, "k_gs_base": KERNEL}) == KERNEL
    assert percpu_base({"cs": UCS, "gs_base": 0, "k_gs_base": KERNEL}) == KERNEL


def test_kernel_mode_before_swapgs_takes_kernel_gs_base():
    # stopped at entry_SYSCALL_64's swapgs (or between the exit's swapgs and sysret): the
    # registers are still the user's, so the kernel's base waits in KERNEL_GS_BASE.  (Seen in
    # test_shell: gs_base 0 on 7.3 read the freed per-CPU template, 0xcc bytes, as the task.)
    assert percpu_base({"cs": KCS, "gs_base": USER, "k_gs_base": KERNEL}) == KERNEL
    assert percpu_base({"cs": KCS, "gs_base": 0, "k_gs_base": KERNEL}) == KERNEL
