"""Debian's perf, without a guest: the perf.data reader, the perf script parser and the comparison
with our stitcher and unwinder, on real captures of Debian's linux-perf 7.3.4.

* ``data/debperf-7.3.4-compat-fp/``: ``harness perf --debian-perf compat-fp --seconds 2 --save``
  on the default guest (7.3.4+deb13-cloud-amd64, TCG): perf record --call-graph fp,defer
  --user-regs=ip,sp,bp of perfcc -d running the 32-bit callchain program; perf.data, both perf
  script texts, evlist -v, perfcc's capture.  It holds both named differences seen so far: the
  sample taken during the exec (execve-replaced) and a sample after its entry's record
  (perf-script-sample-after-record).
* ``data/debperf-7.3.4-host-6.18-nodefer/``: the same perf record on this build machine's 6.18
  kernel, which refuses defer_callchain: perf switched it off silently (evlist shows no
  ``defer_callchain: 1``), the samples carry FP user chains.
"""

from __future__ import annotations

import gzip
import re
from pathlib import Path

import pytest

from harness.cli import main
from harness.images.debperf import GUEST_LIB, GUEST_PERF, wrapper_script
from harness.perf.debian import compare, total
from harness.perf.debian_run import (
    DebianFiles,
    DebianFilesError,
    DeferIgnored,
    check_defer,
    check_files,
    deferred_unsupported,
)
from harness.perfparse.perfdata import parse_perf_data
from harness.perfparse.records import CallchainDeferred, PerfFormatError, Sample, parse_capture
from harness.perfparse.script import ScriptFormatError, parse_script
from harness.report.perf import debian_table
from tests.support.gating import require
from tests.support.paths import TEST_DATA

DATA = TEST_DATA
COMPAT = DATA / "debperf-7.3.4-compat-fp"
HOST = DATA / "debperf-7.3.4-host-6.18-nodefer"


def gz(path: Path) -> bytes:
    return gzip.decompress(path.read_bytes())


@pytest.fixture(scope="module")
def compat() -> DebianFiles:
    return DebianFiles(gz(COMPAT / "perf.data.gz"), (COMPAT / "evlist.txt").read_text(),
                       gz(COMPAT / "script-merged.txt.gz").decode(), gz(COMPAT / "script-unmerged.txt.gz").decode(),
                       gz(COMPAT / "perfcc.out.gz"), (COMPAT / "record.log").read_text())


@pytest.fixture(scope="module")
def compat_program():
    """The 32-bit program the capture ran (the same content-keyed build), for the causes' ELF reads."""
    from harness.images.errors import ImageError
    from harness.images.programs import Variant, build_program
    from harness.images.toolchain import get_toolchain

    try:
        return build_program("callchain", get_toolchain("host"), Variant(bits=32, shadow=True))
    except ImageError as exc:
        require(False, f"the host toolchain cannot build guest_programs/callchain.c 32-bit: {exc}")


# -- perf.data -------------------------------------------------------------------------------------
def test_perf_data_reader_on_a_real_file(compat):
    d = parse_perf_data(compat.perf_data)
    assert d.header_size == 104 and len(d.attrs) == 1
    a = d.attr
    assert a.flag("defer_callchain") and a.flag("defer_output") and a.flag("sample_id_all")
    assert a.regs_user == ("bp", "sp", "ip")  # --user-regs=ip,sp,bp: mask 0x1c0, in bit order
    samples = [r for r in d.records if isinstance(r, Sample)]
    deferred = [r for r in d.records if isinstance(r, CallchainDeferred)]
    # perf record said how many samples it wrote
    assert len(samples) == int(re.search(r"\((\d+) samples\)", compat.record_log).group(1)) == 385
    assert len(deferred) == 651
    assert all(s.deferred and s.user is None and s.regs is not None for s in samples)
    times = [r.time for r in d.kernel_records() if getattr(r, "time", None) is not None]
    assert times == sorted(times)
    # the samples' cookies carry the CPU + 1 in the low half (mainline), one CPU here
    assert {s.cookie & 0xFFFFFFFF for s in samples} == {1}


def test_perf_data_without_defer_is_read_too():
    d = parse_perf_data(gz(HOST / "perf.data.gz"))
    assert not d.attr.flag("defer_callchain")
    samples = [r for r in d.records if isinstance(r, Sample)]
    assert len(samples) == 17 and not any(s.deferred for s in samples)
    assert all(s.user for s in samples)


@pytest.mark.parametrize("cut", [0, 7, 8, 50, 103, 104, 200])
def test_truncated_perf_data_is_a_typed_error(compat, cut):
    with pytest.raises(PerfFormatError) as e:
        parse_perf_data(compat.perf_data[:cut])
    assert e.value.exit_code == 2 and "byte" in str(e.value)


