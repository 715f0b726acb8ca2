"""The one door to ExecuTorch (and torch) internals that may move between releases.

Every name the inspector reads from ``executorch`` - the fold pass and the private
methods a rule overrides, its op sets, the Arm pass manager module whose name
lookup is swapped, the quantizer, constant lookup - and torch's private lazy graph
module is listed in ``REQUIRED`` and checked once, before the first answer: if an
upgrade renames one, the inspector fails with one line instead of, say, a state
guard that silently stops applying. Imports are lazy, so ``import inspector``
stays cheap. The TOSA flow has its own door, ``_doors/tosa.py``, with the same check.

Before any name, the installed executorch's version is checked against the releases that ship the pass and were
measured (``KNOWN_TO_WORK``, ``SUPPORTED_RANGE``: scripts/check_releases.py measures them, docs/stack-facts.md has
the table): outside the range, or with a name missing, the user gets one line naming what is missing and the
releases known to work. Each table is checked once per process (``check_once``).
"""

from __future__ import annotations

import importlib
import re
import sys
from importlib.metadata import PackageNotFoundError, version
import copy
import contextlib
import functools
import threading
import weakref
from types import ModuleType
from typing import Any, Protocol
from collections.abc import Callable, Iterator

from .._base.errors import InspectorError
from .._base.quiet import quiet_imports
from torch.fx.passes.infra.pass_base import PassResult
from torch.export import ExportedProgram
from torch.export.graph_signature import ExportGraphSignature
from torch.fx import GraphModule
import torch

SUPPORTED = "1.5.1"  # the pin (pyproject.toml): what an install should bring
# Every release that ships FoldScalarMulIntoConvPass, each measured with scripts/check_releases.py (newest first:
# the first is the one to install). A release outside SUPPORTED_RANGE is refused before any name is read.
KNOWN_TO_WORK = ("1.5.1", "1.5.0", "1.4.1", "1.4.0")
SUPPORTED_RANGE = ((1, 4, 0), (1, 6))  # >=1.4.0,<1.6
_INSTALL = f"pip install executorch=={SUPPORTED} (see pyproject.toml)"
_KNOWN = ", ".join(KNOWN_TO_WORK)

_FOLD_MODULE = "executorch.backends.arm._passes.fold_scalar_mul_into_conv_pass"
_PASS_MANAGER = "executorch.backends.arm._passes.arm_pass_manager"
FOLD_PASS = "FoldScalarMulIntoConvPass"
_ARM_QUANTIZER = "executorch.backends.arm.quantizer.arm_quantizer"
_ARM_QUANTIZER_UTILS = "executorch.backends.arm.quantizer.arm_quantizer_utils"

# (module, name, attributes of that name) for everything read below. A rule overrides the
# pass's private _match_mul_after_conv (to hide guarded muls) and _fold_scale_into_conv (to
# record folds); the explainer reads the op sets the pass matches.
REQUIRED: tuple[tuple[str, str, tuple[str, ...]], ...] = (
    (_FOLD_MODULE, FOLD_PASS, ("call", "_match_mul_after_conv", "_fold_scale_into_conv",
                              "_MUL_TENSOR_OPS", "_MUL_SCALAR_OPS", "_CONV_OPS")),
    (_PASS_MANAGER, FOLD_PASS, ()),
    ("executorch.backends.arm.constants", "DISALLOW_TFA_META_KEY", ()),
    ("executorch.backends.arm._passes.arm_pass_utils", "get_param_tensor", ()),
    ("executorch.backends.arm.tosa.compile_spec", "TosaCompileSpec", ()),
    ("executorch.backends.arm.quantizer", "TOSAQuantizer", ("set_global", "transform_for_annotation")),
    ("executorch.backends.arm.quantizer", "get_symmetric_quantization_config", ()),
    (_ARM_QUANTIZER, "get_symmetric_a16w8_quantization_config", ()),
    (_ARM_QUANTIZER, "get_symmetric_a8w4_quantization_config", ()),
    (_ARM_QUANTIZER_UTILS, "NodeFinder", ("find_nodes",)),
    ("executorch.exir", "to_edge", ()),
    ("torch.fx._lazy_graph_module", "_LazyGraphModule", ("from_graphmodule",)),
    ("torch.fx.traceback", "NodeSource", ("to_dict",)),
)


