"""``harness doctor``: what is installed, which accelerator, what is cached."""

from __future__ import annotations

import json
import os
import shutil

from ..errors import EXIT_FAILURES, EXIT_OK
from . import command


@command("doctor", help="what is installed and cached")
def cmd_doctor(args) -> int:
    from ..images.apt import debian_archive_uri
    from ..images.cache import cache_root
    from ..images.kernel_build import host_pahole
    from ..images.qemu import HOST_PREFIX, cached_backports, choice_from_env, version_banner
    ok = True
    for tool in ("qemu-system-x86_64", "gdb", "socat", "busybox", "debootstrap", "zstd", "objdump", "gcc", "bpftool"):
        path = shutil.which(tool)
        ok &= path is not None
        print(f"{tool:20} {path or 'MISSING'}")
    # harness kernel build's tools: a missing one does not fail the doctor (only a tree build needs them)
    build = {t: shutil.which(t) for t in ("make", "flex", "bison", "bc", "pahole")}
    pahole = host_pahole()
    print(f"{'kernel build':20} " + (", ".join(t for t, p in build.items() if p) or "none")
          + (f"; MISSING {', '.join(t for t, p in build.items() if not p)}" if not all(build.values()) else "")
          + (f" (pahole {pahole // 100}.{pahole % 100}{'' if pahole >= 122 else ': BTF needs >= 1.22'})"
             if pahole else "") + " (harness kernel build, --kernel tree:PATH)")
    print(f"{'qemu version':20} {version_banner(HOST_PREFIX)} (host)")
    for info in cached_backports():
        print(f"{'':20} {info['banner']} ({info['suite']}, cached in {info['path']})")
    try:
        print(f"{'qemu choice':20} {choice_from_env()} (--qemu or $HARNESS_QEMU: auto, host, backports)")
    except ValueError as exc:
        ok = False
        print(f"{'qemu choice':20} {exc}")
    kvm = os.path.exists("/dev/kvm")
    print(f"{'/dev/kvm':20} {'present' if kvm else 'absent'} "
          "(whether it boots a kernel is probed at boot; verdicts below)")
    probe = cache_root() / "kvm-probe.json"
    if probe.exists():
        for key, (usable, why) in json.loads(probe.read_text()).items():
            print(f"{'':20} {'kvm' if usable else 'tcg'}: {why}  [{key[:60]}]")
    try:
        print(f"{'debian archive':20} {debian_archive_uri()}")
    except Exception as exc:  # doctor reports, it does not fail on the first problem
        ok = False
        print(f"{'debian archive':20} {exc}")
    root = cache_root()
    print(f"{'cache':20} {root}")
    for kind in ("kernels", "kernels-built", "kernel-source", "toolchains", "qemu", "programs", "initramfs",
                 "kallsyms"):
        d = root / kind
        entries = sorted(p.name for p in d.iterdir() if not p.name.startswith(".")) if d.exists() else []
        print(f"  {kind:18} {len(entries)} cached")
        if kind in _DESCRIBED:
            name, line = _DESCRIBED[kind]
            for e in entries:
                meta = d / e / name
                if meta.exists():
                    print(f"    {line(json.loads(meta.read_text()))}")
    return EXIT_OK if ok else EXIT_FAILURES


#: the cache kinds whose entries doctor describes: the entry's JSON file and its line
_DESCRIBED = {
    "kernels": ("kernel.json", lambda k: f"{k['package']}={k['version']} ({k.get('suite', '')})"),
    "kernels-built": ("build.json", lambda b: f"{b['release']} of {b['tree']} ({b['seconds']:.0f} s, {b['built']})"),
}
