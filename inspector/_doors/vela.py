"""The one door to Arm's NPU compiler Vela (ethos-u-vela): the cost of a TOSA program on an Ethos-U.

ExecuTorch's Ethos-U backend lowers to TOSA with the accelerator's TOSA specification and hands
the flatbuffer to ``vela.main`` with the flags ``EthosUCompileSpec`` builds. This door builds the
same spec (``vela_config``), runs Vela in-process on a flatbuffer in a private folder that is always
removed (``compile``), and reads what Vela reports: its summary row and one row per NPU operation.
``delegates`` finds the TOSA flatbuffers of a program lowered with the TOSA partitioner, and
``tosa_ops`` / ``layer_nodes`` say which node of the exported program each TOSA operator, and so
each of Vela's rows, comes from. Every name that may move is listed in ``REQUIRED`` (ExecuTorch's),
``VELA_REQUIRED`` and ``SCHEMA_REQUIRED`` and checked once before the first answer, as the other
doors do; imports are lazy. docs/stack-facts.md has what was measured.
"""

from __future__ import annotations

import configparser
import contextlib
import copy
import csv
import functools
import io
import json
import os
import re
import sys
import tempfile
import time
from dataclasses import dataclass
from typing import Any

from . import executorch as _executorch
from .._base import quiet as _quiet
from .._base.errors import InspectorError, first_line, listing, quoted

SUPPORTED = "5.1.0"
_INSTALL = f"pip install ethos-u-vela=={SUPPORTED} (see pyproject.toml)"
_SCHEMA_SUPPORTED = "2026.8.0"
_SCHEMA_INSTALL = f"pip install tosa-tools=={_SCHEMA_SUPPORTED} (see pyproject.toml)"

# The Ethos-U configurations both EthosUCompileSpec (by its u55/u65/u85 defaults) and Vela accept:
# Vela's own Accelerator enum, as ExecuTorch's aot_arm_compiler lists them.
ACCELERATORS = ("ethos-u55-32", "ethos-u55-64", "ethos-u55-128", "ethos-u55-256", "ethos-u65-256", "ethos-u65-512",
                "ethos-u85-128", "ethos-u85-256", "ethos-u85-512", "ethos-u85-1024", "ethos-u85-2048")

_ETHOSU_SPEC = "executorch.backends.arm.ethosu.compile_spec"
_ARM_SPEC = "executorch.backends.arm.common.arm_compile_spec"
_TOSA_SPEC = "executorch.backends.arm.tosa.compile_spec"
_TOSA_BACKEND = "executorch.backends.arm.tosa.backend"
_LOWERED = "executorch.exir.lowered_backend_module"
_ARCH = "ethosu.vela.architecture_features"

REQUIRED: tuple[tuple[str, str, tuple[str, ...]], ...] = (
    (_ETHOSU_SPEC, "EthosUCompileSpec", ()),
    ("executorch.backends.arm.quantizer", "EthosUQuantizer", ("set_global", "transform_for_annotation")),
    (_ARM_SPEC, "ArmCompileSpec", ("DebugMode",)),
    (_TOSA_SPEC, "TosaCompileSpec", ("_from_list", "_to_list", "dump_intermediate_artifacts_to", "dump_debug_info")),
    (_TOSA_BACKEND, "TOSABackend", ("preprocess",)),
    (_LOWERED, "LoweredBackendModule", ("processed_bytes", "original_module", "compile_specs", "backend_id")),
)
VELA_REQUIRED: tuple[tuple[str, str, tuple[str, ...]], ...] = (
    ("ethosu.vela.vela", "main", ()),
    (_ARCH, "ArchitectureFeatures", ("MAX_BLOCKDEP",)),
    (_ARCH, "Accelerator", ("member_list",)),
    (_ARCH, "CONFIG_FILES_PATH", ()),
    ("ethosu.vela.errors", "VelaError", ()),
)
# tosa-tools' flatbuffer schema (Vela's own ethosu.vela.tosa is an older one: its op numbers differ).
SCHEMA_REQUIRED: tuple[tuple[str, str, tuple[str, ...]], ...] = (
    ("tosa.TosaGraph", "TosaGraph", ("GetRootAs", "Regions")),
    ("tosa.Op", "Op", ("CONV2D", "MUL", "RESCALE")),
    ("tosa.TosaOperator", "TosaOperator", ("Location",)),
)

