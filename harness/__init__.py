"""Whole-system test harness for Linux user-space stack unwinding.

Layers (each imports only from the ones above it):

* ``harness.images``: obtaining kernels, toolchain roots and initramfs images (subprocess, cache).
* ``harness.transport``: the QEMU process, QMP, the serial console and the debugger targets.
* parsers (``harness.sframe``, ``harness.kernel.btf``, ...): pure functions of bytes and text.
* domain (``harness.unwind``, ``harness.deferred``, ``harness.kernel``, ``harness.oracles``, ``harness.verdicts``,
  ``harness.scenarios``):
  never imports ``socket`` or ``subprocess``; guest memory arrives through ``read(addr, size)``.
"""

__version__ = "0.1.0"
