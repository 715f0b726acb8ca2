"""The one door to the Arm TOSA INT flow: quantize, lower, and run the TOSA reference model.

``TosaReferenceModelDispatch`` lives in the wheel's Arm *test* package and may move
between releases; ``tosa_reference_model`` comes from the tosa-tools wheel. Both
are imported lazily here and nowhere else.
"""

from __future__ import annotations

import contextlib
from typing import Iterator

from . import _executorch
from .errors import InspectorError

SPEC = "TOSA-1.0+INT"


def reference_dispatch():
    """A context in which delegate calls run on the bit-accurate TOSA reference model."""
    try:
        import tosa_reference_model  # noqa: F401  (fail here, clearly, not deep inside a run)
        from executorch.backends.arm.test.runner_utils import TosaReferenceModelDispatch
    except ImportError as exc:
        raise InspectorError(
            f"the TOSA reference model is not available ({exc}); install it with: pip install tosa-tools==2026.8.0"
        ) from None
    return TosaReferenceModelDispatch()


def prepare_pt2e(module, quantizer):
    return _executorch._import("torchao.quantization.pt2e.quantize_pt2e").prepare_pt2e(module, quantizer)


def convert_pt2e(module):
    return _executorch._import("torchao.quantization.pt2e.quantize_pt2e").convert_pt2e(module)


def lower(program, spec: str = SPEC):
    """``to_edge_transform_and_lower`` with the TOSA partitioner; returns the edge program manager."""
    from executorch.backends.arm.tosa.partitioner import TOSAPartitioner
    from executorch.exir import to_edge_transform_and_lower

    return to_edge_transform_and_lower(program, partitioner=[TOSAPartitioner(_executorch.tosa_compile_spec(spec))])


@contextlib.contextmanager
def partition_rejections() -> Iterator[dict[str, str]]:
    """Collect the TOSA partitioner's reasons for rejecting nodes (node name -> reason)."""
    import executorch.backends.arm.tosa.partitioner as partitioner

    rejected: dict[str, str] = {}
    base = partitioner.WhyNoPartitionReporter

    class Recording(base):
        def report_reject(self, node, reason):
            rejected.setdefault(node.name, str(reason))
            return super().report_reject(node, reason)

    partitioner.WhyNoPartitionReporter = Recording
    try:
        yield rejected
    finally:
        partitioner.WhyNoPartitionReporter = base
