"""Capture :mod:`snapshot` directories from a program run on the HOST under gdb.

Transport-side tool (it starts gdb): the pure modules only ever read what it writes.  gdb runs a
small Python script (below) that stops the program at ``main``, then sets every requested stop
point, and at each hit writes a snapshot: the registers, ``/proc/PID/maps``, the stack from sp's
page to the end of ``[stack]``, and the vDSO.  The inferior runs with an empty environment,
without a shell and with ASLR off (gdb's default), so the same binary gives the same stack.
A 32-bit (i386) program is captured too: its registers zero-extended and its CS (0x23,
``__USER32_CS``), as a compat task's ``pt_regs`` hold them, so ``UserRegs.compat`` is true.

Stop points (:class:`StopPoint`):

* ``break`` ``func``: the first instruction of a function;
* ``insn`` ``func`` ``pattern``: the first instruction of ``func`` whose disassembly contains
  ``pattern`` (e.g. ``push   %rbp``; ``push   %ebp`` in i386 code), with ``after=1`` for the
  instruction after it;
* ``syscall`` ``name``: ``catch syscall`` (the stop is at syscall entry, IP after ``syscall``,
  ``int $0x80``, or in the vDSO's ``__kernel_vsyscall``);
* ``offset`` ``func`` ``n``: ``func + n``.

A breakpoint kind may carry a gdb ``condition``; besides gdb's own convenience functions the
script defines ``$_interrupted_is("NAME")``: the frame the innermost signal frame interrupted is
function NAME (a stop in a signal handler taken only when the signal interrupted known code).

Any of the breakpoint kinds may go on ``steps`` instructions (``stepi``) before the snapshot is
taken: into what the stop's ``call`` calls (the vDSO, which has no symbols of the program's).

The stack saved is the mapping sp is in, from sp's page to its end: ``[stack]`` for a C
program's main thread, an anonymous mapping for another thread's or a Go goroutine's stack.

Dynamically linked programs built for the guest look for their loader under ``/tc/...``; here
they run through the toolchain root's loader with ``--library-path``, and the snapshot's
``files`` map every mapped path to the host file (on the host, the same path).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path

from elftools.elf.elffile import ELFFile

GDB = "/usr/bin/gdb"
TIMEOUT = 120


class CaptureError(RuntimeError):
    """gdb failed or a stop point was never reached; carries gdb's output."""

    def __init__(self, message: str, output: str = ""):
        self.output = output
        super().__init__(message + (f"\n--- gdb output (tail) ---\n{output[-3000:]}" if output else ""))


@dataclass(frozen=True)
class StopPoint:
    name: str  # the snapshot's directory name
    kind: str  # break | insn | syscall | offset
    func: str = ""
    pattern: str = ""
    after: int = 0
    offset: int = 0
    syscall: str = ""
    lib: str = ""  # func is a symbol of this shared library (its .dynsym), not of the program
    steps: int = 0  # instructions executed (stepi) after the breakpoint, before the snapshot
    condition: str = ""  # a gdb condition on the breakpoint ("$rdi == 237": one recursion level)