_BACKEND_ID = "TOSABackend"  # a TOSA-partitioned delegate: its processed_bytes are the flatbuffer itself


@functools.cache
def _ready() -> None:
    _executorch.check_once(REQUIRED)
    try:
        import ethosu.vela  # noqa: F401  (fail here, clearly, not deep inside a compile)
    except ImportError as exc:
        raise InspectorError(f"Vela is not available ({exc}); install it with: {_INSTALL}") from None
    _executorch.check_once(VELA_REQUIRED, SUPPORTED, "ethos-u-vela", _INSTALL)
    _executorch.check_once(SCHEMA_REQUIRED, _SCHEMA_SUPPORTED, "tosa-tools", _SCHEMA_INSTALL)


def _get(module: str, name: str):
    _ready()
    return getattr(_executorch._import(module), name)


# ---------------------------------------------------------------- configuration


@dataclass(frozen=True, kw_only=True)
class VelaConfig:
    """One Ethos-U configuration, as ExecuTorch's EthosUCompileSpec builds it for Vela."""

    accelerator: str  # "ethos-u55-128"
    system_config: str  # a section of Vela's config file: "Ethos_U55_High_End_Embedded"
    memory_mode: str  # "Shared_Sram"
    clock_hz: float  # the system config's core clock, as Vela reads it
    tosa_spec: str  # the TOSA specification ExecuTorch lowers for it: "TOSA-1.0+INT+int16+int4+u55"
    flags: tuple[str, ...]  # Vela's command-line flags from the compile spec (no output folder, no network)
    macs_per_cycle: int  # the accelerator's MACs per cycle (all cores)
    vela_version: str = ""  # the installed Vela that reads the config and compiles for it ("5.1.0")


def version() -> str:
    """The installed Vela's version (the compiler of every cost), read from its package's metadata."""
    return _executorch.installed_version("ethos-u-vela")


def vela_config(accelerator: str, system_config: str | None = None, memory_mode: str | None = None) -> VelaConfig:
    """The configuration ExecuTorch would compile for (its defaults where a name is not given). A system config or
    memory mode that Vela's config file does not have, or that Vela refuses with the other, is one line listing
    the ones it takes there."""
    if accelerator not in ACCELERATORS:
        raise InspectorError(f"unknown Ethos-U accelerator {accelerator!r}; choose one of: {listing(ACCELERATORS)}")
    spec = _get(_ETHOSU_SPEC, "EthosUCompileSpec")(accelerator, system_config=system_config, memory_mode=memory_mode)
    flags = tuple(spec.compiler_flags)
    options = dict(f[2:].split("=", 1) for f in flags if f.startswith("--") and "=" in f)
    config, system, mode = options["config"], options["system-config"], options["memory-mode"]
    systems, modes = sections(config, "System_Config"), sections(config, "Memory_Mode")
    if system not in systems:
        raise InspectorError(f"unknown system config {quoted(system)} for {accelerator}; with {mode} Vela takes "
                             f"({config}): {_working(accelerator, config, systems, [mode], 0)}")
    if mode not in modes:
        raise InspectorError(f"unknown memory mode {quoted(mode)} for {accelerator}; with {system} Vela takes "
                             f"({config}): {_working(accelerator, config, [system], modes, 1)}")
    arch = _architecture(accelerator, config, system, mode)
    if isinstance(arch, str):  # name the settings that do work, both ways unless the user chose the system config
        works = [f"with {system} it takes: {_working(accelerator, config, [system], modes, 1)}"]
        if system_config is None:
            works.append(f"{mode} works with: {_working(accelerator, config, systems, [mode], 0)}")
        raise InspectorError(f"Vela cannot configure {accelerator} with {system} and {mode}: {arch}; "
                             + "; ".join(works))
    return VelaConfig(accelerator=accelerator, system_config=system, memory_mode=mode, clock_hz=float(arch.core_clock),
                      tosa_spec=str(spec.tosa_spec), flags=flags,
                      macs_per_cycle=int(arch.num_macs_per_cycle) * int(arch.ncores), vela_version=version())


