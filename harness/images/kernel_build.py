"""A kernel tree built for the guest: out of tree, a small config plus the harness's needs, cached.

    build = build_tree(Path("~/linux"))          # TreeBuild: vmlinux (ELF, PVH-bootable), release, ...

The steps, each for a reason:

1. **Config** in a build directory of the cache kept per tree and base config
   (``kbuild/KEY``, ``make O=``): the tree's ``x86_64_defconfig`` (or ``--config FILE``), then
   :data:`PARE_DOWN` (what a QEMU guest with no disk, network, display or USB never uses: fewer
   objects to compile) and the harness's fragment (:data:`harness.kernel.config.NEEDS` and the
   tree's unwinding options) appended, then ``make olddefconfig``.
2. **Check** the result with :func:`harness.kernel.config.judge` *before* the long make: an
   option that olddefconfig dropped (DEBUG_INFO_BTF without BPF_SYSCALL, an old pahole) fails at
   once with its dependency named (:class:`KernelConfigDropped`, exit 2), not after 20 minutes.
3. **Key**: the tree's identity (its git commit and uncommitted diff, untracked files included;
   for a tree that is no git checkout, as Debian's ``linux-source`` tarball, a content hash of
   every file, memoised by size and mtime like git's index) and the final ``.config``.  A built
   key is reused at once (``kernels-built/KEY``: the vmlinux, bzImage, .config and build log).
4. **Make** ``bzImage`` in the kept ``O=`` directory (an edit to the tree recompiles what it
   touches), under ``nice``, bounded by ``timeout``; a progress line counts the objects make
   reports; the whole log is kept; a failure is a :class:`KernelBuildError` with the log's last
   lines.

The booted image is ``arch/x86/boot/compressed/vmlinux.bin``: the kernel's own ``objcopy -S`` of
vmlinux that the bzImage compresses (the ELF with ``.BTF``, without DWARF), booted through PVH
like the Debian kernels' (:mod:`harness.images.kernel`).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import signal
import subprocess
import threading
import time
from collections import deque
from dataclasses import asdict, dataclass
from pathlib import Path

from ..errors import EXIT_INFRA, EXIT_USAGE
from ..kernel.config import ConfigError, Judgement, Kconfig, judge, pahole_version_number, parse_config
from ..progress import note, step
from .cache import cache_root, cached_dir, content_key
from .errors import ImageError
from .lock import cache_lock, write_atomic

__all__ = ["BUILD_TIMEOUT", "PARE_DOWN", "KernelBuildError", "KernelConfigDropped", "KernelTreeError",
           "TreeBuild", "build_tree", "check_tree", "harness_fragment", "host_pahole", "tree_identity"]

#: the bound on one make (a cold build of linux-source-7.3 took 43 min on 2 busy cores: docs/kernel.md)
BUILD_TIMEOUT = 4 * 3600
CONFIG_TIMEOUT = 300
LOG_TAIL = 40

#: What x86_64_defconfig turns on that a guest with no disk, network card, display, sound or USB
#: never uses (the harness's guest: an initramfs, serial ports, nothing else): off, so that
#: fewer objects are compiled.  Options absent from a tree are ignored by olddefconfig.
PARE_DOWN = (
    "DRM", "FB", "SOUND", "SND", "USB_SUPPORT", "USB", "HID", "HID_SUPPORT", "INPUT_MOUSE", "INPUT_JOYSTICK",
    "INPUT_TABLET", "INPUT_TOUCHSCREEN", "INPUT_MISC", "WLAN", "WIRELESS", "CFG80211", "MAC80211", "RFKILL",
    "ETHERNET", "NET_VENDOR_INTEL", "E1000", "E1000E", "NETFILTER", "IPV6", "NETLABEL", "AGP", "ATA", "SCSI",
    "MD", "BLK_DEV_DM", "BLK_DEV_SD", "BLK_DEV_SR", "CDROM", "EXT4_FS", "ISO9660_FS", "MSDOS_FS", "VFAT_FS",
    "NFS_FS", "ROOT_NFS", "AUTOFS_FS", "QUOTA", "EFI", "EFI_STUB", "HIBERNATION", "SUSPEND", "PM", "CPU_FREQ",
    "CPU_IDLE_GOV_LADDER", "MICROCODE", "X86_MCE", "KVM", "VIRTUALIZATION", "XEN", "HYPERV", "ACPI_VIDEO",
    "BACKLIGHT_CLASS_DEVICE", "LOGO", "VGA_CONSOLE", "DEBUG_STACK_USAGE", "PROFILING", "KEXEC", "CRASH_DUMP",
    "HOTPLUG_CPU", "AUDIT", "SECURITY", "SECURITY_SELINUX", "KEYS", "MODULES", "NET_9P", "9P_FS",
    "MACINTOSH_DRIVERS", "THERMAL", "HWMON", "WATCHDOG", "RTC_CLASS", "DMADEVICES", "I2C", "SPI", "PPS",
    "PTP_1588_CLOCK", "MEDIA_SUPPORT", "NVMEM", "NVME_CORE", "BLK_DEV_NVME", "MMC", "MEMSTICK", "NEW_LEDS",
    "ACCESSIBILITY", "INFINIBAND", "FIREWIRE", "PCCARD", "HOTPLUG_PCI", "PARPORT", "PNP", "MTD", "GPIOLIB",
)

#: The harness's fragment beyond :data:`NEEDS`: what makes the needed options reachable
#: (DEBUG_INFO_BTF depends on BPF_SYSCALL and on debug info; KALLSYMS_ALL on DEBUG_KERNEL; PVH
#: on HYPERVISOR_GUEST), DWARF 5 as the BTF's source, and a guest that boots fast.
REACH = ("HYPERVISOR_GUEST", "PARAVIRT", "KVM_GUEST", "DEBUG_KERNEL", "BPF_SYSCALL", "DEBUG_INFO_DWARF5")


class KernelTreeError(ImageError):
    """A TREE that is no kernel tree (no top Makefile or Kconfig), or a base config that is missing."""

    exit_code = EXIT_USAGE


class KernelBuildError(ImageError):
    """The tree's make failed (its log's last lines follow) or did not end in time."""

    exit_code = EXIT_USAGE  # the tree does not build: the input's; a timeout says EXIT_INFRA

    def __init__(self, message: str, log: Path | None = None, exit_code: int | None = None):
        super().__init__(message)
        self.log = log
        if exit_code is not None:
            self.exit_code = exit_code


class KernelConfigDropped(KernelBuildError):
    """olddefconfig left out an option the harness needs: named with the dependency that dropped it."""

    def __init__(self, message: str, judgement: Judgement):
        super().__init__(message)
        self.judgement = judgement


@dataclass(frozen=True)
class TreeBuild:
    tree: Path
    identity: str  # "git:COMMIT+DIFFHASH" or "content:HASH"
    release: str  # make kernelrelease
    vmlinux: Path  # the ELF booted through PVH
    bzimage: Path
    config: Path
    log: Path
    build_dir: Path  # the kept O= directory
    key: str
    seconds: float  # the make's wall time when it was built (0.0: reused)
    reused: bool

    def describe(self) -> dict:
        d = asdict(self)
        return {k: str(v) if isinstance(v, Path) else v for k, v in d.items()}


def check_tree(tree: Path) -> Path:
    """``tree`` resolved, or :class:`KernelTreeError` when it is no kernel tree (nothing is run)."""
    t = Path(tree).expanduser()
    if not t.is_dir():
        raise KernelTreeError(f"kernel tree {tree}: no such directory")
    if not (t / "Makefile").is_file() or not (t / "Kconfig").is_file() or not (t / "arch/x86").is_dir():
        raise KernelTreeError(f"kernel tree {tree}: not a Linux tree (no top-level Makefile, Kconfig and arch/x86)")
    return t.resolve()


def host_pahole() -> int | None:
    """This machine's pahole as Kconfig counts it (124 for v1.24), None without one."""
    try:
        r = subprocess.run(["pahole", "--version"], capture_output=True, text=True, timeout=30)
    except (FileNotFoundError, subprocess.TimeoutExpired):
        return None
    try:
        return pahole_version_number(r.stdout or r.stderr)
    except ConfigError:
        return None


