"""Results on disk, in the result store (``_base.store``): compare's variant results and float
references, and the records of attribution and bits.

``variant_cache`` asks here when its own memory has no answer, and keeps here what it keeps:
the same keys (the exported program's fingerprint, inputs, calibration, steps; the rule's
identity, markers and plan), to which the store adds the stack's versions and the inspector's
own source. A result is written as its comparison's JSON (read back by ``Comparison.from_dict``,
which checks every field) and its quantized outputs as arrays; a reference as arrays only.
An attribution or a bits record is written as its JSON (``to_dict``) and read back by its
``from_dict``, which checks every field; its key (``variant_cache.attribution_key``, ``bits_key``)
is the comparison's base key and every variant's identity, as a variant's is.
What cannot be written as data (a tensor numpy has no type for) or named stably across processes
(a rule whose source Python does not keep, known by its object's id) is not kept.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TypeVar
from collections.abc import Callable

import numpy as np
import torch

from .._base import store as _store
from .results import Comparison, VariantResult

T = TypeVar("T")


def _stable(key: tuple) -> bool:
    """The key means the same in another process (a rule without source is named by an object's id)."""
    return "<no source: id" not in repr(key)


def _arrays(steps) -> tuple[dict, list[int]] | None:
    """Per-step tensors as named arrays and the count per step; None if one is not a plain tensor."""
    arrays, counts = {}, []
    try:
        for s, step in enumerate(steps):
            counts.append(len(step))
            for i, t in enumerate(step):
                arrays[f"s{s}_{i}"] = t.detach().cpu().contiguous().numpy()
    except (AttributeError, TypeError, RuntimeError):
        return None
    return arrays, counts


def _tensors(arrays: dict, counts) -> tuple:
    return tuple(tuple(torch.from_numpy(np.array(arrays[f"s{s}_{i}"])) for i in range(n)) for s, n in enumerate(counts))


def load_result(key: tuple) -> VariantResult | None:
    """The result kept on disk under ``key`` (``variant_cache``'s key of a variant), or None."""
    found = _store.store()
    if found is None or not _stable(key):
        return None
    entry = found.get(found.name("variant", key))
    if entry is None:
        return None
    try:
        (result,) = Comparison.from_dict(entry.data["comparison"]).results
        counts = [int(n) for n in entry.data["outputs"]]
        return replace(result, outputs=_tensors(entry.arrays, counts), log=str(entry.data.get("log", "")))
    except Exception:  # noqa: BLE001 - signed by us but not readable by this code: computed again
        return None


def keep_result(key: tuple, result: VariantResult, missing_only: bool = False) -> None:
    """Keep ``result`` on disk under ``key`` (a result with an error is not an answer: never kept);
    ``missing_only``: only if the store in use has no entry of that name yet (an answer from memory,
    kept where a sweep's ``out=`` asked for everything to be)."""
    found = _store.store()
    if found is None or result.error is not None or not _stable(key):
        return
    name = found.name("variant", key)
    if missing_only and name in found:
        return
    packed = _arrays(result.outputs)
    if packed is None:
        return
    arrays, counts = packed
    steps = 1 + max((m.step for m in result.metrics), default=-1)
    document = Comparison(target="", steps=steps, calibration="", quantization="", results=(result,)).to_dict()
    found.put(name, {"comparison": document, "outputs": counts, "log": result.log}, arrays)


def load_reference(key: tuple):
    """The float reference kept on disk under ``key`` (a list per step of tensors), or None."""
    found = _store.store()
    if found is None:
        return None
    entry = found.get(found.name("reference", key))
    if entry is None:
        return None
    try:
        return [list(step) for step in _tensors(entry.arrays, [int(n) for n in entry.data["outputs"]])]
    except Exception:  # noqa: BLE001 - as above
        return None


def keep_reference(key: tuple, reference) -> None:
    found = _store.store()
    if found is None:
        return
    packed = _arrays(reference)
    if packed is not None:
        found.put(found.name("reference", key), {"outputs": packed[1]}, packed[0])


def load_record(kind: str, key: tuple | None, read: Callable[[dict], T]) -> T | None:
    """The record of ``kind`` (``"attribution"``, ``"bits"``) kept on disk under ``key``, read back by
    ``read`` (a ``from_dict`` that checks every field), or None: nothing kept, or not readable."""
    found = _store.store()
    if found is None or key is None or not _stable(key):
        return None
    entry = found.get(found.name(kind, key))
    if entry is None:
        return None
    try:
        return read(entry.data["record"])
    except Exception:  # noqa: BLE001 - signed by us but not readable by this code: computed again
        return None


def keep_record(kind: str, key: tuple | None, record) -> None:
    """Keep ``record`` (its ``to_dict()``) on disk under ``key``. The caller keeps no record with an
    error in it; a key None or naming a rule by an object's id keeps nothing."""
    found = _store.store()
    if found is None or key is None or not _stable(key):
        return
    found.put(found.name(kind, key), {"record": record.to_dict()})
