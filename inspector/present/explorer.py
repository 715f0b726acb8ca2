"""Whole graphs in Google's Model Explorer: the stage graph plus the inspector's node overlays.

Graphviz (``render``) is right for a site and its neighbourhood; a real network of thousands of
nodes needs a viewer built for them. ``to_model_explorer`` writes, into a folder, files Model
Explorer loads as they are:

- ``graph.json``: the stage graph as Model Explorer's graph JSON, converted by its own PyTorch
  adapter (node ids are the FX node names);
- ``fold_decisions.json``: node data for every site's conv and mul: its decision and first reason;
- ``state_path.json``: the nodes on a site's path to carried state, and the state writes;
- ``error_sqnr_db.json``: with ``errors``, each node's measured SQNR (dB) from an attribution;
- ``cycles.json``: with ``cost``, Vela's cycles per node; when ``cost`` is ``inspector.layers``'s per-layer table,
  also ``error_entering_db.json``, the dB that enter at each layer (a layer on the CPU says Vela does not count it);
- ``manifest.json``: what is where, and the command that opens it.

``serve(folder)`` starts Model Explorer on them (``python -m inspector explorer ... --serve``).
Model Explorer is an optional extra: ``pip install 'fold-inspector[explorer]'``.
"""

from __future__ import annotations

import importlib.util
import socket
import subprocess
import time
import urllib.request
import json
import math
import os
import shlex
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .._sites import graph as _graph
from .._base import quiet as _quiet
from .._base.codec import Record
from .._base.errors import InspectorError, quoted
from .._base.files import write_text
from .styles import STYLES, site_kind

MANIFEST = "manifest.json"
GRAPH_FILE = "graph.json"
DECISIONS_FILE = "fold_decisions.json"
STATE_FILE = "state_path.json"
ERROR_FILE = "error_sqnr_db.json"
CYCLES_FILE = "cycles.json"  # Vela's cycles per node, for a variant with a cost
ENTERING_FILE = "error_entering_db.json"  # per layer of inspector.layers' table, the dB entering there
INSTALL_HINT = ("pip install 'fold-inspector[explorer]' (in a checkout, make setup installs it; or: "
                "pip install ai-edge-model-explorer==0.1.34 ai-edge-model-explorer-adapter==0.2.1)")
DEFAULT_PORT = 8080
CONST_ELEMENT_LIMIT = 16  # weight values shown per constant in Model Explorer's side panel


@dataclass(frozen=True, kw_only=True)
class ExplorerFiles(Record):
    """What ``to_model_explorer`` wrote."""

    folder: Path
    graph: Path
    node_data: tuple[Path, ...]  # decisions first, then the state path, then the error layer if any
    nodes: int
    graph_id: str

    json_derived = {"command": lambda f: f.command}  # for readers: the shell command that opens them
    json_order = ("folder", "graph", "graph_id", "nodes", "node_data", "command")

    @property
    def command(self) -> str:
        """The shell command that opens these files in Model Explorer."""
        paths = ",".join(str(p) for p in self.node_data)
        return (f"model-explorer {shlex.quote(str(self.graph))} --node_data_paths={shlex.quote(paths)} "
                f"--no_open_in_browser")


def available() -> bool:
    """Whether Model Explorer (the ``explorer`` extra) is installed."""

    return importlib.util.find_spec("model_explorer") is not None


def load_model_explorer():
    if not available():
        raise InspectorError(f"Model Explorer is not installed; install it with: {INSTALL_HINT}")
    with _quiet.quiet_imports():
        import model_explorer  # lazy: Model Explorer is the optional `explorer` extra
        from model_explorer import node_data_builder
        from model_explorer.pytorch_exported_program_adapter_impl import PytorchExportedProgramAdapterImpl
        from model_explorer.utils import convert_adapter_response
    return model_explorer, node_data_builder, PytorchExportedProgramAdapterImpl, convert_adapter_response


class _GraphOnly:
    """What Model Explorer's adapter reads of an ExportedProgram, for a graph without one (tfa)."""

    example_inputs = None

    def __init__(self, graph_module) -> None:
        self.graph_module = graph_module


