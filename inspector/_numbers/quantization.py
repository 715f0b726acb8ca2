"""Quantizations a variant can run under, and the per-node overrides that leave nodes in float.

A *quantization* is a named ``QuantizationConfig`` of the installed Arm quantizer together with
the TOSA specification that can lower it: ``a8w8`` (symmetric, per-channel weights: the
default), ``a8w8-per-tensor``, ``a16w8`` (16-bit activations: ``TOSA-1.0+INT+int16``) and
``a8w4`` (4-bit weights: ``TOSA-1.0+INT+int4``), plus any a user registers with a name
(``quantizations.register``). Configs are built
only when a variant runs (the quantizer imports executorch's Arm backend).

An *override* keeps some nodes of the model out of the variant's quantization: ``"float"``
leaves them unquantized (they then run outside the TOSA delegate), a quantization name
quantizes them at that width. Keys name nodes of the exported program four ways: a site id
(the site's mul), a node name (as the exported program or the tfa graph calls it), a module
path (every node inside that module) or attribution's aligned node id (``root:mul``). ``resolve_overrides`` turns
them into node names of the
exported program; ``apply`` tags those nodes before ``prepare_pt2e`` and gives the quantizer one
node finder per value (its own per-node configuration, ``set_node_finder``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any
from collections.abc import Callable, Iterable, Mapping

import torch

from .._doors import executorch as _executorch
from .._base.hashing import digest
from .._base.registry import Registry
from .._base.errors import InspectorError, quoted
from .._sites.graph import candidates, site_ids
from .._decide.stages import stage_graph_of
from .._sites.graph import aligned_ids
from .._cost.accelerators import TOSA_INT, Accelerator

INT = "TOSA-1.0+INT"
INT16 = "TOSA-1.0+INT+int16"
INT4 = "TOSA-1.0+INT+int4"
DEFAULT = "a8w8"
FLOAT = "float"  # the override that leaves nodes unquantized

# The node-meta key that marks a node for an override (read by ``_TaggedNodes`` only).
OVERRIDE_META = "fold_inspector_quantization"

@dataclass(frozen=True, kw_only=True)
class Quantization:
    """A quantization config with a name, and the TOSA specification that lowers it."""

    name: str
    help: str
    spec: str = INT
    factory: Callable[[], Any] | None = field(default=None, repr=False, compare=False)  # builds the config
    config: Any = field(default=None, repr=False, compare=False)  # a user's own QuantizationConfig
    builtin: bool = False

    def build(self):
        """The ``QuantizationConfig`` (built on first use by a built-in's factory)."""
        return self.config if self.config is not None else self.factory()

    @property
    def identity(self) -> str:
        """What results under this quantization depend on (a user's config by its description)."""
        return self.name if self.builtin else f"{self.name}:{describe_config(self.config)}"

    @property
    def text(self) -> str:
        return f"{self.name}: {self.help}"

    def __reduce__(self):
        # A built-in travels by name (its factory is code); a user's travels with its config.
        if self.builtin:
            return (_named, (self.name,))
        return (_rebuilt, (self.name, self.help, self.spec, self.config))


def _arm(name: str, **kwargs) -> Callable[[], Any]:
    return lambda: _executorch.arm_quantization_config(name, **kwargs)


BUILTIN = (
    Quantization(name="a8w8",
                 help="8-bit activations, 8-bit symmetric per-channel weights (the Arm quantizer's default)",
                 spec=INT, factory=_arm("get_symmetric_quantization_config", is_per_channel=True), builtin=True),
    Quantization(name="a8w8-per-tensor", help="8-bit activations, 8-bit symmetric per-tensor weights",
                 spec=INT, factory=_arm("get_symmetric_quantization_config", is_per_channel=False), builtin=True),
    Quantization(name="a16w8",
                 help="16-bit activations, 8-bit per-channel weights (needs TOSA-1.0+INT+int16: Ethos-U85)",
                 spec=INT16, factory=_arm("get_symmetric_a16w8_quantization_config"), builtin=True),
    Quantization(name="a8w4",
                 help="8-bit activations, 4-bit per-channel weights, range -7..7 (needs TOSA-1.0+INT+int4)",
                 spec=INT4, factory=_arm("get_symmetric_a8w4_quantization_config", is_qat=False), builtin=True),
)
_NAME = re.compile(r"^[A-Za-z][A-Za-z0-9_.-]{0,63}$")


def _quantization(name: str | Quantization, config: Any = None, *, spec: str | None = None,
                  help: str = "") -> Quantization:
    """A built-in as it is, or a user's ``QuantizationConfig`` with a name (``spec``: the TOSA
    specification to lower it for; default ``TOSA-1.0+INT+int16`` when any activation is 16-bit,
    else ``TOSA-1.0+INT``)."""
    if isinstance(name, Quantization):
        return name
    if not isinstance(name, str) or not _NAME.match(name) or name == FLOAT:
        raise InspectorError(f"cannot name a quantization {quoted(name)}; use letters, digits, '-', '_' or '.' "
                             f"(not {FLOAT!r})")
    _check_config(config, name)
    return Quantization(name=name, help=help or describe_config(config), spec=spec or needed_spec(config),
                        config=config)


# Every quantization by name, the built-ins first; ``quantizations.register(NAME, config)`` names
# one of the user's, so variants can say ``"upstream@NAME"`` (built-ins cannot be replaced).
quantizations = Registry("quantization", make=_quantization, line=lambda q: q.help, fixed=lambda q: q.builtin,
                         hint="or name your own with inspector.quantizations.register(NAME, config)")
for _builtin in BUILTIN:
    quantizations.register(_builtin)


def _named(name: str) -> Quantization:
    """The registered quantization ``name`` (how a built-in is unpickled in a worker)."""
    return quantizations.get(name)


def _rebuilt(name: str, help: str, spec: str, config: Any) -> Quantization:
    """A user's quantization as a worker unpickles it (the record takes its fields by keyword only)."""
    return Quantization(name=name, help=help, spec=spec, config=config)


def quantization_of(value: Any) -> Quantization:
    """A comparison's default quantization from what the user gave: None (``a8w8``), a name, a
    ``Quantization`` or a ``QuantizationConfig`` (then called ``custom``)."""
    if value is None:
        return quantizations.get(DEFAULT)
    if isinstance(value, Quantization):
        return value
    if isinstance(value, str):
        return quantizations.get(value)
    _check_config(value, "quantization_config")
    return Quantization(name="custom", help=describe_config(value), spec=needed_spec(value), config=value)


def _check_config(config: Any, what: str) -> None:
    if not all(hasattr(config, a) for a in ("input_activation", "output_activation", "weight")):
        raise InspectorError(f"{what}: expected a QuantizationConfig (e.g. get_symmetric_quantization_config()), "
                             f"got {type(config).__name__}")


def _specs(config) -> list:
    return [getattr(config, a, None) for a in ("input_activation", "output_activation", "weight", "bias")]


def needed_spec(config) -> str:
    """The TOSA specification a config lowers for: int16 activations need the int16 extension,
    weights within -8..7 the int4 extension."""
    dtypes = {getattr(s, "dtype", None) for s in _specs(config)}
    weight = getattr(config, "weight", None)
    int4 = weight is not None and getattr(weight, "quant_max", 127) is not None and getattr(weight, "quant_max", 127) <= 7
    return combined_spec([INT16 if torch.int16 in dtypes else INT, INT4 if int4 else INT])


def combined_spec(specs: Iterable[str]) -> str:
    """The one TOSA specification with every extension ``specs`` need (``+int16`` and ``+int4``)."""
    extensions = sorted({e for s in specs for e in s.split("+")[2:]})
    return "+".join([INT, *extensions])


def describe_config(config) -> str:
    """A config in words: its label when it has one, else its specs without addresses."""
    label = getattr(config, "label", None)
    if isinstance(label, str) and label:
        return label
    parts = []
    for a, s in zip(("act_in", "act_out", "weight", "bias"), _specs(config)):
        if s is not None:
            parts.append(f"{a}={getattr(s, 'dtype', '?')}[{getattr(s, 'quant_min', '?')},"
                         f"{getattr(s, 'quant_max', '?')}] {getattr(s, 'qscheme', '')}")
    return re.sub(r" at 0x[0-9a-f]+", "", "; ".join(parts) or repr(config))


# ---------------------------------------------------------------- overrides


def override_pairs(overrides: Mapping[str, str] | Iterable[tuple[str, str]] | None) -> tuple[tuple[str, str], ...]:
    """Overrides as sorted ``(key, value)`` pairs (a Variant's frozen form); values checked by name."""
    if not overrides:
        return ()
    try:
        items = list(overrides.items()) if isinstance(overrides, Mapping) else [tuple(p) for p in overrides]
    except (TypeError, ValueError):
        raise InspectorError(f"cannot read overrides {quoted(overrides)}; give a dict "
                             "{'node, module path or site id': 'float' or a quantization name}") from None
    pairs = {}
    for item in items:
        if len(item) != 2 or not all(isinstance(x, str) and x for x in item):
            raise InspectorError(f"cannot read override {quoted(item)}; give 'key': 'float' or a quantization name")
        key, value = item
        if value != FLOAT:
            quantizations.get(value)
        pairs[key] = value
    return tuple(sorted(pairs.items()))


@dataclass(frozen=True, kw_only=True)
class Plan:
    """How one variant quantizes and what it is lowered for: its quantization, the nodes its overrides reach,
    and the accelerator (which quantizer, which TOSA specification, whether a cost is read)."""

    quantization: Quantization
    nodes: tuple[tuple[str, str], ...] = ()  # (exported node name, "float" or quantization name)
    widths: tuple[Quantization, ...] = ()  # the quantizations the overrides name
    accelerator: Accelerator = TOSA_INT  # what the variant is lowered for (inspector.accelerators)

    @classmethod
    def of(cls, quantization: Quantization, nodes: tuple[tuple[str, str], ...] = (),
           accelerator: Accelerator = TOSA_INT) -> Plan:
        names = sorted({v for _, v in nodes if v != FLOAT})
        # (a quantization the accelerator's TOSA specification cannot lower fails as the variant quantizes: its error)
        return cls(quantization=quantization, nodes=nodes, widths=tuple(quantizations.get(n) for n in names),
                   accelerator=accelerator)

    def _width(self, name: str) -> Quantization:
        return next(q for q in self.widths if q.name == name)

    @property
    def needed(self) -> str:
        """The TOSA specification its quantizations need (``TOSA-1.0+INT+int16``), on any accelerator."""
        return combined_spec(q.spec for q in (self.quantization, *self.widths))

    @property
    def spec(self) -> str:
        """The TOSA specification the variant lowers with: what its quantizations need, on its accelerator."""
        return self.accelerator.spec(self.needed)

    @property
    def plain(self) -> bool:
        """The default quantization with no overrides: the graph ``analyze`` decides on at tfa (the accelerator's
        own quantizer's, on an NPU: its tfa graph is kept apart, ``stages.tfa_key``)."""
        return self.quantization.name == DEFAULT and self.quantization.builtin and not self.nodes

    @property
    def tfa_key(self) -> str:
        """Under which name the target keeps the tfa graph this plan's quantizer folds on (``stages.tfa_graph_for``):
        ``tfa`` for the default accelerator, ``tfa@NAME`` for another (its quantizer's passes may differ)."""
        return "tfa" if not self.accelerator.costs else f"tfa@{self.accelerator.name}"

    @property
    def identity(self) -> tuple:
        over = tuple((n, v if v == FLOAT else self._width(v).identity) for n, v in self.nodes)
        # On an NPU the accelerator names the specification: a result read back needs no Arm backend imported.
        spec = self.spec if not self.accelerator.costs else self.needed
        return (self.quantization.identity, spec, digest(over) if over else "") + (
            (self.accelerator.identity,) if self.accelerator.costs else ())  # tosa-int: the keys of before

    def quantizer(self):
        """The accelerator's quantizer for this plan (``TOSAQuantizer``, ``EthosUQuantizer``): the global config,
        and each override's nodes."""
        quantizer = self.accelerator.quantizer(self.spec, self.quantization.build())
        for value in sorted({v for _, v in self.nodes}):
            config = None if value == FLOAT else self._width(value).build()
            quantizer.set_node_finder(config, _tagged_nodes(value))
        return quantizer

    def tag(self, graph_module) -> None:
        """Mark the override's nodes in ``graph_module`` (a private copy about to be prepared)."""
        wanted = dict(self.nodes)
        if not wanted:
            return
        for node in graph_module.graph.nodes:
            if node.name in wanted:
                node.meta[OVERRIDE_META] = wanted[node.name]


def _tagged_nodes(value: str):
    """A quantizer ``NodeFinder`` for the nodes tagged ``value`` (its base class is the quantizer's)."""
    class TaggedNodes(_executorch.node_finder_class()):
        def find_nodes(self, model):
            return (n for n in model.graph.nodes if n.meta.get(OVERRIDE_META) == value)

        def __repr__(self) -> str:
            return f"TaggedNodes({value})"

    return TaggedNodes()


def resolve_overrides(target, pairs: tuple[tuple[str, str], ...], label: str) -> tuple[tuple[str, str], ...]:
    """The exported program's node names each override key reaches; a key that names nothing is
    one line naming the variant and what the key may be."""
    if not pairs:
        return ()
    graph = target.exported.graph
    ops = {n.name: n for n in graph.nodes if n.op == "call_function"}
    by_site = None
    nodes: dict[str, str] = {}
    for key, value in pairs:
        if key in ops:
            reached = [key]
        else:
            if by_site is None:
                by_site = _site_nodes(target)
            reached = (by_site.get(key) or [n for n, node in ops.items() if _in_module(node, key)]
                       or [n for n, aligned in _aligned_ids(target).items() if aligned == key and n in ops])
        if not reached:
            raise InspectorError(
                f"variant {label}: override {quoted(key)} names nothing in {target.name}; give a node name, "
                "a module path, a site id (see analyze) or a node id (see attribution)")
        for name in reached:
            nodes[name] = value
    return tuple(sorted(nodes.items()))


def _site_nodes(target) -> dict[str, list[str]]:
    """Site ids and tfa-stage node names -> the exported program's names of the same nodes
    (the mul for a site id; the site's mul or conv for its names at tfa). Site ids are the
    analysis's (``_sites/graph.py``'s ``site_ids``: module path and source line, the same at every stage)."""

    aten = candidates(target.exported.graph)
    by_id = {sid: c for sid, c in zip(site_ids(aten), aten)}
    out: dict[str, list[str]] = {sid: [c.mul.name] for sid, c in by_id.items()}
    try:
        tfa = candidates(stage_graph_of(target, "tfa").graph_module.graph)
    except InspectorError:
        tfa = []
    for sid, c in zip(site_ids(tfa), tfa):
        if sid in by_id:
            out.setdefault(c.mul.name, [by_id[sid].mul.name])
            out.setdefault(c.conv.name, [by_id[sid].conv.name])
    return out


def _aligned_ids(target) -> dict[str, str]:
    """Attribution's aligned node ids (``root:mul``) by exported node name."""

    return aligned_ids(target.exported)[0]


def _in_module(node, path: str) -> bool:
    stack = node.meta.get("nn_module_stack") or {}
    return any(isinstance(v, tuple) and v and _module_path(v[0]) == path for v in stack.values())


def _module_path(fqn: str) -> str:
    """``L['self'].blocks[0].conv`` or ``blocks.0.conv`` as ``blocks.0.conv``."""
    path = re.sub(r"^L\['self'\]\.?", "", str(fqn))
    return re.sub(r"\[(\d+)\]", r".\1", path).strip(".")
