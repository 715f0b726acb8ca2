"""Pictures: ``inspector.present.render`` draws verdicts from one style table, safely and the same every run.

Golden DOT sources live in tests/goldens/render/, recorded on the main lock's executorch; a release whose graphs
differ keeps its own copies of those that differ in tests/goldens/executorch-X.Y/render/ (the ``golden`` fixture,
tests/conftest.py). ``pytest --update-goldens`` rewrites the installed release's.
"""

from __future__ import annotations

import html
import json
import re
import subprocess
import sys
import xml.etree.ElementTree as ET

import graphviz
import pytest
import torch
from torch import nn

import inspector
import sample_models
from inspector import InspectorError
from inspector._doors import executorch as _executorch
from inspector._front.cli import main
from inspector.present.render import LEGEND, STYLES, _text, _tooltip, svg
from sample_models.generated import tfa_blocks
from conftest import GOLDENS, MAIN_EXECUTORCH, ROOT, release_of

SVG_NS = "{http://www.w3.org/2000/svg}"


def scrub(source: str) -> str:
    """DOT source without what differs between machines: install paths and addresses."""
    source = re.sub(r'[^"\s]*/site-packages/', "<site-packages>/", source)
    source = source.replace(str(ROOT), "<repo>")
    return re.sub(r"0x[0-9a-f]+", "0x?", source)


def node_lines(source: str) -> dict[str, str]:
    """Node id -> its DOT statement (attributes included), for nodes outside the legend."""
    out = {}
    for line in source.splitlines():
        m = re.match(r'\s*("(?:[^"\\]|\\.)*"|\w+) \[', line)
        if m and "legend" not in m.group(1) and m.group(1) not in ("graph", "node", "edge"):
            out[m.group(1).strip('"')] = line
    return out


def classes(source: str, node: str) -> set[str]:
    line = node_lines(source)[node]
    m = re.search(r'class=("[^"]*"|[\w-]+)', line)
    return set(m.group(1).strip('"').split()) if m else set()


def label(source: str, node: str) -> str:
    m = re.search(r'label="((?:[^"\\]|\\.)*)"|label=(\w+)', node_lines(source)[node])
    return (m.group(1) or m.group(2)).replace("\\n", "\n")


def svg_nodes(text: str) -> dict[str, tuple[set[str], str]]:
    """SVG node title -> (classes, the text drawn in the node): what a viewer sees."""
    root = ET.fromstring(text)
    out = {}
    for g in root.iter(f"{SVG_NS}g"):
        cls = g.get("class", "").split()
        if "node" not in cls:
            continue
        title = g.find(f"{SVG_NS}title").text
        out[title] = (set(cls), "\n".join(t.text or "" for t in g.iter(f"{SVG_NS}text")))
    return out


# ---------------------------------------------------------------- goldens

# Every teaching and network sample; the 1,000-node generated one is drawn by the big-graph tests instead.
GOLDEN_CASES = ([(name, "upstream") for name in sample_models.names() if name != "generated_blocks"]
                + [("stateful_conv_mul", "state-aware-strict")])


@pytest.mark.parametrize("name,policy", GOLDEN_CASES, ids=[f"{n}-{p}" for n, p in GOLDEN_CASES])
def test_golden_dot_source(name, policy, stage_analyses, golden):
    analysis = stage_analyses(name, "tfa").with_rule(policy)
    golden(f"render/{name}.tfa.{policy}.dot", scrub(analysis.render_pair().source))


def test_a_release_keeps_only_the_goldens_its_graphs_change():
    """Each tests/goldens/executorch-X.Y/ folder is a release series that ships the pass and is not the main
    lock's, and holds only copies of main goldens that differ from them: a copy equal to the main file, or
    with no main file, would hide what the release really changes."""
    main_release = release_of(MAIN_EXECUTORCH)
    shipped = {release_of(v) for v in _executorch.KNOWN_TO_WORK}
    for folder in sorted(GOLDENS.glob("executorch-*")):
        release = folder.name.removeprefix("executorch-")
        assert release in shipped and release != main_release, f"{folder.name}: not a release the goldens need"
        copies = [p for p in folder.rglob("*") if p.is_file()]
        assert copies, f"{folder.name} is empty"
        for copy in copies:
            main = GOLDENS / copy.relative_to(folder)
            assert main.exists(), f"{copy.relative_to(GOLDENS)} has no main golden"
            assert copy.read_bytes() != main.read_bytes(), f"{copy.relative_to(GOLDENS)} equals the main golden"


