"""Is it the fold or the bits? Quantizations and per-node overrides as parts of a variant.

Every number here comes from the real Arm quantizer and either the real lowering for the variant's
TOSA specification and the bit-accurate TOSA reference model, or (the coverage matrix, which needs no
lowering) the simulation of the same converted program, tied to TOSA on a corner of the matrix;
nothing is presumed (not even that 16-bit activations beat 8-bit ones: the tests say what they measured).
"""

from __future__ import annotations

import json
import math

import pytest

import inspector
from inspector import InspectorError, Variant
from inspector._numbers.flow import has_state
from inspector._targets.load import load
from inspector._front.cli import main

QUANTIZATIONS = ("a8w8", "a8w8-per-tensor", "a16w8", "a8w4")
STEPS = 3


def stateful_samples() -> list[str]:
    names = []
    for name in inspector.samples.names():
        if name == "generated_blocks":
            continue  # 200 sites: a sweep's model, not a unit test's
        if has_state(load(f"sample:{name}")):
            names.append(name)
    return names


@pytest.fixture(scope="module")
def stateful():
    names = stateful_samples()
    assert len(names) >= 3, names  # the samples this file is about must exist
    return names


def test_named_quantizations_carry_their_tosa_specification():
    specs = {name: inspector.quantizations.get(name).spec for name in QUANTIZATIONS}
    assert specs == {"a8w8": "TOSA-1.0+INT", "a8w8-per-tensor": "TOSA-1.0+INT", "a16w8": "TOSA-1.0+INT+int16",
                     "a8w4": "TOSA-1.0+INT+int4"}
    with pytest.raises(InspectorError, match=r"^unknown quantization 'a4w4'; choose one of: a8w8, "):
        inspector.compare("sample:conv_mul_scalar", variants=["upstream@a4w4"])


def test_variant_labels_json_and_parsing():
    v = Variant(rule="upstream", markers=("s1",), quantization="a16w8", overrides={"conv": "float", "b": "a16w8"})
    assert v.overrides == (("b", "a16w8"), ("conv", "float"))  # sorted, one frozen form
    assert v.label == "upstream+marked(s1)@a16w8+keep(b=a16w8,conv=float)"
    assert Variant(rule="off").label == "off"  # no quantization named: the comparison's, not in the label
    assert inspector._numbers.compare.split_variant("rules.py:mine@a8w4") == ("rules.py:mine", "a8w4")
    assert inspector._numbers.compare.split_variant("/tmp/a@b/rules.py:mine") == ("/tmp/a@b/rules.py:mine", None)
    with pytest.raises(InspectorError, match="unknown quantization 'int3'"):
        Variant(rule="upstream", overrides={"conv": "int3"})