def harness_fragment(kconfig: Kconfig) -> str:
    """The fragment appended to the base config: the harness's needs and what reaches them."""
    from ..kernel.config import NEEDS
    names = [*REACH, *(n.option for n in NEEDS), *(n for n in kconfig.offered() if kconfig.entries[n].prompt)]
    lines = [f"CONFIG_{n}=y" for n in dict.fromkeys(names)]
    return "# the harness's needs (harness/kernel/config.py NEEDS)\n" + "\n".join(lines) + "\n"


def pare_down_fragment() -> str:
    return "# not used by the harness's guest (harness/images/kernel_build.py PARE_DOWN)\n" + "".join(
        f"# CONFIG_{n} is not set\n" for n in PARE_DOWN)


# --- the tree's identity ---------------------------------------------------------------------


def tree_identity(tree: Path) -> str:
    """``git:COMMIT:DIFF`` for a git checkout (the uncommitted diff and untracked files hashed in),
    else ``content:HASH`` of every file's bytes."""
    if (tree / ".git").exists():
        return _git_identity(tree)
    return "content:" + _content_hash(tree)


def _git(tree: Path, *args: str) -> bytes:
    try:
        r = subprocess.run(["git", "-C", str(tree), *args], capture_output=True, timeout=600)
    except subprocess.TimeoutExpired as exc:
        raise KernelTreeError(f"git {' '.join(args)} in {tree} timed out") from exc
    if r.returncode != 0:
        raise KernelTreeError(f"git {' '.join(args)} in {tree} failed: {r.stderr.decode(errors='replace')[-500:]}")
    return r.stdout


