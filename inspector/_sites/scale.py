"""What multiplies a conv output: the scale of a site, summarised (a record every rule may read)."""

from __future__ import annotations

import math
from dataclasses import dataclass

from .._base.codec import Record
from . import graph as _graph
from .explain import channel_broadcast


@dataclass(frozen=True, kw_only=True)
class ScaleSummary(Record):
    """What multiplies the conv output."""

    kind: str  # scalar (Python number) | scalar-tensor | channel | tensor | input-dependent | quantized
    shape: tuple[int, ...]  # () for a Python number
    dtype: str  # "float32", "int64", "python-float", ...
    min_abs: float | None  # smallest |s| (None when not a constant)
    max_abs: float | None  # largest |s|
    ratio: float | None  # max_abs / min_abs (inf when some s is 0; None when not a constant)

    def short(self) -> str:
        if self.min_abs is None:
            return f"{self.kind} {list(self.shape)}"
        if self.min_abs == self.max_abs:
            return f"{self.kind} {self.max_abs:.4g}"
        return f"{self.kind} {list(self.shape)} |s| {self.min_abs:.3g}..{self.max_abs:.3g}"


def scale_summary(c: _graph.Candidate, program) -> ScaleSummary:
    """What multiplies the conv output of candidate ``c`` (constants read as the pass reads them)."""
    s = c.scale
    if isinstance(s, (int, float)) and not isinstance(s, bool):
        v = abs(float(s))
        return ScaleSummary(kind="scalar", shape=(), dtype=f"python-{type(s).__name__}", min_abs=v, max_abs=v,
                            ratio=1.0 if v else math.inf)
    tensor = _graph.constant_tensor(s, program)
    if tensor is None and c.path:  # a constant seen through RESCALE or quantize/dequantize (lowering, INT flow)
        behind = _graph.constant_behind(s, program)
        if behind is not None:  # its integers are the quantized scale: the real values need its qparams
            return ScaleSummary(kind="quantized", shape=tuple(int(d) for d in behind[0].shape),
                                dtype=str(behind[0].dtype).replace("torch.",
                                                                   ""), min_abs=None, max_abs=None, ratio=None)
    if tensor is None:
        meta = _graph.value_meta(s)
        shape = tuple(int(d) for d in meta.shape) if meta is not None else ()
        dtype = str(meta.dtype).replace("torch.", "") if meta is not None else "unknown"
        return ScaleSummary(kind="input-dependent", shape=shape, dtype=dtype, min_abs=None, max_abs=None, ratio=None)
    shape = tuple(int(d) for d in tensor.shape)
    dtype = str(tensor.dtype).replace("torch.", "")
    a = tensor.detach().abs().double().flatten()
    lo, hi = (float(a.min()), float(a.max())) if a.numel() else (0.0, 0.0)
    ratio = hi / lo if lo > 0 else (math.inf if hi > 0 else 1.0)
    if tensor.numel() == 1:
        kind = "scalar-tensor"
    elif channel_broadcast(c.conv, shape) is None:
        kind = "channel"
    else:
        kind = "tensor"
    return ScaleSummary(kind=kind, shape=shape, dtype=dtype, min_abs=lo, max_abs=hi, ratio=ratio)
