"""The sweep's records in the result store (``_base.store``): models, rows and variants, each an entry
written as it finishes and read back by the next sweep.

``out=FOLDER`` names the store: ``Store(FOLDER)``, the same class, signing, entry format and trust
rules as every other answer kept on disk, and the compare results of the sweep's variants are kept
there too. Without ``out=``, the store in use (``FOLD_INSPECTOR_STORE`` or the platform's folder).
An entry that is corrupt, foreign, from another version or planted, or not a regular file at all (a link,
a FIFO, a folder), is not read: computed again.
"""

from __future__ import annotations

from .._base import store as _store
from .._base.hashing import digest
from .._numbers.quantization import quantizations
from .._numbers.results import Variant
from .._base.data import FORMAT, jsonable

# The sweep's records are in the one save-format version (a rule is "rule" since 2; entries that said "policy" are
# read by records.renamed_rule; plain JSON files in out/, the first way, are no longer read).
FORMAT_VERSION = FORMAT

# The kinds of the sweep's entries (``Store.name(kind, ...)``).
MODEL, ROW, VARIANT = "sweep-model", "sweep-row", "sweep-variant"
# The biggest user's Python file a model's record is checked against (``work.user_sources`` keeps resolved
# paths, so a link there now is a change too): a file past it is "changed", its model analysed again.
MAX_SOURCE_BYTES = 16 << 20


class Records:
    """The sweep's records in one result store (None: the store is off, nothing is kept)."""

    def __init__(self, store: _store.Store | None) -> None:
        self.store = store

    def read(self, kind: str, *key) -> dict | None:
        """The record kept under ``(kind, key)``, or None: none, or not one to trust."""
        if self.store is None or not _stable(key):
            return None
        entry = self.store.get(self.store.name(kind, FORMAT_VERSION, *key))
        return entry.data if entry is not None else None

    def write(self, data: dict, kind: str, *key) -> None:
        """Keep ``data`` (a record's JSON) under ``(kind, key)``; nothing when it cannot be named stably."""
        if self.store is None or not _stable(key):
            return
        self.store.put(self.store.name(kind, FORMAT_VERSION, *key), jsonable(data))


def _stable(key: tuple) -> bool:
    """The key means the same in another process (a rule without source is named by an object's id)."""
    return "<no source: id" not in repr(key)


def unchanged(sources) -> bool:
    """The files a model's record was built from (``work.user_sources``) are all as they were then.
    Read as the store reads its entries (``read_regular``): a name that is now a link, a FIFO, a device,
    a folder or a file past ``MAX_SOURCE_BYTES`` is "changed", in bounded time and memory."""
    if not isinstance(sources, dict):
        return False  # a record that does not say: computed again
    for path, was in sources.items():
        if not isinstance(path, str):
            return False
        data = _store.read_regular(path, MAX_SOURCE_BYTES)
        if data is None or digest(bytes(data)) != was:
            return False
    return True


def variant_key(variant: Variant, steps: int, engine: str, accelerator=None) -> tuple:
    """A variant's part of a key: its rule, markers, quantization and overrides, the steps, the engine, and the
    accelerator it is lowered for (not for tosa-int: the keys of before)."""
    identity = quantizations.get(variant.quantization or "a8w8").identity
    key = (variant.rule.identity, variant.markers, steps, identity, variant.overrides, engine)
    return key + ((accelerator.identity,) if accelerator is not None and accelerator.costs else ())