@pytest.mark.slow  # no lowering, but 32 quantized variants: make test runs it
def test_every_stateful_sample_under_every_quantization(stateful):
    """The coverage matrix (every stateful sample x every quantization x two rules) on the simulation
    engine: finite numbers, the quantizer's TOSA specification per quantization, the same fold
    decisions under every quantization, and where 16-bit activations beat 8-bit (measured). The
    numbers the TOSA reference model gives for the same matrix are tied to these by the corner below
    (test_the_simulation_agrees_with_tosa_on_a_corner_of_the_matrix): the simulation is the
    converted program the TOSA flow lowers, run in PyTorch, so the matrix needs no lowering."""
    measured = {}
    for name in stateful:
        variants = [f"{p}@{q}" for q in QUANTIZATIONS for p in ("off", "upstream")]
        comparison = inspector.compare(f"sample:{name}", variants=variants, steps=STEPS, engine="simulation")
        assert comparison.engine == "simulation" and not comparison.errors, [r.error for r in comparison.errors]
        for result in comparison.results:
            assert result.engine == "simulation"
            assert result.spec == inspector.quantizations.get(result.quantization).spec
            assert all(math.isfinite(m.sqnr_db) or m.sqnr_db == math.inf for m in result.metrics), result.variant.label
            assert all(math.isfinite(m.max_abs_error) for m in result.metrics)
        folded = {(r.variant.rule.name, r.quantization): tuple(s.folded_at for s in r.sites) for r in comparison.results}
        for q in QUANTIZATIONS:  # the quantization changes no fold decision here
            for p in ("off", "upstream"):
                assert folded[(p, q)] == folded[(p, "a8w8")], (name, p, q)
        last = {r.variant.label: min(m.sqnr_db for m in r.metrics if m.step == STEPS - 1) for r in comparison.results}
        measured[name] = last
    worse = [(name, p, last[f"{p}@a16w8"], last[f"{p}@a8w8"]) for name, last in measured.items()
             for p in ("off", "upstream") if last[f"{p}@a16w8"] < last[f"{p}@a8w8"]]
    # Not presumed, measured: 16-bit activations beat 8-bit on every stateful sample but one. On
    # streaming_keyword_spotter a16w8 came out lower (on TOSA at step 3: off 35.4 vs 39.5 dB, upstream
    # 35.9 vs 41.2 dB; docs/numbers.md reports it), and the simulation says the same. A change in either
    # direction fails here and shows the numbers.
    assert {(name, p) for name, p, *_ in worse} == WORSE_AT_16_BITS, (
        f"a16w8 below a8w8 (sample, rule, a16w8 dB, a8w8 dB): {worse}")


WORSE_AT_16_BITS = {("streaming_keyword_spotter", "off"), ("streaming_keyword_spotter", "upstream")}
# The corner of the matrix run on the TOSA reference model: the sample whose 16-bit activations come out
# worse (where engines could most plausibly disagree) and the first stateful sample, at 8 and 16 bits.
CORNER_QUANTIZATIONS = ("a8w8", "a16w8")


@pytest.mark.requires_tosa
def test_the_simulation_agrees_with_tosa_on_a_corner_of_the_matrix(stateful):
    """The TOSA reference model on a corner of the matrix, and what ties the simulated matrix to it:
    per variant, output and step, the simulation's outputs within one quantization step of the TOSA
    reference's at 8-bit activations (8 int16 steps at a16w8: measured up to 4.0 on
    streaming_keyword_spotter, 1/32 of an 8-bit step), attribution's own agreement figure the same,
    the same fold decisions, and the 16-bit-vs-8-bit verdict of the matrix the same on TOSA."""
    corner = sorted({"streaming_keyword_spotter", stateful[0]} & set(stateful))
    assert "streaming_keyword_spotter" in corner
    for name in corner:
        variants = [f"{p}@{q}" for q in CORNER_QUANTIZATIONS for p in ("off", "upstream")]
        exact = inspector.compare(f"sample:{name}", variants=variants, steps=STEPS, workers=1)
        simulated = inspector.compare(f"sample:{name}", variants=variants, steps=STEPS, engine="simulation")
        assert not exact.errors and not exact.notes, [r.error for r in exact.errors]
        gap = simulated.gap(exact)
        assert len(gap.outputs) == sum(len(r.metrics) for r in exact.results)
        for g in gap.outputs:
            bound = 8.0 if g.variant.endswith("a16w8") else 1.0
            assert g.max_steps is not None and g.max_steps <= bound, (name, g)
        attribution = inspector.attribution(exact)
        for result, va in zip(exact.results, attribution.variants):
            bound = 8.0 if result.spec.endswith("int16") else 1.0
            for agreement in va.agreement:
                assert agreement.max_steps is not None and agreement.max_steps <= bound, (name, result.variant.label)
        for a, b in zip(exact.results, simulated.results):
            assert [s.folded_at for s in a.sites] == [s.folded_at for s in b.sites], (name, a.variant.label)
        last = {r.variant.label: min(m.sqnr_db for m in r.metrics if m.step == STEPS - 1) for r in exact.results}
        worse = {(name, p) for p in ("off", "upstream") if last[f"{p}@a16w8"] < last[f"{p}@a8w8"]}
        assert worse == {pair for pair in WORSE_AT_16_BITS if pair[0] == name}, (name, last)


