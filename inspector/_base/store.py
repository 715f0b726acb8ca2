"""The result store: answers kept on disk, so that a new kernel, CLI run or notebook session reads them back.

An entry is data, never code: a JSON document and, optionally, arrays in one ``.npz`` (read with
``allow_pickle=False``). Its file is ``MAGIC``, an HMAC-SHA256 and the payload; the HMAC covers the
entry's name and payload under a per-user secret kept in the store (created ``0600``, checked to
be the user's own and private before use), and is verified before anything else is parsed. So an
entry that is corrupt, truncated, written by another version of the inspector or its stack
(another name: ``environment()`` is part of every name, and the header says it again) or planted
by someone without the secret is ignored, and the caller computes the answer again.

Entries are written whole or not at all (a temporary file renamed into place): two processes
writing the same entry at once leave one of their two equal copies, never a mix. Reading an
entry marks it used (its modification time); past the size bound the least recently used go first.

Only what the store itself could have written is read (``read_regular``): a regular file, opened
without following a link and without blocking, of at most ``MAX_ENTRY_BYTES`` (put() writes no
more), in chunks. A link, a FIFO, a device, a folder or a bigger file named like an entry is a
miss in bounded time and memory (a sweep's ``out=`` is shared: its writers are not all the user).

Where: ``FOLD_INSPECTOR_STORE`` names a folder, or ``off`` turns the store off; by default the
platform's cache folder (``platformdirs.user_cache_dir("fold-inspector")``); within ``using(folder)``
that folder (a sweep's ``out=``, and every worker task, which carries its parent's folder). The bound is
``FOLD_INSPECTOR_STORE_MB`` megabytes (default ``DEFAULT_MB``). ``inspector.clear_cache(disk=True)``
empties it (``clear_store``).
"""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version
import contextlib
import contextvars
import hashlib
import hmac
import io
import json
import os
import secrets
import shutil
import stat
import tempfile
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from collections.abc import Iterator, Mapping

import numpy as np

from .cache import BoundedCache, also_clear_disk
import torch
from .version import __version__
import platformdirs
from .hashing import digest

ENV = "FOLD_INSPECTOR_STORE"  # a folder, or "off"
ENV_MB = "FOLD_INSPECTOR_STORE_MB"  # the size bound in megabytes
DEFAULT_MB = 1024
FORMAT = 1  # of the entries: another format is another name, and is refused by the header too
MAGIC = b"FISTORE1"
_MAC_BYTES = 32
_SECRET_BYTES = 32
_SUFFIX = ".entry"
_STALE_TEMP_SECONDS = 3600  # a temporary file this old was left by a process that died mid-write
# The largest entry put() writes, and so the most get() reads: far below the store's bound (a sixteenth
# of the default), far above an answer's usual size (kilobytes to a few megabytes). A bigger answer is
# computed again each time, never kept.
MAX_ENTRY_BYTES = 64 << 20
_CHUNK = 1 << 20  # read in pieces of this size
# Never through a link, never waiting for a FIFO's writer; not inherited by a worker started meanwhile.
_READ = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0)


# This process's environment and its stores (their secrets read once): a few folders at most.
_KEPT = BoundedCache(8, "result stores")


def environment() -> str:
    """What every stored answer also depends on: the stack's versions and the inspector's own source
    (an edited inspector is another environment: its entries are never read by this one)."""
    return _KEPT.get_or_compute("environment", _environment)


def _environment() -> str:
    def installed(name: str) -> str:
        try:
            return version(name)
        except PackageNotFoundError:
            return "absent"

    package = Path(__file__).resolve().parent.parent
    h = hashlib.sha256()
    for path in sorted(package.rglob("*.py")):
        h.update(str(path.relative_to(package)).encode() + b"\0" + path.read_bytes() + b"\0")
    return "|".join((f"format {FORMAT}", f"inspector {__version__} {h.hexdigest()[:20]}", f"torch {torch.__version__}",
                     f"executorch {installed('executorch')}", f"tosa-tools {installed('tosa-tools')}",
                     f"numpy {np.__version__}"))


@dataclass(frozen=True, kw_only=True)
class Entry:
    """One answer read back from the store."""

    data: dict  # the JSON document the writer gave
    arrays: dict = field(default_factory=dict, repr=False)  # name -> numpy array