def sections(config: str, kind: str) -> tuple[str, ...]:
    """The ``kind`` sections (``System_Config``, ``Memory_Mode``) of Vela's config file ``config`` ("Arm/vela.ini",
    one of its bundled files), in the file's order, read as Vela reads it (configparser)."""
    parser = configparser.ConfigParser()
    parser.read(_config_path(config))
    return tuple(s.split(".", 1)[1] for s in parser.sections() if s.startswith(kind + "."))


def settings(accelerator: str) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(memory modes, system configs) of Vela's config file that Vela takes for ``accelerator``: the memory modes
    with ExecuTorch's default system config, the system configs with its default memory mode (a picker's choices)."""
    default = vela_config(accelerator)
    config = dict(f[2:].split("=", 1) for f in default.flags if f.startswith("--") and "=" in f)["config"]
    return (_taken(accelerator, config, [default.system_config], sections(config, "Memory_Mode"), 1),
            _taken(accelerator, config, sections(config, "System_Config"), [default.memory_mode], 0))


def _taken(accelerator: str, config: str, systems, modes, which: int) -> tuple[str, ...]:
    """The system configs (``which`` 0) or memory modes (1) of ``systems`` x ``modes`` that Vela configures
    ``accelerator`` with."""
    return tuple((s, m)[which] for s in systems for m in modes
                 if not isinstance(_architecture(accelerator, config, s, m), str))


def _working(accelerator: str, config: str, systems, modes, which: int) -> str:
    """``_taken``, listed whole (an error names every choice)."""
    return listing(_taken(accelerator, config, systems, modes, which), 1000) or "none"


def ethos_u_quantizer(accelerator: str, system_config: str | None, memory_mode: str | None, config):
    """``EthosUQuantizer`` for an Ethos-U configuration, as ExecuTorch quantizes for it, with a global config."""
    spec = _get(_ETHOSU_SPEC, "EthosUCompileSpec")(accelerator, system_config=system_config, memory_mode=memory_mode)
    quantizer = _get("executorch.backends.arm.quantizer", "EthosUQuantizer")(spec)
    quantizer.set_global(config if config is not None else _executorch.symmetric_quantization_config())
    return quantizer


def _architecture(accelerator: str, config: str, system_config: str, memory_mode: str):
    """Vela's own reading of its config file (the same class ``vela.main`` builds), or why it refuses them (a line)."""
    features = _get(_ARCH, "ArchitectureFeatures")
    path = _config_path(config)
    try:
        with _quiet.captured_python():  # it prints "Info: Changing const_mem_area ..." for the u85 configs
            return features(vela_config_files=[path], accelerator_config=accelerator, system_config=system_config,
                            memory_mode=memory_mode, max_blockdep=features.MAX_BLOCKDEP, verbose_config=False,
                            arena_cache_size=None)
    except _get("ethosu.vela.errors", "VelaError") as exc:
        return _why(exc)  # the caller names the settings that do work


def _config_path(config: str) -> str:
    """Where Vela reads ``config`` from: "Arm/vela.ini" is one of its bundled files."""
    path = config
    if not os.path.isabs(config) and len(os.path.normpath(config).split(os.sep)) == 2:
        path = os.path.join(_get(_ARCH, "CONFIG_FILES_PATH"), config)
    if not os.access(path, os.R_OK):
        raise InspectorError(f"Vela's config file {config} is not there ({path})")
    return path


def _why(exc: BaseException) -> str:
    """One line of a Vela error: a VelaError's own text (its ``str`` is a quoted repr), else the first line."""
    return first_line(Exception(exc.error_msg)) if getattr(exc, "error_msg", None) else first_line(exc)


# ---------------------------------------------------------------- one compile