@pytest.mark.requires_tosa
def test_an_override_keeps_a_sites_mul_in_float():
    target = "sample:stateful_conv_mul"
    site = inspector.analyze(target, stage="tfa").sites[0]
    comparison = inspector.compare(target, variants=[Variant(rule="off"), Variant(rule="off", overrides={site.id: "float"}),
                                                     Variant(rule="upstream", overrides={site.id: "float"})],
                                   steps=STEPS)
    plain, kept, kept_upstream = comparison.results
    aten_mul = inspector.analyze(target, stage="aten").sites[0].mul
    outside = lambda r: {n.target for n in r.not_delegated if "quantize" not in n.target}
    assert "aten.mul.Tensor" not in outside(plain)
    assert "aten.mul.Tensor" in outside(kept) and "aten.mul.Tensor" in outside(kept_upstream)
    # the quantizer leaves a float mul out of transform-for-annotation: upstream no longer folds it, and says so
    assert [s.folded_at for s in kept_upstream.sites] == [None]
    assert any(site.id in n and "does not fold" in n for n in comparison.notes), comparison.notes
    attribution = inspector.attribution(comparison)
    before = next(r for r in attribution.variants[0].last_step() if r.name == aten_mul)
    after = next(r for r in attribution.variants[1].last_step() if r.name == aten_mul)
    # quantized, the mul adds error of its own; kept in float, none enters there (what its record reads
    # is still rounded where the next op quantizes its input)
    assert before.scale is not None and before.drop_db is not None and before.drop_db > 0.5, before
    assert after.drop_db is None or after.drop_db < 0.01, after


@pytest.mark.requires_tosa
def test_a_variant_that_cannot_run_is_one_line_and_the_others_stay():
    config = inspector.quantizations.get("a16w8").build()
    try:
        inspector.quantizations.register("a16w8-on-int8", config, spec="TOSA-1.0+INT")  # a spec that cannot lower it
        comparison = inspector.compare("sample:stateful_conv_mul",
                                       variants=["upstream", "upstream@a16w8-on-int8",
                                        Variant(rule="off", overrides={"no_such_node": "float"})], steps=2)
    finally:
        inspector.quantizations.unregister("a16w8-on-int8")
    ok, bad_spec, bad_override = comparison.results
    assert ok.error is None and ok.metrics
    assert bad_spec.error.startswith("lower failed for variant upstream@a16w8-on-int8: ") and "\n" not in bad_spec.error
    assert "INT16" in bad_spec.error  # the lowering says which dtype it refused
    assert bad_override.error == ("variant off+keep(no_such_node=float): override 'no_such_node' names nothing in "
                                  "sample:stateful_conv_mul; give a node name, a module path, a site id (see analyze) "
                                  "or a node id (see attribution)")
    assert [r.variant.label for r in comparison.measured] == ["upstream"]
    text = comparison._repr_mimebundle_()["text/plain"]
    assert "upstream@a16w8-on-int8: not run: lower failed" in text
    again = inspector.Comparison.from_dict(json.loads(json.dumps(comparison.to_dict())))
    assert [r.error for r in again.results] == [r.error for r in comparison.results]
    assert [r.variant for r in again.results] == [r.variant for r in comparison.results]
    with pytest.raises(InspectorError, match="names nothing"):  # every variant failing: its error is raised
        inspector.compare("sample:stateful_conv_mul", variants=[Variant(rule="off", overrides={"nothing": "float"})])


