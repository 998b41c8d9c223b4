"""The examples of README.md and docs/*.md, found and run as a user runs them.

A shell example is a fenced ``sh`` block (a script) or ``console`` block (``$ COMMAND`` lines, each
followed by the output it shows). An HTML comment on the line before a fence marks it:
``<!-- doc-test: qemu -->`` (boots a guest: the QEMU suite runs it), ``<!-- doc-test: skip: REASON
-->`` (not run; the reason is required), ``<!-- doc-test: exit=N -->`` (the expected exit status),
``<!-- doc-test: file=NAME -->`` (another block, e.g. Python, written to NAME before the page's
examples run). docs/development.md says the same for the writers of the pages.

The Markdown is read by markdown-it-py (CommonMark): fences inside lists, longer fences and
indented code are its job, not a regular expression's. The commands run through the entry point
of the interpreter's environment (``.venv/bin/harness`` in the scratch directory is that
environment), so they fail as a user's would when a subcommand or an option is gone.
"""

from __future__ import annotations

import contextlib
import functools
import io
import os
import re
import shlex
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

from markdown_it import MarkdownIt

REPO = Path(__file__).resolve().parents[2]
README = REPO / "README.md"
DOCS = REPO / "docs"

#: Fence languages that are shell examples; any other fence is not run (a ``file=`` mark aside).
SHELL = ("sh", "console")
#: Languages that must not be used for shell (they would escape the tests): write ``sh``.
UNTYPED_SHELL = ("bash", "shell", "shell-session", "zsh")
#: What the scratch directory of an example links from the checkout (the examples' inputs).
CHECKOUT_LINKS = ("guest_programs", "tests")

MARK = re.compile(r"<!--\s*doc-test:\s*(?P<body>.*?)\s*-->", re.S)
HEREDOC = re.compile(r"<<-?\s*(['\"]?)(?P<word>\w+)\1")


class DocError(ValueError):
    """A page's example or mark is malformed: the page must be fixed, not the test."""


@dataclass(frozen=True)
class Mark:
    qemu: bool = False
    skip: str | None = None
    exit: int = 0
    file: str | None = None

    @classmethod
    def parse(cls, body: str, where: str) -> Mark:
        kw: dict = {}
        rest = body.strip()
        while rest:
            if rest.startswith("skip"):
                reason = rest[len("skip"):].lstrip(":").strip()
                if not reason:
                    raise DocError(f"{where}: `doc-test: skip` needs a reason: `skip: WHY`")
                kw["skip"] = reason
                break
            item, _, rest = rest.partition(",")
            item, rest = item.strip(), rest.strip()
            if item == "qemu":
                kw["qemu"] = True
            elif item.startswith("exit="):
                kw["exit"] = int(item[5:])
            elif item.startswith("file="):
                kw["file"] = item[5:]
            else:
                raise DocError(f"{where}: unknown doc-test mark item {item!r}")
        return cls(**kw)


@dataclass(frozen=True)
class Command:
    """One ``$`` command of a console example and the output lines shown after it."""
    text: str
    shown: tuple[str, ...]


