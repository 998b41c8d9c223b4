"""The toolchain's own tools (readelf, objdump of the host and of the toolchain roots) as witnesses.

:mod:`.binutils` runs them (bounded, remembered per file); :mod:`.words` parses their text;
:mod:`.witness` cross-examines the claims each proven cause makes about binaries
(:mod:`harness.verdicts.claims`, :mod:`harness.verdicts.cross`).  A floor of its own, above the
domain (which never runs a process) and below the drivers that use it (``harness run
--cross-examine``, the live fuzzer).
"""