class Store:
    """Entries on disk under ``root``, at most ``max_bytes`` of them (least recently used go first)."""

    def __init__(self, root: str | os.PathLike, max_bytes: int = DEFAULT_MB << 20) -> None:
        self.root = Path(root)
        self.max_bytes = max_bytes
        self._entries = self.root / "entries"
        self._secret: bytes | None = None
        self._broken: str | None = None  # why this store cannot be used (said once)

    # ------------------------------------------------------------ names and the secret

    @staticmethod
    def name(kind: str, *parts: Any) -> str:
        """The entry name of ``parts`` (strings, numbers, tuples of them) under ``kind``, in this environment."""

        return f"{kind}-{digest(FORMAT, kind, environment(), *parts)}"

    def _key(self) -> bytes | None:
        """The per-user secret that signs entries, created on first use; None if the store is unusable."""
        if self._secret is not None or self._broken is not None:
            return self._secret
        try:
            self.root.mkdir(parents=True, exist_ok=True, mode=0o700)  # the user's own, as the secret is
            self._entries.mkdir(exist_ok=True, mode=0o700)
            if not stat.S_ISDIR(os.lstat(self._entries).st_mode):
                return self._refuse(f"its entries folder {self._entries} is not a folder (a link?)")
            path = self.root / "secret"
            if not _exists(path):
                fd, tmp = tempfile.mkstemp(dir=self.root, prefix=".secret.")  # 0600 from the start
                try:
                    os.write(fd, secrets.token_bytes(_SECRET_BYTES))
                    os.close(fd)
                    os.link(tmp, path)  # atomic, and fails if another process made one first: theirs is kept
                except FileExistsError:
                    pass
                finally:
                    os.unlink(tmp)
            if not stat.S_ISREG(os.lstat(path).st_mode):  # a link, FIFO or device is never opened
                return self._refuse(f"its secret {path} is not a regular file")
            fd = os.open(path, _READ)
            try:
                info = os.fstat(fd)
                if not stat.S_ISREG(info.st_mode):  # swapped since the look
                    return self._refuse(f"its secret {path} is not a regular file")
                secret = os.read(fd, _SECRET_BYTES + 1)
            finally:
                os.close(fd)
            if hasattr(os, "getuid") and info.st_uid != os.getuid():
                return self._refuse(f"its secret {path} belongs to another user")
            if stat.S_IMODE(info.st_mode) & 0o077:
                return self._refuse(f"its secret {path} can be read by others (mode {stat.S_IMODE(info.st_mode):o})")
            if len(secret) != _SECRET_BYTES:
                return self._refuse(f"its secret {path} is not {_SECRET_BYTES} bytes")
        except OSError as exc:
            return self._refuse(exc.strerror or str(exc))
        self._secret = secret
        return secret

    def _refuse(self, why: str) -> None:
        self._broken = why
        warnings.warn(f"the result store {self.root} is not used: {why}; answers are computed, not kept",
                      RuntimeWarning, stacklevel=3)
        return None

    @staticmethod
    def _mac(secret: bytes, name: str, payload) -> bytes:
        mac = hmac.new(secret, MAGIC + name.encode() + b"\0", hashlib.sha256)
        mac.update(payload)  # fed, not concatenated: no copy of the payload
        return mac.digest()

    # ------------------------------------------------------------ reading and writing

    def get(self, name: str) -> Entry | None:
        """The entry ``name``, or None when there is none or it cannot be trusted (then it is computed again)."""
        path = self._entries / (name + _SUFFIX)
        raw = read_regular(path, MAX_ENTRY_BYTES)
        if raw is None:
            return None
        secret = self._key()
        if secret is None:
            return None
        entry = decode(raw, name, secret)
        if entry is not None and os.utime in os.supports_follow_symlinks:
            with _quiet():  # used now: the last to go when the store is trimmed (a link put there since: itself)
                os.utime(path, follow_symlinks=False)
        return entry

    def __contains__(self, name: str) -> bool:
        """A file that could be entry ``name`` is on disk (whether it can be trusted is ``get``'s question)."""
        return _regular(self._entries / (name + _SUFFIX))

    def put(self, name: str, data: Mapping, arrays: Mapping[str, np.ndarray] | None = None) -> bool:
        """Keep ``data`` (JSON-ready) and ``arrays`` as entry ``name``; False if it cannot be kept."""
        secret = self._key()
        if secret is None:
            return False
        try:
            raw = encode(name, data, arrays or {}, secret)
        except (TypeError, ValueError):
            return False  # not data (an object JSON or numpy cannot write without pickles): not kept
        if len(raw) > MAX_ENTRY_BYTES:
            return False  # more than get() reads: computed again each time
        path = self._entries / (name + _SUFFIX)
        try:
            fd, tmp = tempfile.mkstemp(dir=self._entries, prefix=".", suffix=".tmp")
            try:
                with os.fdopen(fd, "wb") as f:
                    f.write(raw)
                try:
                    os.replace(tmp, path)  # over a link or a FIFO: replaces the name, never what it points to
                except IsADirectoryError:
                    _remove(path)  # a folder named like the entry: never an answer
                    os.replace(tmp, path)
            except BaseException:
                with _quiet():
                    os.unlink(tmp)
                raise
        except OSError:
            return False
        self.trim()
        return True

    def _files(self) -> list[tuple[float, int, Path]]:
        """(last use, size, path) of every entry (a regular file put() could have written); removed
        on the way, never followed: a temporary file left by a dead writer, a link, a FIFO, a device
        or a file too big named like an entry (a folder so named is put()'s and clear()'s to remove)."""
        out = []
        now = time.time()
        try:
            scan = list(os.scandir(self._entries))
        except OSError:
            return out
        for item in scan:
            try:
                info = item.stat(follow_symlinks=False)
            except OSError:
                continue
            if stat.S_ISDIR(info.st_mode):
                continue
            if item.name.endswith(_SUFFIX):
                if stat.S_ISREG(info.st_mode) and info.st_size <= MAX_ENTRY_BYTES:
                    out.append((info.st_mtime, info.st_size, Path(item.path)))
                    continue
                with _quiet():
                    os.unlink(item.path)  # the name itself, whatever it points to
            elif item.name.endswith(".tmp") and now - info.st_mtime > _STALE_TEMP_SECONDS:
                with _quiet():
                    os.unlink(item.path)
        return out

    def size(self) -> int:
        """Bytes the entries take."""
        return sum(size for _, size, _ in self._files())

    def __len__(self) -> int:
        return len(self._files())

    def trim(self) -> int:
        """Remove the least recently used entries until the store is within its bound; how many went."""
        files = self._files()
        total = sum(size for _, size, _ in files)
        removed = 0
        for _, size, path in sorted(files):
            if total <= self.max_bytes:
                break
            with _quiet():
                path.unlink()
            total -= size
            removed += 1
        return removed

    def clear(self) -> None:
        """Remove every entry and whatever else is named like one, a folder too, never following a link
        (the secret stays: it is the user's, not an answer)."""
        self._files()  # the links, FIFOs and files too big
        try:
            scan = list(os.scandir(self._entries))
        except OSError:
            return
        for item in scan:
            if item.name.endswith(_SUFFIX):
                with _quiet():
                    _remove(Path(item.path))

    def __repr__(self) -> str:
        return f"<Store {self.root}: {len(self)} entries, bound {self.max_bytes >> 20} MB>"