def test_same_graph_same_source(stage_analyses):
    analysis = stage_analyses("conv_mul_chain", "edge")
    again = analysis.with_rule("upstream")
    assert analysis.render().source == again.render().source
    assert analysis.render_pair(cluster_by_module=True).source == again.render_pair(cluster_by_module=True).source
    assert not re.search(r"0x[0-9a-f]{6,}", analysis.render(hide=()).source)


# ---------------------------------------------------------------- styles follow verdicts


def test_one_style_table_with_a_legend_entry_each(stage_analyses):
    assert list(LEGEND) == list(STYLES)
    source = stage_analyses("conv_mul_scalar", "tfa").render().source
    for kind in STYLES:
        assert f'"legend.{kind}"' in source


def test_skipped_site_shows_first_reason_and_all_in_tooltip(stage_analyses):
    analysis = stage_analyses("conv_transpose_mul", "tfa")
    (site,) = analysis.sites
    assert site.reason_codes == ("conv-op-not-matched", "transposed-conv")
    source = analysis.render().source
    for node in (site.conv, site.mul):
        assert classes(source, node) == {"near-miss"}
        assert f"site {site.id}" in label(source, node)
        assert "skip: conv-op-not-matched (+1)" in label(source, node)
        assert "transposed-conv:" in node_lines(source)[node].split("tooltip=")[1]

    users = stage_analyses("conv_mul_multiple_users", "tfa")
    source = users.render().source
    assert classes(source, users.sites[0].mul) == {"skipped"}
    assert "skip: conv-has-other-users" in label(source, users.sites[0].conv)


def test_folded_site_before_and_after(stage_analyses):
    analysis = stage_analyses("conv_mul_channel_scale", "edge")
    (site,) = analysis.sites
    before, after = analysis.render("before").source, analysis.render("after").source
    assert classes(before, site.conv) == {"folded"} and classes(before, site.mul) == {"removed"}
    assert "removed by fold" in label(before, site.mul) and "dashed" in node_lines(before)[site.mul]
    assert site.mul not in node_lines(after)
    assert classes(after, site.conv) == {"folded"}
    text = label(after, site.conv)
    assert "absorbed the scale" in text
    assert f"weight: {site.folded_weight}" in text and f"bias: {site.folded_bias}" in text
    # Same site, same colour, before and after.
    fill = re.compile(r'fillcolor="([^"]+)"')
    assert fill.search(node_lines(before)[site.conv]).group(1) == fill.search(node_lines(after)[site.conv]).group(1)
    # Constants are hidden, but not the folded weight and bias the conv reads now.
    assert site.folded_weight in node_lines(after) and site.folded_bias in node_lines(after)
    assert not any(n.startswith("p_conv") for n in node_lines(before))


def test_toggling_a_marker_changes_the_style(stage_analyses):
    analysis = stage_analyses("functional_recurrent_conv_mul", "tfa").with_rule("state-aware")
    (site,) = analysis.sites
    source = analysis.render().source
    assert classes(source, site.mul) == {"removed"}
    assert "risk: feeds-recurrent-output" in label(source, site.mul)
    marked = analysis.toggle_marker(site.id)
    source = marked.render().source
    assert classes(source, site.mul) == {"skipped", "marked"}
    assert classes(source, site.conv) == {"skipped"}
    assert "skip: marked-carried-state" in label(source, site.mul) and "marked carried state" in label(source, site.mul)
    assert 'peripheries=2' in node_lines(source)[site.mul]
    assert marked.toggle_marker(site.id).render().source == analysis.render().source


