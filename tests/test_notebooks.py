"""Every notebook runs top to bottom in a real kernel started in notebooks/, as ``make lab`` starts it (its
cells assert what they state), shows every plot as an image, and is stored without outputs. How long each takes
is measured by bench/bench_notebooks.py (target: 3 min)."""

from __future__ import annotations

import re

import nbformat
import pytest
from nbclient import NotebookClient

from conftest import ROOT

NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))

# What each notebook's outputs must show, beyond running without an error.
EXPECTED = {
    "01_quickstart.ipynb": ["feeds-buffer-mutation", "marked-carried-state",
                            "state-aware-strict   1 site, 0 folded, 1 skipped (feeds-buffer-mutation: 1)"],
    "02_quantization_drift.ipynb": ["folding helped: upstream - off = +", "the error enters at root:mul#1",
                                    "simulation vs TOSA, max difference in quantization steps",
                                    "baseline upstream@a8w8: ", "16-bit activations", "the most recovered: ",
                                    "conv->mul sites: 0 (nothing for the fold to do)", "the state does not compound: "],
    "03_teaching_the_fold.ipynb": ["mul-op-not-matched", "tfa graph has an exported program: False",
                                   "state-aware: fold ('feeds-carried-state',) | strict: skip ('feeds-buffer-mutation',)"],
    "04_triage_an_issue_report.ipynb": ["refused: refusing to load crafted.pt2: member", "the fold helps",
                                        "1 passed"],
    "05_write_a_rule.ipynb": ["reason: rule:wide-scale | the rule 'no-wide-scale' keeps this site from the pass",
                              "no-scalar-fold skip rule-pass-skipped", "SQNR at step 5: upstream "],
    "06_sweep_a_rule.ipynb": ["at tfa, state-aware decides like upstream on every site",
                              "reasons: feeds-buffer-mutation", "#### Sites whose decision differs",
                              "it changes decisions at edge only, which the quantized flow does not fold at",
                              "upstream's variant, +0.00 dB by construction", "sqnr_db_last (float64): a number on the",
                              "Folded sites out of all sites at tfa; SQNR (dB) at the last step",
                              "the same tables: True", "the command line's comment is the notebook's: True"],
    "07_the_arm_pipeline.ipynb": ["the conv's weight first changes in: prepare_pt2e: fuse conv + BatchNorm",
                                  "stateful_conv_mul / upstream: FoldScalarMulIntoConvPass",
                                  "the mul becomes: tosa.MUL.default"],
    "08_what_the_fold_buys.ipynb": ["folding saves exactly the mul's operation on ethos-u55-128: True",
                                    "chained into the conv on ethos-u85-256 (0 cycles): ['Transpose']",
                                    "skipping the fold costs +"],
    "09_which_sites_should_fold.ipynb": ["the advice folds it: True", "exhaustive search: 8 sets measured",
                                         "reloaded in a new process, it folds the advised sites: True",
                                         "two budgets, two answers: True"],
    "10_the_verdict_on_21234.ipynb": ["at transform-for-annotation (before calibration) and 0 in lowering",
                                      "the site's mul ('mul') is in it: False",
                                      "the structural check changed no decision in any flow",
                                      "reaches the pass", "So the marker is the PR's whole effect.",
                                      "the command line's reply is the notebook's for stateful_conv_mul: True"],
}


# A cell that draws: its source calls a record's ``.plot(``. JupyterLab must show it as an image, not as
# "<Figure size 700x400 with 1 Axes>" (a bare matplotlib Figure, in a kernel that never imported pyplot).
DRAWS = re.compile(r"\.plot\(")
IMAGES = ("image/png", "image/svg+xml")


def _outputs(nb) -> str:
    """Every cell's outputs as text; a cell's stream output joined as Jupyter shows it (a kernel under
    load may send one ``print`` as several stream messages: "refused:" and " refusing to load ...")."""
    texts = []
    for cell in nb.cells:
        streams: dict[str, str] = {}
        for o in cell.get("outputs", []) if cell.cell_type == "code" else []:
            if o.get("output_type") == "stream":
                streams[o.get("name", "stdout")] = streams.get(o.get("name", "stdout"), "") + o.get("text", "")
            texts += [str(v) for k, v in o.get("data", {}).items() if k in ("text/plain", "text/html")]
        texts += streams.values()
    return "\n".join(texts)


def test_notebooks_are_stored_without_outputs():
    assert len(NOTEBOOKS) >= 2
    for path in NOTEBOOKS:
        nb = nbformat.read(path, as_version=4)
        for cell in nb.cells:
            if cell.cell_type == "code":
                assert cell.outputs == [] and cell.execution_count is None, f"{path.name} has outputs"


@pytest.mark.requires_dot  # the notebooks draw graphs and show the FoldInspector
@pytest.mark.requires_tosa
@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.name for p in NOTEBOOKS])
def test_notebook_runs(path):
    nb = nbformat.read(path, as_version=4)
    # the kernel's working folder is the notebook's own, as JupyterLab starts it (not the repository's root)
    NotebookClient(nb, timeout=600, kernel_name="python3",
                   resources={"metadata": {"path": str(ROOT / "notebooks")}}).execute()
    errors = [o for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", [])
              if o.get("output_type") == "error"]
    assert errors == []
    drawing = [c for c in nb.cells if c.cell_type == "code" and DRAWS.search(c.source)]
    blank = [c.source.splitlines()[-1] for c in drawing
             if not any(m in o.get("data", {}) for o in c.get("outputs", []) for m in IMAGES)]
    assert blank == [], f"{path.name}: cells that draw a plot show no image: {blank}"
    text = _outputs(nb)
    for expected in EXPECTED.get(path.name, []):
        assert expected in text, f"{path.name}: {expected!r} not in its outputs"
