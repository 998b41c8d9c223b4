"""README.md and docs/*.md: the examples that need no guest run as the page shows them, every
``harness`` command line of every example names a subcommand and options that exist, README is a
front page (within 250 lines, every page in its table of contents) and every link resolves.

The examples that boot a guest run in tests/qemu/test_docs.py; the format of the marks is in
tests/support/docs.py and docs/development.md.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from harness.verdicts.causes import CAUSES
from tests.support import docs

EXAMPLES = docs.examples()
UNIT = [e for e in EXAMPLES if e.suite == "unit"]
ARGVS = [(e, argv) for e in EXAMPLES for argv in docs.harness_argvs(e)]
README_MAX_LINES = 250


@pytest.mark.parametrize("example", UNIT, ids=[e.id for e in UNIT])
def test_example_runs_as_shown(example, tmp_path):
    docs.run(example, tmp_path, timeout=180)


@pytest.mark.parametrize("example,argv", ARGVS, ids=[f"{e.id}:{' '.join(a[:3])}" for e, a in ARGVS])
def test_documented_command_line_exists(example, argv):
    """Run or not, a documented `harness` command names a subcommand and options that exist."""
    docs.check_argv(argv)


@pytest.mark.parametrize("page", docs.pages(), ids=lambda p: str(p.relative_to(docs.REPO)))
def test_command_lines_in_the_text_exist(page):
    """`harness run --report`, `harness kernel-diff --replay FILE`, ... in a page's sentences."""
    spans = docs.prose_argvs(page)
    for span, argv in spans:
        try:
            docs.check_argv(argv)
        except AssertionError as exc:
            raise AssertionError(f"{docs.rel(page)}: `{span}`: {exc}") from None


def test_the_pages_have_examples_of_each_kind():
    """The parser found what the pages hold (a parser that finds nothing would pass everything)."""
    suites = {s: sum(e.suite == s for e in EXAMPLES) for s in ("unit", "qemu", "skip")}
    assert suites["unit"] >= 10 and 1 <= suites["qemu"] <= 4 and suites["skip"] >= 1, suites
    assert len(ARGVS) >= 40, len(ARGVS)
    names = {argv[0] for _, argv in ARGVS if argv}
    assert {"run", "report", "check", "shell", "boot", "images", "doctor", "bench", "perf",
            "kernel-diff", "sframe"} <= names, names


def test_every_shell_block_is_typed():
    """A shell example written as ```bash, or as an untyped fence, would escape these tests."""
    bad = []
    for page in docs.pages():
        for lang, text, line, _ in docs.fences(page):
            looks_shell = any(x.startswith(("$ ", ".venv/bin/", "./dev ", "harness ")) for x in text.splitlines())
            if lang in docs.UNTYPED_SHELL or (lang not in docs.SHELL and lang not in ("pycon", "python")
                                              and looks_shell):
                bad.append(f"{page.relative_to(docs.REPO)}:{line} ```{lang}")
    assert not bad, "write shell examples as ```sh or ```console: " + ", ".join(bad)


def test_skipped_examples_say_why():
    for e in EXAMPLES:
        if e.suite == "skip":
            assert len(e.mark.skip.split()) >= 3, f"{e.id}: say why it is not run: {e.mark.skip!r}"


def test_readme_is_a_front_page():
    lines = docs.README.read_text().splitlines()
    assert len(lines) <= README_MAX_LINES, f"README.md has {len(lines)} lines; the rest goes to docs/"
    assert "./dev run" in docs.README.read_text() and "./dev test" in docs.README.read_text()


def _links(page: Path) -> list[str]:
    out = []
    for tok in docs.tokens(page):
        for child in tok.children or ():
            if child.type == "link_open":
                out.append(child.attrs["href"])
    return out


