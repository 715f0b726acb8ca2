"""Whole graphs in Google's Model Explorer: files it loads, keyed by FX node names, with the
inspector's overlays; the CLI, the widget's button, and the real page in a browser."""

from __future__ import annotations

import contextlib
import json
import math
import os
import socket
import urllib.request
from pathlib import Path

import pytest

import inspector
from inspector import InspectorError, explorer
from inspector._front import cli
from sample_models.generated import tfa_blocks
from conftest import NO_LOWERING


@pytest.fixture(scope="module")
def stateful():
    return inspector.analyze("sample:streaming_keyword_spotter", stage="aten", rule="state-aware-strict")


def _load(folder: Path, name: str) -> dict:
    return json.loads((folder / name).read_text())


@pytest.mark.parametrize("stage", NO_LOWERING)
def test_files_are_the_stage_graph_keyed_by_fx_names(stage, tmp_path, stage_analyses):
    analysis = stage_analyses("streaming_keyword_spotter", stage).with_rule("state-aware-strict")
    files = analysis.to_model_explorer(tmp_path / "out")
    graph = _load(files.folder, explorer.GRAPH_FILE)
    # A graph collection (the shape Model Explorer's page loads from a path), one graph.
    assert graph["label"] == analysis.name and len(graph["graphs"]) == 1
    nodes = graph["graphs"][0]["nodes"]
    fx_names = [n.name for n in analysis.stage_graph.graph_module.graph.nodes]
    assert [n["id"] for n in nodes] == fx_names and files.nodes == len(fx_names)
    edges = {(e["sourceNodeId"], n["id"]) for n in nodes for e in n["incomingEdges"]}
    fx_edges = {(a.name, n.name) for n in analysis.stage_graph.graph_module.graph.nodes for a in n.all_input_nodes}
    assert edges == fx_edges

    decisions = _load(files.folder, explorer.DECISIONS_FILE)
    assert decisions["name"] == "fold decisions"
    for site in analysis.sites:
        value = decisions["results"][site.mul]["value"]
        assert value.startswith(f"{site.id}: ")
        assert value.endswith("folded") if site.folded else f"skipped: {site.reason_codes[0]}" in value
        assert set(decisions["results"]) <= set(fx_names)
    assert {s.folded for s in analysis.sites} == {True, False}  # the sample has both: both are drawn

    state = _load(files.folder, explorer.STATE_FILE)["results"]
    on_paths = {name for s in analysis.sites if len(s.state_path) > 1 for name in s.state_path}
    assert on_paths and on_paths <= set(state)
    assert any(v["value"] == "writes carried state" for v in state.values())

    manifest = _load(files.folder, explorer.MANIFEST)
    assert manifest["graph"] == explorer.GRAPH_FILE and manifest["stage"] == stage
    assert explorer.read_manifest(files.folder) == (files.graph, list(files.node_data))


def test_markers_show_in_the_state_overlay(tmp_path, stateful):
    site = next(s for s in stateful.sites if s.folded)
    marked = stateful.toggle_marker(site.id)
    files = marked.to_model_explorer(tmp_path)
    state = _load(files.folder, explorer.STATE_FILE)["results"]
    assert state[site.mul]["value"] == "marked carried state"
    decisions = _load(files.folder, explorer.DECISIONS_FILE)["results"]
    assert "marked-carried-state" in decisions[site.mul]["value"]


def test_the_error_layer_carries_the_measured_sqnr(tmp_path, stateful):
    records = {name: type("Record", (), {"sqnr_db": 10.0 + i})() for i, name in
               enumerate(s.mul for s in stateful.sites)}
    records["not-a-number"] = type("Record", (), {"sqnr_db": float("nan")})()
    files = stateful.to_model_explorer(tmp_path, errors=records)
    layer = _load(files.folder, explorer.ERROR_FILE)
    assert layer["results"] == {name: {"value": r.sqnr_db} for name, r in records.items() if name != "not-a-number"}
    assert [g["stop"] for g in layer["gradient"]] == [0, 0.5, 1]


def test_after_is_the_graph_the_pass_left(tmp_path, stateful):
    files = stateful.to_model_explorer(tmp_path, which="after")
    ids = [n["id"] for n in _load(files.folder, explorer.GRAPH_FILE)["graphs"][0]["nodes"]]
    assert ids == [n.name for n in stateful.after.graph.nodes]
    assert not {s.mul for s in stateful.sites if s.folded} & set(ids)
    decisions = _load(files.folder, explorer.DECISIONS_FILE)["results"]
    assert decisions and set(decisions) <= set(ids)  # keyed by the after graph's names
    assert {s.conv for s in stateful.sites if s.folded} <= set(decisions)


def test_cli_writes_the_folder_and_prints_one_json_document(tmp_path, capsys):
    code = cli.main(["explorer", "sample:conv_mul_multiple_users", "--stage", "aten", "--out", str(tmp_path / "me"),
                     "--json"])
    out = capsys.readouterr().out
    assert code == 0
    data = json.loads(out)
    assert Path(data["graph"]).is_file() and data["nodes"] > 0
    assert data["command"].startswith("model-explorer ")