GDB_SCRIPT = r'''
import gdb, json, os

CFG = json.load(open(os.environ["HARNESS_CAPTURE_CONFIG"]))
OUT = CFG["out"]
REGS64 = {"ip": "rip", "sp": "rsp", "bp": "rbp", "ax": "rax", "bx": "rbx", "cx": "rcx", "dx": "rdx",
          "si": "rsi", "di": "rdi", "r8": "r8", "r9": "r9", "r10": "r10", "r11": "r11", "r12": "r12",
          "r13": "r13", "r14": "r14", "r15": "r15", "flags": "eflags", "cs": "cs", "ss": "ss"}
# A 32-bit inferior (gdb's architecture "i386"): no r8-r15; pt_regs would hold the 32-bit values
# zero-extended, and cs is __USER32_CS (0x23), which makes UserRegs.compat true.
REGS32 = {"ip": "eip", "sp": "esp", "bp": "ebp", "ax": "eax", "bx": "ebx", "cx": "ecx", "dx": "edx",
          "si": "esi", "di": "edi", "flags": "eflags", "cs": "cs", "ss": "ss"}

def is32():
    return gdb.selected_frame().architecture().name() == "i386"

def reg(name):
    mask = 0xFFFFFFFF if is32() else 0xFFFFFFFFFFFFFFFF
    return int(gdb.parse_and_eval("$" + name)) & mask

def maps_text(pid):
    with open(f"/proc/{pid}/maps") as f:
        return f.read()

def dump(stop):
    inf = gdb.selected_inferior()
    regs = {k: reg(v) for k, v in (REGS32 if is32() else REGS64).items()}
    regs["orig_ax"] = (1 << 64) - 1
    text = maps_text(inf.pid)
    regions, files = [], {}
    d = os.path.join(OUT, stop["name"])
    os.makedirs(d, exist_ok=True)
    for line in text.splitlines():
        parts = line.split()
        lo, hi = (int(x, 16) for x in parts[0].split("-"))
        path = parts[5] if len(parts) > 5 else ""
        if path.startswith("/"):
            files[path] = path
        what = None
        # The mapping sp is in, from sp's page: [stack] for a C program's main thread, an
        # anonymous mapping for a thread's stack or a Go goroutine's (in Go's heap arena).
        if lo <= regs["sp"] < hi:
            lo, what = regs["sp"] & ~0xFFF, "stack"
        elif path == "[vdso]":
            what = "vdso"
        if what:
            data = bytes(inf.read_memory(lo, hi - lo))
            fname = f"{what}-{len(regions)}.bin"
            with open(os.path.join(d, fname), "wb") as f:
                f.write(data)
            regions.append({"addr": lo, "size": len(data), "file": fname, "what": what})
    doc = {"format": "unwind-harness-snapshot", "version": 1, "name": stop["name"], "regs": regs,
           "maps": text, "regions": regions, "files": files,
           "meta": {"stop": stop, "argv": CFG["argv"], "frame": str(gdb.selected_frame().name())}}
    with open(os.path.join(d, "snapshot.json"), "w") as f:
        json.dump(doc, f, indent=1, sort_keys=True)

def load_bias(text, path, loads):
    """Load bias of a mapped file from maps: gdb has no symbols for a program that ld.so loaded."""
    for line in text.splitlines():
        parts = line.split()
        if len(parts) > 5 and os.path.realpath(parts[5]) == path:
            lo, off = int(parts[0].split("-")[0], 16), int(parts[2], 16)
            for seg_off, seg_vaddr, seg_filesz in loads:
                if seg_off & ~0xFFF <= off < max(seg_off + seg_filesz, (seg_off & ~0xFFF) + 1):
                    return lo - (seg_vaddr - seg_off + off)
    raise gdb.GdbError(f"{path} not found in maps")

def addr_of(func):
    value, _size, lib = CFG["funcs"][func]
    return value + (BIASES[lib] if lib else BIAS)

def insn_addr(func, pattern, after):
    start = addr_of(func)
    arch = gdb.selected_frame().architecture()
    insns = arch.disassemble(start, start + CFG["funcs"][func][1] - 1)
    for i, ins in enumerate(insns):
        if pattern in ins["asm"]:
            return insns[i + after]["addr"]
    raise gdb.GdbError(f"no '{pattern}' in {func}")

class InterruptedIs(gdb.Function):
    """$_interrupted_is("NAME"): the frame the innermost signal frame interrupted (the one
    above it, as gdb unwinds through the kernel's frame) is function NAME.  A condition for a
    stop in a signal handler that must have interrupted known code (StopPoint.condition);
    unlike $_caller_is it counts no frames, which inlined functions would shift."""

    def __init__(self):
        super().__init__("_interrupted_is")

    def invoke(self, name):
        f = gdb.newest_frame()
        while f is not None and f.type() != gdb.SIGTRAMP_FRAME:
            f = f.older()
        f = f.older() if f is not None else None
        return int(f is not None and f.name() == name.string())


InterruptedIs()
gdb.execute("set pagination off")
gdb.execute("set confirm off")
gdb.execute("set startup-with-shell off")
gdb.execute("set disable-randomization on")
gdb.execute("unset environment")
# First stop after the program and its libraries are loaded: its first getppid.
gdb.execute(f"catch syscall {CFG['loaded_syscall']}")
gdb.execute("run")
MAPS = maps_text(gdb.selected_inferior().pid)
BIAS = load_bias(MAPS, CFG["binary"], CFG["loads"])
BIASES = {lib: load_bias(MAPS, lib, loads) for lib, loads in CFG["libs"].items()}
gdb.execute("delete")
pending = {}
bps = {}  # pc -> its gdb breakpoint, deleted once its stop is taken


def breakpoint_at(a, stop):
    bp = gdb.Breakpoint(f"*{a:#x}", internal=False)
    if stop.get("condition"):
        bp.condition = stop["condition"]
    return bp


for stop in CFG["stops"]:
    k = stop["kind"]
    if k == "syscall":
        bp = gdb.execute(f"catch syscall {stop['syscall']}", to_string=True)
        pending[("syscall", stop["syscall"])] = stop
        continue
    if k == "break":
        a = addr_of(stop["func"])
    elif k == "insn":
        a = insn_addr(stop["func"], stop["pattern"], stop["after"])
    elif k == "offset":
        a = addr_of(stop["func"]) + stop["offset"]
    else:
        raise gdb.GdbError(f"unknown stop kind {k}")
    bps[a] = breakpoint_at(a, stop)
    pending[("pc", a)] = stop
while pending:
    gdb.execute("continue", to_string=True)
    if not gdb.selected_inferior().pid:
        raise gdb.GdbError(f"program exited with stops not reached: {[s['name'] for s in pending.values()]}")
    pc = reg("pc")
    stop = pending.pop(("pc", pc), None)
    if stop is not None:
        # Taken: a loop that passes it again must not look like the syscall catchpoint below.
        bps.pop(pc).delete()
    else:
        sc = [key for key in pending if key[0] == "syscall"]
        if not sc:
            continue
        stop = pending.pop(sc[0])
        gdb.execute("delete")  # drop the catchpoint (and any breakpoint already used)
        bps = {key[1]: breakpoint_at(key[1], s) for key, s in pending.items() if key[0] == "pc"}
    if stop.get("steps"):
        gdb.execute(f"stepi {stop['steps']}", to_string=True)
    dump(stop)
    print("HARNESS-CAPTURED", stop["name"], hex(pc))
gdb.execute("kill")
'''


