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

Another memory mode or system config is written into the name, as ExecuTorch's ``EthosUCompileSpec`` takes
them: ``ethos-u85-256:Dedicated_Sram`` (the target, its memory mode), ``ethos-u55-128:Shared_Sram:
Ethos_U55_Deep_Embedded`` (and a system config). Every name that takes an accelerator takes these (``compare``,
``advise``, ``sweep``, the CLI, the widget); ``accelerators.get`` builds one on first use, checked against
Vela's own config file, and its name is the canonical one (the settings ExecuTorch would choose anyway are
left out: ``ethos-u85-256:Sram_Only`` is ``ethos-u85-256``). A user registers another configuration by name
(``inspector.accelerators.register(Accelerator(...))``); an accelerator travels to workers as its fields
(plain data).
"""

from __future__ import annotations

import configparser
import os
from dataclasses import dataclass, field

from .._base import codec as _codec
from .._base.cache import BoundedCache
from .._base.data import read_str
from .._base.registry import Named, Registry
from .._doors import executorch as _executorch, vela as _vela
from .._base.errors import InspectorError, quoted
from .._base.formats import compiler
from . import measure as _measure
from .records import Cost

INT = "TOSA-1.0+INT"
DEFAULT = "tosa-int"
SETTINGS = ":"  # separates a target from its memory mode and system config: ethos-u85-256:Dedicated_Sram
FORM = "TARGET:MEMORY_MODE[:SYSTEM_CONFIG] (e.g. ethos-u85-256:Dedicated_Sram)"

# Vela's configuration of each accelerator (its clock and TOSA specification read from ExecuTorch's spec and
# Vela's config file), made once per (accelerator, system config, memory mode).
_CONFIGS = BoundedCache(32, "accelerator configurations")
# The memory modes and system configs Vela takes for each target (a picker's choices), read once per target.
_SETTINGS = BoundedCache(16, "accelerator settings")


@dataclass(frozen=True, eq=False, kw_only=True)
class Accelerator(Named):
    """One compile target of a variant: the generic TOSA INT profile, or an Ethos-U configuration. Records hold
    the accelerator itself; ``str(accelerator)`` is its name (what their JSON writes), and it equals its name."""

    # a user registers Accelerator("u55-deep", "what it is", npu=...) (docs/cost.md): name and help stay positional
    name: str = field(kw_only=False)  # what users type: --accelerator NAME, compare(accelerator=NAME)
    help: str = field(repr=False, kw_only=False)  # one line: what it is
    npu: str | None = None  # Vela's --accelerator-config ("ethos-u55-128"); None: no NPU, no cost
    system_config: str | None = None  # a section of Vela's config file (None: ExecuTorch's default for the NPU)
    memory_mode: str | None = None  # likewise
    builtin: bool = False  # registered by the inspector (kept from being replaced)

    @property
    def stand_in(self) -> bool:
        """Read from a file by name only: an accelerator this process does not know (``accelerator_named``)."""
        return self.help == STAND_IN

    @property
    def costs(self) -> bool:
        """Its lowered program is priced by Vela (an Ethos-U); ``tosa-int`` has no cost."""
        return self.npu is not None

    @property
    def identity(self) -> tuple:
        """What results lowered for it depend on (the name alone would not say which system config); on an NPU the
        installed Vela's version too: a cost another Vela made is never read for this one."""
        return (self.name, self.npu, self.system_config, self.memory_mode) + (
            (f"vela {_vela.version()}",) if self.costs else ())

    def vela(self) -> _vela.VelaConfig:
        """Vela's configuration of this accelerator, as ExecuTorch's EthosUCompileSpec builds it."""
        if not self.costs:
            raise InspectorError(f"the accelerator {quoted(self.name)} is not an NPU: it has no Vela configuration")
        return _CONFIGS.get_or_compute((self.npu, self.system_config, self.memory_mode),
                                       lambda: _vela.vela_config(self.npu, self.system_config, self.memory_mode))

    @property
    def compiler(self) -> str:
        """The compiler settings its cycles are made under, in the line ``Cost.compiler`` writes
        (``Vela 5.1.0 · ethos-u85-256 · Ethos_U85_SYS_DRAM_Mid · Sram_Only``; "" on ``tosa-int``)."""
        if not self.costs:
            return ""
        config = self.vela()
        return compiler(config.vela_version, config.accelerator, config.system_config, config.memory_mode)

    def settings(self) -> tuple[tuple[str, ...], tuple[str, ...]]:
        """(memory modes, system configs) Vela's config file offers for this NPU's target, each with ExecuTorch's
        default of the other (what a picker offers; ``((), ())`` on ``tosa-int``)."""
        return _SETTINGS.get_or_compute(self.npu, lambda: _vela.settings(self.npu)) if self.costs else ((), ())

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
        return (f"{self.name} (Vela {config.vela_version}, {config.system_config}, {config.memory_mode}, "
                f"{config.clock_hz / 1e6:g} MHz; cycles are Vela's estimates)")


