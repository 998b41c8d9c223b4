"""Guest kernels: Debian cloud kernels by package, or a user-supplied bzImage/vmlinux.

The ELF ``vmlinux`` is pulled out of the bzImage's compressed payload and booted directly through
its PVH entry point: no decompressor, no KASLR, about a second faster on TCG.  Every kernel is
recorded with its package name, version and the sha256 of what is booted.
"""

from __future__ import annotations

import gzip
import json
import lzma
import shutil
import struct
import subprocess
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path

from ..errors import EXIT_USAGE
from .apt import Package, PrivateApt
from .cache import cached_dir, content_key, sha256_file
from .errors import ImageError
from .kernel_build import KernelTreeError, build_tree, check_tree
from .lock import write_atomic

# Named kernels: (suite, meta package).  The meta package's dependency names the image package.
KERNELS = {
    "default": ("trixie-backports", "linux-image-cloud-amd64"),  # 7.x: CONFIG_UNWIND_USER=y, BTF
    "trixie": ("trixie", "linux-image-cloud-amd64"),  # 6.12
    "bookworm": ("bookworm", "linux-image-cloud-amd64"),  # 6.1
    # The default suite's other flavours: the generic kernel (modules for real hardware, the
    # same unwind_user) and PREEMPT_RT, where the deferred path runs with sleeping locks.
    "generic": ("trixie-backports", "linux-image-amd64"),
    "rt": ("trixie-backports", "linux-image-rt-amd64"),
}


#: ``--kernel tree:PATH``: a kernel tree, built (cached) by :mod:`harness.images.kernel_build`
TREE_PREFIX = "tree:"


@dataclass(frozen=True)
class Kernel:
    name: str  # a name of KERNELS, "file" or "tree:PATH"
    package: str
    version: str
    release: str  # uname -r, e.g. 7.3.4+deb13-cloud-amd64
    vmlinux: Path  # ELF image booted through PVH
    sha256: str

    def describe(self) -> dict:
        d = asdict(self)
        d["vmlinux"] = str(self.vmlinux)
        return d


class KernelInputError(ImageError):
    """A kernel the user named that cannot be booted: an unknown name, a missing file, or a file
    that is not a vmlinux or bzImage."""

    exit_code = EXIT_USAGE  # bad input


def check_kernel_choice(name: str = "default", path: str | None = None) -> None:
    """:class:`KernelInputError` for a kernel that cannot be had, found without fetching or
    reading anything (a command checks it before it makes a run directory)."""
    if path:
        if not Path(path).is_file():
            raise KernelInputError(f"--kernel-path {path}: no such file")
    elif name.startswith(TREE_PREFIX):
        try:
            check_tree(Path(name[len(TREE_PREFIX):]))
        except KernelTreeError as exc:
            raise KernelInputError(f"--kernel {name}: {exc}") from exc
    elif name not in KERNELS:
        raise KernelInputError(f"unknown kernel {name!r}; known: {', '.join(KERNELS)}, tree:PATH (a kernel tree, "
                               "built when stale) or --kernel-path FILE")


def get_kernel(name: str = "default", path: str | None = None) -> Kernel:
    """Resolve, fetch (cached) and unpack a kernel; ``path`` takes a user bzImage or vmlinux."""
    check_kernel_choice(name, path)
    if path:
        return _user_kernel(Path(path))
    if name.startswith(TREE_PREFIX):
        return tree_kernel(Path(name[len(TREE_PREFIX):]))
    suite, meta = KERNELS[name]
    apt = PrivateApt()
    pkg = _resolve(apt, suite, meta)
    key = content_key("kernel-v1", pkg.name, pkg.version, pkg.sha256)

    def build(tmp: Path) -> None:
        deb = apt.download(pkg, tmp / "deb")
        root = tmp / "root"
        _run(["dpkg-deb", "-x", str(deb), str(root)], f"unpack {deb.name}")
        # Up to 6.18: /boot/vmlinuz-RELEASE; linux-binary-* packages: /usr/lib/modules/RELEASE/vmlinuz.
        found = [(p, p.name[len("vmlinuz-") :]) for p in (root / "boot").glob("vmlinuz-*")]
        found += [(p, p.parent.name) for p in (root / "usr/lib/modules").glob("*/vmlinuz")]
        if not found:
            raise ImageError(f"{deb.name} has neither /boot/vmlinuz-* nor /usr/lib/modules/*/vmlinuz")
        vmlinuz, release = found[0]
        (tmp / "vmlinux").write_bytes(extract_vmlinux(vmlinuz.read_bytes()))
        shutil.copy(vmlinuz, tmp / "bzImage")
        meta_json = {"package": pkg.name, "version": pkg.version, "release": release, "suite": suite}
        (tmp / "kernel.json").write_text(json.dumps(meta_json, indent=1))
        shutil.rmtree(root)
        shutil.rmtree(tmp / "deb")

    d = cached_dir("kernels", key, build, what=f"kernel {pkg.name}={pkg.version}")
    info = json.loads((d / "kernel.json").read_text())
    return Kernel(name, info["package"], info["version"], info["release"], d / "vmlinux", _sha_cached(d / "vmlinux"))


