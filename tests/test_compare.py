"""``compare``: real quantize -> lower -> TOSA reference runs per variant, measured against float."""

from __future__ import annotations

import copy
import json
import math
import os
import signal
import subprocess
import sys
import threading
import time

import pytest
import torch
from torch import nn

import inspector
import sample_models
from inspector import InspectorError, clear_cache, compare
from inspector._doors import executorch as _executorch
from inspector._doors import tosa as _tosa
from inspector._front.cli import main
from conftest import ROOT, assert_bit_identical, state_of

pytestmark = pytest.mark.requires_tosa


@pytest.fixture(scope="module")
def stateful20():
    clear_cache()
    events = []
    result = compare("sample:stateful_conv_mul", variants=("off", "upstream", "state-aware-strict"), steps=20,
                     progress=lambda stage, fraction: events.append((stage, fraction)))
    return result, events


def test_done_when_stateful_twenty_steps(stateful20):
    result, _ = stateful20
    assert [r.variant.rule.name for r in result.results] == ["off", "upstream", "state-aware-strict"]
    folds = {r.variant.rule.name: r.folds for r in result.results}
    assert folds == {"off": {"tfa": 0, "lowering": 0}, "upstream": {"tfa": 1, "lowering": 0},
                     "state-aware-strict": {"tfa": 0, "lowering": 0}}
    for r in result.results:
        assert [m.step for m in r.metrics] == list(range(20))
        assert all(math.isfinite(m.sqnr_db) for m in r.metrics)
        assert all(math.isfinite(v) for m in r.metrics for v in m.sqnr_per_channel_db)
        assert len(r.metrics[0].sqnr_per_channel_db) == 4
    upstream = result.result("upstream").sites[0]
    assert upstream.folded_at == "tfa" and upstream.mul_output is None and upstream.conv_output is not None
    off = result.result("off").sites[0]
    assert off.folded_at is None and off.mul_output is not None
    # the fold moved the conv's requantization range: unfolded conv output spans 4x the folded one (scale 0.25)
    assert off.conv_output.scale == pytest.approx(4 * upstream.conv_output.scale, rel=1e-4)
    data = json.loads(json.dumps(result.to_dict()))
    assert len(data["variants"][0]["metrics"]) == 20


def test_progress_names_stages_and_advances(stateful20):
    result, events = stateful20
    fractions = [f for _, f in events]
    assert fractions == sorted(fractions) and fractions[-1] == 1.0
    stages = {s.split(": ")[-1] for s, _ in events}
    assert {"export", "prepare", "calibrate", "convert", "re-export", "lower", "reference", "metrics"} <= stages
    for r in result.results:
        if not r.cached:
            assert set(r.timings) >= {"lower", "reference"} and r.timings["lower"] > 0


def test_progress_never_moves_back_when_a_later_variant_is_answered_by_the_store():
    compare("sample:stateful_conv_mul", variants=("upstream",), steps=2, workers=1)
    events = []
    compare("sample:stateful_conv_mul", variants=("off", "upstream"), steps=2, workers=1,
            progress=lambda stage, fraction: events.append((stage, fraction)))
    fractions = [f for _, f in events]
    assert any(stage == "upstream: cached" for stage, _ in events)
    assert fractions == sorted(fractions) and fractions[-1] == 1.0, events


def test_state_is_reset_before_the_run(stateful20):
    """Step 0 of a long run starts from the model's initial state, as a 1-step run does (the same
    calibration for both: by default a longer run calibrates over more steps)."""
    result, _ = stateful20
    x = sample_models.get("stateful_conv_mul").example_inputs()
    batches = [x] * 4  # user batches: one call each, whatever the number of steps
    one = compare("sample:stateful_conv_mul", variants=("upstream",), steps=1, calibration=batches)
    many = compare("sample:stateful_conv_mul", variants=("upstream",), steps=6, calibration=batches)
    assert torch.equal(one.results[0].outputs[0][0], many.results[0].outputs[0][0])
    eager = sample_models.get("stateful_conv_mul")
    first = eager(*eager.example_inputs())
    err = (result.result("upstream").outputs[0][0] - first).abs().max()
    assert err < 0.1, "step 0 was not computed from the initial (zero) state"
    assert torch.equal(result.reference[0][0], first)


