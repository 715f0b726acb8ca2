"""Load a stranger's ``.pt2`` archive without running code from it (DESIGN.md, "What is trusted").

``torch.export.load`` trusts its input. Measured on torch 2.13, a crafted archive runs code
through several doors besides pickles:

* size expressions (``expr_str``) in the model JSON are parsed with sympy's ``sympify``, an eval;
* any member under ``data/aotinductor/`` makes torch hand the archive to the AOTInductor loader,
  which runs a compiler command read from the archive (``system()``), ``dlopen``s a bundled
  shared library, extracts ``../`` member names outside its temp folder and leaves that folder
  behind;
* placeholder and node names, parameter/buffer/constant names, graph-argument names, kwarg
  names, ``forward_arg_names`` and the keyword names of the input treespec are pasted into the
  Python source that torch.fx generates and compiles (at load time for placeholder names);
* ``guards_code`` strings, and dict keys of the stored example inputs, are pasted into the
  guard function that ``ExportedProgram.module()`` compiles;
* pytree contexts may name a module to import (``{"__enum__": ..., "fqn": "mod:Cls"}``, a
  defaultdict's ``default_factory_module``), found through ``sys.path`` (the current folder);
* members are decompressed without a size cap, and a zero-byte weight member makes torch
  allocate a zero tensor of whatever shape the JSON claims.

So the archive is checked here against an allowlist BEFORE torch parses any of it: only the
members a plain ``torch.export.save`` of a CPU program writes, size-capped from the zip headers
and again while reading, every JSON field walked against torch's own schema with a strict rule
for every string that can reach an eval, an import or generated code. Only then is a fresh
archive holding exactly the checked bytes given to torch's loader, with tensor-only unpickling
forced for the duration (defence in depth); torch never sees the original file, so it cannot
extract, compile or dlopen anything and leaves no temp folder. The stored example inputs are a
pickle: torch unpickles them tensors-only, and their dict keys (which reach the guard code) are
checked before the program is returned. Every refusal is an ``InspectorError`` of one line.
"""

from __future__ import annotations

import ast
import contextlib
import dataclasses
import enum
import io
import json
import keyword
import math
import os
import re
import threading
import types
import typing
import zipfile
import zlib
from pathlib import Path
from typing import Any

import torch

from .errors import InspectorError, first_line

KiB, MiB, GiB = 1 << 10, 1 << 20, 1 << 30

# ----------------------------------------------------------------------------- caps
# Sized for the models this tool inspects (a few MB to a few hundred MB of weights) with a wide
# margin; a larger archive is refused with a message naming the cap.
MAX_ARCHIVE_BYTES = 2 * GiB  # the .pt2 file on disk
MAX_TOTAL_BYTES = 2 * GiB  # all members, uncompressed (the checked copy is held in memory)
MAX_TENSOR_MEMBER_BYTES = 1 * GiB  # one weight/constant storage
MAX_JSON_BYTES = 32 * MiB  # models/model.json (measured ~0.7 KB per node: a 1,200-node net is 0.8 MB; parsing costs up to ~25x)
MAX_CONFIG_BYTES = 16 * MiB  # the weights/constants payload configs
MAX_SAMPLE_INPUTS_BYTES = 64 * MiB  # the example inputs (a nested torch.save zip; a 64x3x224x224 batch is 38 MB)
MAX_EXTRA_BYTES = 16 * MiB  # one extra/ file (torch.export.save(extra_files=...))
MAX_TINY_BYTES = 256  # archive_format, archive_version, byteorder, .data/*
MAX_MEMBERS = 20_000
MAX_DIRECTORY_BYTES = 8 * MiB  # the zip's central directory, read whole by zipfile before any check
MAX_RATIO = 100  # uncompressed/compressed, for members over RATIO_FLOOR (random float weights: ~1.0x)
RATIO_FLOOR = 1 * MiB
MAX_JSON_DEPTH = 100  # measured: 10-11 for plain programs, 17 with a torch.cond subgraph
MAX_EXPR_CHARS = 20_000
MAX_EXPR_DEPTH = 64
MAX_INT_DIGITS = 32
MAX_POW_EXPONENT = 64
MAX_NAME_CHARS = 1024
MAX_GUARD_CHARS = 20_000
_CHUNK = 1 * MiB
_QUOTE_CHARS = 60

# ----------------------------------------------------------------------------- errors


class _Refusal(Exception):
    """The archive is refused: ``member`` (or None for the archive as a whole) and the risk.

    ``invalid`` marks files that are simply not torch.export archives (not a zip, members
    missing): those read "cannot load ...", the others "refusing to load ..."."""

    def __init__(self, reason: str, member: str | None = None, *, invalid: bool = False) -> None:
        super().__init__(reason)
        self.reason = reason
        self.member = member
        self.invalid = invalid


def _message(shown: str, exc: _Refusal) -> str:
    where = f"member {_q(exc.member)}: " if exc.member is not None else ""
    if exc.invalid:
        return _one_line(f"cannot load {shown} as a torch.export .pt2 archive: {where}{exc.reason}")
    return _one_line(f"refusing to load {shown}: {where}{exc.reason}")


def _q(value: Any, limit: int = _QUOTE_CHARS) -> str:
    """An attacker string, shortened to about 60 characters and repr()'d so it stays on one line."""
    text = value if isinstance(value, str) else repr(value)
    if len(text) > limit:
        text = text[: limit - 3] + "..."
    return repr(text)


def _display(path: Path) -> str:
    name = path.name
    return name if name.isprintable() and len(name) <= 120 else _q(name)


def _one_line(text: str) -> str:
    return " ".join(text.split())


# ----------------------------------------------------------------------------- public entry


def load_pt2(path: str | os.PathLike) -> torch.export.ExportedProgram:
    """Load a ``.pt2`` archive written by ``torch.export.save`` without running code from it.

    The archive is checked first (members, sizes, every JSON field); then torch loads a copy
    holding exactly the checked bytes, with every tensor unpickled ``weights_only`` and the
    other unpicklers refusing. Anything outside what a plain ``torch.export.save`` of a CPU
    program writes is refused with a one-line ``InspectorError`` naming the member and the risk.
    """
    path = Path(path)
    shown = _display(path)
    if not path.is_file():
        raise InspectorError(f"no such file: {shown}")
    try:
        checked = _check_archive(path)
    except _Refusal as exc:
        raise InspectorError(_message(shown, exc)) from None
    except (RecursionError, MemoryError):
        raise InspectorError(f"refusing to load {shown}: the archive is nested too deeply or too big to check") from None
    except Exception as exc:  # noqa: BLE001 - a shape the checks did not foresee; torch never saw it
        raise InspectorError(f"refusing to load {shown}: the archive is malformed ({type(exc).__name__})") from None
    try:
        with _no_code_from_archives():
            from torch.export.pt2_archive import _package

            contents = _package.load_pt2(checked.buffer)
        program = contents.exported_programs.get("model")
        if program is None:
            raise RuntimeError("the archive holds no program named 'model'")
    except _Refused as exc:
        raise InspectorError(_one_line(f"refusing to load {shown}: {exc}")) from None
    except Exception as exc:  # noqa: BLE001 - any loader failure is a bad file for the user
        if "weights_only" in str(exc) or "Unpickl" in type(exc).__name__:
            raise InspectorError(
                f"refusing to load {shown}: it holds pickled Python objects beyond plain tensors, "
                "which could run code; re-export it with plain tensor weights and inputs"
            ) from None
        raise InspectorError(
            _one_line(f"cannot load {shown} as a torch.export .pt2 archive: {_q(first_line(exc), 200)}")
        ) from None
    try:
        _check_loaded(program)
    except _Refusal as exc:
        raise InspectorError(_message(shown, exc)) from None
    return program


