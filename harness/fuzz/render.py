"""A :class:`~harness.fuzz.shape.Shape` as one C (or, with exceptions, C++) translation unit.

The text comes from the jinja2 template ``templates/program.c.j2``; this module only computes
what each function's template block needs (its attributes, the lines that call its callees).
Every generated function is named ``fz_*`` (``fz_f<i>`` for function i, ``fz_h<i>`` its signal
handler, ``fz_t<i>`` its thread, and the helpers ``fz_exit``/``fz_longjmp``/``fz_throw``), with
C linkage: the static checker finds them in the symbol table by that prefix.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache

import jinja2

from .shape import CALLEE_CONTEXTS, RECURSION, Shape

PREFIX = "fz_"
VARGS = ", 1L, 2L, 3L"  # what a call passes a variadic function after its depth


@cache
def _env() -> jinja2.Environment:
    return jinja2.Environment(loader=jinja2.PackageLoader("harness.fuzz", "templates"),
                              undefined=jinja2.StrictUndefined, trim_blocks=True, lstrip_blocks=True,
                              keep_trailing_newline=True, autoescape=False)


@dataclass(frozen=True)
class _Fn:
    index: int
    features: frozenset[str]
    variadic: bool
    locals: int
    context: str | None
    attrs: str
    calls: tuple[str, ...]


def extra_cflags(shape: Shape) -> tuple[str, ...]:
    """The compiler flags a shape's features need beyond the build's: ``bigframe``'s
    ``-fstack-clash-protection`` (for the whole unit: clang has no per-function switch)."""
    return ("-fstack-clash-protection",) if "bigframe" in shape.features() else ()


def source_name(shape: Shape) -> str:
    return "prog.cc" if shape.lang == "c++" else "prog.c"


def render(shape: Shape) -> str:
    """The program's source text."""
    fns = []
    for i, f in enumerate(shape.funcs):
        attrs = ["FZ_NOINLINE"]
        if f.frame == "fp":
            attrs.append('__attribute__((optimize("no-omit-frame-pointer")))')
        elif f.frame == "nofp":
            attrs.append('__attribute__((optimize("omit-frame-pointer")))')
        if "realign" in f.features:
            attrs.append("__attribute__((force_align_arg_pointer))")
        context = next((c for c in CALLEE_CONTEXTS if c in f.features), None)
        calls = [f"r += fz_f{c}({RECURSION}{VARGS if 'variadic' in shape.funcs[c].features else ''});"
                 for c in f.callees]
        if "tailcall" in f.features:
            calls[-1:] = ["fz_sink = r;", "return " + calls[-1][len("r += "):]]
        if not calls:
            calls = ["FZ_SPIN_VDSO();" if "vdso" in f.features else "FZ_SPIN();"]
        fns.append(_Fn(i, f.features, "variadic" in f.features, f.locals, context, " ".join(attrs) + " ",
                       tuple(calls)))
    feats = shape.features()
    uses = {k: k in feats for k in ("noreturn", "setjmp", "exception", "vdso", "cold", "bigframe")}
    return _env().get_template("program.c.j2").render(
        funcs=fns, uses=uses, lang=shape.lang, describe=shape.describe(), depth=RECURSION, vargs=VARGS)
