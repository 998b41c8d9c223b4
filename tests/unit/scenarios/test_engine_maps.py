"""harness/scenarios/engine.py's wait for a dynamic program's loader: which needed sonames a
/proc/PID/maps text does not map yet (read too early, the program's libraries would be unknown to
the oracles for the whole run)."""

from __future__ import annotations

from harness.scenarios.engine import unmapped

EARLY = """\
00400000-00401000 r--p 00000000 00:02 7                                  /user/openssl
7ffff7fc3000-7ffff7fc7000 r--p 00000000 00:00 0                          [vvar]
7ffff7fc9000-7ffff7fca000 r--p 00000000 00:02 12                         /lib64/ld-linux-x86-64.so.2
7ffffffde000-7ffffffff000 rw-p 00000000 00:00 0                          [stack]
"""
LOADED = EARLY + """\
7ffff7a00000-7ffff7a28000 r--p 00000000 00:02 13                         /lib/x86_64-linux-gnu/libc.so.6
7ffff7c00000-7ffff7c50000 r--p 00000000 00:02 14                         /lib/x86_64-linux-gnu/libssl.so.3
7ffff7d00000-7ffff7e50000 r--p 00000000 00:02 15                         /lib/x86_64-linux-gnu/libcrypto.so.3
"""
NEEDED = frozenset({"libssl.so.3", "libcrypto.so.3", "libc.so.6"})


def test_before_the_loader_mapped_them_every_needed_soname_is_missing():
    assert unmapped(EARLY, NEEDED) == set(NEEDED)
    assert unmapped(EARLY, frozenset()) == set()


def test_mapped_by_file_name_in_whatever_directory():
    assert unmapped(LOADED, NEEDED) == set()
    half = "\n".join(line for line in LOADED.splitlines() if "libcrypto" not in line)
    assert unmapped(half, NEEDED) == {"libcrypto.so.3"}
    assert unmapped("", NEEDED) == set(NEEDED)  # the program is gone: nothing is mapped
