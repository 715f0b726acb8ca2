"""Vela on a variant's lowered program: one ``Cost`` from every TOSA delegate, its rows mapped to the sites.

The program was lowered with the accelerator's TOSA specification and with each operator's location
(``_doors/tosa.lower(locations=True)``): Vela compiles each delegate's flatbuffer exactly as ExecuTorch's
``EthosUBackend`` would hand it over, and every row it reports is traced, through its source operator's
location, to the node of the exported program it comes from, and from there to a site's conv or mul.
"""

from __future__ import annotations

from typing import Mapping

from .._doors import vela as _vela
from .records import MEMORIES, Cost, Layer


def measure(lowered, accelerator, names: Mapping[str, tuple[str, str]], outside: int = 0) -> Cost:
    """Vela's estimate of ``lowered`` (an edge program manager) on ``accelerator`` (an NPU ``Accelerator``).

    ``names``: exported-program node name -> (site id, "conv" or "mul"), the sites the rows are mapped to;
    ``outside``: how many nodes run outside the delegate (Vela's cycles do not count them: said in a note)."""
    config = accelerator.vela()
    layers: list[Layer] = []
    totals = {"cycles": 0, "npu_cycles": 0, "npu_ops": 0, "cpu_ops": 0, "macs": 0}
    traffic = dict.fromkeys(MEMORIES, 0)
    used = dict.fromkeys(MEMORIES, 0)
    seconds = 0.0
    modules = _vela.delegate_modules(lowered)
    for index, module in enumerate(modules):
        run = _vela.compile(bytes(module.processed_bytes), config)
        ops = _vela.tosa_ops(module)
        seconds += run.seconds
        totals["cycles"] += run.total_cycles
        totals["npu_cycles"] += run.npu_cycles
        totals["npu_ops"] += run.npu_ops
        totals["cpu_ops"] += run.cpu_ops
        totals["macs"] += run.macs
        for memory, n in run.traffic_bytes().items():
            traffic[memory] += n
        for memory, n in run.memory_used_bytes().items():
            used[memory] = max(used[memory], n)  # the delegates run one after another: the largest is the peak
        for row in run.layers:
            node = _vela.layer_source(row, ops)
            site, role = names.get(node, (None, None)) if node is not None else (None, None)
            layers.append(Layer(index, row.name, row.operator, row.target, row.op_cycles, row.npu_cycles,
                                (("sram", row.sram_cycles), ("dram", row.dram_cycles),
                                 ("on_chip_flash", row.on_chip_flash_cycles),
                                 ("off_chip_flash", row.off_chip_flash_cycles)),
                                row.macs, node, site, role))
    notes = []
    if not modules:
        notes.append("nothing was delegated: every operation runs on the CPU, and Vela has nothing to price")
    if outside:
        notes.append(f"{outside} node{'s' * (outside != 1)} of the program run outside the delegate (on the CPU): "
                     "Vela's cycles do not count them")
    unmapped = sum(1 for layer in layers if layer.node is None)
    if unmapped:
        notes.append(f"{unmapped} of Vela's {len(layers)} rows could not be traced to a node of the model")
    return Cost(accelerator.name, config.accelerator, config.system_config, config.memory_mode, config.clock_hz,
                totals["cycles"], totals["npu_cycles"], totals["npu_ops"], totals["cpu_ops"], totals["macs"],
                tuple(traffic.items()), tuple(used.items()), tuple(layers), len(modules), seconds, tuple(notes),
                config.vela_version)


__all__ = ["measure"]