def _git_identity(tree: Path) -> str:
    commit = _git(tree, "rev-parse", "HEAD").decode().strip()
    h = hashlib.sha256(_git(tree, "diff", "--binary", "HEAD"))
    for name in sorted(_git(tree, "ls-files", "--others", "--exclude-standard", "-z").split(b"\0")):
        if name:
            h.update(name + b"\0")
            p = tree / name.decode(errors="surrogateescape")
            if p.is_file():
                h.update(p.read_bytes())
    return f"git:{commit}:{h.hexdigest()[:16]}"


def _content_hash(tree: Path) -> str:
    """sha256 over every file's path and bytes (symlinks: their target), with a memo in the cache
    of each file's (size, mtime_ns, inode) -> sha256 so that only changed files are read again."""
    memo_path = cache_root() / "kbuild" / f"tree-{content_key(str(tree))}.json"
    memo_path.parent.mkdir(parents=True, exist_ok=True)
    try:
        memo = json.loads(memo_path.read_text())
    except (OSError, ValueError):
        memo = {}
    new: dict[str, list] = {}
    total = hashlib.sha256()
    with step("images", f"hashing the kernel tree {tree}") as st:
        read = 0
        for dirpath, dirnames, filenames in os.walk(tree):
            dirnames[:] = sorted(d for d in dirnames if d != ".git")
            for fn in sorted(filenames):
                p = os.path.join(dirpath, fn)
                rel = os.path.relpath(p, tree)
                s = os.lstat(p)
                if os.path.islink(p):
                    digest = "link:" + os.readlink(p)
                else:
                    sig = [s.st_size, s.st_mtime_ns, s.st_ino]
                    old = memo.get(rel)
                    if old and old[:3] == sig:
                        digest = old[3]
                    else:
                        with open(p, "rb") as f:
                            digest = hashlib.file_digest(f, "sha256").hexdigest()
                        read += 1
                    new[rel] = [*sig, digest]
                total.update(f"{rel}\0{digest}\0".encode())
        st.end(f"hashed the kernel tree {tree}: {len(new)} files, {read} read in {st.elapsed:.1f}s")
    if new != memo:
        write_atomic(memo_path, json.dumps(new, separators=(",", ":")))
    return total.hexdigest()[:16]


# --- config ----------------------------------------------------------------------------------


