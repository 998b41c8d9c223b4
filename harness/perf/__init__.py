"""The third oracle: the guest kernel's own perf callchains for the same execution.

* :mod:`.records`: perf ring-buffer records and the ``perfcc`` capture file (a pure parser);
* :mod:`.oracle`: each sample's kernel callchain against our unwinder (and DWARF CFI) on the
  sample's own registers and stack bytes; with ``defer_callchain``, the deferred records and their
  cookies checked like the deferred model's event log;
* :mod:`.capture`: running ``guest_programs/perfcc.c`` in a guest and fetching its file.
"""
