"""The verdict on #21234 from the command line, on a stateful model notebook 10 never saw: its reply's numbers are
a comparison's, run again from nothing; the fold after calibration is upstream's flow but for one observer; bad
input is one line."""

from __future__ import annotations

import os

import pytest
import torch

import inspector
from inspector._advise.verdict_records import MARKER_ON_PROGRAM, STRUCTURAL
from inspector._base.formats import GITHUB_COMMENT_LIMIT, cycles, db
from inspector._front.cli import main
from inspector._numbers import stale
from conftest import ROOT, STORE_ENV

MODEL = ROOT / "tests" / "data" / "leaky_gain_state.py"
TARGET = f"{MODEL}:LeakyGainState"
CHIP = "ethos-u55-128"
STEPS = 6


def _table(reply: str, column: str) -> list[dict[str, str]]:
    """The rows of the reply's table that has ``column``, as dicts (code spans unwrapped)."""
    def cells(line: str) -> list[str]:
        return [c.strip().strip("`") for c in line.strip().strip("|").split(" | ")]

    lines = reply.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("| network") and column in cells(line))
    header = cells(lines[start])
    rows = []
    for line in lines[start + 2:]:
        if not line.startswith("|"):
            break
        rows.append(dict(zip(header, cells(line))))
    return rows


def _row(reply: str, column: str, **match) -> dict[str, str]:
    return next(r for r in _table(reply, column) if all(r[k] == v for k, v in match.items()))


@pytest.mark.requires_tosa
@pytest.mark.own_store
def test_the_command_lines_reply_on_a_new_stateful_model_is_a_comparisons(tmp_path, capsys, monkeypatch):
    out = tmp_path / "reply.md"
    assert main(["verdict", TARGET, "--accelerator", CHIP, "--steps", str(STEPS), "--out", str(out)]) == 0
    reply = out.read_text()
    assert len(reply) <= GITHUB_COMMENT_LIMIT
    assert not [p for p in (str(ROOT), str(tmp_path), os.path.expanduser("~")) if p in reply]

    # the same questions asked again from nothing: another store, nothing in memory
    monkeypatch.setenv(STORE_ENV, str(tmp_path / "fresh-store"))
    inspector.clear_cache()
    (site,) = [s.id for s in inspector.analyze(TARGET, accelerator=CHIP).sites]
    direct = inspector.compare(TARGET, variants=["upstream", ("state-aware", [site])], steps=STEPS, accelerator=CHIP)
    up, skipped = direct.results
    assert not any(r.cached for r in direct.results)
    assert up.folds == {"tfa": 1, "lowering": 0} and skipped.folds == {"tfa": 0, "lowering": 0}

    int_row = _row(reply, "folded before calibration", network="LeakyGainState", flow=f"INT ({CHIP})")
    assert int_row["folded before calibration"] == f"{up.folds['tfa']} of 1"
    assert int_row["folded in to_edge_transform_and_lower"] == "0 of 1"
    fp_row = _row(reply, "folded before calibration", network="LeakyGainState", flow="FP (tosa-fp)")
    assert fp_row["folded in to_edge_transform_and_lower"] == "1 of 1"  # the FP flow folds it in its lowering call
    row = _row(reply, "cycles installed", network="LeakyGainState", accelerator=CHIP)
    assert row["cycles installed"] == cycles(up.cost.cycles) and row["cycles skipped"] == cycles(skipped.cost.cycles)
    assert row["worst dB installed"] == db(up.overall("sqnr")) and row["worst dB skipped"] == db(skipped.overall("sqnr"))
    assert up.cost.compiler in reply

    # the fold after calibration, computed again: its dB is the reply's, and without the observer swap it is upstream
    chip = inspector.accelerators.get(CHIP)
    after = stale.folded_after_calibration(TARGET, chip, STEPS)
    column = next(c for c in row if c.startswith("folded after calibration"))
    assert row[column].startswith(db(after.overall("sqnr")) + " (")
    assert after.cost.cycles == up.cost.cycles and after.folds == up.folds  # the same folded program
    assert after.sites[0].conv_output.scale != up.sites[0].conv_output.scale  # the conv keeps its pre-fold step
    assert not all(torch.equal(a, b) for sa, sb in zip(after.outputs, up.outputs) for a, b in zip(sa, sb))
    unswapped = stale.folded_after_calibration(TARGET, chip, STEPS, copy_observers=False)
    assert all(torch.equal(a, b) for sa, sb in zip(unswapped.outputs, up.outputs) for a, b in zip(sa, sb))

    # the same reply in this process, and every decision the words state
    v = inspector.verdict(TARGET, accelerators=[CHIP], steps=STEPS)
    assert v.to_markdown() == reply
    (network,) = v.networks
    for flow in network.flows:
        assert flow.decision(STRUCTURAL).folded == (site,)  # the structural check never stops it
    assert [f.decision(MARKER_ON_PROGRAM).folded for f in network.flows] == [(), (site,)]
    assert "1 of 1 site(s) at transform-for-annotation (before calibration) and 0 in lowering" in reply
    short = v.to_markdown(limit=4_000)
    assert len(short) <= 4_000 and short.startswith("**The verdict on #21234, measured**")


@pytest.mark.parametrize("argv, says", [
    (["verdict"], "the following arguments are required: TARGET"),
    (["verdict", "sample:no_such_sample"], "unknown sample 'no_such_sample'"),
    (["verdict", "missing_model.py:Net"], "no such file: missing_model.py"),
    (["verdict", "sample:stateful_conv_mul", "--accelerator", "ethos-u99-1"], "unknown accelerator 'ethos-u99-1'"),
    (["verdict", "sample:stateful_conv_mul", "--accelerator", "tosa-fp"], "tosa-fp is the FP flow"),
    (["verdict", "sample:stateful_conv_mul", "--steps", "0"], "--steps must be from 1"),
])
def test_bad_input_is_one_line(argv, says, capsys):
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and says in err and err.count("\n") == 1, err