# ----------------------------------------------------------------------------- tensor-only unpickling


class _Refused(Exception):
    """The archive asked for an unpickler that can run code."""


_ARCHIVE_LOCK = threading.Lock()


@contextlib.contextmanager
def _no_code_from_archives():
    """Within this scope, torch.load is weights_only and arbitrary unpicklers refuse."""
    from torch.export.pt2_archive import _package

    def refuse(*_args, **_kwargs):
        raise _Refused("it holds pickled custom or opaque objects, which could run code")

    real_load = torch.load

    def tensors_only(f, *args, weights_only=None, **kwargs):  # noqa: ARG001 - forced below
        return real_load(f, *args, weights_only=True, **kwargs)

    with _ARCHIVE_LOCK:
        saved = (torch.load, _package.pickle, torch._C._pickle_load_obj)
        torch.load = tensors_only
        _package.pickle = types.SimpleNamespace(loads=refuse, load=refuse)
        torch._C._pickle_load_obj = refuse
        try:
            yield
        finally:
            torch.load, _package.pickle, torch._C._pickle_load_obj = saved


# ----------------------------------------------------------------------------- members

_ROOT = "archive"  # the root folder of the checked copy handed to torch

_TINY_MEMBERS = {
    "archive_format": re.compile(rb"pt2"),
    "archive_version": re.compile(rb"0"),
    "byteorder": re.compile(rb"little|big"),
    ".data/version": re.compile(rb"\d{1,4}\n?"),
    ".data/serialization_id": re.compile(rb"\d{1,64}"),
}
_MODEL_JSON = "models/model.json"
_WEIGHTS_CONFIG = "data/weights/model_weights_config.json"
_CONSTANTS_CONFIG = "data/constants/model_constants_config.json"
_SAMPLE_INPUTS = "data/sample_inputs/model.pt"
_REQUIRED = ("archive_format", "archive_version", _MODEL_JSON, _WEIGHTS_CONFIG, _CONSTANTS_CONFIG, _SAMPLE_INPUTS)
_WEIGHT_RE = re.compile(r"data/weights/(weight_\d{1,9})")
_CONSTANT_RE = re.compile(r"data/constants/(tensor_\d{1,9})")
_EXTRA_RE = re.compile(r"extra/([A-Za-z0-9_\-][A-Za-z0-9_.\-]{0,127})(/[A-Za-z0-9_\-][A-Za-z0-9_.\-]{0,127}){0,7}")
_ROOT_BAD = re.compile(r"[\x00-\x1f\x7f\\/:]")


def _kind_of(rel: str) -> tuple[str, int]:
    """(kind, size cap) of an allowlisted member path (inside the root folder), else a refusal."""
    if rel in _TINY_MEMBERS:
        return "tiny", MAX_TINY_BYTES
    if rel == _MODEL_JSON:
        return "model", MAX_JSON_BYTES
    if rel in (_WEIGHTS_CONFIG, _CONSTANTS_CONFIG):
        return "config", MAX_CONFIG_BYTES
    if rel == _SAMPLE_INPUTS:
        return "inputs", MAX_SAMPLE_INPUTS_BYTES
    if _WEIGHT_RE.fullmatch(rel) or _CONSTANT_RE.fullmatch(rel):
        return "tensor", MAX_TENSOR_MEMBER_BYTES
    if _EXTRA_RE.fullmatch(rel) and ".." not in rel.split("/"):
        return "extra", MAX_EXTRA_BYTES
    if rel.startswith("data/aotinductor/") or rel == "data/aotinductor":
        raise _Refusal("AOTInductor compiled members (a compiler command, a shared library) could run code")
    if rel.startswith("data/constants/custom_obj_") or rel.startswith("data/constants/opaque_obj_"):
        raise _Refusal("a pickled custom or opaque object could run code")
    if rel.startswith("models/"):
        raise _Refusal("only one program, 'models/model.json', is allowed")
    raise _Refusal("not a member that torch.export.save writes for a CPU program")


@dataclasses.dataclass
class _Member:
    info: zipfile.ZipInfo
    rel: str  # path inside the root folder
    kind: str
    cap: int


@dataclasses.dataclass
class _Checked:
    buffer: io.BytesIO  # the checked copy, for torch


def _check_names(infos: list[zipfile.ZipInfo]) -> tuple[str, list[_Member]]:
    if not infos:
        raise _Refusal("the archive is empty", invalid=True)
    if len(infos) > MAX_MEMBERS:
        raise _Refusal(f"{len(infos)} members is more than the cap of {MAX_MEMBERS}")
    seen: set[str] = set()
    root = None
    members = []
    for info in infos:
        name = info.filename
        if not name or len(name) > 1024 or not name.isprintable():
            raise _Refusal("member name is empty, too long or holds control characters", name)
        if "\\" in name:
            raise _Refusal("member name holds a backslash (a path escape on some systems)", name)
        if name.startswith("/") or re.match(r"[A-Za-z]:", name):
            raise _Refusal("member name is an absolute path", name)
        parts = name.split("/")
        if any(p in ("", ".", "..") for p in parts):
            raise _Refusal("member name holds '..', '.' or an empty path part (a path escape)", name)
        if name.casefold() in seen:
            raise _Refusal("duplicate member name", name)
        seen.add(name.casefold())
        if len(parts) < 2:
            raise _Refusal("member is not inside the archive's root folder", name)
        if root is None:
            root = parts[0]
            if _ROOT_BAD.search(root) or len(root) > 255:
                raise _Refusal("the archive's root folder name holds unsafe characters", name)
        elif parts[0] != root:
            raise _Refusal("members are not all inside one root folder", name)
    for info in infos:  # names are safe paths; now only what torch.export.save writes
        rel = info.filename.split("/", 1)[1]
        try:
            kind, cap = _kind_of(rel)
        except _Refusal as exc:
            raise _Refusal(exc.reason, rel) from None
        if info.flag_bits & 0x1:
            raise _Refusal("encrypted member", rel)
        if info.compress_type not in (zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED):
            raise _Refusal(f"unsupported compression method {info.compress_type}", rel)
        members.append(_Member(info, rel, kind, cap))
    present = {m.rel for m in members}
    missing = [r for r in _REQUIRED if r not in present]
    if missing:
        raise _Refusal(f"it is not a torch.export.save archive ({', '.join(missing)} missing)", invalid=True)
    return root, members


def _check_sizes(members: list[_Member]) -> None:
    total = 0
    for m in members:
        size, packed = m.info.file_size, m.info.compress_size
        if size > m.cap:
            raise _Refusal(f"uncompressed size {size} bytes is over the cap of {m.cap} bytes (a decompression bomb?)", m.rel)
        if m.info.compress_type == zipfile.ZIP_STORED and packed != size:
            raise _Refusal("stored member whose sizes disagree", m.rel)
        if size > RATIO_FLOOR and size > MAX_RATIO * max(packed, 1):
            raise _Refusal(f"compression ratio {size // max(packed, 1)}:1 is over the cap of {MAX_RATIO}:1 (a decompression bomb?)", m.rel)
        total += size
        if total > MAX_TOTAL_BYTES:
            raise _Refusal(f"members add up to more than the cap of {MAX_TOTAL_BYTES} bytes uncompressed")


