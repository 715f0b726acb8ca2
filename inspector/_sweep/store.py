"""The results folder ``out/``: every result written as it finishes, read back by the next sweep."""

from __future__ import annotations

import json
import os
from pathlib import Path

from .._base.hashing import digest
from .._rules.rules import get_rule
from .._numbers.quantization import quantizations
from .._numbers.results import Variant
from .._present.formats import jsonable
from ..errors import InspectorError

FORMAT_VERSION = 1  # of the files in out/


class Store:
    """Results as files under ``out/``, written as they finish (atomically: a temporary file renamed)."""

    def __init__(self, out: str | os.PathLike | None) -> None:
        self.root = Path(out) if out is not None else None
        if self.root is not None:
            try:
                self.root.mkdir(parents=True, exist_ok=True)
            except OSError as exc:
                raise InspectorError(f"cannot create the results folder {out}: {exc.strerror or exc}") from None

    def _path(self, *parts: str) -> Path:
        return self.root.joinpath(*parts)

    def read(self, *parts: str) -> dict | None:
        if self.root is None:
            return None
        path = self._path(*parts)
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            return None
        except (OSError, ValueError):
            return None  # a damaged file is computed again
        return data if isinstance(data, dict) and data.get("format") == FORMAT_VERSION else None

    def write(self, data: dict, *parts: str) -> None:
        if self.root is None:
            return
        from .._base.files import write_text

        path = self._path(*parts)
        path.parent.mkdir(parents=True, exist_ok=True)
        write_text(path, json.dumps(jsonable({**data, "format": FORMAT_VERSION}), allow_nan=False))


def unchanged(sources) -> bool:
    """The files a model's record was built from (``work.user_sources``) are all as they were then."""
    if not isinstance(sources, dict):
        return False  # a record that does not say: computed again
    for path, was in sources.items():
        try:
            if digest(Path(path).read_bytes()) != was:
                return False
        except (OSError, TypeError):
            return False
    return True


def rule_key(policy: str) -> str:
    from .._rules.rules import rule_identity

    return rule_identity(policy)


def variant_key(variant: Variant, steps: int) -> str:
    quantization = variant.quantization or "a8w8"
    if quantization == "a8w8" and not variant.overrides:  # the key files written before quantizations had
        return digest(get_rule(variant.policy).identity, variant.markers, steps, "default quantization")[:24]
    identity = quantizations.get(quantization).identity
    return digest(get_rule(variant.policy).identity, variant.markers, steps, identity, variant.overrides)[:24]

