"""Fuzzing what reads a stranger's bytes (project issues 21 and 40): .pt2 archives, session files, CLI
numbers, the result store's entries.

A fixed seed and a bounded count here; ``make fuzz`` runs the same mutators (tests/fuzzing.py) with
a random seed until stopped. Every case must end in a result or one InspectorError line, within
5 s, raising the process's peak RSS by less than 512 MiB, without running the code planted in it.
The rules are first shown to catch what they look for (positive controls), and every input a
campaign ever failed on replays from tests/fuzz_corpus/.
"""

from __future__ import annotations

import collections
import io
import json
import pickle
import tempfile
import time

import pytest
import torch

import fuzzing
import inspector
from inspector import InspectorError

pytestmark = pytest.mark.fuzz

SEED = 21  # the issue's number: any fixed seed would do
ARCHIVE_CASES = 2000
SESSION_CASES = 1000
CLI_CASES = 300
STORE_CASES = 600  # a few milliseconds each
ANALYZED = 8  # archives that load despite their mutation and also go through inspector.analyze (~1 s each)


@pytest.fixture(scope="module")
def judge(tmp_path_factory):
    with fuzzing.arena(tmp_path_factory.mktemp("fuzz")) as arena:
        yield fuzzing.Judge(arena)


def _fuzz(judge, kind: str, count: int, analyze: int = 0):
    """``count`` cases of ``kind`` from SEED; the first ``analyze`` that load are also analyzed."""
    outcomes, problems = collections.Counter(), []
    start = time.perf_counter()
    for index in range(count):
        case = fuzzing.make_case(judge.arena.bases, kind, SEED, index)
        verdict = judge.judge(case, analyze=outcomes["loaded and analyzed"] < analyze)
        outcomes[verdict.outcome] += 1
        if verdict.problem:
            problems.append(f"{case.label[:300]}: {verdict.problem}")
    return outcomes, problems, time.perf_counter() - start


def _report(capsys, kind: str, outcomes, seconds: float) -> None:
    with capsys.disabled():
        print(f"\nfuzz {kind}: {sum(outcomes.values())} cases in {seconds:.1f} s: {dict(outcomes)}")


def test_archives(judge, capsys):
    outcomes, problems, seconds = _fuzz(judge, "pt2", ARCHIVE_CASES, analyze=ANALYZED)
    _report(capsys, "pt2", outcomes, seconds)
    assert not problems, f"{len(problems)} of {ARCHIVE_CASES} archives broke a rule; first: " + " | ".join(problems[:5])
    # both ends are reached: the mutators neither break every archive nor leave them all valid
    assert outcomes["refused"] > ARCHIVE_CASES // 2 and outcomes["loaded"] > 0, outcomes
    assert outcomes["loaded and analyzed"] == ANALYZED, outcomes


def test_sessions(judge, capsys):
    outcomes, problems, seconds = _fuzz(judge, "session", SESSION_CASES)
    _report(capsys, "session", outcomes, seconds)
    assert not problems, f"{len(problems)} of {SESSION_CASES} sessions broke a rule; first: " + " | ".join(problems[:5])
    assert outcomes["refused"] and outcomes["loaded"] and outcomes["refused until trusted"], outcomes


def test_cli_arguments(judge, capsys):
    outcomes, problems, seconds = _fuzz(judge, "cli", CLI_CASES)
    _report(capsys, "cli", outcomes, seconds)
    assert not problems, f"{len(problems)} of {CLI_CASES} command lines broke a rule; first: " + " | ".join(problems[:5])
    argvs = [json.loads(fuzzing.make_case(judge.arena.bases, "cli", SEED, i).data) for i in range(CLI_CASES)]
    valid = sum(map(fuzzing.cli_arguments_ok, argvs))
    assert 0 < valid < CLI_CASES, valid  # both kinds of argument lists were tried


def test_store_entries(judge, capsys):
    """Mutated entries and what put() never writes (a link to a device, a FIFO, an 8 GiB sparse file, a
    folder, a link to a valid entry elsewhere): each a miss (or the entry's own bytes, read), written over."""
    outcomes, problems, seconds = _fuzz(judge, "store", STORE_CASES)
    _report(capsys, "store", outcomes, seconds)
    assert not problems, f"{len(problems)} of {STORE_CASES} entries broke a rule; first: " + " | ".join(problems[:5])
    labels = [fuzzing.make_case(judge.arena.bases, "store", SEED, i).label for i in range(STORE_CASES)]
    assert all(any(what in label for label in labels) for what in fuzzing.PLANTS.values()), "every plant was tried"
    assert outcomes["miss, written over"] > STORE_CASES // 2 and any("signed again" in label for label in labels), outcomes


# ----------------------------------------------------------------------------- the corpus


@pytest.mark.parametrize("case,note", [pytest.param(case, note, id=name) for name, case, note in fuzzing.corpus_cases()])
def test_corpus_replays(judge, case, note):
    """Every input a campaign failed on now passes every rule (the note says what it broke then)."""
    verdict = judge.judge(case, analyze=True)
    assert verdict.problem is None, f"{case.label}: {verdict.problem} (when found: {note['problem']})"


def test_corpus_layout():
    files = {p.name for p in fuzzing.CORPUS.iterdir()}
    assert "README.md" in files
    cases = {name for name in files if name != "README.md" and not name.endswith(fuzzing.NOTE_SUFFIX)}
    notes = {name[: -len(fuzzing.NOTE_SUFFIX)] for name in files if name.endswith(fuzzing.NOTE_SUFFIX)}
    assert cases == notes, "every kept input has a note and every note its input"
    assert len(fuzzing.corpus_cases()) == len(cases), "every kept input is of a kind the replay knows"


# ----------------------------------------------------------------------------- positive controls