@dataclass(frozen=True)
class Example:
    page: Path
    line: int  # of the opening fence, 1-based
    lang: str
    text: str
    mark: Mark = field(default_factory=Mark)

    @property
    def id(self) -> str:
        return f"{rel(self.page)}:{self.line}"

    @property
    def suite(self) -> str:
        """``unit``, ``qemu`` or ``skip``: where this example runs."""
        if self.mark.skip:
            return "skip"
        return "qemu" if self.mark.qemu else "unit"

    def commands(self) -> list[Command]:
        """A console example's commands with their shown output (heredocs kept with their command)."""
        if self.lang != "console":
            raise DocError(f"{self.id}: only console examples have $ commands")
        cmds: list[tuple[list[str], list[str]]] = []
        lines = self.text.splitlines()
        i = 0
        while i < len(lines):
            line = lines[i]
            if line.startswith("$ "):
                cmd = [line[2:]]
                while cmd[-1].endswith("\\") and i + 1 < len(lines):
                    i += 1
                    cmd.append(lines[i])
                m = HEREDOC.search(" ".join(cmd))
                if m:
                    while i + 1 < len(lines):
                        i += 1
                        cmd.append(lines[i])
                        if lines[i].strip() == m["word"]:
                            break
                    else:
                        raise DocError(f"{self.id}: heredoc {m['word']} never ends")
                cmds.append((cmd, []))
            elif not cmds:
                if line.strip():
                    raise DocError(f"{self.id}: a console example starts with a `$ ` command")
            else:
                cmds[-1][1].append(line)
            i += 1
        if not cmds:
            raise DocError(f"{self.id}: a console example without a `$ ` command")
        return [Command("\n".join(c), tuple(out)) for c, out in cmds]

    def script_lines(self) -> list[str]:
        """The example's shell command lines: continuations joined, heredoc bodies left out."""
        texts = [c.text for c in self.commands()] if self.lang == "console" else [self.text]
        out: list[str] = []
        for text in texts:
            lines = text.splitlines()
            i = 0
            while i < len(lines):
                line = lines[i]
                while line.endswith("\\") and i + 1 < len(lines):
                    i += 1
                    line = line[:-1] + " " + lines[i]
                out.append(line)
                m = HEREDOC.search(line)
                if m:
                    while i + 1 < len(lines) and lines[i + 1].strip() != m["word"]:
                        i += 1
                    i += 1
                i += 1
        return out


def pages() -> list[Path]:
    return [README, *sorted(DOCS.glob("*.md"))]


def rel(page: Path) -> str:
    return str(page.relative_to(REPO)) if page.is_relative_to(REPO) else str(page)


def tokens(page: Path):
    return _parse(page.read_text())


@functools.cache
def _parse(text: str):
    return MarkdownIt("commonmark").enable("table").parse(text)  # GitHub renders GFM tables


def fences(page: Path) -> list[tuple[str, str, int, Mark | None]]:
    """Every fenced block of ``page``: (language, text, line, the mark on the line before it)."""
    out = []
    pending: tuple[Mark, int] | None = None
    for tok in tokens(page):
        if tok.type == "html_block" and MARK.search(tok.content):
            where = f"{rel(page)}:{tok.map[0] + 1}"
            if pending:
                raise DocError(f"{rel(page)}:{pending[1]}: a doc-test mark not followed by a fence")
            pending = (Mark.parse(MARK.search(tok.content)["body"], where), tok.map[1])
            continue
        if tok.type == "fence":
            lang = (tok.info.split() or [""])[0]
            mark = None
            if pending:
                if pending[1] != tok.map[0]:
                    raise DocError(f"{rel(page)}:{tok.map[0] + 1}: "
                                   "a doc-test mark must be on the line before its fence")
                mark = pending[0]
                pending = None
            out.append((lang, tok.content, tok.map[0] + 1, mark))
        elif pending and tok.type not in ("html_block",):
            raise DocError(f"{rel(page)}:{pending[1]}: a doc-test mark not followed by a fence")
    if pending:
        raise DocError(f"{rel(page)}:{pending[1]}: a doc-test mark at the end of the page")
    return out


def examples(page: Path | None = None) -> list[Example]:
    """The shell examples of one page (or of every page)."""
    if page is None:
        return [e for p in pages() for e in examples(p)]
    found = []
    for lang, text, line, mark in fences(page):
        if lang in SHELL:
            found.append(Example(page, line, lang, text, mark or Mark()))
        elif mark and (mark.qemu or mark.exit or mark.skip):
            raise DocError(f"{rel(page)}:{line}: a {lang or 'plain'} block is not run: only file= marks it")
    return found


def files(page: Path) -> dict[str, str]:
    """The blocks of ``page`` marked ``file=NAME``."""
    return {mark.file: text for lang, text, line, mark in fences(page) if mark and mark.file}


