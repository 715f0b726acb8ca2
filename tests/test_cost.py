"""What the fold buys: a variant's cost on an Ethos-U, from Vela compiling the flatbuffer the TOSA reference ran.

The reference is ExecuTorch's own Ethos-U flow with no inspector code in its path (``_executorch_cycles``:
torch, executorch, torchao and Vela; the fold turned off by swapping the class the Arm pass manager builds),
on the same sample model and the same calibration batches the comparison used: each variant's total cycles
must equal what that flow gives within 1%, and the unfolded mul's rows must be what the ``off`` variant's
site price says.
"""

from __future__ import annotations

import contextlib
import copy
import csv
import functools
import importlib.metadata
import io
import os

import pytest
import torch

import inspector

pytestmark = pytest.mark.requires_tosa

SAMPLES = {"stateful_conv_mul": "StatefulConvMul", "conv_mul_channel_scale": "ConvMulChannelScale"}
ACCELERATORS = ("ethos-u55-128", "ethos-u85-256")


@contextlib.contextmanager
def _fold(on: bool):
    """The fold as installed, or a pass that does nothing in its place (the pass manager looks the class up)."""
    from executorch.backends.arm._passes import arm_pass_manager
    from executorch.exir.pass_base import ExportPass
    from torch.fx.passes.infra.pass_base import PassResult

    class NoFold(ExportPass):
        def __init__(self, *args, **kwargs):
            super().__init__()

        def call(self, graph_module):
            return PassResult(graph_module, False)

    installed = arm_pass_manager.FoldScalarMulIntoConvPass
    if not on:
        arm_pass_manager.FoldScalarMulIntoConvPass = NoFold
    try:
        yield
    finally:
        arm_pass_manager.FoldScalarMulIntoConvPass = installed


@functools.cache
def _executorch_cycles(sample: str, accelerator: str, on: bool, batches: int) -> tuple[int, tuple]:
    """ExecuTorch's Ethos-U flow on the sample (EthosUQuantizer, EthosUPartitioner, Vela through EthosUBackend),
    calibrated as the comparison was: (total cycles over every Vela call, the per-layer rows)."""
    import sample_models.models as models
    from executorch.backends.arm.ethosu import EthosUCompileSpec, EthosUPartitioner
    from executorch.backends.arm.ethosu import backend as ethosu_backend
    from executorch.backends.arm.quantizer import EthosUQuantizer, get_symmetric_quantization_config
    from executorch.exir import to_edge_transform_and_lower
    from torchao.quantization.pt2e.quantize_pt2e import convert_pt2e, prepare_pt2e

    model = getattr(models, SAMPLES[sample])().eval()
    inputs = model.example_inputs()
    calibration = _calibration(sample, batches)
    calls = []
    installed = ethosu_backend.vela_compile

    def collecting(flatbuffer, args, **kwargs):
        with contextlib.redirect_stdout(io.StringIO()):  # Vela prints kilobytes per call
            result = installed(flatbuffer, [*args, "--verbose-performance"], **kwargs)
        folder = os.path.join(kwargs["intermediate_path"], "output")
        (summary,) = [n for n in os.listdir(folder) if n.startswith("out_summary_")]
        with open(os.path.join(folder, summary), newline="") as f:
            total = int(float(next(csv.DictReader(f))["cycles_total"]))
        with open(os.path.join(folder, "out_per-layer.csv"), newline="") as f:
            calls.append((total, tuple(csv.DictReader(f))))  # every delegate overwrites the same files: read now
        return result

    import tempfile

    with tempfile.TemporaryDirectory() as folder, _fold(on):
        spec = EthosUCompileSpec(accelerator).dump_intermediate_artifacts_to(folder)
        module = torch.export.export(copy.deepcopy(model), inputs).module(check_guards=False)
        quantizer = EthosUQuantizer(spec)
        quantizer.set_global(get_symmetric_quantization_config(is_per_channel=True))
        prepared = prepare_pt2e(module, quantizer)
        with torch.no_grad():
            for batch in calibration:
                if hasattr(model, "state"):  # the flow's calibration starts every batch from the initial state
                    prepared.state.zero_()
                prepared(*batch)
        converted = convert_pt2e(prepared)
        if hasattr(model, "state"):
            converted.state.zero_()
        ethosu_backend.vela_compile = collecting
        try:
            to_edge_transform_and_lower(torch.export.export(converted, inputs), partitioner=[EthosUPartitioner(spec)])
        finally:
            ethosu_backend.vela_compile = installed
    assert calls, "ExecuTorch's flow called Vela for no delegate"
    return sum(total for total, _ in calls), tuple(row for _, rows in calls for row in rows)