def _elf_facts(path: str, want: set[str], table: str) -> tuple[list, dict]:
    """The PT_LOADs of ``path`` and (start, size) of the functions ``want`` in its ``table``."""
    with open(path, "rb") as f:
        elf = ELFFile(f)
        loads = [(s["p_offset"], s["p_vaddr"], s["p_filesz"]) for s in elf.iter_segments()
                 if s["p_type"] == "PT_LOAD"]
        funcs = {}
        section = elf.get_section_by_name(table)
        for sym in section.iter_symbols() if section is not None else ():
            if sym.name.split("@")[0] in want and sym["st_info"]["type"] == "STT_FUNC":
                funcs[sym.name.split("@")[0]] = (sym["st_value"], sym["st_size"])
    missing = want - set(funcs)
    if missing:
        raise CaptureError(f"{path}: no function symbols {sorted(missing)} in {table}")
    return loads, funcs


def _program_facts(binary: str, stops: list[StopPoint]) -> dict:
    """Link-time facts gdb needs: the program's PT_LOADs and those of the libraries stopped in,
    and the stop functions (start, size, library or "")."""
    loads, found = _elf_facts(binary, {s.func for s in stops if s.func and not s.lib}, ".symtab")
    funcs = {name: (*v, "") for name, v in found.items()}
    libs = {}
    for lib in {s.lib for s in stops if s.lib}:
        path = os.path.realpath(lib)
        libs[path], found = _elf_facts(path, {s.func for s in stops if s.lib == lib}, ".dynsym")
        funcs.update({name: (*v, path) for name, v in found.items()})
    return {"binary": os.path.realpath(binary), "loads": loads, "funcs": funcs, "libs": libs}


def capture(argv: list[str], stops: list[StopPoint], out: str | os.PathLike, *, binary: str | None = None,
            loaded_syscall: str = "getppid", gdb: str = GDB, timeout: float = TIMEOUT) -> dict[str, Path]:
    """Run ``argv`` under gdb, write one snapshot directory per stop under ``out``.

    ``binary`` is the program (default ``argv[0]``; give it when ``argv`` starts with a loader).
    Stop points are set once the program makes its first ``loaded_syscall``, when it and its
    libraries are mapped: the stopped functions must run again after that (callchain loops).
    """
    if not shutil.which(gdb):
        raise CaptureError(f"gdb not found at {gdb}")
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="harness-capture-") as tmp:
        cfg = Path(tmp, "config.json")
        conf = {"out": str(out), "argv": argv, "stops": [asdict(s) for s in stops],
                "loaded_syscall": loaded_syscall, **_program_facts(binary or argv[0], stops)}
        cfg.write_text(json.dumps(conf))
        script = Path(tmp, "capture.py")
        script.write_text(GDB_SCRIPT)
        env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HARNESS_CAPTURE_CONFIG": str(cfg),
               "HOME": tmp, "LANG": "C.UTF-8"}
        cmd = [gdb, "-nx", "-batch", "-x", str(script), "--args", *argv]
        try:
            r = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env,
                               stdin=subprocess.DEVNULL)
        except subprocess.TimeoutExpired as exc:
            raise CaptureError(f"gdb timed out after {timeout}s: {' '.join(argv)}",
                               (exc.stdout or b"").decode(errors="replace") if isinstance(exc.stdout, bytes)
                               else (exc.stdout or "")) from exc
    output = r.stdout + r.stderr
    got = {line.split()[1] for line in output.splitlines() if line.startswith("HARNESS-CAPTURED")}
    missing = [s.name for s in stops if s.name not in got]
    if missing:
        raise CaptureError(f"stops not captured: {missing} ({' '.join(argv)})", output)
    return {s.name: out / s.name for s in stops}


def capture_program(program, args: list[str], stops: list[StopPoint], out: str | os.PathLike,
                    **kw) -> dict[str, Path]:
    """:func:`capture` for a built ``harness.images.programs.Program``."""
    return capture(program_argv(program, *args), stops, out, binary=str(program.path), **kw)


def program_argv(program, *args: str) -> list[str]:
    """The host command line that runs a built ``harness.images.programs.Program``.

    Static programs run as they are; dynamic ones through their toolchain's loader with the
    toolchain's library directory (their PT_INTERP names a ``/tc/...`` path of the guest).
    """
    if not program.runtime:
        return [str(program.path), *args]
    loader = next(h for h, g in program.runtime if "ld-linux" in g)
    libdirs = sorted({str(Path(h).parent) for h, g in program.runtime})
    return [str(loader), "--library-path", ":".join(libdirs), str(program.path), *args]
