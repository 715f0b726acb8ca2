"""The cost of one variant on one accelerator, as Vela estimates it: frozen records and their JSON.

``Cost`` holds Vela's summary over every TOSA delegate of the variant's lowered program (total and NPU
cycles, operations, traffic and memory per memory, the time at the configuration's clock) and one
``Layer`` per row of Vela's per-layer report, each mapped back to the node of the exported program it
comes from and, where it is one, to a site (its conv or its mul). Vela's figures are estimates by
Arm's compiler for that configuration (its own word), not measurements on silicon: every text says so.
Nothing here runs Vela: ``measure.py`` fills them.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from .._base.formats import compiler
from .._base.codec import Record, codec
from .._base.data import dataframe, read_int as _int

MEMORIES = ("sram", "dram", "on_chip_flash", "off_chip_flash")
ESTIMATE = "Vela's estimate (Arm's compiler for the configuration), not a measurement on silicon"


@dataclass(frozen=True, kw_only=True)
class Layer(Record):
    """One row of Vela's per-layer report: one NPU (or CPU) operation, and what of the model it comes from."""

    delegate: int  # which TOSA delegate of the program (in call order)
    name: str  # its output tensor in the TOSA program (or Vela's own "#N" for a part of an op it split)
    operator: str  # the TOSA operator Vela compiled: Conv2D, Mul, Transpose, ...
    target: str  # NPU, or CPU for an operation Vela passes through
    cycles: int  # its cycles in the total (the larger of its NPU cycles and its memory access cycles)
    npu_cycles: int  # of which the NPU computes
    # per memory (MEMORIES), the cycles spent reading and writing it
    access_cycles: tuple[tuple[str, int], ...] = field(metadata=codec(read=lambda v: _pairs(v)))
    macs: int  # multiply-accumulates
    node: str | None  # the exported program's node it was lowered from (None: not known)
    site: str | None = None  # the site that node is part of (its conv or its mul), if any
    role: str | None = None  # "conv" or "mul" of that site


@dataclass(frozen=True, kw_only=True)
class Cost(Record):
    """Vela's estimate for one variant on one Ethos-U configuration (every delegate of its program together)."""

    accelerator: str  # the accelerator's name (inspector.accelerators)
    npu: str  # Vela's --accelerator-config
    system_config: str  # Vela's system config and memory mode (sections of its config file)
    memory_mode: str
    clock_hz: float  # the configuration's core clock
    cycles: int  # total cycles, as Vela's summary counts them (memory stalls included), over every delegate
    npu_cycles: int
    npu_ops: int  # Vela's NPU operations (its "NPU operators")
    cpu_ops: int  # operations Vela passes through to the CPU
    macs: int
    # bytes read and written per memory (MEMORIES)
    traffic: tuple[tuple[str, int], ...] = field(metadata=codec(read=lambda v: _pairs(v)))
    # peak bytes used per memory (the largest delegate's)
    memory_used: tuple[tuple[str, int], ...] = field(metadata=codec(read=lambda v: _pairs(v)))
    layers: tuple[Layer, ...]  # every row of every delegate, in order
    delegates: int  # TOSA delegates priced
    vela_seconds: float = 0.0  # Vela's own wall time
    notes: tuple[str, ...] = ()  # what the reader must know: nodes outside the delegate, rows not mapped
    vela_version: str = ""  # the Vela that compiled it ("5.1.0"; "" in a cost written before it was kept)

    # for readers: the compiler line, the time at the clock and what the figures are (a cost written before the
    # Vela version was kept has no version and no compiler line: both read as "")
    json_derived = {"compiler": lambda c: c.compiler, "inference_seconds": lambda c: c.inference_seconds,
                    "estimate": lambda c: ESTIMATE}
    json_order = ("accelerator", "npu", "vela_version", "system_config", "memory_mode", "compiler", "clock_hz",
                  "cycles", "npu_cycles", "npu_ops", "cpu_ops", "macs", "inference_seconds", "traffic", "memory_used",
                  "delegates", "vela_seconds", "notes", "estimate", "layers")

    @property
    def compiler(self) -> str:
        """The compiler settings of these cycles in one short line, as every table that shows them says it:
        ``Vela 5.1.0 · ethos-u85-256 · Ethos_U85_SYS_DRAM_Mid · Sram_Only``."""
        return compiler(self.vela_version, self.npu, self.system_config, self.memory_mode)

    @property
    def inference_seconds(self) -> float:
        """The total at the configuration's clock."""
        return self.cycles / self.clock_hz if self.clock_hz else float("nan")

    def site_cycles(self, site: str, role: str | None = None) -> int:
        """The cycles of the rows that come from ``site`` (its ``role`` only, if given: "conv" or "mul")."""
        return sum(layer.cycles for layer in self.layers if layer.site == site and (role is None or layer.role == role))

    def sites(self) -> tuple[str, ...]:
        """The sites some row comes from, in the order of the rows."""
        return tuple(dict.fromkeys(layer.site for layer in self.layers if layer.site is not None))


    def to_dataframe(self, kind: str = "layers"):
        """A pandas DataFrame: ``"layers"``, one row per Vela row (the columns of ``to_dict()["layers"]``)."""
        return dataframe(kind, {"layers": lambda: [layer.to_dict() for layer in self.layers]})

    def __repr__(self) -> str:
        return (f"<Cost {self.accelerator}: {self.cycles:,} cycles ({self.npu_ops} NPU ops, "
                f"{self.inference_seconds * 1e6:.1f} us at {self.clock_hz / 1e6:g} MHz; {self.compiler})>")


def _pairs(v) -> tuple[tuple[str, int], ...]:
    """A per-memory object, in the order of MEMORIES (a store writes JSON with its keys sorted)."""
    if not isinstance(v, dict) or not set(v) <= set(MEMORIES):
        raise TypeError("expected an object of per-memory numbers")
    return tuple((m, _int(v[m])) for m in MEMORIES if m in v)


__all__ = ["Cost", "ESTIMATE", "Layer", "MEMORIES"]
