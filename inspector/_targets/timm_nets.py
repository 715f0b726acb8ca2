"""``timm:NAME@SIZE``: a timm architecture by name, with seeded random weights and one seeded input.

Real networks without a checkpoint: the fold's decisions, its numbers and its cost depend on the
architecture and the input size, and a seeded model is the same in every process (a worker, a new kernel,
another machine with the same stack), so its results have a stable key. timm is an optional dependency
(``pip install 'fold-inspector[timm]'``; ``make setup`` installs it).

torchvision's PyPI wheel for torch 2.13 is a CUDA build: with the CPU torch its C ops do not load, and its
fake-op registrations fail at import (``operator torchvision::nms does not exist``). timm's model
definitions need none of them; when that import fails the registrations are skipped and it is tried again.
"""

from __future__ import annotations

import difflib
import importlib.util
import sys
import types

import torch

from .._base.errors import InspectorError, quoted
from .._base.limits import check_shape

PREFIX = "timm:"
WEIGHT_SEED = 0  # torch.manual_seed before the architecture is built (timm initialises from the global RNG)
INPUT_SEED = 1
MIN_SIZE, MAX_SIZE = 8, 1024  # pixels a side; most architectures downsample 32x
INSTALL = "pip install 'fold-inspector[timm]' (make setup installs it)"


def parse(spec: str) -> tuple[str, int | None]:
    """``timm:nf_resnet26@64`` -> ("nf_resnet26", 64); no ``@SIZE``: None (the architecture's own size)."""
    text = spec.removeprefix(PREFIX).strip()
    name, at, size = text.partition("@")
    name = name.strip()
    if not name:
        raise InspectorError(f"{quoted(spec)} names no architecture; give timm:NAME or timm:NAME@SIZE, "
                             "e.g. timm:nf_resnet26@64")
    if not at:
        return name, None
    try:
        pixels = int(size)
    except ValueError:
        raise InspectorError(f"the size in {quoted(spec)} must be a whole number of pixels "
                             f"({MIN_SIZE} to {MAX_SIZE}), e.g. timm:{name}@64") from None
    if not MIN_SIZE <= pixels <= MAX_SIZE:
        raise InspectorError(f"the size in {quoted(spec)} must be from {MIN_SIZE} to {MAX_SIZE} pixels, got {pixels:,}")
    return name, pixels


def import_timm():
    """The ``timm`` module, importable with the CPU torch (see the module's doc), or a one-line error."""
    if importlib.util.find_spec("timm") is None or importlib.util.find_spec("torchvision") is None:
        raise InspectorError(f"timm: targets need timm and torchvision, which are not installed; {INSTALL}")
    try:
        # lazy: an optional extra, and heavy (about 2 s)
        import timm
    except RuntimeError as exc:
        if "torchvision::" not in str(exc):
            raise InspectorError(f"importing timm failed: {exc}") from exc
    else:
        return timm
    for name in [n for n in sys.modules if n.split(".")[0] in ("timm", "torchvision")]:
        del sys.modules[name]  # the half-imported packages
    sys.modules["torchvision._meta_registrations"] = types.ModuleType("torchvision._meta_registrations")
    try:
        # lazy: the same import again, its C-op registrations skipped
        import timm
    except Exception as exc:
        raise InspectorError(f"importing timm failed: {type(exc).__name__}: {exc}") from exc
    return timm


def build(spec: str) -> tuple[torch.nn.Module, tuple[torch.Tensor, ...], str]:
    """(model in eval mode, its one example input, its display name) for ``timm:NAME[@SIZE]``. The global RNG
    is left as it was."""
    name, size = parse(spec)
    timm = import_timm()
    if not timm.is_model(name):
        close = difflib.get_close_matches(name, timm.list_models(), n=3)
        hint = f"; did you mean {', '.join(close)}?" if close else "; timm.list_models() lists them"
        raise InspectorError(f"timm has no architecture {quoted(name)}{hint}")
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(WEIGHT_SEED)
        try:
            model = timm.create_model(name, pretrained=False).eval()
        except Exception as exc:
            raise InspectorError(f"timm could not build {quoted(name)}: {type(exc).__name__}: {exc}") from exc
    if size is None:
        channels, height, width = model.pretrained_cfg.get("input_size", (3, 224, 224))
    else:
        channels, height, width = model.pretrained_cfg.get("input_size", (3, 0, 0))[0], size, size
    shape = check_shape((1, channels, height, width), f"the input of {spec}")
    generator = torch.Generator().manual_seed(INPUT_SEED)
    label = f"{PREFIX}{name}@{height}" if height == width else f"{PREFIX}{name}@{height}x{width}"
    return model, (torch.rand(shape, generator=generator),), label
