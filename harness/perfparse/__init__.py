"""What perf writes, parsed: pure parsers (bytes or text in, dataclasses out, a typed error on bad
input) with no guest, no session and nothing of the oracles.

* :mod:`.records`: perf ring-buffer records and the ``perfcc`` capture file;
* :mod:`.perfdata`: ``perf.data`` as ``perf record`` writes it;
* :mod:`.script`: ``perf script`` text parsed back into entries;
* :mod:`.resolve`: the guest path -> host path table ``harness perf --save`` writes beside a capture.

They sit on the domain floor, below the oracles (:mod:`harness.oracles.perf` reads
:class:`.records.Sample`), while the drivers that capture and check (:mod:`harness.perf`) sit above.
"""
