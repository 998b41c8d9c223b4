"""The images floor: kernels, toolchain roots, guest programs, QEMU builds and the initramfs, fetched or
built into the on-disk cache (:mod:`.cache`, every step under a file lock: :mod:`.lock`)."""