def _checked(accelerator: Accelerator) -> Accelerator:
    if not isinstance(accelerator, Accelerator):
        raise InspectorError(f"an accelerator is an inspector.Accelerator, got a {type(accelerator).__name__}")
    if not accelerator.name or any(ch in accelerator.name for ch in ",@ \n" + SETTINGS):
        raise InspectorError(f"an accelerator's name is one word without ',', '@', ':' or spaces, got "
                             f"{quoted(accelerator.name)} (':' writes a target's settings: {FORM})")
    if accelerator.npu is not None and accelerator.npu not in _vela.ACCELERATORS:
        raise InspectorError(f"unknown Ethos-U configuration {quoted(accelerator.npu)}; Vela accepts: "
                             f"{', '.join(_vela.ACCELERATORS)}")
    return accelerator


# The accelerators a name with settings made (ethos-u85-256:Dedicated_Sram), by the name as written.
_WRITTEN = BoundedCache(64, "accelerators with settings")


def _with_settings(name: str) -> Accelerator | None:
    """The accelerator ``TARGET:MEMORY_MODE[:SYSTEM_CONFIG]`` names (None for a name without ':'), checked by
    Vela's own config file and ExecuTorch's EthosUCompileSpec (one line listing the settings Vela takes there)."""
    if SETTINGS not in name:
        return None
    return _WRITTEN.get_or_compute(name, lambda: _settle(name))


def _settle(name: str) -> Accelerator:
    target, _, rest = name.partition(SETTINGS)
    mode, _, system = rest.partition(SETTINGS)
    if not mode or SETTINGS in system or rest.endswith(SETTINGS):
        raise InspectorError(f"an accelerator with settings is written {FORM}; got {quoted(name)}")
    if target not in _vela.ACCELERATORS:
        raise InspectorError(f"{quoted(target)} takes no memory mode or system config: it is not an Ethos-U target; "
                             f"choose one of: {', '.join(_vela.ACCELERATORS)}")
    _named_in_config(target, mode, system)  # a name Vela's file does not have: one line in a second, not after seconds
    config = _vela.vela_config(target, system or None, mode)  # raises the one line naming what Vela takes
    default = _vela.vela_config(target)  # ExecuTorch's own choice for the target
    if (config.system_config, config.memory_mode) == (default.system_config, default.memory_mode):
        return accelerators.entry(target)  # the same configuration has one name, and one store entry
    system = config.system_config if config.system_config != default.system_config else None
    written = SETTINGS.join([target, config.memory_mode] + ([system] if system else []))
    return Accelerator(name=written, help=f"{target} with the memory mode {config.memory_mode} and the system config "
                                f"{config.system_config}: numbers on the TOSA reference model, cost from Vela",
                       npu=target, system_config=system, memory_mode=config.memory_mode)


# The config file ExecuTorch's EthosUCompileSpec hands Vela unless told another (its ``config_ini``; the inspector
# never names another): a test checks it against the flags the compile spec really builds.
CONFIG_FILE = "Arm/vela.ini"


def _named_in_config(target: str, mode: str, system: str) -> None:
    """Refuse a memory mode or system config that Vela's config file does not name at all, reading the file alone.

    Whether Vela takes a name with the target (and ExecuTorch's default of the other setting) is checked next, by
    ExecuTorch's compile spec and Vela's own reading: seconds of imports. A misspelt name needs neither, so it is
    one line before them. Without Vela the check is left to that door, which says how to install it."""
    try:
        # lazy: Vela's own constant, from a light module (no backend behind it)
        from ethosu.vela.architecture_features import CONFIG_FILES_PATH
    except (ImportError, AttributeError):
        return
    parser = configparser.ConfigParser()
    if not parser.read(os.path.join(CONFIG_FILES_PATH, *CONFIG_FILE.split("/"))):
        return
    for name, kind, words in ((mode, "Memory_Mode", "memory mode"), (system, "System_Config", "system config")):
        named = [s.split(".", 1)[1] for s in parser.sections() if s.startswith(kind + ".")]
        if name and named and name not in named:
            raise InspectorError(f"unknown {words} {quoted(name)} for {target}: Vela's config file ({CONFIG_FILE}) "
                                 f"names only: {', '.join(named)}")


