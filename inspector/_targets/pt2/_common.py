"""What every part of the ``.pt2`` checks shares: the size caps, the refusal and its message.

A refusal has to read the same whichever check raised it (one line, attacker strings cut short
and quoted), and the caps are easier to judge side by side than spread over the modules that
apply them. The name rules (what may be pasted into generated Python) are here too, because
the grammars, the schema walk and the check after torch's load all use them.
"""

from __future__ import annotations

import keyword
import re
from pathlib import Path
from typing import Any

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


# ----------------------------------------------------------------------------- string rules

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


# ----------------------------------------------------------------------------- grammar errors


class _ExprError(Exception):
    """A string is outside its grammar (size expressions, guards, operator names)."""
