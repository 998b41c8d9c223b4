"""The guest's channels without a guest: the kernel console's syslog lines (panic detection from
the kernel's own records only), the program-output frames, and the QEMU command line that
/init's port lookup depends on."""

from __future__ import annotations

import re
import subprocess

import pytest

from harness.errors import HarnessError
from harness.images.initramfs import INIT_SCRIPT
from harness.transport.channels import (
    END,
    PANIC_RE,
    FrameDecoder,
    KernelRecord,
    OutputFrameError,
    panic_message,
    parse_frame,
    parse_kernel_line,
)
from harness.transport.qemu import CONTROL_PCI_ADDR, OUTPUT_PCI_ADDR, MachineConfig

# Death headers as the guest kernels print them on the console (console_msg_format=syslog).
KERNEL_DEATHS = [
    "<0>[   12.345678] Kernel panic - not syncing: sysrq triggered crash",
    "<4>[    5.000001] Oops: 0002 [#1] PREEMPT SMP NOPTI",
    "<4>[    5.000001] Oops: 0000 [#1] SMP PTI",
    "<4>[    5.000001] Oops: general protection fault, probably for non-canonical address 0xdead000000000100: "
    "0000 [#1] SMP NOPTI",
    "<4>[    5.000001] general protection fault, probably for non-canonical address 0xdead000000000100: "
    "0000 [#1] PREEMPT SMP PTI",
    "<4>[    5.000001] Oops: int3: 0000 [#1] SMP NOPTI",
    "<4>[    5.000001] int3: 0000 [#1] PREEMPT SMP NOPTI",
    "<1>[    5.000000] BUG: kernel NULL pointer dereference, address: 0000000000000000",
    "<1>[    5.000000] BUG: unable to handle page fault for address: ffffffffc0000000",
    "<2>[    5.000000] kernel BUG at mm/slub.c:4321!",
    "<0>[    1.000000] VFS: Unable to mount root fs on unknown-block(0,0)",
    "<0>Kernel panic - not syncing: without printk.time",
]

# What a program can make appear on the kernel console, and kernel lines that are no death.
NOT_DEATHS = [
    # /dev/kmsg: the kernel gives user space facility 1 (LOG_USER) at least
    "<8>[    5.466435] Kernel panic - not syncing: forged via /dev/kmsg",
    "<12>[    5.466435] Oops: 0002 [#1] PREEMPT SMP NOPTI",
    "<9>[    1.0] BUG: kernel NULL pointer dereference, address: 0",
    # raw text on the console (a root program that made itself a /dev/console): no <PRI>
    "Kernel panic - not syncing: raw",
    "Oops: 0002 [#1] SMP",
    "[    1.000000] Kernel panic - not syncing: raw with a timestamp",
    # kernel records that carry a program's name or path first: a task name is 15 characters
    "<4>[    5.0] Oops: 0000 [#1] (123): attempted to duplicate a private mapping with mremap.  This is not supported.",
    "<4>[    5.0] process '/x: 0000 [#1] SMP' started with executable stack",
    "<6>[    5.0] traps: hostile[123] general protection fault ip:401000 sp:7ffc error:0 in hostile[401000+1000]",
    "<6>[    5.0] Oops: [123]: segfault at 0 ip 0000000000401136 sp 00007ffc error 6",
    "<4>[    5.0] hostile (123): drop_caches: 3 Oops: 0000 [#1] SMP",
    # a kernel record below warning level is no death header even with the words
    "<6>[    5.0] Kernel panic - not syncing: at info level",
    "<4>[    5.0] ---[ end trace 0000000000000000 ]---",
    "<6>[    0.000000] Linux version 7.3.4+deb13-cloud-amd64",
]


@pytest.mark.parametrize("line", KERNEL_DEATHS)
def test_kernel_deaths_are_seen(line):
    assert panic_message(line) == parse_kernel_line(line).text


