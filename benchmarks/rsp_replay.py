"""The gdb-stub client's receive path, timed on the bytes of real traces: deterministic where a
bench deferred run's CPU a trace moves by 0.1-0.3 ms with the machine's load.

``capture`` runs bench deferred's scenario (fp-syscall, no jitter) on a fresh guest and keeps
every byte the stub sent during its traces; ``replay`` times, on those bytes and with the code of
the tree it runs from, the packet reader (framing, checksums, escapes), the checksums alone and
the hex decoding of the answers, each a trace (the best of 9 passes, CPU time).  Alternate
replays of two trees on one capture to compare them:

    PYTHONPATH=. .venv/bin/python benchmarks/rsp_replay.py capture /tmp/stream.bin --samples 300
    PYTHONPATH=. .venv/bin/python benchmarks/rsp_replay.py replay /tmp/stream.bin
"""

from __future__ import annotations

import argparse
import struct
import sys
import time


def capture(path: str, samples: int, qemu: str) -> None:
    import dataclasses

    from harness.scenarios.catalog import CATALOG, programs_for
    from harness.scenarios.engine import Engine
    from harness.session import GuestSpec, Session
    from harness.transport import rsp

    reads: list[bytes] = []
    read_now = rsp.read_now

    def recording(fd):
        data = read_now(fd)
        if data:
            reads.append(data)
        return data

    sc = dataclasses.replace(CATALOG["fp-syscall"], samples=samples, jitter=0.0)
    with Session(GuestSpec(programs=programs_for([sc]), qemu=qemu)) as sess:
        Engine(sess, sc).run()  # warm: tables parsed, guesses learnt
        rsp.read_now = recording
        try:
            result = Engine(sess, sc).run()
        finally:
            rsp.read_now = read_now
    with open(path, "wb") as f:  # traces, then each read: length, bytes
        f.write(struct.pack("<I", result.stacks))
        for data in reads:
            f.write(struct.pack("<I", len(data)) + data)
    print(f"{result.stacks} traces, {len(reads)} reads, {sum(map(len, reads))} bytes -> {path}")


def replay(path: str) -> None:
    from harness.transport import rsp

    with open(path, "rb") as f:
        raw = f.read()
    (traces,), at, reads = struct.unpack_from("<I", raw), 4, []
    while at < len(raw):
        (n,) = struct.unpack_from("<I", raw, at)
        reads.append(raw[at + 4:at + 4 + n])
        at += 4 + n

    def reader() -> list[bytes]:
        r, out = rsp.PacketReader(), []
        for data in reads:
            r.feed(data)
            while (item := r.next()) is not None:
                out.append(item[1])
        return out

    bodies = reader()
    hexes = [b for b in bodies if len(b) > 16 and b[:1] not in b"TSE"]
    unhex = getattr(rsp, "unhex", None) or (lambda b, what: bytes.fromhex(b.decode()))

    def best(fn) -> float:
        times = []
        for _ in range(9):
            t0 = time.process_time()
            fn()
            times.append(time.process_time() - t0)
        return 1e6 * min(times) / traces

    print(f"{traces} traces: {len(bodies) / traces:.1f} answers, {sum(map(len, bodies)) / traces:.0f} bytes a trace")
    print(f"packet reader:  {best(reader):6.1f} us a trace (framing, checksums, escapes)")
    print(f"checksums:      {best(lambda: [rsp.checksum(b) for b in bodies]):6.1f} us a trace")
    print(f"hex decoding:   {best(lambda: [unhex(b, 'm') for b in hexes]):6.1f} us a trace")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("mode", choices=["capture", "replay"])
    ap.add_argument("path")
    ap.add_argument("--samples", type=int, default=300)
    ap.add_argument("--qemu", default="backports")
    args = ap.parse_args(argv)
    if args.mode == "capture":
        capture(args.path, args.samples, args.qemu)
    else:
        replay(args.path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