def _read_chunks(zf: zipfile.ZipFile, m: _Member):
    """Yield the member's bytes in chunks, stopping at the cap whatever the headers say."""
    limit = min(m.info.file_size, m.cap)
    got = 0
    try:
        with zf.open(m.info) as f:
            while True:
                chunk = f.read(_CHUNK)
                if not chunk:
                    break
                got += len(chunk)
                if got > limit:
                    raise _Refusal(f"decompresses to more than its {limit} bytes (headers lie: a decompression bomb?)", m.rel)
                yield chunk
    except (zipfile.BadZipFile, zlib.error, EOFError, OSError, ValueError, NotImplementedError) as exc:
        raise _Refusal(f"cannot be read: {_q(first_line(exc))}", m.rel) from None
    if got != m.info.file_size:
        raise _Refusal("is shorter than its headers say", m.rel)


def _read(zf: zipfile.ZipFile, m: _Member) -> bytes:
    return b"".join(_read_chunks(zf, m))


def _check_archive(path: Path) -> _Checked:
    size = path.stat().st_size
    if size > MAX_ARCHIVE_BYTES:
        raise _Refusal(f"the file is {size} bytes, over the cap of {MAX_ARCHIVE_BYTES} bytes")
    _check_directory(path)
    try:
        zf = zipfile.ZipFile(path)
    except Exception as exc:  # noqa: BLE001 - whatever zipfile makes of a crafted file
        raise _Refusal(f"it is not a zip archive ({_q(first_line(exc))})", invalid=True) from None
    with zf:
        _root, members = _check_names(zf.infolist())
        _check_sizes(members)
        by_rel = {m.rel: m for m in members}
        out = io.BytesIO()
        with zipfile.ZipFile(out, "w", zipfile.ZIP_STORED) as zout:

            def put(m: _Member, data: bytes) -> None:
                zout.writestr(zipfile.ZipInfo(f"{_ROOT}/{m.rel}", date_time=(1980, 1, 1, 0, 0, 0)), data)

            for m in members:
                if m.kind == "tiny":
                    data = _read(zf, m)
                    if not _TINY_MEMBERS[m.rel].fullmatch(data):
                        raise _Refusal(f"unexpected content {_q(data)}", m.rel)
                    put(m, data)
                elif m.kind == "extra":
                    data = _read(zf, m)
                    try:
                        data.decode("utf-8")
                    except UnicodeDecodeError:
                        raise _Refusal("extra file is not UTF-8 text", m.rel) from None
                    put(m, data)
            tensor_sizes = {m.rel: m.info.file_size for m in members if m.kind == "tensor"}
            for rel, folder in ((_WEIGHTS_CONFIG, "data/weights/"), (_CONSTANTS_CONFIG, "data/constants/")):
                m = by_rel[rel]
                data = _read(zf, m)
                _Walker(rel).check_payload_config(_parse_json(data, rel), folder, tensor_sizes)
                put(m, data)
            m = by_rel[_MODEL_JSON]
            data = _read(zf, m)
            _Walker(_MODEL_JSON).check_program(_parse_json(data, _MODEL_JSON))
            put(m, data)
            m = by_rel[_SAMPLE_INPUTS]
            data = _read(zf, m)
            _check_nested_torch_save(data, m.rel)
            put(m, data)
            for m in members:
                if m.kind == "tensor":
                    info = zipfile.ZipInfo(f"{_ROOT}/{m.rel}", date_time=(1980, 1, 1, 0, 0, 0))
                    info.file_size = m.info.file_size
                    with zout.open(info, "w", force_zip64=m.info.file_size > (1 << 31)) as w:
                        for chunk in _read_chunks(zf, m):
                            w.write(chunk)
    out.seek(0)
    return _Checked(out)


def _check_directory(source: Path | bytes, rel: str | None = None) -> None:
    """Bound the central directory from the end record before zipfile parses all of it."""
    try:
        with (open(source, "rb") if isinstance(source, Path) else io.BytesIO(source)) as fp:
            end = zipfile._EndRecData(fp)  # the same reader zipfile uses; reads the file's tail only
    except Exception as exc:  # noqa: BLE001
        raise _Refusal(f"it is not a zip archive ({_q(first_line(exc))})", rel, invalid=rel is None) from None
    if end is None:
        raise _Refusal("it is not a zip archive (no end of central directory)", rel, invalid=rel is None)
    entries, size = end[zipfile._ECD_ENTRIES_TOTAL], end[zipfile._ECD_SIZE]
    if entries > MAX_MEMBERS:
        raise _Refusal(f"{entries} zip members is more than the cap of {MAX_MEMBERS}", rel)
    if size > MAX_DIRECTORY_BYTES:
        raise _Refusal(f"a {size}-byte zip directory is over the cap of {MAX_DIRECTORY_BYTES} bytes", rel)


def _check_nested_torch_save(data: bytes, rel: str) -> None:
    """The example inputs are a torch.save zip inside the archive: stored members, sane sizes."""
    if not data:
        return
    _check_directory(data, rel)
    try:
        inner = zipfile.ZipFile(io.BytesIO(data))
    except Exception as exc:  # noqa: BLE001 - whatever zipfile makes of crafted bytes
        raise _Refusal(f"example inputs are not a torch.save zip: {_q(first_line(exc))}", rel) from None
    names: set[str] = set()
    with inner:
        infos = inner.infolist()
        if len(infos) > MAX_MEMBERS:
            raise _Refusal("example inputs hold too many members", rel)
        for info in infos:
            name = info.filename
            if not name.isprintable() or "\\" in name or name.startswith("/") or ".." in name.split("/"):
                raise _Refusal(f"example inputs hold an unsafe member name {_q(name)}", rel)
            if name.casefold() in names:
                raise _Refusal(f"example inputs hold a duplicate member {_q(name)}", rel)
            names.add(name.casefold())
            if info.compress_type != zipfile.ZIP_STORED or info.flag_bits & 0x1:
                raise _Refusal(f"example inputs hold a compressed or encrypted member {_q(name)} (torch.save never compresses)", rel)
            if info.file_size != info.compress_size or info.file_size > len(data):
                raise _Refusal(f"example inputs member {_q(name)} claims a size its bytes do not have", rel)


# ----------------------------------------------------------------------------- JSON


def _parse_json(data: bytes, rel: str) -> Any:
    try:
        value = json.loads(data.decode("utf-8"))  # exactly what torch does with these bytes
    except RecursionError:
        raise _Refusal(f"JSON nested deeper than {MAX_JSON_DEPTH} levels", rel) from None
    except (ValueError, UnicodeDecodeError) as exc:
        raise _Refusal(f"not valid JSON: {_q(first_line(exc))}", rel) from None
    _check_depth(value, rel)
    return value


def _check_depth(value: Any, rel: str, limit: int = MAX_JSON_DEPTH) -> None:
    stack = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if depth > limit:
            raise _Refusal(f"JSON nested deeper than {limit} levels", rel)
        if isinstance(item, dict):
            stack.extend((v, depth + 1) for v in item.values())
        elif isinstance(item, list):
            stack.extend((v, depth + 1) for v in item)


def _json_text(text: str, what: str, rel: str, limit: int = MAX_JSON_DEPTH) -> Any:
    """Parse a JSON string nested in a JSON field (treespecs, custom metadata)."""
    try:
        value = json.loads(text)
    except RecursionError:
        raise _Refusal(f"{what} nested deeper than {limit} levels", rel) from None
    except ValueError:
        raise _Refusal(f"{what} {_q(text)} is not valid JSON", rel) from None
    _check_depth(value, rel, limit)
    return value


# ----------------------------------------------------------------------------- string rules

_SYMBOL_RE = re.compile(r"(?:s|u|zf|zuf|ps)\d{1,9}")
_SAFE_KEY_RE = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.\-]{0,199}")
_SAFE_TEXT_RE = re.compile(r"[A-Za-z0-9_ .,:;+\-/@#=()\[\]{}<>*&^%$!?|~]{0,1000}")
_DOTTED_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_<][A-Za-z0-9_<>]*)*")


