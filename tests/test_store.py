"""The result store on disk (inspector/_base/store.py): entries are data, signed, whole, bounded, never stale.

Each test here uses a folder of its own; the rest of the suite runs with a fresh store per test
(tests/conftest.py), so no test ever reads the user's store.
"""

from __future__ import annotations

import contextlib
import json
import multiprocessing
import os
import random
import resource
import shutil
import signal
import stat
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

import fuzzing
import inspector
from inspector._base import store as _store

# The store's own tests never share the run's store (tests/conftest.py): each starts from an empty one.
pytestmark = pytest.mark.own_store

ROOT = Path(__file__).resolve().parent.parent
ARRAYS = {"a": np.arange(12, dtype=np.float32).reshape(3, 4), "b": np.array([1, -2, 3], dtype=np.int8)}


def _equal(entry, data, arrays) -> bool:
    return entry is not None and entry.data == data and sorted(entry.arrays) == sorted(arrays) and \
        all(np.array_equal(entry.arrays[k], v) and entry.arrays[k].dtype == v.dtype for k, v in arrays.items())


def test_an_entry_reads_back_as_written_and_a_missing_one_is_none(tmp_path):
    s = _store.Store(tmp_path)
    name = s.name("variant", ("fingerprint", 3), "upstream")
    assert name == s.name("variant", ("fingerprint", 3), "upstream") != s.name("variant", ("fingerprint", 4), "upstream")
    assert s.get(name) is None
    assert s.put(name, {"x": [1, "two", None]}, ARRAYS)
    assert _equal(s.get(name), {"x": [1, "two", None]}, ARRAYS)
    assert s.put(name + "-json", {"only": "json"}) and _equal(s.get(name + "-json"), {"only": "json"}, {})
    secret = tmp_path / "secret"
    assert stat.S_IMODE(secret.stat().st_mode) == 0o600 and len(secret.read_bytes()) == 32
    assert stat.S_IMODE(tmp_path.joinpath("entries").stat().st_mode) == 0o700


def test_what_is_not_data_is_not_kept(tmp_path):
    s = _store.Store(tmp_path)
    assert not s.put("objects", {"x": 1}, {"o": np.array([object()], dtype=object)})
    assert not s.put("nan", {"x": float("nan")})  # JSON has no NaN: the caller writes "nan"
    assert not s.put("code", {"x": print})
    assert len(s) == 0


def test_an_entry_that_cannot_be_trusted_is_ignored(tmp_path, monkeypatch):
    s = _store.Store(tmp_path)
    name = s.name("variant", "k")
    s.put(name, {"x": 1}, ARRAYS)
    path = tmp_path / "entries" / f"{name}.entry"
    good = path.read_bytes()
    # planted: a well-formed entry signed with another secret
    path.write_bytes(_store.encode(name, {"x": 666}, ARRAYS, b"\x01" * 32))
    assert s.get(name) is None
    # another entry's bytes under this name (each entry's signature covers its name)
    other = s.name("variant", "other")
    s.put(other, {"x": 2})
    path.write_bytes((tmp_path / "entries" / f"{other}.entry").read_bytes())
    assert s.get(name) is None
    # truncated, or one bit flipped
    path.write_bytes(good[: len(good) // 2])
    assert s.get(name) is None
    path.write_bytes(good[:-1] + bytes([good[-1] ^ 1]))
    assert s.get(name) is None
    # written by another version of the stack or the inspector: signed by us, still not read
    path.write_bytes(good)
    assert s.get(name) is not None
    monkeypatch.setattr(_store, "environment", lambda: "format 1|inspector 0.0.1 edited|torch 0")
    assert s.get(name) is None and s.name("variant", "k") != name


def test_a_secret_others_could_read_or_write_turns_the_store_off(tmp_path):
    s = _store.Store(tmp_path)
    s.put("a", {"x": 1})
    os.chmod(tmp_path / "secret", 0o644)
    fresh = _store.Store(tmp_path)
    with pytest.warns(RuntimeWarning, match="can be read by others"):
        assert fresh.get("a") is None
    assert not fresh.put("b", {"x": 1})


def test_past_its_bound_the_least_recently_used_go_first(tmp_path):
    s = _store.Store(tmp_path)
    for n, name in enumerate(("probe", "a", "b", "c")):
        s.put(name, {"pad": "x" * 2000})
        os.utime(tmp_path / "entries" / f"{name}.entry", (1000 + n, 1000 + n))  # used in this order
    s.max_bytes = s.size() * 7 // 8  # room for three and a half entries
    s.put("d", {"pad": "x" * 2000})
    assert s.get("probe") is None and s.get("a") is None
    assert all(s.get(n) is not None for n in ("b", "c", "d"))
    for n, name in enumerate(("b", "c", "d")):
        os.utime(tmp_path / "entries" / f"{name}.entry", (2000 + n, 2000 + n))
    assert s.get("b") is not None  # reading b marks it used now: c is the least recently used
    s.put("e", {"pad": "x" * 2000})
    assert s.get("c") is None and all(s.get(n) is not None for n in ("b", "d", "e"))
    assert s.size() <= s.max_bytes


def test_where_the_store_is_and_how_to_turn_it_off(tmp_path, monkeypatch):
    import platformdirs

    monkeypatch.setenv(_store.ENV, "off")
    assert _store.location() is None and _store.store() is None
    monkeypatch.setenv(_store.ENV, str(tmp_path / "mine"))
    assert _store.store().root == tmp_path / "mine"
    monkeypatch.setenv(_store.ENV_MB, "2")
    assert _store.store().max_bytes == 2 << 20
    monkeypatch.delenv(_store.ENV)
    assert _store.location() == Path(platformdirs.user_cache_dir("fold-inspector"))  # only asked, nothing made


def test_clear_cache_empties_the_disk_only_when_asked(tmp_path, monkeypatch):
    monkeypatch.setenv(_store.ENV, str(tmp_path))
    s = _store.store()
    s.put("a", {"x": 1})
    inspector.clear_cache()
    assert _store.store().get("a") is not None
    inspector.clear_cache(disk=True)
    assert _store.store().get("a") is None and len(_store.store()) == 0
    assert (tmp_path / "secret").exists()  # the user's secret stays


def _write_many(root: str, name: str, n: int, seed: int, queue) -> None:
    s = _store.Store(root)
    rng = np.random.default_rng(seed)
    same = {"big": np.arange(200_000, dtype=np.float32)}
    for i in range(n):
        ok = s.put(name, {"same": True}, same)  # both processes write the same entry ...
        ok &= s.put(f"{name}-{seed}-{i}", {"i": i}, {"r": rng.standard_normal(100)})  # ... and their own
        if not ok:
            queue.put(f"put failed in {seed} at {i}")
    queue.put("done")


def _read_many(root: str, name: str, seconds: float, queue) -> None:
    s = _store.Store(root)
    end = time.monotonic() + seconds
    seen = 0
    while time.monotonic() < end:
        entry = s.get(name)
        if entry is not None:
            seen += 1
            if entry.data != {"same": True} or not np.array_equal(entry.arrays["big"], np.arange(200_000, dtype=np.float32)):
                queue.put("a reader saw a mixed or partial entry")
    queue.put(f"read {seen}")


def test_two_processes_writing_the_same_entry_lose_nothing(tmp_path):
    ctx = multiprocessing.get_context("fork")
    queue = ctx.Queue()
    name = "shared"
    writers = [ctx.Process(target=_write_many, args=(str(tmp_path), name, 40, seed, queue)) for seed in (1, 2)]
    reader = ctx.Process(target=_read_many, args=(str(tmp_path), name, 3.0, queue))
    for p in (*writers, reader):
        p.start()
    for p in (*writers, reader):
        p.join(60)
        assert p.exitcode == 0
    said = []
    while not queue.empty() or len(said) < 3:
        said.append(queue.get(timeout=10))
    said.sort()
    assert len(said) == 3 and said[:2] == ["done", "done"] and said[2].startswith("read "), said
    s = _store.Store(tmp_path)
    assert _equal(s.get(name), {"same": True}, {"big": np.arange(200_000, dtype=np.float32)})
    for seed in (1, 2):
        for i in range(40):
            assert s.get(f"{name}-{seed}-{i}").data == {"i": i}
    assert len(s) == 81 and not list((tmp_path / "entries").glob("*.tmp"))


@pytest.mark.fuzz
def test_fuzzed_entries_are_ignored_never_raised(tmp_path):
    """Random byte flips, truncations, insertions and splices of real entries: each is a miss (or,
    when the mutation gave back the very bytes, the entry itself), never an exception."""
    s = _store.Store(tmp_path)
    names = []
    for n in range(4):
        name = s.name("variant", n)
        s.put(name, {"n": n, "text": "x" * (n * 50), "numbers": [1.5, "inf", None]}, {"a": np.arange(n * 30 + 1)})
        names.append(name)
    originals = {name: (tmp_path / "entries" / f"{name}.entry").read_bytes() for name in names}
    rng = random.Random(31)
    for case in range(1500):
        name = rng.choice(names)
        raw = bytearray(originals[name])
        kind = rng.randrange(5)
        if kind == 0:
            for _ in range(rng.randint(1, 8)):
                raw[rng.randrange(len(raw))] ^= 1 << rng.randrange(8)
        elif kind == 1:
            raw = raw[: rng.randrange(len(raw))]
        elif kind == 2:
            at = rng.randrange(len(raw))
            raw[at:at] = bytes(rng.randrange(256) for _ in range(rng.randint(1, 64)))
        elif kind == 3:
            other = originals[rng.choice(names)]
            cut = rng.randrange(len(raw))
            raw = raw[:cut] + other[cut:]
        else:
            raw = bytearray(rng.randbytes(rng.randrange(200)))
        (tmp_path / "entries" / f"{name}.entry").write_bytes(bytes(raw))
        got = s.get(name)
        assert got is None or bytes(raw) == originals[name], case
    # and the reader below the signature, fed bytes signed with the right secret but not an entry
    secret = (tmp_path / "secret").read_bytes()
    for case in range(300):
        payload = rng.randbytes(rng.randrange(300))
        if rng.random() < 0.5:  # a header length and a JSON header that lie
            header = json.dumps({"format": 1, "name": "x", "environment": _store.environment(), "data": {},
                                 "arrays": ["a"]}).encode()
            payload = rng.randrange(2 ** 64).to_bytes(8, "big") + header + payload
        raw = _store.MAGIC + _store.Store._mac(secret, "x", payload) + payload
        assert _store.decode(raw, "x", secret) is None, case


# ---------------------------------------------------------------- what the store refuses to read (issue 40)


@contextlib.contextmanager
def _bounded(seconds: float = 5.0, memory: int = 256 << 20):
    """Inside: at most ``seconds`` (a FIFO's open that waits is cut short: TimeoutError) and ``memory``
    more address space (a device or a huge file read whole: MemoryError), never the machine's; and the
    process's peak RSS grows by less than ``memory``."""
    def late(signum, frame):
        raise TimeoutError(f"still running after {seconds:g} s")

    previous = signal.signal(signal.SIGALRM, late)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    try:
        with fuzzing.capped(memory):
            yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 - peak < memory


@pytest.mark.parametrize("kind", list(fuzzing.PLANTS))
def test_a_planted_entry_is_a_miss_in_bounded_time_and_memory_and_is_written_over(tmp_path, kind):
    """What put() never writes, in place of an entry (a link to /dev/zero, a FIFO, an 8 GiB sparse file, a
    folder, a link to the valid entry moved elsewhere): get, in, len, size, trim and clear neither read
    nor follow it, within seconds and without growing; put writes a regular file over it."""
    root, elsewhere = tmp_path / "store", tmp_path / "elsewhere"
    s = _store.Store(root)
    name, kept = s.name("variant", "planted"), s.name("variant", "kept")
    assert s.put(name, {"x": 1}, ARRAYS) and s.put(kept, {"x": 0}, ARRAYS)
    path = root / "entries" / f"{name}.entry"
    fuzzing.plant(path, kind, elsewhere)
    start = time.perf_counter()
    with _bounded():
        assert s.get(name) is None and name not in s
        assert len(s) == 1 and s.size() < 1 << 20  # only the other entry: an 8 GiB one would trim it out
        assert s.trim() == 0 and _equal(s.get(kept), {"x": 0}, ARRAYS)
        assert s.put(name, {"x": 2}, ARRAYS)  # computed again: written over, never through
        assert stat.S_ISREG(os.lstat(path).st_mode) and _equal(s.get(name), {"x": 2}, ARRAYS)
        moved = path.read_bytes()
        fuzzing.plant(path, kind, elsewhere)
        s.clear()
    assert time.perf_counter() - start < 5
    assert not list((root / "entries").iterdir())  # the plant went too, a folder with what it held
    assert (root / "secret").is_file() and (kind != "elsewhere" or (elsewhere / path.name).read_bytes() == moved)


def test_a_secret_or_an_entries_folder_the_store_did_not_make_turns_it_off(tmp_path):
    """The secret a link, a FIFO or a folder, or the entries folder a link to another store's: the store
    is off, with one warning, in bounded time (the secret is never opened but as a regular file)."""
    for kind in ("device", "fifo", "folder", "elsewhere"):
        root = tmp_path / kind
        _store.Store(root).put("a", {"x": 1})
        fuzzing.plant(root / "secret", kind, tmp_path / f"{kind}-elsewhere")
        fresh = _store.Store(root)
        with _bounded(), pytest.warns(RuntimeWarning, match="secret .* is not a regular file"):
            assert fresh.get("a") is None
        assert not fresh.put("b", {"x": 1}), kind
    other = tmp_path / "other"
    _store.Store(other).put("a", {"x": 1})
    linked = tmp_path / "linked"
    linked.mkdir()
    shutil.copy2(other / "secret", linked / "secret")  # the same secret: only the link is wrong
    (linked / "entries").symlink_to(other / "entries", target_is_directory=True)
    with pytest.warns(RuntimeWarning, match="entries folder .* is not a folder"):
        assert _store.Store(linked).get("a") is None


def test_an_answer_bigger_than_an_entry_can_be_is_not_kept_nor_read(tmp_path, monkeypatch):
    """put() writes nothing past MAX_ENTRY_BYTES, so get() reads nothing past it: a file bigger is not an entry."""
    s = _store.Store(tmp_path)
    assert s.put("small", {"x": 1}) and s.put("big", {"x": 1}, {"a": np.zeros(4096, dtype=np.uint8)})
    monkeypatch.setattr(_store, "MAX_ENTRY_BYTES", 4096)
    assert not s.put("bigger", {"x": 1}, {"a": np.zeros(4096, dtype=np.uint8)}) and s.get("bigger") is None
    assert s.get("big") is None and "big" not in s and s.get("small") is not None
    assert len(s) == 1 and not (tmp_path / "entries" / "big.entry").exists()  # removed by the scan


def test_a_sweep_record_naming_a_file_that_is_not_a_plain_one_is_changed(tmp_path):
    """A model's record names the user's files it was built from: one that is now a link (even to the same
    bytes), a FIFO, a device, a folder or too big is "changed" (its model analysed again), in bounded time."""
    from inspector._base.hashing import digest
    from inspector._sweep.store import unchanged

    helper = tmp_path / "helper.py"
    helper.write_text("SCALE = 0.5\n")
    was = digest(helper.read_bytes())
    assert unchanged({str(helper): was})
    for kind in fuzzing.PLANTS:
        path = tmp_path / f"{kind}.py"
        path.write_text("SCALE = 0.5\n")
        fuzzing.plant(path, kind, tmp_path / "elsewhere")
        with _bounded():
            assert not unchanged({str(helper): was, str(path): was}), kind


# ---------------------------------------------------------------- compare, from disk, in a new process

NET = """
import torch
from torch import nn

import helper


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.conv = nn.Conv2d(3, 4, 3, padding=1)

    def forward(self, x):
        return helper.scaled(self.conv(x))

    def example_inputs(self):
        return (torch.randn(1, 3, 8, 8, generator=torch.Generator().manual_seed(1)),)
"""
HELPER = "SCALE = {}\n\ndef scaled(y):\n    return y * SCALE\n"
CHILD = """
import json, sys, time
t0 = time.perf_counter()
import inspector
from inspector._numbers import flow
if sys.argv[2] == "forbid":  # the answer must come from the store: the flow may not run
    def ran(*args, **kwargs):
        raise AssertionError("the flow ran")
    flow.run_variant = flow.float_reference = ran
t1 = time.perf_counter()
c = inspector.compare(sys.argv[1], variants=("upstream",), workers=1)
t2 = time.perf_counter()
print(json.dumps({"seconds": t2 - t1, "cached": [r.cached for r in c.results],
                  "metrics": [[m.sqnr_db, m.max_abs_error] for r in c.results for m in r.metrics],
                  "outputs": [[t.tolist() for step in r.outputs for t in step] for r in c.results]}))
"""


def _child(tmp_path: Path, store: Path, mode: str) -> dict:
    env = {**os.environ, _store.ENV: str(store), "PYTHONPATH": f"{ROOT}{os.pathsep}{tmp_path}"}
    out = subprocess.run([sys.executable, "-c", CHILD, f"{tmp_path / 'net.py'}:Net", mode], env=env,
                         capture_output=True, text=True, timeout=600, cwd=tmp_path)
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.mark.slow
@pytest.mark.requires_tosa
def test_compare_in_a_new_process_answers_from_the_store_and_an_edited_helper_is_computed_again(tmp_path):
    """The key is the exported program, not the model file's bytes: editing a module the model file
    imports gives another program, which is computed, never answered with the old numbers."""
    (tmp_path / "net.py").write_text(NET)
    (tmp_path / "helper.py").write_text(HELPER.format(0.5))
    store = tmp_path / "store"
    first = _child(tmp_path, store, "run")
    assert first["cached"] == [False]
    again = _child(tmp_path, store, "forbid")  # raises in the child if the flow runs
    assert again["cached"] == [True]
    assert again["metrics"] == first["metrics"] and again["outputs"] == first["outputs"]
    print(f"compare: computed {first['seconds']:.2f} s, from the store in a new process {again['seconds']:.2f} s "
          f"({again['seconds'] / first['seconds']:.3f}x)")
    (tmp_path / "helper.py").write_text(HELPER.format(4.0))  # net.py's own bytes do not change
    edited = _child(tmp_path, store, "run")
    assert edited["cached"] == [False]
    assert edited["outputs"] != first["outputs"]


SWEEP_CHILD = """
import json, sys
import inspector
s = inspector.sweep([sys.argv[1]], rules=("upstream",), stages=("tfa",), workers=1, out=sys.argv[2] or None)
print(json.dumps({"reused": s.reused, "sites": [r.sites for r in s.rows]}))
"""


@pytest.mark.slow
@pytest.mark.parametrize("where", ["out", "store in use"])
def test_a_sweeps_out_folder_does_not_answer_for_a_model_whose_imported_helper_changed(tmp_path, where):
    """The sweep's store (``out=``, or without it the store in use) finds a model's record by its file's
    bytes; the record is trusted only while every file the model was built from (the helper its file
    imports) is unchanged. A new process resumes from it either way."""
    (tmp_path / "net.py").write_text(NET)
    (tmp_path / "helper.py").write_text("def scaled(y):\n    return y * 0.5\n")  # a conv-mul site

    def run() -> dict:
        env = {**os.environ, "PYTHONPATH": f"{ROOT}{os.pathsep}{tmp_path}"}
        folder = str(tmp_path / "out") if where == "out" else ""
        out = subprocess.run([sys.executable, "-c", SWEEP_CHILD, f"{tmp_path / 'net.py'}:Net", folder],
                             env=env, capture_output=True, text=True, timeout=600, cwd=tmp_path)
        assert out.returncode == 0, out.stderr[-3000:]
        return json.loads(out.stdout.strip().splitlines()[-1])

    assert run() == {"reused": 0, "sites": [1]}
    assert run() == {"reused": 1, "sites": [1]}  # unchanged: read back
    (tmp_path / "helper.py").write_text("def scaled(y):\n    return y + 0.5\n")  # net.py's bytes do not change
    assert run() == {"reused": 0, "sites": [0]}
    assert (tmp_path / "out").exists() == (where == "out")


def test_a_variant_result_and_a_reference_read_back_equal(tmp_path, monkeypatch):
    """What compare keeps (``_numbers/result_store``): every field, the outputs bit for bit, inf SQNR."""
    import torch

    from inspector._numbers import result_store
    from inspector._numbers.results import Metrics, NotDelegated, QParams, SiteOutcome, Variant, VariantResult

    monkeypatch.setenv(_store.ENV, str(tmp_path))
    metrics = tuple(Metrics(output=o, step=s, values=(("max-abs", 0.5), ("mean-abs", 0.25), ("mse", 0.125),
                                   ("sqnr", float("inf") if s else 12.5), ("flushed", 0.0)),
                            sqnr_per_channel_db=(1.0, float("inf")))
                    for s in range(2) for o in range(2))
    outputs = tuple((torch.randn(1, 2, 3), torch.arange(4, dtype=torch.int32)) for _ in range(2))
    result = VariantResult(variant=Variant(rule="upstream", markers=("conv2d:mul",), quantization="a16w8",
                                           overrides=(("conv", "float"),)), folds={"tfa": 1, "lowering": 0},
                           sites=(SiteOutcome(site_id="conv2d:mul", folded_at="tfa",
                                              conv_output=QParams(scale=0.1, zero_point=-3), mul_output=None),),
                           metrics=metrics, not_delegated=(NotDelegated(node="n", target="aten.add", reason="why"),),
                           timings={"lower": 1.5}, quantization="a16w8",
                           outputs=outputs, log="the stack said <this>")
    key = ("fingerprint", "inputs", 2, "variant", ("upstream",), ("conv2d:mul",), ("a16w8", "INT", ""))
    assert result_store.load_result(key) is None
    result_store.keep_result(key, result)
    back = result_store.load_result(key)
    assert back == result and back.log == result.log
    assert all(torch.equal(a, b) and a.dtype == b.dtype for sa, sb in zip(back.outputs, outputs) for a, b in zip(sa, sb))
    assert result_store.load_result(key[:-1] + (("a8w8", "INT", ""),)) is None
    result_store.keep_result(key + ("failed",), VariantResult(variant=result.variant, folds={}, sites=(), metrics=(),
                                                              not_delegated=(), timings={}, error="no"))
    assert result_store.load_result(key + ("failed",)) is None  # an error is not an answer: never kept
    unstable = key + (("mine", "", "<no source: id 1234>"),)
    result_store.keep_result(unstable, result)
    assert result_store.load_result(unstable) is None  # a rule known by an object's id: not kept
    reference = [[torch.randn(2, 3)], [torch.randn(2, 3)]]
    result_store.keep_reference(("reference",) + key, reference)
    got = result_store.load_reference(("reference",) + key)
    assert [[t.tolist() for t in step] for step in got] == [[t.tolist() for t in step] for step in reference]


# ---------------------------------------------------------------- attribution and bits, from disk

SAMPLE = "sample:conv_mul_scalar"


def _entries(root: Path, kind: str) -> list[Path]:
    return sorted((root / "entries").glob(f"{kind}-*.entry"))


def _counting(monkeypatch, module, name: str) -> list:
    """Count the calls of ``module.name`` (still calling it): how many times the work was done."""
    calls, real = [], getattr(module, name)

    def counted(*args, **kwargs):
        calls.append(name)
        return real(*args, **kwargs)

    monkeypatch.setattr(module, name, counted)
    return calls


def test_an_attribution_and_a_bits_are_read_back_equal_and_an_unreadable_entry_is_computed_again(tmp_path, monkeypatch):
    """Kept as their JSON, read back by ``from_dict``; a flipped byte or a signed record that does not read
    (a field of the wrong kind) is computed again; FOLD_INSPECTOR_STORE=off keeps nothing."""
    from inspector._numbers import attribution as _attribution, bits as _bits

    monkeypatch.setenv(_store.ENV, str(tmp_path))
    attributed = _counting(monkeypatch, _attribution, "_attribute")  # bits also attributes its baseline
    measured = _counting(monkeypatch, _bits, "analyze")  # bits computing its changes looks at the sites

    def ask() -> tuple:
        """The answers, and how many attributions and bits were computed for them."""
        before = len(attributed), len(measured)
        answers = (inspector.attribution(SAMPLE, variants=("off", "upstream"), engine="simulation"),
                   inspector.bits(SAMPLE, engine="simulation"))
        return answers, (len(attributed) - before[0], len(measured) - before[1])

    (attribution, bits), work = ask()
    assert work == (2, 1) and bits.comparison is not None
    assert (len(_entries(tmp_path, "attribution")), len(_entries(tmp_path, "bits"))) == (2, 1)
    (again, bits_again), work = ask()
    assert work == (0, 0)  # both read from the store
    assert again.to_dict() == attribution.to_dict() and again == attribution
    assert bits_again.to_dict() == bits.to_dict() and bits_again == bits
    assert bits_again.comparison is None  # not kept (docs/store.md)

    for entry in _entries(tmp_path, "attribution"):
        raw = entry.read_bytes()
        entry.write_bytes(raw[:-1] + bytes([raw[-1] ^ 1]))
    (again, bits_again), work = ask()
    assert work == (1, 0) and again.to_dict() == attribution.to_dict()  # bits' own entry still reads

    s = _store.store()
    readable = [e for e in _entries(tmp_path, "attribution") + _entries(tmp_path, "bits") if s.get(e.stem)]
    assert len(readable) == 2  # the attribution computed again and bits' (its baseline's is still corrupt)
    for entry in readable:
        wrong = s.get(entry.stem).data["record"]
        if "variants" in wrong:
            wrong["variants"][0]["nodes"][0]["order"] = "0"  # signed, but not an attribution
        else:
            wrong["changes"][0]["kind"] = None
        assert s.put(entry.stem, {"record": wrong})
    (again, bits_again), work = ask()
    assert work == (2, 1)
    assert again.to_dict() == attribution.to_dict() and bits_again.to_dict() == bits.to_dict()

    monkeypatch.setenv(_store.ENV, "off")
    inspector.clear_cache(disk=True)
    kept = sorted(p.name for p in (tmp_path / "entries").iterdir())
    (again, bits_again), work = ask()
    assert work == (2, 1) and again.to_dict() == attribution.to_dict() and bits_again.to_dict() == bits.to_dict()
    assert sorted(p.name for p in (tmp_path / "entries").iterdir()) == kept


def test_attribution_and_bits_from_dict_check_every_field():
    """Every field round-trips (inf, None, nested site records); a missing, extra or wrong-kind field raises."""
    from inspector._numbers.attribution import (Attribution, NodeError, OutputAgreement, SiteError,
                                                VariantAttribution)
    from inspector._numbers.bits import Bits, BitsChange

    conv = NodeError(node="m:conv2d", name="conv2d", module="m", op="conv2d", site="s1", role="conv", order=3, step=0,
                     sqnr_db=float("inf"), max_abs_error=0.0, scale=0.5, zero_point=-2, drop_db=None)
    mul = NodeError(node="m:mul", name="mul", module="m", op="mul", site="s1", role="mul", order=4, step=0,
                    sqnr_db=12.5, max_abs_error=0.25, scale=None, zero_point=None, drop_db=1.5)
    variant = VariantAttribution(label="upstream", rule="upstream", folded=("s1",), nodes=(conv, mul),
                                 entry_points=(mul,),
                                 agreement=(OutputAgreement(output=0, step=0, max_steps=1.0, scale=0.5),
                                            OutputAgreement(output=1, step=0, max_steps=None, scale=None)))
    record = Attribution(target="net", steps=1, calibration="4 batches", variants=(variant,),
                         sites=(SiteError(site="s1", variant="upstream", folded=False, step=0, conv=conv, mul=mul,
                                          state_write=None),),
                         order=("m:conv2d", "m:mul"), engine="simulation")
    data = json.loads(json.dumps(record.to_dict(), allow_nan=False))
    assert Attribution.from_dict(data) == record and Attribution.from_dict(data).to_dict() == record.to_dict()
    bits = Bits(target="net", steps=2, baseline="upstream@a8w8", baseline_sqnr_db=20.0,
                changes=(BitsChange(change="fold off", kind="model", node=None, variant="off@a8w8", sqnr_db=23.0,
                                    recovered_db=3.0),
                                                 BitsChange(change="keep in float", kind="site", node="s1",
                                                            variant="x", sqnr_db=None, recovered_db=None, error="it broke")),
                notes=("a note",), engine="tosa")
    data_bits = json.loads(json.dumps(bits.to_dict(), allow_nan=False))
    assert Bits.from_dict(data_bits) == bits and Bits.from_dict(data_bits).to_dict() == bits.to_dict()

    def broken(data, path, value):
        copy = json.loads(json.dumps(data))
        *inner, last = path
        where = copy
        for k in inner:
            where = where[k]
        if value is KeyError:
            del where[last]
        else:
            where[last] = value
        return copy

    for path, value in [(("steps",), "1"), (("engine",), "faster"), (("order",), "m:conv2d"), (("sites", 0, "folded"), 0),
                        (("variants", 0, "nodes", 0, "zero_point"), 1.5), (("variants", 0, "nodes", 1, "site"), 7),
                        (("variants", 0, "simulation_vs_tosa", 0, "output"), None), (("sites", 0, "mul"), KeyError),
                        (("variants", 0, "label"), KeyError), (("variants", 0, "extra"), 1)]:
        with pytest.raises((TypeError, ValueError, KeyError)):
            Attribution.from_dict(broken(data, path, value))
    for path, value in [(("answer",), "it is the bits"), (("baseline_sqnr_db",), 21.0), (("changes", 0, "kind"), None),
                        # a missing field that has a default reads as it (a file written before it existed): "variant" has none
                        (("changes", 1, "variant"), KeyError), (("notes",), "a note"), (("target",), KeyError)]:
        with pytest.raises((TypeError, ValueError, KeyError)):
            Bits.from_dict(broken(data_bits, path, value))


ASK_CHILD = """
import json, sys, time
t0 = time.perf_counter()
import inspector
from inspector._numbers import attribution, bits, flow
engine, mode = sys.argv[1], sys.argv[2]
if mode == "forbid":  # the answers must come from the store: nothing may be quantized, lowered or run
    def ran(*args, **kwargs):
        raise AssertionError("computed")
    flow.run_variant = flow.run_simulated = flow.float_reference = flow.quantize = ran
    attribution._attribute = attribution.quantize = bits.analyze = ran
t1 = time.perf_counter()
a = inspector.attribution("sample:conv_mul_scalar", variants=("off", "upstream"), engine=engine, workers=1)
t2 = time.perf_counter()
b = inspector.bits("sample:conv_mul_scalar", engine=engine, workers=1)
t3 = time.perf_counter()
print(json.dumps({"attribution_seconds": t2 - t1, "bits_seconds": t3 - t2, "attribution": a.to_dict(),
                  "bits": b.to_dict()}))
"""


def _ask_child(store: Path, engine: str, mode: str) -> dict:
    env = {**os.environ, _store.ENV: str(store), "PYTHONPATH": str(ROOT)}
    out = subprocess.run([sys.executable, "-c", ASK_CHILD, engine, mode], env=env, capture_output=True, text=True,
                         timeout=900, cwd=store.parent)
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.mark.slow  # two new processes each (the in-process test above is the quick loop's)
@pytest.mark.parametrize("engine", ["simulation", pytest.param("tosa", marks=pytest.mark.requires_tosa)])
def test_an_attribution_and_a_bits_in_a_new_process_are_answered_from_the_store(tmp_path, engine):
    """The second process may not quantize, lower or run anything (the child raises if it does), and
    its answers equal the first's."""
    store = tmp_path / "store"
    first = _ask_child(store, engine, "run")
    assert first["attribution"]["engine"] == first["bits"]["engine"] == engine
    again = _ask_child(store, engine, "forbid")  # raises in the child if anything is computed
    assert again["attribution"] == first["attribution"] and again["bits"] == first["bits"]
    for what in ("attribution", "bits"):
        computed, read = first[f"{what}_seconds"], again[f"{what}_seconds"]
        print(f"{what} ({engine}): computed {computed:.2f} s, from the store in a new process {read:.2f} s "
              f"({read / computed:.3f}x)")


# ---------------------------------------------------------------- the verbs, with planted entries (issue 40)

PLANTED_CHILD = """
import json, resource, signal, sys, time
from pathlib import Path

import inspector
from inspector._numbers import attribution, bits

import fuzzing

store, out, engine, kinds = Path(sys.argv[1]), Path(sys.argv[2]), sys.argv[3], sys.argv[4].split(",")
SAMPLE = "sample:conv_mul_scalar"
work = []  # the attributions and bits computed (not read back)
for module, name in ((attribution, "_attribute"), (bits, "analyze")):
    def counted(*args, _real=getattr(module, name), _name=name, **kwargs):
        work.append(_name)
        return _real(*args, **kwargs)
    setattr(module, name, counted)


def ask() -> dict:
    \"\"\"Every verb's answer, the memory caches emptied first (only the store may answer), and what was computed.\"\"\"
    inspector.clear_cache()
    before, got, t = len(work), {}, time.perf_counter()
    c = inspector.compare(SAMPLE, variants=("off", "upstream"), engine=engine, workers=1)
    got["compare"] = [[[m.sqnr_db, m.max_abs_error] for m in r.metrics] for r in c.results]
    got["outputs"] = [[t.tolist() for step in r.outputs for t in step] for r in c.results]
    got["cached"] = [r.cached for r in c.results]
    if engine == "simulation":  # the TOSA run is compare's: the others are the same reads of the store
        got["attribution"] = inspector.attribution(SAMPLE, variants=("off", "upstream"), engine=engine, workers=1).to_dict()
        got["bits"] = inspector.bits(SAMPLE, engine=engine, workers=1).to_dict()
        s = inspector.sweep([SAMPLE], rules=("upstream",), stages=("tfa",), steps=1, engine=engine, workers=1, out=str(out))
        got["sweep"] = [{k: v for k, v in r.to_dict().items() if k not in ("seconds", "timings")}
                        for r in (*s.rows, *s.variants)]
        got["reused"] = s.reused
    got["work"] = work[before:]
    got["seconds"] = time.perf_counter() - t
    return got


def entries() -> list:
    return sorted(p for folder in (store, out) for p in (folder / "entries").glob("*.entry"))


clean = ask()
kept = ask()  # from the store: these entries answer
found = entries()
for n, path in enumerate(found):  # every entry planted, the kinds in turn
    fuzzing.plant(path, kinds[n % len(kinds)], store.parent / "elsewhere" / path.parent.parent.name)
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
signal.alarm(180)  # a reader that waits on a FIFO ends the process, never hangs the test
with fuzzing.capped(1 << 30):  # a reader that reads a device or a huge file whole fails here, not the machine
    planted = ask()
signal.alarm(0)
print(json.dumps({"clean": clean, "kept": kept, "planted": planted,
                  "planted_entries": {f"{p.parent.parent.name}/{p.name}": kinds[n % len(kinds)] for n, p in enumerate(found)},
                  "grown": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 - peak,
                  "regular": [f"{p.parent.parent.name}/{p.name}" for p in found if p.is_file() and not p.is_symlink()]}))
"""


def _planted_child(tmp_path: Path, engine: str, kinds) -> dict:
    store = tmp_path / "store"
    env = {**os.environ, _store.ENV: str(store), "PYTHONPATH": f"{ROOT}{os.pathsep}{ROOT / 'tests'}"}
    out = subprocess.run([sys.executable, "-c", PLANTED_CHILD, str(store), str(tmp_path / "out"), engine, ",".join(kinds)],
                         env=env, capture_output=True, text=True, timeout=600, cwd=tmp_path)
    assert out.returncode == 0, (out.returncode, out.stderr[-3000:])
    return json.loads(out.stdout.strip().splitlines()[-1])


def _computed_again_equal(got: dict, answers) -> None:
    """The store answered the second ask (so the planted entries are the ones read); with every entry
    planted, everything was computed again, equal to the clean run, within seconds and without growing."""
    clean, kept, planted = got["clean"], got["kept"], got["planted"]
    assert all(kept["cached"]) and kept["work"] == [] and kept.get("reused", 1) > 0
    assert not any(planted["cached"]) and planted.get("reused", 0) == 0
    assert sorted(planted["work"]) == sorted(clean["work"]) and bool(clean["work"]) == ("attribution" in clean)
    for what in answers:
        assert planted[what] == clean[what], what
    assert sorted(got["regular"]) == sorted(got["planted_entries"])  # each plant written over by a regular file
    assert planted["seconds"] < 2 * clean["seconds"] + 10  # a plant costs a miss: the same work as the clean run
    assert got["grown"] < 256 << 20, got["grown"]  # and no memory past it


@pytest.mark.slow  # a new process (the unit tests above are the quick loop's)
def test_compare_attribution_bits_and_a_sweeps_out_folder_with_planted_entries_compute_again(tmp_path):
    """Every entry compare, attribution, bits and sweep(out=) read, replaced by a plant (each kind on some:
    a link to /dev/zero, a FIFO, an 8 GiB sparse file, a folder, a link to the entry elsewhere): their
    answers are computed again, equal to the clean run's, the plants written over."""
    got = _planted_child(tmp_path, "simulation", list(fuzzing.PLANTS))
    kinds = got["planted_entries"]
    for verb in ("variant-", "reference-", "attribution-", "bits-", "sweep-model-", "sweep-row-", "sweep-variant-"):
        assert any(name.split("/")[1].startswith(verb) for name in kinds), verb  # each verb read a planted entry
    assert set(kinds.values()) == set(fuzzing.PLANTS)
    _computed_again_equal(got, ("compare", "outputs", "attribution", "bits", "sweep"))
    print(f"planted: clean {got['clean']['seconds']:.1f} s, planted {got['planted']['seconds']:.1f} s, "
          f"peak RSS +{got['grown'] >> 20} MiB")


@pytest.mark.slow
@pytest.mark.requires_tosa
def test_a_tosa_compare_with_its_entries_planted_computes_them_again(tmp_path):
    """The issue's three plants (a link to /dev/zero, a FIFO, an 8 GiB sparse file) in place of a real TOSA
    compare's results and reference: the same numbers and outputs, bit for bit, computed again."""
    got = _planted_child(tmp_path, "tosa", ("device", "fifo", "sparse"))
    assert sorted(got["planted_entries"].values()) == ["device", "fifo", "sparse"]
    _computed_again_equal(got, ("compare", "outputs"))
    print(f"planted (tosa): clean {got['clean']['seconds']:.1f} s, planted {got['planted']['seconds']:.1f} s, "
          f"peak RSS +{got['grown'] >> 20} MiB")