def kernel_config(name: str = "default") -> Path:
    """The ``.config`` a named Debian kernel was built with (``/boot/config-RELEASE``, or
    ``/usr/lib/modules/RELEASE/config`` in the linux-binary packages), fetched once and cached."""
    if name not in KERNELS:
        raise KernelInputError(f"unknown kernel {name!r}; known: {', '.join(KERNELS)}")
    suite, meta = KERNELS[name]
    apt = PrivateApt()
    pkg = _resolve(apt, suite, meta)
    if pkg.name.startswith("linux-binary-"):  # since 6.19 the config is in linux-base-RELEASE
        pkg = apt.package("linux-base-" + pkg.name[len("linux-binary-"):], suite)

    def build(tmp: Path) -> None:
        deb = apt.download(pkg, tmp / "deb")
        root = tmp / "root"
        _run(["dpkg-deb", "-x", str(deb), str(root)], f"unpack {deb.name}")
        found = sorted((root / "boot").glob("config-*")) + sorted((root / "usr/lib/modules").glob("*/config"))
        if not found:
            raise ImageError(f"{deb.name} has neither /boot/config-* nor /usr/lib/modules/*/config")
        shutil.copy(found[0], tmp / "config")
        shutil.rmtree(root)
        shutil.rmtree(tmp / "deb")

    key = content_key("kernel-config-v1", pkg.name, pkg.version, pkg.sha256)
    return cached_dir("kernel-config", key, build, what=f"the .config of {pkg.name}={pkg.version}") / "config"


def tree_kernel(tree: Path) -> Kernel:
    """The kernel of a tree, built when the tree (its commit, diff or files) or its config
    changed since the last build, else the cached build."""
    b = build_tree(tree)
    return Kernel(f"{TREE_PREFIX}{b.tree}", f"tree {b.tree}", b.release, b.release, b.vmlinux,
                  _sha_cached(b.vmlinux))


def _resolve(apt: PrivateApt, suite: str, meta: str) -> Package:
    """The package carrying the kernel behind ``meta`` in ``suite``; remembered until the next
    ``apt-get update`` of the private lists (resolving costs several apt-cache calls)."""
    apt.update()
    memo = apt.root / f"resolved-{suite}-{meta}.json"
    stamp = (apt.root / "updated").stat().st_mtime
    if memo.exists():
        d = json.loads(memo.read_text())
        if d.get("stamp") == stamp:
            return Package(**d["package"])
    meta_pkg = apt.package(meta, suite)
    image_name = next((d for d in apt.depends(meta, meta_pkg.version) if d.startswith("linux-image-")), None)
    if not image_name:
        raise ImageError(f"{meta}={meta_pkg.version} in {suite} depends on no linux-image package")
    pkg = apt.package(image_name, suite)
    # Since 6.19 Debian splits the image: linux-image-X is a small package depending on
    # linux-binary-X, which carries the kernel as /usr/lib/modules/X/vmlinuz.
    binary = next((d for d in apt.depends(image_name, pkg.version) if d.startswith("linux-binary-")), None)
    if binary:
        pkg = apt.package(binary, suite)
    write_atomic(memo, json.dumps({"stamp": stamp, "package": asdict(pkg)}))  # read by other harnesses
    return pkg