def is_name(text: Any) -> bool:
    """A name that may appear verbatim in generated Python: an identifier, not a keyword."""
    return (isinstance(text, str) and 0 < len(text) <= MAX_NAME_CHARS and text.isidentifier()
            and not keyword.iskeyword(text))


def is_path(text: Any) -> bool:
    """A module or attribute path: dotted names, where ModuleList indices may be digits."""
    return (isinstance(text, str) and 0 < len(text) <= MAX_NAME_CHARS
            and all(is_name(p) or (p.isdigit() and p.isascii()) for p in text.split(".")))


def _key_ok(key: Any) -> bool:
    return (isinstance(key, int) and not isinstance(key, bool)) or (isinstance(key, str) and bool(_SAFE_KEY_RE.fullmatch(key)))


# ----------------------------------------------------------------------------- size expressions

# What torch 2.13 writes (sympy.srepr) and reads back with sympify: sympy's own constructors
# and relations, and the functions torch hands to sympify (GraphModuleDeserializer.sympy_functions).
_EXPR_FUNCTIONS = frozenset({
    "Symbol", "Integer", "Float", "Rational", "Add", "Mul", "Pow", "Max", "Min", "Abs", "Mod",
    "floor", "ceiling", "Eq", "Ne", "Lt", "Le", "Gt", "Ge", "Equality", "Unequality",
    "StrictLessThan", "LessThan", "StrictGreaterThan", "GreaterThan", "And", "Or", "Not",
    "Piecewise", "ExprCondPair",
    "FloorDiv", "ModularIndexing", "Where", "PythonMod", "CleanDiv", "CeilToInt", "FloorToInt",
    "CeilDiv", "LShift", "RShift", "PowByNatural", "FloatPow", "FloatTrueDiv", "IntTrueDiv",
    "IsNonOverlappingAndDenseIndicator", "TruncToFloat", "TruncToInt", "RoundToInt",
    "RoundDecimal", "ToFloat", "Identity",
})
_EXPR_CONSTANTS = frozenset({"oo", "zoo", "nan", "true", "false", "True", "False", "int_oo"})
_EXPR_KEYWORDS = frozenset({
    "positive", "negative", "nonnegative", "nonpositive", "integer", "real", "finite", "infinite",
    "nonzero", "zero", "rational", "irrational", "even", "odd", "commutative", "extended_real",
    "extended_positive", "extended_negative", "extended_nonnegative", "extended_nonpositive",
    "extended_nonzero", "prime", "composite", "complex", "imaginary", "hermitian", "algebraic",
    "transcendental", "precision", "evaluate",
})
_POW_FUNCTIONS = frozenset({"Pow", "PowByNatural", "FloatPow"})
_STRING_ARG_FUNCTIONS = {
    "Symbol": _SYMBOL_RE,
    "Float": re.compile(r"[+-]?(?:\d{1,40}(?:\.\d{0,40})?|\.\d{1,40})(?:[eE][+-]?\d{1,3})?|[+-]?inf|nan"),
}
_EXPR_TOKEN = re.compile(
    r"\s*(?:(?P<num>\d+(?:\.\d*)?(?:[eE][+-]?\d+)?)|(?P<name>[A-Za-z_][A-Za-z0-9_]*)"
    r"|(?P<str>'[^'\\\n\r]*')|(?P<op>\*\*|//|==|!=|<=|>=|[-+*/%(),=<>]))"
)


class _ExprError(Exception):
    pass


@dataclasses.dataclass
class _Node:
    symbolic: bool  # contains a size symbol
    literal: int | None = None  # the value of a plain integer literal


class _ExprParser:
    """Recursive descent over the only expressions torch writes: numbers, size symbols, + - * /
    // % **, comparisons, and calls of allowlisted sympy/torch functions with keyword flags.
    No attribute access, no subscripts, no other names: nothing sympify could turn into code."""

    def __init__(self, text: str) -> None:
        self.tokens: list[tuple[str, str]] = []
        pos = 0
        text = text.rstrip()
        while pos < len(text):
            m = _EXPR_TOKEN.match(text, pos)
            if not m or m.end() == pos:
                raise _ExprError(f"unexpected character at {pos}")
            kind = m.lastgroup
            self.tokens.append((kind, m.group(kind)))
            pos = m.end()
        self.i = 0
        self.depth = 0

    def parse(self) -> _Node:
        node = self.comparison()
        if self.i != len(self.tokens):
            raise _ExprError("trailing text")
        return node

    def peek(self) -> tuple[str, str] | None:
        return self.tokens[self.i] if self.i < len(self.tokens) else None

    def take(self, value: str | None = None) -> tuple[str, str]:
        tok = self.peek()
        if tok is None or (value is not None and tok[1] != value):
            raise _ExprError(f"expected {value or 'more'}")
        self.i += 1
        return tok

    def at(self, *values: str) -> bool:
        tok = self.peek()
        return tok is not None and tok[0] == "op" and tok[1] in values

    def enter(self) -> None:
        self.depth += 1
        if self.depth > MAX_EXPR_DEPTH:
            raise _ExprError("nested too deeply")

    def comparison(self) -> _Node:
        left = self.arith()
        if self.at("==", "!=", "<", "<=", ">", ">="):
            self.take()
            right = self.arith()
            return _Node(left.symbolic or right.symbolic)
        return left

    def arith(self) -> _Node:
        node = self.term()
        while self.at("+", "-"):
            self.take()
            other = self.term()
            node = _Node(node.symbolic or other.symbolic)
        return node

    def term(self) -> _Node:
        node = self.unary()
        while self.at("*", "/", "//", "%"):
            self.take()
            other = self.unary()
            node = _Node(node.symbolic or other.symbolic)
        return node

    def unary(self) -> _Node:
        if self.at("-", "+"):
            sign = self.take()[1]
            self.enter()
            node = self.unary()
            self.depth -= 1
            if node.literal is not None:
                return _Node(node.symbolic, -node.literal if sign == "-" else node.literal)
            return node
        return self.power()

    def power(self) -> _Node:
        base = self.atom()
        if self.at("**"):
            self.take()
            self.enter()
            exponent = self.unary()
            self.depth -= 1
            return self.pow_node(base, exponent)
        return base

    @staticmethod
    def pow_node(base: _Node, exponent: _Node) -> _Node:
        # A power of plain numbers is evaluated by sympy at parse time: keep it small.
        if not base.symbolic and not exponent.symbolic:
            if base.literal is None or exponent.literal is None or abs(exponent.literal) > MAX_POW_EXPONENT:
                raise _ExprError("a power of plain numbers that is not small")
        return _Node(base.symbolic or exponent.symbolic)

    def atom(self) -> _Node:
        kind, value = self.take()
        if kind == "num":
            digits = value.split(".")[0].split("e")[0].split("E")[0]
            if len(digits) > MAX_INT_DIGITS or len(value) > 2 * MAX_INT_DIGITS:
                raise _ExprError("a number with too many digits")
            return _Node(False, int(value) if value.isdigit() else None)
        if kind == "op" and value == "(":
            self.enter()
            node = self.comparison()
            self.take(")")
            self.depth -= 1
            return node
        if kind == "name":
            if self.at("("):
                return self.call(value)
            if _SYMBOL_RE.fullmatch(value):
                return _Node(True)
            if value in _EXPR_CONSTANTS:
                return _Node(False)
            raise _ExprError(f"unknown name {value!r}")
        raise _ExprError(f"unexpected {value!r}")

    def call(self, func: str) -> _Node:
        if func not in _EXPR_FUNCTIONS:
            raise _ExprError(f"unknown function {func!r}")
        self.take("(")
        self.enter()
        args: list[_Node] = []
        symbolic = False
        first = True
        while not self.at(")"):
            if not first:
                self.take(",")
            tok = self.peek()
            nxt = self.tokens[self.i + 1] if self.i + 1 < len(self.tokens) else None
            if tok and tok[0] == "name" and nxt == ("op", "="):
                if tok[1] not in _EXPR_KEYWORDS:
                    raise _ExprError(f"unknown keyword {tok[1]!r}")
                self.i += 2
                kind, value = self.take()
                if not (value in ("True", "False") or (kind == "num" and value.isdigit() and len(value) <= 4)):
                    raise _ExprError("a keyword value that is not True, False or a small integer")
            elif tok and tok[0] == "str":
                pattern = _STRING_ARG_FUNCTIONS.get(func)
                if not (first and pattern and pattern.fullmatch(tok[1][1:-1])):
                    raise _ExprError(f"unexpected string {tok[1]!r}")
                self.i += 1
                symbolic = symbolic or func == "Symbol"
            else:
                node = self.comparison()
                args.append(node)
                symbolic = symbolic or node.symbolic
            first = False
        self.take(")")
        self.depth -= 1
        if func in _POW_FUNCTIONS and len(args) == 2:
            return self.pow_node(args[0], args[1])
        if func == "Integer" and len(args) == 1:
            return args[0]
        return _Node(symbolic)