@pytest.mark.parametrize("stage,policy,edge", [
    ("tfa", "state-aware-strict", ("mul", "copy_")),
    ("aten", "state-aware-strict", ("mul", "copy_")),
    ("edge", "state-aware", ("aten_mul_tensor", "output")),
])
def test_path_to_the_buffer_write_is_highlighted(stage, policy, edge, stage_analyses):
    analysis = stage_analyses("stateful_conv_mul", stage).with_rule(policy)
    (site,) = analysis.sites
    assert site.reason_codes == ("feeds-buffer-mutation",) and site.state_path == edge
    for source in (analysis.render().source, analysis.render("after").source):
        assert re.search(rf'\b{edge[0]} -> {edge[1]} \[class="state-path"', source)
        assert classes(source, edge[1]) == {"boundary"}
    pair = analysis.render_pair().source
    assert f'"before.{edge[0]}" -> "before.{edge[1]}" [class="state-path"' in pair


def test_folded_into_carried_state_draws_a_light_path(stage_analyses):
    analysis = stage_analyses("stateful_conv_mul", "tfa")  # upstream folds it
    (site,) = analysis.sites
    assert site.folded and "feeds-carried-state" in [r.code for r in site.risks]
    assert 'mul -> copy_ [class="risk-path"' in analysis.render().source
    # After the fold the mul is gone: the conv feeds the write directly.
    assert f'{site.conv} -> copy_ [class="risk-path"' in analysis.render("after").source
    assert "state-path" not in node_lines(analysis.render().source).get("copy_", "")


def test_state_buffer_is_never_hidden(stage_analyses):
    for stage in ("tfa", "aten", "edge"):
        nodes = node_lines(stage_analyses("stateful_conv_mul", stage).render().source)
        assert any(n in nodes for n in ("state", "b_state")), stage
        assert not any("conv_weight" in n for n in nodes), stage


# ---------------------------------------------------------------- focus, hide, big graphs


def test_focus_and_hops(stage_analyses):
    analysis = stage_analyses("conv_mul_multiple_users", "tfa")
    site = analysis.sites[0]
    assert set(node_lines(analysis.render(focus=site.id, hops=0).source)) == {site.conv, site.mul}
    one = set(node_lines(analysis.render(focus=site.id, hops=1).source))
    everything = set(node_lines(analysis.render().source))
    assert {site.conv, site.mul} < one <= everything
    assert "focus: site" in analysis.render(focus=site.id).source
    with pytest.raises(InspectorError, match="no site 'nope'"):
        analysis.render(focus="nope")
    with pytest.raises(InspectorError, match="unknown graph 'during'"):
        analysis.render("during")
    with pytest.raises(InspectorError, match="cannot hide 'inputs'"):
        analysis.render(hide=("inputs",))


def test_hide_constants(stage_analyses):
    analysis = stage_analyses("conv_mul_channel_scale", "tfa")
    shown = set(node_lines(analysis.render().source))
    everything = set(node_lines(analysis.render(hide=()).source))
    assert everything - shown == {"conv_weight", "conv_bias", "scale"}
    assert "3 constants hidden" in analysis.render().source


def generated(blocks: int, policy: str = "state-aware-strict") -> inspector.Analysis:
    return inspector.analyze_graph(tfa_blocks(blocks), rule=policy, name="generated")


def test_big_graph_draws_the_neighbourhoods_of_the_sites():
    analysis = generated(120)
    total = len(analysis.before.graph.nodes)
    constants = sum(1 for n in analysis.before.graph.nodes if n.op == "get_attr") - 1  # the state buffer stays
    full = node_lines(analysis.render(max_nodes=None).source)
    assert len(full) == total - constants
    small = analysis.render(max_nodes=100).source
    m = re.search(r"showing ([\d,]+) of ([\d,]+) nodes: the neighbourhoods \((\d) hops?\) of 120 sites; "
                  r"pass max_nodes=None for all", small)
    assert m and int(m.group(2)) == total - constants and int(m.group(1)) == len(node_lines(small))
    shown = node_lines(small)
    assert all(s.conv in shown and s.mul in shown for s in analysis.sites)
    # A focus view stays small even though every block reads the same input (a hub).
    focus = node_lines(analysis.render(focus=analysis.sites[3].id).source)
    assert len(focus) < 12 and "users not shown" in focus["x"]


