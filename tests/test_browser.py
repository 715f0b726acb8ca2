"""Real-browser tests: the quickstart in JupyterLab and in Voila, driven by Playwright + Debian's Chromium.

Each server gets private Jupyter folders, the page opens with ?reset, clicks wait until the
kernel has settled, and every non-local request is blocked (the UI needs no network).
Screenshots land in test-artifacts/ (or $SHOT_DIR).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from contextlib import contextmanager
from pathlib import Path

import nbformat
import pytest

from conftest import ROOT

pytestmark = [pytest.mark.browser, pytest.mark.slow, pytest.mark.requires_dot, pytest.mark.requires_tosa]

BIN, TOKEN = Path(sys.executable).parent, "t0k"
OUT = Path(os.environ.get("SHOT_DIR", ROOT / "test-artifacts"))
EVIL = "<img src=x onerror=alert(1)>"
EVIL_NB = f'''import torch
from torch import nn
from widgets import FoldInspector

class Evil(nn.Module):
    def __init__(self):
        super().__init__()
        self.add_module({EVIL!r}, nn.Conv2d(3, 4, 3, padding=1))

    def forward(self, x):
        return getattr(self, {EVIL!r})(x) * 0.5

FoldInspector(Evil(), (torch.randn(1, 3, 8, 8),), stage="aten")'''
DRIFT_NB = '''from widgets import FoldInspector

FoldInspector("sample:stateful_wide_scale", stage="tfa", variants=("off", "upstream"), steps=3)'''


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    from playwright.sync_api import sync_playwright  # noqa: F401  (fail early if missing)

    d = tmp_path_factory.mktemp("ui")
    root = d / "root"
    root.mkdir()
    shutil.copy(ROOT / "notebooks" / "01_quickstart.ipynb", root / "quickstart.ipynb")
    nb = nbformat.v4.new_notebook(metadata={"kernelspec": {"name": "python3", "display_name": "Python 3"}})
    nb.cells = [nbformat.v4.new_code_cell(EVIL_NB)]
    nbformat.write(nb, root / "evil.ipynb")
    nb.cells = [nbformat.v4.new_code_cell(DRIFT_NB)]
    nbformat.write(nb, root / "drift.ipynb")
    for plugin, value in {"apputils-extension/notification": {"fetchNews": "false", "checkForUpdates": False},
                          "notebook-extension/tracker": {"windowingMode": "none"}}.items():
        f = d / "settings/@jupyterlab" / f"{plugin}.jupyterlab-settings"
        f.parent.mkdir(parents=True, exist_ok=True)
        f.write_text(json.dumps(value))
    OUT.mkdir(parents=True, exist_ok=True)
    return d, dict(os.environ, JUPYTER_CONFIG_DIR=f"{d}/cfg", JUPYTER_DATA_DIR=f"{d}/data",
                   JUPYTER_RUNTIME_DIR=f"{d}/rt", IPYTHONDIR=f"{d}/ipy", PYTHONPATH=str(ROOT))


@contextmanager
def server(args, ready, d, env):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    base, log = f"http://127.0.0.1:{port}", open(d / "server.log", "ab")
    proc = subprocess.Popen([str(a).format(port=port) for a in args], env=env, stdout=log, stderr=log)
    try:
        for _ in range(300):
            assert proc.poll() is None, (d / "server.log").read_text()[-3000:]
            try:
                urllib.request.urlopen(base + ready, timeout=2).close()
                break
            except OSError:
                time.sleep(0.2)
        yield base
    finally:
        proc.terminate()
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()


@pytest.fixture(scope="module")
def lab(env):
    d, e = env
    with server([BIN / "jupyter", "lab", "--no-browser", "--allow-root", "--ServerApp.ip=127.0.0.1",
                 "--ServerApp.port={port}", "--ServerApp.port_retries=0", f"--ServerApp.root_dir={d}/root",
                 f"--IdentityProvider.token={TOKEN}", "--ServerApp.terminals_enabled=False",
                 "--LabApp.expose_app_in_browser=True", "--LabApp.news_url=None",
                 "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate",
                 "--LabApp.extension_manager=readonly", f"--LabApp.workspaces_dir={d}/ws",
                 f"--LabApp.user_settings_dir={d}/settings"], f"/api/status?token={TOKEN}", d, e) as base:
        yield base


@pytest.fixture()
def page(tmp_path):
    from playwright.sync_api import sync_playwright

    args = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-sync",
            "--disable-background-networking", "--disable-component-update", "--disable-dev-shm-usage"]
    with sync_playwright() as p:
        ctx = p.chromium.launch_persistent_context(tmp_path / "profile", executable_path="/usr/bin/chromium",
                                                   args=args, viewport={"width": 1400, "height": 1000})
        ctx.route(lambda u: not u.startswith(("http://127.0.0.1", "data:")), lambda r: r.abort())
        pg = ctx.new_page()
        pg.set_default_timeout(120_000)
        yield pg
        ctx.close()


class Kernel:
    """settle(): wait until each kernel request sent by the page has had its status:idle reply."""

    ID = re.compile(rb'"msg_id":\s*"([^"]+)"')

    def __init__(self, page):
        self.page, self.pending = page, set()
        page.on("websocket", lambda ws: "/channels" in ws.url and (
            ws.on("framesent", self.sent), ws.on("framereceived", self.got)))

    def sent(self, p):
        m = self.ID.search(p if isinstance(p, bytes) else p.encode())
        if m:
            self.pending.add(m.group(1))

    def got(self, p):
        p = p if isinstance(p, bytes) else p.encode()
        if b'"idle"' in p:
            self.pending.difference_update(self.ID.findall(p))

    def settle(self, timeout_s: float = 120):
        quiet = 0
        for _ in range(int(timeout_s * 20)):
            self.page.wait_for_timeout(50)
            quiet = 0 if self.pending else quiet + 1
            if quiet == 3:
                return
        raise TimeoutError(self.pending)


def open_and_run(page, lab, name):
    kernel = Kernel(page)
    page.goto(f"{lab}/lab/tree/{name}?reset&token={TOKEN}")
    page.wait_for_function("() => window.jupyterapp?.shell.currentWidget?.sessionContext"
                           "?.session?.kernel?.status === 'idle'", timeout=120_000)
    page.evaluate("() => window.jupyterapp.commands.execute('notebook:run-all-cells')")
    return kernel


def test_quickstart_marker_toggle_and_reference_run(lab, page):
    from playwright.sync_api import expect

    dialogs = []
    page.on("dialog", lambda d: (dialogs.append(d.message), d.dismiss()))
    kernel = open_and_run(page, lab, "quickstart.ipynb")
    app = page.locator(".fi-app").first
    expect(app).to_be_visible(timeout=240_000)
    kernel.settle(240)
    # pick another sample with the mouse, see its reason, and come back
    app.locator(".fi-model select").select_option("sample:conv_mul_multiple_users")
    kernel.settle()
    expect(app.locator(".fi-site-row .fi-reasons").first).to_contain_text("conv-has-other-users", timeout=60_000)
    app.locator(".fi-model select").select_option("sample:stateful_conv_mul")
    kernel.settle()
    row = app.locator(".fi-site-row").first
    expect(row.locator(".fi-decision")).to_have_text("fold", timeout=60_000)
    graph_before = app.locator(".fi-graph").inner_html()
    assert "<svg" in graph_before and "marked-carried-state" not in graph_before

    row.locator(".fi-marker input").check()
    kernel.settle()
    expect(row.locator(".fi-decision")).to_have_text("skip", timeout=60_000)
    expect(row.locator(".fi-reasons")).to_contain_text("marked-carried-state")
    graph_after = app.locator(".fi-graph").inner_html()
    assert graph_after != graph_before and "marked-carried-state" in graph_after

    expect(app.locator(".fi-results")).to_contain_text("no reference run yet")
    kernel.settle()
    # the page notes every preview it is shown: Run answers first with the simulation, then with TOSA
    page.evaluate("""() => { window.fiPreviews = 0; new MutationObserver(() => {
        if (document.querySelector('.fi-app .fi-preview')) window.fiPreviews += 1;
    }).observe(document.body, {childList: true, subtree: true}); }""")
    app.locator(".fi-run button, button.fi-run").first.click()
    expect(app.locator(".fi-results .fi-comparison > table")).to_be_visible(timeout=300_000)  # (not its per-step one)
    expect(app.locator(".fi-progress-label")).to_have_text("done", timeout=300_000)
    expect(app.locator(".fi-results")).to_contain_text("state-aware")
    expect(app.locator(".fi-results")).to_contain_text("TOSA INT reference vs float")
    assert page.evaluate("() => window.fiPreviews") > 0  # the simulation's numbers were on the page first
    assert app.locator(".fi-results .fi-preview").count() == 0  # and TOSA's replaced them
    expect(app.locator(".fi-gap")).to_contain_text("the preview was simulation vs tosa: SQNR within")
    app.scroll_into_view_if_needed()
    page.screenshot(path=OUT / "jupyterlab-quickstart.png", full_page=True)
    _readme_screenshot(page, app)
    # what the fold buys: the same run on an Ethos-U, its cost beside the numbers and each site's price
    page.set_viewport_size({"width": 1400, "height": 1000})
    app.locator(".fi-accelerator select").select_option("ethos-u55-128")
    kernel.settle()
    expect(app.locator(".fi-results .fi-stale")).to_be_visible(timeout=60_000)  # other accelerator: stale
    app.locator(".fi-run button, button.fi-run").first.click()
    expect(app.locator(".fi-results")).to_contain_text("lowered for ethos-u55-128", timeout=300_000)
    expect(app.locator(".fi-progress-label")).to_have_text("done", timeout=300_000)
    results = app.locator(".fi-results")
    expect(results.locator(".fi-tradeoff")).to_contain_text("what the fold buys")
    expect(results.locator(".fi-tradeoff")).to_contain_text("Vela's estimate")
    expect(results).to_contain_text("cycles")
    assert app.locator(".fi-results .fi-preview").count() == 0
    expect(row.locator(".fi-price")).to_contain_text("cycles on ethos-u55-128")
    page.screenshot(path=OUT / "jupyterlab-cost.png", full_page=True)
    # which sites should fold: the frontier, the current decisions as a point (the site is marked: 0 folded),
    # a point clicked sets its markers and the point moves
    app.locator(".fi-budget input").fill("1")
    app.locator(".fi-advise-run button, button.fi-advise-run").first.click()
    expect(app.locator(".fi-frontier img")).to_be_visible(timeout=300_000)
    current = app.locator(".fi-current")
    expect(current).to_contain_text("current decisions: 0 folded", timeout=60_000)
    points = app.locator(".fi-point")
    expect(points.first).to_be_visible()
    assert points.count() == 2
    frontier_before = app.locator(".fi-frontier").inner_html()
    app.locator(".fi-point", has_text="fold 1").click()
    kernel.settle()
    expect(current).to_contain_text("current decisions: 1 folded", timeout=60_000)
    expect(row.locator(".fi-marker input")).not_to_be_checked()  # the advice's markers: nothing marked
    assert app.locator(".fi-frontier").inner_html() != frontier_before  # the current point moved
    row.locator(".fi-marker input").check()
    kernel.settle()
    expect(current).to_contain_text("current decisions: 0 folded", timeout=60_000)
    expect(app.locator(".fi-advice-table")).to_contain_text("which sites should fold")
    page.screenshot(path=OUT / "jupyterlab-advice.png", full_page=True)
    assert dialogs == []


def _readme_screenshot(page, app) -> None:
    """The README's picture of the inspector in JupyterLab, from this real page: the header, the site
    table and the graphs. Written to test-artifacts/; `make screenshot` copies it into docs/."""
    from PIL import Image

    page.set_viewport_size({"width": 1150, "height": 2400})
    page.wait_for_timeout(500)
    raw = OUT / "inspector-in-jupyterlab.raw.png"
    app.screenshot(path=raw)
    image = Image.open(raw).convert("RGB")
    image = image.crop((0, 0, image.width, min(image.height, 820)))  # header, site row, the graphs' top
    image.quantize(colors=64, method=Image.Quantize.MEDIANCUT).save(OUT / "inspector-in-jupyterlab.png",
                                                                    optimize=True)
    raw.unlink()
    target = os.environ.get("README_SCREENSHOT")
    if target:
        shutil.copy(OUT / "inspector-in-jupyterlab.png", target)


def test_hostile_module_name_is_shown_as_text(lab, page):
    from playwright.sync_api import expect

    dialogs = []
    page.on("dialog", lambda d: (dialogs.append(d.message), d.dismiss()))
    kernel = open_and_run(page, lab, "evil.ipynb")
    app = page.locator(".fi-app").first
    expect(app).to_be_visible(timeout=240_000)
    kernel.settle(240)
    expect(app.locator(".fi-site-row").first).to_contain_text(EVIL)
    assert page.locator(".fi-app img[src='x']").count() == 0
    page.wait_for_timeout(500)
    page.screenshot(path=OUT / "jupyterlab-hostile-name.png")
    assert dialogs == []


def test_where_the_error_enters_panel(lab, page):
    """Run the attribution from the widget: the table, the graph coloured by SQNR, and a node's curve."""
    from playwright.sync_api import expect

    kernel = open_and_run(page, lab, "drift.ipynb")
    app = page.locator(".fi-app").first
    expect(app).to_be_visible(timeout=240_000)
    kernel.settle(240)
    panel = app.locator(".fi-attribution-panel")
    panel.locator("button.fi-attr-run, .fi-attr-run button").first.click()
    expect(panel.locator(".fi-attr-table table").first).to_be_visible(timeout=300_000)
    expect(panel.locator(".fi-attr-progress-label")).to_have_text("done")
    expect(panel.locator(".fi-attr-table")).to_contain_text("Where the error enters")
    graph = panel.locator(".fi-attr-graph svg")
    expect(graph).to_be_visible()
    assert "SQNR, float vs quantized (dB)" in graph.inner_html()
    kernel.settle()
    before = panel.locator(".fi-attr-curve").inner_html()
    panel.locator(".fi-attr-node select").select_option("root:copy_")
    kernel.settle()
    expect(panel.locator(".fi-attr-curve img")).to_be_visible()
    assert panel.locator(".fi-attr-curve").inner_html() != before  # the picked node's curve
    panel.scroll_into_view_if_needed()
    page.screenshot(path=OUT / "jupyterlab-where-error-enters.png", full_page=True)

    # The whole graph in Model Explorer, embedded in the widget, with the error layer just measured.
    explorer = app.locator(".fi-explorer-panel")
    explorer.locator("button.fi-explorer, .fi-explorer button").first.click()
    kernel.settle()
    frame = explorer.frame_locator("iframe.fi-explorer-frame")
    expect(frame.get_by_text("NODE DATA PROVIDERS")).to_be_visible(timeout=120_000)
    for overlay in ("fold decisions", "carried state", "SQNR dB"):
        expect(frame.get_by_text(overlay).first).to_be_visible()
    explorer.scroll_into_view_if_needed()
    page.wait_for_timeout(1000)
    explorer.screenshot(path=OUT / "jupyterlab-model-explorer.png")


def test_voila_opens_the_same_ui(env, page):
    from playwright.sync_api import expect

    d, e = env
    with server([BIN / "voila", f"{d}/root/quickstart.ipynb", "--no-browser", "--port={port}",
                 "--Voila.ip=127.0.0.1", "--Voila.port_retries=0"], "/voila/static/voila.js", d, e) as base:
        page.goto(base)
        app = page.locator(".fi-app").first
        expect(app).to_be_visible(timeout=300_000)
        expect(app.locator(".fi-site-row .fi-decision").first).to_have_text("fold")
        assert "<svg" in app.locator(".fi-graph").inner_html()
        page.screenshot(path=OUT / "voila-quickstart.png")
