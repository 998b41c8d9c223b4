"""The guest's initramfs: busybox, the harness's /init, the guest programs and their libraries.

Written as a cpio "newc" archive (the format the kernel unpacks; include/linux/initrd docs:
Documentation/driver-api/early-userspace/buffer-format.rst) by a few lines of Python rather than
the cpio tool: the archive is then byte-for-byte reproducible (fixed mtimes, sorted entries), so
its content hash is a stable cache key.
"""

from __future__ import annotations

import stat
from dataclasses import dataclass, field
from pathlib import Path

from .cache import cached_dir, content_key, prune, repo_root
from .errors import ImageError
from .programs import Program

INIT_SCRIPT = repo_root() / "images" / "init.sh"
BUSYBOX = Path("/bin/busybox")  # from Debian's busybox-static: statically linked


@dataclass
class CpioWriter:
    """Minimal newc writer: directories, regular files and symlinks, all owned by root."""

    entries: dict[str, tuple[int, bytes]] = field(default_factory=dict)  # path -> (mode, data)

    def dir(self, path: str) -> None:
        parts = path.strip("/").split("/")
        for i in range(1, len(parts) + 1):
            self.entries.setdefault("/".join(parts[:i]), (stat.S_IFDIR | 0o755, b""))

    def file(self, path: str, data: bytes, mode: int = 0o755) -> None:
        path = path.strip("/")
        if "/" in path:
            self.dir(path.rsplit("/", 1)[0])
        self.entries[path] = (stat.S_IFREG | mode, data)

    def symlink(self, path: str, target: str) -> None:
        path = path.strip("/")
        if "/" in path:
            self.dir(path.rsplit("/", 1)[0])
        self.entries[path] = (stat.S_IFLNK | 0o777, target.encode())

    def to_bytes(self) -> bytes:
        out = bytearray()
        for ino, (name, (mode, data)) in enumerate(sorted(self.entries.items()), start=1):
            out += _header(ino, mode, name, len(data))
            out += data
            out += b"\0" * (-len(out) % 4)
        out += _header(0, 0, "TRAILER!!!", 0)
        out += b"\0" * (-len(out) % 512)
        return bytes(out)


def _header(ino: int, mode: int, name: str, size: int) -> bytes:
    nameb = name.encode() + b"\0"
    fields = [ino, mode, 0, 0, 1, 0, size, 0, 0, 0, 0, len(nameb), 0]
    hdr = b"070701" + b"".join(b"%08X" % f for f in fields) + nameb
    return hdr + b"\0" * (-len(hdr) % 4)


#: initramfs entries always kept (the most recently used), and how long the rest may idle
KEEP = 48
IDLE_SECONDS = 3600  # a harness handed an entry boots from it within seconds


def build_initramfs(programs: list[Program], extra_files: dict[str, Path] | None = None) -> Path:
    """Build (or reuse) an initramfs holding ``programs`` and return its path."""
    if not BUSYBOX.exists():
        raise ImageError(f"{BUSYBOX} is missing: apt-get install busybox-static")
    files: dict[str, Path] = {}
    for p in programs:
        files[p.guest_path] = p.path
        for host, guest in p.runtime:
            files[guest] = host
    files.update(extra_files or {})
    key = content_key("initramfs-v1", INIT_SCRIPT, BUSYBOX.stat().st_size,
                      sorted((g, str(h), h.stat().st_mtime_ns, h.stat().st_size) for g, h in files.items()))

    def build(tmp: Path) -> None:
        w = CpioWriter()
        for d in ("bin", "dev", "proc", "sys", "tmp", "progs", "tc"):
            w.dir(d)
        w.file("bin/busybox", BUSYBOX.read_bytes())
        w.symlink("bin/sh", "busybox")
        w.file("init", INIT_SCRIPT.read_bytes())
        for guest, host in sorted(files.items()):
            w.file(guest, host.read_bytes())
        (tmp / "initramfs.cpio").write_bytes(w.to_bytes())
        (tmp / "contents.txt").write_text("".join(f"{g}\t{h}\n" for g, h in sorted(files.items())))

    path = cached_dir("initramfs", key, build, what=f"initramfs with {len(programs)} programs") / "initramfs.cpio"
    # One entry per set of programs: a user's binaries, a fuzz campaign's every program.  The
    # catalog's few stay in use; the rest go once unused for an hour beyond the newest KEEP (a day let a
    # day of live fuzzing keep a boot's 10 MB for every program: 2 GB after 40 minutes).
    prune("initramfs", keep=KEEP, idle=IDLE_SECONDS)
    return path
