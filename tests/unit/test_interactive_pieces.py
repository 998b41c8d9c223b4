"""Pieces of ``harness shell`` and ``harness boot --gdb`` that need no guest: the kernel symbol
file for gdb (made from kallsyms, read back by gdb itself) and the side-by-side stack renderer."""

from __future__ import annotations

import shutil
import subprocess

from harness.images.symfile import kernel_symbol_file, symbol_file_source
from harness.kernel.kallsyms import Kallsyms, Symbol
from harness.report.text import stack_columns
from tests.support.gating import require

SYMS = Kallsyms([
    Symbol("_text", 0xFFFFFFFF81000000, "T"),
    Symbol("schedule", 0xFFFFFFFF81001000, "T"),
    Symbol("helper", 0xFFFFFFFF81001080, "t"),
    Symbol("helper", 0xFFFFFFFF81002000, "t"),  # a second static function of that name
    Symbol("jiffies", 0xFFFFFFFF82000000, "D"),
    Symbol("fixed_percpu_data", 0x0, "A"),  # per-CPU offsets are left out
    Symbol("ext4_fill_super", 0xFFFFFFFFC0001000, "t", "ext4"),  # modules too
])


def test_symbol_file_source_skips_between_symbols_and_keeps_one_name():
    src, base = symbol_file_source(SYMS)
    assert base == 0xFFFFFFFF81000000
    assert src.startswith('.section .kernel,"awx",@nobits')
    assert src.count('"helper":') == 1 and '"ext4_fill_super"' not in src and "fixed_percpu_data" not in src
    assert ".skip 4096" in src and '.type "jiffies",@object' in src and '.type "schedule",@function' in src
    assert '.size "schedule",128' in src


def test_gdb_reads_the_symbol_file(tmp_path, monkeypatch):
    require(all(shutil.which(t) for t in ("as", "ld", "gdb")), "as, ld (binutils) and gdb: ./dev installs them")
    monkeypatch.setenv("HARNESS_CACHE", str(tmp_path))
    path = kernel_symbol_file(SYMS, "k1")
    assert path == tmp_path / "kallsyms" / "k1.syms.elf" and kernel_symbol_file(SYMS, "k1") == path
    r = subprocess.run(["gdb", "-batch", "-nx", "-ex", f"add-symbol-file {path}",
                        "-ex", "info symbol 0xffffffff81001010", "-ex", "info symbol 0xffffffff81001090",
                        "-ex", "info address jiffies"], capture_output=True, text=True, check=False, timeout=60)
    assert "schedule + 16 in section .kernel" in r.stdout, r.stdout + r.stderr
    assert "helper + 16 in section .kernel" in r.stdout, r.stdout + r.stderr
    assert "0xffffffff82000000" in r.stdout, r.stdout


def _f(addr, sym, mod="prog"):
    return [addr, mod, sym]


def test_stack_columns_draws_every_list_and_each_verdict():
    rec = {
        "task": 42, "comm": "prog", "cookie": 0x300000001, "point": "return_irq",
        "regs": {"ip": 0x401000, "sp": 0x7FF0, "bp": 0x7FF8},
        "frames": {"fp": [_f(0x401000, "c+0x10"), _f(0x401100, "main+0x5")],
                   "cfi": [_f(0x401000, "c+0x10"), _f(0x401050, "b+0x8"), _f(0x401100, "main+0x5")]},
        "stops": {"fp": "fp < sp", "cfi": "end of chain"},
        "verdicts": [{"unwinder": "fp", "oracle": "cfi", "verdict": "explained",
                      "divergences": [{"cause": "fp-prologue-ip",
                                       "text": "fp lacks cfi's frame #1: in the prologue"}]}],
    }
    text = stack_columns(rec)
    lines = text.splitlines()
    assert lines[0] == "pid 42 prog cookie 0x300000001 at return_irq"
    assert "ip=0x401000" in lines[1]
    assert lines[2].split() == ["fp", "cfi"]
    assert lines[3].split()[:4] == ["#0", "c+0x10", "(prog)", "c+0x10"]
    assert lines[4].startswith("  !! #1") and "b+0x8" in lines[4]
    assert "fp stopped: fp < sp" in text and "fp vs cfi: explained" in text
    assert "- [fp-prologue-ip] fp lacks cfi's frame #1" in text