def test_cache_answers_the_same_variants_again_with_the_same_metrics(stateful20):
    """That a variant whose decisions changed is recomputed is checked by
    test_functional_state_marker_makes_state_aware_skip_and_runs_free."""
    again = compare("sample:stateful_conv_mul", variants=("off", "upstream", "state-aware-strict"), steps=20)
    assert all(r.cached for r in again.results)
    assert [r.metrics for r in again.results] == [r.metrics for r in stateful20[0].results]


@pytest.mark.own_store  # its point is that the work is done again
def test_seeded_runs_give_identical_numbers():
    clear_cache()
    a = compare("sample:conv_mul_wide_dynamic_range_scale", variants=("upstream",))
    clear_cache(disk=True)  # computed again, not read back from the result store
    b = compare("sample:conv_mul_wide_dynamic_range_scale", variants=("upstream",))
    assert not b.results[0].cached
    assert a.results[0].metrics == b.results[0].metrics


def test_functional_state_marker_makes_state_aware_skip_and_runs_free():
    clear_cache()
    site = inspector.analyze("sample:functional_recurrent_conv_mul", stage="tfa").sites[0].id
    result = compare("sample:functional_recurrent_conv_mul", variants=("upstream", ("state-aware", (site,)), "state-aware"),
                     steps=5)
    folds = [r.folds["tfa"] for r in result.results]
    assert folds == [1, 0, 1]
    upstream, marked, unmarked = result.results
    assert unmarked.cached and not marked.cached  # same fold decisions as upstream: answered from the cache
    assert len(marked.metrics) == 5 * 2  # 5 steps x 2 outputs
    # the float reference free-runs: step k's state input is step k-1's state output
    model = sample_models.get("functional_recurrent_conv_mul")
    x, h = model.example_inputs()
    for _ in range(3):
        out, h = model(x, h)
    assert torch.equal(result.reference[2][1], h)
    # toggling the marker off again is answered from the cache
    toggled = compare("sample:functional_recurrent_conv_mul", variants=("state-aware",), steps=5, markers=())
    assert toggled.results[0].cached


def test_off_folds_nothing_and_upstream_is_bit_identical_to_the_plain_flow():
    clear_cache()
    model = sample_models.get("conv_mul_channel_scale")
    inputs = model.example_inputs()
    gen = torch.Generator().manual_seed(3)
    batches = [inputs] + [(inputs[0] + 0.1 * torch.randn(inputs[0].shape, generator=gen),) for _ in range(3)]
    snap = state_of(model)
    result = compare(model, variants=("off", "upstream"), example_inputs=inputs, calibration=batches)
    assert_bit_identical(snap, model)
    off, upstream = result.results
    assert off.folds == {"tfa": 0, "lowering": 0} and off.sites[0].folded_at is None
    assert upstream.folds["tfa"] == 1
    # the plain ExecuTorch flow, no inspector anywhere (docs/stack-facts.md, "The TOSA INT flow that works")
    quantizer = _executorch.tosa_int_quantizer()
    ep = torch.export.export(copy.deepcopy(model), inputs)
    gm = _tosa.prepare_pt2e(ep.module(check_guards=False), quantizer)
    for batch in batches:
        gm(*batch)
    gm = _tosa.convert_pt2e(gm)
    lowered = _tosa.lower(torch.export.export(gm, inputs))
    with _tosa.reference_dispatch():
        plain = lowered.exported_program().module()(*inputs)
    assert torch.equal(upstream.outputs[0][0], plain)
    assert not torch.equal(off.outputs[0][0], plain)


class Unsupported(nn.Module):
    """``sort`` has no TOSA INT lowering: it stays outside the delegate."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(2, 2, 1)

    def forward(self, x):
        return (self.conv(x) * 0.5).sort(dim=3)[0]


def test_not_delegated_nodes_carry_the_partitioners_reason():
    torch.manual_seed(0)
    result = compare(Unsupported(), variants=("upstream",), example_inputs=(torch.randn(1, 2, 4, 4),))
    outside = {n.target: n.reason for n in result.results[0].not_delegated}
    assert "BaseTOSASupportList" in outside["aten.sort.default"]
    assert any("delegate's input or output" in r for t, r in outside.items() if "quantize" in t)
    assert result.results[0].folds["tfa"] == 1


class Exploding(nn.Module):
    """``cumprod`` is not in the core ATen opset: lowering refuses it."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(2, 2, 1)

    def forward(self, x):
        return torch.cumprod(self.conv(x) * 0.5, 3)


