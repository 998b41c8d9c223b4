"""Kernel symbol tables: ``/proc/kallsyms`` text, an ELF ``.symtab``, or the harness's cache file.

Pure: text or bytes in, a :class:`Kallsyms` table out (pyelftools only to read an ELF symbol table).

    syms = Kallsyms.parse(text)              # "ffffffff81000000 T _stext" lines, "\\t[module]" optional
    syms.lookup("do_syscall_64")             # address; AmbiguousSymbolError for a name with several
    syms.lookup_all("cleanup")               # every Symbol of that name (static functions repeat)
    syms.symbolize(0xffffffff81234567)       # "do_syscall_64+0x47"
    syms.next_symbol_address(addr)           # bounds a function's code
    syms.unique()                            # {name: address} of the names with one address
    Kallsyms.loads(syms.dumps())             # the compact per-kernel-build cache

Lines are ``ADDRESS TYPE NAME`` with an optional ``[module]`` (tab-separated in the kernel's output);
anything else is a :class:`KallsymsParseError` naming the line number.  A table read without
privilege (``kernel.kptr_restrict``) has every address zeroed: that is a
:class:`KallsymsCensoredError`, never a table of zeros.
"""

from __future__ import annotations

import bisect
import json
import re
from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from operator import itemgetter
from pathlib import Path
from types import EllipsisType

from elftools.common.exceptions import ELFError
from elftools.elf.constants import SH_FLAGS
from elftools.elf.elffile import ELFFile

from ..errors import EXIT_USAGE, HarnessError

__all__ = [
    "Kallsyms",
    "Symbol",
    "KallsymsError",
    "KallsymsParseError",
    "KallsymsCensoredError",
    "SymbolLookupError",
    "AmbiguousSymbolError",
]


class KallsymsError(HarnessError, ValueError):
    """The symbol text, cache or ELF file cannot be used."""

    exit_code = EXIT_USAGE  # bad input


class KallsymsParseError(KallsymsError):
    def __init__(self, lineno: int, line: str, why: str, source: str = "kallsyms"):
        self.lineno = lineno
        self.line = line
        shown = line if len(line) <= 120 else line[:117] + "..."
        super().__init__(f"{source} line {lineno}: {why}: {shown!r}")


class KallsymsCensoredError(KallsymsError):
    """Addresses are zeroed because the reader lacked privilege."""


class SymbolLookupError(HarnessError, KeyError):
    def __str__(self) -> str:  # KeyError would repr() the message
        return str(self.args[0]) if self.args else ""


class AmbiguousSymbolError(SymbolLookupError):
    """The name belongs to several addresses (static functions of the same name): use lookup_all()."""


@dataclass(frozen=True, slots=True)
class Symbol:
    name: str
    address: int
    type: str  # nm-style letter: T/t text, D/d data, B/b bss, R/r read-only, A/a absolute, W/w weak...
    module: str | None = None  # "ext4" for "[ext4]"; None for vmlinux

    @property
    def is_text(self) -> bool:
        return self.type in "TtWw"

    def line(self) -> str:
        tail = f"\t[{self.module}]" if self.module else ""
        return f"{self.address:016x} {self.type} {self.name}{tail}"


_FIELDS = r"([0-9a-fA-F]{1,16})[ \t]+(\S)[ \t]+([^\s\[\]]+)(?:[ \t]+\[([^\s\[\]]+)\])?[ \t]*\r?"
_LINE = re.compile(_FIELDS)
_LINES = re.compile(r"^" + _FIELDS + r"$", re.M)
_CACHE_MAGIC = "# harness-kallsyms"
_CACHE_VERSION = 1
_TEXT_TYPES = frozenset("Tt")
_by_address = itemgetter(0)