@pytest.mark.requires_tosa
def test_cli_overlays_the_measured_error_of_a_variant(tmp_path, capsys):
    """--errors runs the quantized model and overlays each node's SQNR from the attribution."""
    out = tmp_path / "me"
    assert cli.main(["explorer", "sample:stateful_conv_mul", "--stage", "tfa", "--out", str(out),
                     "--errors", "upstream", "--steps", "2", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert Path(data["node_data"][-1]).name == explorer.ERROR_FILE
    layer = _load(out, explorer.ERROR_FILE)
    assert layer["name"] == "SQNR dB upstream"
    measured = inspector.attribution("sample:stateful_conv_mul", variants=["upstream"], steps=2)
    analysis = inspector.analyze("sample:stateful_conv_mul", stage="tfa")
    _, verdicts = analysis.verdicts("before", errors=measured.variant("upstream"))
    expected = {name: round(r.sqnr_db, 2) for name, r in verdicts.errors.items() if math.isfinite(r.sqnr_db)}
    assert expected and {name: v["value"] for name, v in layer["results"].items()} == expected
    site = analysis.sites[0]
    assert site.mul in layer["results"] or site.conv in layer["results"]


def test_bad_inputs_are_one_line(tmp_path, monkeypatch, stateful, capsys):
    a_file = tmp_path / "file.txt"
    a_file.write_text("x")
    with pytest.raises(InspectorError, match="is a file, not a folder"):
        stateful.to_model_explorer(a_file)
    with pytest.raises(InspectorError, match="splits paths at commas"):
        stateful.to_model_explorer(tmp_path / "a,b")
    with pytest.raises(InspectorError, match="holds no Model Explorer export"):
        explorer.read_manifest(tmp_path)
    (tmp_path / "evil").mkdir()
    (tmp_path / "evil" / explorer.MANIFEST).write_text(json.dumps({"graph": "../file.txt", "node_data": []}))
    with pytest.raises(InspectorError, match="names a file outside its folder"):
        explorer.read_manifest(tmp_path / "evil")
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        with pytest.raises(InspectorError, match="choose another port with --port"):
            explorer.check_port("127.0.0.1", busy.getsockname()[1])
    monkeypatch.setattr(explorer, "available", lambda: False)
    assert cli.main(["explorer", "sample:conv_mul_scalar", "--out", str(tmp_path / "x")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "pip install 'fold-inspector[explorer]'" in err
    assert not (tmp_path / "x").exists()


@contextlib.contextmanager
def _served(folder: Path):
    process, port = explorer.start(folder)
    try:
        yield port
    finally:
        process.terminate()
        process.wait(10)


def test_the_widget_button_embeds_model_explorer(tmp_path):
    from widgets import FoldInspector

    app = FoldInspector(inspector.analyze("sample:stateful_conv_mul", stage="aten", rule="state-aware"))
    try:
        url = app.open_model_explorer(tmp_path / "me")
        assert url.startswith("http://127.0.0.1:") and "/?data=" in url
        assert "<iframe class='fi-explorer-frame'" in app.explorer_view.value
        with urllib.request.urlopen(url, timeout=10) as page:
            assert b"Model Explorer" in page.read() or page.status == 200
        port = int(url.split(":")[2].split("/")[0])
    finally:
        app.close_model_explorer()
    assert app.explorer_view.value == ""
    with pytest.raises(OSError):
        urllib.request.urlopen(f"http://127.0.0.1:{port}/check_health", timeout=2)


@pytest.mark.browser
def test_model_explorer_shows_a_5000_node_graph_with_the_overlay(tmp_path):
    """Model Explorer's own page, served here with no network, loads the whole graph and the overlays."""
    from playwright.sync_api import sync_playwright

    analysis = inspector.analyze_graph(tfa_blocks(920), rule="state-aware", name="generated 5k")
    files = analysis.to_model_explorer(tmp_path / "me")
    assert files.nodes >= 5000
    graph, node_data = explorer.read_manifest(files.folder)
    outside = []
    with _served(files.folder) as port, sync_playwright() as p:
        browser = p.chromium.launch(executable_path="/usr/bin/chromium",
                                    args=["--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage"])
        try:
            page = browser.new_page(viewport={"width": 1400, "height": 1000})
            page.route(lambda u: not u.startswith(("http://127.0.0.1", "data:", "blob:")),
                       lambda r: (outside.append(r.request.url), r.abort()))
            page.set_default_timeout(120_000)
            page.goto(explorer.url(port, graph=graph, node_data=node_data))
            page.get_by_text("NODE DATA PROVIDERS").wait_for()
            body = page.inner_text("body")
            assert f"{files.nodes} nodes" in body  # the whole graph, counted by Model Explorer itself
            assert "fold decisions" in body and "carried state" in body
            # The overlay is applied to the graph's nodes: its values are listed against them.
            page.wait_for_function("() => document.body.innerText.includes(': folded')")
            text = page.locator(".table-container.results").last.inner_text()  # the side panel's "Node data"
            first = analysis.sites[:8]
            for site in first:
                expected = "folded" if site.folded else f"skipped: {site.reason_codes[0]}"
                assert f"{site.id}: {expected}" in " ".join(text.split()), site.id
            assert {s.folded for s in first} == {True, False}
            if shots := os.environ.get("TEST_ARTIFACTS"):
                page.screenshot(path=str(Path(shots) / "model-explorer-5k.png"))
        finally:
            browser.close()
    # Everything above worked with the network blocked. Model Explorer's page still asks for one web
    # font from Google (its bundle has the others); offline the browser uses a local font instead.
    assert all(u.startswith("https://fonts.gstatic.com/") for u in outside), outside