@functools.cache
def _calibration(sample: str, batches: int):
    """The calibration the comparison chose (its batches; a stateful sample runs one step each: steps=1)."""
    comparison = _compare(sample, ACCELERATORS[0])
    return tuple(tuple(b) for b in comparison.run.calibration.batches)[:batches]


@functools.cache
def _compare(sample: str, accelerator: str):
    return inspector.compare(f"sample:{sample}", variants=("off", "upstream"), accelerator=accelerator, workers=1)


@pytest.mark.parametrize("accelerator", ACCELERATORS)
@pytest.mark.parametrize("sample", SAMPLES)
def test_each_variants_cycles_are_executorchs_own_ethos_u_flow(sample, accelerator):
    comparison = _compare(sample, accelerator)
    off, upstream = comparison.results
    assert comparison.accelerator == accelerator and off.accelerator == accelerator
    assert off.cost is not None and upstream.cost is not None, (off.cost_error, upstream.cost_error)
    assert [s.folded_at for s in off.sites] == [None] and [s.folded_at for s in upstream.sites] == ["tfa"]
    batches = len(comparison.run.calibration.batches)
    for result, on in ((off, False), (upstream, True)):
        theirs, _ = _executorch_cycles(sample, accelerator, on, batches)
        assert abs(result.cost.cycles - theirs) <= 0.01 * theirs, (result.variant.label, result.cost.cycles, theirs)
    assert upstream.cost.cycles < off.cost.cycles and upstream.cost.npu_ops == off.cost.npu_ops - 1


@pytest.mark.parametrize("sample", SAMPLES)
def test_the_off_variants_site_price_is_the_unfolded_muls_rows_on_ethos_u55(sample):
    comparison = _compare(sample, "ethos-u55-128")
    off = comparison.result("off")
    (site,) = [s.site_id for s in off.sites]
    _, rows = _executorch_cycles(sample, "ethos-u55-128", False, len(comparison.run.calibration.batches))
    theirs = sum(int(float(r["Op Cycles"])) for r in rows if r["Original Operator"] == "Mul")
    mine = [layer for layer in off.cost.layers if layer.role == "mul"]
    assert mine and all(layer.operator == "Mul" and layer.site == site for layer in mine)
    assert off.cost.site_cycles(site, "mul") == theirs > 0
    price = comparison.tradeoff().sites[0]
    assert price.site == site and price.bought == theirs and price.folded_in == ("upstream",)
    assert comparison.tradeoff().variant("upstream").saved == off.cost.cycles - comparison.result("upstream").cost.cycles


@pytest.mark.parametrize("sample", SAMPLES)
def test_on_ethos_u85_a_chained_muls_price_is_what_its_conv_rows_save(sample):
    """Vela chains the mul into the conv before it on the u85: the Mul row costs a few cycles (0 on timm's
    nf_resnet26) and the work is in the conv's row. The site's price is its rows in off minus its conv's rows in
    upstream, far more than its mul's own rows."""
    comparison = _compare(sample, "ethos-u85-256")
    off, upstream = comparison.result("off"), comparison.result("upstream")
    (site,) = [s.site_id for s in off.sites]
    price = comparison.tradeoff().sites[0]
    mine = off.cost.site_cycles(site)
    folded = upstream.cost.site_cycles(site, "conv")
    assert price.bought == mine - folded != off.cost.site_cycles(site, "mul")
    assert "Vela chains the mul into the conv" in price.how
    # the other rows do not change: the site's price is all upstream saves
    assert price.bought == off.cost.cycles - upstream.cost.cycles