def _make(tree: Path, out: Path, *targets: str, timeout: float, log=None, progress=None,
          jobs: int | None = None) -> int:
    """``nice make -C TREE O=OUT [-jN] TARGETS`` with its output to ``log`` (a file object) and
    each line to ``progress``; bounded by ``timeout`` (the whole process group is killed)."""
    cmd = ["nice", "-n", "19", "make", "-C", str(tree), f"O={out}", *([f"-j{jobs}"] if jobs else []), *targets]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True)
    timer = threading.Timer(timeout, lambda: os.killpg(proc.pid, signal.SIGKILL))
    timer.start()
    started = time.monotonic()
    try:
        assert proc.stdout is not None
        for raw in proc.stdout:
            if log is not None:
                log.write(raw)
            if progress is not None:
                progress(raw.decode(errors="replace").rstrip())
        rc = proc.wait()
    except BaseException:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        raise
    finally:
        timer.cancel()
    if rc < 0 and time.monotonic() - started >= timeout:
        raise KernelBuildError(f"make {' '.join(targets)} in {tree} did not end within {timeout:.0f} s (killed)",
                               exit_code=EXIT_INFRA)
    return rc


def _configure(tree: Path, out: Path, base: Path | None, kconfig: Kconfig) -> str:
    """Write OUT/.config: the base, the pare-down and harness fragments, olddefconfig; its text."""
    log_path = out / "config.log"
    if base is None:
        with open(log_path, "wb") as log:
            rc = _make(tree, out, "x86_64_defconfig", timeout=CONFIG_TIMEOUT, log=log)
        if rc:
            raise KernelBuildError(f"make x86_64_defconfig in {tree} failed ({rc}):\n{_tail(log_path)}", log_path)
        text = (out / ".config").read_text()
    else:
        text = base.read_text()
    text += "\n" + pare_down_fragment() + harness_fragment(kconfig)
    (out / ".config").write_text(text)
    with open(log_path, "ab") as log:
        rc = _make(tree, out, "olddefconfig", timeout=CONFIG_TIMEOUT, log=log)
    if rc:
        raise KernelBuildError(f"make olddefconfig in {tree} failed ({rc}):\n{_tail(log_path)}", log_path)
    return (out / ".config").read_text()


#: a compiler's or linker's error, or make's (with -jN the last lines are often another job's)
_ERROR = re.compile(r"\berror\b|\*\*\*|undefined reference|fatal", re.I)


