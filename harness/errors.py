"""The root of the harness's exceptions.

:class:`HarnessError` is the ancestor of every exception the harness raises on purpose, so a
caller (the CLI, a test, a script) can tell "the harness found something wrong with its input,
its guest or its tools" from a bug in the harness (``TypeError``, ``AttributeError``, ...) with
one ``except HarnessError``.  Each layer has its own base (or bases) below it, so a caller can
also catch one layer's failures.  Some bases keep a built-in exception as a second base
(shown in brackets) because callers and tests catch them as such: a malformed input is a
``ValueError``, a missing name a ``KeyError``.

This module imports nothing from the harness, so every layer can import it.

Exit codes: an error that reaches the command line exits with its class's ``exit_code``: 2 for
the parsers' errors and a user's bad binary (what was given is wrong), 3 for everything else
(the guest, QEMU, gdb, the images, the disk: the infrastructure failed).

.. admonition:: Harness Exception Hierarchy Reference

 |   `Exception`
 |    +-- `HarnessError`
 |         +-- `ImageError`                    images: harness/images/errors.py
 |         |    +-- `QemuImageError`           harness/images/qemu.py
 |         |    +-- `ProgramError`             harness/images/programs.py
 |         |    +-- `KernelInputError`         harness/images/kernel.py
 |         |    +-- `CacheLockTimeout`         harness/images/lock.py
 |         |    +-- `DebianPerfError`          harness/images/debperf.py
 |         |    +-- `KernelSourceError`        harness/images/kernel_source.py
 |         |    +-- `KernelTreeError`          harness/images/kernel_build.py
 |         |    +-- `KernelBuildError`         harness/images/kernel_build.py
 |         |         +-- `KernelConfigDropped`
 |         +-- `GuestError`                    transport: harness/transport/errors.py
 |         |    +-- `QemuStartError`
 |         |    +-- `GuestPanic`
 |         |    +-- `GuestTimeout`
 |         |    +-- `GuestDied`
 |         |    +-- `PinError`
 |         +-- `ControlLineError` [ValueError] transport: harness/transport/errors.py
 |         +-- `OutputFrameError` [ValueError] transport: harness/transport/errors.py
 |         +-- `TargetError`                   transport: harness/transport/errors.py
 |         |    +-- `TargetTimeout`
 |         |    +-- `TargetDied`
 |         |    +-- `StopLeft`
 |         +-- `MemoryFault`                   memory: harness/memory.py
 |         |    +-- `SnapshotMiss`
 |         +-- `RuleError`                     frame rules: harness/rule.py
 |         +-- `SFrameError` [ValueError]      sframe: harness/sframe/errors.py
 |         +-- `UnwindError`                   unwind: harness/unwind/user.py
 |         |    +-- `UnwindConfigError`
 |         |    +-- `UnknownUnwinder` [ValueError]
 |         +-- `AccessError`                   unwind: harness/unwind/access.py
 |         |    +-- `NotUserAddress`
 |         |    +-- `UserFault`
 |         +-- `UnsupportedCFI`                unwind: harness/unwind/cfi.py
 |         |    +-- `CorruptCFI`
 |         +-- `EhFrameError` [DWARFError]     unwind: harness/unwind/ehframe.py
 |         +-- `MapsError` [ValueError]        unwind: harness/unwind/maps.py
 |         +-- `LoadBiasError` [ValueError]    unwind: harness/unwind/maps.py
 |         +-- `ToolError`                     toolchain: harness/toolchain/binutils.py
 |         +-- `SnapshotError` [ValueError]    unwind: harness/unwind/snapshot.py
 |         +-- `KernelIntrospectionError`      kernel: harness/kernel/__init__.py
 |         +-- `ConfigError` [ValueError]      kernel: harness/kernel/config.py
 |         +-- `BtfError` [ValueError]         kernel: harness/kernel/btf.py
 |         +-- `BtfLookupError` [KeyError]     kernel: harness/kernel/btf.py
 |         |    +-- `BtfAmbiguityError`
 |         +-- `KallsymsError` [ValueError]    kernel: harness/kernel/kallsyms.py
 |         |    +-- `KallsymsParseError`
 |         |    +-- `KallsymsCensoredError`
 |         +-- `SymbolLookupError` [KeyError]  kernel: harness/kernel/kallsyms.py
 |         |    +-- `AmbiguousSymbolError`
 |         +-- `LockstepError`                 lockstep: harness/lockstep/compare.py
 |         +-- `KernelDiffError`               lockstep: harness/lockstep/driver.py
 |         +-- `ModelError`                    deferred: harness/deferred/model.py
 |         |    +-- `ModelBlocked`
 |         +-- `LogFormatError`                deferred: harness/deferred/log.py
 |         |   +-- `LogDigestError`            deferred: harness/deferred/log.py
 |         +-- `LogWriteError`                 deferred: harness/deferred/log.py
 |         +-- `StitchError` [ValueError]      deferred: harness/deferred/stitch.py
 |         +-- `PerfFormatError` [ValueError]  perfparse: harness/perfparse/records.py
 |         +-- `CaptureError`                  perf: harness/perf/capture.py
 |         +-- `ScriptFormatError` [ValueError]  perfparse: harness/perfparse/script.py
 |         +-- `DebianRunError`                perf: harness/perf/debian_run.py
 |         +-- `DebianFilesError`              perf: harness/perf/debian_run.py
 |         +-- `DeferIgnored`                  perf: harness/perf/debian_run.py
 |         +-- `RunDirError`                   report: harness/report/run.py
 |         +-- `RunDirTaken`                   report: harness/report/rundir.py
 |         +-- `DeliveryFileError` [ValueError] scenarios: harness/scenarios/snapshot.py
 |         +-- `UnwindFailure` [AssertionError] pytest plugin: harness/pytest_plugin.py
 |         +-- `UsageError`                    commands: harness/commands/__init__.py
 |         +-- `ShapeError`                    fuzz: harness/fuzz/shape.py
 |         +-- `MatrixError`                   fuzz: harness/fuzz/build.py
 |         +-- `CampaignError`                 fuzz: harness/fuzz/campaign.py
 |         +-- `ClusterError`                  campaign: harness/campaign/executor.py
 |         +-- `ClusterAddressError`           campaign: harness/campaign/executor.py
 |         +-- `SchedulerLost`                 campaign: harness/campaign/executor.py
 |         +-- `TaskCancelled`                 campaign: harness/campaign/isolate.py
 |         +-- `TaskDied`                      campaign: harness/campaign/isolate.py
 |         +-- `TaskTimeout`                   campaign: harness/campaign/isolate.py
 |         +-- `MatrixInputError`              matrix: harness/matrix/__init__.py
 |         +-- `GuestSpecError`                session: harness/session.py
 |         +-- `UnknownScenario`               scenarios: harness/scenarios/catalog.py

Outside the tree: ``CaptureError`` of :mod:`harness.tools.capture_gdb` (a ``RuntimeError``),
which belongs to a test tool that captures snapshots with gdb; ``Interrupted`` of
:mod:`harness.signals` (a ``KeyboardInterrupt``: SIGTERM and SIGHUP end a run the way Ctrl-C
does, through every ``except KeyboardInterrupt``); ``ScriptOsExit`` of
:mod:`harness.commands.shell` (a ``SystemExit``: ``os._exit(N)`` called by a ``harness shell``
script, which the command maps into 0-3); and the private control-flow
exceptions (names starting with ``_``), which never leave their module.
``tests/unit/test_errors.py`` checks that this tree matches the classes.
"""

from __future__ import annotations

__all__ = ["EXIT_FAILURES", "EXIT_INFRA", "EXIT_OK", "EXIT_USAGE", "HarnessError"]

#: The exit codes of every subcommand (harness/cli.py): named here, the ground floor, so that the
#: error classes of every layer and the commands that choose a code say which one they mean.
EXIT_OK = 0  # every stack agrees or is explained; the command did what it was asked
EXIT_FAILURES = 1  # failures or invariant violations
EXIT_USAGE = 2  # bad usage or input
EXIT_INFRA = 3  # the infrastructure failed (guest timeout, QEMU died, disk full, interrupted)


class HarnessError(Exception):
    """Abstract root of every exception the harness raises on purpose (see the tree above).

    ``exit_code`` is what the command line exits with when the error reaches it (the contract of
    every subcommand: 0 agree or explained, 1 failures, 2 bad usage or input, 3 infrastructure):
    3 unless a class says the error is about its input (a file, a binary, a log, an argument),
    which sets 2."""

    exit_code = EXIT_INFRA
