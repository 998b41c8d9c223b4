"""Mutations of real event logs, and what ``harness check`` must say of each.

A *seed* is a sealed log that ``harness check`` passes (exit 0): the first records of a real run's
log (tests/data/run-small, written by the engine on a QEMU guest) or of a model run, closed by
an end record and rewritten by :class:`harness.deferred.log.EventLog` as the current writer writes
them (version 2, with its digest).  :func:`mutate` changes a seed the ways a log gets corrupted or
tampered with: a line deleted, duplicated, swapped, a stretch reversed, a seq changed, the header's
version, word size or profile changed, a field given another type, a line cut, bytes flipped, the
log cut short.  :func:`judge` runs the checker as ``harness check`` reads a file and says whether
the verdict is allowed:

* a mutation that leaves the bytes, or the parsed records, as they were may pass;
* a log cut to a prefix of its whole lines must read as clean and *incomplete* (exit 1), not as
  corrupt;
* anything else must never pass (exit 0);
* the structural mutations (a line deleted, duplicated, swapped, reversed, cut, a seq changed, the
  header deleted or given an unknown version or word size) must be named by the reader or the
  checker themselves, not only by the digest.

The mutation's random choices come from ``rng``: a :class:`random.Random` (the unit suite's bulk
run), hypothesis's ``st.randoms()`` (which shrinks a failure to its simplest mutation), or an
adapter over atheris's FuzzedDataProvider (tests/fuzz/targets.py ``log_mutations``); all three
only call ``rng.randrange(n)``.
"""

from __future__ import annotations

import functools
import io
import json
from dataclasses import dataclass, field
from pathlib import Path

from harness.deferred import IRQ, NMI, SYSCALL, Context, DeferredModel, EventLog, UnwindWork, mainline, seed_v10
from harness.deferred.check import check_lines
from harness.deferred.log import LOG_VERSION, LogDigestError, LogFormatError, stack_counts
from harness.deferred.log import loads as log_loads
from tests.support.eventlog import relog

DATA = Path(__file__).resolve().parent.parent / "data"

# (log, how many of its first lines): each prefix holds one or two of the run's stack records and no
# failure verdict, so the sealed seed passes; short, so that the unit suite checks 10^5 mutations
# of them in seconds (a mutation is as likely in a short log as in a long one).
REAL_PREFIXES = (("fp-syscall", 16), ("fp-syscall", 29), ("prologues", 16), ("forkexec", 16))


def seal(events: list[dict], requests: int | None = None) -> list[str]:
    """``events`` (a header first) closed by an end record with their counts, written again by
    :class:`EventLog`: the header's version is the writer's, the end record carries the digest."""
    events = [dict(e) for e in events]
    events[0]["version"] = LOG_VERSION
    stacks = [e for e in events if e["ev"] == "stack"]
    if requests is None:
        requests = sum(e["ev"] == "request" for e in events)
    end = {"ev": "end", "reason": "complete", **stack_counts(stacks), "requests": requests, "errors": []}
    return relog(events + [end])


def model_log(profile, seed: int, steps: int = 12) -> list[dict]:
    """A short run of the model through its synchronous API (requests from every context, walks,
    forks, exits), as parsed records."""
    import random

    rng = random.Random(seed)
    fp = io.StringIO()
    stacks: dict[int, list[int]] = {}
    model = DeferredModel(profile, lambda t: stacks[t.pid], log=EventLog(fp))
    works = [UnwindWork(lambda *a: None, f"t{i}") for i in range(2)]
    for w in works:
        model.init(w)
    tasks = [model.spawn(cpu=i) for i in range(2)]
    for _ in range(steps):
        live = [x for x in tasks if not x.dead]
        if not live:
            break
        t = rng.choice(live)
        if not t.in_kernel:
            stacks[t.pid] = [rng.randrange(0x400000, 0x500000) for _ in range(rng.randint(1, 4))]
            model.enter_kernel(t, cpu=rng.randrange(2))
            continue
        op = rng.random()
        if op < 0.5:
            model.request(rng.choice(works), t, t.cpu, Context(rng.choice([NMI, IRQ, SYSCALL])))
        elif op < 0.85:
            model.return_to_user(t)
        elif op < 0.9 and profile.name == "mainline":
            model.unwind_user_faultable(t)
        elif op < 0.97 and len(tasks) < 4:
            child = model.fork(t)
            stacks[child.pid] = [0x401000]
            tasks.append(child)
        else:
            model.exit(t)
    for t in tasks:
        if t.in_kernel and not t.dead:
            model.return_to_user(t)
    return [json.loads(line) for line in fp.getvalue().splitlines()]


