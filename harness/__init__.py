"""Whole-system test harness for Linux user-space stack unwinding.

Floors, top to bottom; a module imports from its own floor and the floors below, never from one
above (the ``[tool.importlinter]`` contract in pyproject.toml, checked by ``tox -e lint``):

* commands: ``harness.commands`` (one module per subcommand: the only code that parses arguments,
  prints for the user and chooses exit codes), ``harness.cli`` (dispatch), the pytest plugin and
  the gdb extension;
* drivers: ``harness.scenarios``, ``harness.perf``, ``harness.bench``, ``harness.interactive``:
  they drive a session;
* ``harness.report``: renderers, structured results in, text out;
* ``harness.session``; then ``harness.transport`` (the QEMU process, QMP, the serial console and
  the debugger targets) and ``harness.images`` (kernels, toolchain roots, programs, initramfs);
* domain, in this order: ``harness.kernel``, ``harness.deferred``, ``harness.verdicts``,
  ``harness.oracles``, ``harness.unwind``, ``harness.sframe``, ``harness.perfparse``: pure
  functions of bytes and text, never ``socket`` or ``subprocess``; guest memory arrives through
  ``read(addr, size)``;
* ground: ``rule``, ``memory``, ``regs``, ``errors``, ``progress``.

Below the commands, code returns data and logs (``logging.getLogger(__name__)``).
"""

__version__ = "0.1.0"