@pytest.mark.parametrize("line", NOT_DEATHS)
def test_what_programs_can_print_is_no_death(line):
    assert panic_message(line) is None


def test_kernel_line_fields():
    assert parse_kernel_line("<6>[    0.000000] Linux version 7.3") == KernelRecord(0, 6, "Linux version 7.3")
    rec = parse_kernel_line("<14>[  123.456789] harness init: hello")
    assert (rec.facility, rec.level, rec.text, rec.from_kernel) == (1, 6, "harness init: hello", False)
    assert parse_kernel_line("<4>[    1.0][    T1] Oops: x").text == "Oops: x"  # CONFIG_PRINTK_CALLER
    assert parse_kernel_line("no prefix") is None
    assert parse_kernel_line("") is None
    assert PANIC_RE.match("Kernel panic - not syncing: x")


def test_output_frames():
    assert parse_frame("7 68656c6c6f0a") == (7, b"hello\n")
    assert parse_frame("7 " + "00" * 32) == (7, bytes(32))
    assert parse_frame("12 6162                            ") == (12, b"ab")  # hexdump's last block, padded
    assert parse_frame("12 .") == (12, END)
    for bad in ("@@H exit 1 0", "x 00", "7", "7 ", "7 0", "7 zz", "7 " + "00" * 33, "-1 00", "٣ 00"):
        with pytest.raises(OutputFrameError):
            parse_frame(bad)
    assert issubclass(OutputFrameError, HarnessError) and issubclass(OutputFrameError, ValueError)


def test_frame_decoder_reassembles_split_feeds_and_counts_garbage():
    d = FrameDecoder()
    stream = b"1 6869\n2 00ff\n1 .\n2 .\n"
    got = []
    for i in range(len(stream)):  # one byte at a time: every split point
        got += d.feed(stream[i:i + 1])
    assert got == [(1, b"hi"), (2, b"\x00\xff"), (1, END), (2, END)]
    assert d.feed(b"garbage\r\n\n3 41\r\n") == [(3, b"A")]
    assert d.bad == 1 and "garbage" in d.bad_lines[0]
    assert d.feed(b"x" * 5000) == [] and d.bad == 2  # a line longer than any frame is dropped


def test_busybox_hexdump_frames_decode_to_the_bytes(tmp_path):
    """The frames are what /init's busybox hexdump writes: every byte value, a last partial
    block, and the end line, decoded back by the host's decoder."""
    data = bytes(range(256)) * 3 + b"no newline at the end"
    init = INIT_SCRIPT.read_text()
    fmt = re.search(r'hexdump -v -e "(.*)" >&4', init).group(1)
    # a program's forwarder (the run command) frames as the shell commands' frames() does
    assert re.search(r'exec hexdump -v -e "(.*)" < /tmp/\.out\.\$id >&4 &', init).group(1) == fmt.replace("$1", "$id")
    fmt = fmt.replace("$1", "9").replace('\\"', '"').replace("\\\\n", "\\n")
    out = subprocess.run(["busybox", "hexdump", "-v", "-e", fmt], input=data, capture_output=True, check=True).stdout
    d = FrameDecoder()
    pieces = d.feed(out + b"9 .\n")
    assert d.bad == 0 and pieces[-1] == (9, END)
    assert b"".join(c for _, c in pieces[:-1]) == data


def test_command_line_has_the_ports_init_looks_for():
    cmd = MachineConfig("vmlinux", "initrd", qemu=["qemu-system-x86_64"]).command(__import__("pathlib").Path("/w"))
    line = " ".join(cmd)
    assert "console=ttyS0 console_msg_format=syslog" in line
    assert f"pci-serial,chardev=ctl,addr={CONTROL_PCI_ADDR}" in line
    assert f"pci-serial,chardev=out,addr={OUTPUT_PCI_ADDR}" in line
    init = INIT_SCRIPT.read_text()
    assert f"ctl=$(port {CONTROL_PCI_ADDR})" in init and f"out=$(port {OUTPUT_PCI_ADDR})" in init