def _valid_case(judge) -> fuzzing.Case:
    return fuzzing.Case("pt2", "control", fuzzing._zip_plain(judge.arena.bases.archives["conv_mul_scalar"]))


def _raises_key_error(data):
    return {}["missing"]


def _two_lines(data):
    raise InspectorError("bad\nfile")


def _too_long(data):
    raise InspectorError("x" * 5000)


def _crashes_into_the_catch_all(data):
    raise InspectorError("refusing to load x.pt2: the archive is malformed (TypeError)")


def _unpickles(data):
    return pickle.loads(fuzzing.evil_pickle())


def _hangs(data):
    time.sleep(30)


def _leaves_temp_folder(data):
    tempfile.mkdtemp()
    raise InspectorError("refused")


def _grows(data):
    """Resident memory past the process's peak so far by 64 MiB (only a new peak counts)."""
    import psutil

    blob = b"x" * (fuzzing._peak_rss() - psutil.Process().memory_info().rss + (64 << 20))
    raise InspectorError(f"refused after {len(blob)} bytes")


_BROKEN_LOADERS = {
    "another exception type": (_raises_key_error, "raised KeyError"),
    "a message of two lines": (_two_lines, "spans 2 lines"),
    "a message too long": (_too_long, "characters long"),
    "a check that crashed": (_crashes_into_the_catch_all, "did not foresee"),
    "an unsafe unpickler": (_unpickles, "the planted code ran"),
    "a hang": (_hangs, "still running after 0.5 s"),
    "a temp folder left behind": (_leaves_temp_folder, "in the temp folder"),
    "memory": (_grows, "peak RSS grew"),
}


@pytest.mark.parametrize("name", list(_BROKEN_LOADERS))
def test_the_judge_catches_a_broken_loader(judge, monkeypatch, name):
    """A loader that breaks each rule is reported (tight limits, so the controls are quick and small)."""
    loader, needle = _BROKEN_LOADERS[name]
    monkeypatch.setattr(inspector._targets.pt2, "load_pt2_bytes", loader)
    verdict = judge.stricter(seconds=0.5, memory=32 << 20).judge(_valid_case(judge))
    assert verdict.problem and needle in verdict.problem, verdict


def _before_issue_40(path, limit):
    """The store's reader before issue 40: ``exists()``, then ``read_bytes()``: any link followed, anything
    opened (a FIFO waits for a writer), read whole."""
    from pathlib import Path

    if not Path(path).exists():
        return None
    try:
        return bytearray(Path(path).read_bytes())
    except OSError:
        return None


_BROKEN_STORE_READERS = {  # what the old reader does with each plant, and what the judge says of it
    "elsewhere": "read a link to the entry",
    "device": "raised MemoryError",
    "sparse": "raised MemoryError",
    "fifo": "still running after 0.5 s",
}


@pytest.mark.parametrize("kind", list(_BROKEN_STORE_READERS))
def test_the_judge_catches_the_store_reader_before_issue_40(judge, monkeypatch, kind):
    """Each plant is caught when the store reads it as it did before (tight limits: quick, small)."""
    needle = _BROKEN_STORE_READERS[kind]
    monkeypatch.setattr(inspector._base.store, "read_regular", _before_issue_40)
    case = fuzzing.store_case("control", "fuzz-1", kind, judge.arena.bases.entries["fuzz-1"][2])
    verdict = judge.stricter(seconds=0.5, memory=32 << 20).judge(case)
    assert verdict.problem and needle in verdict.problem, verdict


@pytest.mark.parametrize("door", ["a size expression", "a pytree enum", "a pytree defaultdict factory"])
def test_the_planted_payloads_are_live(judge, monkeypatch, door):
    """torch's own loader runs what the mutators plant: the marker check can fail."""
    monkeypatch.setattr(inspector._targets.pt2, "load_pt2_bytes", lambda data: torch.export.load(io.BytesIO(data)))
    base = "dynamic_conv_mul" if door == "a size expression" else "conv_mul_scalar"
    case = fuzzing.Case("pt2", door, fuzzing.planted(judge.arena.bases, base, door))
    problem = judge.judge(case).problem or ""
    assert problem.startswith(("the planted code ran", f"the archive's module {fuzzing.EVIL_MODULE} was imported")), problem


@pytest.mark.parametrize("door", fuzzing.DOORS)
def test_our_loader_refuses_every_plant(judge, door):
    base = "dynamic_conv_mul" if door == "a size expression" else "conv_mul_scalar"
    verdict = judge.judge(fuzzing.Case("pt2", door, fuzzing.planted(judge.arena.bases, base, door)))
    assert verdict.outcome == "refused" and verdict.problem is None, verdict


def test_the_judge_catches_a_session_read_without_trust(judge, monkeypatch):
    from inspector._front import session

    trusting = session.read_session
    monkeypatch.setattr(session, "read_session", lambda path, trust=False: trusting(path, trust=True))
    case = fuzzing.Case("session", "control", judge.arena.bases.sessions["rule_file"])
    assert "read without trust" in (judge.judge(case).problem or "")


def test_the_judge_catches_an_argument_checked_late(judge, monkeypatch):
    """With the shape bounds unchecked, the CLI reaches the model first: the judge names it."""
    for where in ("inspector._base.limits", "inspector._targets.load", "inspector._sweep.models"):  # wherever bound
        monkeypatch.setattr(f"{where}.check_shape", lambda shape, what="input shape": shape)
    argv = ["analyze", fuzzing.MISSING_PT2, "--input-shape", "1,1,1,1,1,1,1,1,1"]
    case = fuzzing.Case("cli", "control", json.dumps(argv).encode())
    assert "not checked before the model" in (judge.judge(case).problem or "")
