"""A Python model of the kernel's user-space unwinder (``kernel/unwind/user.c``) and its oracles."""
