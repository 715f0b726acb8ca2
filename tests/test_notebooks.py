"""The quickstart notebook runs top to bottom in a real kernel and shows the expected tables."""

from __future__ import annotations

import nbformat
import pytest
from nbclient import NotebookClient

from conftest import ROOT


@pytest.mark.requires_dot  # the quickstart shows the FoldInspector, which draws with dot
def test_quickstart_runs_and_shows_decisions():
    nb = nbformat.read(ROOT / "notebooks" / "01_quickstart.ipynb", as_version=4)
    NotebookClient(nb, timeout=600, kernel_name="python3", resources={"metadata": {"path": str(ROOT)}}).execute()
    html = [o["data"]["text/html"] for c in nb.cells if c.cell_type == "code"
            for o in c.get("outputs", []) if "text/html" in o.get("data", {})]
    assert any("feeds-buffer-mutation" in h for h in html)
    assert any("marked-carried-state" in h for h in html)
    text = "".join(o.get("text", "") for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", []))
    assert "state-aware-strict   1 site, 0 folded, 1 skipped (feeds-buffer-mutation: 1)" in text
    errors = [o for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", []) if o.get("output_type") == "error"]
    assert errors == []