def encode(name: str, data: Mapping, arrays: Mapping[str, np.ndarray], secret: bytes) -> bytes:
    """The bytes of entry ``name``: MAGIC, HMAC, header length, JSON header, npz."""
    header = json.dumps({"format": FORMAT, "name": name, "environment": environment(), "data": dict(data),
                         "arrays": sorted(arrays)}, allow_nan=False, sort_keys=True).encode()
    buffer = io.BytesIO()
    if arrays:
        for a in arrays.values():
            if not isinstance(a, np.ndarray) or a.dtype.hasobject:
                raise TypeError("only plain numeric arrays are kept")
        np.savez(buffer, **arrays)
    payload = len(header).to_bytes(8, "big") + header + buffer.getvalue()
    return MAGIC + Store._mac(secret, name, payload) + payload


def decode(raw, name: str, secret: bytes) -> Entry | None:
    """The entry in ``raw`` (bytes-like) if it is entry ``name``, signed with ``secret``, of this environment; else None."""
    raw = memoryview(raw)  # slices are views: the payload is not copied to be checked
    start = len(MAGIC) + _MAC_BYTES
    if len(raw) < start + 8 or raw[:len(MAGIC)] != MAGIC:
        return None
    payload = raw[start:]
    if not hmac.compare_digest(bytes(raw[len(MAGIC):start]), Store._mac(secret, name, payload)):
        return None  # nothing unsigned is parsed
    try:
        size = int.from_bytes(payload[:8], "big")
        header = json.loads(bytes(payload[8:8 + size]).decode())
        if not isinstance(header, dict) or header.get("format") != FORMAT or header.get("name") != name \
                or header.get("environment") != environment() or not isinstance(header.get("data"), dict):
            return None
        arrays = {}
        if header.get("arrays"):
            with np.load(io.BytesIO(payload[8 + size:]), allow_pickle=False) as npz:
                arrays = {k: npz[k] for k in npz.files}
            if sorted(arrays) != header["arrays"]:
                return None
        return Entry(data=header["data"], arrays=arrays)
    except Exception:  # noqa: BLE001 - a signed entry we cannot read is still only a miss
        return None


