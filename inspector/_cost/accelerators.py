"""Accelerators: what a variant is lowered for, in one registry (``inspector.accelerators``).

An ``Accelerator`` is a small frozen record the flow asks, never a name it branches on: which TOSA
specification a quantization lowers with there, which quantizer ExecuTorch quantizes with for it, and
whether (and how) its lowered program is priced.

- ``tosa-int`` (the default): the generic ``TOSA-1.0+INT`` profile (``+int16``, ``+int4`` as a quantization
  needs them), ``TOSAQuantizer``, no cost: what the inspector always lowered for.
- an Ethos-U configuration Vela accepts (``ethos-u55-128``, ``ethos-u85-256``, ...): quantized with
  ``EthosUQuantizer(EthosUCompileSpec(...))`` and lowered with the TOSA specification that spec derives
  (``TOSA-1.0+INT+int16+int4+u55``), exactly the flatbuffer ExecuTorch's ``EthosUBackend`` hands Vela; the
  TOSA reference model runs it, and Vela compiles the same flatbuffer for the cost (``measure.py``). Its
  system config and memory mode are ExecuTorch's defaults unless the accelerator names others.

A user registers another configuration by name (``inspector.accelerators.register(Accelerator(...))``);
an accelerator travels to workers as its fields (plain data).
"""

from __future__ import annotations

from dataclasses import dataclass

from .._base.cache import BoundedCache
from .._base.registry import Registry
from .._doors import executorch as _executorch, vela as _vela
from .._base.errors import InspectorError, quoted
from . import measure as _measure
from .records import Cost

INT = "TOSA-1.0+INT"
DEFAULT = "tosa-int"

# Vela's configuration of each accelerator (its clock and TOSA specification read from ExecuTorch's spec and
# Vela's config file), made once per (accelerator, system config, memory mode).
_CONFIGS = BoundedCache(32, "accelerator configurations")


@dataclass(frozen=True)
class Accelerator:
    """One compile target of a variant: the generic TOSA INT profile, or an Ethos-U configuration."""

    name: str  # what users type: --accelerator NAME, compare(accelerator=NAME)
    help: str  # one line: what it is
    npu: str | None = None  # Vela's --accelerator-config ("ethos-u55-128"); None: no NPU, no cost
    system_config: str | None = None  # a section of Vela's config file (None: ExecuTorch's default for the NPU)
    memory_mode: str | None = None  # likewise
    builtin: bool = False  # registered by the inspector (kept from being replaced)

    @property
    def costs(self) -> bool:
        """Its lowered program is priced by Vela (an Ethos-U); ``tosa-int`` has no cost."""
        return self.npu is not None

    @property
    def identity(self) -> tuple:
        """What results lowered for it depend on (the name alone would not say which system config)."""
        return (self.name, self.npu, self.system_config, self.memory_mode)

    def vela(self) -> _vela.VelaConfig:
        """Vela's configuration of this accelerator, as ExecuTorch's EthosUCompileSpec builds it."""
        if not self.costs:
            raise InspectorError(f"the accelerator {quoted(self.name)} is not an NPU: it has no Vela configuration")
        return _CONFIGS.get_or_compute(self.identity[1:],
                                       lambda: _vela.vela_config(self.npu, self.system_config, self.memory_mode))

    def spec(self, needed: str) -> str:
        """The TOSA specification a quantization that needs ``needed`` (``TOSA-1.0+INT+int16``) lowers with here:
        the quantization's own on ``tosa-int``; on an NPU, the one its compile spec derives, which must have
        every extension the quantization needs."""
        if not self.costs:
            return needed
        spec = self.vela().tosa_spec
        missing = [e for e in needed.split("+")[2:] if e not in spec.split("+")[2:]]
        if missing:
            raise InspectorError(f"{self.name} lowers with {spec}, which has no {'+'.join(missing)} extension that "
                                 f"this quantization needs ({needed}); choose another quantization or accelerator")
        return spec

    def quantizer(self, spec: str, config):
        """The quantizer ExecuTorch quantizes with for this accelerator, its global config ``config``."""
        if not self.costs:
            return _executorch.tosa_int_quantizer(spec, config)
        return _vela.ethos_u_quantizer(self.npu, self.system_config, self.memory_mode, config)

    def cost(self, lowered, names, outside: int = 0) -> Cost | None:
        """Vela's estimate of ``lowered`` (a program lowered for this accelerator, with locations), its rows mapped
        to the sites by ``names`` (node name -> (site id, role)); None on ``tosa-int``, which has no cost."""
        return _measure.measure(lowered, self, names, outside) if self.costs else None

    def text(self) -> str:
        """The accelerator in words: its name and, on an NPU, Vela's system config, memory mode and clock."""
        if not self.costs:
            return f"{self.name} (the generic {INT} profile; no cost)"
        config = self.vela()
        return (f"{self.name} ({config.system_config}, {config.memory_mode}, {config.clock_hz / 1e6:g} MHz; "
                f"cycles are Vela's estimates)")


def _checked(accelerator: Accelerator) -> Accelerator:
    if not isinstance(accelerator, Accelerator):
        raise InspectorError(f"an accelerator is an inspector.Accelerator, got a {type(accelerator).__name__}")
    if not accelerator.name or any(ch in accelerator.name for ch in ",@ \n"):
        raise InspectorError(f"an accelerator's name is one word without ',', '@' or spaces, got {quoted(accelerator.name)}")
    if accelerator.npu is not None and accelerator.npu not in _vela.ACCELERATORS:
        raise InspectorError(f"unknown Ethos-U configuration {quoted(accelerator.npu)}; Vela accepts: "
                             f"{', '.join(_vela.ACCELERATORS)}")
    return accelerator


# The one registry of accelerators: every entry point (CLI, widget, compare, sweep) offers what it holds.
accelerators = Registry("accelerator", make=_checked, line=lambda a: a.help, fixed=lambda a: a.builtin)

TOSA_INT = accelerators.register(Accelerator(
    DEFAULT, f"the generic {INT} profile the TOSA reference model runs (+int16, +int4 as a quantization needs): "
             "numbers, no cost", builtin=True))
_KINDS = {"u55": "Ethos-U55 (Cortex-M systems)", "u65": "Ethos-U65 (Cortex-A and -M systems)",
          "u85": "Ethos-U85 (Cortex-A and -M systems)"}
for _name in _vela.ACCELERATORS:
    _family, _macs = _name.split("-")[1], _name.split("-")[2]
    accelerators.register(Accelerator(
        _name, f"Arm {_KINDS[_family]} with {_macs} MACs per cycle, ExecuTorch's default system config and memory "
               "mode: numbers on the TOSA reference model, cost from Vela", npu=_name, builtin=True))


def accelerator_of(value) -> Accelerator:
    """The accelerator ``value`` names (None: ``tosa-int``), or an ``Accelerator`` as it is (registered)."""
    if value is None:
        return TOSA_INT
    if isinstance(value, Accelerator):
        return accelerators.register(value, replace=True)
    return accelerators.get(value)


__all__ = ["Accelerator", "DEFAULT", "TOSA_INT", "accelerator_of", "accelerators"]
