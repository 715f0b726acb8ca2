"""Vela on a variant's lowered program: one ``Cost`` from every TOSA delegate, its rows mapped to the sites.

The program was lowered with the accelerator's TOSA specification and with each operator's location
(``_doors/tosa.lower(locations=True)``): Vela compiles each delegate's flatbuffer exactly as ExecuTorch's
``EthosUBackend`` would hand it over, and every row it reports is traced, through its source operator's
location, to the node of the exported program it comes from, and from there to a site's conv or mul.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from .._base.lineage import source_name
from .._doors import vela as _vela
from .records import MEMORIES, Cost, Layer


def _sources(module, ops) -> dict[int, str]:
    """Operator index -> the exported program's node it comes from.

    An operator's location names it (its from_node chain's first ancestor). The TABLE that the backend's
    ``InsertTableOpsPass`` makes for a sigmoid, tanh or pow has no from_node: its location names only itself. It is
    traced through its table's constant, named after the edge node it replaces (``b_<node>_table_constant``, that
    node's own chain read from the delegate's edge program); a table shared by several nodes (``_common``) goes to
    the one node its output feeds, else to the node its first computed input comes from."""
    edge = _edge_sources(module)
    sources = {o.index: o.source for o in ops if o.source is not None and o.source != o.node}
    producer = {out: o for o in ops for out in o.outputs}
    consumers: dict[str, list] = {}
    for o in ops:
        for name in o.inputs:
            consumers.setdefault(name, []).append(o)
    for o in ops:
        if o.index in sources or o.op != "TABLE":  # any other operator without a chain stays untraced (said in a note)
            continue
        found = None
        for name in o.inputs:
            match = _TABLE.fullmatch(name)
            if match and not match.group(2):  # a table shared by several nodes ("_common") names only the first
                found = edge.get(match.group(1))
        if found is None:
            after = {sources.get(c.index) for c in consumers.get(o.outputs[0], ()) if o.outputs}
            before = [sources.get(producer[n].index) for n in o.inputs
                      if n in producer and producer[n].op not in ("CONST", "CONST_SHAPE")]
            found = next(iter(after)) if len(after) == 1 and None not in after else (before[0] if before else None)
        if found is not None:
            sources[o.index] = found
    return sources


_TABLE = re.compile(r"b_(.+?)_table_constant(_common)?")


def _edge_sources(module) -> dict[str, str]:
    """Each node of a delegate's edge program -> the exported program's node it comes from."""
    program = getattr(module, "original_module", None)
    graph = getattr(getattr(program, "graph_module", None), "graph", None)
    if graph is None:
        return {}
    return {n.name: source_name(n) for n in graph.nodes if n.op == "call_function"}


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
        sources = _sources(module, ops)
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
            node = _vela.layer_source(row, ops, sources)
            site, role = names.get(node, (None, None)) if node is not None else (None, None)
            layers.append(Layer(delegate=index, name=row.name, operator=row.operator, target=row.target,
                                cycles=row.op_cycles, npu_cycles=row.npu_cycles,
                                access_cycles=(("sram", row.sram_cycles), ("dram", row.dram_cycles),
                                 ("on_chip_flash", row.on_chip_flash_cycles),
                                 ("off_chip_flash", row.off_chip_flash_cycles)),
                                macs=row.macs, node=node, site=site, role=role))
    notes = []
    if not modules:
        notes.append("nothing was delegated: every operation runs on the CPU, and Vela has nothing to price")
    if outside:
        notes.append(f"{outside} node{'s' * (outside != 1)} of the program run outside the delegate (on the CPU): "
                     "Vela's cycles do not count them")
    unmapped = sum(1 for layer in layers if layer.node is None)
    if unmapped:
        notes.append(f"{unmapped} of Vela's {len(layers)} rows could not be traced to a node of the model")
    return Cost(accelerator=accelerator.name, npu=config.accelerator, system_config=config.system_config,
                memory_mode=config.memory_mode, clock_hz=config.clock_hz,
                cycles=totals["cycles"], npu_cycles=totals["npu_cycles"], npu_ops=totals["npu_ops"],
                cpu_ops=totals["cpu_ops"], macs=totals["macs"],
                traffic=tuple(traffic.items()), memory_used=tuple(used.items()), layers=tuple(layers),
                delegates=len(modules), vela_seconds=seconds, notes=tuple(notes),
                vela_version=config.vela_version)


__all__ = ["measure"]