# The Arm passes log what they do to a graph (int64 casts inserted, ...) at WARNING: the
# inspector reports what matters for the fold itself, in its reasons.
ARM_PASS_LOGGERS = ("executorch.backends.arm",)


def _import(module: str) -> ModuleType:
    loaded = sys.modules.get(module)
    if loaded is not None:
        return loaded
    try:
        with quiet_imports():  # torchao logs optional CUDA kernels and pytree deprecations at import
            return importlib.import_module(module)
    except ImportError as exc:
        raise InspectorError(f"cannot import {module} ({exc}); install it with: {_INSTALL}") from None


def installed_version(package: str = "executorch", missing: str = "(not installed)") -> str:
    """``package``'s installed version, read from its metadata; ``missing`` where it is not installed."""
    try:
        return version(package)
    except PackageNotFoundError:
        return missing


def freezes_buffer_state(installed: str | None = None) -> bool:
    """Whether the installed executorch (or ``installed``) reads a registered buffer's state as a constant in its INT
    flow: in 1.4.0 and 1.4.1 ``DeduplicateGetAttrPass`` gives the state's read its own attribute, apart from the
    ``copy_`` that writes it back, and ``convert_pt2e`` folds that read into a frozen parameter, so every call sees
    the state of the last calibration call; 1.5.0 points the write back at the read after every Arm pass. Measured
    in docs/stack-facts.md."""
    release = _release(installed_version(missing="") if installed is None else installed)
    return release is not None and release < (1, 5)


def _release(text: str) -> tuple[int, ...] | None:
    """The release numbers of a version string ("1.5.1+cpu" -> (1, 5, 1)); None if it has none. A pre-release or
    development build of a release ("1.6.0.dev20260301", "1.6.0a0") counts as that release."""
    found = re.match(r"(\d+)\.(\d+)(?:\.(\d+))?", text)
    return tuple(int(n or 0) for n in found.groups()) if found else None


def _range_text(range_=SUPPORTED_RANGE) -> str:
    low, high = range_
    return f">={'.'.join(map(str, low))},<{'.'.join(map(str, high))}"


def check_version(installed: str | None = None, package: str = "executorch") -> None:
    """The installed executorch (or ``installed``) is a release the inspector supports, or one line: what it is,
    why not, and the releases known to work."""
    installed = installed_version(package, missing="") if installed is None else installed
    if not installed:
        why = "it is not installed"
    else:
        release = _release(installed)
        low, high = SUPPORTED_RANGE
        if release is not None and low <= release < high:
            return
        why = f"it is outside {_range_text()}, the releases that ship the fold pass as measured"
    raise InspectorError(f"{package} {installed or '(not installed)'} is not supported: {why}; supported: {_KNOWN} "
                         f"({_INSTALL})")


def check_required(required=REQUIRED, supported: str = _KNOWN, package: str = "executorch",
                   install: str = _INSTALL) -> None:
    """Every name in ``required`` exists, or one line: which one is missing, and what of ``package`` is supported.
    For executorch, its version is checked first (``check_version``)."""
    if package == "executorch":
        _version_checked()
    for module, name, attributes in required:
        try:
            owner = _import(module)
        except InspectorError:
            missing = f"there is no module {module}"
        else:
            value = getattr(owner, name, None)
            missing = f"{module.rsplit('.', 1)[-1]} has no {name}" if value is None else next(
                (f"{name} has no {a}" for a in attributes if not hasattr(value, a)), None)
        if missing:
            raise InspectorError(f"{package} {installed_version(package)} is not supported: {missing}; "
                                 f"supported: {supported} ({install})")


@functools.cache
def _version_checked() -> None:
    check_version()


@functools.cache
def check_once(required=REQUIRED, supported: str = _KNOWN, package: str = "executorch",
               install: str = _INSTALL) -> None:
    """``check_required``, once per process per table (a door asks before its first answer, and again for free)."""
    check_required(required, supported, package, install)


def clear_checks() -> None:
    """Forget every check made (a test that changes the stack under a door checks it again)."""
    for cached in (_version_checked, check_once, _ready, _get):
        cached.cache_clear()


@functools.cache
def _ready() -> None:
    check_once()


@functools.cache
def _get(module: str, name: str):
    _ready()
    return getattr(_import(module), name)


