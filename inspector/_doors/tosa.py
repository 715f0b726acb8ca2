"""The one door to the Arm TOSA INT flow: quantize, lower, and run the TOSA reference model.

``TosaReferenceModelDispatch`` lives in the wheel's Arm *test* package and may move
between releases; ``tosa_reference_model`` comes from the tosa-tools wheel; the
partitioner's reject reporter is a private hook. Every name used here is listed in
``REQUIRED`` and checked once, before the first run, as ``_doors/executorch.py`` does for the pass.
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
import tempfile
import threading
from collections.abc import Iterator

from . import executorch as _executorch
from .decompositions import shared_decompositions
from .._base.cache import BoundedCache
from .._base.copies import no_gc_pauses
from .._base.hashing import digest
from .._base.errors import InspectorError

SPEC = "TOSA-1.0+INT"
_QUANTIZE = "torchao.quantization.pt2e.quantize_pt2e"
_OBSERVER = "torchao.quantization.pt2e.observer"
_PARTITIONER = "executorch.backends.arm.tosa.partitioner"
_RUNNER = "executorch.backends.arm.test.runner_utils"
_ARM_SPEC = "executorch.backends.arm.common.arm_compile_spec"

REQUIRED: tuple[tuple[str, str, tuple[str, ...]], ...] = (
    (_QUANTIZE, "prepare_pt2e", ()),
    (_QUANTIZE, "convert_pt2e", ()),
    (_OBSERVER, "HistogramObserver", ("_non_linear_param_search", "calculate_qparams")),
    ("executorch.exir", "to_edge_transform_and_lower", ()),
    (_PARTITIONER, "TOSAPartitioner", ()),
    (_PARTITIONER, "WhyNoPartitionReporter", ("report_reject",)),
    (_RUNNER, "TosaReferenceModelDispatch", ()),
    (_ARM_SPEC, "ArmCompileSpec", ("DebugMode",)),
)


@functools.cache
def _ready() -> None:
    try:
        import tosa_reference_model  # noqa: F401  (fail here, clearly, not deep inside a run)
    except ImportError as exc:
        raise InspectorError(
            f"the TOSA reference model is not available ({exc}); install it with: pip install tosa-tools==2026.8.0"
        ) from None
    _executorch.check_once(REQUIRED)


def _get(module: str, name: str):
    _ready()
    return getattr(_executorch._import(module), name)


def reference_dispatch():
    """A context in which delegate calls run on the bit-accurate TOSA reference model."""
    return _get(_RUNNER, "TosaReferenceModelDispatch")()


def prepare_pt2e(module, quantizer):
    return _get(_QUANTIZE, "prepare_pt2e")(module, quantizer)


def convert_pt2e(module):
    with remembered_histogram_searches():
        return _get(_QUANTIZE, "convert_pt2e")(module)


# The range each histogram observer settles on, by everything it is computed from (the histogram's counts, its
# range, bins and target bins, the observer's class): the same observed values give the same range, so it is
# computed once. A few KB an entry.
_SEARCHES = BoundedCache(4096, "histogram searches")
_SEARCHING = threading.Lock()
_SEARCHERS = 0  # scopes of remembered_histogram_searches open now, in every thread


def _searched(original):
    @functools.wraps(original)
    def search(self):
        if self.histogram.device.type != "cpu":
            return original(self)
        key = digest(type(self).__module__, type(self).__qualname__, self.histogram, self.min_val, self.max_val,
                     self.bins, self.dst_nbins)
        found = _SEARCHES.get(key)
        if found is None:
            found = tuple(t.detach().clone() for t in original(self))
            _SEARCHES.put(key, found)
        return tuple(t.clone() for t in found)

    search._inspector_original = original
    return search


@contextlib.contextmanager
def remembered_histogram_searches() -> Iterator[None]:
    """In this scope torchao's ``HistogramObserver`` computes each range it settles on once per distinct
    histogram. Its search (``_non_linear_param_search``, caffe2's norm minimisation) reads only the observer's
    histogram, range, bins and target bins, and takes about 30 ms whatever the model's size: the observers
    before the first site two variants decide differently see the same values in both, and a variant's TOSA
    run and its simulation calibrate the same observers. The same inputs give the same range, bit for bit
    (tests/test_engines.py). The class gets the remembering search for the scope (other threads converting
    meanwhile share it, which computes the same) and loses it when the last scope ends."""
    global _SEARCHERS
    observer = _get(_OBSERVER, "HistogramObserver")
    with _SEARCHING:
        _SEARCHERS += 1
        if _SEARCHERS == 1:
            observer._non_linear_param_search = _searched(observer.__dict__["_non_linear_param_search"])
    try:
        yield
    finally:
        with _SEARCHING:
            _SEARCHERS -= 1
            current = observer.__dict__.get("_non_linear_param_search")
            if _SEARCHERS == 0 and hasattr(current, "_inspector_original"):
                observer._non_linear_param_search = current._inspector_original


def lower(program, spec: str = SPEC, *, locations: bool = False, partitions: list | None = None):
    """``to_edge_transform_and_lower`` with the TOSA partitioner; returns the edge program manager.

    ``locations``: every TOSA operator carries the node it comes from (``ArmCompileSpec.DebugMode.TOSA``, which
    writes its dumps into a private folder, removed after): how Vela's rows are mapped back to the sites. The
    operators, the reference model's outputs and Vela's cycles are the same either way (docs/cost.md).
    ``partitions``: a list that hears how many TOSA partitions the partitioner found (one lowering call of the
    backend's pass pipeline each), before the first is lowered."""
    compile_spec = _executorch.tosa_compile_spec(spec)
    with contextlib.ExitStack() as stack:
        if locations:
            folder = stack.enter_context(tempfile.TemporaryDirectory(prefix="inspector-tosa-"))
            compile_spec.dump_intermediate_artifacts_to(folder).dump_debug_info(
                _get(_ARM_SPEC, "ArmCompileSpec").DebugMode.TOSA)
        partitioner = _get(_PARTITIONER, "TOSAPartitioner")(compile_spec)
        if partitions is not None:  # this partitioner object only: it tells how many partitions it made
            partition = partitioner.partition

            def counting(exported_program):
                result = partition(exported_program)
                partitions.append(len(result.partition_tags))
                return result

            partitioner.partition = counting
        stack.enter_context(_executorch.shared_provenance())
        stack.enter_context(shared_decompositions())  # torch.export's program-independent work, once
        # The cyclic collector's full pass walks the whole heap (the stack's ~600k objects, nothing of the program)
        # once a lowering; the lowering's own garbage is collected young, as soon as it returns.
        stack.enter_context(no_gc_pauses())
        return _get("executorch.exir", "to_edge_transform_and_lower")(program, partitioner=[partitioner])


_REJECTED: contextvars.ContextVar[dict | None] = contextvars.ContextVar("inspector_rejections", default=None)
_INSTALL = threading.Lock()  # held only while the reporter is bound, once per process


def _install_recording_reporter() -> None:
    """Bind the partitioner's ``WhyNoPartitionReporter`` to a subclass that also records each
    rejection into the current context's dict (once per process). Outside a
    ``partition_rejections`` scope it records nothing and reports exactly as the installed class,
    so the permanent binding changes nothing for other code; each thread and job records only its
    own lowering's rejections (``contextvars``), with no lock held across a run."""
    partitioner = _executorch._import(_PARTITIONER)
    if getattr(partitioner.WhyNoPartitionReporter, "_inspector_recording", False):
        return
    with _INSTALL:
        base = partitioner.WhyNoPartitionReporter
        if getattr(base, "_inspector_recording", False):
            return

        class Recording(base):
            _inspector_recording = True

            def report_reject(self, node, reason):
                rejected = _REJECTED.get()
                if rejected is not None:
                    rejected.setdefault(node.name, str(reason))
                return super().report_reject(node, reason)

        partitioner.WhyNoPartitionReporter = Recording


@contextlib.contextmanager
def partition_rejections() -> Iterator[dict[str, str]]:
    """Collect the TOSA partitioner's reasons for rejecting nodes (node name -> reason), in this
    scope of this thread or task only."""
    _ready()
    _install_recording_reporter()
    rejected: dict[str, str] = {}
    token = _REJECTED.set(rejected)
    try:
        yield rejected
    finally:
        _REJECTED.reset(token)
