"""Reading the members of a Unix ``ar`` archive (static libraries, ``.a``).

Why our own: Python's standard library has no ``ar`` reader, and pyelftools (which reads the
ELF members) has none either; the format is small and fixed.  The layout, as GNU ar writes it
and ``bfd/archive.c`` reads it (also described in FreeBSD's ``ar(5)``):

* an 8-byte magic, ``!<arch>\\n`` (``!<thin>\\n`` for a thin archive, whose members are files
  named relative to the archive's directory, not copies);
* then for each member a 60-byte header -- ``ar_name[16] ar_date[12] ar_uid[6] ar_gid[6]
  ar_mode[8] ar_size[10] ar_fmag[2]`` (ASCII, space padded; ``ar_fmag`` is "`\\n") -- and
  ``ar_size`` bytes of data, padded to an even offset with ``\\n``;
* names: ``name/`` (SysV/GNU, ended by a slash), ``/N`` (offset N into the long-name table,
  itself the member named ``//``, entries ended by ``/\\n``), ``#1/N`` (BSD: the name is the
  first N bytes of the data); ``/`` and ``/SYM64/`` are the symbol index, ``__.SYMDEF`` the BSD
  one -- none of the last three is a member.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from .errors import SFrameError

AR_MAGIC = b"!<arch>\n"
AR_THIN_MAGIC = b"!<thin>\n"
HEADER_SIZE = 60
FMAG = b"`\n"
_INDEX_NAMES = ("/", "/SYM64/", "__.SYMDEF", "__.SYMDEF SORTED")


@dataclass(frozen=True)
class Member:
    name: str
    offset: int  # of the member's header in the archive
    data: bytes


def is_archive(head: bytes) -> bool:
    return head[:8] in (AR_MAGIC, AR_THIN_MAGIC)


def _error(path, msg: str, offset: int | None = None) -> SFrameError:
    return SFrameError(f"{path}: {msg}", field="archive", offset=offset)


def iter_members(path: str | os.PathLike, data: bytes | None = None) -> Iterator[Member]:
    """Every member of the archive at ``path`` (``data``: its bytes, if already read), in order.

    Raises :class:`SFrameError` (field "archive") on a malformed header, a size past the end, a
    long name not in the table, or a thin member's file that cannot be read."""
    path = Path(path)
    if data is None:
        data = path.read_bytes()
    thin = data[:8] == AR_THIN_MAGIC
    if data[:8] not in (AR_MAGIC, AR_THIN_MAGIC):
        raise _error(path, "not an ar archive (no !<arch> magic)", 0)
    longnames = b""
    pos = 8
    n = len(data)
    while pos < n:
        if pos + HEADER_SIZE > n:
            if data[pos:].strip(b"\n") == b"":
                break  # trailing padding
            raise _error(path, f"member header at {pos:#x} runs past the end ({n:#x})", pos)
        hdr = data[pos:pos + HEADER_SIZE]
        if hdr[58:60] != FMAG:
            raise _error(path, f"member header at {pos:#x} lacks its `\\n terminator", pos + 58)
        raw_name = hdr[0:16].decode("latin-1").rstrip(" ")
        # decimal digits, space padded: bfd refuses a blank field too; a sign would let a size of
        # -60 or less keep the reader on one header forever, or walk it backwards
        digits = hdr[48:58].decode("latin-1").strip(" ")
        if not (digits.isascii() and digits.isdigit()):
            raise _error(path, f"member header at {pos:#x}: size {hdr[48:58]!r} is not a number", pos + 48)
        size = int(digits)
        body = pos + HEADER_SIZE
        is_index = raw_name in _INDEX_NAMES
        is_longnames = raw_name == "//"
        in_archive = not thin or is_index or is_longnames  # a thin member's data is elsewhere
        if in_archive and body + size > n:
            raise _error(path, f"member at {pos:#x} of {size} bytes runs past the end ({n:#x})", pos + 48)
        content = data[body:body + size] if in_archive else b""
        nxt = body + (size if in_archive else 0)
        nxt += nxt & 1
        if is_longnames:
            longnames = content
        elif not is_index:
            name, content = _name(path, raw_name, content, longnames, pos, thin)
            if raw_name.startswith("#1/") and name in _INDEX_NAMES:  # llvm-ar's BSD index, named in its data
                pos = nxt
                continue
            if thin:
                member_path = path.parent / name
                try:
                    content = member_path.read_bytes()
                except OSError as exc:
                    raise _error(path, f"thin member {name}: {exc.strerror or exc}", pos) from exc
            yield Member(name, pos, content)
        pos = nxt


def _name(path, raw: str, content: bytes, longnames: bytes, pos: int, thin: bool) -> tuple[str, bytes]:
    if raw.startswith("#1/"):  # BSD: the name leads the data
        k = raw[3:]
        if thin:  # its name would be in data a thin archive does not hold (llvm-ar: no thin BSD form)
            raise _error(path, f"member at {pos:#x}: BSD name {raw!r} in a thin archive", pos)
        if not (k.isascii() and k.isdigit()) or int(k) > len(content):
            raise _error(path, f"member at {pos:#x}: bad BSD name {raw!r}", pos)
        k = int(k)
        return content[:k].rstrip(b"\0").decode("utf-8", "replace"), content[k:]
    if raw.startswith("/") and raw[1:].isascii() and raw[1:].isdigit():  # not "/²": latin-1 has digits int() refuses
        off = int(raw[1:])
        if off >= len(longnames):
            raise _error(path, f"member at {pos:#x}: long name offset {off} is past the name table "
                               f"({len(longnames)} bytes)", pos)
        end = longnames.find(b"\n", off)
        name = longnames[off:end if end >= 0 else len(longnames)].decode("utf-8", "replace")
        return name.removesuffix("/"), content
    return raw.removesuffix("/"), content