# ---------------------------------------------------------------- the fold pass


def fold_pass_class() -> type:
    """The installed ``FoldScalarMulIntoConvPass`` class (never a wrapper)."""
    return _get(_FOLD_MODULE, FOLD_PASS)


def pass_mul_ops() -> frozenset:
    """The mul op overloads the pass matches."""
    cls = fold_pass_class()
    return frozenset(cls._MUL_TENSOR_OPS) | frozenset(cls._MUL_SCALAR_OPS)


def pass_conv_ops() -> frozenset:
    """The convolution op overloads the pass matches."""
    return frozenset(fold_pass_class()._CONV_OPS)


class FoldCall(Protocol):
    """What a wrapped pass asks of its rule during one call (see ``fold_pass_subclass``)."""

    skip: bool  # do not run the pass at all (the rule off)

    def hides(self, mul) -> bool: ...  # hide this mul from the pass's matcher (the state guard)

    def folded(self, conv, mul_name: str) -> None: ...  # the pass folded mul into conv

    def crashed(self, conv, mul_name: str, exc: Exception) -> Exception: ...  # the error to raise instead

    def finished(self) -> None: ...  # the call is over


def fold_pass_subclass(name: str, start: Callable[[Any, Any], FoldCall]) -> type:
    """A subclass of the installed pass that asks ``start(graph_module, exported_program)`` how to
    run each call. The fold itself is always the installed code: a subclass only skips the call,
    hides muls from the matcher, and hears about each fold (the private names live here only)."""

    base = fold_pass_class()

    class Wrapped(base):  # type: ignore[misc, valid-type]
        __doc__ = f"{base.__name__}, wrapped: {name}."

        def call(self, graph_module):
            self._inspector_call = start(graph_module, self.exported_program)
            if self._inspector_call.skip:
                result = PassResult(graph_module, False)
            else:
                result = super().call(graph_module)
            self._inspector_call.finished()
            return result

        def _match_mul_after_conv(self, node):
            if self._inspector_call.hides(node):
                return None
            return super()._match_mul_after_conv(node)

        def _fold_scale_into_conv(self, graph, conv_node, mul_node, channel_scale):
            mul_name = mul_node.name
            try:
                result = super()._fold_scale_into_conv(graph, conv_node, mul_node, channel_scale)
            except Exception as exc:  # the rule names the site the installed pass crashed on
                raise self._inspector_call.crashed(conv_node, mul_name, exc) from exc
            if result is not None:
                self._inspector_call.folded(conv_node, mul_name)
            return result

    Wrapped.__name__ = Wrapped.__qualname__ = f"{base.__name__}[{name}]"
    return Wrapped


def pass_manager_module() -> ModuleType:
    """The module whose global ``FoldScalarMulIntoConvPass`` the Arm pass manager instantiates."""
    _ready()
    return _import(_PASS_MANAGER)


def disallow_tfa_key() -> str:
    """The node-meta key with which the quantizer opts nodes out of transform-for-annotation."""
    return _get("executorch.backends.arm.constants", "DISALLOW_TFA_META_KEY")


def get_param_tensor(program: Any, node: Any):
    """A constant's tensor as the Arm passes read it from an exported program (raises RuntimeError)."""
    return _get("executorch.backends.arm._passes.arm_pass_utils", "get_param_tensor")(program, node)


def constant_lookup(program: Any):
    """``node -> tensor or None``: what ``get_param_tensor`` returns for each placeholder of ``program``,
    in one pass over its signature (get_param_tensor rebuilds the signature's dicts on every call:
    quadratic on a 1,000-node graph). Anything else is left to ``get_param_tensor`` itself."""
    signature = program.graph_signature
    state, constants = program.state_dict, program.constants
    owner = weakref.ref(program)  # a cache keyed by the program may keep this: it must not keep the program
    table: dict[str, Any] = {}
    for name, target in signature.inputs_to_parameters.items():
        table[name] = state.get(target)
    for name, target in signature.inputs_to_buffers.items():
        table[name] = state[target] if target in state else constants.get(target)
    for name, target in signature.inputs_to_lifted_tensor_constants.items():
        table[name] = constants.get(target)

    def lookup(node):
        if node.op == "placeholder":
            return table.get(node.name)  # a user input is not a constant (get_param_tensor raises for it)
        if node.op == "call_function":
            return None  # computed (get_param_tensor raises for it)
        live = owner()
        if live is None:
            return None
        try:
            return get_param_tensor(live, node)
        except (RuntimeError, AttributeError):
            return None

    return lookup