def _sha_cached(path: Path) -> str:
    side = path.with_suffix(".sha256")
    if side.exists():
        return side.read_text().strip()
    digest = sha256_file(path)
    write_atomic(side, digest + "\n")
    return digest


def _user_kernel(path: Path) -> Kernel:
    if not path.is_file():
        raise KernelInputError(f"--kernel-path {path}: no such file")
    data = path.read_bytes()
    digest = sha256_file(path)
    if data[:4] == b"\x7fELF":
        return Kernel("file", str(path), "", "", path, digest)
    key = content_key("user-kernel-v1", digest)

    def build(tmp: Path) -> None:
        try:
            (tmp / "vmlinux").write_bytes(extract_vmlinux(data))
        except KernelInputError as exc:
            raise KernelInputError(f"--kernel-path {path}: {exc}") from exc

    d = cached_dir("kernels", key, build, what=f"vmlinux from {path}")
    return Kernel("file", str(path), "", "", d / "vmlinux", _sha_cached(d / "vmlinux"))


# bzImage layout: Documentation/arch/x86/boot.rst.  The setup header sits at 0x1f1; setup_sects
# at 0x1f1, header magic "HdrS" at 0x202, protocol version at 0x206, payload_offset/length at
# 0x248/0x24c (protocol >= 2.08, relative to the start of the protected-mode code).
_HDR_MAGIC = b"HdrS"


def extract_vmlinux(bzimage: bytes) -> bytes:
    """Return the ELF vmlinux inside a bzImage (payload compressed with zstd, xz, gzip or lz4)."""
    if bzimage[:4] == b"\x7fELF":
        return bzimage
    if len(bzimage) < 0x250 or bzimage[0x202:0x206] != _HDR_MAGIC:
        raise KernelInputError("not a bzImage: no 'HdrS' setup header at 0x202")
    setup_sects = bzimage[0x1F1] or 4
    version = struct.unpack_from("<H", bzimage, 0x206)[0]
    if version < 0x208:
        raise KernelInputError(f"boot protocol {version:#x} has no payload_offset (needs >= 2.08)")
    payload_offset, payload_length = struct.unpack_from("<II", bzimage, 0x248)
    start = (setup_sects + 1) * 512 + payload_offset
    payload = bzimage[start : start + payload_length]
    out = _decompress(payload)
    if out[:4] != b"\x7fELF":
        raise KernelInputError("bzImage payload did not decompress to an ELF image")
    return out


def _decompress(payload: bytes) -> bytes:
    if payload[:4] == b"\x28\xb5\x2f\xfd":  # zstd frame
        return _external(["zstd", "-dc"], payload, "zstd")
    if payload[:6] == b"\xfd7zXZ\x00":
        return lzma.decompress(payload)
    if payload[:2] == b"\x1f\x8b":
        return gzip.decompress(payload)
    if payload[:4] == b"\x02\x21\x4c\x18":  # lz4 legacy frame
        return _external(["lz4", "-dc"], payload, "lz4")
    raise KernelInputError(f"unknown bzImage payload compression (magic {payload[:6].hex()})")


def _external(cmd: list[str], data: bytes, what: str) -> bytes:
    # The kernel's zstd payload carries a trailing size word that the zstd tool tolerates; no
    # zstd module is in the standard library before Python 3.14, so the Debian tool is used.
    with tempfile.TemporaryFile() as f:
        f.write(data)
        f.seek(0)
        try:
            r = subprocess.run(cmd, stdin=f, capture_output=True, timeout=120)
        except FileNotFoundError as exc:
            raise ImageError(f"{what} is not installed (apt-get install {what})") from exc
    if not r.stdout.startswith(b"\x7fELF"):
        raise ImageError(f"{what} -dc failed: {r.stderr.decode(errors='replace')[-500:]}")
    return r.stdout


def _run(cmd: list[str], what: str, timeout: int = 600) -> None:
    try:
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired as exc:
        raise ImageError(f"{what}: timed out after {timeout}s") from exc
    if r.returncode != 0:
        raise ImageError(f"{what} failed: {r.stderr.strip()[-2000:]}")
