"""The zip allowlist: which members a ``.pt2`` may hold, how big they may be, and reading them.

torch.export.save of a CPU program writes a small, fixed set of members; anything else (the
AOTInductor folder, pickled objects, a second program) is a way to run code, so it is refused
by name before any bytes are read. Sizes are checked from the zip headers and again while
decompressing, because headers can lie. The example inputs are a zip inside the zip and get
the same treatment.
"""

from __future__ import annotations

import dataclasses
import io
import re
import zipfile
import zlib
from pathlib import Path

from ..._base.errors import first_line
from ._common import (_CHUNK, MAX_CONFIG_BYTES, MAX_DIRECTORY_BYTES, MAX_EXTRA_BYTES, MAX_JSON_BYTES, MAX_MEMBERS,
                      MAX_RATIO, MAX_SAMPLE_INPUTS_BYTES, MAX_TENSOR_MEMBER_BYTES, MAX_TINY_BYTES, MAX_TOTAL_BYTES,
                      RATIO_FLOOR, _q, _Refusal)

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


@dataclasses.dataclass(kw_only=True)
class _Member:
    info: zipfile.ZipInfo
    rel: str  # path inside the root folder
    kind: str
    cap: int


@dataclasses.dataclass(kw_only=True)
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
        members.append(_Member(info=info, rel=rel, kind=kind, cap=cap))
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
            raise _Refusal(f"compression ratio {size // max(packed, 1)}:1 is over the cap of {MAX_RATIO}:1 "
                           "(a decompression bomb?)", m.rel)
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
        raise _Refusal(f"cannot be read: {_q(first_line(exc))}", m.rel) from exc
    if got != m.info.file_size:
        raise _Refusal("is shorter than its headers say", m.rel)


def _read(zf: zipfile.ZipFile, m: _Member) -> bytes:
    return b"".join(_read_chunks(zf, m))


def _check_directory(source: Path | bytes, rel: str | None = None) -> None:
    """Bound the central directory from the end record before zipfile parses all of it."""
    try:
        with (open(source, "rb") if isinstance(source, Path) else io.BytesIO(source)) as fp:
            end = zipfile._EndRecData(fp)  # the same reader zipfile uses; reads the file's tail only
    except Exception as exc:
        raise _Refusal(f"it is not a zip archive ({_q(first_line(exc))})", rel, invalid=rel is None) from exc
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
    except Exception as exc:  # whatever zipfile makes of crafted bytes
        raise _Refusal(f"example inputs are not a torch.save zip: {_q(first_line(exc))}", rel) from exc
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
                raise _Refusal(f"example inputs hold a compressed or encrypted member {_q(name)} "
                               "(torch.save never compresses)", rel)
            if info.file_size != info.compress_size or info.file_size > len(data):
                raise _Refusal(f"example inputs member {_q(name)} claims a size its bytes do not have", rel)
