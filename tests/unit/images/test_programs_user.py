"""harness/images/programs.py: a user's binary, its libraries where the guest's loader looks for
them (sonames, DT_RUNPATH/DT_RPATH, $ORIGIN, --lib), a program linked against a toolchain root
as the harness links its own builds, and the ELF files that are not programs.

Binaries are built here with the host's gcc, and the Debian tools used are the ones on this
machine; readelf (binutils) is the oracle for what each file asks the loader for."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

from harness.images.programs import (
    ProgramError,
    Variant,
    elf_facts,
    needed_sonames,
    user_program,
    user_runtime_files,
)
from tests.support.gating import require

GCC = shutil.which("gcc")


@pytest.fixture(autouse=True)
def _gcc_is_needed():
    require(GCC is not None, "gcc is not installed")


HELLO = '#include <stdio.h>\nint main(void) { puts("hi"); return 0; }\n'


def _readelf_dynamic(path) -> dict[str, list[str]]:
    out = subprocess.run(["readelf", "-d", str(path)], capture_output=True, text=True, check=True).stdout
    tags: dict[str, list[str]] = {}
    for tag, value in re.findall(r"\((NEEDED|RUNPATH|RPATH|SONAME)\)\s+\S+ \S+: \[(.*)\]", out):
        tags.setdefault(tag, []).append(value)
    return tags


def _gcc(tmp: Path, out: Path, src: str, *flags: str) -> Path:
    c = tmp / (out.name + ".c")
    c.write_text(src)
    out.parent.mkdir(parents=True, exist_ok=True)
    subprocess.run([GCC, "-o", str(out), str(c), *flags], check=True, capture_output=True)
    return out


def test_debian_xz_gets_liblzma_under_the_soname_the_loader_asks_for():
    xz = Path("/usr/bin/xz")
    require(xz.exists(), "xz-utils is not installed (./dev installs it)")
    needed = _readelf_dynamic(xz)["NEEDED"]
    files = {g: h for h, g in user_program(xz).runtime}
    for name in needed:
        guest = [g for g in files if g.rsplit("/", 1)[1] == name]
        assert guest, f"{name} (DT_NEEDED of xz) is not in the guest under that name: {sorted(files)}"
        # The bytes are the resolved file's: liblzma.so.5 is a symlink to liblzma.so.5.x.y here.
        assert files[guest[0]] == Path(f"/lib/x86_64-linux-gnu/{name}").resolve()
    assert "/lib64/ld-linux-x86-64.so.2" in files
    # The loader is not copied a second time under libc.so.6's DT_NEEDED for it.
    assert sum(h.name.startswith("ld-linux") for h in files.values()) == 1


def test_runpath_origin_and_inherited_rpath(tmp_path):
    app = tmp_path / "app"
    # libbar: in $ORIGIN/sub of libfoo (libfoo's own DT_RPATH); libbaz: in a directory only the
    # executable's DT_RPATH names, which reaches what its libraries load (libfoo has no
    # DT_RUNPATH, which would cut that chain: ld.so(8)).
    _gcc(tmp_path, app / "lib/sub/libbar.so.2", "int bar(void) { return 2; }\n",
         "-shared", "-fPIC", "-Wl,-soname,libbar.so.2")
    _gcc(tmp_path, tmp_path / "rp/libbaz.so.3", "int baz(void) { return 3; }\n",
         "-shared", "-fPIC", "-Wl,-soname,libbaz.so.3")
    real = _gcc(tmp_path, app / "lib/libfoo.so.1.2.3",
                "int bar(void); int baz(void); int foo(void) { return bar() + baz(); }\n",
                "-shared", "-fPIC", "-Wl,-soname,libfoo.so.1", f"-L{app}/lib/sub", "-l:libbar.so.2",
                f"-L{tmp_path}/rp", "-l:libbaz.so.3", "-Wl,--disable-new-dtags", "-Wl,-rpath,$ORIGIN/sub")
    (app / "lib/libfoo.so.1").symlink_to(real.name)
    exe = _gcc(tmp_path, app / "bin/prog", "int foo(void); int main(void) { return foo(); }\n",
               f"-L{app}/lib", "-l:libfoo.so.1", "-Wl,--disable-new-dtags",
               f"-Wl,-rpath,$ORIGIN/../lib:{tmp_path}/rp")
    assert _readelf_dynamic(exe)["RPATH"] == [f"$ORIGIN/../lib:{tmp_path}/rp"]
    assert _readelf_dynamic(real)["RPATH"] == ["$ORIGIN/sub"]
    files = {g: h for h, g in user_runtime_files(exe, "/user/prog")}
    # $ORIGIN is the guest binary's directory (/user): /user/../lib is /lib there.
    assert files["/lib/libfoo.so.1"] == real.resolve()
    assert files["/lib/sub/libbar.so.2"] == (app / "lib/sub/libbar.so.2").resolve()
    assert files[f"{tmp_path}/rp/libbaz.so.3"] == (tmp_path / "rp/libbaz.so.3").resolve()


def test_runpath_is_not_inherited(tmp_path):
    """DT_RUNPATH applies to the object's own DT_NEEDED only: a library needed by a library is
    not looked for in the executable's DT_RUNPATH (ld.so(8)), so it is missing here too; with
    libfoo's own DT_RUNPATH naming it, it is found."""
    _gcc(tmp_path, tmp_path / "rp/libbaz.so.3", "int baz(void) { return 3; }\n",
         "-shared", "-fPIC", "-Wl,-soname,libbaz.so.3")
    _gcc(tmp_path, tmp_path / "l/libfoo.so.1", "int baz(void); int foo(void) { return baz(); }\n",
         "-shared", "-fPIC", "-Wl,-soname,libfoo.so.1", f"-L{tmp_path}/rp", "-l:libbaz.so.3")
    exe = _gcc(tmp_path, tmp_path / "prog", "int foo(void); int main(void) { return foo(); }\n",
               f"-L{tmp_path}/l", "-l:libfoo.so.1", f"-Wl,-rpath-link,{tmp_path}/rp", "-Wl,--enable-new-dtags",
               f"-Wl,-rpath,{tmp_path}/l:{tmp_path}/rp")
    with pytest.raises(ProgramError, match=r"libfoo\.so\.1 needs libbaz\.so\.3"):
        user_runtime_files(exe, "/user/prog")
    _gcc(tmp_path, tmp_path / "l/libfoo.so.1", "int baz(void); int foo(void) { return baz(); }\n",
         "-shared", "-fPIC", "-Wl,-soname,libfoo.so.1", f"-L{tmp_path}/rp", "-l:libbaz.so.3",
         "-Wl,--enable-new-dtags", f"-Wl,-rpath,{tmp_path}/rp")
    files = {g: h for h, g in user_runtime_files(exe, "/user/prog")}
    assert files[f"{tmp_path}/rp/libbaz.so.3"] == tmp_path / "rp/libbaz.so.3"


