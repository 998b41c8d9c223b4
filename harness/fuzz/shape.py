"""Program shapes: a call graph of functions, each with the stack features it exercises.

A :class:`Shape` is a tuple of :class:`Func`; ``main`` calls function 0 and function ``i`` calls
its ``callees`` (indices after ``i``: the graph is acyclic, so every program ends; recursion is a
feature of its own, bounded by a depth argument).  Every function is reachable from ``main``.
Every leaf loops in the ``getppid`` syscall (inline ``syscall``: a leaf stays a leaf) for a
number of iterations the program takes from its first argument, so that a live sampler's stops
land inside the chain; the program then unwinds and exits.

The features (:data:`FEATURES`) are the shapes the unwinders get wrong in practice:

* ``alloca``/``vla`` -- a frame whose size is known only at run time (the CFA moves to rbp);
* ``realign`` -- a 32-byte aligned local and ``force_align_arg_pointer``: stack realignment
  through DRAP (the CFA is an expression over r10/rbp);
* ``redzone`` -- a leaf keeping its locals in the red zone below rsp (leaves only);
* ``tailcall`` -- the last call is ``return callee(...)`` (a ``jmp`` from -O2);
* ``noreturn`` -- the function ends with a call of a noreturn function (a call in tail position:
  the return address is past the function's end);
* ``recursion`` -- the function calls itself ``RECURSION`` deep before its body;
* ``variadic`` -- ``long f(long, ...)`` reading its extra arguments with ``va_arg``;
* ``setjmp`` -- ``setjmp`` then a ``longjmp`` back from a helper;
* ``signal``/``sigaltstack`` -- the callees run in a signal handler (raised by the function),
  on an alternate signal stack for the second;
* ``exception`` -- the callees run in a ``try`` block ended by a ``throw`` (C++);
* ``thread`` -- the callees run in a thread the function starts and joins;
* ``vdso`` -- a leaf that loops in ``clock_gettime`` and ``gettimeofday`` instead of ``getppid``
  (leaves only): the vDSO's code, so that a live sampler's stops land inside the vDSO and every
  walk must step out of it (judged against the vDSO's own ``.eh_frame``);
* ``cold`` -- the callees run in a branch the compiler is told is cold (``__builtin_expect`` and
  a call of a ``cold`` function), which gcc at -O2 moves out of the function into a
  ``fz_f<i>.cold`` fragment in ``.text.unlikely``, a piece with an FDE of its own that runs in the
  function's frame (the branch is always taken, so live samples see return addresses there);
* ``bigframe`` -- a 32 KiB local array, and the build gets ``-fstack-clash-protection`` (as
  Ubuntu's and Fedora's compilers have it by default): gcc at -O1 and up then probes the frame
  page by page in a loop with the CFA defined on r11 (``.cfi_def_cfa 11``), which SFrame V1/V2
  cannot express (gas 2.40 wrote it as sp-based: docs/findings.md), clang likewise with
  ``.cfi_def_cfa_register %r11``;
* ``shrinkwrap`` -- an early ``return`` before anything else, on a value never passed: gcc
  shrink-wraps the prologue past it, so the function has two exits and its CFI a
  ``.cfi_remember_state``/``.cfi_restore_state`` pair.

``frame`` chooses per function whether it keeps a frame pointer whatever the build says
(``optimize("no-omit-frame-pointer")`` / ``optimize("omit-frame-pointer")``) or follows the
build (``"build"``): a program mixes frame-pointer and frameless functions in one unit.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from hypothesis import strategies as st

from ..errors import EXIT_USAGE, HarnessError

FEATURES = ("alloca", "vla", "realign", "redzone", "tailcall", "noreturn", "recursion", "variadic",
            "setjmp", "signal", "sigaltstack", "exception", "thread", "vdso", "cold", "bigframe",
            "shrinkwrap")
#: features that run the function's callees somewhere else (a handler, a try block, a thread, a
#: cold fragment): at most one per function
CALLEE_CONTEXTS = ("signal", "sigaltstack", "exception", "thread", "cold")
#: features whose code makes calls (a red-zone function makes none)
CALLING = ("noreturn", "recursion", "setjmp", "signal", "sigaltstack", "exception", "thread", "cold", "bigframe")
FRAMES = ("build", "fp", "nofp")
MAX_FUNCS = 7
RECURSION = 3  # levels of a recursive function's self-calls


class ShapeError(HarnessError):
    """A shape that breaks the rules of :class:`Shape` (a reproducer's shape.json edited by hand)."""

    exit_code = EXIT_USAGE


@dataclass(frozen=True)
class Func:
    frame: str = "build"
    features: frozenset[str] = field(default_factory=frozenset)
    callees: tuple[int, ...] = ()
    locals: int = 0  # words of a local array the function writes and passes on

    @property
    def leaf(self) -> bool:
        return not self.callees

    def to_json(self) -> dict:
        return {"frame": self.frame, "features": sorted(self.features), "callees": list(self.callees),
                "locals": self.locals}

    @classmethod
    def from_json(cls, d: dict) -> Func:
        return cls(d["frame"], frozenset(d["features"]), tuple(d["callees"]), d["locals"])


@dataclass(frozen=True)
class Shape:
    funcs: tuple[Func, ...]

    def __post_init__(self) -> None:
        validate(self)

    @property
    def lang(self) -> str:
        return "c++" if self.features() & {"exception"} else "c"

    def features(self) -> frozenset[str]:
        return frozenset().union(*(f.features for f in self.funcs))

    def frames(self) -> frozenset[str]:
        return frozenset(f.frame for f in self.funcs)

    @property
    def size(self) -> int:
        """What shrinking minimises, as a person reads a reproducer: functions, then features,
        calls and locals."""
        return len(self.funcs) * 10 + sum(len(f.features) * 3 + len(f.callees) + (f.locals > 0)
                                          for f in self.funcs)

    def to_json(self) -> dict:
        return {"funcs": [f.to_json() for f in self.funcs]}

    @classmethod
    def from_json(cls, d: dict) -> Shape:
        try:
            return cls(tuple(Func.from_json(f) for f in d["funcs"]))
        except (KeyError, TypeError) as exc:
            raise ShapeError(f"not a shape: {exc!r}") from exc

    def describe(self) -> str:
        """One line: ``f0[fp alloca]->f1,f2; f1[...]``."""
        parts = []
        for i, f in enumerate(self.funcs):
            tags = ([] if f.frame == "build" else [f.frame]) + sorted(f.features)
            calls = "->" + ",".join(f"f{c}" for c in f.callees) if f.callees else ""
            parts.append(f"f{i}" + (f"[{' '.join(tags)}]" if tags else "") + calls)
        return "; ".join(parts)


def validate(shape: Shape) -> None:
    """Raise :class:`ShapeError` unless ``shape`` keeps the rules the templates rely on."""
    n = len(shape.funcs)
    if not 1 <= n <= MAX_FUNCS:
        raise ShapeError(f"a shape has 1 to {MAX_FUNCS} functions, not {n}")
    called = {0}
    for i, f in enumerate(shape.funcs):
        if f.frame not in FRAMES:
            raise ShapeError(f"f{i}: frame {f.frame!r} is not one of {', '.join(FRAMES)}")
        unknown = set(f.features) - set(FEATURES)
        if unknown:
            raise ShapeError(f"f{i}: unknown features {sorted(unknown)}")
        if any(not i < c < n for c in f.callees) or list(f.callees) != sorted(set(f.callees)):
            raise ShapeError(f"f{i}: callees {f.callees} must be distinct later functions, in order")
        if "redzone" in f.features and (f.callees or f.features & set(CALLING)):
            raise ShapeError(f"f{i}: a red-zone function is a leaf: no callees, none of {', '.join(CALLING)}")
        if "vdso" in f.features and (f.callees or f.features & set(CALLING) or "redzone" in f.features):
            raise ShapeError(f"f{i}: a vDSO function is a leaf that calls the vDSO: no callees, no red zone, "
                             f"none of {', '.join(CALLING)}")
        if {"tailcall", "noreturn"} <= f.features or len(f.features & set(CALLEE_CONTEXTS)) > 1:
            raise ShapeError(f"f{i}: at most one of tailcall/noreturn and one of {', '.join(CALLEE_CONTEXTS)}")
        if "tailcall" in f.features and (not f.callees or f.features & set(CALLEE_CONTEXTS)):
            raise ShapeError(f"f{i}: a tail call needs a callee called from the function itself")
        if not 0 <= f.locals <= 8:
            raise ShapeError(f"f{i}: locals {f.locals} not in 0..8")
        called.update(f.callees)
    if called != set(range(n)):
        raise ShapeError(f"functions {sorted(set(range(n)) - called)} are called by none")


@st.composite
def _one(draw) -> tuple:
    """One function's draws: frame, features, locals, and (as free integers, read modulo what
    exists) its caller among the functions before it and up to two more callees after it."""
    return (draw(st.sampled_from(FRAMES)), draw(st.sets(st.sampled_from(FEATURES), max_size=3)),
            draw(st.integers(0, 8)), draw(st.integers(0, MAX_FUNCS)),
            draw(st.lists(st.integers(0, MAX_FUNCS), max_size=2)))


@st.composite
def funcs(draw, max_funcs: int = MAX_FUNCS) -> Shape:
    """A :class:`Shape`, drawn as a list of functions so that hypothesis' shrinker deletes
    functions (its strongest pass) without reinterpreting the others: function i's caller is
    its drawn integer modulo i (every function reachable), its extra callees integers modulo
    what follows it.  The features a function cannot have (a red zone with callees, a tail call
    without) are dropped, so every draw is valid.  Shrinks towards one function, no features,
    frames as the build has them."""
    drawn = draw(st.lists(_one(), min_size=1, max_size=max_funcs))
    n = len(drawn)
    callees: list[set[int]] = [set() for _ in range(n)]
    for i in range(1, n):
        callees[drawn[i][3] % i].add(i)
    for i in range(n - 1):
        callees[i] |= {i + 1 + e % (n - i - 1) for e in drawn[i][4]}
    out = []
    for i, (frame, feats, locals_, _, _) in enumerate(drawn):
        feats = set(feats)
        if callees[i] or feats & set(CALLING):
            feats.discard("redzone")
            feats.discard("vdso")
        if "vdso" in feats:
            feats.discard("redzone")  # a red-zone leaf calls nothing; the vDSO's is a call
        contexts = sorted(feats & set(CALLEE_CONTEXTS))
        feats -= set(contexts[1:])
        if "tailcall" in feats and ("noreturn" in feats or not callees[i] or feats & set(CALLEE_CONTEXTS)):
            feats.discard("tailcall")
        out.append(Func(frame, frozenset(feats), tuple(sorted(callees[i])), locals_))
    return Shape(tuple(out))


def shapes(max_funcs: int = MAX_FUNCS) -> st.SearchStrategy[Shape]:
    return funcs(max_funcs)
