"""A kernel ``.config`` judged against what the harness needs of its guest kernel.

Pure: text (or files) in, a :class:`Judgement` out.  What it knows:

* a ``.config`` (:func:`parse_config`): ``CONFIG_X=y|m|"str"|123`` and ``# CONFIG_X is not set``;
* the tree's Kconfig facts it needs (:class:`Kconfig`, read from ``TREE/Kconfig`` following its
  ``source`` lines for x86): each option's ``depends on`` (with the enclosing ``if``/``menu``
  conditions), whether it has a prompt, what selects it;
* the harness's needs (:data:`NEEDS`): how the guest is booted (PVH, ttyS0 and two pci-serial
  ports, an uncompressed initramfs, a busybox ``/init`` script, devtmpfs/proc/sysfs/tmpfs), how
  it is inspected (BTF in the vmlinux, ``/proc/kallsyms`` with every symbol, perf events), what it
  tests (unwind_user, the deferred unwinder, 32-bit programs) and, read from the tree, every
  unwind_user/deferred/SFrame option the tree offers (:data:`UNWIND_PATTERN`).

For a need that is not met the judgement names why: the dependency of its Kconfig entry that the
config leaves false (``DEBUG_INFO_BTF: depends on BPF_SYSCALL, which is not set``), and for
``PAHOLE_VERSION`` the pahole found on the build machine.  :meth:`Judgement.fragment` prints the
missing options as a Kconfig fragment (``make olddefconfig`` input), their dependencies first.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import EXIT_USAGE, HarnessError

__all__ = ["NEEDS", "ConfigError", "Judgement", "Kconfig", "Need", "Verdict", "judge", "parse_config",
           "pahole_version_number", "read_config"]


class ConfigError(HarnessError, ValueError):
    """A .config or Kconfig file that cannot be read as one (names the file and line)."""

    exit_code = EXIT_USAGE


@dataclass(frozen=True)
class Need:
    option: str  # without CONFIG_
    why: str
    group: str  # "boot", "introspection", "unwinding", "devices"
    value: str = "y"  # "y": built in (m will not do: the guest loads no modules)
    #: for an option without a prompt (a fragment cannot set it): what turns it on
    selected: str = ""


#: What the harness needs of its guest kernel, and why (harness/transport/qemu.py's command line,
#: images/init.sh, harness/images/initramfs.py, harness/kernel/btf.py, harness/session.py).
NEEDS: tuple[Need, ...] = (
    Need("64BIT", "the guest is x86-64", "boot"),
    Need("PVH", "QEMU boots the ELF vmlinux through its PVH entry point (-kernel vmlinux)", "boot"),
    Need("BLK_DEV_INITRD", "the harness's /init and programs come in an initramfs (-initrd)", "boot"),
    Need("BINFMT_ELF", "the guest programs and busybox are ELF executables", "boot"),
    Need("BINFMT_SCRIPT", "/init is a busybox shell script (images/init.sh)", "boot"),
    Need("IA32_EMULATION", "the catalog runs 32-bit programs (the i386 scenarios)", "boot"),
    Need("DEVTMPFS", "/init mounts devtmpfs on /dev for the serial ports' nodes", "boot"),
    Need("PROC_FS", "/init mounts /proc; the harness reads /proc/kallsyms and /proc/PID/maps", "boot"),
    Need("SYSFS", "/init finds the pci-serial ports through /sys/class/tty", "boot"),
    Need("TMPFS", "/init mounts a tmpfs on /tmp (its fifos)", "boot"),
    Need("PRINTK", "the kernel's log on the console is how a panic is seen", "boot"),
    Need("TTY", "the console and both channels are serial ttys", "devices"),
    Need("SERIAL_8250", "ttyS0 (the console) and ttyS1 (the dump port) are 8250 UARTs", "devices"),
    Need("SERIAL_8250_CONSOLE", "console=ttyS0", "devices"),
    Need("PCI", "the control and output channels are pci-serial devices", "devices"),
    Need("SERIAL_8250_PCI", "the control and output channels are QEMU pci-serial devices (8250 on PCI)",
         "devices"),
    Need("KALLSYMS", "the harness finds stop points and symbols through /proc/kallsyms", "introspection"),
    Need("KALLSYMS_ALL", "the data symbols (current_task, the deferred unwinder's state) are in kallsyms",
         "introspection"),
    Need("DEBUG_INFO", "BTF is generated from the DWARF debug info", "introspection"),
    Need("DEBUG_INFO_BTF", "the harness reads task_struct and pt_regs layouts from the vmlinux's .BTF",
         "introspection"),
    Need("PERF_EVENTS", "harness perf records the kernel's callchains (perf_event_open)", "introspection"),
    Need("PROC_CHILDREN", "kernel-diff ends its program through /proc/PID/task/TID/children (without it the "
         "program runs to perfcc's window and fp-syscall ran past it on a pared-down build)", "introspection"),
    Need("UNWIND_USER", "the kernel's user-space unwinder under test (kernel/unwind/user.c)", "unwinding",
         selected="no prompt: the arch selects it (x86-64 through HAVE_UNWIND_USER_FP, from 6.17 on); "
                  "a tree without it has no unwind_user to test"),
)

#: Options of the tree's unwinding code that the harness tests when the tree offers them: the
#: frame-pointer and SFrame unwinders and the deferred unwinder, whatever the tree calls them.
UNWIND_PATTERN = re.compile(r"^(HAVE_)?UNWIND_(USER|DEFERRED)\w*$|^\w*SFRAME\w*$")


def parse_config(text: str, name: str = ".config") -> dict[str, str]:
    """``{OPTION: value}`` of a .config (``n`` for ``# CONFIG_X is not set``; strings unquoted)."""
    values: dict[str, str] = {}
    for lineno, line in enumerate(text.splitlines(), 1):
        line = line.strip()
        if not line:
            continue
        m = re.fullmatch(r"# CONFIG_(\w+) is not set", line)
        if m:
            values[m.group(1)] = "n"
            continue
        if line.startswith("#"):
            continue
        m = re.fullmatch(r"CONFIG_(\w+)=(.*)", line)
        if not m:
            raise ConfigError(f"{name}:{lineno}: not a .config line: {line[:80]!r}")
        v = m.group(2)
        if len(v) >= 2 and v[0] == v[-1] == '"':
            v = v[1:-1].replace('\\"', '"').replace("\\\\", "\\")
        values[m.group(1)] = v
    if not values:
        raise ConfigError(f"{name}: no CONFIG_ line: not a kernel .config")
    return values


def pahole_version_number(text: str) -> int:
    """``pahole --version``'s "v1.24" as Kconfig's PAHOLE_VERSION counts it (124)."""
    m = re.search(r"v?(\d+)\.(\d+)", text)
    if not m:
        raise ConfigError(f"pahole --version printed {text.strip()[:60]!r}: no version")
    return int(m.group(1)) * 100 + int(m.group(2))


@dataclass
class Definition:
    """One ``config NAME`` block (an option may be defined in several files: arch/Kconfig and
    arch/x86/Kconfig both define CPU_MITIGATIONS, each with its own dependencies)."""

    where: str  # file:line
    depends: list[str] = field(default_factory=list)  # each a Kconfig expression; all must hold
    prompt: bool = False


@dataclass
class Entry:
    name: str
    type: str = ""
    defs: list[Definition] = field(default_factory=list)
    selected_by: list[str] = field(default_factory=list)  # "SYMBOL" or "SYMBOL if EXPR"

    @property
    def main(self) -> Definition:
        """The definition a user sets: the first with a prompt, else the first."""
        return next((d for d in self.defs if d.prompt), self.defs[0] if self.defs else Definition(""))

    @property
    def prompt(self) -> bool:
        return any(d.prompt for d in self.defs)

    @property
    def depends(self) -> list[str]:
        return self.main.depends

    @property
    def where(self) -> str:
        return self.main.where


class Kconfig:
    """The entries of a tree's Kconfig (for ``arch``), read by following ``source`` from the top."""

    def __init__(self, entries: Mapping[str, Entry], tree: Path | None = None):
        self.entries = dict(entries)
        self.tree = tree

    @classmethod
    def read(cls, tree: Path, arch: str = "x86") -> Kconfig:
        top = tree / "Kconfig"
        if not top.is_file():
            raise ConfigError(f"{tree}: no Kconfig at its top: not a kernel tree")
        env = {"SRCARCH": arch, "ARCH": arch, "srctree": str(tree), "HEADER_ARCH": arch}
        entries: dict[str, Entry] = {}
        seen: set[Path] = set()
        _read_file(tree, top, env, entries, seen, [])
        return cls(entries, tree)

    def offered(self, pattern: re.Pattern = UNWIND_PATTERN) -> list[str]:
        return sorted(n for n in self.entries if pattern.search(n))


def _read_file(tree: Path, path: Path, env: dict, entries: dict[str, Entry], seen: set[Path],
               outer: list[str]) -> None:
    if path in seen:
        return
    seen.add(path)
    try:
        lines = path.read_text(errors="replace").splitlines()
    except OSError as exc:
        raise ConfigError(f"{path}: {exc.strerror}") from exc
    # join continuation lines
    joined: list[tuple[int, str]] = []
    buf, start = "", 0
    for i, ln in enumerate(lines, 1):
        if not buf:
            start = i
        if ln.endswith("\\"):
            buf += ln[:-1] + " "
            continue
        joined.append((start, buf + ln))
        buf = ""
    conds = list(outer)  # the enclosing if/menu conditions
    stack: list[tuple[str, int]] = []  # ("if"|"menu"|"choice", how many conds it pushed)
    cur: Entry | None = None
    cur_def: Definition | None = None
    block = ""  # the menu, choice or comment whose lines these are, when not an option's
    in_help = False
    help_indent = 0
    rel = path.relative_to(tree) if path.is_relative_to(tree) else path
    for lineno, raw in joined:
        stripped = raw.strip()
        if in_help:
            # help text: up to the first line indented less than its own first line
            if not stripped:
                continue
            indent = len(raw.expandtabs(8)) - len(raw.expandtabs(8).lstrip())
            if help_indent == 0:
                help_indent = indent
            if indent >= help_indent and indent > 0:
                continue
            in_help = False
        if not stripped or stripped.startswith("#"):
            continue
        word, _, rest = stripped.partition(" ")
        word = word.split("\t")[0]
        rest = stripped[len(word):].strip()
        if word in ("config", "menuconfig"):
            name = rest.split()[0]
            block = ""
            cur = entries.get(name)
            if cur is None:
                cur = entries[name] = Entry(name)
            cur_def = Definition(f"{rel}:{lineno}", list(dict.fromkeys(conds)))
            cur.defs.append(cur_def)
        elif word in ("bool", "tristate", "string", "int", "hex", "def_bool", "def_tristate"):
            if cur is not None and cur_def is not None:
                cur.type = word.replace("def_", "")
                if not word.startswith("def_") and rest.startswith('"'):
                    cur_def.prompt = True
        elif word == "prompt" and cur_def is not None:
            cur_def.prompt = True
        elif word == "depends" and rest.startswith("on "):
            expr = _strip_comment(rest[3:])
            if cur_def is not None:
                cur_def.depends.append(expr)
            elif block in ("menu", "choice"):
                conds.append(expr)
                stack[-1] = (stack[-1][0], stack[-1][1] + 1)
        elif word == "select" and cur is not None:
            target = rest.split()[0]
            cond = rest[len(target):].strip()
            entries.setdefault(target, Entry(target)).selected_by.append(
                cur.name + (f" {cond}" if cond else ""))
        elif word in ("help", "---help---"):
            in_help = True
            help_indent = 0
        elif word == "if":
            conds.append(_strip_comment(rest))
            stack.append(("if", 1))
            cur = cur_def = None
            block = ""
        elif word in ("menu", "choice"):
            stack.append((word, 0))
            cur = cur_def = None
            block = word  # its own "depends on" lines bind everything inside it
        elif word in ("endif", "endmenu", "endchoice"):
            if stack:
                _, n = stack.pop()
                del conds[len(conds) - n:]
            cur = cur_def = None
            block = ""
        elif word in ("source", "rsource", "osource", "orsource"):
            target = rest.strip().strip('"')
            target = re.sub(r"\$\((\w+)\)", lambda m: env.get(m.group(1), ""), target)
            base = path.parent if word in ("rsource", "orsource") else tree
            for p in sorted(base.glob(target)) if any(c in target for c in "*?[") else [base / target]:
                if p.is_file():
                    _read_file(tree, p, env, entries, seen, conds)
            cur = cur_def = None
            block = ""
        elif word in ("comment", "mainmenu"):
            cur = cur_def = None
            block = word  # a comment's "depends on" is its own
        # default, range, imply, visible, option, modules, transitional: not needed here


def _strip_comment(expr: str) -> str:
    """An expression without its trailing ``# comment`` (outside quotes)."""
    quoted = False
    for i, c in enumerate(expr):
        if c == '"':
            quoted = not quoted
        elif c == "#" and not quoted:
            return expr[:i].strip()
    return expr.strip()


# --- expressions -----------------------------------------------------------------------------

_TOKEN = re.compile(r"\s*(\|\||&&|!=|<=|>=|=|<|>|!|\(|\)|\"[^\"]*\"|[A-Za-z0-9_]+)")


def _tokens(expr: str) -> list[str]:
    out, pos = [], 0
    expr = expr.rstrip()
    while pos < len(expr):
        m = _TOKEN.match(expr, pos)
        if not m:
            raise ConfigError(f"cannot read the Kconfig expression {expr!r} at {expr[pos:]!r}")
        out.append(m.group(1))
        pos = m.end()
    return out


def _tristate(v: str) -> int:
    return {"y": 2, "m": 1}.get(v, 0)


class _Eval:
    """Kconfig's tristate logic over a .config's values (n=0, m=1, y=2)."""

    def __init__(self, values: Mapping[str, str]):
        self.values = values

    def value(self, sym: str) -> str:
        if sym in ("y", "m", "n"):
            return sym
        if re.fullmatch(r"-?\d+|0x[0-9a-fA-F]+", sym):
            return sym
        if sym.startswith('"'):
            return sym.strip('"')
        return self.values.get(sym, "n")

    def __call__(self, expr: str) -> int:
        self.toks = _tokens(expr)
        self.i = 0
        v = self._or()
        if self.i != len(self.toks):
            raise ConfigError(f"cannot read the Kconfig expression {expr!r}")
        return v

    def _peek(self) -> str | None:
        return self.toks[self.i] if self.i < len(self.toks) else None

    def _or(self) -> int:
        v = self._and()
        while self._peek() == "||":
            self.i += 1
            v = max(v, self._and())
        return v

    def _and(self) -> int:
        v = self._not()
        while self._peek() == "&&":
            self.i += 1
            v = min(v, self._not())
        return v

    def _not(self) -> int:
        if self._peek() == "!":
            self.i += 1
            return 2 - self._not()
        return self._atom()

    def _atom(self) -> int:
        t = self._peek()
        if t is None:
            raise ConfigError("a Kconfig expression ends too early")
        self.i += 1
        if t == "(":
            v = self._or()
            if self._peek() != ")":
                raise ConfigError("a Kconfig expression lacks its ')'")
            self.i += 1
            return v
        op = self._peek()
        if op in ("=", "!=", "<", "<=", ">", ">="):
            self.i += 1
            a, b = self.value(t), self.value(self.toks[self.i])
            self.i += 1
            try:
                x, y = int(a, 0), int(b, 0)
            except ValueError:
                x, y = a, b
            return 2 if {"=": x == y, "!=": x != y, "<": x < y, "<=": x <= y, ">": x > y,
                         ">=": x >= y}[op] else 0
        return _tristate(self.value(t))


def _symbols(expr: str) -> list[str]:
    return [t for t in _tokens(expr) if re.fullmatch(r"[A-Z_][A-Z0-9_]*", t) and t not in ("y", "m", "n")]


# --- the judgement ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Verdict:
    need: Need
    value: str  # the config's value ("n" when absent)
    ok: bool
    because: tuple[str, ...] = ()  # why it is not set: the dependencies that fail, named
    offered: bool = True  # False: the tree has no such option (nothing to set)

    def line(self) -> str:
        state = "ok" if self.ok else ("not in this tree" if not self.offered else "MISSING")
        what = f"CONFIG_{self.need.option}={self.value}" if self.need.option else self.value
        text = f"{state:>8}  {what}  ({self.need.why})"
        because = self.because or ((self.need.selected,) if not self.ok and self.need.selected else ())
        for b in because:
            text += f"\n{'':10}{b}"
        return text


@dataclass(frozen=True)
class Judgement:
    verdicts: tuple[Verdict, ...]
    extra_fragment: tuple[str, ...] = ()  # dependencies to turn on first, as OPTION names

    @property
    def missing(self) -> list[Verdict]:
        return [v for v in self.verdicts if not v.ok and v.offered]

    @property
    def ok(self) -> bool:
        return not self.missing

    def fragment(self) -> str:
        """The missing options (their failing dependencies first) as a Kconfig fragment; one
        without a prompt, which no fragment can set, as a comment saying what selects it."""
        names: list[str] = []
        settable = [v.need.option for v in self.missing if v.need.option and not v.need.selected]
        for n in (*self.extra_fragment, *settable):
            if n not in names:
                names.append(n)
        text = "".join(f"CONFIG_{n}=y\n" for n in names)
        text += "".join(f"# CONFIG_{v.need.option}: {v.need.selected}\n" for v in self.missing
                        if v.need.option and v.need.selected)
        return text + "".join(f"# {v.value}: {v.need.selected}\n" for v in self.missing if not v.need.option)

    def to_dict(self) -> dict:
        return {"ok": self.ok, "fragment": self.fragment(),
                "options": [{"option": v.need.option, "group": v.need.group, "value": v.value, "ok": v.ok,
                             "offered": v.offered, "because": list(v.because), "why": v.need.why}
                            for v in self.verdicts]}


def judge(values: Mapping[str, str], kconfig: Kconfig | None = None, *, pahole: int | None = None,
          needs: Iterable[Need] = NEEDS) -> Judgement:
    """Judge a parsed .config.  ``kconfig`` (the tree's) adds the tree's unwinding options and
    names the dependencies of a missing option; ``pahole`` (the build machine's, as 124) is
    checked where the config or the tree asks for a PAHOLE_VERSION."""
    needs = list(needs)
    if kconfig is not None:
        have = {n.option for n in needs}
        for name in kconfig.offered():
            e = kconfig.entries[name]
            if name in have or not e.type:
                continue
            if e.prompt or _selected(kconfig, e, values):
                needs.append(Need(name, f"the tree's unwinding option ({e.where})", "unwinding"))
    ev = _Eval(dict(values))
    verdicts = []
    extra: list[str] = []
    for need in needs:
        value = values.get(need.option, "n")
        ok = value == need.value or (need.value == "y" and value == "y")
        offered = kconfig is None or need.option in kconfig.entries and bool(kconfig.entries[need.option].type)
        because: tuple[str, ...] = ()
        if not ok and kconfig is not None and offered:
            because, deps = _why(kconfig, need.option, values, ev, pahole, set())
            extra.extend(d for d in deps if d not in extra)
            e = kconfig.entries[need.option]
            if not e.prompt:
                need = Need(need.option, need.why, need.group, need.value,
                            selected="no prompt: selected by " + (", ".join(e.selected_by[:4]) or "nothing"))
        elif not ok and need.option == "DEBUG_INFO_BTF":
            because = _why_btf_without_tree(values, pahole)
        verdicts.append(Verdict(need, value, ok, because, offered))
    if pahole is not None and values.get("DEBUG_INFO_BTF") == "y":
        built = values.get("PAHOLE_VERSION")
        if pahole < 122:
            verdicts.append(Verdict(Need("", "the build machine's pahole makes the BTF", "introspection",
                                         selected="install pahole >= 1.22 (Debian: dwarves)"),
                                    f"pahole {_dotted(pahole)}", False,
                                    (f"pahole {_dotted(pahole)} on this machine: DEBUG_INFO_BTF needs >= 1.22 "
                                     f"(this .config was made with {_dotted(int(built)) if built else '?'}); "
                                     "olddefconfig will drop it here",)))
    return Judgement(tuple(verdicts), tuple(extra))


def _dotted(v: int) -> str:
    return f"{v // 100}.{v % 100}"


def _selected(kconfig: Kconfig, e: Entry, values: Mapping[str, str]) -> bool:
    """Whether something the arch or the config turns on selects ``e`` (a promptless option)."""
    ev = _Eval(dict(values))
    for s in e.selected_by:
        sym, _, cond = s.partition(" if ")
        src = kconfig.entries.get(sym.strip())
        if src is None:
            continue
        if values.get(sym.strip()) == "y" or src.where.startswith("arch/"):
            if not cond or ev(cond):
                return True
    return False


def _why(kconfig: Kconfig, option: str, values: Mapping[str, str], ev: _Eval, pahole: int | None,
         seen: set[str]) -> tuple[tuple[str, ...], list[str]]:
    """The failing dependencies of ``option`` in words, and the options to turn on for them."""
    if option in seen:
        return (), []
    seen.add(option)
    e = kconfig.entries.get(option)
    if e is None:
        return (f"CONFIG_{option} does not exist in this tree",), []
    reasons: list[str] = []
    turn_on: list[str] = []
    for dep in e.depends:
        try:
            if ev(dep):
                continue
        except ConfigError:
            continue
        syms = _symbols(dep)
        if "PAHOLE_VERSION" in syms:
            built = values.get("PAHOLE_VERSION", "0")
            have = f"pahole {_dotted(int(built))}" if built.isdigit() and int(built) else "no pahole"
            reasons.append(f"depends on {dep}: this .config was made with {have}"
                           + (f"; this machine has pahole {_dotted(pahole)}" if pahole else
                              "; this machine has no pahole (Debian: dwarves)"))
            continue
        names = ", ".join(f"{s}={values.get(s, 'n')}" for s in syms)
        reasons.append(f"depends on {dep} ({names})")
        # a plain positive dependency on a symbol that a user can set: turn it on first
        for s in syms:
            se = kconfig.entries.get(s)
            if (values.get(s, "n") == "n" and re.search(rf"(?<![!\w]){s}(?![\w=<>!])", dep)
                    and not re.search(rf"!\s*{s}\b", dep) and se is not None and se.prompt):
                sub, more = _why(kconfig, s, values, ev, pahole, seen)
                reasons.extend(f"  {s}: {r}" for r in sub)
                for m in (*more, s):
                    if m not in turn_on:
                        turn_on.append(m)
    if not reasons and not e.prompt and not e.selected_by:
        reasons.append("has no prompt and nothing selects it")
    elif not reasons and not e.prompt:
        reasons.append("has no prompt: selected by " + ", ".join(e.selected_by[:4]))
    return tuple(reasons), turn_on


def _why_btf_without_tree(values: Mapping[str, str], pahole: int | None) -> tuple[str, ...]:
    """The two dependencies the kernel's lib/Kconfig.debug gives DEBUG_INFO_BTF, judged without a tree."""
    why = []
    if values.get("BPF_SYSCALL") != "y":
        why.append("depends on BPF_SYSCALL, which is not set")
    built = values.get("PAHOLE_VERSION")
    if built is not None and built.isdigit() and int(built) < 122:
        why.append(f"depends on PAHOLE_VERSION >= 122: made with pahole {_dotted(int(built))}")
    if pahole is not None and pahole < 122:
        why.append(f"this machine's pahole is {_dotted(pahole)}: DEBUG_INFO_BTF needs >= 1.22")
    if values.get("DEBUG_INFO", "n") != "y":
        why.append("needs debug info (DEBUG_INFO_DWARF5 or DEBUG_INFO_DWARF_TOOLCHAIN_DEFAULT)")
    return tuple(why)


def read_config(path: Path) -> tuple[dict[str, str], Path | None]:
    """A .config from ``path`` (a .config file, a tree with one, or a build directory), and the
    tree it belongs to (None when it cannot be told)."""
    if path.is_dir():
        cfg = path / ".config"
        if not cfg.is_file():
            raise ConfigError(f"{path}: no .config in it (run make olddefconfig, or name the file)")
        tree: Path | None = path if (path / "Kconfig").is_file() else None
        if tree is None and (path / "source").is_symlink():  # an O= build directory
            tree = (path / "source").resolve()
    elif path.is_file():
        cfg, tree = path, path.parent if (path.parent / "Kconfig").is_file() else None
    else:
        raise ConfigError(f"{path}: no such file or directory")
    try:
        text = cfg.read_text(errors="replace")
    except OSError as exc:
        raise ConfigError(f"{cfg}: {exc.strerror}") from exc
    return parse_config(text, os.fspath(cfg)), tree