@pytest.mark.requires_tosa
def test_module_paths_and_aligned_ids_name_nodes_and_a16w8_overrides_widen_one_node():
    target = "sample:stateful_conv_mul"
    comparison = inspector.compare(target, variants=[Variant(rule="off", overrides={"conv": "float"}),
                                            Variant(rule="off", overrides={"root:mul": "float"}),
                                            Variant(rule="off", overrides={"root:mul": "a16w8"})], steps=2)
    by_module, by_id, widened = comparison.results
    assert "aten.convolution.default" in {n.target for n in by_module.not_delegated}
    assert "aten.mul.Tensor" in {n.target for n in by_id.not_delegated}
    assert widened.error is None and widened.spec == "TOSA-1.0+INT+int16"
    assert "aten.mul.Tensor" not in {n.target for n in widened.not_delegated}  # a16w8 still runs in the delegate


@pytest.mark.requires_tosa
def test_the_done_when_command_prints_three_variants(capsys):
    code = main(["compare", "sample:stateful_wide_scale", "--variants", "off@a8w8,upstream@a8w8,upstream@a16w8",
                 "--steps", "20", "--json"])
    out, _ = capsys.readouterr()
    data = json.loads(out)
    assert code == 0
    assert [v["variant"]["label"] for v in data["variants"]] == ["off@a8w8", "upstream@a8w8", "upstream@a16w8"]
    assert [v["quantization"] for v in data["variants"]] == ["a8w8", "a8w8", "a16w8"]
    assert [v["tosa_spec"] for v in data["variants"]] == ["TOSA-1.0+INT", "TOSA-1.0+INT", "TOSA-1.0+INT+int16"]
    assert all(len(v["metrics"]) == 20 for v in data["variants"])


def test_cli_quantization_errors_are_one_line(capsys):
    code = main(["compare", "sample:conv_mul_scalar", "--variants", "upstream@a3w3"])
    _, err = capsys.readouterr()
    assert code != 0 and err.count("\n") == 1 and "unknown quantization 'a3w3'" in err
    code = main(["compare", "sample:conv_mul_scalar", "--keep", "novalue"])
    _, err = capsys.readouterr()
    assert code != 0 and err.count("\n") == 1 and "--keep 'novalue': give KEY=float" in err


@pytest.mark.requires_tosa
def test_bits_ranks_what_each_change_recovers():
    bits = inspector.bits("sample:stateful_wide_scale", steps=STEPS)
    comparison = bits.comparison
    base = comparison.results[0]
    assert base.variant.label == bits.baseline == "upstream@a8w8"
    worst_last = lambda r: min(m.sqnr_db for m in r.metrics if m.step == STEPS - 1)
    assert bits.baseline_sqnr_db == worst_last(base)
    by_label = {r.variant.label: r for r in comparison.results}
    for c in bits.changes:
        assert c.error is None
        assert c.sqnr_db == worst_last(by_label[c.variant])
        assert c.recovered_db == pytest.approx(c.sqnr_db - bits.baseline_sqnr_db)
    recovered = [c.recovered_db for c in bits.changes]
    assert recovered == sorted(recovered, reverse=True)
    kinds = {(c.change, c.kind) for c in bits.changes}
    assert {("fold off", "model"), ("16-bit activations", "model"), ("keep in float", "site")} <= kinds
    site = inspector.analyze("sample:stateful_wide_scale", stage="tfa").sites[0]
    assert any(c.kind == "site" and c.node == site.id for c in bits.changes)
    assert bits.best.change in bits.answer() and "dB" in bits.answer()
    data = json.loads(json.dumps(bits.to_dict()))
    assert [c["variant"] for c in data["changes"]] == [c.variant for c in bits.changes]
    fig = bits.plot()
    assert len(fig.axes[0].patches) == len(bits.changes)
    with pytest.raises(InspectorError, match="max_sites must be a whole number"):
        inspector.bits("sample:stateful_wide_scale", max_sites=-1)