def _error_lines(path: Path, n: int = LOG_TAIL // 2) -> str:
    """The first ``n`` lines of the log that report an error, with the line before each."""
    out: list[str] = []
    prev = ""
    with open(path, "rb") as f:
        for raw in f:
            line = raw.decode(errors="replace").rstrip()
            if _ERROR.search(line):
                if prev and (not out or out[-1] != prev):
                    out.append(prev)
                out.append(line)
                if len(out) >= n:
                    break
            prev = line
    return "\n".join(out)


def _tail(path: Path, n: int = LOG_TAIL) -> str:
    with open(path, "rb") as f:
        lines = deque(f, maxlen=n)
    return "".join(ln.decode(errors="replace") for ln in lines).rstrip()


# --- the build -------------------------------------------------------------------------------

_OBJ = re.compile(r"^\s+(CC|AS|LD|AR|GEN|BTF|HOSTCC|OBJCOPY|CC \[M\]|KSYMS|SYSMAP|OBJTOOL|VDSO|RELOCS|"
                  r"ZSTD|XZKERN|GZIP|LZ4|BTFIDS|UPD|CALL|MKCAP|SYSTBL|SYSHDR|WRAP|DESCEND|HYPERCALLS|"
                  r"POLICY|CHK|TEST|MKELF|PASYMS|SORTTAB|KSYMS|COPY|EXPORTS|BUILD|LDS|CPP|TABLE)\s+(\S+)")


def build_tree(tree: Path, *, base_config: Path | None = None, jobs: int | None = None,
               timeout: float = BUILD_TIMEOUT) -> TreeBuild:
    """Build (or reuse) ``tree`` for the guest; see the module's docstring for the steps."""
    tree = check_tree(tree)
    if base_config is not None and not Path(base_config).is_file():
        raise KernelTreeError(f"--config {base_config}: no such file")
    base_text = Path(base_config).read_text() if base_config else "x86_64_defconfig"
    out_key = content_key("kbuild-v1", str(tree), base_text)
    out = cache_root() / "kbuild" / out_key
    out.mkdir(parents=True, exist_ok=True)
    jobs = jobs or os.cpu_count() or 1
    # One harness at a time configures and makes in one O= directory; a second waits (bounded).
    with cache_lock(cache_root() / "kbuild" / f".{out_key}.lock", f"another harness building {tree}",
                    timeout=timeout + CONFIG_TIMEOUT * 2):
        kconfig = Kconfig.read(tree)
        with step("images", f"configuring {tree} (olddefconfig in {out})") as st:
            config_text = _configure(tree, out, Path(base_config) if base_config else None, kconfig)
            st.end(f"configured {tree} in {st.elapsed:.1f}s")
        values = parse_config(config_text, str(out / ".config"))
        judgement = judge(values, kconfig, pahole=host_pahole())
        if not judgement.ok:
            lines = "\n".join(v.line() for v in judgement.missing)
            raise KernelConfigDropped(
                f"the config for {tree} lacks what the harness needs after olddefconfig (nothing built):\n"
                f"{lines}\nadd to the config:\n{judgement.fragment().rstrip()}", judgement)
        identity = tree_identity(tree)
        key = content_key("kernel-tree-v1", identity, config_text)
        final = cache_root() / "kernels-built" / key
        reused = (final / ".complete").exists()
        seconds = 0.0

        def build(tmp: Path) -> None:
            nonlocal seconds
            seconds = _make_bzimage(tree, out, tmp, jobs, timeout)

        d = cached_dir("kernels-built", key, build, what=f"kernel tree {tree} ({identity[:40]})")
        info = json.loads((d / "build.json").read_text())
    if reused:
        note("images", f"kernel tree {tree} unchanged since its build: reusing {d}")
    return TreeBuild(tree, identity, info["release"], d / "vmlinux", d / "bzImage", d / "config", d / "build.log",
                     out, key, seconds if not reused else 0.0, reused)


def _short(target: str, out: Path) -> str:
    return target[len(str(out)) + 1:] if target.startswith(f"{out}/") else target


def _make_bzimage(tree: Path, out: Path, tmp: Path, jobs: int, timeout: float) -> float:
    log_path = tmp / "build.log"
    count_file = out / ".harness-objects"  # how many steps the last make here printed: the progress total
    try:
        total: int | None = int(count_file.read_text())
    except (OSError, ValueError):
        total = None
    n = 0
    with step("images", f"make -j{jobs} bzImage in {out}", total=total) as st, open(log_path, "wb") as log:
        def progress(line: str) -> None:
            nonlocal n
            m = _OBJ.match(line)
            if m:
                n += 1
                st.update(f"make -j{jobs} bzImage: {n}{f'/{total}' if total else ''} steps, "
                          f"{m.group(1).strip()} {_short(m.group(2), out)}", min(n, total or n), total)

        started = time.monotonic()
        rc = _make(tree, out, "bzImage", timeout=timeout, log=log, progress=progress, jobs=jobs)
        seconds = time.monotonic() - started
        if rc:
            kept = out / "build-failed.log"
            log.flush()
            shutil.copy(log_path, kept)
            errors = _error_lines(log_path)
            raise KernelBuildError(
                f"make bzImage in {tree} failed ({rc}) after {seconds:.0f}s (the whole log: {kept})"
                + (f"; its first errors:\n{errors}\n" if errors else "")
                + f"; its last lines:\n{_tail(log_path, LOG_TAIL // 2)}", kept)
        st.end(f"make -j{jobs} bzImage in {seconds:.0f}s ({n} steps)")
    if n > 1000 or total is None:  # a cold build's count: the best progress total for the next
        write_atomic(count_file, str(n))
    vmlinux_bin = out / "arch/x86/boot/compressed/vmlinux.bin"
    if not vmlinux_bin.is_file() or vmlinux_bin.read_bytes()[:4] != b"\x7fELF":
        raise KernelBuildError(f"make bzImage in {tree} left no ELF {vmlinux_bin}", log_path)
    shutil.copy(vmlinux_bin, tmp / "vmlinux")
    shutil.copy(out / "arch/x86/boot/bzImage", tmp / "bzImage")
    shutil.copy(out / ".config", tmp / "config")
    release = (out / "include/config/kernel.release").read_text().strip()
    (tmp / "build.json").write_text(json.dumps(
        {"tree": str(tree), "release": release, "seconds": round(seconds, 1), "steps": n, "jobs": jobs,
         "build_dir": str(out), "built": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}, indent=1))
    return seconds