def seeds() -> dict[str, list[str]]:
    """The seed logs, name -> lines (without newlines); each passes ``harness check``."""
    out = {}
    for name, n in REAL_PREFIXES:
        lines = (DATA / "run-small" / f"{name}.jsonl").read_text().splitlines()[:n]
        out[f"{name}[:{n}]"] = seal([json.loads(x) for x in lines])
    for profile in (mainline(), seed_v10()):
        out[f"model-{profile.name}"] = seal(model_log(profile, seed=3))
    for lines in out.values():
        for line in lines:
            _DECODED[line] = json.loads(line)
    return out


# The seeds' lines, decoded once: most lines of a mutated log are a seed's, unchanged, and decoding
# them again for every log was a third of the checker's time in the bulk run.  _loads gives the
# checker what json.loads would give it (any other text, one a mutation changed or broke, goes to
# json.loads itself); check_decoded_intact holds that nothing changed a shared record inside.
_DECODED: dict[str, dict] = {}


def _loads(text: str):
    record = _DECODED.get(text)
    return log_loads(text) if record is None else dict(record)  # the reader adds "line" to its copy


def check_decoded_intact() -> None:
    """Every shared decoded seed line is still what json.loads makes of its text."""
    changed = [line for line, record in _DECODED.items() if record != json.loads(line)]
    assert not changed, f"a reader or the checker changed a shared decoded record: {changed[0][:200]}"


@functools.lru_cache(maxsize=4096)
def _is_object(line: str) -> bool:
    """``line`` decodes to a JSON object (raises ValueError if it is not JSON: not cached)."""
    return isinstance(json.loads(line), dict)


# ------------------------------------------------------------------------------------ mutations

_OTHER_VALUES = ("x", "", 0, -1, 1, 1 << 64, 1.5, True, False, None, [], {}, [0], {"a": 1})
# header values: (field, value, whether the reader must refuse it by itself)
_HEADER = (
    [("version", v, v not in (1, 2)) for v in (99, 0, -1, 3, "2", None, 2.0, True)]
    + [("version", 1, True)]  # a version 1 header over an end record with a digest
    + [("word_bits", v, True) for v in (7, 0, 16, 128, 63, "64", None, 64.0)]
    + [("word_bits", 32, False)]  # refused when an address needs more than 32 bits (real logs' do)
    + [("profile", v, True) for v in ("v11", "", None, 1, "Mainline")]
    + [("profile", v, False) for v in ("mainline", "seed-v10")]
    + [("max_entries", v, True) for v in (0, -1, "510", None, 1.0)]
    + [("max_entries", v, False) for v in (1, 509, 512)]
)


@dataclass
class Mutation:
    ops: list[str] = field(default_factory=list)  # what was done, for the message of a failure
    structural: bool = True  # the reader or the checker must name it, not only the digest


def _choice(rng, seq):
    return seq[rng.randrange(len(seq))]


def _dump(d: dict) -> str:
    return json.dumps(d, separators=(",", ":"))


def _set_seq(line: str, value) -> str:
    d = json.loads(line)
    d["seq"] = value
    return _dump(d)


