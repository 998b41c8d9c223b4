"""Collapsed stacks and flame graphs of the unwinder's stacks.

Collapsed stacks (the "folded" format of FlameGraph's stackcollapse scripts): one line per
distinct stack, its frames outermost first joined by ``;``, a space, and how many stacks had it::

    callchain-fp-sf;__libc_start_call_main;main;a;b;c 57

The first frame is the process name, as stackcollapse-perf.pl writes it by default, so that the
file equals what that script makes of the same stacks in perf-script text
(:mod:`harness.report.perfscript`).  Frames are named by :func:`harness.report.run.frame_name`.

:func:`flame_svg` draws such stacks as an SVG flame graph (root at the bottom, each frame as wide
as the stacks that went through it, siblings in name order): every frame is a ``<g class="f">``
with its fraction of the width (``data-x``, ``data-w``), depth (``data-d``) and name (``data-n``),
a ``<title>`` for the hover text and a ``<rect>``; the report's script zooms on a click by
rescaling from those attributes.  No PyPI package draws folded stacks to SVG as a maintained
library (the candidates are profilers' front ends, or wrap flamegraph.pl), so this is one.
"""

from __future__ import annotations

import collections
import html
import zlib
from pathlib import Path

__all__ = ["folded_lines", "parse_folded", "write_folded", "flame_svg", "Node", "build_tree"]

WIDTH = 1200
PAD = 10
ROW = 17
MIN_FRACTION = 0.0005  # frames narrower than this fraction of the width are not drawn


def folded_lines(folded: collections.Counter) -> list[str]:
    """``frame;frame;frame COUNT`` per distinct stack, in string order (as stackcollapse-perf.pl
    sorts them)."""
    return sorted(f"{';'.join(stack)} {n}" for stack, n in folded.items() if stack)


def parse_folded(text: str) -> collections.Counter:
    out: collections.Counter = collections.Counter()
    for line in text.splitlines():
        if line.strip():
            stack, _, n = line.rpartition(" ")
            out[tuple(stack.split(";"))] += int(n)
    return out


def write_folded(folded: collections.Counter, path: Path) -> Path:
    lines = folded_lines(folded)
    Path(path).write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    return Path(path)


class Node:
    __slots__ = ("name", "count", "children")

    def __init__(self, name: str):
        self.name = name
        self.count = 0
        self.children: dict[str, Node] = {}


def build_tree(folded: collections.Counter) -> Node:
    root = Node("all")
    for stack, n in folded.items():
        root.count += n
        node = root
        for name in stack:
            node = node.children.setdefault(name, Node(name))
            node.count += n
    return root


def _color(name: str) -> str:
    """A warm colour fixed by the name (as flamegraph.pl's 'hot' palette, but stable across runs)."""
    h = zlib.crc32(name.encode())
    r = 205 + (h & 0x3F) % 50
    g = (h >> 8) % 230
    b = (h >> 16) % 55
    return f"rgb({r},{g},{b})"


def _label(name: str, px: float) -> str:
    fit = int((px - 6) // 7)
    if fit < 3:
        return ""
    return name if len(name) <= fit else name[: fit - 2] + ".."


def flame_svg(folded: collections.Counter, title: str = "", width: int = WIDTH) -> str:
    """An SVG flame graph of collapsed stacks (see the module docstring)."""
    root = build_tree(folded)
    total = root.count or 1
    frames: list[tuple[float, float, int, Node]] = []  # (x, w, depth, node), as fractions

    stack = [(root, 0.0, 0)]
    while stack:
        node, x, d = stack.pop()
        w = node.count / total
        if w < MIN_FRACTION:
            continue
        frames.append((x, w, d, node))
        cx = x
        for name in sorted(node.children):
            child = node.children[name]
            stack.append((child, cx, d + 1))
            cx += child.count / total
    depth = max((d for _, _, d, _ in frames), default=0) + 1
    top = 34
    height = top + depth * ROW + PAD
    inner = width - 2 * PAD
    out = [f'<svg class="flamegraph" xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
           f'viewBox="0 0 {width} {height}" data-width="{width}" data-pad="{PAD}">',
           f'<text x="{PAD}" y="16" font-weight="bold">{html.escape(title)}</text>',
           f'<text class="reset" x="{width - PAD}" y="16" text-anchor="end">reset zoom</text>']
    for x, w, d, node in frames:
        px, pw = PAD + x * inner, w * inner
        y = height - PAD - (d + 1) * ROW
        name = html.escape(node.name, quote=True)
        pct = 100.0 * node.count / total
        out.append(
            f'<g class="f" data-x="{x:.6f}" data-w="{w:.6f}" data-d="{d}" data-n="{name}">'
            f'<title>{name} ({node.count} stack{"s" if node.count != 1 else ""}, {pct:.2f}%)</title>'
            f'<rect x="{px:.2f}" y="{y}" width="{max(pw, 0.1):.2f}" height="{ROW - 1}" rx="2" '
            f'fill="{"rgb(220,220,220)" if d == 0 else _color(node.name)}"/>'
            f'<text x="{px + 3:.2f}" y="{y + ROW - 5}">{html.escape(_label(node.name, pw))}</text></g>')
    out.append("</svg>")
    return "\n".join(out)