def test_a_per_channel_scale_on_u55_costs_the_flash_reads():
    """The per-channel scale is a constant kept in off-chip flash on u55's Shared_Sram: its mul waits on it."""
    off = _compare("conv_mul_channel_scale", "ethos-u55-128").result("off")
    (mul,) = [layer for layer in off.cost.layers if layer.role == "mul"]
    assert dict(mul.access_cycles)["off_chip_flash"] > mul.npu_cycles and mul.cycles > mul.npu_cycles


def test_the_cost_reads_back_from_json_and_the_store_and_is_an_estimate(tmp_path):
    comparison = _compare("stateful_conv_mul", "ethos-u85-256")
    data = comparison.to_dict()
    assert data["accelerator"] == "ethos-u85-256"
    cost = data["variants"][0]["cost"]
    assert cost["estimate"].startswith("Vela's estimate") and cost["cycles"] == comparison.results[0].cost.cycles
    again = inspector.Comparison.from_dict(data)
    assert [r.cost for r in again.results] == [r.cost for r in comparison.results]
    inspector.clear_cache()  # memory forgets: the next answer is the store's
    kept = inspector.compare("sample:stateful_conv_mul", variants=("off", "upstream"), accelerator="ethos-u85-256",
                             workers=1)
    assert all(r.cached for r in kept.results)
    assert [r.cost for r in kept.results] == [r.cost for r in comparison.results]
    frame = kept.results[0].cost.to_dataframe()
    assert list(frame.columns) == list(cost["layers"][0]) and len(frame) == len(cost["layers"])
    # a cost written before the Vela version was kept reads back, and says so
    old = {k: v for k, v in cost.items() if k not in ("vela_version", "compiler")}
    assert inspector.Comparison.from_dict({**data, "variants": [{**data["variants"][0], "cost": old}]}).results[
        0].cost.compiler == "Vela (version not recorded) · ethos-u85-256 · Ethos_U85_SYS_DRAM_Mid · Sram_Only"


def test_an_unknown_accelerator_is_one_line_naming_the_choices():
    with pytest.raises(inspector.InspectorError, match="unknown accelerator 'nope'; choose one of: tosa-int, ") as info:
        inspector.compare("sample:conv_mul_scalar", variants=["upstream"], accelerator="nope", workers=1)
    assert "ethos-u55-128" in str(info.value) and "\n" not in str(info.value)


def test_tosa_int_has_no_cost_and_its_results_are_as_before():
    comparison = inspector.compare("sample:conv_mul_scalar", variants=("off", "upstream"), workers=1)
    assert comparison.accelerator == "tosa-int" and all(r.cost is None and r.cost_error is None
                                                        for r in comparison.results)
    with pytest.raises(inspector.InspectorError, match="has a cost"):
        comparison.tradeoff()