# The one registry of accelerators: every entry point (CLI, widget, compare, sweep) offers what it holds, and takes
# a target with its settings written after it (``_with_settings``).
accelerators = Registry("accelerator", make=_checked, line=lambda a: a.help, fixed=lambda a: a.builtin,
                        missing=_with_settings, hint=f"or {FORM}")

TOSA_INT = accelerators.register(Accelerator(
    name=DEFAULT, help=f"the generic {INT} profile the TOSA reference model runs (+int16, +int4 as a quantization needs): "
             "numbers, no cost", builtin=True))
FP = "TOSA-1.0+FP"


@dataclass(frozen=True, eq=False, kw_only=True)
class FloatProfile(Accelerator):
    """The backend's float TOSA profile: its flow quantizes nothing, so the pass folds inside the lowering call
    (``analyze(stage="lowering", accelerator="tosa-fp")``); there are no quantized numbers to compare."""

    def spec(self, needed: str) -> str:
        return FP

    def quantizer(self, spec: str, config):
        raise InspectorError(f"{self.name} is the float {FP} profile: nothing is quantized for it, so it has no "
                             "quantized numbers to compare; use it with analyze(stage='lowering'), and compare on "
                             "tosa-int or an Ethos-U")

    def text(self) -> str:
        return f"{self.name} (the float {FP} profile: nothing quantized; no cost)"


TOSA_FP = accelerators.register(FloatProfile(
    name="tosa-fp", help=f"the float {FP} profile, nothing quantized: where its flow folds (stage lowering) and PR #21234's "
               "structural guard can act; no quantized numbers, no cost", builtin=True))
_KINDS = {"u55": "Ethos-U55 (Cortex-M systems)", "u65": "Ethos-U65 (Cortex-A and -M systems)",
          "u85": "Ethos-U85 (Cortex-A and -M systems)"}
for _name in _vela.ACCELERATORS:
    _family, _macs = _name.split("-")[1], _name.split("-")[2]
    accelerators.register(Accelerator(
        name=_name, help=f"Arm {_KINDS[_family]} with {_macs} MACs per cycle, ExecuTorch's default system config and memory "
               "mode: numbers on the TOSA reference model, cost from Vela", npu=_name, builtin=True))


def accelerator_of(value) -> Accelerator:
    """The accelerator ``value`` names (None: ``tosa-int``, every verb's default; a target with settings,
    ``ethos-u85-256:Dedicated_Sram``, too), or an ``Accelerator`` as it is, checked. Looking one up never
    registers it: a user's accelerator is registered only by ``inspector.accelerators.register``."""
    if value is None:
        return TOSA_INT
    if isinstance(value, Accelerator):
        # one made from its name (ethos-u85-256:Dedicated_Sram) was checked as it was made
        return value if SETTINGS in value.name else _checked(value)
    return accelerators.get(value)


STAND_IN = "an accelerator this process does not know (read from a file)"


def accelerator_named(name: str | Accelerator) -> Accelerator:
    """The accelerator a file or a record names (a saved comparison, session, sweep or advice): the registered one (a
    target with settings made again), or, for a name this process cannot make (an accelerator a user registered in
    another process), an unregistered stand-in that says so (``stand_in``): it reads and shows; it has no NPU, so
    nothing is lowered for it or priced. An ``Accelerator`` is returned as it is (not registered)."""
    if isinstance(name, Accelerator):
        return name
    if not isinstance(name, str):  # a reader's one line names what it was reading
        raise TypeError(f"expected an accelerator's name, got {type(name).__name__}")
    try:
        return accelerators.get(name)
    except InspectorError:
        return Accelerator(name=name, help=STAND_IN)


# a record's accelerator is written by its name, and read back as the registered one (or a stand-in)
_codec.register(Accelerator, write=lambda a: a.name, read=lambda v: accelerator_named(read_str(v)))


__all__ = ["Accelerator", "DEFAULT", "FORM", "TOSA_INT", "accelerator_named", "accelerator_of", "accelerators"]