def check_expression(text: Any) -> None:
    """Raise ``_ExprError`` unless ``text`` is a plain size expression (see ``_ExprParser``)."""
    if not isinstance(text, str) or not text.strip() or len(text) > MAX_EXPR_CHARS:
        raise _ExprError("empty or too long")
    _ExprParser(text).parse()


# ----------------------------------------------------------------------------- guards

_GUARD_FUNCTIONS = frozenset({"abs", "max", "min", "round", "int", "float"})
_GUARD_MATH = frozenset({
    "floor", "ceil", "trunc", "sqrt", "cos", "cosh", "acos", "sin", "sinh", "asin", "tan", "tanh",
    "atan", "log2", "inf", "nan", "pow", "exp", "log",
})
_GUARD_TORCH = frozenset({"sym_float", "sym_int", "sym_max", "sym_min", "sym_sqrt", "_sym_sqrt", "sym_not", "sym_ite"})
_GUARD_TENSOR_METHODS = frozenset({"size", "stride", "storage_offset", "numel", "dim"})
_GUARD_NODES = (ast.Expression, ast.BoolOp, ast.And, ast.Or, ast.UnaryOp, ast.Not, ast.USub, ast.UAdd,
                ast.BinOp, ast.Add, ast.Sub, ast.Mult, ast.Div, ast.FloorDiv, ast.Mod, ast.Pow, ast.LShift, ast.RShift,
                ast.Compare, ast.Eq, ast.NotEq, ast.Lt, ast.LtE, ast.Gt, ast.GtE, ast.IfExp,
                ast.Constant, ast.Call, ast.Attribute, ast.Subscript, ast.Name, ast.Load)


def _is_input_ref(node: ast.AST) -> bool:
    """``L['x']``, ``L['x'][0]``, ``L['x'].size()[2]``: an input or one of its sizes."""
    if isinstance(node, ast.Name):
        return node.id == "L"
    if isinstance(node, ast.Subscript):
        key = node.slice
        if not (isinstance(key, ast.Constant) and _key_ok(key.value)):
            return False
        return _is_input_ref(node.value)
    if isinstance(node, ast.Call):
        f = node.func
        return (not node.args and not node.keywords and isinstance(f, ast.Attribute)
                and f.attr in _GUARD_TENSOR_METHODS and _is_input_ref(f.value))
    return False


def check_guard(text: Any) -> None:
    """Raise ``_ExprError`` unless ``text`` is a shape guard as torch prints them."""
    if not isinstance(text, str) or not text.strip() or len(text) > MAX_GUARD_CHARS:
        raise _ExprError("empty or too long")
    if any(c in text for c in "\n\r\\\"") or not text.isprintable():
        raise _ExprError("holds quotes, backslashes or line breaks")
    try:
        tree = ast.parse(text, mode="eval")
    except (SyntaxError, RecursionError, MemoryError, ValueError):
        raise _ExprError("not a Python expression") from None
    stack = [(tree, 0)]
    while stack:
        node, depth = stack.pop()
        if depth > 4 * MAX_EXPR_DEPTH:
            raise _ExprError("nested too deeply")
        if not isinstance(node, _GUARD_NODES):
            raise _ExprError(f"{type(node).__name__} is not allowed")
        if isinstance(node, ast.Constant):
            if isinstance(node.value, str):
                raise _ExprError("a string outside an input key")
            if not isinstance(node.value, (int, float, bool)) or (isinstance(node.value, int) and len(str(node.value)) > MAX_INT_DIGITS):
                raise _ExprError("an unexpected constant")
            continue
        if isinstance(node, ast.Name):
            if node.id not in ("L", "math", "torch", "inf", "nan"):
                raise _ExprError(f"unknown name {node.id!r}")
            if node.id in ("math", "torch"):
                raise _ExprError(f"bare {node.id!r}")
            continue
        if isinstance(node, ast.Attribute):
            if isinstance(node.value, ast.Name) and node.value.id == "math" and node.attr in ("inf", "nan"):
                continue
            raise _ExprError(f"attribute {node.attr!r} is not allowed here")
        if isinstance(node, ast.Subscript):
            if _is_input_ref(node):
                continue
            raise _ExprError("a subscript that is not an input size")
        if isinstance(node, ast.Call):
            if _is_input_ref(node):
                continue
            f = node.func
            ok = ((isinstance(f, ast.Name) and f.id in _GUARD_FUNCTIONS)
                  or (isinstance(f, ast.Attribute) and isinstance(f.value, ast.Name)
                      and ((f.value.id == "math" and f.attr in _GUARD_MATH)
                           or (f.value.id == "torch" and f.attr in _GUARD_TORCH))))
            if not ok or node.keywords:
                raise _ExprError("a call that is not an allowed math function")
            stack.extend((a, depth + 1) for a in node.args)
            continue
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Pow) and not _mentions_input(node.left):
            # a power of plain numbers is computed as written: only a number to a small power
            base, exponent = node.left, node.right
            if not (isinstance(base, ast.Constant) and isinstance(exponent, ast.Constant)
                    and type(base.value) in (int, float) and type(exponent.value) in (int, float)
                    and abs(exponent.value) <= MAX_POW_EXPONENT):
                raise _ExprError("a power of plain numbers that is not small")
        stack.extend((child, depth + 1) for child in ast.iter_child_nodes(node))


def _mentions_input(node: ast.AST) -> bool:
    return any(isinstance(n, ast.Name) and n.id == "L" for n in ast.walk(node))


# ----------------------------------------------------------------------------- operators

_HOP_ALLOWED = frozenset({
    "cond", "while_loop", "map_impl", "scan", "associative_scan", "wrap_with_set_grad_enabled",
    "wrap_with_autocast", "auto_functionalized", "auto_functionalized_v2", "run_const_graph",
    "invoke_subgraph", "hints_wrapper",
})


@typing.no_type_check
def _sym_op_names() -> frozenset[str]:
    from torch._export.serde.serialize import _SYM_OPS

    return frozenset(f"{op.__module__}.{op.__name__}" for op in _SYM_OPS)


_SYM_OP_NAMES: frozenset[str] | None = None


