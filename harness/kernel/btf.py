"""A small reader for BPF Type Format (BTF), the type information in a vmlinux's ``.BTF`` section.

Why our own: pyelftools does not parse BTF and the other Python readers need libbpf or drgn.  The
format is small; its reference is ``Documentation/bpf/btf.rst`` (section numbers below) and
``include/uapi/linux/btf.h`` in the kernel tree.

The reader is lazy.  Construction checks the header and walks the type section once to record where
each type record starts (about 50 ms for the ~121k types of a 7.x vmlinux); names are indexed on the
first lookup by name and members, enumerators, parameters and section entries are decoded when asked
for.  Every read of the blob is bounds-checked, so bad bytes raise :class:`BtfError` (a
``ValueError``) naming the field and its byte offset in the blob, never ``IndexError`` or
``struct.error``.  Asking for something that is not there raises :class:`BtfLookupError` (a
``KeyError``).  Pure: bytes in, answers out (pyelftools only to pull the section out of an ELF file).

    btf = Btf.from_elf(vmlinux)
    btf.sizeof("task_struct")                  # struct by bare name
    btf.member_offset("task_struct", "thread.sp")
    btf.member_offset("pt_regs", "cs")         # found inside pt_regs' anonymous union
    btf.enum_value("pid_type", "PIDTYPE_TGID")
    btf.var_datasec_offset("current_task")     # offset in DATASEC .data..percpu
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from dataclasses import dataclass
from enum import IntEnum
from pathlib import Path

from elftools.common.exceptions import ELFError
from elftools.elf.elffile import ELFFile

from ..errors import EXIT_USAGE, HarnessError

__all__ = [
    "Btf",
    "BtfError",
    "BtfLookupError",
    "BtfAmbiguityError",
    "Kind",
    "Type",
    "Member",
    "Param",
    "VarSecinfo",
]


class BtfError(HarnessError, ValueError):
    """The BTF bytes are malformed (or a type has no such property, e.g. the size of a function)."""

    exit_code = EXIT_USAGE  # bad input


class BtfLookupError(HarnessError, KeyError):
    """A type, member, enumerator or variable asked for is not in this BTF."""

    def __str__(self) -> str:  # KeyError would repr() the message
        return str(self.args[0]) if self.args else ""


class BtfAmbiguityError(BtfLookupError):
    """A name matches several types of the kind asked for: use :meth:`Btf.find_all`."""


# --- Binary layouts (include/uapi/linux/btf.h), without the byte-order prefix --------------------
# Each is turned into a struct.Struct for the blob's byte order (from the magic) in _Layouts.

# btf.rst 2. "BTF Type and String Encoding": struct btf_header
#   u16 magic (0xeB9F), u8 version, u8 flags, u32 hdr_len,
#   u32 type_off, type_len, str_off, str_len (offsets relative to the end of the header)
_HEADER = "HBBIIIII"
_HEADER_FIELDS = ("magic", "version", "flags", "hdr_len", "type_off", "type_len", "str_off", "str_len")
# btf.rst 2.2 "Type Encoding": struct btf_type { u32 name_off; u32 info; u32 size_or_type; }
#   info: bits 0-15 vlen, bits 24-28 kind, bit 31 kind_flag
_TYPE = "III"
# btf.rst 2.2.1 BTF_KIND_INT: one u32 after btf_type: encoding (bits 24-27), offset (16-23), bits (0-7)
_INT = "I"
# btf.rst 2.2.3 BTF_KIND_ARRAY: struct btf_array { u32 type; u32 index_type; u32 nelems; }
_ARRAY = "III"
# btf.rst 2.2.4/2.2.5 BTF_KIND_STRUCT/UNION: vlen x struct btf_member { u32 name_off; u32 type;
#   u32 offset; }; with kind_flag, offset = bitfield_size << 24 | bit_offset
_MEMBER = "III"
# btf.rst 2.2.6 BTF_KIND_ENUM: vlen x struct btf_enum { u32 name_off; s32 val; }
#   (kind_flag 1: signed values, 0: unsigned; the raw 32 bits are the same)
_ENUM = "II"
# btf.rst 2.2.13 BTF_KIND_FUNC_PROTO: vlen x struct btf_param { u32 name_off; u32 type; }
_PARAM = "II"
# btf.rst 2.2.14 BTF_KIND_VAR: struct btf_var { u32 linkage; }
_VAR = "I"
# btf.rst 2.2.15 BTF_KIND_DATASEC: vlen x struct btf_var_secinfo { u32 type; u32 offset; u32 size; }
_SECINFO = "III"
# btf.rst 2.2.17 BTF_KIND_DECL_TAG: struct btf_decl_tag { s32 component_idx; }
_DECL_TAG = "i"
# btf.rst 2.2.19 BTF_KIND_ENUM64: vlen x struct btf_enum64 { u32 name_off; u32 val_lo32; u32 val_hi32; }
_ENUM64 = "III"

BTF_MAGIC = 0xEB9F
BTF_VERSION = 1


class Kind(IntEnum):
    """BTF_KIND_* (btf.rst 2.2)."""

    UNKN = 0
    INT = 1
    PTR = 2
    ARRAY = 3
    STRUCT = 4
    UNION = 5
    ENUM = 6
    FWD = 7
    TYPEDEF = 8
    VOLATILE = 9
    CONST = 10
    RESTRICT = 11
    FUNC = 12
    FUNC_PROTO = 13
    VAR = 14
    DATASEC = 15
    FLOAT = 16
    DECL_TAG = 17
    TYPE_TAG = 18
    ENUM64 = 19


# What follows each btf_type record: (fixed layout or None, per-vlen layout or None).
_TRAILER: dict[Kind, tuple[str | None, str | None]] = {
    Kind.INT: (_INT, None),
    Kind.PTR: (None, None),
    Kind.ARRAY: (_ARRAY, None),
    Kind.STRUCT: (None, _MEMBER),
    Kind.UNION: (None, _MEMBER),
    Kind.ENUM: (None, _ENUM),
    Kind.FWD: (None, None),
    Kind.TYPEDEF: (None, None),
    Kind.VOLATILE: (None, None),
    Kind.CONST: (None, None),
    Kind.RESTRICT: (None, None),
    Kind.FUNC: (None, None),
    Kind.FUNC_PROTO: (None, _PARAM),
    Kind.VAR: (_VAR, None),
    Kind.DATASEC: (None, _SECINFO),
    Kind.FLOAT: (None, None),
    Kind.DECL_TAG: (_DECL_TAG, None),
    Kind.TYPE_TAG: (None, None),
    Kind.ENUM64: (None, _ENUM64),
}

# Kinds whose third word is a size; the others (but FWD/ARRAY) carry a type id there.
_SIZED = frozenset({Kind.INT, Kind.ENUM, Kind.ENUM64, Kind.STRUCT, Kind.UNION, Kind.FLOAT, Kind.DATASEC})
_MODIFIERS = frozenset({Kind.TYPEDEF, Kind.CONST, Kind.VOLATILE, Kind.RESTRICT, Kind.TYPE_TAG})
_COMPOSITE = frozenset({Kind.STRUCT, Kind.UNION})
_KIND_NAMES = {k.name.lower(): k for k in Kind}
# A bare name given to sizeof()/members(): the kinds tried, in this order.
_BARE_NAME_KINDS = (Kind.STRUCT, Kind.UNION, Kind.TYPEDEF, Kind.INT, Kind.ENUM, Kind.ENUM64, Kind.FLOAT)
_MAX_CHAIN = 64  # modifier/array chains longer than this are a reference cycle in bad bytes


class _Layouts:
    """The struct formats above for one byte order, and the record sizes the index walk needs."""

    def __init__(self, order: str):
        self.order = order
        self.header = struct.Struct(order + _HEADER)
        self.type = struct.Struct(order + _TYPE)
        self.u32 = struct.Struct(order + "I")
        self.trailer = {
            k: (None if f is None else struct.Struct(order + f), None if v is None else struct.Struct(order + v))
            for k, (f, v) in _TRAILER.items()
        }
        # Indexed by raw kind number (0..31): bytes after btf_type, fixed and per vlen; None = unknown.
        self.fixed_size: list[int | None] = [None] * 32
        self.vlen_size: list[int | None] = [None] * 32
        for k, (f, v) in self.trailer.items():
            self.fixed_size[k] = f.size if f else 0
            self.vlen_size[k] = v.size if v else 0


_LE = _Layouts("<")
_BE = _Layouts(">")


@dataclass(frozen=True, slots=True)
class Type:
    """One btf_type record: ``size`` for sized kinds, ``ref`` (a type id) for referring kinds."""

    id: int
    kind: Kind
    name: str  # "" when anonymous
    kind_flag: bool
    vlen: int
    size: int | None
    ref: int | None
    offset: int  # byte offset of the record in the blob

    def __str__(self) -> str:
        return f"[{self.id}] {self.kind.name} {self.name or '(anon)'}"


@dataclass(frozen=True, slots=True)
class Member:
    """A struct/union member.  ``bit_offset`` is from the start of the struct that was asked about
    (for members found through :meth:`Btf.member`, the outermost one)."""

    name: str  # "" for an anonymous struct/union member
    type_id: int
    bit_offset: int
    bitfield_size: int  # 0 unless a bitfield

    @property
    def offset(self) -> int:
        """Byte offset; raises BtfError for a bitfield that does not start on a byte."""
        if self.bit_offset % 8:
            raise BtfError(f"member {self.name!r} is a bitfield at bit {self.bit_offset}, not on a byte boundary")
        return self.bit_offset // 8


@dataclass(frozen=True, slots=True)
class Param:
    name: str
    type_id: int  # 0 with an empty name: the "..." of a variadic function


@dataclass(frozen=True, slots=True)
class VarSecinfo:
    """A DATASEC entry: variable ``name`` (type id ``var_id`` of kind VAR) at ``offset`` in the section."""

    name: str
    var_id: int
    offset: int
    size: int


TypeRef = int | str | Type


class Btf:
    """The types of one BTF blob (base BTF only: split module BTF is not supported)."""

    def __init__(self, data: bytes):
        self._data = data = bytes(data)
        if len(data) < 8:
            raise BtfError(f"BTF truncated: {len(data)} bytes, the header needs at least 8 (magic..hdr_len) at byte 0")
        if struct.unpack_from("<H", data)[0] == BTF_MAGIC:
            lay = _LE
        elif struct.unpack_from(">H", data)[0] == BTF_MAGIC:
            lay = _BE
        else:
            raise BtfError(f"bad BTF magic 0x{struct.unpack_from('<H', data)[0]:04x} at byte 0 (want 0xeb9f)")
        self._lay = lay
        self.byte_order = "little" if lay is _LE else "big"
        if len(data) < lay.header.size:
            raise BtfError(f"BTF header truncated: {len(data)} bytes, struct btf_header needs {lay.header.size}")
        hdr = dict(zip(_HEADER_FIELDS, lay.header.unpack_from(data), strict=True))
        self.header = hdr
        if hdr["version"] != BTF_VERSION:
            raise BtfError(f"unsupported BTF version {hdr['version']} at byte 2 (want {BTF_VERSION})")
        hdr_len = hdr["hdr_len"]
        if hdr_len < lay.header.size:
            raise BtfError(f"BTF hdr_len {hdr_len} at byte 4 is shorter than struct btf_header ({lay.header.size})")
        if hdr_len > len(data):
            raise BtfError(f"BTF hdr_len {hdr_len} at byte 4 is past the end of the {len(data)}-byte blob")
        for field, pos in (("type", 8), ("str", 16)):
            start, length = hdr_len + hdr[f"{field}_off"], hdr[f"{field}_len"]
            if start + length > len(data):
                raise BtfError(
                    f"BTF {field}_off/{field}_len at bytes {pos}/{pos + 4}: section [{start}, {start + length}) "
                    f"runs past the end of the {len(data)}-byte blob (truncated?)"
                )
        self._str_start = hdr_len + hdr["str_off"]
        self._str_end = self._str_start + hdr["str_len"]
        if hdr["str_len"] == 0 or data[self._str_start] != 0 or data[self._str_end - 1] != 0:
            raise BtfError(
                f"BTF string section at byte {self._str_start} (str_len {hdr['str_len']}) must start with the "
                "empty string and end with a NUL"
            )
        self._type_start = hdr_len + hdr["type_off"]
        self._type_end = self._type_start + hdr["type_len"]
        self._offs = self._index_types()
        self._names: dict[str, list[int]] | None = None
        self._members: dict[int, tuple[Member, ...]] = {}
        self._ptr_size: int | None = None

    @classmethod
    def from_elf(cls, path: str | Path) -> Btf:
        """The ``.BTF`` section of an ELF file (a vmlinux)."""
        try:
            with open(path, "rb") as f:
                section = ELFFile(f).get_section_by_name(".BTF")
                if section is None:
                    raise BtfError(f"{path}: no .BTF section (kernel built without CONFIG_DEBUG_INFO_BTF?)")
                data = section.data()
        except ELFError as e:
            raise BtfError(f"{path}: not a readable ELF file: {e}") from e
        return cls(data)

    # --- index --------------------------------------------------------------------------------------

    def _index_types(self) -> list[int]:
        """Byte offset of every type record, by type id (id 0, void, has none: -1)."""
        data, lay = self._data, self._lay
        unpack = lay.type.unpack_from
        fixed, per = lay.fixed_size, lay.vlen_size
        rec = lay.type.size
        off, end = self._type_start, self._type_end
        offs = [-1]
        append = offs.append
        while off < end:
            if off + rec > end:
                raise BtfError(f"type [{len(offs)}] at byte {off}: btf_type record truncated by the end of the type "
                               f"section at {end}")
            info = unpack(data, off)[1]
            kind = (info >> 24) & 0x1F
            fx = fixed[kind]
            if fx is None:
                raise BtfError(f"type [{len(offs)}] at byte {off}: unknown kind {kind} in info 0x{info:08x}")
            append(off)
            off += rec + fx + per[kind] * (info & 0xFFFF)
        if off != end:
            raise BtfError(
                f"type [{len(offs) - 1}] at byte {offs[-1]}: its data runs {off - end} bytes past the end of the type "
                f"section at {end}"
            )
        return offs

    def __len__(self) -> int:
        """Number of type ids, counting void (id 0)."""
        return len(self._offs)

    def __repr__(self) -> str:
        return f"<Btf {len(self._offs) - 1} types, {self.byte_order}-endian>"

    def _str(self, name_off: int, where: str) -> str:
        start = self._str_start + name_off
        if name_off < 0 or start >= self._str_end:
            raise BtfError(f"{where}: name_off {name_off} is past the end of the "
                           f"{self._str_end - self._str_start}-byte string section")
        end = self._data.index(b"\0", start, self._str_end)  # found: the section ends with NUL (checked)
        return self._data[start:end].decode("utf-8", "replace")

    def _check_id(self, type_id: int) -> int:
        if not isinstance(type_id, int) or isinstance(type_id, bool):
            raise TypeError(f"type id must be an int, not {type(type_id).__name__}")
        if not 0 <= type_id < len(self._offs):
            raise BtfLookupError(f"no BTF type id {type_id} (ids are 0..{len(self._offs) - 1})")
        return type_id

    def _ref(self, type_id: int, where: str) -> int:
        """A type id read from the blob: out of range is bad bytes, not a bad question."""
        if not 0 <= type_id < len(self._offs):
            raise BtfError(f"{where}: refers to type id {type_id}, past the last type {len(self._offs) - 1}")
        return type_id

    def type(self, type_id: int) -> Type:
        """The record of ``type_id`` (0 is void: kind UNKN, no name)."""
        self._check_id(type_id)
        if type_id == 0:
            return Type(0, Kind.UNKN, "void", False, 0, None, None, -1)
        off = self._offs[type_id]
        name_off, info, sot = self._lay.type.unpack_from(self._data, off)
        kind = Kind((info >> 24) & 0x1F)  # known: checked by the index walk
        name = self._str(name_off, f"type [{type_id}] name_off at byte {off}") if name_off else ""
        size = sot if kind in _SIZED else None
        ref = None if kind in _SIZED or kind in (Kind.FWD, Kind.ARRAY) else sot
        return Type(type_id, kind, name, bool(info >> 31), info & 0xFFFF, size, ref, off)

    def types(self) -> Iterator[Type]:
        """All types, id 1 upwards."""
        for i in range(1, len(self._offs)):
            yield self.type(i)

    def _trailer(self, t: Type) -> tuple[int, int]:
        """Byte offsets of the fixed trailer and of the first vlen record after ``t``'s btf_type."""
        start = t.offset + self._lay.type.size
        fixed = self._lay.fixed_size[t.kind] or 0
        return start, start + fixed

    # --- names --------------------------------------------------------------------------------------

    def _name_index(self) -> dict[str, list[int]]:
        if self._names is None:
            data, unpack = self._data, self._lay.type.unpack_from
            s0, s1 = self._str_start, self._str_end
            by_off: dict[int, list[int]] = {}
            for tid in range(1, len(self._offs)):
                name_off = unpack(data, self._offs[tid])[0]
                if name_off:
                    by_off.setdefault(name_off, []).append(tid)
            names: dict[str, list[int]] = {}
            for name_off, ids in by_off.items():
                if s0 + name_off >= s1:
                    raise BtfError(
                        f"type [{ids[0]}] name_off at byte {self._offs[ids[0]]}: {name_off} is past the end of "
                        f"the {s1 - s0}-byte string section"
                    )
                end = data.index(b"\0", s0 + name_off, s1)
                names.setdefault(data[s0 + name_off : end].decode("utf-8", "replace"), []).extend(ids)
            for ids in names.values():
                ids.sort()
            self._names = names
        return self._names

    @staticmethod
    def _kind(kind: Kind | str | None) -> Kind | None:
        if kind is None or isinstance(kind, Kind):
            return kind
        try:
            return _KIND_NAMES[kind.lower()]
        except (KeyError, AttributeError):
            raise ValueError(f"unknown BTF kind {kind!r}; known: {', '.join(_KIND_NAMES)}") from None

    def find_all(self, name: str, kind: Kind | str | None = None) -> list[Type]:
        """Every type called ``name`` (of ``kind`` if given), by id; possibly empty."""
        k = self._kind(kind)
        found = (self.type(i) for i in self._name_index().get(name, ()))
        return [t for t in found if k is None or t.kind == k]

    def find(self, name: str, kind: Kind | str | None = "struct") -> Type:
        """The one type called ``name`` of ``kind`` ("struct", "union", "enum", "typedef", "func", "var",
        ... or None for any).  Raises BtfLookupError if none, BtfAmbiguityError if several."""
        k = self._kind(kind)
        found = self.find_all(name, k)
        if len(found) == 1:
            return found[0]
        what = f"{k.name.lower()} {name!r}" if k is not None else repr(name)
        if not found:
            others = sorted({t.kind.name.lower() for t in self.find_all(name)})
            hint = f" (there is a {' and a '.join(others)} of that name)" if others else ""
            raise BtfLookupError(f"no BTF {what}{hint}")
        listed = ", ".join(f"[{t.id}] size={t.size}" if t.size is not None else f"[{t.id}]" for t in found)
        raise BtfAmbiguityError(f"BTF has {len(found)} types {what}: {listed}; use find_all() and pick by id")

    def _lookup(self, t: TypeRef) -> Type:
        """An id, a Type, or a C-ish name: "task_struct" (struct, union, typedef, int, enum or float of
        that name, in that order), "struct task_struct", "union thread_union", "enum pid_type"."""
        if isinstance(t, Type):
            return self.type(t.id)
        if isinstance(t, int) and not isinstance(t, bool):
            return self.type(t)
        if not isinstance(t, str):
            raise TypeError(f"a BTF type is an id, a Type or a name, not {type(t).__name__}")
        prefix, _, rest = t.partition(" ")
        if rest and prefix in ("struct", "union", "enum"):
            if prefix == "enum":
                found = self.find_all(rest, Kind.ENUM) + self.find_all(rest, Kind.ENUM64)
                if len(found) == 1:
                    return found[0]
                return self.find(rest, Kind.ENUM)  # raises the right error
            return self.find(rest, prefix)
        for k in _BARE_NAME_KINDS:
            found = self.find_all(t, k)
            if k == Kind.INT and len(found) > 1:
                # Old-style bitfields (btf.rst 2.2.4, no kind_flag) add narrow ints of the same name.
                found = [i for i in found if self.int_info(i)[1:] == (0, 8 * (i.size or 0))] or found
            if len(found) == 1:
                return found[0]
            if found:
                return self.find(t, k)  # raises BtfAmbiguityError
        return self.find(t, None if self._name_index().get(t) else "struct")

    # --- types --------------------------------------------------------------------------------------

    def resolve(self, t: TypeRef) -> int:
        """The id under ``t``'s typedef/const/volatile/restrict/type_tag layers."""
        tt = self._lookup(t)
        for _ in range(_MAX_CHAIN):
            if tt.kind not in _MODIFIERS:
                return tt.id
            tt = self.type(self._ref(tt.ref, f"{tt} at byte {tt.offset}"))
        raise BtfError(f"type [{self._lookup(t).id}]: typedef/qualifier chain longer than {_MAX_CHAIN} (a cycle?)")

    def resolved(self, t: TypeRef) -> Type:
        return self.type(self.resolve(t))

    def array_info(self, t: TypeRef) -> tuple[int, int, int]:
        """(element type id, index type id, nelems) of an ARRAY type."""
        tt = self._lookup(t)
        if tt.kind != Kind.ARRAY:
            raise BtfError(f"{tt} is not an array")
        start, _ = self._trailer(tt)
        elem, index, nelems = self._lay.trailer[Kind.ARRAY][0].unpack_from(self._data, start)
        where = f"{tt} btf_array at byte {start}"
        return self._ref(elem, where), self._ref(index, where), nelems

    def int_info(self, t: TypeRef) -> tuple[int, int, int]:
        """(encoding bits: 1 signed, 2 char, 4 bool; bit offset; nr bits) of an INT type."""
        tt = self._lookup(t)
        if tt.kind != Kind.INT:
            raise BtfError(f"{tt} is not an int")
        start, _ = self._trailer(tt)
        v = self._lay.trailer[Kind.INT][0].unpack_from(self._data, start)[0]
        return (v >> 24) & 0x0F, (v >> 16) & 0xFF, v & 0xFF

    def pointer_size(self) -> int:
        """BTF does not record it: the size of ``long`` (as libbpf guesses), else 8."""
        if self._ptr_size is None:
            self._ptr_size = 8
            for name in ("long int", "long unsigned int", "long", "unsigned long"):
                found = [t for t in self.find_all(name, Kind.INT) if t.size in (4, 8)]
                if found:
                    self._ptr_size = found[0].size
                    break
        return self._ptr_size

    def sizeof(self, t: TypeRef) -> int:
        """Size in bytes, as C's sizeof."""
        tt = self._lookup(t)
        nelems = 1
        for _ in range(_MAX_CHAIN):
            if tt.kind in _SIZED:
                return nelems * tt.size
            if tt.kind == Kind.PTR:
                return nelems * self.pointer_size()
            if tt.kind == Kind.ARRAY:
                elem, _, n = self.array_info(tt)
                nelems *= n
                tt = self.type(elem)
            elif tt.kind in _MODIFIERS or tt.kind == Kind.VAR:
                tt = self.type(self._ref(tt.ref, f"{tt} at byte {tt.offset}"))
            else:
                raise BtfError(f"{tt} has no size")
        raise BtfError(f"{self._lookup(t)}: type chain longer than {_MAX_CHAIN} (a cycle?)")

    def members(self, t: TypeRef) -> tuple[Member, ...]:
        """The direct members of a struct or union (typedefs and qualifiers resolved); anonymous
        struct/union members appear as one member with name ""."""
        tt = self.resolved(t)
        if tt.kind not in _COMPOSITE:
            raise BtfError(f"{tt} is not a struct or union")
        cached = self._members.get(tt.id)
        if cached is None:
            _, start = self._trailer(tt)
            layout = self._lay.trailer[tt.kind][1]
            out = []
            for i, (name_off, type_id, offset) in enumerate(
                layout.iter_unpack(self._data[start : start + layout.size * tt.vlen])
            ):
                where = f"{tt} member {i} at byte {start + i * layout.size}"
                name = self._str(name_off, where) if name_off else ""
                if tt.kind_flag:
                    bit_off, bf_size = offset & 0xFFFFFF, offset >> 24
                else:
                    # Without kind_flag a bitfield's width is its int type's BTF_INT_BITS (btf.rst 2.2.4).
                    bit_off, bf_size = offset, 0
                    base = self.type(self._ref(type_id, where))
                    if base.kind == Kind.INT:
                        _, int_off, bits = self.int_info(base)
                        if int_off or bits != 8 * base.size:
                            bit_off, bf_size = offset + int_off, bits
                out.append(Member(name, self._ref(type_id, where), bit_off, bf_size))
            cached = self._members[tt.id] = tuple(out)
        return cached

    def _find_member(self, tid: int, name: str, depth: int = 0) -> Member | None:
        """``name`` among the members of composite ``tid`` or, transparently, of its anonymous
        struct/union members; bit offset relative to ``tid``."""
        if depth > _MAX_CHAIN:
            raise BtfError(f"type [{tid}]: anonymous members nested deeper than {_MAX_CHAIN} (a cycle?)")
        for m in self.members(tid):
            if m.name == name:
                return m
        for m in self.members(tid):
            if not m.name:
                inner = self.resolved(m.type_id)
                if inner.kind in _COMPOSITE:
                    hit = self._find_member(inner.id, name, depth + 1)
                    if hit is not None:
                        return Member(hit.name, hit.type_id, m.bit_offset + hit.bit_offset, hit.bitfield_size)
        return None

    def member(self, t: TypeRef, path: str) -> Member:
        """The member at dotted ``path`` ("thread.sp"), looking through anonymous structs and unions;
        its bit offset is from the start of ``t``."""
        outer = self.resolved(t)
        cur, bit = outer, 0
        hit: Member | None = None
        done: list[str] = []
        for part in path.split("."):
            if hit is not None:
                cur = self.resolved(hit.type_id)
            if cur.kind not in _COMPOSITE:
                raise BtfLookupError(
                    f"{outer.kind.name.lower()} {outer.name or outer.id}: member {'.'.join(done)} is of type "
                    f"{cur}, not a struct or union, so it has no member {part!r}"
                )
            hit = self._find_member(cur.id, part) if part else None
            if hit is None:
                inside = f".{'.'.join(done)}" if done else ""
                raise BtfLookupError(
                    f"{outer.kind.name.lower()} {outer.name or outer.id}{inside} "
                    f"({cur.kind.name.lower()} {cur.name or '(anon)'} [{cur.id}]) has no member {part!r}"
                )
            bit += hit.bit_offset
            done.append(part)
        assert hit is not None
        return Member(hit.name, hit.type_id, bit, hit.bitfield_size)

    def member_offset(self, t: TypeRef, path: str) -> int:
        """Byte offset of the member at dotted ``path`` in ``t`` (BtfError for an unaligned bitfield)."""
        return self.member(t, path).offset

    def member_type(self, t: TypeRef, path: str) -> Type:
        """The member's declared type (not resolved: may be a typedef)."""
        return self.type(self.member(t, path).type_id)

    def member_size(self, t: TypeRef, path: str) -> int:
        """sizeof the member's type (for a bitfield, of its underlying integer type)."""
        return self.sizeof(self.member(t, path).type_id)

    # --- enums --------------------------------------------------------------------------------------

    def enum_values(self, t: TypeRef) -> dict[str, int]:
        """Enumerator name -> value of an ENUM or ENUM64 (kind_flag: signed)."""
        tt = self.resolved(self.find_enum(t) if isinstance(t, str) else t)
        if tt.kind not in (Kind.ENUM, Kind.ENUM64):
            raise BtfError(f"{tt} is not an enum")
        _, start = self._trailer(tt)
        layout = self._lay.trailer[tt.kind][1]
        out: dict[str, int] = {}
        for i, fields in enumerate(layout.iter_unpack(self._data[start : start + layout.size * tt.vlen])):
            name = self._str(fields[0], f"{tt} value {i} at byte {start + i * layout.size}")
            if tt.kind == Kind.ENUM:
                val, bits = fields[1], 32
            else:
                val, bits = fields[1] | fields[2] << 32, 64
            if tt.kind_flag and val >> (bits - 1):
                val -= 1 << bits
            out.setdefault(name, val)
        return out

    def find_enum(self, name: str) -> Type:
        """The ENUM or ENUM64 called ``name`` (or via a typedef of that name)."""
        name = name.removeprefix("enum ")
        found = self.find_all(name, Kind.ENUM) + self.find_all(name, Kind.ENUM64)
        if len(found) == 1:
            return found[0]
        if not found:
            typedefs = [t for t in self.find_all(name, Kind.TYPEDEF)
                        if self.resolved(t).kind in (Kind.ENUM, Kind.ENUM64)]
            if len(typedefs) == 1:
                return self.resolved(typedefs[0])
            raise BtfLookupError(f"no BTF enum {name!r}")
        raise BtfAmbiguityError(f"BTF has {len(found)} enums {name!r}: {', '.join(f'[{t.id}]' for t in found)}")

    def enum_value(self, enum: TypeRef | None, enumerator: str) -> int:
        """Value of ``enumerator`` in ``enum`` (a name, id or Type); ``enum=None`` searches every enum
        (for anonymous ones) and raises BtfAmbiguityError if it has different values in several."""
        if enum is not None:
            values = self.enum_values(enum)
            if enumerator not in values:
                what = enum if isinstance(enum, (str, int)) else enum.name
                raise BtfLookupError(f"enum {what!r} has no enumerator {enumerator!r}")
            return values[enumerator]
        seen: dict[int, list[int]] = {}
        for tid in range(1, len(self._offs)):
            off = self._offs[tid]
            kind = (self._lay.type.unpack_from(self._data, off)[1] >> 24) & 0x1F
            if kind in (Kind.ENUM, Kind.ENUM64):
                values = self.enum_values(tid)
                if enumerator in values:
                    seen.setdefault(values[enumerator], []).append(tid)
        if not seen:
            raise BtfLookupError(f"no BTF enum has an enumerator {enumerator!r}")
        if len(seen) > 1:
            raise BtfAmbiguityError(f"enumerator {enumerator!r} has different values in several enums: {seen}")
        return next(iter(seen))

    # --- functions, variables, sections -------------------------------------------------------------

    def params(self, t: TypeRef) -> tuple[Param, ...]:
        """Parameters of a FUNC_PROTO, or of a FUNC's prototype."""
        tt = self._lookup(t)
        if tt.kind == Kind.FUNC:
            tt = self.type(self._ref(tt.ref, f"{tt} at byte {tt.offset}"))
        if tt.kind != Kind.FUNC_PROTO:
            raise BtfError(f"{tt} is not a function or function prototype")
        _, start = self._trailer(tt)
        layout = self._lay.trailer[Kind.FUNC_PROTO][1]
        out = []
        for i, (name_off, type_id) in enumerate(layout.iter_unpack(self._data[start : start + layout.size * tt.vlen])):
            where = f"{tt} param {i} at byte {start + i * layout.size}"
            out.append(Param(self._str(name_off, where) if name_off else "", self._ref(type_id, where)))
        return tuple(out)

    def var_linkage(self, t: TypeRef) -> int:
        """btf_var.linkage of a VAR: 0 static, 1 global allocated, 2 extern."""
        tt = self._lookup(t)
        if tt.kind != Kind.VAR:
            raise BtfError(f"{tt} is not a variable")
        start, _ = self._trailer(tt)
        return self._lay.trailer[Kind.VAR][0].unpack_from(self._data, start)[0]

    def decl_tag_component(self, t: TypeRef) -> int:
        """btf_decl_tag.component_idx of a DECL_TAG: -1 for the whole type, else member/param index."""
        tt = self._lookup(t)
        if tt.kind != Kind.DECL_TAG:
            raise BtfError(f"{tt} is not a decl tag")
        start, _ = self._trailer(tt)
        return self._lay.trailer[Kind.DECL_TAG][0].unpack_from(self._data, start)[0]

    def datasec(self, name: str) -> tuple[VarSecinfo, ...]:
        """Entries of DATASEC ``name`` (".data..percpu")."""
        tt = self.find(name, Kind.DATASEC)
        _, start = self._trailer(tt)
        layout = self._lay.trailer[Kind.DATASEC][1]
        out = []
        entries = layout.iter_unpack(self._data[start : start + layout.size * tt.vlen])
        for i, (type_id, offset, size) in enumerate(entries):
            where = f"{tt} entry {i} at byte {start + i * layout.size}"
            var = self.type(self._ref(type_id, where))
            out.append(VarSecinfo(var.name, var.id, offset, size))
        return tuple(out)

    def var_datasec_offset(self, name: str, section: str = ".data..percpu") -> int:
        """Offset of variable ``name`` within DATASEC ``section``: for per-CPU variables, its offset
        in the per-CPU area (on x86-64 before 6.15 also its zero-based symbol value)."""
        try:
            entries = self.datasec(section)
        except BtfLookupError:
            raise BtfLookupError(f"BTF has no DATASEC {section!r} (so no variable {name!r} in it)") from None
        hits = [e for e in entries if e.name == name]
        if not hits:
            raise BtfLookupError(f"no variable {name!r} in BTF DATASEC {section!r} ({len(entries)} variables)")
        if len({e.offset for e in hits}) > 1:
            raise BtfAmbiguityError(f"variable {name!r} appears at several offsets in {section!r}: {hits}")
        return hits[0].offset
