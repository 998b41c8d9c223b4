"""Core-like snapshots of a stopped task, so tests replay real stacks without the task.

A snapshot is a directory::

    snapshot.json   {"format": "unwind-harness-snapshot", "version": 1, "name": ...,
                     "regs": {pt_regs field: int}, "maps": "/proc/PID/maps text",
                     "regions": [{"addr": int, "size": int, "file": "stack.bin", "what": "stack"}],
                     "files": {guest path: host path}, "meta": {...}}
    *.bin           raw bytes of each region (the stack from sp's page to the end of [stack],
                    the vDSO, ...)

:meth:`Snapshot.memory` serves the captured regions and, for read-only file mappings (code,
rodata, .eh_frame), the bytes of the mapped file at the mapping's offset: enough to read the
instruction at IP without capturing text pages.  :meth:`Snapshot.address_space` maps guest
paths to host files through ``files``.
"""

from __future__ import annotations

import bisect
import json
import os
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import EXIT_USAGE, HarnessError
from ..memory import BufferMemory, MemoryFault
from ..regs import UserRegs
from .maps import AddressSpace, Mapping, parse_maps

FORMAT = "unwind-harness-snapshot"
VERSION = 1


class SnapshotError(HarnessError, ValueError):
    """A snapshot directory is missing, of another format, or inconsistent; names the path."""

    exit_code = EXIT_USAGE  # bad input


@dataclass
class Region:
    addr: int
    data: bytes
    what: str = ""


@dataclass
class Snapshot:
    name: str
    regs: UserRegs
    maps_text: str
    regions: list[Region] = field(default_factory=list)
    files: dict[str, str] = field(default_factory=dict)
    meta: dict = field(default_factory=dict)

    @property
    def mappings(self) -> list[Mapping]:
        return parse_maps(self.maps_text)

    def region(self, what: str) -> Region | None:
        return next((r for r in self.regions if r.what == what), None)

    def memory(self, file_backed: bool = True) -> SnapshotMemory:
        return SnapshotMemory(self, file_backed)

    def address_space(self) -> AddressSpace:
        files = self.files
        return AddressSpace(self.mappings, lambda path: files.get(path), self.memory())

    # --- storage -----------------------------------------------------------------------
    def save(self, directory: str | os.PathLike) -> Path:
        d = Path(directory)
        d.mkdir(parents=True, exist_ok=True)
        regions = []
        for i, r in enumerate(self.regions):
            fname = f"{r.what or 'region'}-{i}.bin"
            (d / fname).write_bytes(r.data)
            regions.append({"addr": r.addr, "size": len(r.data), "file": fname, "what": r.what})
        doc = {"format": FORMAT, "version": VERSION, "name": self.name, "regs": self.regs.as_dict(),
               "maps": self.maps_text, "regions": regions, "files": self.files, "meta": self.meta}
        (d / "snapshot.json").write_text(json.dumps(doc, indent=1, sort_keys=True))
        return d

    @classmethod
    def load(cls, directory: str | os.PathLike) -> Snapshot:
        d = Path(directory)
        try:
            doc = json.loads((d / "snapshot.json").read_text())
        except (OSError, ValueError) as exc:
            raise SnapshotError(f"{d}: no readable snapshot.json ({exc})") from exc
        if doc.get("format") != FORMAT or doc.get("version") != VERSION:
            raise SnapshotError(f"{d}: format {doc.get('format')!r} v{doc.get('version')}, "
                                f"expected {FORMAT} v{VERSION}")
        regions = []
        for r in doc["regions"]:
            data = (d / r["file"]).read_bytes()
            if len(data) != r["size"]:
                raise SnapshotError(f"{d / r['file']}: {len(data)} bytes, snapshot.json says {r['size']}")
            regions.append(Region(r["addr"], data, r.get("what", "")))
        known = set(UserRegs.__dataclass_fields__)
        regs = UserRegs(**{k: v for k, v in doc["regs"].items() if k in known})
        return cls(doc.get("name", d.name), regs, doc["maps"], regions, doc.get("files", {}), doc.get("meta", {}))


class SnapshotMemory:
    """The captured regions, then read-only file mappings backed by the host files."""

    def __init__(self, snap: Snapshot, file_backed: bool = True):
        self.regions = BufferMemory({r.addr: r.data for r in snap.regions})
        self.file_maps = [m for m in snap.mappings if file_backed and m.is_file and "w" not in m.perms]
        self._starts = [m.start for m in self.file_maps]
        self.files = snap.files
        self._data: dict[str, bytes] = {}

    def read(self, addr: int, size: int) -> bytes:
        try:
            return self.regions.read(addr, size)
        except MemoryFault as fault:
            i = bisect.bisect_right(self._starts, addr) - 1
            if i < 0:
                raise
            m = self.file_maps[i]
            if not (m.start <= addr and addr + size <= m.end):
                raise fault
            data = self._file(m.path)
            off = m.offset + addr - m.start
            if data is None or off + size > len(data):
                raise fault
            return data[off:off + size]

    def _file(self, path: str) -> bytes | None:
        if path not in self._data:
            host = self.files.get(path)
            try:
                self._data[path] = Path(host).read_bytes() if host else None
            except OSError:
                self._data[path] = None
        return self._data[path]