def check_operator(text: Any) -> None:
    """Raise ``_ExprError`` unless ``text`` names an ATen-style op overload, an allowed
    higher-order op, or one of the symbolic-size operators torch serializes by name.

    torch resolves a target by getattr from the ``torch`` module, so an unchecked target could
    name any function reachable from it."""
    global _SYM_OP_NAMES
    if _SYM_OP_NAMES is None:
        _SYM_OP_NAMES = _sym_op_names()
    if not isinstance(text, str) or len(text) > MAX_NAME_CHARS:
        raise _ExprError("not a string")
    if text in _SYM_OP_NAMES:
        return
    parts = text.split(".")
    if len(parts) < 4 or parts[:2] != ["torch", "ops"] or not all(p.isidentifier() and not p.startswith("__") for p in parts):
        raise _ExprError("not an operator torch.export writes")
    ops = torch.ops
    if parts[2] == "higher_order":
        if len(parts) != 4 or parts[3] not in _HOP_ALLOWED:
            raise _ExprError("not an allowed higher-order operator")
        if not isinstance(getattr(ops.higher_order, parts[3], None), torch._ops.HigherOrderOperator):
            raise _ExprError("not a higher-order operator")
        return
    if len(parts) != 5:
        raise _ExprError("not an operator overload (torch.ops.NAMESPACE.OP.OVERLOAD)")
    ns_name, op_name, overload = parts[2:]
    if hasattr(type(ops), ns_name) or (ns_name in vars(ops) and not isinstance(vars(ops)[ns_name], torch._ops._OpNamespace)):
        raise _ExprError("not an operator namespace")
    namespace = getattr(ops, ns_name)
    if not isinstance(namespace, torch._ops._OpNamespace) or hasattr(type(namespace), op_name):
        raise _ExprError("not an operator namespace")
    try:
        packet = getattr(namespace, op_name)
    except AttributeError:
        return  # not registered here: torch refuses it without calling anything
    except Exception:  # noqa: BLE001
        raise _ExprError("not an operator") from None
    if not isinstance(packet, torch._ops.OpOverloadPacket) or hasattr(type(packet), overload):
        raise _ExprError("not an operator")
    try:
        target = getattr(packet, overload)
    except AttributeError:
        return
    except Exception:  # noqa: BLE001
        raise _ExprError("not an operator overload") from None
    if not isinstance(target, torch._ops.OpOverload):
        raise _ExprError("not an operator overload")


# ----------------------------------------------------------------------------- pytree specs

_TREE_TYPES = frozenset({
    "builtins.tuple", "builtins.list", "builtins.dict", "collections.OrderedDict", "collections.deque",
    "collections.namedtuple", "collections.defaultdict", "torch.fx.immutable_collections.immutable_list",
    "torch.fx.immutable_collections.immutable_dict", "torch.Size",
})
_DICT_TYPES = frozenset({"builtins.dict", "collections.OrderedDict", "torch.fx.immutable_collections.immutable_dict"})
_DEFAULT_FACTORIES = frozenset({"list", "dict", "set", "int", "float", "str", "tuple", "bool"})


def check_treespec(text: Any, rel: str, *, kwargs_are_names: bool) -> None:
    """Raise ``_Refusal`` unless ``text`` is a pytree spec of builtin and torch containers whose
    contexts are plain keys (no enum or factory that torch would import by module name)."""
    if not isinstance(text, str) or len(text) > MAX_JSON_BYTES:
        raise _Refusal("a pytree spec that is not a string", rel)
    spec = _json_text(text, "pytree spec", rel)
    if not (isinstance(spec, list) and len(spec) == 2 and spec[0] == 1):
        raise _Refusal(f"pytree spec {_q(text)} is not protocol 1", rel)
    top = spec[1]
    _check_tree_node(top, rel)
    if kwargs_are_names and isinstance(top, dict) and top.get("type") == "builtins.tuple":
        children = top.get("children_spec") or []
        if len(children) == 2 and children[1].get("type") == "builtins.dict":
            for key in json.loads(children[1]["context"]):
                if not is_name(key):
                    raise _Refusal(f"keyword argument name {_q(key)} is not a Python identifier (it reaches generated code)", rel)


def _check_tree_node(node: Any, rel: str) -> None:
    stack = [node]
    while stack:
        node = stack.pop()
        if not (isinstance(node, dict) and set(node) == {"type", "context", "children_spec"}
                and isinstance(node["children_spec"], list)):
            raise _Refusal(f"malformed pytree spec node {_q(json.dumps(node))}", rel)
        typ, context = node["type"], node["context"]
        if typ is None:
            if context is not None or node["children_spec"]:
                raise _Refusal("malformed pytree leaf", rel)
            continue
        if typ not in _TREE_TYPES:
            raise _Refusal(f"pytree type {_q(typ)} is not a builtin or torch container (torch would look it up or import it)", rel)
        if typ == "collections.namedtuple":
            if not (isinstance(context, str) and _DOTTED_RE.fullmatch(context)):
                raise _Refusal(f"namedtuple type name {_q(context)} is not a dotted name", rel)
        elif typ == "collections.defaultdict":
            ok = (isinstance(context, dict) and set(context) == {"default_factory_module", "default_factory_name", "dict_context"}
                  and context["default_factory_module"] == "builtins"
                  and context["default_factory_name"] in _DEFAULT_FACTORIES
                  and isinstance(context["dict_context"], list) and all(map(_key_ok, context["dict_context"])))
            if not ok:
                raise _Refusal(f"defaultdict factory {_q(json.dumps(context))} is not a builtin (torch would import its module)", rel)
        else:
            if not isinstance(context, str):
                raise _Refusal(f"pytree context {_q(context)} is not a JSON string", rel)
            value = _json_text(context, "pytree context", rel, limit=3)
            if typ in _DICT_TYPES:
                if not (isinstance(value, list) and all(map(_key_ok, value))):
                    raise _Refusal(f"dict keys {_q(context)} are not plain names or integers (an enum key makes torch import a module)", rel)
            elif not (value is None or (isinstance(value, int) and not isinstance(value, bool))):
                raise _Refusal(f"pytree context {_q(context)} is not plain (only keys, lengths or null are written)", rel)
        stack.extend(node["children_spec"])


# ----------------------------------------------------------------------------- the schema walk


def _unwrap_optional(tp: Any) -> tuple[Any, bool]:
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        if len(args) == 1:
            return args[0], True
    return tp, False


