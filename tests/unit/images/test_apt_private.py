"""The private apt's own configuration, as apt itself reads it (``apt-config dump`` with the
options every private apt command gets): its binary caches kept beside its lists whatever the
host says, and none of the host's hooks after ``apt-get update``."""

from __future__ import annotations

import shutil
import subprocess

from harness.images.apt import PrivateApt
from tests.support.gating import require


def _dump(apt: PrivateApt) -> str:
    r = subprocess.run(["apt-config", *apt._opts(), "dump"], capture_output=True, text=True, timeout=60, check=True)
    return r.stdout


def test_private_apt_keeps_its_binary_caches_and_runs_no_host_hook(tmp_path, monkeypatch):
    require(shutil.which("apt-config") is not None, "apt-config (Debian's apt)")
    monkeypatch.setenv("HARNESS_CACHE", str(tmp_path))
    apt = PrivateApt()
    out = _dump(apt)
    assert 'Dir::Cache::pkgcache "pkgcache.bin";' in out, out
    assert 'Dir::Cache::srcpkgcache "srcpkgcache.bin";' in out, out
    assert f'Dir::Cache "{tmp_path / "apt" / "cache"}";' in out, out
    # a cleared list stays as an empty node (`APT::Update::Post-Invoke-Success "";`), without items
    assert not [ln for ln in out.splitlines() if ln.startswith(("APT::Update::Post-Invoke-Success::",
                                                                 "APT::Update::Post-Invoke::",
                                                                 "APT::Update::Pre-Invoke::"))], out


def test_the_host_hooks_are_cleared_not_only_absent(tmp_path, monkeypatch):
    """A host configuration with a hook (an ``APT_CONFIG`` of this test's own, read where
    /etc/apt/apt.conf would be): apt reads it, and the private configuration clears it."""
    require(shutil.which("apt-config") is not None, "apt-config (Debian's apt)")
    host = tmp_path / "host.conf"
    host.write_text('APT::Update::Post-Invoke-Success { "touch /nonexistent/hook"; };\n'
                    'Dir::Cache::pkgcache "";\n')
    monkeypatch.setenv("HARNESS_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("APT_CONFIG", str(host))
    plain = subprocess.run(["apt-config", "dump"], capture_output=True, text=True, timeout=60, check=True).stdout
    assert "touch /nonexistent/hook" in plain  # the host's hook is read ...
    out = _dump(PrivateApt())
    assert "touch /nonexistent/hook" not in out, out  # ... and cleared for the private lists
    assert 'Dir::Cache::pkgcache "pkgcache.bin";' in out, out
