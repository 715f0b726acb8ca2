"""The second numbers engine: the quantize/dequantize simulation next to the TOSA reference model.

Same records and metrics, named everywhere (JSON, tables, CLI), never lowering anything, and
measured against TOSA on the samples: on these samples both engines give the same numbers (0.00 dB
and 0 quantization steps apart when this test was written); the asserts keep a margin of 1 dB and
1 step, the issue's bound for a preview.
"""

from __future__ import annotations

import json

import pytest

import inspector
from inspector._doors import tosa as _tosa
from inspector._front.cli import main
from inspector._numbers.engines import SIMULATION_NOTE, engines

SAMPLES = [("sample:conv_mul_scalar", 1), ("sample:stateful_conv_mul", 5)]


def _shape(comparison) -> list:
    """What a comparison's records look like, numbers left out."""
    return [(r.variant.label, r.folds, tuple((s.site_id, s.folded_at) for s in r.sites),
             sorted((m.step, m.output, len(m.sqnr_per_channel_db)) for m in r.metrics), r.quantization, r.spec)
            for r in comparison.results]


@pytest.mark.own_store  # its point is that the work is done again
@pytest.mark.requires_tosa
@pytest.mark.parametrize("name,steps", SAMPLES)
def test_simulation_agrees_with_tosa_on_the_samples(name, steps):
    inspector.clear_cache()
    simulated = inspector.compare(name, steps=steps, engine="simulation", workers=1)
    exact = inspector.compare(name, steps=steps, workers=1)
    assert simulated.engine == "simulation" and exact.engine == "tosa"
    assert {r.engine for r in simulated.results} == {"simulation"} and {r.engine for r in exact.results} == {"tosa"}
    # a simulated answer in the cache never answers for TOSA
    assert not any(r.cached and r.variant.rule.name == "off" for r in exact.results)
    assert _shape(simulated) == _shape(exact)
    assert all(r.not_delegated == () for r in simulated.results)  # there is no delegate to leave nodes out of
    data = simulated.to_dict()
    assert data["engine"] == "simulation" and {v["engine"] for v in data["variants"]} == {"simulation"}
    assert exact.to_dict()["engine"] == "tosa"
    gap = simulated.gap(exact)
    assert gap.engines == ("simulation", "tosa")
    assert len(gap.outputs) == sum(len(r.metrics) for r in exact.measured)
    assert gap.largest_db <= 1.0, gap.text()
    assert gap.largest_steps is not None and gap.largest_steps <= 1.0, gap.text()
    assert all(g.scale and g.scale > 0 for g in gap.outputs)
    assert json.loads(json.dumps(gap.to_dict()))["engines"] == ["simulation", "tosa"]
    text = inspector.present.comparison_text(simulated)
    assert "simulation" in text.splitlines()[0] and SIMULATION_NOTE in text
    assert "TOSA INT reference vs float" in inspector.present.comparison_text(exact)
    assert SIMULATION_NOTE not in inspector.present.comparison_text(exact)
    html = inspector.present.comparison_html(simulated)
    assert "preview, not TOSA" in html and "fi-engine" in html


@pytest.mark.own_store  # its point is that the work is done again
def test_simulation_never_lowers(monkeypatch):
    inspector.clear_cache()

    def refuse(*args, **kwargs):
        raise AssertionError("the simulation engine lowered a program")

    monkeypatch.setattr(_tosa, "lower", refuse)
    monkeypatch.setattr(_tosa, "reference_dispatch", refuse)
    comparison = inspector.compare("sample:conv_mul_scalar", variants=("off", "upstream"), engine="simulation")
    assert [r.error for r in comparison.results] == [None, None]
    assert comparison.result("upstream").folds == {"tfa": 1, "lowering": 0}
    assert "lower" not in comparison.result("off").timings and "simulate" in comparison.result("off").timings
    with pytest.raises(inspector.InspectorError, match="lowered"):  # the same call on TOSA does lower
        inspector.compare("sample:conv_mul_scalar", variants=("off",), workers=1)


def test_an_unknown_engine_is_one_line():
    with pytest.raises(inspector.InspectorError, match="unknown engine 'fast'.*tosa.*simulation") as info:
        inspector.compare("sample:conv_mul_scalar", engine="fast")
    assert "\n" not in str(info.value)
    assert engines.names() == ("tosa", "simulation")


