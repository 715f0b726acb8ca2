"""Writing the user's output files: checked first, written whole or not at all, one-line errors."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from .errors import InspectorError


def check_writable(path: str | os.PathLike) -> Path:
    """``path`` as a Path if a file can be written there, else an InspectorError saying why."""
    path = Path(path)
    if str(path) in ("", "."):
        raise InspectorError("no output file given")
    if path.is_dir():
        raise InspectorError(f"cannot write {path}: it is a directory; give a file name")
    parent = path.parent
    if not parent.is_dir():
        raise InspectorError(f"cannot write {path}: directory {parent} does not exist")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise InspectorError(f"cannot write {path}: directory {parent} is not writable")
    if path.exists() and not os.access(path, os.W_OK):
        raise InspectorError(f"cannot write {path}: the file is read-only")
    return path


def write_bytes(path: str | os.PathLike, data: bytes) -> Path:
    """Write ``data`` to ``path`` atomically (a temporary file renamed into place)."""
    path = check_writable(path)
    try:
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(data)
            # mkstemp makes the file private (0600); give it the mode a plain open() would have
            os.chmod(tmp, path.stat().st_mode & 0o7777 if path.exists() else 0o666 & ~_umask())
            os.replace(tmp, path)
        except BaseException:
            with _suppress():
                os.unlink(tmp)
            raise
    except OSError as exc:
        raise InspectorError(f"cannot write {path}: {exc.strerror or exc}") from None
    return path


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def write_text(path: str | os.PathLike, text: str) -> Path:
    return write_bytes(path, text.encode("utf-8"))


class _suppress:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return exc[0] is not None and issubclass(exc[0], OSError)
