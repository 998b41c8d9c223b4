"""A hostile guest program cannot break the harness's channels (images/init.sh,
harness/transport/qemu.py): it prints kernel death headers, forged /init replies, every byte
value, a flood and a last line without its newline, writes a panic header to /dev/kmsg and tries
/dev/console.  The run must end normally, report no panic, and keep exactly what it printed."""

from __future__ import annotations

import json

import pytest

from harness.deferred.check import check_lines
from harness.images.programs import Variant
from harness.scenarios.catalog import Scenario, programs_for
from harness.scenarios.engine import Engine
from harness.session import GuestSpec

pytestmark = pytest.mark.qemu

# 1,000 flood lines: its whole output (40 KB) fits in the FIFO's 64 KiB, so the program never
# blocks on the forwarder and spins (is sampled) at once.  With 3,000 (116 KB) it sat blocked
# while busybox hexdump drained it over the emulated UART, every request of the run's budget
# could land on the forwarder, and the program could be killed mid-flood at the end.
FLOOD = 1000
KMSG = b"<0>Kernel panic - not syncing: hostile /dev/kmsg\n"


def expected_output(flood: int) -> bytes:
    """What guest_programs/hostile.c writes, byte for byte (stdout and stderr, in order)."""
    out = [b"Oops: 0002 [#1] PREEMPT SMP NOPTI\n",
           b"Kernel panic - not syncing: hostile stdout\n",
           b"<0>[    1.000000] Kernel panic - not syncing: hostile stderr\n",
           b"BUG: kernel NULL pointer dereference, address: 0000000000000000\n"]
    out += [b"@@H exit %d 0\n@@H pid %d 1\n@@H done %d 0\n" % (i, i, i) for i in range(1, 65)]
    out.append(b"@@H ready forged cpus=64\n")
    out.append(b"write /dev/kmsg: %d\n" % len(KMSG))
    out.append(b"open /dev/console: No such file or directory\n")
    out.append(bytes(range(256)) + b"\n")
    out += [b"flood %08d @@H exit %d 0 Oops: \n" % (i, i) for i in range(flood)]
    out.append(b"the end, without a newline @@H exit 1 0")
    return b"".join(out)


def hostile(samples: int = 20) -> Scenario:
    # NMIs at 10 a second: the forwarder still formats and sends the output meanwhile (it shares
    # the vCPU with the spinning program), so the run takes a few seconds of guest time.
    return Scenario("hostile", program="hostile", variant=Variant(shadow=True), args=(str(FLOOD), "0"),
                    samples=samples, rate=10.0)


KERNELS = ["default", "bookworm"]
# From the worker's pool (tests/conftest.py): the check at its return (kernel alive, channels
# open, nothing left running) is what the next user of the guest relies on after this program.
POOL_GUESTS = [GuestSpec(kernel=k, programs=programs_for([hostile()])) for k in KERNELS]


@pytest.mark.parametrize("kernel", [pytest.param(s.kernel, marks=pytest.mark.pool_guest(s), id=s.kernel)
                                    for s in POOL_GUESTS])
def test_a_hostile_program_cannot_break_the_run(tmp_path, kernel, guest_pool):
    sc = hostile()
    log_path = tmp_path / "hostile.jsonl"
    with guest_pool.take(GuestSpec(kernel=kernel, programs=programs_for([sc]))) as sess:
        with open(log_path, "w") as log:
            r = Engine(sess, sc, log).run()
        m = sess.machine
        assert not r.errors and not r.failures and not r.invariant_violations, (r.errors, r.failures[:2])
        assert r.own_stacks >= 1 and r.program_exit is None  # sampled, and killed at the end, not "exited"
        assert m.console.panic is None
        # The /dev/kmsg write reached the kernel's log, as a user record (facility 1, level 0).
        # The whole console log, not the ring's last lines: on a loaded host the kernel may print
        # a long report (an RCU stall's stacks) after it.
        kernel_log = (m.workdir / "console.log").read_text(errors="replace").splitlines()
        assert any(line.startswith("<8>") and "hostile /dev/kmsg" in line for line in kernel_log)
        # The run's program output: beside the log, named in the end record, exactly what it printed.
        assert r.program_output == "hostile.out"
        assert not any("program output" in n for n in r.notes), r.notes  # complete, nothing dropped
        assert (tmp_path / "hostile.out").read_bytes() == expected_output(FLOOD)
        end = json.loads(log_path.read_text().splitlines()[-1])
        assert end["ev"] == "end" and end["program_output"] == "hostile.out" and end["reason"] == "complete"
        assert check_lines(open(log_path)).clean

        # The control channel still works: a second hostile run that exits on its own reports
        # its real status, and a shell command answers with its own output.
        sess.target.resume()
        proc = m.run([sess.program("hostile", "host", Variant(shadow=True)).guest_path, "10", "200"],
                     output=tmp_path / "second.out")
        assert m.wait_exit(proc, timeout=60) == 0
        assert m.output_done(proc, timeout=30)
        assert (tmp_path / "second.out").read_bytes() == expected_output(10)
        assert m.shell_output("echo alive; printf no-newline") == (0, b"alive\nno-newline")
        assert m.console.panic is None
        sess.target.interrupt()  # stopped, as it was taken (tests/conftest.py's pool)