def test_a_record_cut_inside_the_data_section_names_its_offset(compat):
    d = parse_perf_data(compat.perf_data)
    broken = bytearray(compat.perf_data)
    # a record header claiming fewer bytes than a header has
    first = d.data_offset
    broken[first + 6:first + 8] = (4).to_bytes(2, "little")
    with pytest.raises(PerfFormatError) as e:
        parse_perf_data(bytes(broken))
    assert e.value.field == "header.size" and e.value.offset == first + 6


def test_not_a_perf_data_file():
    with pytest.raises(PerfFormatError, match="magic"):
        parse_perf_data(b"PERFCC01" + bytes(200))


# -- perf script text ------------------------------------------------------------------------------
def test_script_parser_on_real_text(compat):
    merged = parse_script(compat.merged)
    unmerged = parse_script(compat.unmerged)
    assert len(merged) == 385 and not any(e.deferred for e in merged)
    deferred = [e for e in unmerged if e.deferred]
    assert len(deferred) == 651 and len(unmerged) == 385 + 651
    assert all(e.sample_cookie is not None for e in unmerged if not e.deferred)
    first = merged[0]
    assert first.event == "cpu-clock" and first.period == 5000000 and first.pid == first.tid
    assert all(f.dso for f in first.frames)


def test_script_parser_errors_name_the_line():
    good = "prog  10/10   1.000001:    5000000 cpu-clock: \n\t          401000 main+0x0 (/p)\n\n"
    assert parse_script(good)[0].ips == (0x401000,)
    with pytest.raises(ScriptFormatError) as e:
        parse_script(good + "garbage here\n")
    assert e.value.line == 4 and e.value.exit_code == 2
    with pytest.raises(ScriptFormatError, match="outside an entry"):
        parse_script("\t  401000 main+0x0 (/p)\n")
    with pytest.raises(ScriptFormatError, match="not a frame line"):
        parse_script("prog  10/10   1.000001:    1 cpu-clock:\n\tnot hex\n")
    with pytest.raises(ScriptFormatError, match="without a blank line"):
        parse_script("prog 1/1 1.000001: 1 cpu-clock:\nprog 1/1 1.000002: 1 cpu-clock:\n")


# -- the comparison --------------------------------------------------------------------------------
def test_real_capture_against_stitcher_and_unwinder(compat, compat_program):
    from harness.perf.capture import resolver

    r = check_files(compat, resolver([compat_program]))
    assert r.perf_version == "7.3.4" and r.release.startswith("7.3.4")
    assert (r.samples, r.deferred_samples, r.deferred_records, r.joined) == (385, 385, 651, 385)
    assert (r.merged_compared, r.merged_equal) == (385, 384)
    assert (r.unmerged_compared, r.unmerged_equal) == (385 + 651, 385 + 651)
    assert (r.ours_compared, r.ours_equal) == (368, 367)
    assert r.regs_compared == r.regs_equal == 102
    assert r.records_shared == r.records_shared_equal == 637
    assert dict(r.named) == {"execve-replaced": 1, "perf-script-sample-after-record": 1}
    assert r.unexplained == [] and r.ok
    assert "the entry point of" in r.examples["execve-replaced"]


def test_without_perfcc_only_perf_script_is_compared(compat):
    data = parse_perf_data(compat.perf_data)
    r = compare(data, parse_script(compat.merged), parse_script(compat.unmerged))
    assert r.ours_compared == r.regs_compared == r.records_shared == 0
    assert r.merged_equal == 384 and dict(r.named) == {"perf-script-sample-after-record": 1} and r.ok


def test_a_changed_frame_is_unexplained(compat):
    """The comparison can fail: one user address changed in the merged text."""
    data = parse_perf_data(compat.perf_data)
    merged = parse_script(compat.merged)
    victim = next(e for e in merged if len(e.frames) > 1 and e.frames[-1].ip < 1 << 32)
    lines = compat.merged.splitlines()
    ln = victim.line + len(victim.frames) - 1  # the last frame's line (1-based)
    lines[ln] = lines[ln].replace(f"{victim.frames[-1].ip:x} ", f"{victim.frames[-1].ip + 1:x} ", 1)
    r = compare(data, parse_script("\n".join(lines) + "\n"), parse_script(compat.unmerged))
    assert len(r.unexplained) == 1 and f"line {victim.line}" in r.unexplained[0] and not r.ok


def test_a_missing_entry_is_unexplained(compat):
    data = parse_perf_data(compat.perf_data)
    unmerged = parse_script(compat.unmerged)
    r = compare(data, parse_script(compat.merged), unmerged[1:])
    assert any("printed by no perf script entry" in u for u in r.unexplained)