def _retype(rng, value, depth: int = 0):
    """``value`` with one of its parts (itself, or a value somewhere inside it) replaced by a value
    of another type; returns (new value, description)."""
    if isinstance(value, (dict, list)) and value and depth < 6 and rng.randrange(3):
        keys = list(value) if isinstance(value, dict) else list(range(len(value)))
        k = _choice(rng, keys)
        inner, what = _retype(rng, value[k], depth + 1)
        value = dict(value) if isinstance(value, dict) else list(value)
        value[k] = inner
        return value, f"[{k!r}]{what}"
    others = [v for v in _OTHER_VALUES if type(v) is not type(value)]
    new = _choice(rng, others)
    return new, f" {value!r:.30} -> {new!r}"


def _one(rng, lines: list[str], m: Mutation) -> list[str]:
    n = len(lines)
    lines = list(lines)
    op = _choice(rng, ("delete", "duplicate", "swap", "reverse", "seq", "header", "retype", "truncate",
                       "flip", "cut"))
    if op in ("seq", "header", "retype"):  # they edit a record: not one an earlier mutation cut or broke
        try:
            if not all(_is_object(x) for x in lines):
                raise ValueError
        except ValueError:
            op = "duplicate"
    if op == "delete":
        i = rng.randrange(n)
        del lines[i]
        m.ops.append(f"delete line {i + 1}")
    elif op == "duplicate":
        i = rng.randrange(n)
        lines.insert(i + 1, lines[i])
        m.ops.append(f"duplicate line {i + 1}")
    elif op == "swap":
        i, j = rng.randrange(n), rng.randrange(n)
        if i == j:
            j = (i + 1) % n
        lines[i], lines[j] = lines[j], lines[i]
        m.ops.append(f"swap lines {i + 1} and {j + 1}")
    elif op == "reverse":
        i = rng.randrange(n - 1)
        j = i + 2 + rng.randrange(n - i - 1)
        lines[i:j] = lines[i:j][::-1]
        m.ops.append(f"reverse lines {i + 1}..{j}")
    elif op == "seq":
        i = rng.randrange(n)
        seq = i + 1
        value = _choice(rng, (seq + 1, seq - 1, 0, -1, seq + 2 + rng.randrange(5), 1 + rng.randrange(n), str(seq),
                              None, float(seq), True))
        if value == seq and type(value) is int:
            value = seq + 1
        lines[i] = _set_seq(lines[i], value)
        m.ops.append(f"seq of line {i + 1} -> {value!r}")
    elif op == "header":
        what, value, refused = _choice(rng, _HEADER)
        d = json.loads(lines[0])
        if rng.randrange(8) == 0:
            d.pop(what, None)
            m.ops.append(f"header without {what}")
        elif rng.randrange(8) == 0:
            d["flags"] = 1
            m.ops.append("header with a field no writer writes")
        else:
            d[what] = value
            m.ops.append(f"header {what} -> {value!r}")
            m.structural = m.structural and refused
        lines[0] = _dump(d)
        if rng.randrange(6) == 0:
            del lines[0]
            m.ops[-1] += ", then the header deleted"
            m.structural = True
    elif op == "retype":
        i = rng.randrange(n)
        d = json.loads(lines[i])
        k = _choice(rng, [k for k in d if k not in ("seq", "ev")] or ["ev"])
        d[k], what = _retype(rng, d[k])
        lines[i] = _dump(d)
        m.ops.append(f"line {i + 1} {k}{what}")
        m.structural = False  # a nullable field made null, an evidence object's inside: only the digest sees it
    elif op == "truncate":
        i = rng.randrange(n)
        if not lines[i]:  # cut to nothing by an earlier mutation: cut the next line instead
            i = (i + 1) % n
        k = rng.randrange(len(lines[i])) if lines[i] else 0
        lines[i] = lines[i][:k]
        m.ops.append(f"line {i + 1} cut to {k} characters")
    elif op == "flip":
        data = bytearray(("\n".join(lines) + "\n").encode())
        for _ in range(1 + rng.randrange(3)):
            p = rng.randrange(len(data))
            data[p] ^= 1 << rng.randrange(8)
            m.ops.append(f"byte {p} flipped")
        m.structural = False
        return [bytes(data)]  # bytes: judge() decodes them as harness check does
    else:  # cut
        k = rng.randrange(n)
        del lines[k:]
        m.ops.append(f"cut after line {k}")
    return lines


