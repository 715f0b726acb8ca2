"""The cost of one variant on one accelerator, as Vela estimates it: frozen records and their JSON.

``Cost`` holds Vela's summary over every TOSA delegate of the variant's lowered program (total and NPU
cycles, operations, traffic and memory per memory, the time at the configuration's clock) and one
``Layer`` per row of Vela's per-layer report, each mapped back to the node of the exported program it
comes from and, where it is one, to a site (its conv or its mul). Vela's figures are estimates by
Arm's compiler for that configuration (its own word), not measurements on silicon: every text says so.
Nothing here runs Vela: ``measure.py`` fills them.
"""

from __future__ import annotations

from dataclasses import dataclass

from .._base.formats import compiler
from .._base.data import (dataframe, json_float, read_fields as _fields, read_float as _float, read_int as _int,
                          read_list as _list, read_str as _str)

MEMORIES = ("sram", "dram", "on_chip_flash", "off_chip_flash")
ESTIMATE = "Vela's estimate (Arm's compiler for the configuration), not a measurement on silicon"


@dataclass(frozen=True)
class Layer:
    """One row of Vela's per-layer report: one NPU (or CPU) operation, and what of the model it comes from."""

    delegate: int  # which TOSA delegate of the program (in call order)
    name: str  # its output tensor in the TOSA program (or Vela's own "#N" for a part of an op it split)
    operator: str  # the TOSA operator Vela compiled: Conv2D, Mul, Transpose, ...
    target: str  # NPU, or CPU for an operation Vela passes through
    cycles: int  # its cycles in the total (the larger of its NPU cycles and its memory access cycles)
    npu_cycles: int  # of which the NPU computes
    access_cycles: tuple[tuple[str, int], ...]  # per memory (MEMORIES), the cycles spent reading and writing it
    macs: int  # multiply-accumulates
    node: str | None  # the exported program's node it was lowered from (None: not known)
    site: str | None = None  # the site that node is part of (its conv or its mul), if any
    role: str | None = None  # "conv" or "mul" of that site

    def to_dict(self) -> dict:
        return {"delegate": self.delegate, "name": self.name, "operator": self.operator, "target": self.target,
                "cycles": self.cycles, "npu_cycles": self.npu_cycles, "access_cycles": dict(self.access_cycles),
                "macs": self.macs, "node": self.node, "site": self.site, "role": self.role}

    @classmethod
    def from_dict(cls, d: dict) -> "Layer":
        _fields(d, cls)
        return cls(_int(d["delegate"]), _str(d["name"]), _str(d["operator"]), _str(d["target"]), _int(d["cycles"]),
                   _int(d["npu_cycles"]), _pairs(d["access_cycles"]), _int(d["macs"]), _str(d["node"], True),
                   _str(d["site"], True), _str(d["role"], True))


@dataclass(frozen=True)
class Cost:
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
    traffic: tuple[tuple[str, int], ...]  # bytes read and written per memory (MEMORIES)
    memory_used: tuple[tuple[str, int], ...]  # peak bytes used per memory (the largest delegate's)
    layers: tuple[Layer, ...]  # every row of every delegate, in order
    delegates: int  # TOSA delegates priced
    vela_seconds: float = 0.0  # Vela's own wall time
    notes: tuple[str, ...] = ()  # what the reader must know: nodes outside the delegate, rows not mapped
    vela_version: str = ""  # the Vela that compiled it ("5.1.0"; "" in a cost written before it was kept)

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

    def to_dict(self) -> dict:
        return {"accelerator": self.accelerator, "npu": self.npu, "vela_version": self.vela_version,
                "system_config": self.system_config, "memory_mode": self.memory_mode, "compiler": self.compiler,
                "clock_hz": json_float(self.clock_hz), "cycles": self.cycles,
                "npu_cycles": self.npu_cycles, "npu_ops": self.npu_ops, "cpu_ops": self.cpu_ops, "macs": self.macs,
                "inference_seconds": json_float(self.inference_seconds), "traffic": dict(self.traffic),
                "memory_used": dict(self.memory_used), "delegates": self.delegates,
                "vela_seconds": json_float(self.vela_seconds), "notes": list(self.notes), "estimate": ESTIMATE,
                "layers": [layer.to_dict() for layer in self.layers]}

    @classmethod
    def from_dict(cls, d: dict) -> "Cost":
        """Read back ``to_dict()`` (as the result store does), checking every field; a cost written before the
        Vela version was kept reads with none (``""``)."""
        if isinstance(d, dict):  # written before the Vela version was kept: no version, no compiler line
            d = {"vela_version": "", "compiler": "", **d}
        _fields(d, cls, extra={"inference_seconds", "estimate", "compiler"})
        return cls(_str(d["accelerator"]), _str(d["npu"]), _str(d["system_config"]), _str(d["memory_mode"]),
                   _float(d["clock_hz"]), _int(d["cycles"]), _int(d["npu_cycles"]), _int(d["npu_ops"]),
                   _int(d["cpu_ops"]), _int(d["macs"]), _pairs(d["traffic"]), _pairs(d["memory_used"]),
                   tuple(Layer.from_dict(x) for x in _list(d["layers"])), _int(d["delegates"]),
                   _float(d["vela_seconds"]), tuple(_str(n) for n in _list(d["notes"])),
                   _str(d["vela_version"]))

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
