"""``perf.data`` as ``perf record`` writes it: the file header, the attr section and the records.

A pure parser (bytes in, dataclasses out).  The layouts are those of tools/perf/util/header.h
and tools/perf/Documentation/perf.data-file-format.txt (Linux 7.3):

    struct perf_file_section { u64 offset; u64 size; };
    struct perf_file_header {
        u64 magic;                        "PERFILE2", little-endian
        u64 size;                         size of this header (104)
        u64 attr_size;                    size of one attrs entry (perf_file_attr)
        struct perf_file_section attrs;   array of perf_file_attr
        struct perf_file_section data;    the records
        struct perf_file_section event_types;   (unused)
        DECLARE_BITMAP(adds_features, HEADER_FEAT_BITS);   256 bits: feature sections after data
    };
    struct perf_file_attr { struct perf_event_attr attr; struct perf_file_section ids; };

The ``ids`` section of an attr holds the u64 sample ids of its event (one per CPU or thread).
The data section holds kernel records (types below 64, whose bodies :mod:`.records` parses:
samples, ``PERF_RECORD_CALLCHAIN_DEFERRED``, lost, fork/exit) and perf's own synthesized ones
(``PERF_RECORD_USER_TYPE_START`` = 64 and up: ``FINISHED_ROUND``, ``ID_INDEX``, ``TIME_CONV``, ...,
which carry no ``sample_id`` trailer and are kept as :class:`~.records.Other` by type only).
Compressed data (``PERF_RECORD_COMPRESSED``, ``perf record -z``) and pipe-mode files are refused.

With several attrs (events) the samples must carry ``PERF_SAMPLE_IDENTIFIER`` (perf sets it then),
whose first u64 names the event; records are parsed with their own event's attr.

Records are returned in time order (stable: perf writes each ring's records in order, several
rings in rounds), as perf's own ``ordered_events`` delivers them to ``perf script``.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from .records import (
    HEADER,
    PERF_SAMPLE_IDENTIFIER,
    Attr,
    Other,
    PerfFormatError,
    Record,
    SampleId,
    parse_record,
)

__all__ = ["EventAttr", "PerfData", "parse_perf_data", "PERFILE2"]

PERFILE2 = b"PERFILE2"
PERF_RECORD_USER_TYPE_START = 64
PERF_RECORD_FINISHED_ROUND = 68
PERF_RECORD_COMPRESSED = 81
PERF_RECORD_COMPRESSED2 = 83
USER_TYPE_NAMES = {64: "HEADER_ATTR", 65: "HEADER_EVENT_TYPE", 66: "HEADER_TRACING_DATA", 67: "HEADER_BUILD_ID",
                   68: "FINISHED_ROUND", 69: "ID_INDEX", 70: "AUXTRACE_INFO", 71: "AUXTRACE",
                   72: "AUXTRACE_ERROR", 73: "THREAD_MAP", 74: "CPU_MAP", 75: "STAT_CONFIG", 76: "STAT",
                   77: "STAT_ROUND", 78: "EVENT_UPDATE", 79: "TIME_CONV", 80: "HEADER_FEATURE",
                   81: "COMPRESSED", 82: "FINISHED_INIT", 83: "COMPRESSED2"}

# struct perf_file_header, up to the features bitmap (u64 x 256 / 64 = 4 words)
FILE_HEADER = struct.Struct("<8sQQQQQQQQ4Q")
SECTION = struct.Struct("<QQ")


@dataclass(frozen=True)
class EventAttr:
    attr: Attr
    ids: tuple[int, ...]
    raw: bytes  # the attr's bytes as stored (attr.size of them)


@dataclass
class PerfData:
    header_size: int
    attrs: list[EventAttr]
    data_offset: int
    data_size: int
    features: int  # the adds_features bitmap (HEADER_FEAT_* bits)
    records: list[Record]  # kernel and user records, time-ordered
    by_id: dict[int, Attr]

    @property
    def attr(self) -> Attr:
        """The first event's attr (perf record -e EVENT: the only one)."""
        return self.attrs[0].attr

    def kernel_records(self) -> list[Record]:
        """The records the kernel wrote (types below 64)."""
        return [r for r in self.records if not (isinstance(r, Other) and r.type >= PERF_RECORD_USER_TYPE_START)]


def _section(data: bytes, at: int, name: str) -> tuple[int, int]:
    off, size = SECTION.unpack_from(data, at)
    if off + size > len(data):
        raise PerfFormatError(f"section [{off:#x}, +{size:#x}) runs past the end of the file ({len(data):#x})",
                              field=f"header.{name}", offset=at)
    return off, size