# --- running -------------------------------------------------------------------------------
def venv() -> Path:
    """The environment the tests run in: its bin/harness is the one the examples call."""
    prefix = Path(sys.prefix)
    if not (prefix / "bin" / "harness").exists():
        raise FileNotFoundError(f"{prefix}/bin/harness: this package is not installed in the test's "
                                "environment (./dev installs it into .venv)")
    return prefix


def env() -> dict[str, str]:
    """The user's environment, with this checkout's package first (the venv may be another
    checkout's editable install) and without the variables of the pytest running the test."""
    e = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "COV_CORE"))}
    e["PYTHONPATH"] = os.pathsep.join([str(REPO), *filter(None, [os.environ.get("PYTHONPATH")])])
    e["TERM"] = "dumb"
    return e


def scratch(example: Example, tmp: Path) -> Path:
    """A directory laid out like the checkout for the example: .venv, the inputs, the page's files."""
    (tmp / ".venv").symlink_to(venv())
    for name in CHECKOUT_LINKS:
        (tmp / name).symlink_to(REPO / name)
    for name, text in files(example.page).items():
        (tmp / name).write_text(text)
    return tmp


def normalized(line: str) -> str:
    return " ".join(line.split())


def match_output(shown: tuple[str, ...] | list[str], actual: str) -> str | None:
    """None when every shown line is an output line, in order; else what was not found.

    Runs of blanks count as one, blank lines not at all, and ``...`` stands for any text within
    a line; a line of ``...`` alone only says lines were left out."""
    have = [normalized(x) for x in actual.splitlines()]
    at = 0
    for want in shown:
        want = normalized(want)
        if not want or want == "...":
            continue
        pattern = re.compile(".*".join(re.escape(part) for part in want.split("...")))
        for i in range(at, len(have)):
            if pattern.fullmatch(have[i]):
                at = i + 1
                break
        else:
            return f"shown line not in the output (after its line {at}): {want!r}"
    return None


def run(example: Example, tmp: Path, timeout: float) -> None:
    """Run ``example`` in a scratch directory; raise AssertionError when it does not do what the
    page shows (exit status, output)."""
    cwd = scratch(example, tmp)
    if example.lang == "sh":
        steps = [Command(example.text, ())]
    else:
        steps = example.commands()
    for n, step in enumerate(steps):
        r = subprocess.run(["bash", "-e", "-o", "pipefail", "-c", step.text], cwd=cwd, env=env(),
                           stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                           text=True, timeout=timeout, check=False)
        want = example.mark.exit if n == len(steps) - 1 else 0
        tail = r.stdout[-6000:]
        assert r.returncode == want, f"{example.id}: `{step.text}` exited {r.returncode}, the page says {want}:\n{tail}"
        miss = match_output(step.shown, r.stdout)
        assert miss is None, f"{example.id}: `{step.text}`: {miss}\n--- its output:\n{tail}"


# --- the harness command lines of the examples ---------------------------------------------
def harness_argvs(example: Example) -> list[list[str]]:
    """Every ``harness`` invocation in the example: its arguments after the program name."""
    argvs = []
    for line in example.script_lines():
        lex = shlex.shlex(line, posix=True, punctuation_chars=True)
        lex.whitespace_split = True
        lex.commenters = "#"
        try:
            words = list(lex)
        except ValueError as exc:
            raise DocError(f"{example.id}: cannot split {line!r}: {exc}") from None
        cmd: list[str] = []
        skip_next = False
        for w in [*words, ";"]:
            if skip_next:
                skip_next = False
                continue
            if w and set(w) <= set("|&;()<>"):
                if cmd and Path(cmd[0]).name == "harness":
                    argvs.append(cmd[1:])
                cmd = []
                skip_next = w in (">", ">>", "<", "2>", "<<")  # the file (or heredoc word) after it
                continue
            if not cmd and "=" in w and not w.startswith("-"):
                continue  # VAR=value before the command
            cmd.append(w)
    return argvs


