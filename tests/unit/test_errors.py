"""harness.errors: every public exception class of the package is a HarnessError, and the tree
drawn in the docstring of harness/errors.py names each one under its parent.

The classes are found by importing every module of the package, so an exception class added
anywhere outside the tree fails here."""

import importlib
import os
import pkgutil
import re

import harness
from harness import errors
from harness.errors import HarnessError

# Public exception classes knowingly left outside the tree, with the reason.
OUTSIDE = {
    "harness.tools.capture_gdb.CaptureError": "a RuntimeError of the gdb snapshot-capture test tool",
    "harness.signals.Interrupted": "a KeyboardInterrupt: SIGTERM and SIGHUP take Ctrl-C's way out of a run",
    "harness.commands.shell.ScriptOsExit": "a SystemExit: os._exit(N) of a shell script, mapped into 0-3",
}


def _module_names(path: str, prefix: str):
    """Every module under ``path``; unlike pkgutil.walk_packages, also in directories without
    ``__init__.py`` (namespace packages such as harness/images/)."""
    for info in pkgutil.iter_modules([path], prefix):
        yield info.name
    for entry in sorted(os.scandir(path), key=lambda e: e.name):
        if entry.is_dir() and entry.name.isidentifier() and not entry.name.startswith("__"):
            yield from _module_names(entry.path, f"{prefix}{entry.name}.")


def _modules():
    yield harness
    for path in harness.__path__:
        for name in _module_names(path, "harness."):
            yield importlib.import_module(name)


def _public_exceptions() -> dict[str, type]:
    found = {}
    for module in _modules():
        for obj in vars(module).values():
            if (isinstance(obj, type) and issubclass(obj, BaseException) and obj.__module__ == module.__name__
                    and not obj.__name__.startswith("_")):
                qualname = f"{obj.__module__}.{obj.__qualname__}"
                if qualname not in OUTSIDE:
                    found[qualname] = obj
    return found


def _tree() -> dict[str, str | None]:
    """``{class name: parent's name}`` from the docstring's tree (the root's parent is None)."""
    parents: dict[str, str | None] = {}
    stack: list[tuple[int, str]] = []  # (column of the name, name) of the current branch
    for line in errors.__doc__.splitlines():
        m = re.match(r" \|(.*?)`(\w+)`", line)
        if not m:
            continue
        col, name = len(m.group(1)), m.group(2)
        while stack and stack[-1][0] >= col:
            stack.pop()
        assert name not in parents, f"{name} appears twice in the tree"
        parents[name] = stack[-1][1] if stack else None
        stack.append((col, name))
    return parents


def test_the_walk_finds_the_layers():
    names = {cls.__name__ for cls in _public_exceptions().values()}
    assert {"HarnessError", "GuestError", "ImageError", "SFrameError", "UnwindError", "BtfError",
            "ModelError", "LogFormatError", "PerfFormatError", "MemoryFault"} <= names


def test_every_exception_is_a_harness_error():
    outside = sorted(q for q, cls in _public_exceptions().items() if not issubclass(cls, HarnessError))
    assert not outside, f"exception classes outside the HarnessError tree (see harness/errors.py): {outside}"


def test_the_tree_names_every_exception_under_its_parent():
    tree = _tree()
    assert tree.get("HarnessError") == "Exception"
    found = _public_exceptions()
    by_name: dict[str, list[str]] = {}
    for qualname, cls in found.items():
        by_name.setdefault(cls.__name__, []).append(qualname)
    assert not {n: q for n, q in by_name.items() if len(q) > 1}, "two exception classes share a name"
    missing = sorted(q for q, cls in found.items() if cls.__name__ not in tree)
    assert not missing, f"the tree in harness/errors.py does not name {missing}"
    for qualname, cls in found.items():
        if cls is HarnessError:
            continue
        # The parent drawn is the first base that is a harness exception (a built-in second base,
        # such as ValueError, is shown in brackets beside the name).
        parent = next((b for b in cls.__bases__ if issubclass(b, HarnessError)), Exception)
        assert tree[cls.__name__] == parent.__name__, (
            f"{qualname} derives from {parent.__name__}, the tree draws it under {tree[cls.__name__]}")
    stale = sorted(set(tree) - {"Exception"} - set(by_name))
    assert not stale, f"the tree names classes that do not exist: {stale}"