@dataclass(frozen=True, kw_only=True)
class VelaLayer:
    """One row of Vela's per-layer report: one operation after Vela's own fusing (a conv and its RESCALE are one)."""

    name: str  # its output tensor: a TOSA tensor, or Vela's own ("#95") for a part it split an op into
    operator: str  # Vela's name of the TOSA operator it came from: Conv2D, Mul, Transpose, ...
    tosa_index: int | None  # that operator's position in the flatbuffer's main block (Vela's source_id - 1)
    target: str  # NPU, or CPU for what Vela passes through
    op_cycles: int  # its cycles in the total: the larger of its NPU cycles and its memory access cycles
    npu_cycles: int
    sram_cycles: int  # access cycles per memory
    dram_cycles: int
    on_chip_flash_cycles: int
    off_chip_flash_cycles: int
    macs: int
    staging_bytes: int  # Vela's "Staging Usage"
    mac_utilisation: float  # percent of the accelerator's MACs over its op cycles (NaN where Vela gives none)


@dataclass(frozen=True, kw_only=True)
class VelaRun:
    """What one Vela compile of one TOSA flatbuffer reported."""

    config: VelaConfig
    summary: tuple[tuple[str, str], ...]  # the summary CSV's one row, (column, value) in Vela's order
    layers: tuple[VelaLayer, ...]  # the per-layer rows, in Vela's order
    seconds: float  # wall time of vela.main
    log: str  # what Vela printed

    def summary_row(self) -> dict[str, str]:
        """The summary row as a dict (Vela's column names, its strings)."""
        return dict(self.summary)

    def value(self, column: str) -> float:
        """One number of the summary row (``cycles_total``, ``sram_total_bytes``, ...)."""
        row = self.summary_row()
        if column not in row:
            raise InspectorError(f"Vela's summary has no {column!r}; it has: {listing(row)}")
        return float(row[column])

    @property
    def total_cycles(self) -> int:
        """``cycles_total``: what the inference takes, memory stalls included."""
        return int(self.value("cycles_total"))

    @property
    def npu_cycles(self) -> int:
        return int(self.value("cycles_npu"))

    @property
    def passes(self) -> int:
        """``passes_after_fusing``: NPU and CPU operations, a cascade counted once."""
        return int(self.value("passes_after_fusing"))

    @property
    def operations(self) -> int:
        """``passes_before_fusing``: Vela's NPU and CPU operations (its "NPU operators" plus "CPU operators")."""
        return int(self.value("passes_before_fusing"))

    @property
    def cpu_ops(self) -> int:
        """Operations Vela passes through to the CPU (its rows with target CPU)."""
        return sum(layer.target == "CPU" for layer in self.layers)

    @property
    def npu_ops(self) -> int:
        """Vela's "NPU operators". Not its NPU rows: an op chained into another (u85 runs a conv's output
        TRANSPOSE in the conv) keeps a row of 0 cycles, and u55 splits a TRANSPOSE into two rows."""
        return self.operations - self.cpu_ops

    @property
    def inference_seconds(self) -> float:
        """``inference_time``: total cycles at the config's clock."""
        return self.value("inference_time")

    @property
    def macs(self) -> int:
        return int(self.value("nn_macs"))

    def traffic_bytes(self) -> dict[str, int]:
        """Bytes read and written per memory (sram, dram, on_chip_flash, off_chip_flash)."""
        return {m: int(self.value(f"{m}_total_bytes")) for m in _MEMORIES}

    def memory_used_bytes(self) -> dict[str, int]:
        """Peak bytes used per memory (Vela reports KiB)."""
        return {m: round(self.value(f"{m}_memory_used") * 1024) for m in _MEMORIES}


_MEMORIES = ("sram", "dram", "on_chip_flash", "off_chip_flash")
_LAYER_COLUMNS = {"Original Operator": "operator", "Target": "target", "Op Cycles": "op_cycles", "NPU": "npu_cycles",
                  "SRAM AC": "sram_cycles", "DRAM AC": "dram_cycles", "OnFlash AC": "on_chip_flash_cycles",
                  "OffFlash AC": "off_chip_flash_cycles", "MAC Count": "macs", "Staging Usage": "staging_bytes",
                  "Util% (MAC)": "mac_utilisation", "Name": "name"}
# Added to the compile spec's flags: the per-layer CSV, and the debug database whose perf table gives
# each row's source_id (the per-layer CSV leaves it out). Neither changes a cycle (docs/stack-facts.md).
# Never --verbose-all, which ExecuTorch adds when its backend logger is at INFO: kilobytes of log.
_REPORT_FLAGS = ("--verbose-performance", "--enable-debug-db")