@functools.cache
def help_text(*path: str) -> str:
    """What ``harness PATH --help`` prints: the parser :func:`harness.cli.main` builds, run in this
    process at 80 columns, the width argparse gives a pipe.  (A ``harness`` subprocess per command
    cost its imports, ~0.7 s of CPU, some twenty times per xdist worker; the examples themselves
    still run the installed ``harness``: :func:`run`.)"""
    from harness.cli import DESCRIPTION
    from harness.commands import build_parser, load

    load()
    out = io.StringIO()
    columns = os.environ.get("COLUMNS")
    os.environ["COLUMNS"] = "80"
    code: object = "no exit"
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
            build_parser(DESCRIPTION).parse_args([*path, "--help"])
    except SystemExit as exc:
        code = exc.code
    finally:
        if columns is None:
            os.environ.pop("COLUMNS", None)
        else:
            os.environ["COLUMNS"] = columns
    if code not in (0, None):
        raise AssertionError(f"harness {' '.join(path)} --help exited {code}:\n{out.getvalue()}")
    return out.getvalue()


def _choices(help_: str) -> list[str]:
    """The choices of a command's positional subcommand or selector ({a,b} under "positional arguments")."""
    section = help_.split("positional arguments:", 1)
    if len(section) < 2:
        return []
    m = re.search(r"^\s+\{([\w,-]+)\}", section[1], re.M)
    return m.group(1).split(",") if m else []


def _options(help_: str) -> set[str]:
    return set(re.findall(r"(?<![\w-])(--?[A-Za-z][\w-]*)", help_))


def check_argv(argv: list[str]) -> None:
    """Raise AssertionError when ``harness ARGV`` names a subcommand that does not exist or an
    option its ``--help`` does not list. Arguments after ``--args`` are the program's."""
    args = [a for a in argv if a != "--debug"]
    top = help_text()
    if args in ([], ["--help"], ["-h"]):  # `harness --debug ...` names the global option
        return
    subs = _choices(top)
    assert args and args[0] in subs, f"harness {shlex.join(argv)}: no subcommand {args[:1]} (harness has {subs})"
    path = [args[0]]
    rest = args[1:]
    help_ = help_text(*path)
    choices = _choices(help_)
    if choices:
        positional = next((a for a in rest if not a.startswith("-")), None)
        if positional is not None or (rest and "--help" not in rest):  # `harness bench` alone names it
            assert positional in choices, f"harness {shlex.join(argv)}: {positional!r} is not one of {choices}"
            if "{" + ",".join(choices) + "} ..." in help_:  # argparse's usage of subcommands
                path.append(positional)  # a sub-subcommand with its own options
                help_ = help_text(*path)
            rest = [a for a in rest if a != positional]
    known = _options(help_)
    for a in rest:
        if a in ("--args", "--"):
            break
        if a.startswith("-") and len(a) > 1:
            opt = a.split("=", 1)[0]
            assert opt in known, f"harness {shlex.join(argv)}: `harness {' '.join(path)}` has no option {opt}"


def prose_argvs(page: Path) -> list[tuple[str, list[str]]]:
    """The ``harness SUBCOMMAND ...`` code spans of the page's text, as argument lists: a
    synopsis's brackets dropped, ``a|b`` taken as its first choice, ``...`` left out. A span whose
    subcommand word ends with a colon quotes a message, not a command line."""
    found = []
    for tok in tokens(page):
        for child in tok.children or ():
            if child.type != "code_inline" or not re.match(r"(\.venv/bin/)?harness [a-z-]", child.content):
                continue
            words = child.content.split()[1:]
            if words[0].endswith(":"):
                continue
            argv = []
            for w in words:
                w = w.strip("[]")
                if not w or w.startswith("..."):
                    continue
                argv.append(w.split("|")[0] if "|" in w and not w.startswith("-") else w)
            found.append((child.content, argv))
    return found
