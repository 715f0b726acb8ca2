"""The Model Explorer panel: the whole graph in Google's Model Explorer, embedded, with the overlays."""

from __future__ import annotations

import tempfile
from pathlib import Path
from collections.abc import Callable

import ipywidgets as W

import inspector

from ._common import esc


class ExplorerPanel:
    """Owns the *Open in Model Explorer* button, the embedded view and the server it started."""

    exposed = ("explorer_button", "explorer_view")

    def __init__(self, *, on_open: Callable) -> None:
        self.explorer_button = W.Button(description="Open in Model Explorer", icon="external-link",
                                        layout=W.Layout(width="220px")).add_class("fi-explorer")
        self.explorer_view = W.HTML().add_class("fi-explorer-view")
        self._process = None  # the Model Explorer server this panel started
        self.explorer_button.on_click(on_open)
        self.view = W.VBox([
            W.HBox([W.HTML("<b>Whole graph</b> <small>in Google's Model Explorer (the <code>explorer</code> extra): "
                           "every node, the fold decisions and state path as overlays</small>"), self.explorer_button]),
            self.explorer_view,
        ]).add_class("fi-explorer-panel")

    def open(self, analysis: inspector.Analysis, errors, folder: str | Path | None, port: int | None,
             timeout: float, say: Callable[[str], None]) -> str:
        """Write the graph and overlays, start a server on them, embed it. Returns its URL."""
        from inspector import explorer

        folder = Path(folder) if folder is not None else Path(tempfile.mkdtemp(prefix="fold-inspector-explorer-"))
        files = analysis.to_model_explorer(folder, errors=errors)
        self.close()
        say("starting Model Explorer...")
        self._process, port = explorer.start(files.folder, port=port, timeout=timeout)
        url = explorer.url(port, graph=files.graph, node_data=list(files.node_data))
        link = esc(url)
        self.explorer_view.value = (
            f"<div class='fi-explorer-link'><a href='{link}' target='_blank' rel='noopener' "
            f"style='color:#1a73e8;text-decoration:underline'>open in a new tab</a> "
            f"<small>{files.nodes} nodes, {len(analysis.sites)} sites; files in {esc(str(files.folder))}</small></div>"
            f"<iframe class='fi-explorer-frame' src='{link}' style='width:100%;height:640px;border:1px solid #ccc'>"
            "</iframe>")
        say(f"Model Explorer on port {port}")
        return url

    def close(self) -> None:
        """Stop the server this panel started (if any)."""
        process, self._process = self._process, None
        if process is not None and process.poll() is None:
            process.terminate()
            try:
                process.wait(5)
            except Exception:  # noqa: BLE001 - it must not outlive the widget
                process.kill()
        if process is not None:
            self.explorer_view.value = ""