def parse_perf_data(data: bytes) -> PerfData:
    """Parse a whole perf.data file (``perf record -o FILE``, not pipe mode)."""
    if len(data) < 8 or data[:8] != PERFILE2:
        pipe = data[:8] == PERFILE2 and len(data) < FILE_HEADER.size
        what = "pipe-mode output (perf record -o -)" if pipe else repr(bytes(data[:8]))
        raise PerfFormatError(f"magic {what}, not {PERFILE2!r} (a perf.data file of perf 3.x or later)",
                              field="header.magic", offset=0)
    if len(data) < FILE_HEADER.size:
        raise PerfFormatError(f"{len(data)} bytes, the file header needs {FILE_HEADER.size}", field="header",
                              offset=0)
    fields = FILE_HEADER.unpack_from(data, 0)
    _magic, hsize, attr_size = fields[:3]
    if hsize != FILE_HEADER.size:
        raise PerfFormatError(f"header size {hsize}, expected {FILE_HEADER.size} (pipe mode has 16)",
                              field="header.size", offset=8)
    attrs_off, attrs_size = _section(data, 24, "attrs")
    data_off, data_size = _section(data, 40, "data")
    features = sum(w << (64 * i) for i, w in enumerate(fields[9:13]))
    if attr_size <= SECTION.size or attrs_size % attr_size:
        raise PerfFormatError(f"attrs section of {attrs_size} bytes is no multiple of attr_size {attr_size}",
                              field="header.attr_size", offset=16)
    attrs: list[EventAttr] = []
    by_id: dict[int, Attr] = {}
    for k in range(attrs_size // attr_size):
        at = attrs_off + k * attr_size
        asize = attr_size - SECTION.size
        raw = bytes(data[at:at + asize])
        declared = struct.unpack_from("<I", raw, 4)[0]
        if declared > asize:
            raise PerfFormatError(f"attr.size {declared} exceeds the {asize} bytes of an entry",
                                  field=f"attrs[{k}].size", offset=at + 4)
        attr = Attr.parse(raw[:declared], at)
        ids_off, ids_size = _section(data, at + asize, f"attrs[{k}].ids")
        ids = struct.unpack_from(f"<{ids_size // 8}Q", data, ids_off)
        attrs.append(EventAttr(attr, ids, raw[:declared]))
        by_id.update({i: attr for i in ids})
    if not attrs:
        raise PerfFormatError("no event attributes", field="header.attrs", offset=24)
    if len(attrs) > 1 and not all(a.attr.sample_type & PERF_SAMPLE_IDENTIFIER for a in attrs):
        raise PerfFormatError(f"{len(attrs)} events without PERF_SAMPLE_IDENTIFIER: records cannot be told apart",
                              field="attrs.sample_type", offset=attrs_off)
    records = _records(data, data_off, data_size, attrs, by_id)
    order = sorted(range(len(records)), key=lambda i: (_time(records[i]), i))
    return PerfData(hsize, attrs, data_off, data_size, features, [records[i] for i in order], by_id)


def _time(rec: Record) -> int:
    t = getattr(rec, "time", None)
    if t is None and isinstance(getattr(rec, "sample_id", None), SampleId):
        t = rec.sample_id.time
    return t or 0


def _records(data: bytes, start: int, size: int, attrs: list[EventAttr], by_id: dict[int, Attr]) -> list[Record]:
    out: list[Record] = []
    pos, end = start, start + size
    view = memoryview(data)[:end]
    single = attrs[0].attr if len(attrs) == 1 else None
    while pos < end:
        if pos + HEADER.size > end:
            raise PerfFormatError(f"{end - pos} bytes left, a header needs {HEADER.size}", field="header",
                                  offset=pos)
        type_, misc, rsize = HEADER.unpack_from(data, pos)
        if rsize < HEADER.size or pos + rsize > end:
            raise PerfFormatError(f"record of {rsize} bytes (type {type_}) does not fit the data section",
                                  field="header.size", offset=pos + 6)
        if type_ in (PERF_RECORD_COMPRESSED, PERF_RECORD_COMPRESSED2):
            raise PerfFormatError("compressed records (perf record -z) are not supported: record without -z",
                                  field="header.type", offset=pos)
        if type_ >= PERF_RECORD_USER_TYPE_START:
            out.append(Other(pos, type_, misc, rsize, SampleId()))
            pos += rsize
            continue
        attr = single or _attr_of(data, pos, rsize, type_, by_id, attrs)
        rec, nxt = parse_record(view, pos, attr)
        out.append(rec)
        pos = nxt
    return out


def _attr_of(data: bytes, pos: int, size: int, type_: int, by_id: dict[int, Attr], attrs) -> Attr:
    """The attr of a record when there are several events: PERF_SAMPLE_IDENTIFIER is the first
    u64 of a sample's body and the last u64 of every other record's sample_id trailer."""
    at = pos + HEADER.size if type_ == 9 else pos + size - 8
    if at + 8 > pos + size or at < pos + HEADER.size:
        raise PerfFormatError(f"record of type {type_} too short for its identifier", field="header.size",
                              offset=pos + 6)
    ident = struct.unpack_from("<Q", data, at)[0]
    if ident not in by_id:
        raise PerfFormatError(f"sample id {ident} belongs to no event of the attrs section",
                              field="sample.identifier", offset=at)
    return by_id[ident]