class Kallsyms:
    """A kernel symbol table sorted by address, with a name index built on first lookup."""

    def __init__(self, symbols: Iterable[Symbol] = (), *, source: str = "kallsyms", meta: dict | None = None):
        rows = sorted(((s.address, s.type, s.name, s.module) for s in symbols), key=_by_address)
        self._init(rows, source, meta)

    def _init(
        self, rows: list[tuple[int, str, str, str | None]], source: str, meta: dict | None, censor_check: bool = True
    ) -> None:
        """``rows`` of (address, type, name, module), sorted by address."""
        self.source = source
        self.meta = dict(meta or {})
        self._rows = rows
        self._addrs = [r[0] for r in rows]
        self._first: dict[str, int] | None = None
        self._dups: dict[str, list[int]] = {}
        if censor_check:
            self._check_censored()

    @classmethod
    def _from_rows(cls, rows: list, source: str, meta: dict | None = None, censor_check: bool = True) -> Kallsyms:
        if any(rows[i][0] > rows[i + 1][0] for i in range(len(rows) - 1)):
            rows.sort(key=_by_address)  # stable: symbols at one address keep their listed order
        self = cls.__new__(cls)
        self._init(rows, source, meta, censor_check)
        return self

    def _check_censored(self) -> None:
        if not self._rows:
            return
        zero_text = [r[2] for r in self._rows[: bisect.bisect_right(self._addrs, 0)] if r[1] in _TEXT_TYPES]
        # Real zeros exist (zero-based per-CPU symbols before 6.15) but never for code, nor for all.
        all_zero = len(self._rows) > 1 and self._addrs[-1] == 0
        if all_zero or zero_text:
            why = "every address is 0" if all_zero else f"text symbol {zero_text[0]} is at address 0"
            raise KallsymsCensoredError(
                f"{self.source} is censored ({why}): kernel.kptr_restrict hides the addresses from this "
                "reader; read /proc/kallsyms as root with kptr_restrict=0 (sysctl kernel.kptr_restrict=0)"
            )

    # --- sources ------------------------------------------------------------------------------------

    @classmethod
    def parse(cls, text: str | bytes, *, source: str = "kallsyms") -> Kallsyms:
        """``/proc/kallsyms`` text (or ``nm`` output of the same shape).  Blank lines are skipped."""
        if isinstance(text, (bytes, bytearray, memoryview)):
            try:
                text = bytes(text).decode("utf-8")
            except UnicodeDecodeError as e:
                lineno = bytes(text).count(b"\n", 0, e.start) + 1
                raise KallsymsError(f"{source} line {lineno}: not UTF-8 text (byte {e.start})") from None
        return cls._from_rows(_parse_lines(text, source, 1), source)

    @classmethod
    def from_elf(cls, path: str | Path) -> Kallsyms:
        """The ``.symtab`` of an ELF vmlinux (or any ELF), typed like ``nm``; undefined, file and
        section symbols left out.  Debian's vmlinux is stripped: that raises KallsymsError."""
        rows = []
        try:
            with open(path, "rb") as f:
                elf = ELFFile(f)
                symtab = elf.get_section_by_name(".symtab")
                if symtab is None or not hasattr(symtab, "iter_symbols"):
                    raise KallsymsError(
                        f"{path} has no .symtab (stripped, as Debian's vmlinux is): use the guest's /proc/kallsyms"
                    )
                sections = [(s["sh_flags"], s["sh_type"]) for s in elf.iter_sections()]
                for sym in symtab.iter_symbols():
                    letter = _nm_letter(sym, sections, SH_FLAGS)
                    if letter and sym.name:
                        rows.append((sym["st_value"], letter, sym.name, None))
        except ELFError as e:
            raise KallsymsError(f"{path}: not a readable ELF file: {e}") from e
        # No censorship check: an object file's functions do sit at 0.
        return cls._from_rows(rows, f"{path} .symtab", censor_check=False)

    # --- cache --------------------------------------------------------------------------------------

    def dumps(self, meta: dict | None = None) -> str:
        """The cache text: a header line (version, count, ``meta`` as JSON) then kallsyms lines
        sorted by address."""
        meta = {**self.meta, **(meta or {})}
        head = f"{_CACHE_MAGIC} v{_CACHE_VERSION} symbols={len(self._rows)} {json.dumps(meta, sort_keys=True)}\n"
        body = "\n".join(
            f"{a:016x} {t} {n}\t[{m}]" if m else f"{a:016x} {t} {n}" for a, t, n, m in self._rows
        )
        return head + body + ("\n" if body else "")

    def dump(self, path: str | Path, meta: dict | None = None) -> None:
        """Write the cache file (atomically: a temporary file renamed over ``path``)."""
        path = Path(path)
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_text(self.dumps(meta))
        tmp.replace(path)

    @classmethod
    def loads(cls, text: str, *, source: str = "kallsyms cache") -> Kallsyms:
        head, sep, body = text.partition("\n")
        m = re.fullmatch(re.escape(_CACHE_MAGIC) + r" v(\d+) symbols=(\d+) (\{.*\})", head)
        if not m:
            raise KallsymsParseError(1, head, f"not a kallsyms cache header ({_CACHE_MAGIC} vN symbols=N {{...}})",
                                     source)
        if int(m[1]) != _CACHE_VERSION:
            raise KallsymsError(f"{source}: cache format v{m[1]}, this harness reads v{_CACHE_VERSION}: rebuild it")
        try:
            meta = json.loads(m[3])
        except json.JSONDecodeError as e:
            raise KallsymsParseError(1, head, f"bad JSON metadata ({e.msg})", source) from None
        rows = _parse_lines(body, source, 2)
        if len(rows) != int(m[2]):
            raise KallsymsError(f"{source}: header promises {m[2]} symbols, found {len(rows)} (truncated?)")
        return cls._from_rows(rows, source, meta if isinstance(meta, dict) else {})

    @classmethod
    def load(cls, path: str | Path) -> Kallsyms:
        return cls.loads(Path(path).read_text(), source=str(path))

    # --- queries ------------------------------------------------------------------------------------

    def __len__(self) -> int:
        return len(self._rows)

    def __iter__(self) -> Iterator[Symbol]:
        return (Symbol(n, a, t, m) for a, t, n, m in self._rows)

    def __contains__(self, name: object) -> bool:
        return name in self._index()

    def __repr__(self) -> str:
        return f"<Kallsyms {len(self)} symbols from {self.source}>"

    def _index(self) -> dict[str, int]:
        """name -> row of its first symbol; names that repeat are also in ``self._dups`` (all rows)."""
        if self._first is None:
            names = [r[2] for r in self._rows]
            first = dict(zip(reversed(names), range(len(names) - 1, -1, -1), strict=True))
            dups: dict[str, list[int]] = {}
            if len(first) != len(names):
                repeated = {n for n, c in Counter(names).items() if c > 1}
                for i, n in enumerate(names):
                    if n in repeated:
                        dups.setdefault(n, []).append(i)
            self._first, self._dups = first, dups
        return self._first

    def _rows_named(self, name: str) -> list[int]:
        first = self._index().get(name)
        if first is None:
            return []
        return self._dups.get(name) or [first]

    def lookup_all(self, name: str, module: str | None | EllipsisType = ...) -> list[Symbol]:
        """Every symbol called ``name`` by address (``module=None``: vmlinux only; a name: that
        module only; default: all); empty if none."""
        out = []
        for i in self._rows_named(name):
            a, t, n, m = self._rows[i]
            if module is ... or m == module:
                out.append(Symbol(n, a, t, m))
        return out

    def symbol(self, name: str, module: str | None | EllipsisType = ...) -> Symbol:
        """The one symbol called ``name`` (aliases at one address count as one)."""
        found = self.lookup_all(name, module)
        if not found:
            where = "" if module is ... else f" in {'vmlinux' if module is None else f'module {module}'}"
            raise SymbolLookupError(f"no symbol {name!r}{where} in {self.source} ({len(self)} symbols)")
        if len({s.address for s in found}) > 1:
            listed = ", ".join(f"0x{s.address:x} {s.type}" + (f" [{s.module}]" if s.module else "") for s in found)
            raise AmbiguousSymbolError(
                f"symbol {name!r} is ambiguous: {len(found)} addresses in {self.source} ({listed}); use lookup_all()"
            )
        return found[0]

    def lookup(self, name: str, module: str | None | EllipsisType = ...) -> int:
        """Address of ``name``; SymbolLookupError if absent, AmbiguousSymbolError if several."""
        return self.symbol(name, module).address

    def get(self, name: str, default: int | None = None) -> int | None:
        """Address of ``name`` if present and unique, else ``default``."""
        try:
            return self.lookup(name)
        except SymbolLookupError:
            return default

    def unique(self) -> dict[str, int]:
        """{name: address} for every name with a single address (the ambiguous left out)."""
        rows = self._rows
        out = {name: rows[i][0] for name, i in self._index().items()}
        for name, idx in self._dups.items():
            if any(rows[i][0] != out[name] for i in idx):
                del out[name]
        return out

    def _best_at(self, lo: int, hi: int, text: bool) -> int | None:
        """Index of the symbol to name an address by among rows[lo:hi] (one address): a text
        symbol over data, global over local, then the first listed."""
        best = None
        for i in range(lo, hi):
            t = self._rows[i][1]
            if text and t not in "TtWw":
                continue
            rank = (t not in "TtWw", t.islower())
            if best is None or rank < best[0]:
                best = (rank, i)
        return None if best is None else best[1]

    def nearest(self, address: int, *, text: bool = False) -> tuple[Symbol, int] | None:
        """(symbol at or below ``address``, offset from it), or None below the first symbol.
        ``text=True`` considers only text symbols (T/t/W/w)."""
        hi = bisect.bisect_right(self._addrs, address)
        while hi > 0:
            a = self._addrs[hi - 1]
            lo = bisect.bisect_left(self._addrs, a, 0, hi)
            i = self._best_at(lo, hi, text)
            if i is not None:
                ad, t, n, m = self._rows[i]
                return Symbol(n, ad, t, m), address - ad
            hi = lo
        return None

    def symbolize(self, address: int, *, text: bool = False) -> str:
        """``name+0xoff`` (``[module]`` appended for module symbols), or ``0x...`` if below every symbol."""
        hit = self.nearest(address, text=text)
        if hit is None:
            return f"0x{address:x}"
        sym, off = hit
        mod = f" [{sym.module}]" if sym.module else ""
        return f"{sym.name}+0x{off:x}{mod}"

    def next_symbol_address(self, address: int) -> int:
        """Address of the first symbol strictly above ``address`` (the end of the function there)."""
        i = bisect.bisect_right(self._addrs, address)
        if i == len(self._addrs):
            raise SymbolLookupError(f"no symbol above 0x{address:x} in {self.source}")
        return self._addrs[i]


