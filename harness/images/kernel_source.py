"""Debian's ``linux-source-X.Y``: a kernel tree to build and test, fetched like every other image.

The package carries the tree as ``/usr/src/linux-source-X.Y.tar.xz``; it is downloaded through
the private apt configuration (:class:`harness.images.apt.PrivateApt`, the archive the host already
uses) and unpacked into the cache as ``kernel-source/KEY/linux-source-X.Y``, keyed by the
package's version and checksum.  The unpacked tree is read-only by convention: a build writes
into its own ``O=`` directory (:mod:`harness.images.kernel_build`), and a test that edits the
tree edits a copy.
"""

from __future__ import annotations

import json
import shutil
import tarfile
from dataclasses import dataclass
from pathlib import Path

from ..progress import step
from .apt import PrivateApt, run_tool
from .cache import cached_dir, content_key
from .errors import ImageError

__all__ = ["DEFAULT_SOURCE", "KernelSource", "KernelSourceError", "get_linux_source"]

#: (suite, package): the tree of the default kernel's version (harness.images.kernel.KERNELS)
DEFAULT_SOURCE = ("trixie-backports", "linux-source-7.3")


class KernelSourceError(ImageError):
    """linux-source could not be fetched or unpacked; says which step."""


@dataclass(frozen=True)
class KernelSource:
    package: str
    version: str
    suite: str
    tree: Path  # the unpacked tree (its top-level Makefile)

    def describe(self) -> dict:
        return {"package": self.package, "version": self.version, "suite": self.suite, "tree": str(self.tree)}


def get_linux_source(suite: str = DEFAULT_SOURCE[0], package: str = DEFAULT_SOURCE[1]) -> KernelSource:
    """Fetch (cached) and unpack ``package`` from ``suite``."""
    apt = PrivateApt()
    try:
        pkg = apt.package(package, suite)
    except ImageError as exc:
        raise KernelSourceError(f"cannot find {package} in {suite}: {exc}") from exc
    key = content_key("kernel-source-v1", pkg.name, pkg.version, pkg.sha256)

    def build(tmp: Path) -> None:
        deb = apt.download(pkg, tmp / "deb")
        root = tmp / "root"
        run_tool(["dpkg-deb", "-x", str(deb), str(root)], f"dpkg-deb -x {deb.name}", KernelSourceError, timeout=600)
        tarballs = sorted((root / "usr/src").glob("linux-source-*.tar.*"))
        if not tarballs:
            raise KernelSourceError(f"{deb.name} has no /usr/src/linux-source-*.tar.*")
        with step("images", f"unpacking {tarballs[0].name}") as st:
            with tarfile.open(tarballs[0]) as tf:
                top = {m.name.split("/", 1)[0] for m in tf.getmembers()}
                if len(top) != 1:
                    raise KernelSourceError(f"{tarballs[0].name} has {len(top)} top-level entries, not one tree")
                tf.extractall(tmp, filter="tar")
            st.end(f"unpacked {tarballs[0].name} in {st.elapsed:.1f}s")
        tree = tmp / top.pop()
        if not (tree / "Makefile").is_file() or not (tree / "Kconfig").is_file():
            raise KernelSourceError(f"{tarballs[0].name} unpacked to {tree.name}, which has no Makefile and Kconfig")
        (tmp / "source.json").write_text(json.dumps(
            {"package": pkg.name, "version": pkg.version, "suite": suite, "tree": tree.name}, indent=1))
        shutil.rmtree(root)  # the .deb's root: only the tarball mattered
        shutil.rmtree(tmp / "deb")

    d = cached_dir("kernel-source", key, build, what=f"{pkg.name}={pkg.version} ({suite}), unpacked")
    info = json.loads((d / "source.json").read_text())
    return KernelSource(info["package"], info["version"], info["suite"], d / info["tree"])