class _Walker:
    """Walks a parsed JSON document against torch's schema dataclasses (torch._export.serde.schema),
    refusing unknown fields and applying a rule to every string that torch could eval, import,
    resolve or paste into generated code."""

    _hints_cache: dict[type, dict[str, Any]] = {}

    def __init__(self, rel: str) -> None:
        from torch._export.serde import schema

        self.schema = schema
        self.rel = rel
        self.graph_depth = 0

    # -- entry points

    def check_program(self, doc: Any) -> None:
        self.walk(doc, self.schema.ExportedProgram, "program")

    def check_payload_config(self, doc: Any, folder: str, tensor_sizes: dict[str, int]) -> None:
        from torch._export.serde.serialize import _SERIALIZE_TO_TORCH_DTYPE

        self.walk(doc, self.schema.PayloadConfig, "config")
        prefix = "weight_" if folder == "data/weights/" else "tensor_"
        for fqn, meta in doc.get("config", {}).items():
            if meta.get("use_pickle"):
                self.refuse(f"{_q(fqn)} is stored as a pickle, which could run code")
            path_name = meta.get("path_name")
            rel = folder + str(path_name)
            if not (isinstance(path_name, str) and path_name.startswith(prefix) and rel in tensor_sizes):
                self.refuse(f"{_q(fqn)} points at {_q(path_name)}, which is not a tensor member of the archive")
            tm = meta.get("tensor_meta")
            if not isinstance(tm, dict):
                self.refuse(f"{_q(fqn)} has no tensor metadata")
            dtype = _SERIALIZE_TO_TORCH_DTYPE.get(tm.get("dtype"))
            if dtype is None:
                self.refuse(f"{_q(fqn)} has an unknown dtype")
            sizes = [s.get("as_int") for s in tm.get("sizes", [])]
            strides = [s.get("as_int") for s in tm.get("strides", [])]
            offset = (tm.get("storage_offset") or {}).get("as_int", 0)
            ints = [*sizes, *strides, offset]
            if not all(isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in ints) or len(sizes) != len(strides):
                self.refuse(f"{_q(fqn)} has sizes, strides or offset that are not plain non-negative integers")
            element = dtype.itemsize
            numel = math.prod(sizes)
            extent = 0 if numel == 0 else (offset + sum((n - 1) * s for n, s in zip(sizes, strides)) + 1) * element
            available = tensor_sizes[rel]
            if extent > available or (available == 0 and numel != 0):
                self.refuse(f"{_q(fqn)} claims {extent} bytes but its member holds {available} (torch would allocate what the JSON claims)")

    # -- helpers

    def refuse(self, reason: str) -> typing.NoReturn:
        raise _Refusal(reason, self.rel)

    def hints(self, cls: type) -> dict[str, Any]:
        hints = self._hints_cache.get(cls)
        if hints is None:
            hints = typing.get_type_hints(cls)
            self._hints_cache[cls] = hints
        return hints

    def walk(self, value: Any, tp: Any, where: str) -> None:
        tp, optional = _unwrap_optional(tp)
        if value is None:
            if optional:
                return
            self.refuse(f"{where} is null")
        origin = typing.get_origin(tp)
        if tp is str:
            if not isinstance(value, str):
                self.refuse(f"{where} is not a string")
        elif tp is bool:
            if not isinstance(value, bool):
                self.refuse(f"{where} is not a boolean")
        elif tp is int:
            if not isinstance(value, int) or isinstance(value, bool):
                self.refuse(f"{where} is not an integer")
        elif tp is float:
            if not (isinstance(value, (int, float)) and not isinstance(value, bool)) and value not in ("Infinity", "-Infinity", "NaN"):
                self.refuse(f"{where} is not a number")
        elif isinstance(tp, type) and issubclass(tp, enum.Enum):
            if not isinstance(value, int) or isinstance(value, bool) or value not in {e.value for e in tp}:
                self.refuse(f"{where} is not a valid {tp.__name__}")
        elif origin is list:
            if not isinstance(value, list):
                self.refuse(f"{where} is not a list")
            (item,) = typing.get_args(tp)
            for i, v in enumerate(value):
                self.walk(v, item, f"{where}[{i}]")
        elif origin is dict:
            if not isinstance(value, dict):
                self.refuse(f"{where} is not an object")
            _key_tp, item = typing.get_args(tp)
            for k, v in value.items():
                self.walk(v, item, f"{where}.{k}")
        elif dataclasses.is_dataclass(tp):
            self.walk_dataclass(value, tp, where)
        else:  # pragma: no cover - a schema type this walker does not know
            self.refuse(f"{where} has a type this loader does not know ({tp!r})")

    def walk_dataclass(self, value: Any, cls: type, where: str) -> None:
        if not isinstance(value, dict):
            self.refuse(f"{where} is not an object")
        name = cls.__name__
        hints = self.hints(cls)
        unknown = [k for k in value if k not in hints]
        if unknown:
            self.refuse(f"{where} has unknown field {_q(unknown[0])}")
        if issubclass(cls, self.schema._Union) and len(value) != 1:
            self.refuse(f"{where} must set exactly one of its fields")
        if name in ("CustomObjArgument", "InputToCustomObjSpec"):
            self.refuse("custom (TorchScript) objects are pickles that could run code")
        if name == "Graph":
            self.graph_depth += 1
            if self.graph_depth > 8:
                self.refuse("graphs nested more than 8 levels deep")
        for field, field_tp in hints.items():
            if field in value:
                self.walk(value[field], field_tp, f"{where}.{field}")
        if name == "Graph":
            self.graph_depth -= 1
        rule = getattr(self, f"rule_{name}", None)
        if rule is not None:  # after the fields, so every field already has its schema type
            rule(value, where)

    def name(self, value: Any, what: str) -> None:
        if not is_name(value):
            self.refuse(f"{what} {_q(value)} is not a Python identifier (it reaches generated code)")

    def path(self, value: Any, what: str) -> None:
        if not is_path(value):
            self.refuse(f"{what} {_q(value)} is not a dotted path of Python identifiers (it reaches generated code)")

    def safe_text(self, value: Any, what: str) -> None:
        if not (isinstance(value, str) and _SAFE_TEXT_RE.fullmatch(value)):
            self.refuse(f"{what} {_q(value)} holds quotes, backslashes or control characters (it reaches generated code)")

    # -- rules per schema class (rule_<ClassName>(value, where))

    def rule_SymExpr(self, v: dict, where: str) -> None:
        text = v.get("expr_str")
        try:
            check_expression(text)
        except _ExprError:
            self.refuse(f"size expression {_q(text)} is not a plain size expression (could run code)")

    def rule_SymIntArgument(self, v: dict, where: str) -> None:
        if "as_name" in v:
            self.name(v["as_name"], "symbol value name")

    rule_SymFloatArgument = rule_SymIntArgument
    rule_SymBoolArgument = rule_SymIntArgument

    def rule_TensorArgument(self, v: dict, where: str) -> None:
        self.name(v.get("name"), "tensor name")

    def rule_TokenArgument(self, v: dict, where: str) -> None:
        self.name(v.get("name"), "token name")

    def rule_GraphArgument(self, v: dict, where: str) -> None:
        self.name(v.get("name"), "subgraph name")

    def rule_Argument(self, v: dict, where: str) -> None:
        if "as_operator" in v:
            self.operator(v["as_operator"])
        if "as_string_to_argument" in v and isinstance(v["as_string_to_argument"], dict):
            for key in v["as_string_to_argument"]:
                if not _key_ok(key):
                    self.refuse(f"argument key {_q(key)} is not a plain name")

    def rule_NamedArgument(self, v: dict, where: str) -> None:
        name = v.get("name")
        if not (name == "" or (isinstance(name, str) and name.isidentifier() and len(name) <= MAX_NAME_CHARS)):
            self.refuse(f"argument name {_q(name)} is not a Python identifier (it reaches generated code)")

    def operator(self, text: Any) -> None:
        try:
            check_operator(text)
        except _ExprError as exc:
            self.refuse(f"operator {_q(text)} is {exc} (torch would resolve it by name)")

    def rule_Node(self, v: dict, where: str) -> None:
        self.operator(v.get("target"))
        if v.get("name") not in (None, ""):
            self.name(v["name"], "node name")
        if v.get("target", "").startswith("torch.ops.higher_order."):
            for arg in v.get("inputs") or []:
                if isinstance(arg, dict) and keyword.iskeyword(arg.get("name", "")):
                    self.refuse(f"keyword argument {_q(arg.get('name'))} of a higher-order operator is a Python keyword")
        metadata = v.get("metadata")
        if isinstance(metadata, dict):
            self.node_metadata(metadata)

    def node_metadata(self, meta: dict) -> None:
        for key, text in meta.items():
            if not isinstance(text, str):
                self.refuse(f"node metadata {_q(key)} is not a string")
            if key in ("custom", "from_node"):
                _json_text(text, f"node metadata {key!r}", self.rel)
            elif key == "nn_module_stack":
                for item in text.split(";"):
                    parts = _metadata_split(item)
                    if parts is None or not (parts[1] == "" or is_path(parts[1])):
                        self.refuse(f"module path in nn_module_stack {_q(item)} is not a dotted path of identifiers")
            elif key == "source_fn_stack":
                for item in text.split(";"):
                    parts = item.split(",")
                    if len(parts) != 2 or not _DOTTED_RE.fullmatch(parts[1]):
                        self.refuse(f"source_fn_stack entry {_q(item)} is not 'name,dotted.path' (torch resolves it by name)")

    def rule_Graph(self, v: dict, where: str) -> None:
        for field in ("tensor_values", "sym_int_values", "sym_bool_values", "sym_float_values"):
            for key in (v.get(field) or {}):
                self.name(key, "value name")
        if v.get("custom_obj_values"):
            self.refuse("custom (TorchScript) objects are pickles that could run code")
        for arg in v.get("inputs") or []:
            if isinstance(arg, dict) and "as_string" in arg:
                self.safe_text(arg["as_string"], "constant string input")

    def rule_InputToConstantInputSpec(self, v: dict, where: str) -> None:
        self.name(v.get("name"), "constant input name")
        value = v.get("value")
        if isinstance(value, dict) and "as_string" in value:
            self.safe_text(value["as_string"], "constant string input")

    def rule_InputToParameterSpec(self, v: dict, where: str) -> None:
        self.path(v.get("parameter_name"), "parameter name")

    def rule_InputToBufferSpec(self, v: dict, where: str) -> None:
        self.path(v.get("buffer_name"), "buffer name")

    def rule_InputToTensorConstantSpec(self, v: dict, where: str) -> None:
        self.path(v.get("tensor_constant_name"), "constant name")

    rule_BufferMutationSpec = rule_InputToBufferSpec
    rule_ParameterMutationSpec = rule_InputToParameterSpec
    rule_GradientToParameterSpec = rule_InputToParameterSpec

    def rule_GradientToUserInputSpec(self, v: dict, where: str) -> None:
        self.name(v.get("user_input_name"), "user input name")

    rule_UserInputMutationSpec = rule_GradientToUserInputSpec

    def rule_ModuleCallSignature(self, v: dict, where: str) -> None:
        check_treespec(v.get("in_spec"), self.rel, kwargs_are_names=True)
        check_treespec(v.get("out_spec"), self.rel, kwargs_are_names=False)
        for arg_name in v.get("forward_arg_names") or []:
            self.name(arg_name, "forward argument name")

    def rule_ModuleCallEntry(self, v: dict, where: str) -> None:
        fqn = v.get("fqn")
        if fqn != "":
            self.path(fqn, "module path")

    def rule_NamedTupleDef(self, v: dict, where: str) -> None:
        for field_name in v.get("field_names") or []:
            self.name(field_name, "namedtuple field name")

    def rule_GraphModule(self, v: dict, where: str) -> None:
        meta = v.get("metadata") or {}
        if isinstance(meta, dict) and isinstance(meta.get("custom"), str):
            _json_text(meta["custom"], "program metadata 'custom'", self.rel)
        for type_name in (v.get("treespec_namedtuple_fields") or {}):
            if not _DOTTED_RE.fullmatch(type_name):
                self.refuse(f"namedtuple type name {_q(type_name)} is not a dotted name")

    def rule_Device(self, v: dict, where: str) -> None:
        if not (isinstance(v.get("type"), str) and re.fullmatch(r"[a-z_]{1,32}", v["type"])):
            self.refuse(f"device type {_q(v.get('type'))} is not a device name")

    def rule_PayloadConfig(self, v: dict, where: str) -> None:
        for fqn in (v.get("config") or {}):
            self.path(fqn, "state dict name")

    def rule_ExportedProgram(self, v: dict, where: str) -> None:
        for key in (v.get("opset_version") or {}):
            self.name(key, "opset name")
        for key, rng in (v.get("range_constraints") or {}).items():
            try:
                check_expression(key)
            except _ExprError:
                self.refuse(f"range constraint {_q(key)} is not a plain size expression")
            if isinstance(rng, dict):
                for bound in ("min_val", "max_val"):
                    b = rng.get(bound)
                    if b is not None and (not isinstance(b, int) or isinstance(b, bool)):
                        self.refuse(f"range constraint bound {_q(b)} is not an integer (it reaches generated code)")
        for verifier in v.get("verifiers") or []:
            if not (isinstance(verifier, str) and re.fullmatch(r"[A-Z_]{0,32}", verifier)):
                self.refuse(f"verifier {_q(verifier)} is not a dialect name")
        version = v.get("torch_version")
        if version is not None and not (isinstance(version, str) and _SAFE_TEXT_RE.fullmatch(version) and len(version) < 100):
            self.refuse(f"torch_version {_q(version)} is not a version string")
        for guard in v.get("guards_code") or []:
            try:
                check_guard(guard)
            except _ExprError:
                self.refuse(f"guard {_q(guard)} is not a plain shape guard (torch compiles it into code)")