def test_the_engine_survives_json():
    comparison = inspector.compare("sample:conv_mul_scalar", variants=("off",), engine="simulation")
    back = inspector.Comparison.from_dict(json.loads(json.dumps(comparison.to_dict())))
    assert back.engine == "simulation" and back.results[0].engine == "simulation"
    data = comparison.to_dict()
    data.pop("engine")
    for v in data["variants"]:
        v.pop("engine")
    assert inspector.Comparison.from_dict(data).engine == "tosa"  # a comparison saved before engines existed
    data["engine"] = "guess"
    with pytest.raises(inspector.InspectorError, match="unknown engine"):
        inspector.Comparison.from_dict(data)


def test_attribution_on_the_simulation_says_what_it_did_not_measure():
    result = inspector.attribution("sample:conv_mul_scalar", variants=("off", "upstream"), engine="simulation")
    assert result.engine == "simulation" and result.to_dict()["engine"] == "simulation"
    assert all(v.agreement == () for v in result.variants)
    assert "agreement with the TOSA reference was not measured" in inspector.present.attribution_text(result)


def test_cli_compare_engine(capsys):
    code = main(["compare", "sample:conv_mul_scalar", "--variants", "off,upstream", "--engine", "simulation",
                 "--json"])
    out, _ = capsys.readouterr()
    data = json.loads(out)
    assert code == 0 and data["engine"] == "simulation"
    assert [v["engine"] for v in data["variants"]] == ["simulation", "simulation"]
    code = main(["compare", "sample:conv_mul_scalar", "--variants", "off", "--engine", "simulation"])
    out, _ = capsys.readouterr()
    assert code == 0 and "quantize/dequantize simulation" in out and "engine: simulation:" in out
    code = main(["compare", "sample:conv_mul_scalar", "--engine", "fast"])
    _, err = capsys.readouterr()
    assert code == 2 and "invalid choice: 'fast'" in err


@pytest.mark.requires_tosa
def test_sweep_rows_name_their_engine_and_never_answer_for_each_other(tmp_path):
    simulated = inspector.sweep(["sample:conv_mul_scalar"], rules=("off", "upstream"), steps=1, engine="simulation",
                                out=tmp_path, workers=1)
    assert simulated.engine == "simulation" and simulated.to_dict()["engine"] == "simulation"
    assert [v.engine for v in simulated.variants] == ["simulation", "simulation"]
    assert all(v.error is None and v.not_delegated == 0 for v in simulated.variants)
    assert SIMULATION_NOTE in simulated.notes
    exact = inspector.sweep(["sample:conv_mul_scalar"], rules=("off", "upstream"), steps=1, out=tmp_path, workers=1)
    assert exact.engine == "tosa" and [v.engine for v in exact.variants] == ["tosa", "tosa"]
    assert exact.reused == 2  # the two decision rows; the variants' numbers were computed on TOSA
    assert SIMULATION_NOTE not in exact.notes
    again = inspector.sweep(["sample:conv_mul_scalar"], rules=("off", "upstream"), steps=1, engine="simulation",
                            out=tmp_path, workers=1)
    assert again.reused == 4 and [v.engine for v in again.variants] == ["simulation", "simulation"]
    for a, b in zip(simulated.variants, exact.variants):  # 0.00 dB apart on this sample when written
        assert abs(a.sqnr_db_last - b.sqnr_db_last) <= 1.0