def graph_json(analysis, which: str = "before") -> tuple[dict, int]:
    """The stage graph (``before``) or the graph after the pass (``after``) as Model Explorer's graph
    JSON, converted by its own PyTorch adapter; and the number of nodes."""
    _, _, Adapter, convert = load_model_explorer()
    gm, _ = analysis.verdicts(which)
    program = analysis.stage_graph.program if which == "before" else analysis.after_program
    source = program if program is not None and program.graph_module is gm else _GraphOnly(gm)
    settings = {"const_element_count_limit": CONST_ELEMENT_LIMIT}
    try:
        with _quiet.captured_python():  # the adapter prints progress and warnings
            graphs = Adapter(source, settings).convert()
    except Exception as exc:  # the adapter is a third party's code: one line
        raise InspectorError(f"Model Explorer's PyTorch adapter could not convert the {analysis.stage} graph: "
                             f"{type(exc).__name__}: {exc}") from exc
    data = convert({"graphs": graphs["graphs"]})
    graph_id = f"{analysis.name} ({analysis.stage}, {which}, rule {analysis.rule.name})"
    data["graphs"][0]["id"] = graph_id
    # A graph collection: the JSON shape Model Explorer's page loads from a file path.
    return {"label": analysis.name, "graphs": data["graphs"]}, len(gm.graph.nodes)


def overlays(analysis, which: str = "before", *, errors=None, step: int | None = None, cost=None) -> dict[str, dict]:
    """Node data by file name (Model Explorer's GraphNodeData JSON, keyed by the FX node names of the
    ``which`` graph): decisions, the state path and, with ``errors`` (a variant of an attribution),
    the SQNR layer; with ``cost`` (a variant result's ``Cost``), Vela's cycles per node (every row a
    node was lowered into), or, when ``cost`` is ``inspector.layers``'s table (``Layers``), its cycles and the dB
    entering each layer. Nodes the graph does not have (a folded mul, after the pass) are left out."""

    _, ndb, _, _ = load_model_explorer()
    gm, verdicts = analysis.verdicts(which, errors=errors, step=step)
    decisions: dict[str, Any] = {}
    for s in analysis.sites:
        kind = site_kind(s)
        value = "folded" if s.folded else f"skipped: {s.reason_codes[0]}" if s.reason_codes else "skipped"
        colour = STYLES[kind]["fillcolor"]
        for name in (s.conv, s.mul):
            if name not in decisions:  # a conv shared by two sites keeps its first site's verdict
                decisions[name] = ndb.NodeDataResult(value=f"{s.id}: {value}", bgColor=colour)
    state: dict[str, Any] = {}
    writes = {w.node.name for w in _graph.state_writes(gm.graph, verdicts.signature)}
    for s in analysis.sites:
        if len(s.state_path) < 2:
            continue
        kind = "state-path" if not s.folded else "risk-path"
        for name in s.state_path:
            if name not in state or kind == "state-path":
                why = "folded: risk" if s.folded else "skipped"
                state[name] = ndb.NodeDataResult(value=f"path to carried state ({why})", bgColor=STYLES[kind]["color"])
    for name in writes:
        state[name] = ndb.NodeDataResult(value="writes carried state", bgColor=STYLES["boundary"]["fillcolor"])
    for name in verdicts.marked:
        state[name] = ndb.NodeDataResult(value="marked carried state", bgColor=STYLES["marked"]["color"])
    out = {
        DECISIONS_FILE: ndb.GraphNodeData(results=decisions, name="fold decisions"),
        STATE_FILE: ndb.GraphNodeData(results=state, name="carried state"),
    }
    if verdicts.errors:
        results = {}
        for name, record in verdicts.errors.items():
            sqnr = getattr(record, "sqnr_db", None)
            if sqnr is not None and math.isfinite(sqnr):
                results[name] = ndb.NodeDataResult(value=round(float(sqnr), 2))
        label = getattr(errors, "label", "")
        out[ERROR_FILE] = ndb.GraphNodeData(
            results=results, name=f"SQNR dB{' ' + label if label else ''}",
            gradient=[ndb.GradientItem(stop=0, bgColor="#b2182b"), ndb.GradientItem(stop=0.5, bgColor="#fee08b"),
                      ndb.GradientItem(stop=1, bgColor="#1b7837")])
    if cost is not None and hasattr(cost, "ranked"):  # inspector.layers' table: cost beside error, per layer
        out.update(_layer_overlays(ndb, gm, cost))
    elif cost is not None:
        per_node: dict[str, int] = {}
        for layer in cost.layers:
            if layer.node is not None:
                per_node[layer.node] = per_node.get(layer.node, 0) + layer.cycles
        out[CYCLES_FILE] = ndb.GraphNodeData(
            results={name: ndb.NodeDataResult(value=n) for name, n in per_node.items()},
            name=f"cycles on {cost.accelerator} (Vela's estimate; {cost.compiler})",
            gradient=[ndb.GradientItem(stop=0, bgColor="#f7fbff"), ndb.GradientItem(stop=1, bgColor="#08306b")])
    names = {n.name for n in gm.graph.nodes}
    for data in out.values():
        data.results = {name: r for name, r in data.results.items() if name in names}
    return {name: json.loads(data.to_json_string()) for name, data in out.items()}