def test_lib_lands_at_its_path_and_under_its_soname(tmp_path):
    lib = _gcc(tmp_path, tmp_path / "plug/libplug.so", "int plug(void) { return 1; }\n",
               "-shared", "-fPIC", "-Wl,-soname,libplug.so.7")
    exe = _gcc(tmp_path, tmp_path / "prog", HELLO)
    files = {g: h for h, g in user_program(exe, libs=(str(lib),)).runtime}
    assert files[str(lib)] == lib and files["/lib/x86_64-linux-gnu/libplug.so.7"] == lib
    assert "/lib/x86_64-linux-gnu/libc.so.6" in files
    with pytest.raises(ProgramError, match="--lib .*: no such file"):
        user_program(exe, libs=(str(tmp_path / "nope.so"),))


def test_static_pie_and_i386_are_programs(tmp_path):
    spie = _gcc(tmp_path, tmp_path / "spie", HELLO, "-static-pie")
    f = elf_facts(spie)
    assert f.static and f.pie and f.bits == 64 and user_program(spie).runtime == ()
    assert user_program(spie).variant.pie and user_program(spie).variant.tag.endswith("-static-64-pie")
    nopie = _gcc(tmp_path, tmp_path / "nopie", HELLO, "-no-pie")
    assert not elf_facts(nopie).pie and user_program(nopie).variant.tag.endswith("-dyn-64-nopie")
    try:
        i386 = _gcc(tmp_path, tmp_path / "i386", HELLO, "-m32")
    except subprocess.CalledProcessError as exc:
        require(False, f"gcc -m32 failed (gcc-multilib is not installed?): {exc}")
    p = user_program(i386)
    assert p.variant.bits == 32 and not p.variant.static
    guest = {g for _, g in p.runtime}
    interp = subprocess.run(["readelf", "-l", str(i386)], capture_output=True, text=True).stdout
    assert re.search(r"interpreter: (\S+)\]", interp).group(1) in guest
    assert any(g.endswith("/libc.so.6") for g in guest)


def test_files_that_are_not_programs_are_refused(tmp_path):
    obj = tmp_path / "x.o"
    (tmp_path / "x.c").write_text(HELLO)
    subprocess.run([GCC, "-c", "-o", str(obj), str(tmp_path / "x.c")], check=True)
    with pytest.raises(ProgramError, match=r"object file \(ET_REL\), not a program"):
        user_program(obj)
    so = _gcc(tmp_path, tmp_path / "libx.so", "int x(void) { return 0; }\n", "-shared", "-fPIC")
    with pytest.raises(ProgramError, match="a shared library, not a program"):
        user_program(so)
    libc = Path("/lib/x86_64-linux-gnu/libc.so.6")
    with pytest.raises(ProgramError, match=r"shared library \(DT_SONAME libc\.so\.6\)") as e:
        user_program(libc)
    assert e.value.exit_code == 2
    arm = tmp_path / "arm"
    data = bytearray(_gcc(tmp_path, tmp_path / "x86", HELLO).read_bytes())
    data[18:20] = (183).to_bytes(2, "little")  # e_machine: EM_AARCH64
    arm.write_bytes(bytes(data))
    with pytest.raises(ProgramError, match="EM_AARCH64, not x86-64 or i386"):
        user_program(arm)
    text = tmp_path / "t.txt"
    text.write_text("not an ELF\n")
    with pytest.raises(ProgramError, match="not an ELF file"):
        user_program(text)