@pytest.mark.requires_tosa
def test_a_simulated_sweep_confirms_on_tosa_only_the_models_whose_decisions_differ(capsys):
    """Issue 31's review loop: every variant on the simulation, then TOSA only where the rules decide
    differently at tfa (stateful_conv_mul: upstream folds, the strict rule skips; conv_mul_scalar: both
    fold); the table says which numbers stay simulated."""
    models = ["sample:conv_mul_scalar", "sample:stateful_conv_mul"]
    result = inspector.sweep(models, rules=("upstream", "state-aware-strict"), steps=1, engine="simulation",
                             confirm=True,
                             workers=1)
    by = {(v.target, v.rule): v for v in result.variants}
    assert {k: (v.engine, v.confirmed) for k, v in by.items()} == {
        ("sample:conv_mul_scalar", "upstream"): ("simulation", False),
        ("sample:conv_mul_scalar", "state-aware-strict"): ("simulation", False),
        ("sample:stateful_conv_mul", "upstream"): ("tosa", True),
        ("sample:stateful_conv_mul", "state-aware-strict"): ("tosa", True)}
    assert all(v.error is None for v in result.variants)
    assert {c.target for c in result.changed} == {"sample:stateful_conv_mul"}
    assert all(c.sqnr_delta_db is not None for c in result.changed)  # the deltas are the confirmed TOSA numbers'
    assert "2 of 4 variants confirmed on the TOSA reference model" in " ".join(result.notes)
    text = result.to_markdown()
    assert "(sim)" in text and "not confirmed on TOSA" in text
    models_table = text[text.index("#### Models"):]
    stateful_line = next(line for line in models_table.splitlines() if "stateful_conv_mul" in line)
    scalar_line = next(line for line in models_table.splitlines() if "conv_mul_scalar" in line)
    assert "(sim)" not in stateful_line and scalar_line.count("(sim)") == 2
    with pytest.raises(inspector.InspectorError, match="^confirm re-runs on the TOSA reference"):
        inspector.sweep(models, rules=("upstream", "state-aware-strict"), steps=1, confirm=True)
    assert main(["sweep", "sample:conv_mul_scalar", "--steps", "1", "--confirm"]) == 2
    assert "confirm re-runs on the TOSA reference" in capsys.readouterr().err


def test_a_report_of_simulated_numbers_says_so():
    analysis = inspector.analyze("sample:conv_mul_scalar", stage="tfa")
    comparison = analysis.compare(("off",), engine="simulation")
    page = analysis.report(comparison, format="html")
    assert "quantize/dequantize simulation (preview, not TOSA) vs float</h2>" in page
    assert "--engine simulation" in page and "TOSA INT reference vs float" not in page
    md = analysis.report(comparison, format="md")
    assert f"engine: {SIMULATION_NOTE}" in md and "--engine simulation" in md
    assert json.loads(analysis.report(comparison, format="json"))["comparison"]["engine"] == "simulation"


def test_a_remembered_histogram_search_gives_the_range_the_observer_computes():
    """The converter's histogram search is remembered by what it reads (counts, range, bins): the same range,
    bit for bit, computed once; other counts, another range; the class is left as torchao made it."""
    import torch
    from torchao.quantization.pt2e.observer import HistogramObserver

    original = HistogramObserver.__dict__["_non_linear_param_search"]
    calls = []

    def observed(values: torch.Tensor):
        obs = HistogramObserver(dtype=torch.int8, qscheme=torch.per_tensor_symmetric)
        obs(values)
        return obs

    def counting(self):
        calls.append(1)
        return original(self)

    data = torch.randn(4, 8, 16, 16, generator=torch.Generator().manual_seed(3)) * 3
    plain = observed(data).calculate_qparams()
    inspector.clear_cache()
    HistogramObserver._non_linear_param_search = counting  # the search the scope remembers, counted
    try:
        with _tosa.remembered_histogram_searches():
            first = observed(data).calculate_qparams()
            again = observed(data.clone()).calculate_qparams()
            other = observed(data * 2).calculate_qparams()
    finally:
        HistogramObserver._non_linear_param_search = original
    assert len(calls) == 2  # the same counts once; the other counts once more
    for got in (first, again):
        assert all(torch.equal(a, b) for a, b in zip(got, plain))
    assert not torch.equal(other[0], plain[0])
    assert HistogramObserver.__dict__["_non_linear_param_search"] is original


def test_a_conversion_with_remembered_searches_is_the_conversion_without(monkeypatch):
    """Two variants of one model on the simulation, with the searches remembered and without: the same outputs,
    bit for bit (the second variant's searches before its site are the first's)."""
    import contextlib

    import torch

    def outputs():
        inspector.clear_cache()
        c = inspector.compare("sample:conv_mul_chain", variants=("off", "upstream"), engine="simulation")
        return [o for r in c.results for step in r.outputs for o in step]

    monkeypatch.setenv("FOLD_INSPECTOR_STORE", "off")
    remembered = outputs()
    monkeypatch.setattr(_tosa, "remembered_histogram_searches", contextlib.nullcontext)
    computed = outputs()
    assert len(remembered) == len(computed) > 0
    assert all(torch.equal(a, b) for a, b in zip(remembered, computed))
