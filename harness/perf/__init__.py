"""The third oracle's drivers: the guest kernel's own perf callchains for the same execution.

* :mod:`.oracle`: each sample's kernel callchain against our unwinder (and DWARF CFI) on the
  sample's own registers and stack bytes; with ``defer_callchain``, the deferred records and their
  cookies checked like the deferred model's event log;
* :mod:`.capture`: running ``guest_programs/perfcc.c`` in a guest and fetching its file;
* :mod:`.debian`, :mod:`.debian_run`: Debian's own perf in the guest, against our stitcher and unwinder;
* :mod:`.rate`: the guest kernel's own deferred-unwinding rate.

The parsers of what perf writes (its ring-buffer records and perfcc's capture file, ``perf.data``,
``perf script`` text, the resolve table ``--save`` writes) are in :mod:`harness.perfparse`, on the
domain floor, because the oracle of :mod:`harness.oracles.perf` reads their records too.
"""