# ---------------------------------------------------------------- the quantizer and edge


def tosa_compile_spec(spec: str = "TOSA-1.0+INT"):
    """A ``TosaCompileSpec`` for ``spec``."""
    return _get("executorch.backends.arm.tosa.compile_spec", "TosaCompileSpec")(spec)


def symmetric_quantization_config(per_channel: bool = True):
    """The Arm backend's symmetric int8 quantization config."""
    return _get("executorch.backends.arm.quantizer", "get_symmetric_quantization_config")(is_per_channel=per_channel)


def arm_quantization_config(factory: str, **kwargs):
    """A config from one of the Arm quantizer's factories (``get_symmetric_a16w8_quantization_config``, ...)."""
    return _get(_ARM_QUANTIZER, factory)(**kwargs)


def node_finder_class() -> type:
    """The Arm quantizer's ``NodeFinder`` base: its per-node configuration (``set_node_finder``) takes one."""
    return _get(_ARM_QUANTIZER_UTILS, "NodeFinder")


def tosa_int_quantizer(spec: str = "TOSA-1.0+INT", config=None):
    """A ``TOSAQuantizer`` for ``spec`` with a global config (default: symmetric int8, per-channel).

    Without a global config the quantizer marks every node disallowed for
    transform-for-annotation, and nothing folds there.
    """
    quantizer = _get("executorch.backends.arm.quantizer", "TOSAQuantizer")(tosa_compile_spec(spec))
    quantizer.set_global(config if config is not None else symmetric_quantization_config())
    return quantizer


def to_edge(program: Any):
    """``executorch.exir.to_edge`` on an exported program; returns the edge ``ExportedProgram``."""
    return _get("executorch.exir", "to_edge")(program).exported_program()


# ---------------------------------------------------------------- torch internals

# The signature's name -> target dicts that the Arm pass utilities look up once per constant.
_SIGNATURE_DICTS = ("inputs_to_parameters", "inputs_to_buffers", "inputs_to_lifted_tensor_constants")


@functools.cache
def _caching_classes() -> tuple[type, type]:
    """(program class, signature class): subclasses of torch's whose ``inputs_to_*`` dicts are
    built once per spec list, given for one call to objects this process owns (see below)."""

    def cached(name: str, prop: property) -> property:
        def get(self):
            specs = self.input_specs
            store = self.__dict__.setdefault("_inspector_lookups", {})
            hit = store.get(name)
            if hit is None or hit[0] is not specs or hit[1] != len(specs):
                hit = store[name] = (specs, len(specs), prop.fget(self))
            return hit[2]

        return property(get, doc=prop.__doc__)

    signature_class = type("CachingGraphSignature", (ExportGraphSignature,),
                           {name: cached(name, getattr(ExportGraphSignature, name)) for name in _SIGNATURE_DICTS})

    def get_signature(self):
        return self.__dict__["_graph_signature"]

    def set_signature(self, signature):  # the Arm utilities build a new signature for many edits
        if type(signature) is ExportGraphSignature:
            signature.__class__ = signature_class
            self.__dict__.setdefault("_inspector_signatures", []).append(weakref.ref(signature))
        self.__dict__["_graph_signature"] = signature

    program_class = type("CachingExportedProgram", (ExportedProgram,),
                         {"_graph_signature": property(get_signature, set_signature)})
    return program_class, signature_class