def read_regular(path: str | os.PathLike, limit: int) -> bytearray | None:
    """The bytes of ``path`` if it is a regular file of at most ``limit`` bytes; None if it is not there,
    is a link, a FIFO, a device or a folder, is bigger, or changed while read. Never blocks; reads in
    chunks, never past the size it had when opened."""
    try:
        seen = os.lstat(path)
        if not stat.S_ISREG(seen.st_mode) or seen.st_size > limit:
            return None  # not opened at all: opening a FIFO or a device can wait, or do something
        fd = os.open(path, _READ)
    except (OSError, ValueError):  # ValueError: a name with a NUL
        return None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode) or (info.st_dev, info.st_ino) != (seen.st_dev, seen.st_ino) \
                or info.st_size > limit:
            return None  # another file since the look
        data = bytearray(info.st_size)
        view = memoryview(data)
        with io.FileIO(fd, closefd=False) as f:
            done = 0
            while done < len(data):
                n = f.readinto(view[done:done + _CHUNK])
                if not n:
                    return None  # shorter than it was: changed while read
                done += n
            if f.read(1):
                return None  # longer than it was: changed while read
        view.release()
        return data
    except OSError:
        return None
    finally:
        os.close(fd)


def _regular(path: Path) -> bool:
    """A regular file (not followed) of at most ``MAX_ENTRY_BYTES`` is at ``path``."""
    try:
        info = os.lstat(path)
    except OSError:
        return False
    return stat.S_ISREG(info.st_mode) and info.st_size <= MAX_ENTRY_BYTES


def _exists(path: Path) -> bool:
    """Something is at ``path``, a link that leads nowhere too."""
    try:
        os.lstat(path)
    except FileNotFoundError:
        return False
    return True


def _remove(path: Path) -> None:
    """Remove ``path`` without following a link: a file, a link or a FIFO itself; a folder with all it holds."""
    if not stat.S_ISDIR(os.lstat(path).st_mode):
        os.unlink(path)
    elif shutil.rmtree.avoids_symlink_attacks:  # rmtree checks every folder is the one it looked at
        shutil.rmtree(path)
    else:  # where rmtree could be led out of the folder by a link swapped in: left, the entry stays a miss
        raise IsADirectoryError(f"{path} is a folder")


class _quiet:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return exc[0] is not None and issubclass(exc[0], OSError)


# ------------------------------------------------------------ the store of this process

# The folder a caller named for what runs inside it (``using``): a sweep's ``out=``, a worker's task.
# ``_ENVIRONMENT``: none named, ``FOLD_INSPECTOR_STORE`` or the platform's folder decides; None: off.
_ENVIRONMENT = "environment"
_CHOSEN: contextvars.ContextVar[Path | None | str] = contextvars.ContextVar("inspector_store", default=_ENVIRONMENT)


@contextlib.contextmanager
def using(root: str | os.PathLike | None) -> Iterator[None]:
    """Keep and read answers in the store at ``root`` (None: in no store) while inside: a sweep's
    ``out=`` folder, or the folder a worker's task names (its parent's, whatever the worker's environment)."""
    token = _CHOSEN.set(None if root is None else Path(root).expanduser())
    try:
        yield
    finally:
        _CHOSEN.reset(token)


def where() -> str | None:
    """The folder of the store in use now, as a task carries it to a worker (``using``); None: off."""
    root = location()
    return None if root is None else str(root)


def location() -> Path | None:
    """Where answers are kept now: the folder named by ``using``, else ``FOLD_INSPECTOR_STORE`` (a folder;
    ``off``: nowhere), else the platform's cache folder. Read at every use, so a test or a notebook can move it."""
    chosen = _CHOSEN.get()
    if chosen is not _ENVIRONMENT:
        return chosen
    chosen = os.environ.get(ENV, "").strip()
    if chosen.lower() == "off":
        return None
    if chosen:
        return Path(chosen).expanduser()

    return Path(platformdirs.user_cache_dir("fold-inspector"))


def _bound() -> int:
    try:
        return max(1, int(float(os.environ.get(ENV_MB, DEFAULT_MB)) * (1 << 20)))
    except ValueError:
        return DEFAULT_MB << 20


def store() -> Store | None:
    """The store answers are kept in now, or None when it is off."""
    root = location()
    if root is None:
        return None
    bound = _bound()
    return _KEPT.get_or_compute(("store", str(root), bound), lambda: Store(root, bound))


def clear_store() -> None:
    """Remove every entry of the store in use now (``inspector.clear_cache(disk=True)``)."""
    found = store()
    if found is not None:
        found.clear()


also_clear_disk(clear_store)  # inspector.clear_cache(disk=True)