def _layer_overlays(ndb, gm, table) -> dict[str, Any]:
    """The per-layer table's two layers: Vela's cycles and the dB entering, each on the node of ``gm`` that is the
    layer (its own name), else on the last node made from it (a stage graph decomposes some: one node carries the
    figure, so nothing is counted twice)."""
    rows = {x.node: x for x in table.layers if x.node is not None}
    at: dict[str, str] = {}
    for n in gm.graph.nodes:
        if n.name in rows:
            at[n.name] = n.name
        else:
            source = _graph.source_name(n)
            if source in rows and at.get(source) != source:
                at[source] = n.name  # the last node made from it, unless the graph has the layer itself
    cycles, entering = {}, {}
    for layer, name in at.items():
        x = rows[layer]
        where = "" if name == layer else f" ({layer})"
        if x.where == "cpu":
            cycles[name] = ndb.NodeDataResult(value=f"CPU: Vela does not count it{where}", bgColor="#bbbbbb")
        elif x.cycles is not None:
            cycles[name] = ndb.NodeDataResult(value=x.cycles)
        if x.drop_db is not None and math.isfinite(x.drop_db):
            entering[name] = ndb.NodeDataResult(value=round(float(x.drop_db), 2))
    return {
        CYCLES_FILE: ndb.GraphNodeData(
            results=cycles, name=f"cycles per layer on {table.accelerator} at {table.quantization} (Vela's estimate; "
                                 f"{table.compiler})",
            gradient=[ndb.GradientItem(stop=0, bgColor="#f7fbff"), ndb.GradientItem(stop=1, bgColor="#08306b")]),
        ENTERING_FILE: ndb.GraphNodeData(
            results=entering, name=f"dB entering (worst of {table.steps} step(s), {table.quantization})",
            gradient=[ndb.GradientItem(stop=0, bgColor="#fff5f0"), ndb.GradientItem(stop=1, bgColor="#a50f15")]),
    }


def to_model_explorer(analysis, folder: str | os.PathLike, *, errors=None, step: int | None = None,
                      which: str = "before", cost=None) -> ExplorerFiles:
    """Write the graph and its overlays into ``folder`` (created if needed); see the module doc."""

    folder = Path(folder).expanduser()
    if folder.exists() and not folder.is_dir():
        raise InspectorError(f"{quoted(str(folder))} is a file, not a folder; give a folder to write into")
    if "," in str(folder.resolve()):
        raise InspectorError(f"Model Explorer splits paths at commas; choose a folder without one "
                             f"(got {quoted(str(folder))})")
    folder.mkdir(parents=True, exist_ok=True)
    graph, nodes = graph_json(analysis, which)
    written = [write_text(folder / GRAPH_FILE, json.dumps(graph))]
    data = overlays(analysis, which, errors=errors, step=step, cost=cost)
    for name, content in data.items():
        written.append(write_text(folder / name, json.dumps(content)))
    files = ExplorerFiles(folder=folder.resolve(), graph=written[0].resolve(),
                          node_data=tuple(p.resolve() for p in written[1:]), nodes=nodes,
                          graph_id=graph["graphs"][0]["id"])
    manifest = {"graph": GRAPH_FILE, "node_data": [p.name for p in files.node_data], "graph_id": files.graph_id,
                "nodes": nodes, "sites": len(analysis.sites), "stage": analysis.stage, "rule": analysis.rule.name,
                "markers": list(analysis.markers)}
    write_text(folder / MANIFEST, json.dumps(manifest, indent=2) + "\n")
    return files


