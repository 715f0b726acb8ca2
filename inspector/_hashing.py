"""Content digests for caches: tensors by dtype, shape and bytes; containers recursively."""

from __future__ import annotations

import hashlib
from typing import Any

import torch


def digest(*parts: Any) -> str:
    h = hashlib.sha256()
    for p in parts:
        _feed(h, p)
    return h.hexdigest()[:24]


def _feed(h, value) -> None:
    if isinstance(value, torch.Tensor):
        t = value.detach().contiguous().cpu()
        h.update(f"T{t.dtype}{tuple(t.shape)}".encode())
        h.update(t.view(torch.uint8).numpy().tobytes() if t.numel() else b"")
    elif isinstance(value, (list, tuple)):
        h.update(f"L{len(value)}".encode())
        for v in value:
            _feed(h, v)
    elif isinstance(value, dict):
        h.update(f"D{len(value)}".encode())
        for k in sorted(value, key=str):
            _feed(h, str(k))
            _feed(h, value[k])
    else:
        h.update(repr(value).encode())
