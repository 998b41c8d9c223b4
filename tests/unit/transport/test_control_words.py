"""The control channel's words: what the host writes (harness/transport/channels.py) and what the
guest's /init makes of it (images/init.sh's ``words``, run here by the busybox that goes into the
initramfs), byte for byte, for paths and arguments a shell would split, expand or glob."""

from __future__ import annotations

import re
import subprocess

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from harness.errors import EXIT_USAGE
from harness.images.initramfs import BUSYBOX, INIT_SCRIPT
from harness.transport.channels import (
    CONTROL_LINE_MAX,
    EMPTY_WORD,
    control_line,
    decode_word,
    encode_word,
)
from harness.transport.errors import ControlLineError
from tests.support.gating import require

HOSTILE = [
    "/user/my prog", "a b", "  two  spaces  ", "$HOME", "${PATH}", "$(id)", "'single'", '"double"', "`id`",
    "a;b", "a&&b|c", "*", "/*", "?", "[ab]", "~", "x\ny\n", "\n", "", "back\\slash", "\\x41", "\\", "\\c",
    "%s%b%%", "-n", "-e", "--", "tab\there", "cr\r", "\x01\x1f\x7f", "\x03\x04\x15\x17",  # ^C ^D ^U ^W: tty specials
    "é ü", "\udcff\udcfe",  # non-UTF-8 bytes 0xff 0xfe, as the command line reads them (surrogateescape)
    "#comment", "a=b", "''", '""',
]


def init_words_function() -> str:
    """init.sh's ``words`` function, as the guest runs it."""
    m = re.search(r"^words\(\) \{\n.*?^\}\n", INIT_SCRIPT.read_text(), re.S | re.M)
    assert m, "images/init.sh has no words() function"
    return m.group(0)


def guest_words(line: str) -> list[bytes]:
    """The positional parameters /init sets from ``line`` (the part after ``run ID``), through
    the initramfs's own busybox: split as init.sh splits it, each word printed NUL-terminated."""
    require(BUSYBOX.exists(), f"{BUSYBOX} is missing (busybox-static)")
    script = init_words_function() + 'set -f; words $LINE; set +f\neval "set -- $words"\n' \
        'for a; do printf "%s\\0" "$a"; done\n'
    out = subprocess.run([str(BUSYBOX), "sh", "-c", script], env={"LINE": line, "PATH": "/nonexistent"},
                         capture_output=True, check=True, timeout=30).stdout
    assert out.endswith(b"\0") or not out
    return out.split(b"\0")[:-1]


def fs(word: str) -> bytes:
    return word.encode("utf-8", "surrogateescape")


def test_hostile_words_reach_the_guest_shell_unchanged():
    line = control_line("run", 7, words=HOSTILE)
    assert line.isascii() and line.isprintable() and "\\n" not in line.replace("\\x0a", "")
    cmd, ident, rest = line.split(" ", 2)
    assert (cmd, ident) == ("run", "7")
    assert guest_words(rest) == [fs(w) for w in HOSTILE]


def test_tokens_hold_no_byte_the_tty_or_the_shell_reads():
    for w in HOSTILE:
        t = encode_word(w)
        assert t and re.fullmatch(r"[A-Za-z0-9_./,:=@+\\-]+|''", t), t
        assert decode_word(t) == fs(w)
    assert encode_word("") == EMPTY_WORD and encode_word("/user/plain-name_1.0") == "/user/plain-name_1.0"
    assert encode_word("a b") == "a\\x20b" and encode_word(b"\xff") == "\\xff"


@settings(max_examples=60, deadline=None)
@given(st.lists(st.binary(max_size=40).filter(lambda b: b"\0" not in b), min_size=1, max_size=6))
def test_any_bytes_but_nul_round_trip_through_busybox(words):
    _, _, rest = control_line("run", 1, words=words).split(" ", 2)
    assert [decode_word(t) for t in rest.split(" ")] == words
    assert guest_words(rest) == words


@pytest.mark.parametrize("word", ["a\0b", b"\0", "\0"])
def test_a_nul_byte_is_refused_before_anything_is_sent(word):
    with pytest.raises(ControlLineError, match="NUL byte") as e:
        control_line("run", 1, words=["/bin/true", word])
    assert e.value.exit_code == EXIT_USAGE


def test_the_line_bound_is_the_ttys_and_is_named():
    head = len("run 1 /bin/echo ")
    ok = control_line("run", 1, words=["/bin/echo", "a" * (CONTROL_LINE_MAX - head)])
    assert len(ok) == CONTROL_LINE_MAX
    with pytest.raises(ControlLineError, match=rf"{CONTROL_LINE_MAX + 1} bytes once encoded, over {CONTROL_LINE_MAX}"):
        control_line("run", 1, words=["/bin/echo", "a" * (CONTROL_LINE_MAX - head + 1)])
    # a space takes four bytes once encoded: the bound is on the line sent, not on the words given
    with pytest.raises(ControlLineError, match="N_TTY_BUF_SIZE"):
        control_line("run", 1, words=["/bin/echo", " " * ((CONTROL_LINE_MAX - head) // 4 + 1)])


def test_plain_fields_are_checked():
    assert control_line("later", 3, "0.5", words=["/bin/true"]) == "later 3 0.5 /bin/true"
    for bad in ("", "a b", "\\x20"):
        with pytest.raises(ControlLineError):
            control_line("recv", 3, bad, words=["/tmp/x"])


def test_decode_refuses_what_encode_never_writes():
    for bad in ("a b", "\\x4", "\\xZZ", "$x", "", "'"):
        with pytest.raises(ControlLineError):
            decode_word(bad)


def test_every_command_with_words_splits_with_globbing_off():
    """Each command of init.sh that takes words decodes them with words() under set -f; none
    splits its rest with a bare ``set -- $rest`` (which split a path at its spaces and globbed)."""
    init = INIT_SCRIPT.read_text()
    assert "set -- $rest" not in init and '"$rest"' not in init
    for cmd in ("run", "later", "dump", "sh", "recv"):
        body = re.search(rf"^    {cmd}\)\n(.*?)^      ;;", init, re.S | re.M).group(1)
        assert "set -f; words $rest; set +f" in body, cmd