def read_manifest(folder: str | os.PathLike) -> tuple[Path, list[Path]]:
    """(graph file, node data files) of a folder ``to_model_explorer`` wrote."""
    folder = Path(folder).expanduser()
    try:
        manifest = json.loads((folder / MANIFEST).read_text())
        graph = folder / manifest["graph"]
        node_data = [folder / name for name in manifest["node_data"]]
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise InspectorError(f"{quoted(str(folder))} holds no Model Explorer export of the inspector "
                             f"({type(exc).__name__}); write one with: python -m inspector explorer TARGET --out DIR") from exc
    for path in (graph, *node_data):
        if path.resolve().parent != folder.resolve():
            raise InspectorError(f"{quoted(str(folder / MANIFEST))} names a file outside its folder; refusing it")
    return graph, node_data


def _config(graph: Path | None, node_data: list[Path]):
    """Model Explorer's config for ``graph`` and its node data files."""
    model_explorer, *_ = load_model_explorer()
    config = model_explorer.config()
    if graph is not None:
        config.add_model_from_path(str(graph))
    for path in node_data:
        config.add_node_data_from_path(str(path))
    return config


def url(port: int, host: str = "127.0.0.1", graph: Path | None = None, node_data: list[Path] = ()) -> str:
    """The page that shows ``graph`` with its node data in a Model Explorer server on ``port``."""
    return f"http://{host}:{port}/?data={_config(graph, node_data).to_url_param_value()}"


def serve(folder: str | os.PathLike, *, host: str = "127.0.0.1", port: int = DEFAULT_PORT,
          announce=print) -> None:
    """Start Model Explorer on a folder ``to_model_explorer`` wrote; blocks until Ctrl-C."""
    load_model_explorer()
    from model_explorer import server  # lazy: Model Explorer is the optional `explorer` extra

    graph, node_data = read_manifest(folder)
    check_port(host, port)
    config = _config(graph, node_data)
    server._check_new_version = lambda: None  # no network call from a local viewer
    announce(f"Model Explorer: {url(port, host, graph, node_data)}")
    with _quiet.captured_python():  # its own banner repeats the URL; the one above is the answer
        server.start(host=host, port=port, config=config, no_open_in_browser=True)


def check_port(host: str, port: int) -> None:
    """Fail in one line if nothing can listen on ``host:port`` (Model Explorer would wait forever)."""

    if isinstance(port, bool) or not isinstance(port, int) or not 0 < port < 65536:
        raise InspectorError(f"port must be an integer from 1 to 65535, got {quoted(port)}")
    with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET) as probe:
        try:
            probe.bind((host, port))
        except OSError as exc:
            raise InspectorError(f"cannot serve Model Explorer on {host}:{port} ({exc.strerror or exc}); "
                                 f"choose another port with --port") from None


def free_port() -> int:
    """A port nothing listens on now."""

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def serve_command(folder: str | os.PathLike, port: int, host: str = "127.0.0.1") -> list[str]:
    """The command that runs ``serve`` in a process of its own (the widget's button uses it)."""
    code = "import sys; from inspector.present.explorer import serve; serve(sys.argv[1], host=sys.argv[2], port=int(sys.argv[3]))"
    return [sys.executable, "-c", code, str(folder), host, str(port)]


def start(folder: str | os.PathLike, *, port: int | None = None, host: str = "127.0.0.1",
          timeout: float = 120.0):
    """Run ``serve`` on ``folder`` in a process of its own and wait until it answers (it imports
    torch first: a few seconds). Returns ``(process, port)``; the server's output goes to
    ``server.log`` in the folder. Stop it with ``process.terminate()``."""

    folder = Path(folder)
    read_manifest(folder)  # a folder without an export fails here, in one line
    port = port or free_port()
    log_path = folder / "server.log"
    with open(log_path, "wb") as log:  # the child keeps its own descriptor; nobody here must drain a pipe
        process = subprocess.Popen(serve_command(folder, port, host), stdout=log, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + timeout
    while True:
        if process.poll() is not None:
            lines = log_path.read_text(errors="replace").strip().splitlines()
            raise InspectorError("Model Explorer did not start: " + (lines[-1] if lines else "it exited"))
        try:
            with urllib.request.urlopen(f"http://{host}:{port}/check_health", timeout=1) as answer:
                if answer.read() == b"model_explorer_ok":
                    return process, port
        except OSError:
            pass
        if time.monotonic() > deadline:
            process.terminate()
            raise InspectorError(f"Model Explorer did not answer within {timeout:.0f} s; see {log_path}")
        time.sleep(0.25)