def compile(tosa_flatbuffer: bytes, config: VelaConfig) -> VelaRun:  # the door's verb, as Vela's own
    """Vela on one TOSA flatbuffer, in-process, as ExecuTorch's Ethos-U backend calls it; its report."""
    main = _get("ethosu.vela.vela", "main")
    with tempfile.TemporaryDirectory(prefix="inspector-vela-") as folder:
        network = os.path.join(folder, "out.tosa")  # "out", as ExecuTorch names it: the outputs are out_*
        with open(network, "wb") as f:
            f.write(tosa_flatbuffer)
        output = os.path.join(folder, "output")
        args = [*config.flags, *_REPORT_FLAGS, f"--output-dir={output}", network]
        limit = sys.getrecursionlimit()  # vela.main sets the process's limit to its own default (1000)
        python = io.StringIO()
        started = time.perf_counter()
        native = _quiet.Captured()
        try:
            with _quiet.captured_fds() as native, contextlib.redirect_stdout(python), contextlib.redirect_stderr(python):
                status = main(args)
        except (Exception, SystemExit) as exc:  # regor raises RuntimeError, its CLI SystemExit, its config VelaError
            why = _last_line(python.getvalue() + native.text) if isinstance(exc, SystemExit) else _why(exc)
            raise InspectorError(f"Vela could not compile the TOSA flatbuffer for {config.accelerator}: {why}") from exc
        finally:
            sys.setrecursionlimit(limit)
        seconds = time.perf_counter() - started
        log = python.getvalue() + native.text
        if status:
            raise InspectorError(f"Vela could not compile the TOSA flatbuffer for {config.accelerator} "
                                 f"(exit status {status}): {_last_line(log)}")
        summary = _read_summary(output)
        layers = _read_layers(output)
    return VelaRun(config=config, summary=summary, layers=layers, seconds=seconds, log=log)


def _last_line(text: str) -> str:
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return lines[-1] if lines else "it printed nothing"


def _read_summary(output: str) -> tuple[tuple[str, str], ...]:
    names = [n for n in os.listdir(output) if n.startswith("out_summary_") and n.endswith(".csv")]
    if len(names) != 1:
        raise InspectorError(f"Vela wrote {len(names)} summary files, not one: {listing(sorted(os.listdir(output)))}")
    with open(os.path.join(output, names[0]), newline="") as f:
        rows = list(csv.reader(f))
    if len(rows) != 2 or len(rows[0]) != len(rows[1]):
        raise InspectorError(f"Vela's summary {names[0]} is not one header and one row")
    return tuple(zip(rows[0], rows[1]))


def _read_layers(output: str) -> tuple[VelaLayer, ...]:
    path = os.path.join(output, "out_per-layer.csv")
    if not os.path.exists(path):  # Vela writes none when nothing reached its perf database
        return ()
    with open(path, newline="") as f:
        rows = list(csv.DictReader(f))
    perf = _debug_table(os.path.join(output, "out_debug.xml"), "perf")
    sources = [r.get("source_id") for r in perf] if len(perf) == len(rows) else [None] * len(rows)
    if any(p.get("name") != r.get("Name") for p, r in zip(perf, rows)):
        sources = [None] * len(rows)  # the two tables are the same rows in the same order, or no source is trusted
    layers = []
    for row, source in zip(rows, sources):
        values: dict[str, Any] = {}
        for column, field in _LAYER_COLUMNS.items():
            text = row.get(column, "")
            if field in ("name", "operator", "target"):
                values[field] = text
            elif field == "mac_utilisation":
                values[field] = _float(text)
            else:
                number = _float(text)
                values[field] = int(number) if number == number else 0  # NaN: Vela had no figure for it
        index = int(source) - 1 if source and source.lstrip("-").isdigit() and int(source) > 0 else None
        layers.append(VelaLayer(tosa_index=index, **values))
    return tuple(layers)


def _float(text: str) -> float:
    try:
        return float(text)
    except ValueError:
        return float("nan")


def _debug_table(path: str, table: str) -> list[dict[str, str]]:
    """One table of Vela's debug database (an XML file of CSV blocks); empty if it is not there."""
    if not os.path.exists(path):
        return []
    with open(path, encoding="utf-8") as f:
        text = f.read()
    found = re.search(rf'<table name="{re.escape(table)}">\s*<!\[CDATA\[\n(.*?)\]\]>', text, re.S)
    return list(csv.DictReader(io.StringIO(found.group(1)))) if found else []