def test_graph_without_sites_still_draws_something():
    graph = torch.fx.Graph()
    x = graph.placeholder("x")
    for _ in range(30):
        x = graph.call_function(torch.ops.aten.relu.default, (x,))
    graph.output(x)
    gm = torch.fx.GraphModule(nn.Module(), graph)
    analysis = inspector.analyze_graph(gm, name="relus")
    source = analysis.render(max_nodes=10).source
    assert len(node_lines(source)) == 10 and "showing the first 10 of 32 nodes (no sites here)" in source


# ---------------------------------------------------------------- escaping

EVIL = "<script>alert(1)</script>"


class EvilNames(nn.Module):
    """A conv whose module path is markup; its output is scaled and written into a buffer."""

    def __init__(self) -> None:
        super().__init__()
        block = nn.Module()
        block.add_module(EVIL, nn.Conv2d(3, 4, 3, padding=1))
        self.add_module("block", block)
        self.register_buffer("state", torch.zeros(1, 4, 8, 8))

    def forward(self, x):
        y = getattr(self.block, EVIL)(x) * 0.5
        self.state.copy_(y)
        return y


@pytest.mark.requires_dot
@pytest.mark.parametrize("stage", ["tfa", "edge"])
def test_model_strings_are_escaped(stage):
    analysis = inspector.analyze(EvilNames(), example_inputs=(torch.randn(1, 3, 8, 8),), stage=stage,
                                 rule="state-aware-strict")
    (site,) = analysis.sites
    assert EVIL in site.id and site.reason_codes == ("feeds-buffer-mutation",)
    for graph in (analysis.render(cluster_by_module=True, hide=()), analysis.render_pair(cluster_by_module=True)):
        source = graph.source
        assert EVIL in source  # as plain text inside quoted strings...
        assert not re.search(r"=\s*<", source)  # ...never as an HTML-like label
        text = svg(graph)
        assert text.startswith("<svg") and "<script" not in text.lower()
        assert html.escape(EVIL, quote=False) in text
        drawn = [t for _, t in svg_nodes(text).values()]  # parses: well-formed XML
        assert any(f"site {site.id}" in t.split("\n") for t in drawn)  # the site id is findable in the picture


def test_cluster_by_module_nests_module_paths():
    analysis = inspector.analyze(EvilNames(), example_inputs=(torch.randn(1, 3, 8, 8),), stage="tfa")
    conv = analysis.sites[0].conv
    source = analysis.render(cluster_by_module=True).source
    lines = source.splitlines()
    at = next(i for i, line in enumerate(lines) if line.strip().startswith(f"{conv} ["))
    opened = [line.strip() for line in lines[:at] if line.strip().startswith("subgraph cluster_g_")]
    assert opened == ["subgraph cluster_g_m0 {", "subgraph cluster_g_m1 {"]
    assert f'label="block.{EVIL} (Conv2d)"' in source and "label=block " in source
    assert "subgraph cluster_before_m0" in analysis.render_pair(cluster_by_module=True).source


@pytest.mark.requires_dot
def test_dot_special_characters_come_out_literally():
    nasty = 'a\\N b\\l "q" <b>x</b> \\'
    g = graphviz.Digraph()
    g.node("n", label=_text(nasty, "line two"), tooltip=_tooltip(nasty))
    text = svg(g)
    ((_, drawn),) = svg_nodes(text).values()
    assert drawn == f"{nasty}\nline two"
    # Tooltips show a backslash as a look-alike: dot 2.43 unescapes them twice.
    assert html.unescape(re.search(r'xlink:title="([^"]*)"', text).group(1)) == nasty.replace("\\", "\u29f5")


# ---------------------------------------------------------------- svg, methods, CLI


@pytest.mark.requires_dot
def test_svg_and_analysis_methods(stage_analyses):
    analysis = stage_analyses("conv_mul_scalar", "tfa")
    text = analysis.svg("after")
    assert text.startswith("<svg") and text == svg(analysis.render("after"))
    pair = analysis.render_pair()
    ids = node_lines(pair.source)
    site = analysis.sites[0]
    assert {f"before.{site.conv}", f"before.{site.mul}", f"after.{site.conv}"} <= set(ids)
    assert f"after.{site.mul}" not in ids
    assert "cluster_before" in pair.source and "cluster_after" in pair.source
    nodes = svg_nodes(svg(pair))
    assert "folded" in nodes[f"after.{site.conv}"][0]