def test_non_deferred_samples_compare_with_their_fp_chain():
    files = DebianFiles(gz(HOST / "perf.data.gz"), (HOST / "evlist.txt").read_text(),
                        (HOST / "script-merged.txt").read_text(), (HOST / "script-unmerged.txt").read_text(), None)
    r = compare(parse_perf_data(files.perf_data), parse_script(files.merged), parse_script(files.unmerged))
    assert (r.samples, r.deferred_samples, r.merged_compared, r.merged_equal) == (17, 0, 17, 17)
    assert r.unmerged_equal == 17 and r.ok


def test_totals_add_up(compat):
    data = parse_perf_data(compat.perf_data)
    one = compare(data, parse_script(compat.merged), parse_script(compat.unmerged))
    t = total([one, one])
    assert t.samples == 2 * one.samples and t.named["perf-script-sample-after-record"] == 2
    assert "merged callchains compared" in debian_table(t)


# -- defer_callchain must have been honoured -------------------------------------------------------
def test_evlist_with_defer_passes(compat):
    assert "defer_callchain: 1" in compat.evlist
    assert check_defer(compat.evlist) is None  # raises DeferIgnored otherwise


def test_a_perf_that_dropped_defer_is_refused():
    """Debian's perf on a kernel that refuses defer_callchain records without it, silently."""
    evlist = (HOST / "evlist.txt").read_text()
    assert "defer_callchain" not in evlist
    with pytest.raises(DeferIgnored, match="defer_callchain: 1") as e:
        check_defer(evlist)
    assert e.value.exit_code == 2
    with pytest.raises(DeferIgnored, match="no event"):
        check_defer("")


@pytest.mark.parametrize("version, lacks", [
    ("6.1.176-1", "no deferred unwinding"),  # bookworm
    ("6.12.117-1", "no deferred unwinding"),  # trixie
    ("6.18.44", "no perf defer_callchain"),
    ("6.19.1-1", None),
    ("7.3.4-1~bpo13+1", None),  # trixie-backports, the default kernel
    ("7.3.4+deb13-cloud-amd64", None),
])
def test_which_kernels_have_deferred_callchains(version, lacks):
    why = deferred_unsupported(version)
    assert (why is None) if lacks is None else (lacks in why and version in why)


# -- saved runs and the command line ---------------------------------------------------------------
def test_saved_run_round_trip_and_cli_check(compat, compat_program, tmp_path, capsys):
    d = tmp_path / "run"
    compat.save(d)
    (d / "resolve.json").write_text(f'{{"{compat_program.guest_path}": "{compat_program.path}"}}')
    again = DebianFiles.load(d)
    assert again.perf_data == compat.perf_data and again.merged == compat.merged
    assert main(["perf", "--debian-perf", "--check", str(d)]) == 0
    out = capsys.readouterr().out
    assert "named difference: execve-replaced" in out and re.search(r"unexplained\s+0", out)


def test_cli_check_of_an_incomplete_directory_is_bad_input(tmp_path, capsys):
    with pytest.raises(DebianFilesError):
        DebianFiles.load(tmp_path)
    assert main(["perf", "--debian-perf", "--check", str(tmp_path)]) == 2
    assert "missing perf.data" in capsys.readouterr().err


def test_guest_wrapper_runs_perf_through_its_own_loader():
    text = wrapper_script().decode()
    assert text.startswith("#!/bin/sh\n") and f"{GUEST_LIB}/ld-linux-x86-64.so.2 --library-path {GUEST_LIB}" in text
    assert GUEST_PERF.startswith("/debperf/")


# -- stack-written-during-entry --------------------------------------------------------------------
def _sample(stack: bytes, misc: int) -> Sample:
    from harness.regs import UserRegs

    regs = UserRegs(ip=0x401000, sp=0x7FFFFFFFE000, bp=0x7FFFFFFFE010, cs=0x33, ss=0x2B)
    return Sample(0, misc, 0xFFFFFFFF81000000, 1, 1, 1, 0, 1, (), (), None, 0x100000001, 2, regs, len(stack), stack)


def test_a_stack_written_in_the_kernel_between_sample_and_walk_is_named():
    from harness.perf.debian import written_during_entry

    text = int.from_bytes(b"ost/fork", "little")
    dump = bytes(0x20) + (0x402000).to_bytes(8, "little") + bytes(0x18)  # our frame 1 comes from here
    kernel_mode, user_mode = 1, 2
    why = written_during_entry(_sample(dump, kernel_mode), (0x401000, 0x402000), (0x401000, text))
    assert why and "'ost/fork'" in why and "nowhere in the 64 stack bytes" in why
    # refused: in user mode nothing but the task itself could have written its stack meanwhile
    assert written_during_entry(_sample(dump, user_mode), (0x401000, 0x402000), (0x401000, text)) is None
    # refused: the kernel's value was on the stack at the sample already
    with_text = dump[:0x30] + b"ost/fork" + dump[0x38:]
    assert written_during_entry(_sample(with_text, kernel_mode), (0x401000, 0x402000), (0x401000, text)) is None
    # refused: our value did not come from the dump either
    assert written_during_entry(_sample(dump, kernel_mode), (0x401000, 0x403000), (0x401000, text)) is None
    # refused: they differ at the sampled ip itself
    assert written_during_entry(_sample(dump, kernel_mode), (0x401000,), (0x401001,)) is None