# ---------------------------------------------------------------- the flatbuffers of a lowered program


def delegate_modules(lowered) -> list:
    """The TOSA delegates of a program lowered with the TOSA partitioner (an EdgeProgramManager or
    ExportedProgram), in the order the program calls them."""
    _ready()
    program = lowered.exported_program() if hasattr(lowered, "exported_program") else lowered
    graph_module = program.graph_module
    modules = []
    for node in graph_module.graph.nodes:
        if node.op == "call_function" and "executorch_call_delegate" in str(node.target):
            module = getattr(graph_module, node.args[0].target)
            if module.backend_id == _BACKEND_ID:  # an Ethos-U delegate holds Vela's command stream, not TOSA
                modules.append(module)
    return modules


def delegates(lowered) -> list[bytes]:
    """The TOSA flatbuffer of each TOSA delegate of a lowered program: what Vela compiles."""
    return [bytes(m.processed_bytes) for m in delegate_modules(lowered)]


@dataclass(frozen=True, kw_only=True)
class TosaOp:
    """One operator of a TOSA flatbuffer's main block and the node it was lowered from."""

    index: int  # position in the block (Vela's source_id - 1 counts without CONST_SHAPE: layer_source)
    op: str  # tosa-tools' name: CONV2D, RESCALE, MUL, TRANSPOSE, CONST, ...
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    node: str | None  # the node of the backend's graph it was serialized from (None: no location, e.g. a CONST)
    source: str | None  # the node of the exported program it comes from (first ancestor of its from_node chain)
    module_path: str  # the module that produced that node ("" at the root or unknown)
    stack_trace: str  # the node's stack trace as torch recorded it ("" when none)


def tosa_ops(delegate) -> tuple[TosaOp, ...]:
    """The operators of a TOSA delegate (a lowered module, or a flatbuffer), each with the node it comes
    from: read from the flatbuffer when it was lowered with ``DebugMode.TOSA`` (any operator has a location;
    an operator the backend's own passes made from no node has none, and lowering again would not give it
    one); else, for a lowered module, from the same delegate lowered again with it (the same flatbuffer plus
    locations)."""
    _ready()
    data = bytes(delegate) if isinstance(delegate, (bytes, bytearray)) else bytes(delegate.processed_bytes)
    ops = _read_ops(data)
    computed = [o for o in ops if o.op != "CONST"]
    if isinstance(delegate, (bytes, bytearray)) or not computed or any(o.node is not None for o in computed):
        return ops
    located = _read_ops(_with_locations(delegate))
    if [(o.op, o.inputs, o.outputs) for o in located] != [(o.op, o.inputs, o.outputs) for o in ops]:
        raise InspectorError("lowering the delegate again with locations did not give the same TOSA operators; "
                             "lower with ArmCompileSpec.DebugMode.TOSA to have them in the flatbuffer")
    return located


def layer_nodes(delegate) -> dict[str, str]:
    """Each TOSA tensor an operator computes -> the node of the exported program it comes from."""
    return {out: o.source for o in tosa_ops(delegate) if o.source is not None for out in o.outputs}


def layer_source(layer: VelaLayer, ops: tuple[TosaOp, ...], sources: dict[int, str] | None = None) -> str | None:
    """The exported program's node one of Vela's rows comes from: its source operator, when that operator is the
    kind the row names, else the operator that computes the row's tensor. Vela numbers the operators (its
    ``source_id`` - 1) without the main block's CONST_SHAPE operators, which its TOSA reader reads as shapes, not
    operations (on Silero's program, 148 of 425). ``sources``: operator index -> node (default: each operator's own
    ``source``)."""
    if sources is None:
        sources = {o.index: o.source for o in ops if o.source is not None}
    numbered = [o for o in ops if o.op != "CONST_SHAPE"]
    if layer.tosa_index is not None and 0 <= layer.tosa_index < len(numbered):
        op = numbered[layer.tosa_index]
        if _kind(op.op) == _kind(layer.operator):
            return sources.get(op.index)
    producer = next((o for o in ops if layer.name in o.outputs), None)
    return sources.get(producer.index) if producer is not None else None