def test_missing_dot_is_one_clear_error(monkeypatch, stage_analyses):
    def no_dot(*args, **kwargs):
        raise graphviz.ExecutableNotFound(("dot",))

    monkeypatch.setattr(graphviz.Digraph, "pipe", no_dot)
    graph = stage_analyses("conv_mul_scalar", "tfa").render()
    with pytest.raises(InspectorError, match=r"^graphviz's dot is not installed: apt-get install -y graphviz"):
        svg(graph)
    assert graph.source.startswith("digraph")


@pytest.mark.requires_dot
def test_done_when_cli_writes_an_svg_showing_the_reason(tmp_path):
    out = tmp_path / "x.svg"
    proc = subprocess.run(
        [sys.executable, "-m", "inspector", "render", "sample:conv_mul_multiple_users", "--which", "before",
         "--format", "svg", "--out", str(out)],
        cwd=ROOT, capture_output=True, text=True, timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    text = out.read_text(encoding="utf-8")
    assert text.startswith("<svg")
    shows = [title for title, (cls, drawn) in svg_nodes(text).items()
             if "skipped" in cls and "skip: conv-has-other-users" in drawn]
    assert sorted(shows) == ["conv2d", "mul"]  # the default stage, tfa: where the INT flow folds


@pytest.mark.requires_dot
def test_cli_formats_and_errors(tmp_path, capsys):
    dot = tmp_path / "pair.dot"
    assert main(["render", "sample:stateful_conv_mul", "--stage", "tfa", "--rule", "state-aware-strict",
                 "--which", "both", "--out", str(dot)]) == 0
    assert '"before.mul" -> "before.copy_" [class="state-path"' in dot.read_text()
    png = tmp_path / "focus.png"
    assert main(["render", "sample:stateful_conv_mul", "--stage", "tfa", "--focus", "conv@models.py:149",
                 "--hops", "1", "--out", str(png)]) == 0
    assert png.read_bytes().startswith(b"\x89PNG")
    capsys.readouterr()
    assert main(["render", "sample:stateful_conv_mul", "--stage", "tfa", "--focus", "nope", "--out", str(png)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: no site 'nope'") and err.count("\n") == 1
    assert main(["render", "sample:stateful_conv_mul", "--hops", "-1", "--out", str(png)]) == 2
    assert main(["render", "sample:stateful_conv_mul", "--out", str(tmp_path / "no" / "x.svg")]) == 2


# A record's plot in a fresh process that never imports pyplot (a kernel where the user did not): IPython's own
# formatter must find an image in it, not only "<Figure size 700x400 with 1 Axes>".
_PLOT_IN_A_FRESH_PROCESS = """
import json, sys
from IPython.core.formatters import DisplayFormatter
from inspector import Bits, Sweep
from inspector._numbers.bits import BitsChange
bits = Bits(target="m", steps=3, baseline="upstream@a8w8", baseline_sqnr_db=20.0, changes=(
    BitsChange(change="fold off", kind="model", node=None, variant="off", sqnr_db=25.0, recovered_db=5.0),
    BitsChange(change="16-bit activations", kind="model", node=None, variant="a16", sqnr_db=18.0, recovered_db=-2.0)))
sweep = Sweep(rules=("upstream", "off"), stages=("tfa",), steps=0, models=(), rows=(), variants=())
out = {}
for name, fig in (("bits", bits.plot()), ("sweep", sweep.plot())):
    data, _ = DisplayFormatter().format(fig)
    out[name] = {"png": fig._repr_png_()[:8].hex(), "mimes": sorted(data),
                 "shown": data.get("image/png", b"")[:8].hex()}
out["pyplot"] = "matplotlib.pyplot" in sys.modules
print(json.dumps(out))
"""


def test_a_plot_is_an_image_without_pyplot():
    proc = subprocess.run([sys.executable, "-c", _PLOT_IN_A_FRESH_PROCESS], cwd=ROOT, capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out.pop("pyplot") is False
    png = b"\x89PNG\r\n\x1a\n".hex()
    for name, shown in out.items():
        assert shown == {"png": png, "mimes": ["image/png", "text/plain"], "shown": png}, name
