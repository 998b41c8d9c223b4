"""The real command line on a pseudo-terminal shows its progress as a live status line:
``harness images build`` with a private cache that shares the machine's kernels and toolchain
roots (so nothing is downloaded) and builds the programs and the initramfs afresh."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pexpect
import pytest

from harness.images.cache import cache_root
from tests.support.gating import require

HARNESS = ["-c", "import sys; from harness.cli import main; sys.exit(main())"]
SHARED = ("apt", "kernels", "toolchains")


@pytest.fixture
def fresh_programs_cache(tmp_path):
    real = cache_root()
    require(any((real / "kernels").glob("*/kernel.json")),
            f"no kernel cached in {real} (run ./dev test or harness images build first)")
    cache = tmp_path / "cache"
    cache.mkdir()
    for name in SHARED:
        if (real / name).exists():
            (cache / name).symlink_to(real / name)
    return cache


def _env(cache) -> dict:
    env = {k: v for k, v in os.environ.items() if k != "XDG_CACHE_HOME"}
    return {**env, "HARNESS_CACHE": str(cache), "TERM": "xterm",
            "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}


def test_images_build_on_a_terminal_draws_a_status_line_and_keeps_a_line_per_build(fresh_programs_cache):
    child = pexpect.spawn(sys.executable, [*HARNESS, "images", "build", "--toolchain", "host", "--qemu", "host"],
                          env=_env(fresh_programs_cache), encoding="utf-8", timeout=300, dimensions=(24, 300))
    child.expect(pexpect.EOF)
    child.close()
    out = child.before
    assert child.exitstatus == 0, out[-3000:]
    # Transient states: a carriage return, the status, clear-to-end, and no newline after it.
    live = re.findall(r"\r(\[images\] building [^\r\n]*?\(\d+s\))\x1b\[K(?!\r?\n)", out)
    assert live, repr(out[:2000])
    # Each build ends as a permanent line (the pty turns \n into \r\n) with what it built and where.
    built = re.findall(r"\r\[images\] built (.*?) in [\d.]+s -> (\S+)\x1b\[K\r\n", out)
    assert len(built) == 6, repr(out[:3000])  # five programs and the initramfs
    assert built[-1][0] == "initramfs with 5 programs"
    assert "initramfs: " in out and out.rstrip().endswith(".cpio")  # the command's own result follows


def test_images_build_to_a_file_prints_plain_lines(fresh_programs_cache, tmp_path):
    err = tmp_path / "stderr"
    with open(err, "w") as fp:
        p = subprocess.run([sys.executable, *HARNESS, "images", "build", "--toolchain", "host", "--qemu", "host"],
                           env=_env(fresh_programs_cache), stdout=subprocess.PIPE, stderr=fp, text=True, timeout=300)
    assert p.returncode == 0
    text = err.read_text()
    assert "\r" not in text and "\x1b" not in text
    lines = text.splitlines()
    assert sum(ln.startswith("[images] building ") for ln in lines) == 6
    assert sum(ln.startswith("[images] built ") for ln in lines) == 6
    assert len(lines) == 12, lines