# -- programs linked against a toolchain root, as the harness links its own (harness fuzz's) --------

@pytest.mark.parametrize("tc_name", ["host", "trixie", "sid"])
def test_a_program_linked_as_the_harness_links_gets_its_roots_runtime(tc_name):
    # The oracle: the runtime the guest programs' own build gives the same binary.
    from tests.support.toolchains import program

    built = program("callchain", tc_name, Variant(static=False))
    interp = subprocess.run(["readelf", "-l", str(built.path)], capture_output=True, text=True, check=True).stdout
    assert f"interpreter: /tc/{tc_name}/lib64/" in interp
    p = user_program(built.path)
    assert sorted(p.runtime) == sorted((h.resolve(), g) for h, g in built.runtime)
    guest = {g for _, g in p.runtime}
    for name in _readelf_dynamic(built.path)["NEEDED"]:
        assert f"/tc/{tc_name}/lib64/{name}" in guest


def test_a_root_linked_program_with_a_lib_and_an_unknown_root(tmp_path):
    lib = _gcc(tmp_path, tmp_path / "plug/libplug.so", "int plug(void) { return 1; }\n",
               "-shared", "-fPIC", "-Wl,-soname,libplug.so.7")
    exe = _gcc(tmp_path, tmp_path / "prog", HELLO, "-Wl,--dynamic-linker=/tc/host/lib64/ld-linux-x86-64.so.2",
               "-Wl,-rpath,/tc/host/lib64")
    files = {g: h for h, g in user_program(exe, libs=(str(lib),)).runtime}
    assert files[str(lib)] == lib and files["/tc/host/lib64/libplug.so.7"] == lib
    assert files["/tc/host/lib64/libc.so.6"] == Path("/lib/x86_64-linux-gnu/libc.so.6").resolve()
    odd = _gcc(tmp_path, tmp_path / "odd", HELLO, "-Wl,--dynamic-linker=/tc/nosuch/lib64/ld-linux-x86-64.so.2")
    with pytest.raises(ProgramError, match="linked against toolchain root nosuch .*unknown toolchain") as e:
        user_program(odd)
    assert e.value.exit_code == 2


def test_the_harness_links_with_an_rpath_its_libraries_inherit(tmp_path):
    # libstdc++ needs libm, which only the program's DT_RPATH finds in the guest (/tc/host/lib64):
    # a DT_RUNPATH would not reach the needs of the program's libraries
    from harness.images.programs import cflags
    from tests.support.toolchains import need

    src = tmp_path / "x.cc"
    src.write_text("#include <string>\nint main(int c, char **v) { return std::string(v[0]).size() > 1000; }\n")
    exe = tmp_path / "x"
    subprocess.run(["g++", *cflags(need("host"), Variant(static=False)), "-o", str(exe), str(src)], check=True)
    tags = _readelf_dynamic(exe)
    assert tags["RPATH"] == ["/tc/host/lib64"] and "RUNPATH" not in tags
    guest = {g for _, g in user_program(exe).runtime}
    assert {"/tc/host/lib64/libstdc++.so.6", "/tc/host/lib64/libm.so.6"} <= guest


def test_the_sonames_mapped_before_main_are_the_needed_closure(tmp_path):
    """What the engine waits for in a dynamic program's maps before it reads them once and for
    all: DT_NEEDED and theirs (openssl: libssl, libcrypto, libc; libssl's own need of libcrypto
    once), not the loader, not a --lib the program only dlopens; nothing for a static one."""
    openssl = Path("/usr/bin/openssl")
    require(openssl.exists(), "openssl is not installed (./dev installs it)")
    assert needed_sonames(user_program(openssl)) == {"libssl.so.3", "libcrypto.so.3", "libc.so.6"}
    xz = Path("/usr/bin/xz")
    require(xz.exists(), "xz-utils is not installed (./dev installs it)")
    liblzma = next(h for h, g in user_program(xz).runtime if g.endswith("/liblzma.so.5"))
    with_lib = user_program(openssl, (liblzma,))
    assert str(liblzma) in {g for _, g in with_lib.runtime}  # in the guest, for its dlopen
    assert needed_sonames(with_lib) == {"libssl.so.3", "libcrypto.so.3", "libc.so.6"}
    static = _gcc(tmp_path, tmp_path / "s", HELLO, "-static")
    assert needed_sonames(user_program(static)) == frozenset()