def _slug(heading: str) -> str:
    """GitHub's anchor of a heading: lower case, punctuation dropped, spaces to hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def _anchors(page: Path) -> set[str]:
    toks = docs.tokens(page)
    return {_slug(toks[i + 1].content) for i, t in enumerate(toks) if t.type == "heading_open"}


def test_every_doc_page_is_in_readmes_table_of_contents():
    linked = {(docs.README.parent / h.split("#")[0]).resolve() for h in _links(docs.README) if h.startswith("docs/")}
    missing = [p.name for p in sorted(docs.DOCS.glob("*.md")) if p.resolve() not in linked]
    assert not missing, f"docs pages not linked from README.md: {missing}"


@pytest.mark.parametrize("page", docs.pages(), ids=lambda p: str(p.relative_to(docs.REPO)))
def test_links_resolve(page):
    for href in _links(page):
        if re.match(r"^[a-z]+:", href):
            continue  # http:, https:, mailto:
        target, _, anchor = href.partition("#")
        path = (page.parent / target).resolve() if target else page
        assert path.exists(), f"{page.name}: link to {href}: no such file"
        if anchor and path.suffix == ".md":
            assert anchor in _anchors(path), f"{page.name}: link to {href}: no such heading in {path.name}"


#: Code spans that name files of this repository: they must exist (a moved module, test or data
#: file leaves the page untrue). Placeholders (NAME, KEY, PKG) are not paths.
REPO_PATH = re.compile(r"^(harness|tests|benchmarks|guest_programs|images|docs|\.ci)/[\w./*{},-]*")
PLACEHOLDER = re.compile(r"(^|/)[A-Z][A-Z_]+(\.|/|$)")


@pytest.mark.parametrize("page", docs.pages(), ids=lambda p: str(p.relative_to(docs.REPO)))
def test_named_repository_files_exist(page):
    missing = []
    for tok in docs.tokens(page):
        for child in tok.children or ():
            if child.type != "code_inline":
                continue
            m = REPO_PATH.match(child.content)
            if not m or PLACEHOLDER.search(m.group(0).replace("README.md", "")):
                continue
            path = m.group(0).rstrip(".,:")
            for alt in _braces(path):
                if not any(docs.REPO.glob(alt)) and not (docs.REPO / alt).exists():
                    missing.append(alt)
    assert not missing, f"{page.name} names files that do not exist: {missing}"


def _braces(path: str) -> list[str]:
    """`lib{64,32}` -> lib64, lib32."""
    m = re.search(r"\{([^}]*)\}", path)
    if not m:
        return [path]
    return [x for alt in m.group(1).split(",") for x in _braces(path[:m.start()] + alt + path[m.end():])]


def test_the_cause_table_is_the_registry():
    """docs/causes.md lists every cause of harness/verdicts/causes.py, and no other."""
    text = (docs.DOCS / "causes.md").read_text()
    rows = [line.split("|")[1] for line in text.splitlines() if line.startswith("| `")]
    listed = set(re.findall(r"`([a-z0-9-]+)`", " ".join(rows)))
    assert listed == set(CAUSES), (f"only in docs/causes.md: {sorted(listed - set(CAUSES))}; "
                                   f"only in the registry: {sorted(set(CAUSES) - listed)}")


def test_the_plugins_options_are_pytests(tmp_path):
    """docs/pytest-plugin.md names every --uh-* option pytest lists once the plugin is in, and no other."""
    r = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "--help"], cwd=tmp_path,
                       env=docs.env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=120)
    assert r.returncode == 0, r.stdout[-3000:]
    listed = set(re.findall(r"(--uh-[a-z-]+)", r.stdout))
    documented = set(re.findall(r"(--uh-[a-z-]+)", (docs.DOCS / "pytest-plugin.md").read_text()))
    assert listed and documented == listed, (sorted(documented), sorted(listed))


# --- the checks themselves fail where they should -------------------------------------------
def test_a_renamed_option_or_missing_subcommand_is_caught():
    docs.check_argv(["run", "fp-spin", "--samples", "5", "--args", "--not-checked"])
    docs.check_argv(["sframe", "dump", "--debug", "x"])
    for argv in (["run", "--smaples", "5"], ["frobnicate"], ["sframe", "show", "x"],
                 ["images", "build", "--kernels", "x"], ["bench", "speed"]):
        with pytest.raises(AssertionError):
            docs.check_argv(argv)


def test_shown_output_is_matched_in_order():
    out = "a: 1 stack(s)\nb: agree   4\nexit 0: fine\n"
    assert docs.match_output(["a: ... stack(s)", "...", "b: agree 4"], out) is None
    assert docs.match_output(["b: agree 4", "a: 1 stack(s)"], out) is not None  # out of order
    assert docs.match_output(["exit 1: fine"], out) is not None


def test_a_console_example_is_split_into_commands_with_heredocs(tmp_path):
    page = tmp_path / "page.md"
    page.write_text("<!-- doc-test: exit=1 -->\n```console\n$ cat > x <<'EOF'\n$ not a command\nEOF\n"
                    "$ grep -c command x \\\n  && false\n1\n```\n")
    (ex,) = docs.examples(page)
    cmds = ex.commands()
    assert [c.text.splitlines()[0] for c in cmds] == ["cat > x <<'EOF'", "grep -c command x \\"]
    assert cmds[1].shown == ("1",) and ex.mark.exit == 1
    with pytest.raises(docs.DocError):
        page.write_text("<!-- doc-test: skip -->\n```sh\ntrue\n```\n")
        docs.examples(page)
