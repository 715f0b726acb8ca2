"""A catalogue of bad input: every case gets one clear line, never a traceback, and changes nothing.

CLI: one ``error:`` line on stderr, exit status 2, nothing on stdout, no output file written.
API: an ``InspectorError`` whose message is one line; the caller's model is bit-identical after.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import zipfile
from pathlib import Path

import pytest
import torch
from torch import nn

import inspector
from inspector import InspectorError
from inspector._front.cli import main
from conftest import ROOT, assert_bit_identical, state_of

SCRIPTS = textwrap.dedent('''
    import sys
    import torch
    from torch import nn

    class Good(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = nn.Conv2d(3, 4, 3, padding=1)
        def forward(self, x):
            return self.conv(x) * 0.5
        def example_inputs(self):
            return (torch.ones(1, 3, 8, 8),)

    class NeedsArgs(nn.Module):
        def __init__(self, channels):
            super().__init__()

    class ExitsInInit(nn.Module):
        def __init__(self):
            sys.exit(3)

    class RaisesInForward(Good):
        def forward(self, x):
            raise RuntimeError("this model is broken")

    class DataDependent(Good):
        def forward(self, x):
            y = self.conv(x)
            if y.sum() > 0:
                return y * 0.5
            return y

    class NotAModule:
        pass
''')


@pytest.fixture()
def files(tmp_path):
    """Scripts, archives and folders that the cases name ({tmp} in an argv)."""
    (tmp_path / "models.py").write_text(SCRIPTS)
    (tmp_path / "syntax.py").write_text("class Net(:\n    pass\n")
    (tmp_path / "exits.py").write_text("import sys\nsys.exit('bye')\n")
    (tmp_path / "raises.py").write_text("raise ImportError('no such thing')\n")
    (tmp_path / "empty.pt2").write_bytes(b"")
    (tmp_path / "text.pt2").write_text("this is not a zip archive\n")
    (tmp_path / "folder.pt2").mkdir()
    good = tmp_path / "good.pt2"
    model = nn.Sequential(nn.Conv2d(3, 4, 3, padding=1))
    torch.export.save(torch.export.export(model, (torch.ones(1, 3, 8, 8),)), good)
    data = good.read_bytes()
    (tmp_path / "truncated.pt2").write_bytes(data[: len(data) // 2])
    with zipfile.ZipFile(tmp_path / "pickled.pt2", "w") as z:  # a zip, but not what torch.export.save writes
        z.writestr("archive_format", "pt2")
        z.writestr("data/weights/model_weights_config.json", "{not json")
    (tmp_path / "readonly").mkdir()
    (tmp_path / "readonly").chmod(0o500)
    yield tmp_path
    (tmp_path / "readonly").chmod(0o700)


def _readonly_dir(tmp: Path) -> str:
    # root writes anywhere it may chmod; sysfs refuses new files even to root
    return "/sys" if os.geteuid() == 0 else str(tmp / "readonly")


SAMPLE = "sample:conv_mul_scalar"
LONG = "x" * 10_000

CLI_CASES = [
    # what is analyzed
    ("missing-pt2", ["analyze", "{tmp}/missing.pt2"], "no such file"),
    ("directory", ["analyze", "{tmp}/folder.pt2"], "folder.pt2"),
    ("empty-file", ["analyze", "{tmp}/empty.pt2"], "empty.pt2"),
    ("not-a-zip", ["analyze", "{tmp}/text.pt2"], "text.pt2"),
    ("truncated-zip", ["analyze", "{tmp}/truncated.pt2"], "truncated.pt2"),
    ("foreign-zip", ["analyze", "{tmp}/pickled.pt2"], "pickled.pt2"),
    ("unknown-target-kind", ["analyze", "model.onnx"], "cannot tell what 'model.onnx' is"),
    ("unknown-sample", ["analyze", "sample:nope"], "unknown sample 'nope'"),
    ("timm-unknown", ["analyze", "timm:nf_resnet27@64"], "timm has no architecture 'nf_resnet27'; did you mean nf_resnet26"),
    ("timm-bad-size", ["analyze", "timm:nf_resnet26@big"], "must be a whole number of pixels"),
    ("timm-huge-size", ["analyze", "timm:nf_resnet26@100000"], "must be from 8 to 1024 pixels, got 100,000"),
    ("missing-script", ["analyze", "{tmp}/nope.py:Net"], "no such file"),
    ("syntax-error", ["analyze", "{tmp}/syntax.py:Net"], "importing syntax.py failed: SyntaxError"),
    ("exits-on-import", ["analyze", "{tmp}/exits.py:Net"], "called sys.exit('bye')"),
    ("raises-on-import", ["analyze", "{tmp}/raises.py:Net"], "ImportError: no such thing"),
    ("no-such-class", ["analyze", "{tmp}/models.py:Nope"], "has no nn.Module class 'Nope'"),
    ("not-a-module", ["analyze", "{tmp}/models.py:NotAModule"], "has no nn.Module class 'NotAModule'"),
    ("needs-arguments", ["analyze", "{tmp}/models.py:NeedsArgs"], "NeedsArgs() needs arguments"),
    ("exits-in-init", ["analyze", "{tmp}/models.py:ExitsInInit"], "ExitsInInit() called sys.exit(3)"),
    ("forward-raises", ["analyze", "{tmp}/models.py:RaisesInForward"], "this model is broken"),
    ("export-cannot", ["analyze", "{tmp}/models.py:DataDependent"], "torch.export failed for DataDependent"),
    # inputs
    ("wrong-shape", ["analyze", "{tmp}/models.py:Good", "--input-shape", "1,5,8,8"], "torch.export failed"),
    ("shape-garbage", ["analyze", SAMPLE, "--input-shape", "1,x,3"], "bad --input-shape '1,x,3'"),
    ("shape-empty", ["analyze", SAMPLE, "--input-shape", ""], "bad --input-shape ''"),
    ("shape-zero", ["analyze", SAMPLE, "--input-shape", "1,0,8"], "bad --input-shape '1,0,8'"),
    ("shape-negative", ["analyze", SAMPLE, "--input-shape", "1,-3,8"], "bad --input-shape '1,-3,8'"),
    ("shape-huge", ["analyze", SAMPLE, "--input-shape", "100000,100000,100"], "has 1,000,000,000,000 elements"),
    ("shape-many-dims", ["analyze", SAMPLE, "--input-shape", "1," * 5000 + "1"], "has 5,001 dimensions; the limit is 8"),
    # choices (argparse's own errors)
    ("unknown-stage", ["analyze", SAMPLE, "--stage", "lowered"], "invalid choice: 'lowered'"),
    ("unknown-policy", ["analyze", SAMPLE, "--policy", "sometimes"], "unknown rule 'sometimes'"),
    ("unknown-command", ["frobnicate"], "invalid choice: 'frobnicate'"),
    ("missing-target", ["analyze"], "the following arguments are required: TARGET"),
    ("steps-not-int", ["compare", SAMPLE, "--steps", "many"], "invalid int value: 'many'"),
    ("unknown-option", ["analyze", SAMPLE, "--colour"], "unrecognized arguments: --colour"),
    ("bad-format", ["render", SAMPLE, "--out", "{tmp}/x.svg", "--format", "gif"], "invalid choice: 'gif'"),
    # markers, variants, steps
    ("unknown-marker", ["analyze", SAMPLE, "--mark", "zzz"], "unknown marker 'zzz'"),
    ("long-marker", ["analyze", SAMPLE, "--mark", LONG], "unknown marker"),
    ("unknown-variant", ["compare", SAMPLE, "--variants", "off,sometimes"], "unknown rule 'sometimes'"),
    ("no-variants", ["compare", SAMPLE, "--variants", ","], "no variants to compare"),
    ("steps-zero", ["compare", SAMPLE, "--steps", "0"], "--steps must be from 1 to 1000, got 0"),
    ("steps-huge", ["compare", SAMPLE, "--steps", "1000000000"], "got 1,000,000,000"),
    # output files
    ("out-missing-folder", ["render", SAMPLE, "--out", "{tmp}/no/such/dir/x.svg"], "does not exist"),
    ("out-is-a-folder", ["render", SAMPLE, "--out", "{tmp}/folder.pt2"], "it is a directory"),
    ("out-read-only", ["render", SAMPLE, "--format", "dot", "--out", "{readonly}/x.dot"], "cannot write"),
    ("demo-out-folder", ["demo", "--html", "{tmp}"], "it is a directory"),
    ("focus-unknown", ["render", SAMPLE, "--format", "dot", "--out", "{tmp}/f.dot", "--focus", "nope"], "no site 'nope'"),
    ("hops-negative", ["render", SAMPLE, "--format", "dot", "--out", "{tmp}/h.dot", "--focus",
                       "conv@models.py:53", "--hops", "-1"], "hops must be a non-negative integer"),
]


@pytest.mark.parametrize("argv,message", [c[1:] for c in CLI_CASES], ids=[c[0] for c in CLI_CASES])
def test_cli_bad_input_is_one_error_line_and_exit_2(files, capsys, argv, message):
    before = sorted(p.name for p in files.iterdir())
    code = main([a.format(tmp=files, readonly=_readonly_dir(files)) for a in argv])
    out, err = capsys.readouterr()
    assert code == 2, err
    assert out == ""
    assert err.startswith("error: ") and err.endswith("\n") and err.count("\n") == 1, err[:500]
    assert message in err, err[:500]
    assert "Traceback" not in err and len(err) < 2000
    assert sorted(p.name for p in files.iterdir()) == before  # no output file written


def test_the_catalogue_is_at_least_forty_cases():
    assert len(CLI_CASES) + len(API_CASES) >= 40


def test_real_entry_point_no_traceback_and_debug_shows_one(files):
    """The installed command line, as a script would run it."""
    cmd = [sys.executable, "-m", "inspector", "analyze", f"{files}/models.py:NeedsArgs"]
    plain = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert plain.returncode == 2 and plain.stdout == ""
    assert plain.stderr.strip().splitlines() == [plain.stderr.strip()] and "Traceback" not in plain.stderr
    debug = subprocess.run(cmd[:3] + ["--debug"] + cmd[3:], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert debug.returncode != 0 and "Traceback" in debug.stderr


# ---------------------------------------------------------------- the API


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.conv = nn.Conv2d(3, 4, 3, padding=1)

    def forward(self, x):
        return self.conv(x) * 0.5


X = (torch.ones(1, 3, 8, 8),)

API_CASES = [
    ("target-int", lambda m: inspector.analyze(42), "cannot analyze a int"),
    ("no-inputs", lambda m: inspector.analyze(m), "Net needs example inputs"),
    ("inputs-string", lambda m: inspector.analyze(m, example_inputs="abc"), "torch.export failed"),
    ("inputs-int-dtype", lambda m: inspector.analyze(m, example_inputs=(torch.ones(1, 3, 8, 8, dtype=torch.int64),)),
     "torch.export failed"),
    ("inputs-nan", lambda m: inspector.analyze(m, example_inputs=(torch.full((1, 3, 8, 8), float("nan")),)),
     "NaN or Inf"),
    ("stage-unknown", lambda m: inspector.analyze(m, example_inputs=X, stage="lowered"),
     "unknown stage 'lowered'; choose one of: aten, tfa, edge, lowering"),
    ("stage-int", lambda m: inspector.analyze(m, example_inputs=X, stage=3), "unknown stage 3"),
    ("stage-fp-tfa", lambda m: inspector.analyze(m, example_inputs=X, stage="tfa", accelerator="tosa-fp"),
     "has no tfa stage"),
    ("policy-unknown", lambda m: inspector.analyze(m, example_inputs=X, rule="sometimes"), "unknown rule 'sometimes'"),
    ("marker-unknown", lambda m: inspector.analyze(m, example_inputs=X, markers=["nope"]), "unknown marker 'nope'"),
    ("marker-not-str", lambda m: inspector.analyze(m, example_inputs=X, markers=[3]),
     "a marker is a site id or node name"),
    ("compare-variants-int", lambda m: inspector.compare(m, variants=5, example_inputs=X), "cannot read variants 5"),
    ("compare-variant-unknown", lambda m: inspector.compare(m, variants=("off", "later"), example_inputs=X),
     "unknown rule 'later'"),
    ("compare-no-variants", lambda m: inspector.compare(m, variants=(), example_inputs=X), "no variants to compare"),
    ("compare-steps-zero", lambda m: inspector.compare(m, variants="upstream", example_inputs=X, steps=0), "got 0"),
    ("compare-steps-str", lambda m: inspector.compare(m, variants="upstream", example_inputs=X, steps="3"), "got '3'"),
    ("compare-steps-huge", lambda m: inspector.compare(m, variants="upstream", example_inputs=X, steps=10**9),
     "got 1,000,000,000"),
    ("compare-empty-calibration", lambda m: inspector.compare(m, variants="upstream", example_inputs=X, calibration=[]),
     "calibration is empty"),
    ("compare-unknown-marker", lambda m: inspector.compare(m, variants="state-aware", example_inputs=X, markers=["zz"]),
     "unknown marker 'zz'"),
    ("render-unknown-which", lambda m: inspector.analyze(m, example_inputs=X).render("during"),
     "unknown graph 'during'"),
    ("render-hide-unknown", lambda m: inspector.analyze(m, example_inputs=X).render(hide=("weights",)),
     "cannot hide 'weights'"),
    ("render-max-nodes", lambda m: inspector.analyze(m, example_inputs=X).render(max_nodes=0), "max_nodes must be"),
    ("site-unknown", lambda m: inspector.analyze(m, example_inputs=X).site("nope"), "no site 'nope'"),
    ("session-missing", lambda m: inspector.Session.read("/nonexistent/s.json"), "no such session file"),
]


@pytest.mark.parametrize("call,message", [c[1:] for c in API_CASES], ids=[c[0] for c in API_CASES])
def test_api_bad_input_is_one_line_inspector_error(call, message):
    model = Net()
    snap = state_of(model)
    with pytest.raises(InspectorError) as info:
        call(model)
    text = str(info.value)
    assert message in text and "\n" not in text and len(text) < 2000, text[:500]
    assert_bit_identical(snap, model)


def test_compare_takes_one_policy_as_a_string():
    """``compare(m, "upstream")`` means one variant, not the letters of a word."""
    from inspector._numbers.compare import variants_of

    assert [v.rule.name for v in variants_of("upstream", None)] == ["upstream"]
    assert [v.rule.name for v in variants_of("off,upstream", None)] == ["off", "upstream"]
    assert [v.markers for v in variants_of(("state-aware",), "site@x.py:1")] == [("site@x.py:1",)]


SESSION = {"version": 1, "target": "sample:conv_mul_scalar", "stage": "tfa", "policy": "upstream", "markers": [],
           "selected": None, "variants": ["upstream"], "steps": 1, "results": None, "results_for": None}

SESSION_CASES = [
    ("not-json", "{", "invalid JSON"),
    ("not-object", [1, 2], "no version field"),
    ("wrong-version", {**SESSION, "version": 7}, "version 7"),
    ("missing-stage", {k: v for k, v in SESSION.items() if k != "stage"}, "missing field 'stage'"),
    ("unknown-stage", {**SESSION, "stage": "later"}, "field 'stage' must be one of aten, tfa, edge"),
    ("policy-int", {**SESSION, "policy": 3}, "field 'policy' must be one of"),
    ("markers-str", {**SESSION, "markers": "conv"}, "field 'markers' must be a list of strings"),
    ("markers-nested", {**SESSION, "markers": [["a"]]}, "field 'markers' must be a list of strings"),
    ("variants-unknown", {**SESSION, "variants": ["off", "later"]}, "field 'variants' must be a non-empty list of rules"),
    ("variants-empty", {**SESSION, "variants": []}, "field 'variants' must be a non-empty"),
    ("steps-huge", {**SESSION, "steps": 10**9}, "field 'steps' must be an integer from 1 to 1000"),
    ("steps-bool", {**SESSION, "steps": True}, "field 'steps' must be an integer"),
    ("steps-float", {**SESSION, "steps": 2.5}, "field 'steps' must be an integer"),
    ("graph-view", {**SESSION, "graph_view": "sideways"}, "field 'graph_view'"),
    ("unknown-field", {**SESSION, "exec": "rm -rf /"}, "unknown field 'exec'"),
    ("target-int", {**SESSION, "target": 5}, "field 'target' must be a non-empty string"),
    ("results-alone", {**SESSION, "results": {}}, "'results' and 'results_for' must be given together"),
    ("results-garbage", {**SESSION, "results": {"x": 1}, "results_for": ["tfa", "upstream", []]},
     "not a saved comparison: missing field"),
    ("results-for-bad", {**SESSION, "results": {"x": 1}, "results_for": ["tfa", "upstream"]},
     "field 'results_for' must be [stage, rule, [markers...]]"),
    ("results-wrong-types", {**SESSION, "results_for": ["tfa", "upstream", []], "results": {
        "target": "t", "steps": 1, "calibration": "c", "quantization": "q", "variants": [
            {"variant": {"policy": "upstream", "markers": []}, "folds": {"tfa": "one", "lowering": 0}, "sites": [],
             "metrics": [], "not_delegated": [], "timings": {}}]}}, "expected an integer"),
    ("results-missing-steps", {**SESSION, "results_for": ["tfa", "upstream", []], "results": {
        "target": "t", "steps": 2, "calibration": "c", "quantization": "q", "variants": [
            {"variant": {"policy": "upstream", "markers": []}, "folds": {"tfa": 1, "lowering": 0}, "sites": [],
             "metrics": [{"output": 0, "step": 0, "max_abs_error": 0.1, "mean_abs_error": 0.1, "mse": 0.1,
                          "sqnr_db": 30.0, "sqnr_per_channel_db": [30.0], "flushed_to_zero": 0.0}],
             "not_delegated": [], "timings": {}}]}}, "no metrics for output 0 at step 1"),
    ("python-target-untrusted", {**SESSION, "target": "/tmp/evil.py:Net"}, "names the Python file /tmp/evil.py"),
]


@pytest.mark.parametrize("data,message", [c[1:] for c in SESSION_CASES], ids=[c[0] for c in SESSION_CASES])
def test_malformed_sessions_are_one_line(tmp_path, data, message):
    path = tmp_path / "s.json"
    path.write_text(data if isinstance(data, str) else json.dumps(data))
    with pytest.raises(InspectorError) as info:
        inspector.Session.read(path)
    text = str(info.value)
    assert message in text and "\n" not in text, text


def test_written_files_get_the_usual_permissions(tmp_path):
    from inspector._base.files import write_text

    path = write_text(tmp_path / "report.html", "<p>hi</p>")
    assert path.read_text() == "<p>hi</p>"
    assert path.stat().st_mode & 0o777 == 0o666 & ~_current_umask()
    assert list(tmp_path.iterdir()) == [path]  # no temporary file left behind


def _current_umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask
