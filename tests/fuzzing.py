"""Seeded mutators and the judge for fuzzing what reads a stranger's bytes (project issues 21 and 40).

Four readers take input that may come from anyone (docs/design.md, "What is trusted"): ``.pt2``
archives (``inspector._targets.pt2``), session files (``inspector._front.session.read_session``), the command
line's numeric and shape arguments (``inspector._front.cli.main``) and the result store's entries
(``inspector._base.store``: a sweep's ``out=`` is shared). Every case must end in a result or in
one ``InspectorError`` line (an entry: a miss, written over when computed again), within
``CASE_SECONDS``, without the process growing by ``MEMORY_BYTES``, and without running the code planted in it.

tests/test_fuzz.py (a fixed seed, a bounded count) and scripts/fuzz.py (``make fuzz``: a random
seed, until stopped) share this module, so what the campaign finds replays in the suite from
tests/fuzz_corpus/. A case is made from ``random.Random(f"{seed}:{kind}:{index}")`` and the bases
alone: (seed, kind, index) names it exactly.
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import hashlib
import io
import json
import os
import pickle
import random
import resource
import signal
import struct
import sys
import tempfile
import time
import warnings
import zipfile
from pathlib import Path
from typing import Any
from collections.abc import Callable

import torch

ROOT = Path(__file__).resolve().parent.parent
CORPUS = ROOT / "tests" / "fuzz_corpus"
MiB = 1 << 20

KINDS = ("pt2", "session", "cli", "store")
CASE_SECONDS = 5.0  # one case, including the analysis of a program that loaded
MEMORY_BYTES = 512 * MiB  # how much one case may raise the process's peak RSS
MAX_ERROR_CHARS = 2000  # the bound tests/test_bad_inputs.py holds every CLI error line to
MARKER_ENV = "FOLD_INSPECTOR_FUZZ_MARKER"  # the planted code creates the file this names
EVIL_MODULE = "fold_fuzz_evil"  # importing it creates the marker (the pytree import doors)
MISSING_PT2 = "fuzz-missing.pt2"  # the CLI cases' target: valid arguments end at "no such file"
MARKER_NAME = "planted-code-ran"


# ----------------------------------------------------------------------------- payloads


def code_payload() -> str:
    """A Python expression that creates the marker: no '.', so it survives a split on dots, and
    only builtins, so it is also a sympy string. The marker path comes from the environment, so
    a case saved in the corpus plants the same payload in every later run."""
    name = ",".join(f"chr({ord(c)})" for c in MARKER_ENV)
    path = f'getattr(getattr(__import__("os"),"environ"),"get")(getattr("","join")([{name}]))'
    return f'getattr(getattr(__import__("pathlib"),"Path")({path}),"touch")()'


class _Planted:
    """Unpickling this runs ``code_payload()`` (pickle stores builtins.eval and the string, not
    this class, so any process can unpickle it)."""

    def __reduce__(self):
        return eval, (code_payload(),)


def evil_pickle() -> bytes:
    return pickle.dumps(_Planted(), protocol=2)


def evil_torch_save() -> bytes:
    """A torch.save zip (the example-inputs format) whose data.pkl is ``evil_pickle()``."""
    buf = io.BytesIO()
    torch.save(((torch.zeros(1, 3, 8, 8),), {}), buf)
    members = _unzip(buf.getvalue())
    members = [(n, evil_pickle() if n.endswith("/data.pkl") else d) for n, d in members]
    return _zip_plain(members)


EVIL_MODULE_SOURCE = (
    "import enum, os, pathlib\n"
    f"pathlib.Path(os.environ[{MARKER_ENV!r}]).touch()  # importing this module is the payload\n"
    "class E(enum.Enum):\n    A = 1\n"
    "factory = list\n"
)


def _aoti_flags() -> bytes:
    return json.dumps({"compiler": f'touch "${MARKER_ENV}" #', "compile_only": True, "cflags": [], "definitions": [],
                       "include_dirs": [], "ldflags": [], "libraries_dirs": [], "libraries": [],
                       "passthrough_args": []}).encode()


# ----------------------------------------------------------------------------- zips


def _unzip(data: bytes) -> list[tuple[str, bytes]]:
    with zipfile.ZipFile(io.BytesIO(data)) as z:
        return [(i.filename, z.read(i)) for i in z.infolist()]


def _zip_plain(members: list[tuple[str, bytes]]) -> bytes:
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w") as z:
        for name, data in members:
            z.writestr(zipfile.ZipInfo(name, date_time=(1980, 1, 1, 0, 0, 0)), data)
    return out.getvalue()


class _Unseekable:
    """A write-only stream: zipfile then writes data descriptors after each member (flag bit 3)."""

    def __init__(self) -> None:
        self.buf = io.BytesIO()

    def write(self, data) -> int:
        return self.buf.write(data)

    def flush(self) -> None:
        pass


# ----------------------------------------------------------------------------- bases


@dataclasses.dataclass
class Bases:
    """The valid inputs every case is mutated from: real ``torch.export.save`` archives (member
    lists) and real ``save_session`` files."""

    archives: dict[str, list[tuple[str, bytes]]]
    sessions: dict[str, bytes]
    entries: dict[str, tuple[dict, dict, bytes]] = dataclasses.field(default_factory=dict)  # name -> data, arrays, its file
    bombs: dict[str, bytes] = dataclasses.field(default_factory=dict)  # archive name -> its deflate bomb, built on first use

    def bomb(self, name: str) -> bytes:
        """The archive with models/model.json followed by 64 MiB of spaces, deflated (~1000:1)."""
        if name not in self.bombs:
            out = io.BytesIO()
            with zipfile.ZipFile(out, "w") as z:
                for member, data in self.archives[name]:
                    info = zipfile.ZipInfo(member, date_time=(1980, 1, 1, 0, 0, 0))
                    if member.endswith("models/model.json"):
                        info.compress_type = zipfile.ZIP_DEFLATED
                        with z.open(info, "w") as w:
                            w.write(data)
                            for _ in range(64):
                                w.write(b" " * MiB)
                    else:
                        z.writestr(info, data)
            self.bombs[name] = out.getvalue()
        return self.bombs[name]


def build_bases(folder: Path) -> Bases:
    """Two samples as the inspector exports them, and a dynamic-shape export (its sizes are the
    sympy expressions torch evaluates; a guard is added, torch 2.13 writes none for it)."""
    from inspector import samples
    from inspector._targets.load import load

    archives = {}
    for name in ("conv_mul_scalar", "stateful_conv_mul"):
        archives[name] = _unzip(_saved(load("sample:" + name).exported))
    model = samples.get("conv_mul_scalar").eval()
    dims = {0: torch.export.Dim("batch", min=1, max=64), 2: torch.export.Dim("h", min=4, max=64)}
    program = torch.export.export(model, (torch.randn(2, 3, 8, 8),), dynamic_shapes=(dims,))
    members = _unzip(_saved(program))
    archives["dynamic_conv_mul"] = [(n, _with_guard(d) if n.endswith("models/model.json") else d) for n, d in members]
    return Bases(archives, _session_bases(folder), _store_bases(folder / STORE_FOLDER))


def _saved(program) -> bytes:
    buf = io.BytesIO()
    torch.export.save(program, buf)
    return buf.getvalue()


def _with_guard(model_json: bytes) -> bytes:
    doc = json.loads(model_json)
    doc["guards_code"] = ["L['x'].size()[0] <= 64", "L['x'].size()[2] >= 4"]
    return json.dumps(doc).encode()


def _session_bases(folder: Path) -> dict[str, bytes]:
    from inspector._front.session import Session, save_session

    site = "conv@models.py:53"
    sessions = {
        "minimal": Session(target="sample:conv_mul_scalar", stage="tfa", rule="upstream"),
        "with_results": Session(target="sample:conv_mul_scalar", stage="tfa", rule="upstream", markers=(site,),
                                selected=site,
                                variants=("off", "upstream"), steps=2, graph_view="after", graph_scope="whole",
                                results=_comparison(site, 2), results_for=("tfa", "upstream", (site,))),
        "rule_file": Session(target="model.pt2", stage="edge", rule="rules.py:no_wide_scale",
                             variants=("off", "rules.py:no_wide_scale")),
    }
    out = {}
    for name, session in sessions.items():
        out[name] = save_session(session, folder / f"base-{name}.json").read_bytes()
    return out


def _comparison(site: str, steps: int):
    """A saved comparison with every kind of record (qparams, metrics with an infinite SQNR,
    nodes outside the delegate, timings), made by hand: a real one needs the TOSA reference."""
    from inspector._numbers.results import Comparison, Metrics, NotDelegated, QParams, SiteOutcome, Variant, VariantResult

    def result(policy: str, folded: bool) -> VariantResult:
        metrics = tuple(Metrics(output=0, step=s, values=(("max-abs", 0.1), ("mean-abs", 0.01), ("mse", 0.001),
                                       ("sqnr", float("inf") if s == 0 else 31.5), ("flushed", 0.0)),
                                sqnr_per_channel_db=(30.0, 33.0))
                        for s in range(steps))
        return VariantResult(variant=Variant(rule=policy, markers=(site,)), folds={"tfa": int(folded), "lowering": 0},
                             sites=(SiteOutcome(site_id=site, folded_at="tfa" if folded else None,
                                                conv_output=QParams(scale=0.02, zero_point=-3),
                                          mul_output=None if folded else QParams(scale=0.01, zero_point=0)),),
                             metrics=metrics,
                             not_delegated=(NotDelegated(node="aten_mul", target="aten.mul.Tensor", reason="not supported"),),
                             timings={"export": 0.5, "reference": 1.25})

    return Comparison(target="sample:conv_mul_scalar", steps=steps, calibration="example inputs",
                      quantization="int8 symmetric",
                      results=(result("off", False), result("upstream", True)))


# ----------------------------------------------------------------------------- the arena


@dataclasses.dataclass
class Arena:
    """Where cases run: the marker the planted code would create, a temp folder the loaders
    must leave empty, and an importable current folder holding the evil module."""

    folder: Path
    bases: Bases

    @property
    def marker(self) -> Path:
        return self.folder / MARKER_NAME

    @property
    def tmp(self) -> Path:
        return self.folder / "tmp"

    @property
    def store(self) -> Path:
        return self.folder / STORE_FOLDER


@contextlib.contextmanager
def arena(folder: Path):
    """Set up an ``Arena`` in ``folder`` (cwd, sys.path, the marker's environment variable and
    tempfile's folder point into it) and restore all of it on exit."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "tmp").mkdir(exist_ok=True)
    (folder / f"{EVIL_MODULE}.py").write_text(EVIL_MODULE_SOURCE)
    (folder / "evil.py").write_text(EVIL_MODULE_SOURCE + "class Net:\n    pass\n")
    saved = (os.getcwd(), list(sys.path), os.environ.get(MARKER_ENV), tempfile.tempdir)
    os.chdir(folder)
    sys.path.insert(0, str(folder))
    os.environ[MARKER_ENV] = str(folder / MARKER_NAME)
    tempfile.tempdir = str(folder / "tmp")
    try:
        yield Arena(folder, build_bases(folder))
    finally:
        cwd, path, env, tmp = saved
        os.chdir(cwd)
        sys.path[:] = path
        if env is None:
            os.environ.pop(MARKER_ENV, None)
        else:
            os.environ[MARKER_ENV] = env
        tempfile.tempdir = tmp


# ----------------------------------------------------------------------------- values


_BIG_INTS = (0, -1, 1, 2, 7, 255, 256, 2**31 - 1, 2**31, 2**32, 2**63 - 1, 2**63, -(2**63) - 1, 2**64, 10**30,
             -(10**30), 10**4299)
_CHARS = ("'", '"', "\\", "\n", "\r", "\t", "\x00", "\x1b", " ", "(", ")", ".", ",", ":", ";", "[", "]", "{", "}", "=",
          "+", "-", "*", "/", "%", "<", ">", "!", "~", "@", "#", "$", "^", "&", "|", "?", "_", "0", "9", "a", "Z",
          "é", "\u202e", "\u2028", "\ufeff", "\ud800", "ß", "\U0001f600")
_TOKENS = ("__import__", "lambda", "import os", "eval(", "exec(", "Symbol(", "s0", "**", "9" * 40, "os.system",
           "__class__", "getattr(", "L['x']", ".size()[0]", "torch.ops.aten.", "builtins.", "..", "/", "oo", "nan")
_FLOATS = (float("inf"), float("-inf"), float("nan"), "inf", "-inf", "nan", "1e999", 1e308, -0.0, 5e-324, "0.5", True)
_WRONG = (None, True, False, 0, -1, 1.5, float("nan"), "", "x", [], {}, [0], {"k": 1})


def _string_edit(text: str, rng: random.Random) -> str:
    """1 to 4 edits: insert, replace or delete a character or a dangerous token."""
    for _ in range(rng.randint(1, 4)):
        piece = rng.choice(_TOKENS) if rng.random() < 0.3 else rng.choice(_CHARS)
        pos = rng.randint(0, len(text))
        op = rng.random()
        if op < 0.4 or not text:
            text = text[:pos] + piece + text[pos:]
        elif op < 0.8:
            text = text[:pos] + piece + text[pos + 1:]
        else:
            text = text[:pos] + text[pos + 1:]
    return text


def _injections(text: str) -> list[str]:
    """Strings that would run the payload if pasted into an eval, generated code or a guard."""
    p = code_payload()
    return [p, f"x={p}", f'{text}"),{p},getattr(self,"{text}', f"{text}; {p}", f"{text}\n{p}", f"{p} is None",
            f"Symbol('s0')*{p}", f"L['x'].size()[0] <= {p}", f"{text}[{p}]", f"({p},{text})[1]"]


# ----------------------------------------------------------------------------- JSON mutations


_INTERESTING = frozenset({
    "expr_str", "target", "name", "as_name", "guards_code", "in_spec", "out_spec", "parameter_name", "buffer_name",
    "tensor_constant_name", "fqn", "forward_arg_names", "nn_module_stack", "source_fn_stack", "custom", "path_name",
    "use_pickle", "dtype", "sizes", "strides", "storage_offset", "as_int", "range_constraints", "min_val", "max_val",
    "torch_version", "verifiers", "schema_version", "opset_version", "version", "steps", "policy", "results",
    "metrics", "step", "markers", "variants", "stage", "results_for", "scale", "zero_point", "folds", "timings",
    "context", "type", "children_spec", "user_input_name", "as_string", "as_operator",
})
_NEST = "\x00fuzz-nest\x00"  # stands for a deeply nested value until the JSON text is written


def _paths(doc: Any) -> list[tuple]:
    out, stack = [], [((), doc)]
    while stack:
        path, value = stack.pop()
        out.append(path)
        if isinstance(value, dict):
            stack.extend((path + (k,), v) for k, v in value.items())
        elif isinstance(value, list):
            stack.extend((path + (i,), v) for i, v in enumerate(value))
    return out


def _get(doc: Any, path: tuple) -> Any:
    for key in path:
        doc = doc[key]
    return doc


def _set(doc: Any, path: tuple, value: Any) -> Any:
    """``doc`` with the value at ``path`` replaced (a new root when ``path`` is empty)."""
    if not path:
        return value
    _get(doc, path[:-1])[path[-1]] = value
    return doc


def _pick_path(doc: Any, rng: random.Random) -> tuple:
    """A random field, half the time one whose name says torch evaluates, imports or sizes it."""
    paths = _paths(doc)
    hot = [p for p in paths if any(isinstance(k, str) and k in _INTERESTING for k in p[-2:])]
    return rng.choice(hot if hot and rng.random() < 0.5 else paths)


def _mutate_value(value: Any, rng: random.Random) -> tuple[Any, str]:
    """One mutation of one JSON value, chosen by its type; returns (new value, what was done)."""
    if isinstance(value, str):
        return _mutate_string(value, rng)
    if isinstance(value, float):
        return rng.choice(_FLOATS + _BIG_INTS), "huge, boundary or non-finite number"
    if isinstance(value, bool) or value is None:
        return rng.choice([v for v in _WRONG if v is not value]), "wrong type"
    if isinstance(value, int):
        roll = rng.random()
        if roll < 0.45:
            return rng.choice(_BIG_INTS), "huge or boundary int"
        if roll < 0.6:
            return value + rng.choice((-1, 1)), "off by one"
        if roll < 0.8:
            return rng.randint(-2, 120), "unknown enum value"
        return rng.choice(_WRONG), "wrong type"
    return _mutate_container(value, rng)


def _mutate_string(value: str, rng: random.Random) -> tuple[Any, str]:
    roll = rng.random()
    if roll < 0.4:
        return _string_edit(value, rng), "chars edited"
    if roll < 0.55:
        return rng.choice(_injections(value)), "code injected"
    if roll < 0.65:
        return (value or "a") * (rng.choice((1025, 20_001, 300_000)) // max(len(value), 1) + 1), "very long"
    if roll < 0.8 and value[:1] in "[{":
        try:
            inner = json.loads(value)
        except ValueError:
            return _string_edit(value, rng), "chars edited"
        mutated, what = _mutate_doc(inner, rng)
        return _dumps(mutated), f"inside the JSON string: {what}"
    if roll < 0.9:
        return rng.choice(("bogus", "", "Tensor", "torch.float128", "builtins.eval", f"{EVIL_MODULE}:E")), "unknown name"
    return rng.choice([v for v in _WRONG if not isinstance(v, str)]), "wrong type"


def _mutate_container(value: Any, rng: random.Random) -> tuple[Any, str]:
    roll = rng.random()
    if roll < 0.25:
        return _NEST, "nested deeply"
    if roll < 0.4:
        return rng.choice(_WRONG), "wrong type"
    if roll < 0.55:
        return type(value)(), "emptied"
    if isinstance(value, dict):
        key = rng.choice(["bogus_field", "__class__", "", "a" * 300, next(iter(value), "k")])
        return {**value, key: rng.choice(_WRONG)}, f"key {key[:20]!r} added"
    if value and rng.random() < 0.5:
        i = rng.randrange(len(value))
        return value[:i] + value[i + 1:], f"item {i} dropped"
    return value + value[-1:] * rng.choice((1, 100)), "items repeated"


def _mutate_doc(doc: Any, rng: random.Random) -> tuple[Any, str]:
    """One field of ``doc`` mutated (a deep copy); returns (document, where and what)."""
    doc = copy.deepcopy(doc)
    path = _pick_path(doc, rng)
    if path and rng.random() < 0.08:
        parent = _get(doc, path[:-1])
        del parent[path[-1]]
        return doc, f"{_show_path(path)} deleted"
    value, what = _mutate_value(_get(doc, path), rng)
    return _set(doc, path, value), f"{_show_path(path)} {what}"


def _show_path(path: tuple) -> str:
    return "$" + "".join(f"[{k}]" if isinstance(k, int) else f".{k}" for k in path)[-80:]


def _dumps(doc: Any) -> str:
    """JSON text of a mutated document (NaN and Infinity as Python's json writes them), the nesting stand-in expanded."""
    depth = 5000
    text = json.dumps(doc)
    return text.replace(json.dumps(_NEST), "[" * depth + "1" + "]" * depth)


def mutate_json(data: bytes, rng: random.Random) -> tuple[bytes, str]:
    """A JSON member or file mutated field by field (one to three fields), or as text."""
    try:
        doc = json.loads(data)
    except (ValueError, RecursionError):
        return _flip(data, rng), "bytes flipped (not JSON)"
    if rng.random() < 0.12:
        return _mutate_json_text(json.dumps(doc), rng)
    whats = []
    try:
        for _ in range(rng.choice((1, 1, 1, 2, 3))):
            doc, what = _mutate_doc(doc, rng)
            whats.append(what)
    except RecursionError:
        # Python 3.12 and later read a JSON nested deeper than the interpreter's stack (3.10 and 3.11 refuse it
        # above); walking it to mutate a field is then beyond the stack, so its bytes are mutated instead.
        return _flip(data, rng), "bytes flipped (nested too deeply to walk)"
    return _dumps(doc).encode("utf-8", "surrogatepass"), "; ".join(whats)


def _mutate_json_text(text: str, rng: random.Random) -> tuple[bytes, str]:
    """Mutations no parsed document can express: a BOM, duplicate keys, NaN tokens, huge numbers,
    trailing bytes, another encoding."""
    first_key = text[1:].split(":", 1)[0]
    ops = {
        "BOM": lambda: "\ufeff" + text,
        "duplicate key": lambda: "{" + f"{first_key}: null, " + text[1:],
        "NaN token": lambda: text.replace(": 0", ": NaN", 1).replace(": 1", ": -Infinity", 1),
        "5000-digit number": lambda: text.replace(": 1", ": " + "1" * 5000, 1),
        "trailing bytes": lambda: text + rng.choice((" x", "}", "\x00", "\n{}")),
        "cut short": lambda: text[: rng.randrange(max(len(text), 1))],
    }
    name = rng.choice(sorted(ops)) if rng.random() < 0.9 else "UTF-16"
    if name == "UTF-16":
        return text.encode("utf-16"), "JSON text as UTF-16"
    return ops[name]().encode("utf-8"), f"JSON text: {name}"


# ----------------------------------------------------------------------------- byte mutations


def _flip(data: bytes, rng: random.Random) -> bytes:
    if not data:
        return bytes([rng.randrange(256)])
    out = bytearray(data)
    for _ in range(rng.randint(1, 8)):
        out[rng.randrange(len(out))] ^= rng.randint(1, 255)
    return bytes(out)


def _cut(data: bytes, rng: random.Random) -> bytes:
    return data[: rng.randrange(len(data))] if data else data


# ----------------------------------------------------------------------------- archive mutations


@dataclasses.dataclass
class _Archive:
    """An archive being mutated: its members and how they are written."""

    members: list[list]  # [name, data, compress_type]
    descriptors: bool = False  # written to an unseekable stream (data descriptors)
    zip64: bool = False

    def find(self, suffix: str) -> list | None:
        return next((m for m in self.members if m[0].endswith(suffix)), None)

    def root(self) -> str:
        return self.members[0][0].split("/", 1)[0]


def _member_op_flip(a: _Archive, rng: random.Random) -> str:
    m = rng.choice(a.members)
    m[1] = _flip(m[1], rng)
    return f"bytes flipped in {m[0]}"


def _member_op_cut(a: _Archive, rng: random.Random) -> str:
    m = rng.choice(a.members)
    m[1] = _cut(m[1], rng)
    return f"{m[0]} truncated to {len(m[1])} bytes"


def _member_op_json(a: _Archive, rng: random.Random) -> str:
    rel = rng.choices(("models/model.json", "model_weights_config.json", "model_constants_config.json"), (7, 2, 1))[0]
    m = a.find(rel)
    if m is None:
        return f"{rel} absent"
    m[1], what = mutate_json(m[1], rng)
    return f"{rel}: {what}"


def _bad_name(name: str, root: str, rng: random.Random) -> str:
    rel = name.split("/", 1)[1] if "/" in name else name
    return rng.choice([
        f"{root}/{rel[:-1]}é{rel[-1:]}", f"{root}/../{rel}", f"/{name}", f"C:/{name}", f"{root}\\{rel}",
        f"{root}/{rel}{'a' * 5000}", f"{root}//{rel}", f"{root}/./{rel}", f"other/{rel}", f"{root}/{rel}/",
        f"{root}/{rel}\x01", rel, f"{root}/{rel.upper()}", f"{root}/data/aotinductor/model/{rel.split('/')[-1]}",
        f"{root}/{'../' * 20}tmp/{rel.split('/')[-1]}", "\u202e" + name, f"{root}/{rel}\u2028",
    ])


def _member_op_rename(a: _Archive, rng: random.Random) -> str:
    m = rng.choice(a.members)
    old, m[0] = m[0], _bad_name(m[0], a.root(), rng)
    return f"{old} renamed {m[0][:80]!r}"


def _member_op_duplicate(a: _Archive, rng: random.Random) -> str:
    m = rng.choice(a.members)
    name = rng.choice((m[0], m[0].upper(), m[0].replace(a.root(), a.root().upper(), 1)))
    data = m[1] if rng.random() < 0.5 else _flip(m[1], rng)
    a.members.insert(rng.randint(0, len(a.members)), [name, data, m[2]])
    return f"{m[0]} duplicated as {name!r}"


def _member_op_drop(a: _Archive, rng: random.Random) -> str:
    m = a.members.pop(rng.randrange(len(a.members)))
    return f"{m[0]} dropped"


def _member_op_reorder(a: _Archive, rng: random.Random) -> str:
    rng.shuffle(a.members)
    return "members reordered"


def _member_op_reroot(a: _Archive, rng: random.Random) -> str:
    new = rng.choice(("model", "archive2", "é", "a" * 300, "x\x7f", ".", "data"))
    old = a.root()
    for m in a.members:
        m[0] = new + m[0][len(old):]
    return f"root folder renamed {new[:20]!r}"


def _member_op_add(a: _Archive, rng: random.Random) -> str:
    root = a.root()
    name, data = rng.choice([
        ("data/aotinductor/model/model_compile_flags.json", _aoti_flags()),
        ("data/aotinductor/model/model.wrapper.so", b"\x7fELF not a real library"),
        ("data/constants/custom_obj_0", evil_pickle()),
        ("data/constants/opaque_obj_0", evil_pickle()),
        ("models/other.json", b"{}"),
        ("extra/notes.txt", "a note, not code: é".encode()),
        ("extra/evil.pkl", evil_pickle()),
        ("data/weights/weight_99", os.urandom(64)),
        ("data/constants/tensor_7", b"\x00" * 16),
        ("data/sample_inputs/other.pt", evil_torch_save()),
        ("byteorder", b"middle"),
    ])
    a.members.insert(rng.randint(0, len(a.members)), [f"{root}/{name}", data, zipfile.ZIP_STORED])
    return f"member {name} added"


def _doors(a: _Archive, rng: random.Random) -> dict[str, Callable[[], None]]:
    """Per door of torch's loader, how to put the payload where that door would run it."""
    return {
        "pickle as a weight": lambda: _replace(a, "data/weights/weight_0", evil_pickle()),
        "pickle as the example inputs": lambda: _replace(a, "data/sample_inputs/model.pt", evil_pickle()),
        "torch.save zip with an evil data.pkl as the example inputs":
            lambda: _replace(a, "data/sample_inputs/model.pt", evil_torch_save()),
        "example inputs with an evil dict key": lambda: _replace(a, "data/sample_inputs/model.pt", _inputs_with_key()),
        "a weight marked use_pickle": lambda: _use_pickle(a),
        "a size expression": lambda: _edit_model(a, lambda doc: _plant_expression(doc, rng)),
        "a guard": lambda: _edit_model(a, lambda doc: doc.__setitem__("guards_code", [f"{code_payload()} is None"])),
        "an input name": lambda: _edit_model(a, _plant_input_name),
        "a pytree enum": lambda: _edit_model(a, _plant_pytree_enum),
        "a pytree defaultdict factory": lambda: _edit_model(a, _plant_defaultdict),
        "a range constraint": lambda: _edit_model(a, lambda doc: doc.setdefault("range_constraints", {}).__setitem__(
            code_payload(), {"min_val": 1, "max_val": 4})),
    }


DOORS = tuple(sorted(_doors(None, random.Random(0))))


def planted(bases: Bases, base: str, door: str) -> bytes:
    """A base archive with the payload behind one door and nothing else changed (the positive controls)."""
    archive = _Archive([[n, d, zipfile.ZIP_STORED] for n, d in bases.archives[base]])
    _doors(archive, random.Random(0))[door]()
    return _write_archive(archive)


def _member_op_plant(a: _Archive, rng: random.Random) -> str:
    door = rng.choice(DOORS)
    try:
        _doors(a, rng)[door]()
    except (ValueError, KeyError, IndexError, TypeError, AttributeError, RecursionError):  # an earlier mutation broke it
        return f"payload not planted in {door} (the member was already mutated)"
    return f"payload planted in {door}"


def _replace(a: _Archive, rel: str, data: bytes) -> None:
    m = a.find(rel)
    if m is not None:
        m[1] = data


def _use_pickle(a: _Archive) -> None:
    m = a.find("model_weights_config.json")
    doc = json.loads(m[1])
    for meta in doc["config"].values():
        meta["use_pickle"] = True
        _replace(a, "data/weights/" + meta["path_name"], evil_pickle())
    m[1] = json.dumps(doc).encode()


def _edit_model(a: _Archive, edit: Callable[[dict], None]) -> None:
    m = a.find("models/model.json")
    doc = json.loads(m[1])
    edit(doc)
    m[1] = json.dumps(doc).encode()


def _plant_expression(doc: dict, rng: random.Random) -> None:
    paths = [p for p in _paths(doc) if p and p[-1] == "expr_str"]
    if paths:
        _set(doc, rng.choice(paths), code_payload())
    else:
        values = doc["graph_module"]["graph"]["tensor_values"]
        values[next(iter(values))]["sizes"][0] = {"as_expr": {"expr_str": code_payload(), "hint": {"as_int": 1}}}


def _plant_input_name(doc: dict) -> None:
    """The user input renamed ``x=<payload>``: FX would write ``def forward(self, ..., x=<payload>)``."""
    old = doc["graph_module"]["graph"]["inputs"][-1]["as_tensor"]["name"]
    new = f"{old}={code_payload()}"
    renamed = json.loads(json.dumps(doc).replace(f'"name": "{old}"', f'"name": {json.dumps(new)}'))
    doc.clear()
    doc.update(renamed)
    values = doc["graph_module"]["graph"]["tensor_values"]
    values[new] = values.pop(old)


def _plant_pytree_enum(doc: dict) -> None:
    sig = doc["graph_module"]["module_call_graph"][0]["signature"]
    spec = json.loads(sig["in_spec"])
    spec[1]["children_spec"][1]["context"] = json.dumps([{"__enum__": True, "fqn": f"{EVIL_MODULE}:E", "name": "A"}])
    sig["in_spec"] = json.dumps(spec)


def _plant_defaultdict(doc: dict) -> None:
    sig = doc["graph_module"]["module_call_graph"][0]["signature"]
    sig["out_spec"] = json.dumps([1, {"type": "collections.defaultdict", "children_spec": [], "context": {
        "default_factory_module": EVIL_MODULE, "default_factory_name": "factory", "dict_context": []}}])


def _inputs_with_key() -> bytes:
    buf = io.BytesIO()
    torch.save((({'"+str(' + code_payload() + ')+"': torch.zeros(1, 3, 8, 8)},), {}), buf)
    return buf.getvalue()


def _member_op_inputs(a: _Archive, rng: random.Random) -> str:
    """Example inputs that are valid tensors-only pickles of odd shapes: what torch hands back unchecked."""
    value = _odd_inputs(rng, 0)
    buf = io.BytesIO()
    torch.save(value, buf)
    _replace(a, "data/sample_inputs/model.pt", buf.getvalue())
    return f"example inputs replaced by {_describe(value)}"


def _odd_inputs(rng: random.Random, depth: int) -> Any:
    roll = rng.random()
    if depth > 40 or roll < 0.3:
        return rng.choice([torch.zeros(1, 3, 8, 8), torch.zeros(0), torch.ones(2, 3, 8, 8, dtype=torch.float16),
                           torch.tensor(float("nan")), 3, 2.5, None, True, "text", "it's \"quoted\"\n"])
    if roll < 0.5:
        return ((_odd_inputs(rng, depth + 1),), {})
    if roll < 0.7:
        return tuple(_odd_inputs(rng, depth + 1) for _ in range(rng.randint(0, 3)))
    if roll < 0.85:
        return [_odd_inputs(rng, depth + 1)]
    key = rng.choice(("x", "ok_key", "bad key'", 'q"', "a.b", "", "é", 7, "\n"))
    return {key: _odd_inputs(rng, depth + 1)}


def _describe(value: Any) -> str:
    return type(value).__name__ if not isinstance(value, (tuple, list, dict)) else f"{type(value).__name__}[{len(value)}]"


def _member_op_method(a: _Archive, rng: random.Random) -> str:
    """Deflated members (torch stores them), data descriptors, zip64 extra fields."""
    roll = rng.random()
    if roll < 0.4:
        for m in a.members:
            if rng.random() < 0.5:
                m[2] = zipfile.ZIP_DEFLATED
        return "members deflated"
    if roll < 0.7:
        a.descriptors = True
        return "data descriptors"
    a.zip64 = True
    return "zip64 fields"


# raw patches: (bytes, rng) -> (bytes, what); offsets from APPNOTE 4.3.7 (local) and 4.3.12 (central)
_LOCAL_FIELDS = {"flags": (6, "H"), "method": (8, "H"), "crc": (14, "I"), "compressed size": (18, "I"),
                 "size": (22, "I"), "name length": (26, "H"), "extra length": (28, "H")}
_CENTRAL_FIELDS = {"flags": (8, "H"), "method": (10, "H"), "crc": (16, "I"), "compressed size": (20, "I"),
                   "size": (24, "I"), "name length": (28, "H"), "extra length": (30, "H"), "offset": (42, "I")}


def _layout(data: bytes) -> tuple[int, list[tuple[int, int]]]:
    """(end record offset, [(local header offset, central entry offset)]) of a zip this module wrote."""
    end = data.rfind(b"PK\x05\x06")
    if end < 0:
        return end, []
    count, _size, start = struct.unpack_from("<HII", data, end + 10)
    entries, pos = [], start
    for _ in range(count):
        if data[pos:pos + 4] != b"PK\x01\x02":
            break
        n, m, k = struct.unpack_from("<HHH", data, pos + 28)
        entries.append((struct.unpack_from("<I", data, pos + 42)[0], pos))
        pos += 46 + n + m + k
    return end, entries


def _patch(data: bytes, offset: int, fmt: str, value: int) -> bytes:
    out = bytearray(data)
    struct.pack_into("<" + fmt, out, offset, value & (0xFFFF if fmt == "H" else 0xFFFFFFFF))
    return bytes(out)


def _raw_disagree(data: bytes, rng: random.Random) -> tuple[bytes, str]:
    _end, entries = _layout(data)
    if not entries:
        return _flip(data, rng), "bytes flipped"
    local, central = rng.choice(entries)
    field = rng.choice(sorted(_LOCAL_FIELDS))
    in_local = rng.random() < 0.5
    offset, fmt = (_LOCAL_FIELDS if in_local else _CENTRAL_FIELDS)[field]
    base = local if in_local else central
    if base + offset + struct.calcsize(fmt) > len(data):
        return data, "no room to patch"
    value = rng.choice((0, 1, 8, 12, 14, 99, 0x0808, 0xFFFF, 0xFFFFFFFF, rng.randrange(1 << 16)))
    where = "local header" if in_local else "central directory"
    return _patch(data, base + offset, fmt, value), f"{field} = {value} in the {where} only"


def _raw_overlap(data: bytes, rng: random.Random) -> tuple[bytes, str]:
    _end, entries = _layout(data)
    if len(entries) < 2:
        return data, "too few members to overlap"
    (target, _), (_, central) = rng.sample(entries, 2)
    return _patch(data, central + 42, "I", target), "two members point at one local header"


def _raw_flags(data: bytes, rng: random.Random) -> tuple[bytes, str]:
    _end, entries = _layout(data)
    if not entries:
        return data, "no members"
    local, central = rng.choice(entries)
    bit = rng.choice((0x1, 0x8, 0x40, 0x800, 0x2000))
    for base, offset in ((central, 8), (local, 6)):
        (flags,) = struct.unpack_from("<H", data, base + offset)
        data = _patch(data, base + offset, "H", flags | bit)
    return data, f"flag {bit:#x} set (0x1: encrypted, 0x8: data descriptor, 0x40: strong encryption)"


def _raw_end_record(data: bytes, rng: random.Random) -> tuple[bytes, str]:
    end, _entries = _layout(data)
    if end < 0:
        return data, "no end record"
    field, (offset, fmt) = rng.choice(sorted({"entries on disk": (8, "H"), "entries": (10, "H"),
                                             "directory size": (12, "I"), "directory offset": (16, "I"),
                                             "comment length": (20, "H")}.items()))
    value = rng.choice((0, 1, 0xFFFF, 0xFFFFFFFF, 20_001, rng.randrange(1 << 16)))
    return _patch(data, end + offset, fmt, value), f"end record {field} = {value}"


def _raw_zip64_claim(data: bytes, rng: random.Random) -> tuple[bytes, str]:
    """An end record saying "see the zip64 record", with a zip64 locator pointing at garbage."""
    end, _entries = _layout(data)
    if end < 0:
        return data, "no end record"
    locator = struct.pack("<4sIQI", b"PK\x06\x07", 0, rng.choice((0, len(data), 1 << 62)), 1)
    patched = _patch(_patch(data, end + 10, "H", 0xFFFF), end + 16, "I", 0xFFFFFFFF)
    return patched[:end] + locator + patched[end:], "a zip64 locator pointing at garbage"


def _raw_wrap(data: bytes, rng: random.Random) -> tuple[bytes, str]:
    garbage = os.urandom(rng.choice((1, 100, 4096)))
    if rng.random() < 0.5:
        return garbage + data, f"{len(garbage)} bytes before the zip"
    return data + garbage, f"{len(garbage)} bytes after the zip"


def _raw_flip(data: bytes, rng: random.Random) -> tuple[bytes, str]:
    return _flip(data, rng), "bytes flipped anywhere"


def _raw_cut(data: bytes, rng: random.Random) -> tuple[bytes, str]:
    out = _cut(data, rng)
    return out, f"archive truncated to {len(out)} of {len(data)} bytes"


def _raw_lie_size(data: bytes, rng: random.Random) -> tuple[bytes, str]:
    """The model.json's uncompressed size claimed small in both headers (the cap must hold while reading)."""
    _end, entries = _layout(data)
    for local, central in entries:
        (n,) = struct.unpack_from("<H", data, central + 28)
        if data[central + 46:central + 46 + n].endswith(b"models/model.json"):
            data = _patch(_patch(data, local + 22, "I", 10_000), central + 24, "I", 10_000)
    return data, "uncompressed size claimed 10000"


_MEMBER_OPS = [
    (_member_op_json, 30), (_member_op_flip, 8), (_member_op_cut, 4), (_member_op_rename, 6),
    (_member_op_duplicate, 3), (_member_op_drop, 3), (_member_op_reorder, 2), (_member_op_reroot, 2),
    (_member_op_add, 5), (_member_op_plant, 10), (_member_op_inputs, 4), (_member_op_method, 5),
]
_RAW_OPS = [
    (_raw_disagree, 5), (_raw_overlap, 2), (_raw_flags, 3), (_raw_end_record, 3), (_raw_zip64_claim, 1),
    (_raw_wrap, 2), (_raw_flip, 3), (_raw_cut, 2),
]
_RAW_PATCHES = frozenset(op for op, _ in _RAW_OPS)
_BOMB_SHARE = 0.01  # of cases: the deflate bomb (built once per base, then only its zip is patched)


def make_pt2_case(bases: Bases, seed: int, index: int) -> Case:
    """An archive made from one base by one to three mutations of its members or its zip structure."""
    rng = random.Random(f"{seed}:pt2:{index}")
    base = rng.choice(sorted(bases.archives))
    archive = _Archive([[n, d, zipfile.ZIP_STORED] for n, d in bases.archives[base]])
    ops = _MEMBER_OPS + _RAW_OPS
    chosen = rng.choices([op for op, _ in ops], [w for _, w in ops], k=rng.choice((1, 1, 1, 2, 2, 3)))
    raw = [op for op in chosen if op in _RAW_PATCHES]
    if rng.random() < _BOMB_SHARE:
        data, whats = bases.bomb(base), ["deflate bomb"]
        raw += [_raw_lie_size] if rng.random() < 0.5 else []
    else:
        whats = [op(archive, rng) for op in chosen if op not in _RAW_PATCHES]
        data = _write_archive(archive)
    for patch in raw:
        data, what = patch(data, rng)
        whats.append(what)
    return Case("pt2", f"seed {seed} pt2 #{index} from {base}: " + "; ".join(whats), data)


def _write_archive(a: _Archive) -> bytes:
    stream = _Unseekable() if a.descriptors else io.BytesIO()
    with warnings.catch_warnings(), zipfile.ZipFile(stream, "w") as z:
        warnings.simplefilter("ignore")  # "Duplicate name": a mutation meant it
        for name, data, method in a.members:
            info = zipfile.ZipInfo(name, date_time=(1980, 1, 1, 0, 0, 0))
            info.compress_type = method
            with z.open(info, "w", force_zip64=a.zip64) as w:
                w.write(data)
    return (stream.buf if a.descriptors else stream).getvalue()


# ----------------------------------------------------------------------------- session cases


def make_session_case(bases: Bases, seed: int, index: int) -> Case:
    """A session file made from a saved one: fields mutated, or its bytes, text or encoding."""
    rng = random.Random(f"{seed}:session:{index}")
    base = rng.choice(sorted(bases.sessions))
    data = bases.sessions[base]
    roll = rng.random()
    if roll < 0.75:
        data, what = mutate_json(data, rng)
    elif roll < 0.83:
        data, what = _flip(data, rng), "bytes flipped"
    elif roll < 0.88:
        data, what = _cut(data, rng), "truncated"
    elif roll < 0.93:
        data, what = _session_code(data, rng)
    else:
        data, what = _mutate_json_text(data.decode(), rng)
    return Case("session", f"seed {seed} session #{index} from {base}: {what}", data)


def _session_code(data: bytes, rng: random.Random) -> tuple[bytes, str]:
    """A target, rule or variant naming a Python file: reading must refuse it unless trusted."""
    doc = json.loads(data)
    field = rng.choice(("target", "policy", "variants"))
    spec = rng.choice(("evil.py:Net", f"{EVIL_MODULE}.py:E", "/tmp/x.py:Net", "sub/evil.py:no_wide_scale"))
    doc[field] = [spec] if field == "variants" else spec
    return json.dumps(doc).encode(), f"{field} names the Python file {spec}"


# ----------------------------------------------------------------------------- CLI cases

# command -> (the argv before the options, the numeric options it takes)
_CLI_COMMANDS = {
    "analyze": ([MISSING_PT2], ("--input-shape",)),
    "compare": ([MISSING_PT2], ("--steps", "--workers", "--input-shape")),
    "attribute": ([MISSING_PT2], ("--steps", "--input-shape")),
    "report": ([MISSING_PT2], ("--steps", "--input-shape")),
    "repro": ([MISSING_PT2, "--site", "conv@models.py:53"], ("--input-shape",)),
    "render": ([MISSING_PT2, "--out", "fuzz-render.svg"], ("--input-shape",)),
    "explorer": ([MISSING_PT2, "--out", "fuzz-explorer"], ("--steps", "--input-shape", "--port")),
    "sweep": ([], ("--steps", "--workers", "--input-shape")),  # no targets: valid arguments end at "no models"
}
_INT_TEXTS = ("0", "1", "2", "3", "8", "1000", "1001", "65535", "65536", "-1", "-0", "+5", " 7 ", "1_0", "٣",
              "1e3", "0x10", "1.0", "", " ", "nan", "inf", "-", "--", "99999999999999999999", "1" * 5000, "١٠٠١",
              "2**3", "\n", "4\n", "seven", "½", "1,2", "𝟗")


def _int_text(rng: random.Random) -> str:
    text = rng.choice(_INT_TEXTS)
    return _string_edit(text, rng).replace("\x00", "") if rng.random() < 0.3 else text


def _shape_text(rng: random.Random) -> str:
    """A shape argument; a valid one is kept small (the CLI allocates it), so big ones are over the cap."""
    while True:
        roll = rng.random()
        if roll < 0.4:
            text = ",".join(str(rng.randint(1, 8)) for _ in range(rng.randint(1, 4)))
        elif roll < 0.6:
            text = ",".join(_int_text(rng) for _ in range(rng.randint(1, 4)))
        elif roll < 0.75:
            text = rng.choice(("1,3,8,8", "100000,100000,100", "1," * 5000 + "1", "1,1,1,1,1,1,1,1,1", "8192,8193",
                               ",", "1,,3", "1;3", "[1,3]", "(1, 3)", "1 3", "1, 3, 8, 8"))
        else:
            text = _string_edit("1,3,8,8", rng).replace("\x00", "")
        dims = _shape_dims(text)
        if dims is None or _numel(dims) <= 1 << 16 or _numel(dims) > (1 << 26):
            return text


def make_cli_case(bases: Bases, seed: int, index: int) -> Case:
    """argv for one command with one to three numeric or shape options, the values from a mix of
    edge cases and edits of them; a value starting with '-' is given as --opt=value."""
    rng = random.Random(f"{seed}:cli:{index}")
    command = rng.choice(sorted(_CLI_COMMANDS))
    head, options = _CLI_COMMANDS[command]
    argv = [command, *head]
    for option in rng.sample(options, rng.randint(1, len(options))):
        for _ in range(rng.choice((1, 1, 2)) if option == "--input-shape" else 1):
            value = _shape_text(rng) if option == "--input-shape" else _int_text(rng)
            argv += [f"{option}={value}"] if value.startswith("-") or rng.random() < 0.2 else [option, value]
        if option == "--port":
            argv.append("--serve")
    return Case("cli", f"seed {seed} cli #{index}: {_show_argv(argv)}", json.dumps(argv).encode())


def _show_argv(argv: list[str]) -> str:
    return " ".join(repr(a) if len(a) <= 40 else repr(a[:37] + "...") for a in argv)


def _int_or_none(text: str) -> int | None:
    """What argparse's ``type=int`` makes of ``text`` (None: it refuses)."""
    try:
        return int(text)
    except ValueError:
        return None


def _shape_dims(text: str) -> list[int] | None:
    dims = [_int_or_none(part) for part in text.split(",")]
    return None if any(d is None for d in dims) else dims


def _numel(dims: list[int]) -> int:
    n = 1
    for d in dims:
        n *= d
    return n


def _value_ok(command: str, option: str, text: str) -> bool:
    """Whether the documented bounds (cli.py's help, inspector/_base/limits.py) allow this value."""
    if option == "--input-shape":
        dims = _shape_dims(text)
        return dims is not None and len(dims) <= 8 and all(d > 0 for d in dims) and _numel(dims) <= 1 << 26
    value = _int_or_none(text)
    if value is None:
        return False
    low = {"--steps": 0 if command == "sweep" else 1, "--workers": 1, "--port": 1}[option]
    high = {"--steps": 1000, "--port": 65535}.get(option)
    return value >= low and (high is None or value <= high)


def cli_arguments_ok(argv: list[str]) -> bool:
    """Whether every numeric and shape argument in ``argv`` is within its bounds."""
    command, rest = argv[0], argv[1:]
    numeric = set(_CLI_COMMANDS[command][1])
    i = 0
    while i < len(rest):
        option, eq, value = rest[i].partition("=")
        if option in numeric:
            if not eq:
                i += 1
                value = rest[i]
            if not _value_ok(command, option, value):
                return False
        i += 1
    return True


# ----------------------------------------------------------------------------- store cases

# What may be found where the result store expects an entry (issue 40): each must be a miss, in
# bounded time and memory, and written over by a regular file when the answer is computed again.
PLANTS = {
    "device": "a link to /dev/zero",
    "fifo": "a FIFO no one writes",
    "sparse": "an 8 GiB sparse file",
    "folder": "a folder named like the entry, a link out of it inside",
    "elsewhere": "a link to the entry moved into another folder",
}
SPARSE_BYTES = 8 << 30  # truncate(): no disk used, but a reader that trusts the size asks for 8 GiB


def plant(path: Path, kind: str, elsewhere: Path) -> None:
    """Put ``kind`` (of ``PLANTS``) where the entry ``path`` is; "elsewhere" moves the entry into the
    folder ``elsewhere`` and links to it there (valid, signed: it must still not be read)."""
    if kind == "elsewhere":
        elsewhere.mkdir(parents=True, exist_ok=True)
        target = elsewhere / path.name
        target.write_bytes(path.read_bytes())
        path.unlink()
        path.symlink_to(target)
        return
    path.unlink(missing_ok=True)
    if kind == "device":
        path.symlink_to("/dev/zero")
    elif kind == "fifo":
        os.mkfifo(path)
    elif kind == "sparse":
        with open(path, "xb") as f:
            f.truncate(SPARSE_BYTES)
    elif kind == "folder":
        path.mkdir()
        (path / "inside.entry").write_bytes(b"not an entry")
        (path / "out").symlink_to(path.parent.parent, target_is_directory=True)  # removing it must not follow
    else:
        raise ValueError(f"no plant {kind!r}")


STORE_FOLDER = "store"  # in the arena
# The arena store's secret: fixed, so an entry kept in the corpus is signed as it was when found.
STORE_SECRET = hashlib.sha256(b"fold-inspector fuzz store").digest()


def _store_bases(root: Path) -> dict[str, tuple[dict, dict, bytes]]:
    """Four real entries (JSON only, with arrays, a long text) under fixed names, in a store whose
    secret is ``STORE_SECRET``."""
    import numpy as np

    from inspector._base.store import Store

    root.mkdir(parents=True, exist_ok=True, mode=0o700)
    fd = os.open(root / "secret", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(STORE_SECRET)
    store = Store(root)
    out = {}
    for n in range(4):
        name = f"fuzz-{n}"
        data = {"n": n, "text": "x" * (n * 50), "numbers": [1.5, "inf", None]}
        arrays = {"a": np.arange(n * 30 + 1), "b": np.ones((2, n + 1), dtype=np.float32)} if n else {}
        if not store.put(name, data, arrays):
            raise RuntimeError(f"the fuzz store could not keep {name}")
        out[name] = (data, arrays, (root / "entries" / f"{name}.entry").read_bytes())
    return out


def store_case(label: str, name: str, kind: str, body: bytes) -> Case:
    """A case of the store: entry ``name`` replaced by ``body`` (kind "bytes") or by a plant of
    ``PLANTS`` ("elsewhere": a link to ``body`` in another folder)."""
    return Case("store", label, f"{name}\n{kind}\n".encode() + body)


def _store_parts(data: bytes) -> tuple[str, str, bytes]:
    name, kind, body = data.split(b"\n", 2)
    return name.decode(), kind.decode(), body


def make_store_case(bases: Bases, seed: int, index: int) -> Case:
    """A real entry with bytes flipped, cut, inserted or spliced from another, or random bytes, now and
    then signed again with the store's secret (so the reader below the signature is reached); or
    something put() never writes (``PLANTS``) where the entry was."""
    rng = random.Random(f"{seed}:store:{index}")
    name = rng.choice(sorted(bases.entries))
    raw = bases.entries[name][2]
    label = f"seed {seed} store #{index} {name}: "
    if rng.random() < 0.3:
        kind = rng.choice(sorted(PLANTS))
        return store_case(label + PLANTS[kind], name, kind, raw if kind == "elsewhere" else b"")
    body, what = _mutate_entry(raw, bases, rng)
    if rng.random() < 0.3 and len(body) > _ENTRY_START:
        body = _signed(name, body[_ENTRY_START:])
        what += ", signed again"
    return store_case(label + what, name, "bytes", body)


_ENTRY_START = 8 + 32  # MAGIC and the HMAC: the payload follows


def _signed(name: str, payload: bytes) -> bytes:
    from inspector._base.store import MAGIC, Store

    return MAGIC + Store._mac(STORE_SECRET, name, payload) + payload


def _mutate_entry(raw: bytes, bases: Bases, rng: random.Random) -> tuple[bytes, str]:
    roll = rng.random()
    if roll < 0.3:
        return _flip(raw, rng), "bytes flipped"
    if roll < 0.5:
        return _cut(raw, rng), "truncated"
    if roll < 0.65:
        at = rng.randrange(len(raw))
        return raw[:at] + rng.randbytes(rng.randint(1, 64)) + raw[at:], "bytes inserted"
    if roll < 0.8:
        other = bases.entries[rng.choice(sorted(bases.entries))][2]
        cut = rng.randrange(len(raw))
        return raw[:cut] + other[cut:], "spliced with another entry"
    if roll < 0.9:  # a header length and a JSON header that lie
        from inspector._base.store import environment

        header = json.dumps({"format": 1, "name": "x", "environment": environment(), "data": {},
                             "arrays": ["a"]}).encode()
        payload = rng.choice((0, 1, 2 ** 31, 2 ** 64 - 1, rng.randrange(2 ** 64))).to_bytes(8, "big") + header
        return raw[:_ENTRY_START] + payload + rng.randbytes(rng.randrange(300)), "a header that lies"
    return rng.randbytes(rng.randrange(200)), "random bytes"


def _mapped() -> int | None:
    """The process's address space now (Linux), or None."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmSize:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


@contextlib.contextmanager
def capped(memory: int):
    """The process's address space bounded to what it maps now plus ``memory`` while inside (Linux;
    elsewhere unbounded): a reader that reads a device or a huge file whole raises MemoryError at
    once instead of taking the machine's memory until it is killed."""
    mapped = _mapped()
    soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    if mapped is None:
        yield
        return
    limit = mapped + memory if hard == resource.RLIM_INFINITY else min(mapped + memory, hard)
    resource.setrlimit(resource.RLIMIT_AS, (limit, hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_AS, (soft, hard))


# ----------------------------------------------------------------------------- cases


@dataclasses.dataclass(frozen=True)
class Case:
    kind: str  # "pt2", "session", "cli" or "store"
    label: str  # how it was made (seed, index, base, mutations): enough to rebuild and to read
    data: bytes  # the archive, the session file, the CLI's argv as JSON, or an entry's name, plant and bytes

    @property
    def digest(self) -> str:
        return hashlib.sha1(self.kind.encode() + b"\0" + self.data).hexdigest()[:12]


MAKERS = {"pt2": make_pt2_case, "session": make_session_case, "cli": make_cli_case, "store": make_store_case}


def make_case(bases: Bases, kind: str, seed: int, index: int) -> Case:
    return MAKERS[kind](bases, seed, index)


# ----------------------------------------------------------------------------- the judge


class _Problem(Exception):
    """The case broke a rule: an exception that is not one InspectorError line, code ran, etc."""


class _Hang(BaseException):
    """The case ran past its time (a BaseException, so the loaders' ``except Exception`` cannot hide it)."""


@dataclasses.dataclass(frozen=True)
class Verdict:
    outcome: str  # "loaded", "refused", "exit 2", ...: what the reader did
    problem: str | None  # None when every rule held, else one line saying which broke
    seconds: float


def _peak_rss() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


class Judge:
    """Runs cases in this process under every rule: outcome, time (an alarm ends a hang), peak
    RSS, the planted marker, the evil module, what is left in the temp folder."""

    def __init__(self, arena: Arena, *, seconds: float = CASE_SECONDS, memory: int = MEMORY_BYTES) -> None:
        self.arena = arena
        self.seconds = seconds
        self.memory = memory
        self._warm_up()
        self.memory_limit = _peak_rss() + memory
        self.tmp_before = set(os.listdir(arena.tmp))

    def stricter(self, *, seconds: float, memory: int) -> Judge:
        """This judge with tighter limits (the positive controls break them quickly and cheaply)."""
        judge = copy.copy(self)
        judge.seconds, judge.memory, judge.memory_limit = seconds, memory, _peak_rss() + memory
        return judge

    def _warm_up(self) -> None:
        """Load every base and analyze one, so the first case pays no import or cache setup
        (torch creates its inductor cache folder in the temp folder on first use: not a leftover)."""
        import inspector
        from inspector._targets import pt2 as _pt2

        for members in self.arena.bases.archives.values():
            _pt2.load_pt2_bytes(_zip_plain(members)).module()
        path = self.arena.folder / "fuzz-base.pt2"
        path.write_bytes(_zip_plain(self.arena.bases.archives["conv_mul_scalar"]))
        inspector.analyze(str(path))

    def judge(self, case: Case, *, analyze: bool = False) -> Verdict:
        runner = {"pt2": lambda: self._pt2(case, analyze), "session": lambda: self._session(case),
                  "cli": lambda: self._cli(case), "store": lambda: self._store(case)}[case.kind]
        return self.run(runner)

    def run(self, runner: Callable[[], str]) -> Verdict:
        """``runner()`` returns the outcome or raises ``_Problem``; everything else it does is judged here."""
        peak_before = _peak_rss()
        previous = signal.signal(signal.SIGALRM, _raise_hang)
        signal.setitimer(signal.ITIMER_REAL, self.seconds)
        start = time.perf_counter()
        outcome, problem = "failed", None
        try:
            outcome = runner()
        except _Problem as exc:
            problem = str(exc)
        except _Hang:
            problem = f"still running after {self.seconds:g} s (a hang?)"
        except KeyboardInterrupt:
            raise
        except BaseException as exc:  # noqa: BLE001 - the point: any other exception is a finding
            problem = f"raised {type(exc).__name__}: {_first_line(exc)}"
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, previous)
        seconds = time.perf_counter() - start
        problem = "; ".join(p for p in (self._after(seconds, peak_before), problem) if p) or None
        self._clean()
        return Verdict(outcome, problem, seconds)

    def _after(self, seconds: float, peak_before: int) -> str | None:
        peak = _peak_rss()
        if self.arena.marker.exists():
            return "the planted code ran (the marker file was created)"
        if EVIL_MODULE in sys.modules or "evil" in sys.modules:
            return f"the archive's module {EVIL_MODULE} was imported"
        if seconds > self.seconds:
            return f"took {seconds:.1f} s, over {self.seconds:g} s"
        if peak > self.memory_limit and peak > peak_before:
            return f"peak RSS grew to {peak // MiB} MiB, over the start + {self.memory // MiB} MiB"
        return None

    def _clean(self) -> None:
        """Undo what a failing case left, so the next case is judged on its own."""
        self.arena.marker.unlink(missing_ok=True)
        sys.modules.pop(EVIL_MODULE, None)
        sys.modules.pop("evil", None)

    # -- the three readers

    def _pt2(self, case: Case, analyze: bool) -> str:
        from inspector import InspectorError
        from inspector._targets import pt2 as _pt2

        try:
            program = _pt2.load_pt2_bytes(case.data)
        except InspectorError as exc:
            _one_line(str(exc), "the refusal")
            self._no_leftovers()
            if "the archive is malformed (" in str(exc):  # load_pt2's last resort: no reason given
                raise _Problem(f"a check crashed on a shape it did not foresee: {str(exc)[:200]!r}") from None
            return "refused"
        self._no_leftovers()
        with contextlib.suppress(Exception):  # torch's own error on an odd program; the marker is what counts
            program.module()
        if analyze:
            self._analyze(case)
            return "loaded and analyzed"
        return "loaded"

    def _analyze(self, case: Case) -> None:
        import inspector

        path = self.arena.folder / "fuzz-case.pt2"
        path.write_bytes(case.data)
        try:
            inspector.analyze(str(path))
        except inspector.InspectorError as exc:
            _one_line(str(exc), "the analysis error")

    def _no_leftovers(self) -> None:
        left = sorted(set(os.listdir(self.arena.tmp)) - self.tmp_before)
        if left:
            for name in left:
                _remove(self.arena.tmp / name)
            raise _Problem(f"left {left[:3]} in the temp folder")

    def _session(self, case: Case) -> str:
        from inspector import InspectorError
        from inspector._front.session import read_session, save_session

        path = self.arena.folder / "fuzz-session.json"
        path.write_bytes(case.data)
        try:
            session = read_session(path)
        except InspectorError as exc:
            _one_line(str(exc), "the refusal")
            if "runs that file's code" not in str(exc):
                return "refused"
            if not read_session(path, trust=True).runs_code:
                raise _Problem("refused as naming a Python file, but read with trust it names none") from None
            return "refused until trusted"
        if session.runs_code:
            raise _Problem(f"read without trust although building it imports {session.code_files[0]!r}")
        again = read_session(save_session(session, self.arena.folder / "fuzz-session-again.json"))
        if _dumps_sorted(again.to_dict()) != _dumps_sorted(session.to_dict()):
            raise _Problem("saved and read back, the session differs")
        return "loaded"

    def _cli(self, case: Case) -> str:
        from inspector._front.cli import main

        argv = json.loads(case.data)
        out, err = io.StringIO(), io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            code = main(list(argv))
        text = err.getvalue()
        if code != 2 or out.getvalue():
            raise _Problem(f"exit {code} with {len(out.getvalue())} characters on stdout; stderr {text[:200]!r}")
        _one_line(text.rstrip("\n"), "stderr")
        if not text.startswith("error: ") or "Traceback" in text:
            raise _Problem(f"stderr is not one 'error:' line: {text[:200]!r}")
        _arguments_checked_first(argv, text)
        return "exit 2"

    def _store(self, case: Case) -> str:
        """The entry in place, then what a verb does: get (a miss unless these are the entry's own bytes),
        the scan (len, size, trim), and on a miss put, which must leave a regular file that reads back."""
        import numpy as np

        from inspector._base.store import Store

        name, kind, body = _store_parts(case.data)
        data, arrays, original = self.arena.bases.entries[name]
        store = Store(self.arena.store)
        path = self.arena.store / "entries" / f"{name}.entry"
        elsewhere = self.arena.folder / "store-elsewhere"
        _remove(path)
        path.write_bytes(body)
        if kind != "bytes":
            plant(path, kind, elsewhere)
        what = "mutated bytes" if kind == "bytes" else PLANTS[kind]
        with capped(self.memory):  # a reader that reads a device or a huge file whole stops here
            got = store.get(name)
            signed = kind == "bytes" and body != original and _signed(name, body[_ENTRY_START:]) == body
            if got is not None:
                if kind != "bytes":
                    raise _Problem(f"read {what} (put() never writes one)")
                if body != original and not signed:
                    raise _Problem("read mutated bytes as the entry")
                if not signed and (got.data != data or sorted(got.arrays) != sorted(arrays) or
                                   not all(np.array_equal(got.arrays[k], v) for k, v in arrays.items())):
                    raise _Problem("read back other than written")
                if not isinstance(got.data, dict) or not all(isinstance(a, np.ndarray) for a in got.arrays.values()):
                    raise _Problem("read back something that is not an entry")
            if kind != "bytes" and name in store:
                raise _Problem(f"{what} counts as an entry")
            if len(store) != len(self.arena.bases.entries) - (kind != "bytes") or store.trim():
                raise _Problem(f"with {what} in place the store counts {len(store)} entries or trims some")
            if got is None:  # computed again: written over
                if not store.put(name, data, arrays):
                    raise _Problem(f"{what} could not be written over")
                if not path.is_file() or path.is_symlink() or store.get(name) is None:
                    raise _Problem(f"written over {what}, the entry does not read back")
        if kind == "elsewhere" and (elsewhere / path.name).read_bytes() != body:
            raise _Problem("the entry a link led to was changed")
        if not (self.arena.store / "secret").is_file():
            raise _Problem("the store's secret is gone (a link out of a folder was followed)")
        if got is None:
            return "miss, written over"
        return "read, signed again" if signed else "read, its own bytes"


def _arguments_checked_first(argv: list[str], text: str) -> None:
    """Valid arguments reach the work (the missing model); an invalid one is named before any model is loaded."""
    reached = any(s in text for s in (f"no such file: {MISSING_PT2}", "no models to sweep", "cannot serve Model Explorer"))
    if cli_arguments_ok(argv) and not reached:
        raise _Problem(f"arguments within their bounds were refused: {text.strip()[:200]!r}")
    if not cli_arguments_ok(argv) and reached:
        raise _Problem(f"an argument out of its bounds was not checked before the model: {text.strip()[:200]!r}")


def _raise_hang(signum, frame):
    raise _Hang()


def _one_line(text: str, what: str) -> None:
    if not text.strip():
        raise _Problem(f"{what} is empty")
    lines = text.splitlines()
    if len(lines) != 1:
        raise _Problem(f"{what} spans {len(lines)} lines: {text[:200]!r}")
    if len(text) >= MAX_ERROR_CHARS:
        raise _Problem(f"{what} is {len(text)} characters long: {text[:200]!r}")


def _first_line(exc: BaseException) -> str:
    lines = str(exc).strip().splitlines()
    return lines[0][:200] if lines else ""


def _dumps_sorted(value: Any) -> str:
    return json.dumps(value, sort_keys=True, default=repr)


def _remove(path: Path) -> None:
    """Remove ``path``, never following a link (a link, a FIFO: the name itself)."""
    import shutil

    shutil.rmtree(path) if path.is_dir() and not path.is_symlink() else path.unlink(missing_ok=True)


# ----------------------------------------------------------------------------- the corpus

_SUFFIX = {"pt2": ".zip", "session": ".session.json", "cli": ".argv.json", "store": ".entry.bin"}  # .zip: git ignores *.pt2
NOTE_SUFFIX = ".note.json"


def save_finding(case: Case, verdict: Verdict, folder: Path = CORPUS) -> Path:
    """Keep a failing input and a note of what failed; the suite replays it from then on."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{case.kind}-{case.digest}{_SUFFIX[case.kind]}"
    path.write_bytes(case.data)
    note = {"kind": case.kind, "made_by": case.label[:2000], "outcome": verdict.outcome, "problem": verdict.problem,
            "seconds": round(verdict.seconds, 3)}
    Path(str(path) + NOTE_SUFFIX).write_text(json.dumps(note, indent=2, ensure_ascii=False) + "\n")
    return path


def corpus_cases(folder: Path = CORPUS) -> list[tuple[str, Case, dict]]:
    """Every kept input as (file name, case, note), by kind."""
    out = []
    for kind, suffix in _SUFFIX.items():
        for path in sorted(folder.glob(f"{kind}-*{suffix}")):
            note = json.loads(Path(str(path) + NOTE_SUFFIX).read_text())
            out.append((path.name, Case(kind, f"corpus {path.name}: {note['made_by']}", path.read_bytes()), note))
    return out
