"""Verdicts: an unwinder's frames against an oracle's, every difference proven by a cause.

:mod:`.types` (Divergence, PairVerdict: data, no display strings), :mod:`.causes` (the closed
registry of cause predicates), :mod:`.align` (:func:`judge`: align two frame lists and explain).
"""

from .align import judge
from .causes import CAUSES, explain
from .types import Divergence, PairVerdict

__all__ = ["CAUSES", "Divergence", "PairVerdict", "explain", "judge"]