def _metadata_split(item: str) -> list[str] | None:
    """torch's split of one nn_module_stack entry "key,path,type" (commas inside brackets kept)."""
    out, start, depth = [], 0, 0
    for end, c in enumerate(item):
        if c in "[(":
            depth += 1
        elif c in ")]":
            depth -= 1
        elif c == "," and depth == 0:
            out.append(item[start:end])
            start = end + 1
    out.append(item[start:])
    return out if len(out) == 3 else None


# ----------------------------------------------------------------------------- after torch's load


def _check_loaded(program: torch.export.ExportedProgram) -> None:
    """Defence in depth over what torch built, before anyone calls ``.module()`` on it: the
    example inputs (their dict keys reach the generated guard code) and every name in the graphs."""
    inputs = program.example_inputs
    if inputs is not None:
        stack = [(inputs, 0)]
        while stack:
            value, depth = stack.pop()
            if depth > 32:
                raise _Refusal("example inputs nest deeper than 32 levels", _SAMPLE_INPUTS)
            if isinstance(value, torch.Tensor):
                if type(value) is not torch.Tensor and not isinstance(value, torch.nn.Parameter):
                    raise _Refusal(f"example input of type {type(value).__name__} is not a plain tensor", _SAMPLE_INPUTS)
            elif isinstance(value, (tuple, list)):
                stack.extend((v, depth + 1) for v in value)
            elif isinstance(value, dict):
                for k, v in value.items():
                    if not _key_ok(k):
                        raise _Refusal(f"example input key {_q(k)} is not a plain name (it reaches generated guard code)", _SAMPLE_INPUTS)
                    stack.append((v, depth + 1))
            elif value is None or isinstance(value, (bool, int, float)):
                pass
            elif isinstance(value, str):
                if not _SAFE_TEXT_RE.fullmatch(value):
                    raise _Refusal(f"example input string {_q(value)} holds quotes or control characters", _SAMPLE_INPUTS)
            else:
                raise _Refusal(f"example input of type {type(value).__name__} is not a tensor, number or container", _SAMPLE_INPUTS)
    for module in program.graph_module.modules():
        if not isinstance(module, torch.fx.GraphModule):
            continue
        for node in module.graph.nodes:
            if not is_name(node.name):
                raise _Refusal(f"node name {_q(node.name)} is not a Python identifier")
            if node.op == "placeholder" and not is_name(node.target):
                raise _Refusal(f"input name {_q(node.target)} is not a Python identifier")
            if node.op in ("get_attr", "call_module") and not is_path(node.target):
                raise _Refusal(f"attribute {_q(node.target)} is not a dotted path of identifiers")
    for spec in program.graph_signature.input_specs:
        if spec.target is not None and not is_path(spec.target):
            raise _Refusal(f"state name {_q(spec.target)} is not a dotted path of identifiers")