@contextlib.contextmanager
def fast_signature_lookups(program) -> Iterator[None]:
    """In this scope ``program``'s graph signatures build ``inputs_to_*`` once per spec list, not on
    every call. The installed pass asks for them for every constant it reads, creates or deletes,
    and torch rebuilds each dict from all input specs every time: quadratic, about a second on a
    1,000-node graph with 200 folds. Only ``program`` changes (it must be a private copy): its class
    and its signatures' classes are subclasses for the scope, with the cache in their own ``__dict__``,
    keyed by the identity and length of the spec list (the Arm utilities insert into it, or build a
    new signature with a new list), so the dicts are torch's; everything is put back on exit, and no
    class of torch's is touched (other threads and programs see torch as it is)."""

    if program is None or type(program) is not ExportedProgram or "_graph_signature" not in vars(program) \
            or type(program.__dict__["_graph_signature"]) is not ExportGraphSignature:
        yield  # not a plain program of torch's own: the lookups stay as torch makes them (only slower)
        return
    program_class, signature_class = _caching_classes()
    program.__class__ = program_class
    program._graph_signature = program.__dict__["_graph_signature"]  # through the setter: made caching
    try:
        yield
    finally:
        for ref in program.__dict__.pop("_inspector_signatures", []):
            signature = ref()
            if signature is not None and type(signature) is signature_class:
                signature.__class__ = ExportGraphSignature
                signature.__dict__.pop("_inspector_lookups", None)
        program.__class__ = ExportedProgram


_SHARING = threading.Lock()
_SHARERS = 0  # scopes of shared_provenance open now, in every thread


def _share(self, memo):
    return self


@contextlib.contextmanager
def shared_provenance() -> Iterator[None]:
    """In this scope a copy of a node's provenance shares torch.fx's ``NodeSource`` records instead of copying
    them. Each node a pass makes records where it came from (``meta["from_node"]``) by deep-copying its source's
    whole chain of records, and the lowering's passes copy whole graphs (their metadata with them) over and
    over: a quarter to a third of a lowering here (docs/stack-facts.md). A record is never changed once made
    (only its own caches of its text are filled), so a shared one reads exactly as a copy would; what the
    lowering produces is the same, byte for byte (tests/test_vela.py). torch's class gets a ``__deepcopy__``
    for the scope (other threads copying a record meanwhile share it too, which reads the same) and loses it
    when the last scope ends."""
    global _SHARERS
    source = _get("torch.fx.traceback", "NodeSource")
    with _SHARING:
        _SHARERS += 1
        if _SHARERS == 1:
            source.__deepcopy__ = _share
    try:
        yield
    finally:
        with _SHARING:
            _SHARERS -= 1
            if _SHARERS == 0 and source.__dict__.get("__deepcopy__") is _share:
                del source.__deepcopy__


def lazy_program(program):
    """``program`` (an ExportedProgram this process owns) with its graph module made lazy, as
    ``lazy_graph_module``: its copies and the pass's ``recompile()`` then skip codegen, which was
    about half of copying a 1,000-node program. ExportedProgram has no public setter for it; if
    its private ``_graph_module`` has moved, the program is returned as it is (only slower)."""

    if isinstance(getattr(program, "_graph_module", None), GraphModule):
        program._graph_module = lazy_graph_module(program._graph_module)
    return program


def program_like(program, graph, signature, state_dict: dict, constants: dict):
    """An ExportedProgram like ``program`` (same verifiers, dialect, range constraints) holding
    ``graph`` with ``signature`` and these tensors: a part of ``program`` as a program of its own.

    ``program``'s verifiers are not run again: ``graph``'s nodes are copies of nodes they
    accepted, and the edge dialect's runs every node on fake tensors (most of a toggle's time at
    edge). ExportedProgram has no public way to skip them; if its private fields have moved, the
    public constructor builds it, verifiers and all (only slower)."""

    fields = ("_graph_module", "_graph_signature", "_state_dict", "_constants")
    if all(hasattr(program, f) for f in fields):
        part = copy.copy(program)
        part._graph_module = lazy_graph_module_of(torch.nn.Module(), graph)
        part._graph_signature, part._state_dict, part._constants = signature, state_dict, constants
        return part
    return ExportedProgram(root=torch.nn.Module(), graph=graph, graph_signature=signature, state_dict=state_dict,
                           range_constraints={}, module_call_graph=[], constants=constants,
                           verifiers=program.verifiers)


def lazy_graph_module_of(root, graph):
    """A lazy GraphModule (see ``lazy_graph_module``) of ``graph`` over ``root``'s attributes."""
    return _get("torch.fx._lazy_graph_module", "_LazyGraphModule")(root, graph)


def lazy_graph_module(graph_module):
    """``graph_module`` as a lazy GraphModule: its Python code is generated only when it is called,
    so copies and the pass's own ``recompile()`` stay cheap (re-deciding needs no codegen)."""
    return _get("torch.fx._lazy_graph_module", "_LazyGraphModule").from_graphmodule(graph_module)