def test_the_command_line_carries_the_cost(capsys):
    import json

    from inspector._front import cli

    assert cli.main(["compare", "sample:stateful_conv_mul", "--variants", "off,upstream", "--accelerator",
                     "ethos-u55-128", "--workers", "1", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    mine = _compare("stateful_conv_mul", "ethos-u55-128")
    assert data["accelerator"] == "ethos-u55-128"
    assert [v["cost"]["cycles"] for v in data["variants"]] == [r.cost.cycles for r in mine.results]
    assert cli.main(["compare", "sample:stateful_conv_mul", "--variants", "off,upstream", "--accelerator",
                     "ethos-u55-128", "--workers", "1"]) == 0
    text = capsys.readouterr().out
    assert "what the fold buys" in text and "Vela's estimate" in text and f"{mine.results[0].cost.cycles:,}" in text


def test_a_sweep_on_two_accelerators_prices_each_rule_change():
    result = inspector.sweep(["sample:stateful_conv_mul"], rules=("upstream", "state-aware-strict"), stages=("tfa",),
                             steps=1, workers=1, accelerators=("tosa-int", "ethos-u55-128"))
    assert result.accelerators == ("tosa-int", "ethos-u55-128")
    by = {(v.rule, v.accelerator): v for v in result.variants}
    assert by["upstream", "tosa-int"].cycles is None and by["upstream", "ethos-u55-128"].cycles is not None
    mine = _compare("stateful_conv_mul", "ethos-u55-128")
    assert by["upstream", "ethos-u55-128"].cycles == mine.result("upstream").cost.cycles
    assert by["state-aware-strict", "ethos-u55-128"].cycles == mine.result("off").cost.cycles  # it keeps the mul
    (changed,) = result.changed
    assert changed.cycles_delta == {"state-aware-strict": mine.result("off").cost.cycles
                                    - mine.result("upstream").cost.cycles}
    assert "on ethos-u55-128 it costs" in result.summary()[0] and "cycles" in result.to_markdown()
    compiler = mine.result("upstream").cost.compiler
    assert compiler in result.summary()[0] and compiler in result.to_markdown()
    assert by["upstream", "ethos-u55-128"].compiler == compiler and by["upstream", "tosa-int"].compiler is None
    assert list(result.to_dataframe("rows").columns)[-2:] == ["cycles", "compiler"]
    assert set(result.to_dataframe("changed")["compiler"]) == {compiler}


def test_a_journey_ends_with_what_vela_made_of_the_site():
    kept = inspector.journey("sample:conv_mul_scalar", site=0, variant="off", accelerator="ethos-u85-256")
    gone = inspector.journey("sample:conv_mul_scalar", site=0, variant="upstream", accelerator="ethos-u85-256")
    assert "the mul is an NPU operation of its own: Mul" in kept.ending.vela
    assert "the mul is gone" in gone.ending.vela and gone.cost.site_cycles(gone.site, "mul") == 0
    assert kept.cost.site_cycles(kept.site, "mul") > 0 and "Vela:" in kept.text()
    assert kept.to_dict()["cost"]["cycles"] == kept.cost.cycles and kept.accelerator == "ethos-u85-256"
    assert f"[{kept.cost.compiler}]" in kept.text() and kept.cost.compiler in kept.html()


def test_the_widget_shows_the_cost_and_each_sites_price():
    from widgets import FoldInspector

    app = FoldInspector("sample:conv_mul_channel_scale", variants=("off", "upstream"), isolate=False,
                        accelerator="ethos-u55-128")
    assert app.accelerator_picker.value == "ethos-u55-128"
    app.run_reference(wait=True)
    assert app.last_error is None and app.comparison.accelerator == "ethos-u55-128"
    assert "what the fold buys" in app.results.value and "Vela&#x27;s estimate" in app.results.value
    price = _compare("conv_mul_channel_scale", "ethos-u55-128").tradeoff().sites[0].bought
    assert f"folding it buys {price:,} cycles on ethos-u55-128" in app.sites_box.children[1].children[1].value
    compiler = app.comparison.results[0].cost.compiler
    assert f"compiler: {compiler}" in app.results.value and compiler in app.sites_box.children[0].value
    # the memory modes Vela takes for the target are offered; picking one is another accelerator
    assert [v for _, v in app.memory_mode_picker.options] == ["", "Sram_Only", "Shared_Sram"]
    app.memory_mode_picker.value = "Sram_Only"
    assert app.stale and app.session().accelerator == "ethos-u55-128:Sram_Only"
    app.accelerator_picker.value = "tosa-int"
    assert app.stale and "lowered for ethos-u55-128" in app.results.value
    assert app.memory_mode_picker.disabled and app.memory_mode_picker.value == ""
    assert app.session().accelerator == "tosa-int"


# ---------------------------------------------------------------- which compiler made the cycles


def test_an_accelerator_takes_a_memory_mode_and_system_config_as_executorch_does():
    from inspector._cost.accelerators import accelerator_of

    dedicated = accelerator_of("ethos-u85-256:Dedicated_Sram")
    assert (dedicated.name, dedicated.npu, dedicated.memory_mode, dedicated.system_config) == (
        "ethos-u85-256:Dedicated_Sram", "ethos-u85-256", "Dedicated_Sram", None)
    config = dedicated.vela()
    assert (config.system_config, config.memory_mode) == ("Ethos_U85_SYS_DRAM_Mid", "Dedicated_Sram")
    assert "--memory-mode=Dedicated_Sram" in config.flags and "Dedicated_Sram" in dedicated.text()
    high = accelerator_of("ethos-u85-256:Dedicated_Sram:Ethos_U85_SYS_DRAM_High")
    assert (high.vela().system_config, high.vela().memory_mode) == ("Ethos_U85_SYS_DRAM_High", "Dedicated_Sram")
    # ExecuTorch's own choice, written out, is the plain name: one configuration, one name, one store entry
    for written in ("ethos-u85-256:Sram_Only", "ethos-u85-256:Sram_Only:Ethos_U85_SYS_DRAM_Mid"):
        assert accelerator_of(written) is inspector.accelerators.get("ethos-u85-256")
    # made again from its name wherever a name travels (a saved result, a worker), never registered
    assert accelerator_of(dedicated.name) == dedicated and accelerator_of(dedicated) is dedicated
    assert dedicated.name not in inspector.accelerators.names()


@pytest.mark.parametrize("written,message", [
    # a name Vela's config file does not have is refused from the file alone, before the backend is imported
    ("ethos-u85-256:Nope", r"^unknown memory mode 'Nope' for ethos-u85-256: Vela's config file \(Arm/vela.ini\) "
                           r"names only: Sram_Only, Shared_Sram, Dedicated_Sram, Dedicated_Sram_256KB, "
                           r"Dedicated_Sram_384KB, Dedicated_Sram_512KB$"),
    ("ethos-u85-256:Sram_Only:Nope", r"^unknown system config 'Nope' for ethos-u85-256: Vela's config file "
                                     r"\(Arm/vela.ini\) names only: Ethos_U55_Deep_Embedded, .*, "
                                     r"Ethos_U85_SYS_DRAM_High$"),
    # a pair Vela refuses names what works both ways
    ("ethos-u55-128:Dedicated_Sram", r"^Vela cannot configure ethos-u55-128 with Ethos_U55_High_End_Embedded and "
                                     r"Dedicated_Sram: .*arena_mem_area.*; with Ethos_U55_High_End_Embedded it takes: "
                                     r"Sram_Only, Shared_Sram; Dedicated_Sram works with: .*Ethos_U85_SYS_DRAM_Mid"),
    ("tosa-int:Sram_Only", r"^'tosa-int' takes no memory mode or system config: it is not an Ethos-U target; "
                           r"choose one of: ethos-u55-32, "),
    ("ethos-u85-256:Sram_Only:", r"^an accelerator with settings is written TARGET:MEMORY_MODE\[:SYSTEM_CONFIG\]"),
])
def test_a_setting_vela_does_not_take_is_one_line_listing_the_ones_it_takes(written, message):
    with pytest.raises(inspector.InspectorError, match=message) as info:
        inspector.accelerators.get(written)
    assert "\n" not in str(info.value)


def test_the_command_line_takes_a_memory_mode_and_refuses_an_unknown_one_in_one_line(capsys):
    from inspector._front import cli

    assert cli.main(["compare", "sample:conv_mul_scalar", "--accelerator", "ethos-u85-256:Nope"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: unknown memory mode 'Nope' for ethos-u85-256: ") and err.count("\n") == 1
    assert "Dedicated_Sram_512KB" in err
    assert cli.main(["sweep", "--samples", "--accelerators", "ethos-u55-128:Sram_Only:Nope"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: unknown system config 'Nope'") and err.count("\n") == 1
    args = cli._parser().parse_args(["compare", "x.pt2", "--accelerator", "ethos-u85-256:Dedicated_Sram"])
    assert args.accelerator == "ethos-u85-256:Dedicated_Sram"
    assert cli._parser().parse_args(["journey", "x.pt2", "--site", "0", "--accelerator",
                                     "ethos-u85-256:Sram_Only"]).accelerator == "ethos-u85-256"


def test_a_result_made_under_other_compiler_settings_is_another_store_entry(monkeypatch):
    """The keys a variant's result is kept under (compare's and the sweep's) differ with the memory mode, the
    system config and the installed Vela's version: an entry made under one is never read for another."""
    from inspector._cost.accelerators import accelerator_of
    from inspector._doors import vela
    from inspector._numbers.quantization import Plan, quantizations
    from inspector._numbers.results import Variant
    from inspector._numbers.variant_cache import variant_identity
    from inspector._sweep.store import variant_key

    variant = Variant(rule=inspector.rules.get("upstream"))

    def keys():
        out = []
        for name in ("ethos-u85-256", "ethos-u85-256:Dedicated_Sram",
                     "ethos-u85-256:Dedicated_Sram:Ethos_U85_SYS_DRAM_High"):
            chip = accelerator_of(name)
            out += [variant_identity(variant, Plan.of(quantizations.get("a8w8"), (), chip)),
                    variant_key(variant, 1, "tosa", chip)]
        return out

    now = keys()
    assert len(set(map(repr, now))) == len(now)
    other = "5.1.0" if vela.version() != "5.1.0" else "5.2.0"
    monkeypatch.setattr(vela, "version", lambda: other)  # another Vela installed
    later = keys()
    assert not set(map(repr, now)) & set(map(repr, later))


def test_every_view_of_cycles_names_the_compiler():
    """Text, HTML, the Markdown reply, JSON and DataFrames of a comparison on an Ethos-U say which Vela, target, system
    config and memory mode made its cycles."""
    from inspector import present
    from inspector._doors import vela
    from inspector.present.tables import tradeoff_text

    comparison = _compare("stateful_conv_mul", "ethos-u85-256")
    cost = comparison.results[0].cost
    compiler = cost.compiler
    assert cost.vela_version == vela.version() == importlib.metadata.version("ethos-u-vela")
    assert compiler == f"Vela {cost.vela_version} · ethos-u85-256 · Ethos_U85_SYS_DRAM_Mid · Sram_Only"
    text, html = present.comparison_text(comparison), present.comparison_html(comparison)
    assert text.count(f"compiler: {compiler}") == 2  # once under each table of cycles (the numbers, what folding buys)
    assert html.count(f"compiler: {compiler}") == 2
    markdown = inspector.analyze("sample:stateful_conv_mul").report(comparison, format="md")
    assert f"Compiler: `{compiler}`" in markdown and f"compiler: `{compiler}`" in markdown
    variant = comparison.to_dict()["variants"][0]["cost"]
    assert (variant["vela_version"], variant["system_config"], variant["memory_mode"], variant["compiler"]) == (
        cost.vela_version, "Ethos_U85_SYS_DRAM_Mid", "Sram_Only", compiler)
    trade = comparison.tradeoff()
    assert trade.compiler == compiler and trade.to_dict()["memory_mode"] == "Sram_Only"
    assert set(trade.to_dataframe("variants")["compiler"]) == {compiler}
    assert tradeoff_text(trade).splitlines()[1] == f"compiler: {compiler}"