def mutate(rng, lines: list[str]) -> tuple[bytes, Mutation]:
    """One to three mutations of ``lines`` (a log without newlines): the file's bytes and what was done.
    Only a single mutation is held to the structural rule (two may undo each other's trace)."""
    m = Mutation()
    count = 1 if rng.randrange(4) else 2 + rng.randrange(2)
    for _ in range(count):
        if len(lines) < 2:
            break
        lines = _one(rng, lines, m)
        if len(lines) == 1 and isinstance(lines[0], bytes):  # flipped: the rest work on the bytes no more
            break
    if count > 1:
        m.structural = False
    if len(lines) == 1 and isinstance(lines[0], bytes):
        return lines[0], m
    return ("".join(line + "\n" for line in lines)).encode(), m


# ------------------------------------------------------------------------------------ verdicts


class MutationPassed(AssertionError):
    """``harness check`` said something of a mutated log that it must not."""


@dataclass
class Outcome:
    kind: str  # noop, unreadable, format, digest, violation, incomplete (a cut prefix), passed
    message: str = ""


def run_check(data: bytes):
    """What ``harness check FILE`` does with these bytes (harness/commands/check.py): decoded as
    UTF-8, read line by line as a text file reads (universal newlines).  Returns the verdict, or
    the error that makes it exit 2."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        return exc
    try:
        return check_lines(io.StringIO(text, newline=None), loads=_loads)
    except LogFormatError as exc:
        return exc


def _records(data: bytes) -> list | None:
    try:
        return [json.loads(x) for x in io.StringIO(data.decode("utf-8"), newline=None)]
    except ValueError:  # not UTF-8 (UnicodeDecodeError), not JSON
        return None


def judge(original: list[str], data: bytes, m: Mutation, result=None) -> Outcome:
    """Whether ``harness check``'s verdict on ``data`` (a mutation of ``original``) is allowed;
    raises :class:`MutationPassed` when it is not.  ``result``: :func:`run_check`'s, if run."""
    before = "".join(line + "\n" for line in original).encode()
    if data == before:
        return Outcome("noop")
    if result is None:
        result = run_check(data)
    got = data.decode("utf-8", "replace").split("\n")
    if got[-1] == "" and len(got) - 1 < len(original) and got[:-1] == original[: len(got) - 1]:
        # whole lines, a prefix of the log: cut short, which is incomplete and not corrupt
        if isinstance(result, Exception) or not result.clean or result.complete:
            raise MutationPassed(f"{'; '.join(m.ops)}: a cut log must read clean and incomplete, got "
                                 f"{result if isinstance(result, Exception) else result.messages() or 'complete'}")
        return Outcome("incomplete")
    if isinstance(result, UnicodeDecodeError):
        return Outcome("unreadable", str(result))
    if isinstance(result, LogDigestError):
        outcome = Outcome("digest", str(result))
    elif isinstance(result, LogFormatError):
        return Outcome("format", str(result))
    elif result.violations:
        return Outcome("violation", result.messages()[0])
    elif not result.ok:
        outcome = Outcome("not ok", "incomplete" if not result.complete else "failure verdicts or an unfinished run")
    else:
        outcome = Outcome("passed")
    if outcome.kind == "passed" or m.structural:
        original_records = [json.loads(x) for x in original]
        if _records(data) == original_records:
            return Outcome("noop")
        if outcome.kind == "passed":
            raise MutationPassed(f"{'; '.join(m.ops)}: harness check passed the mutated log")
        raise MutationPassed(f"{'; '.join(m.ops)}: only {outcome.kind} ({outcome.message[:200]}) saw it, "
                             "not the reader's or the checker's own rules")
    return outcome