def _parse_lines(text: str, source: str, first_lineno: int) -> list[tuple[int, str, str, str | None]]:
    """Rows (address, type, name, module or None) of every line.  The fast path is one findall over
    the text; the per-line path (blank lines, or a bad line to name) runs only when the count of
    matches is not the count of lines."""
    found = _LINES.findall(text)
    if len(found) != text.count("\n") + (not text.endswith("\n") and bool(text)):
        found = []
        for lineno, line in enumerate(text.split("\n"), first_lineno):
            if not line.strip():
                continue
            m = _LINE.fullmatch(line)
            if m is None:
                raise KallsymsParseError(lineno, line, _why(line), source)
            found.append(m.groups(""))
    return [(int(a, 16), t, n, m or None) for a, t, n, m in found]


def _why(line: str) -> str:
    parts = line.split()
    if len(parts) < 3:
        return "expected 'ADDRESS TYPE NAME [module]', got fewer than 3 fields"
    if not re.fullmatch(r"[0-9a-fA-F]{1,16}", parts[0]):
        return f"address {parts[0]!r} is not 1-16 hex digits"
    if len(parts[1]) != 1:
        return f"type {parts[1]!r} is not a single letter"
    return "expected 'ADDRESS TYPE NAME' and an optional '[module]'"


def _nm_letter(sym, sections, SH_FLAGS) -> str | None:
    """nm's type letter for an ELF symbol, None for those kallsyms never lists."""
    st_type, bind = sym["st_info"]["type"], sym["st_info"]["bind"]
    shndx = sym["st_shndx"]
    if st_type in ("STT_FILE", "STT_SECTION") or shndx == "SHN_UNDEF":
        return None
    if bind == "STB_WEAK":
        return "W" if st_type != "STT_OBJECT" else "V"
    if shndx == "SHN_ABS":
        letter = "a"
    elif shndx == "SHN_COMMON":
        letter = "c"
    elif isinstance(shndx, int) and shndx < len(sections):
        flags, sh_type = sections[shndx]
        if flags & SH_FLAGS.SHF_EXECINSTR:
            letter = "t"
        elif not flags & SH_FLAGS.SHF_ALLOC:
            letter = "n"
        elif sh_type == "SHT_NOBITS":
            letter = "b"
        elif flags & SH_FLAGS.SHF_WRITE:
            letter = "d"
        else:
            letter = "r"
    else:
        letter = "?"
    return letter.upper() if bind == "STB_GLOBAL" else letter