def test_a_word_the_kernel_wrote_at_a_known_frame_address_is_named_even_if_its_text_is_elsewhere():
    """forkexec in CI: readlink wrote "...ost/fork..." over the word _dl_get_origin's rbp + 8 points
    at, between perfcc's dump (a zero there) and the kernel's walk; the same text stood elsewhere in
    the dump (argv), so only the address of the word proves it."""
    from harness.perf.debian import written_during_entry
    from harness.unwind.user import Frame, Trace, UnwinderType

    text = int.from_bytes(b"ost/fork", "little")
    dump = bytes(0x18) + (0x402000).to_bytes(8, "little") + bytes(0x10) + b"ost/fork" + bytes(8)
    s = _sample(dump, 1)  # kernel mode; bp = sp + 0x10, so fp + 8 is dump[0x18:0x20]
    trace = Trace([Frame(0x401000, s.regs.sp, s.regs.bp, UnwinderType.REGS),
                   Frame(0x402000, s.regs.bp + 16, 0, UnwinderType.FP)])
    ours, theirs = (0x401000, 0x402000), (0x401000, text)
    assert written_during_entry(s, ours, theirs) is None  # the text is in the dump: no proof without the address
    why = written_during_entry(s, ours, theirs, trace)
    assert why and f"the word at {s.regs.bp + 8:#x} (fp + 8)" in why and "'ost/fork'" in why
    # refused: the word at that address is not what our walk reported
    assert written_during_entry(s, (0x401000, 0x403000), theirs, trace) is None
    # refused: in user mode
    assert written_during_entry(_sample(dump, 2), ours, theirs, trace) is None


# -- several events in one perf.data ----------------------------------------------------------------
def test_records_of_several_events_are_read_with_their_own_attr():
    """Two events (perf sets PERF_SAMPLE_IDENTIFIER then): each sample is parsed with the attr its
    identifier names; the file is laid out as perf.data-file-format.txt says."""
    import struct

    from tests.support import perf_build as pb

    ident, ip, tid, time_, chain = 1 << 16, 1 << 0, 1 << 1, 1 << 2, 1 << 5
    a = pb.attr(sample_type=ident | ip | tid | time_, flags=("sample_id_all",), regs_mask=0, stack_user=0)
    b = pb.attr(sample_type=ident | ip | tid | time_ | chain, flags=("sample_id_all",), regs_mask=0, stack_user=0)
    s1 = struct.pack("<QQIIQ", 11, 0x401000, 5, 5, 100)
    s2 = struct.pack("<QQIIQQQQ", 22, 0x402000, 5, 5, 50, 2, pb.CONTEXT_USER, 0x402000)
    data = b"".join(struct.pack("<IHH", 9, 2, 8 + len(body)) + body for body in (s1, s2))
    attr_size = len(a) + 16
    head = 104
    attrs_off = head
    ids_off = attrs_off + 2 * attr_size
    data_off = ids_off + 16
    entries = a + struct.pack("<QQ", ids_off, 8) + b + struct.pack("<QQ", ids_off + 8, 8)
    header = struct.pack("<8sQQQQQQQQ4Q", b"PERFILE2", head, attr_size, attrs_off, 2 * attr_size,
                         data_off, len(data), 0, 0, 0, 0, 0, 0)
    d = parse_perf_data(header + entries + struct.pack("<QQ", 11, 22) + data)
    assert [ea.ids for ea in d.attrs] == [(11,), (22,)]
    first, second = d.records  # time-ordered: the second event's sample (time 50) first
    assert (first.ip, first.time, first.user) == (0x402000, 50, (0x402000,))
    assert (second.ip, second.time, second.user) == (0x401000, 100, None)
    bad = bytearray(header + entries + struct.pack("<QQ", 11, 22) + data)
    bad[data_off + 8:data_off + 16] = struct.pack("<Q", 33)
    with pytest.raises(PerfFormatError, match="sample id 33"):
        parse_perf_data(bytes(bad))


def test_a_second_record_for_one_entry_is_unexplained(compat):
    data = parse_perf_data(compat.perf_data)
    k = next(i for i, rec in enumerate(data.records) if isinstance(rec, CallchainDeferred))
    data.records.insert(k + 1, data.records[k])
    r = compare(data, parse_script(compat.merged), parse_script(compat.unmerged), parse_capture(compat.perfcc))
    assert any("a second CALLCHAIN_DEFERRED" in u for u in r.unexplained)