@pytest.mark.requires_tosa
def test_a_sweep_runs_quantized_variants():
    result = inspector.sweep(["sample:stateful_conv_mul"], rules=("upstream",), steps=2,
                             variants=["upstream", "upstream@a16w8"], workers=1)
    rows = {v.variant: v for v in result.variants}
    assert set(rows) == {"upstream", "upstream@a16w8"}
    assert rows["upstream@a16w8"].quantization == "a16w8" and rows["upstream@a16w8"].tosa_spec.endswith("int16")
    assert rows["upstream@a16w8"].error is None
    assert rows["upstream@a16w8"].sqnr_db_last != rows["upstream"].sqnr_db_last


@pytest.mark.requires_tosa
def test_the_widget_picks_quantizations_answers_fold_or_bits_and_keeps_them_in_sessions(tmp_path):
    from widgets import FoldInspector

    # STEPS, as the bits test and the matrix: the run's store answers their variants (the preview's simulated
    # ones, three of the four exact ones) and the whole bits run, so what this test adds is the widget's part
    app = FoldInspector("sample:stateful_wide_scale", stage="tfa", rule="upstream", variants=("off", "upstream"),
                        steps=STEPS)
    assert app.quantization_picker.value == ("a8w8",) and app._reference.variants() == ["off", "upstream"]
    app.quantization_picker.value = ("a8w8", "a16w8")
    assert app._reference.variants() == ["off@a8w8", "upstream@a8w8", "off@a16w8", "upstream@a16w8"]
    app.run_reference(wait=True)
    labels = [r.variant.label for r in app.comparison.results]
    assert labels == ["off@a8w8", "upstream@a8w8", "off@a16w8", "upstream@a16w8"]
    assert "upstream@a16w8" in app.results.value and "<th>quantization</th>" in app.results.value
    app.quantization_picker.value = ()
    app.run_button.click()  # nothing picked: one line, the widget works on
    assert "pick at least one quantization" in app.error.value and not app.running
    app.quantization_picker.value = ("a8w8",)
    app.run_bits(wait=True)
    assert app.bits is not None and app.bits.baseline == "upstream@a8w8", (app.last_error, app.progress_label.value)
    assert "16-bit activations" in app.bits_results.value and "<img" in app.bits_results.value
    path = app.save_session(tmp_path / "s.json")
    app.quantization_picker.value = ("a16w8",)
    app.save_session(tmp_path / "t.json")
    again = FoldInspector.load_session(tmp_path / "t.json")
    assert again.quantization_picker.value == ("a16w8",)
    assert inspector.Session.read(path).quantizations == ("a8w8",)


def test_a_registered_quantization_shows_in_its_help_the_cli_and_the_widget(capsys):
    """One registry, read live: a quantization registered after import is in its help, in the CLI's
    help of ``--quantization`` and in the widget's picker and its tooltip."""
    from inspector._front import cli
    from widgets import FoldInspector

    name, help = "a8w8-mine", "the default config under a name of mine"
    app = FoldInspector("sample:conv_mul_scalar", stage="tfa")
    assert name not in app.quantization_picker.options
    config = inspector.quantizations.get("a8w8").build()
    try:
        mine = inspector.quantizations.register(name, config, help=help)
        assert name in inspector.quantizations and inspector.quantizations.get(name) is mine
        assert inspector.quantizations.describe(name) == help and inspector.quantizations.help()[name] == help
        try:
            cli.main(["compare", "--help"])
        except SystemExit:
            pass
        assert f"{name}: {help}" in " ".join(capsys.readouterr().out.split())
        app.set_markers(app.markers)  # any refresh offers what is registered now
        assert name in app.quantization_picker.options and f"{name}: {help}" in app.quantization_picker.tooltip
        with pytest.raises(InspectorError, match="^a quantization named 'a8w4' is registered already; choose another "
                                                 "name$"):
            inspector.quantizations.register("a8w4", config)
    finally:
        inspector.quantizations.unregister(name)
    inspector.quantizations.unregister("a8w4")  # built-ins stay
    assert name not in inspector.quantizations and "a8w4" in inspector.quantizations
