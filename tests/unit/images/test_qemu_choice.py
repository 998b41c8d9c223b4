"""Which QEMU runs, without booting one: the command prefix built from a root, version parsing,
the ``auto`` decision and ``$HARNESS_QEMU``."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.images.errors import ImageError
from harness.images.qemu import (
    DEFAULT_CHOICE,
    ENV_VAR,
    HOST_PREFIX,
    Qemu,
    QemuImageError,
    choice_from_env,
    choose,
    command_prefix,
    parse_version,
    resolve_qemu,
)

BANNER_11 = "QEMU emulator version 11.1.3 (Debian 1:11.1.3+ds-1~bpo13+1)"
BANNER_10_0 = "QEMU emulator version 10.0.13 (Debian 1:10.0.13+ds-0+deb13u1)"
BANNER_7 = "QEMU emulator version 7.2.22 (Debian 1:7.2+dfsg-7+deb12u18+b3)"


def test_prefix_runs_the_roots_loader_on_the_roots_libraries():
    root = Path("/cache/qemu/abc/root")
    assert command_prefix(root) == [
        "env", "QEMU_MODULE_DIR=/cache/qemu/abc/root/usr/lib/x86_64-linux-gnu/qemu",
        "/cache/qemu/abc/root/usr/lib64/ld-linux-x86-64.so.2",
        "--library-path", "/cache/qemu/abc/root/usr/lib/x86_64-linux-gnu:/cache/qemu/abc/root/lib/x86_64-linux-gnu",
        "/cache/qemu/abc/root/usr/bin/qemu-system-x86_64",
    ]


def test_prefix_refuses_a_root_the_library_path_cannot_hold():
    with pytest.raises(QemuImageError, match="':'"):
        command_prefix(Path("/odd:dir/root"))


@pytest.mark.parametrize("banner, version", [
    (BANNER_11, (11, 1, 3)),
    (BANNER_7, (7, 2, 22)),
    ("QEMU emulator version 10.2.0", (10, 2, 0)),
    ("QEMU emulator version 9.2", (9, 2)),
    ("unavailable", None),
    ("", None),
])
def test_parse_version(banner, version):
    assert parse_version(banner) == version


def host() -> Qemu:
    return Qemu("host", HOST_PREFIX, BANNER_7)


def backports(banner: str = BANNER_11):
    return lambda: Qemu("backports", ("env", "ld.so", "qemu"), banner, package="qemu-system-x86=11")


def broken():
    raise QemuImageError("apt could not fetch qemu-system-x86=1:11.1.3: 404 Not Found")


def test_auto_takes_backports_when_it_builds():
    q = choose("auto", host, backports())
    assert q.name == "backports" and "11.1.3" in q.why and q.version == (11, 1, 3)


def test_auto_falls_back_to_the_host_and_says_why():
    q = choose("auto", host, broken)
    assert q.name == "host" and q.prefix == HOST_PREFIX
    assert "404 Not Found" in q.why and "host" in q.why


def test_auto_falls_back_when_backports_still_flushes_on_stops():
    q = choose("auto", host, backports(BANNER_10_0))
    assert q.name == "host" and "older than 10.2" in q.why


def test_explicit_choices_do_not_fall_back():
    assert choose("host", host, broken).name == "host"
    assert choose("backports", host, backports()).name == "backports"
    with pytest.raises(ImageError, match="404"):
        choose("backports", host, broken)
    with pytest.raises(ValueError, match="known"):
        choose("qemu9", host, backports())


def test_choice_from_env():
    assert choice_from_env({}) == DEFAULT_CHOICE
    assert choice_from_env({ENV_VAR: ""}) == DEFAULT_CHOICE
    assert choice_from_env({ENV_VAR: "backports"}) == "backports"
    assert choice_from_env({ENV_VAR: " auto "}) == "auto"
    with pytest.raises(ValueError, match=ENV_VAR):
        choice_from_env({ENV_VAR: "sid"})


def test_explicit_prefix_is_a_custom_qemu():
    q = resolve_qemu(["/nonexistent/qemu-system-x86_64"])
    assert q.name == "custom" and q.prefix == ("/nonexistent/qemu-system-x86_64",) and q.banner == "unavailable"
    assert q.describe()["prefix"] == ["/nonexistent/qemu-system-x86_64"]


def test_machine_config_follows_harness_qemu(monkeypatch):
    from harness.transport.qemu import MachineConfig

    monkeypatch.setenv(ENV_VAR, "host")
    assert MachineConfig("vmlinux", "initrd").qemu == list(HOST_PREFIX)
    assert MachineConfig("vmlinux", "initrd", qemu=["/opt/qemu"]).qemu == ["/opt/qemu"]
    monkeypatch.setenv(ENV_VAR, "qemu7")
    with pytest.raises(ValueError, match="qemu7"):
        MachineConfig("vmlinux", "initrd")
