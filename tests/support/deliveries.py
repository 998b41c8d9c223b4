"""The recorded deliveries (tests/data/deliveries/*/delivery.json): a snapshot the engine took at
a real stop, the program it ran (rebuilt here by the host toolchain, known again by the digest of
what it maps) and the address space over both, for the tests that replay or take them apart."""

from __future__ import annotations

from harness.images.errors import ImageError
from harness.images.programs import Variant
from harness.memory import BufferMemory, Overlay
from harness.scenarios.snapshot import load, loaded_digest
from harness.unwind.maps import AddressSpace, FileBackedMemory
from tests.support.gating import require
from tests.support.paths import TEST_DATA

__all__ = ["DATA", "Delivery", "program"]

DATA = TEST_DATA / "deliveries"


def program(prog: dict) -> str:
    """The recorded delivery's program built by its toolchain, checked to map what it mapped."""
    from harness.images.programs import build_program
    from harness.images.toolchain import get_toolchain

    try:
        built = build_program(prog["source"], get_toolchain(prog["toolchain"]), Variant(**prog["variant"]))
    except ImageError as exc:
        require(False, f"{prog['source']} with {prog['toolchain']}: {exc}")
        raise
    sha = loaded_digest(built.path)
    assert sha == prog["loaded_sha256"], (
        f"{built.path} does not map what the snapshot's binary did ({sha} != {prog['loaded_sha256']}): "
        f"re-record tests/data/deliveries with python -m harness.tools.record_deliveries")
    return str(built.path)


class Delivery:
    """One recorded delivery taken apart: ``snap`` (its sealed capture), ``record`` (what the engine
    wrote), ``space`` (the task's maps over the rebuilt program) and ``guest()``: the task's memory
    as the stopped guest would answer it (the captured bytes, then the program's file mappings)."""

    def __init__(self, name: str):
        self.name = name
        self.snap, self.record, self.maps, self.prog = load(DATA / name / "delivery.json")
        self.path = program(self.prog)
        self.space = AddressSpace.from_maps(self.maps, {self.prog["guest_path"]: self.path}.get, self.snap.memory)

    def guest(self) -> Overlay:
        """The stopped guest: every byte the capture holds, and the program's read-only file
        mappings; any other read faults (the pages the capture found unreadable, and the rest)."""
        return Overlay(BufferMemory(dict(self.snap.memory.regions)), FileBackedMemory(self.space))