def test_errors_are_one_line_and_name_what_failed():
    with pytest.raises(InspectorError, match="NaN or Inf"):
        compare("sample:conv_mul_scalar", variants=("upstream",),
                calibration=[(torch.full((1, 3, 8, 8), float("nan")),)])
    bad = sample_models.get("functional_recurrent_conv_mul")
    bad.RECURRENT = {1: 0, 5: 1}
    with pytest.raises(InspectorError, match="declares output 5 as recurrent, but it has 2 outputs"):
        compare(bad, variants=("upstream",))
    with pytest.raises(InspectorError, match="unknown rule"):
        compare("sample:conv_mul_scalar", variants=("sometimes",))
    with pytest.raises(InspectorError, match="steps must be from 1 to 1000, got 0"):
        compare("sample:conv_mul_scalar", steps=0)
    model = Exploding()
    snap = state_of(model)
    with pytest.raises(InspectorError, match=r"^lower failed for variant upstream: SpecViolationError: .*cumprod") as info:
        compare(model, variants=("upstream",), example_inputs=(torch.randn(1, 2, 2, 2),))
    assert "\n" not in str(info.value)
    assert_bit_identical(snap, model)


def test_the_public_functions_are_not_shadowed_by_modules():
    """``inspector.compare`` and ``inspector.attribution`` are the functions; no module of those names exists."""
    import importlib

    for name in ("compare", "attribution"):
        with pytest.raises(ModuleNotFoundError):
            importlib.import_module(f"inspector.{name}")
        assert callable(getattr(inspector, name))
    assert inspector.compare is compare and inspector.clear_cache is clear_cache


def test_concurrent_swaps_never_see_each_others_pass():
    from inspector._doors.fold_swap import active_fold_pass, swapped_fold_pass
    from inspector._rules.rules import rule_pass_class

    seen, barrier = [], threading.Barrier(2, timeout=30)

    def worker(policy):
        cls = rule_pass_class(policy)
        try:
            barrier.wait()
        except threading.BrokenBarrierError:
            pass
        for _ in range(50):
            with swapped_fold_pass(cls):
                seen.append(active_fold_pass() is cls)

    threads = [threading.Thread(target=worker, args=(p,)) for p in ("off", "upstream")]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(seen) == 100 and all(seen)
    assert active_fold_pass() is _executorch.fold_pass_class()


def test_plots_and_tables(stateful20):
    result, _ = stateful20
    fig = result.plot("drift")
    lines = fig.axes[0].get_lines()
    assert [line.get_label() for line in lines] == ["off", "upstream", "state-aware-strict"]
    assert len(lines[0].get_xdata()) == 20
    bars = result.plot("channels").axes[0].patches
    assert len(bars) == 3 * 4
    with pytest.raises(InspectorError, match="unknown plot kind"):
        result.plot("pie")
    text = result._repr_mimebundle_()["text/plain"]
    assert "state-aware-strict" in text and "SQNR" in text


def test_cli_compare_json(capsys):
    code = main(["compare", "sample:stateful_conv_mul", "--variants", "off,upstream,state-aware-strict",
                 "--steps", "20", "--json"])
    out, err = capsys.readouterr()
    data = json.loads(out)
    assert code == 0 and err == ""  # no progress bar when stderr is not a terminal
    assert [len(v["metrics"]) for v in data["variants"]] == [20, 20, 20]
    assert [v["folds"]["tfa"] for v in data["variants"]] == [0, 1, 0]
    assert all(isinstance(m["sqnr_db"], float) for v in data["variants"] for m in v["metrics"])


def test_analysis_compare_uses_its_markers():
    a = inspector.analyze("sample:functional_recurrent_conv_mul", stage="tfa", rule="state-aware")
    marked = a.toggle_marker(a.sites[0].id)
    result = marked.compare(("state-aware",), steps=2)
    assert result.results[0].variant.markers == (a.sites[0].id,)
    assert result.results[0].folds["tfa"] == 0


def test_a_reference_model_failure_is_one_line_naming_the_variant(monkeypatch):
    class Broken:
        def __enter__(self):
            raise RuntimeError("Non-valid TOSA given to reference model.")

        def __exit__(self, *exc):
            return False

    clear_cache()
    monkeypatch.setattr(_tosa, "reference_dispatch", lambda: Broken())
    model = sample_models.get("conv_mul_scalar")
    snap = state_of(model)
    with pytest.raises(InspectorError, match=r"^the TOSA reference model failed for variant upstream: "
                                             r"RuntimeError: Non-valid TOSA") as info:
        compare(model, variants=("upstream",))
    assert "\n" not in str(info.value)
    assert_bit_identical(snap, model)