def _kind(name: str) -> str:
    return re.sub(r"[^a-z0-9]", "", name.lower())  # Vela's "DepthwiseConv2D" is TOSA's "DEPTHWISE_CONV2D"


def _with_locations(module) -> bytes:
    """``module``'s delegate lowered again from its own edge program and compile specs, with each
    operator's node, from_node chain and stack trace written into the flatbuffer (DebugMode.TOSA)."""
    spec = _get(_TOSA_SPEC, "TosaCompileSpec")._from_list(list(module.compile_specs))
    mode = _get(_ARM_SPEC, "ArmCompileSpec").DebugMode.TOSA
    backend = _get(_TOSA_BACKEND, "TOSABackend")
    program = copy.deepcopy(module.original_module)  # the backend's passes rewrite the graph they are given
    with tempfile.TemporaryDirectory(prefix="inspector-tosa-") as folder, \
            _quiet.quiet_loggers(*_executorch.ARM_PASS_LOGGERS), _executorch.shared_provenance():
        spec.dump_intermediate_artifacts_to(folder).dump_debug_info(mode)  # DebugMode needs a folder; it gets a .tosa
        try:
            return bytes(backend.preprocess(program, spec._to_list()).processed_bytes)
        except Exception as exc:  # one line for the user; the cause stays attached
            raise InspectorError(f"lowering the delegate again with locations failed: {first_line(exc)}") from exc


def _read_ops(data: bytes) -> tuple[TosaOp, ...]:
    graph = _get("tosa.TosaGraph", "TosaGraph").GetRootAs(data, 0)
    if not graph.RegionsLength() or not graph.Regions(0).BlocksLength():
        raise InspectorError("the TOSA flatbuffer has no main block")
    block = graph.Regions(0).Blocks(0)  # the main block; control flow's regions are not Vela's rows
    # tosa-tools' op numbers -> names: the schema's ``Op`` class is a namespace of ints
    names = {v: k for k, v in vars(_get("tosa.Op", "Op")).items() if not k.startswith("_") and isinstance(v, int)}
    ops = []
    for i in range(block.OperatorsLength()):
        operator = block.Operators(i)
        node, source, module_path, stack_trace = _location(operator)
        ops.append(TosaOp(index=i, op=names.get(operator.Op(), str(operator.Op())),
                          inputs=tuple(operator.Inputs(j).decode() for j in range(operator.InputsLength())),
                          outputs=tuple(operator.Outputs(j).decode() for j in range(operator.OutputsLength())),
                          node=node, source=source, module_path=module_path, stack_trace=stack_trace))
    return tuple(ops)


def _location(operator) -> tuple[str | None, str | None, str, str]:
    """(node, source, module path, stack trace) from an operator's DebugMode.TOSA location, if it has one."""
    location = operator.Location()
    text = location.Text() if location is not None else None
    if not text:
        return None, None, "", ""
    try:
        info = json.loads(text.decode("utf-8", "replace"))
    except ValueError:
        return None, None, "", ""
    node = (info.get("aten_info") or {}).get("node_name")
    torch_info = info.get("torch_info") or {}
    trace = torch_info.get("node_trace")
    stack = torch_info.get("nn_module_stack")
    path = ""
    if isinstance(stack, dict) and stack:
        path = re.sub(r"^L\['self'\]\.?|^L__self__\.?", "", str(list(stack.values())[-1][0]))
    lines = torch_info.get("stack_trace")
    return node, _first_ancestor(trace), path, "\n".join(lines) if isinstance(lines, list) else ""


def _first_ancestor(trace) -> str | None:
    """The end of the from_node chain along each node's last source, as the inspector's ``source_name``
    follows it. The debug hook flattens the tree depth first, last source first: the chain is the run
    of entries each of whose parent is the entry before it."""
    if not isinstance(trace, list) or not trace:
        return None
    chain = [trace[0]]
    for entry in trace[1:]:
        if entry.get("parent_graph_id") != chain[-1].get("graph_id"):
            break
        chain.append(entry)
    return chain[-1].get("name")
