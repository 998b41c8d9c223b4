"""Verdicts: an unwinder's frames against an oracle's, every difference proven by a cause.

:mod:`.types` (Divergence, PairVerdict: data, no display strings; imports nothing else of the
harness, so the log layer can validate records against its kinds and verdicts), :mod:`.causes`
(the closed registry of cause predicates), :mod:`.align` (:func:`~.align.judge`: align two frame
lists and explain).  Import the modules themselves: this package imports none of them eagerly.
"""