# ---------------------------------------------------------------- variants side by side


@pytest.mark.own_store  # its point is that the work is done again
def test_workers_give_bit_identical_results_and_name_each_variant():
    clear_cache()
    events = []
    parallel = compare("sample:stateful_wide_scale", variants=("off", "upstream", "state-aware-strict"), steps=3,
                       workers=2,
                       progress=lambda phase, fraction: events.append(phase))
    clear_cache(disk=True)  # computed again, not read back from the result store
    sequential = compare("sample:stateful_wide_scale", variants=("off", "upstream", "state-aware-strict"), steps=3,
                         workers=1)
    for p, s in zip(parallel.results, sequential.results):
        assert p.variant == s.variant and p.metrics == s.metrics and p.folds == s.folds
        assert all(torch.equal(a, b) for ps, ss in zip(p.outputs, s.outputs) for a, b in zip(ps, ss))
    labels = {e.split(": ")[0] for e in events if ": " in e}
    assert {"off", "upstream"} <= labels  # progress names the variant, from this process and from the worker
    with pytest.raises(InspectorError, match="workers must be a positive integer, got 0"):
        compare("sample:conv_mul_scalar", variants=("off", "upstream"), workers=0)


SCRIPT_WITHOUT_GUARD = """
import inspector
print("script body ran", flush=True)
result = inspector.compare("sample:conv_mul_scalar", variants=("off", "upstream"), workers=2)
print("folds", [r.folds["tfa"] for r in result.results], flush=True)
"""


def test_a_script_without_a_main_guard_runs_once(tmp_path):
    """Spawned workers must not re-run the user's script (it has no `if __name__ == '__main__':`)."""
    script = tmp_path / "user_script.py"
    script.write_text(SCRIPT_WITHOUT_GUARD)
    out = subprocess.run([sys.executable, str(script)], cwd=tmp_path, capture_output=True, text=True, timeout=600,
                         env=dict(os.environ, PYTHONPATH=str(ROOT)))
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.count("script body ran") == 1 and "folds [0, 1]" in out.stdout


def _children(pid: int) -> list[int]:
    kids = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    if int(f.read().rsplit(")", 1)[1].split()[1]) == pid:
                        kids.append(int(entry))
            except (OSError, ValueError, IndexError):
                pass
    return kids


def _workers_of(pid: int) -> list[int]:
    """The worker processes under ``pid``: forked by its fork server (children of the child that runs the pool's
    ``_server_main``), or spawned (children running spawn_main); the fork server too."""
    found = []
    for kid in _children(pid):
        try:
            cmdline = open(f"/proc/{kid}/cmdline").read()
        except OSError:
            continue
        if "_server_main" in cmdline:
            grandchildren = _children(kid)
            if grandchildren:
                found += [kid, *grandchildren]
        elif "spawn_main" in cmdline:
            found.append(kid)
    return found


def test_ctrl_c_stops_the_workers(tmp_path):
    # 1,000 steps (the most), Ctrl-C 1 s after the workers start: once the lowering got faster, the whole compare
    # at 40 steps ended about 3 s after its workers started, and Ctrl-C reached a process already shutting down
    cli = subprocess.Popen([sys.executable, "-m", "inspector", "compare", "sample:stateful_wide_scale", "--steps", "1000",
                            "--variants", "off,upstream,state-aware", "--workers", "2"], cwd=ROOT,
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                           # a user at a terminal has Ctrl-C; a suite started as a background job (CI) has
                           # SIGINT ignored, and Python keeps an inherited SIG_IGN: give the CLI the user's
                           preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    try:
        workers = []
        for _ in range(600):  # until a worker process exists and has had time to start working
            workers = _workers_of(cli.pid)
            if workers:
                break
            time.sleep(0.1)
        assert workers, "no worker process started"
        time.sleep(1)
        assert cli.poll() is None, "the compare ended before Ctrl-C: it no longer tests an interruption"
        cli.send_signal(signal.SIGINT)
        _, err = cli.communicate(timeout=120)
    finally:
        if cli.poll() is None:
            cli.kill()
    assert cli.returncode == 130 and err.strip().splitlines()[-1] == "interrupted", err[-3000:]
    time.sleep(1)
    assert not [w for w in workers if os.path.exists(f"/proc/{w}") and open(f"/proc/{w}/stat").read().split()[2] != "Z"]
