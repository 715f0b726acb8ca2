"""``python -m inspector``: tables, JSON, and one-line errors with exit status 2."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest

from inspector._front.cli import main
from conftest import ROOT


def run(capsys, *argv):
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_done_when_stateful_sample_json(capsys):
    code, out, _ = run(capsys, "analyze", "sample:stateful_conv_mul", "--stage", "edge", "--rule", "state-aware", "--json")
    data = json.loads(out)
    assert code == 0 and data["stage"] == "edge" and data["rule"]["name"] == "state-aware"
    (site,) = data["sites"]
    assert site["decision"] == "skip" and [r["code"] for r in site["reasons"]] == ["feeds-buffer-mutation"]
    assert {"id", "conv", "mul", "conv_op", "decision", "reasons", "risks", "scale"} <= site.keys()
    assert {"code", "message", "detail"} == site["reasons"][0].keys()
    _, out, _ = run(capsys, "analyze", "sample:stateful_conv_mul", "--stage", "edge", "--rule", "upstream", "--json")
    assert json.loads(out)["sites"][0]["decision"] == "fold"
    decisions = {}
    for rule in ("upstream", "state-aware", "state-aware-strict", "off"):
        _, out, _ = run(capsys, "analyze", "sample:stateful_conv_mul", "--stage", "tfa", "--rule", rule, "--json")
        decisions[rule] = json.loads(out)["sites"][0]["decision"]
    assert decisions == {"upstream": "fold", "state-aware": "fold", "state-aware-strict": "skip", "off": "skip"}


def test_table_output_and_markers(capsys):
    code, out, _ = run(capsys, "analyze", "sample:functional_recurrent_conv_mul", "--stage", "tfa",
                       "--rule", "state-aware", "--mark", "conv@models.py:183")
    assert code == 0
    assert "marked-carried-state" in out and "1 skipped" in out


SCRIPT = textwrap.dedent('''
    import torch
    from torch import nn

    class WithMethod(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = nn.Conv2d(3, 4, 3, padding=1)
        def forward(self, x):
            return self.conv(x) * 0.5
        def example_inputs(self):
            return (torch.randn(1, 3, 8, 8),)

    class Bare(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = nn.Conv2d(3, 4, 3, padding=1)
        def forward(self, x):
            y = self.conv(x)
            return y * 0.5 + y

    class NoSites(nn.Module):
        def forward(self, x):
            return x + 1

    class Broken(nn.Module):
        def __init__(self):
            raise ValueError("needs a config")
''')


def test_script_targets(tmp_path, capsys):
    path = tmp_path / "user_model.py"
    path.write_text(SCRIPT)
    code, out, _ = run(capsys, "analyze", f"{path}:WithMethod", "--json")
    assert code == 0 and json.loads(out)["sites"][0]["decision"] == "fold"
    code, out, _ = run(capsys, "analyze", f"{path}:Bare", "--input-shape", "1,3,8,8", "--stage", "tfa")
    assert code == 0 and "conv-has-other-users" in out
    code, out, _ = run(capsys, "analyze", f"{path}:NoSites", "--input-shape", "2,2", "--json")
    assert code == 0 and json.loads(out)["sites"] == []


@pytest.mark.parametrize("argv,message", [
    (["analyze", "sample:nope"], "unknown sample 'nope'"),
    (["analyze", "missing.pt2"], "no such file: missing.pt2"),
    (["analyze", "{tmp}/user_model.py:Nope"], "has no nn.Module class 'Nope'; found: Bare, Broken, NoSites, WithMethod"),
    (["analyze", "{tmp}/user_model.py:Bare"], "Bare needs example inputs"),
    (["analyze", "{tmp}/user_model.py:Bare", "--input-shape", "1,5,8,8"],
     "torch.export failed for Bare with inputs (1x5x8x8 float32)"),
    (["analyze", "{tmp}/user_model.py:Bare", "--input-shape", "1,x"], "bad --input-shape '1,x'"),
    (["analyze", "{tmp}/user_model.py:Broken"], "Broken() failed: ValueError: needs a config"),
    (["analyze", "sample:conv_mul_scalar", "--mark", "zzz"], "unknown marker 'zzz'"),
])
def test_bad_input_is_one_line_and_exit_2(tmp_path, capsys, argv, message):
    (tmp_path / "user_model.py").write_text(SCRIPT)
    code, out, err = run(capsys, *[a.format(tmp=tmp_path) for a in argv])
    assert code == 2 and out == ""
    assert err.startswith("error: ") and err.count("\n") == 1 and message in err


def test_demo_writes_an_html_report(tmp_path, capsys):
    """The demo shows the four built-in rules, whatever else this process registered (in the suite, an
    advice's kept rules and other tests' guards share the worker: the report once grew to 15 tables)."""
    from inspector import rule, rules

    @rule("demo-test-extra", help="a user's rule the demo must not show")
    def _extra(site):
        return None

    report = tmp_path / "r.html"
    try:
        code, out, _ = run(capsys, "demo", "--html", str(report), "--no-numbers")  # nothing lowered
    finally:
        rules.unregister("demo-test-extra")
    assert "demo-test-extra" not in out
    assert code == 0 and "rule=state-aware-strict" in out and "feeds-buffer-mutation" in out
    html = report.read_text()
    assert html.startswith("<!doctype html>") and html.count("<table") == 4 and "<svg" in html
    assert "TOSA INT reference" not in out  # --no-numbers compares nothing (test_stumbles.py runs the whole demo)


def test_real_entry_point_prints_no_traceback():
    ok = subprocess.run([sys.executable, "-m", "inspector", "analyze", "sample:conv_mul_multiple_users", "--stage", "aten"],
                        cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert ok.returncode == 0 and "conv-has-other-users" in ok.stdout
    bad = subprocess.run([sys.executable, "-m", "inspector", "analyze", "sample:nope"],
                         cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert bad.returncode == 2 and "Traceback" not in bad.stderr
    assert bad.stderr.strip().splitlines()[-1].startswith("error: unknown sample")


def test_help_and_a_bad_argument_import_no_executorch_and_the_verdicts_help_still_lists_its_accelerators():
    """The help and an error need no backend: ExecuTorch's Ethos-U compile specs (which say what quantizes) are read
    only when the verdict's own help is shown (seconds of imports every command paid). One process, three commands."""
    probe = ("import contextlib, io, runpy, sys\n"
             "for argv in (['analyze', 'sample:nope'], ['--help'], ['verdict', '--help']):\n"
             "    sys.argv = ['inspector', *argv]\n"
             "    out = io.StringIO()\n"
             "    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):\n"
             "        try:\n            runpy.run_module('inspector', run_name='__main__')\n"
             "        except SystemExit:\n            pass\n"
             "    print(' '.join(argv), '| executorch imported:', 'executorch' in sys.modules, '|',\n"
             "          ' '.join(out.getvalue().split()))\n")
    run = subprocess.run([sys.executable, "-c", probe], cwd=ROOT, capture_output=True, text=True, timeout=300)
    lines = run.stdout.strip().splitlines()
    assert [line.split(" | ")[:2] for line in lines] == [["analyze sample:nope", "executorch imported: False"],
                                                         ["--help", "executorch imported: False"],
                                                         ["verdict --help", "executorch imported: True"]], run.stdout
    # The option's own help, not the usage line (Python 3.13's argparse names the metavar once, after both flags).
    help_text = lines[-1].split("comma-separated INT accelerators", 1)[-1].split("--steps")[0]
    assert "ethos-u55-128, " in help_text and "tosa-fp" not in help_text


@pytest.mark.requires_tosa
def test_compare_json_is_exactly_one_document_and_debug_shows_the_backend_output():
    """`compare --json | python -m json.tool` works: the TOSA reference model's C++ warnings
    (written to file descriptor 1) are captured, and shown on stderr only under --debug."""
    cmd = [sys.executable, "-m", "inspector", "compare", "sample:stateful_conv_mul", "--steps", "20", "--json"]
    piped = subprocess.run(" ".join(cmd) + f" | {sys.executable} -m json.tool", shell=True, cwd=ROOT,
                           capture_output=True, text=True, timeout=600)
    assert piped.returncode == 0, piped.stderr[-2000:]
    data = json.loads(piped.stdout)
    assert [len(v["metrics"]) for v in data["variants"]] == [20, 20, 20]
    assert "WARNING" not in piped.stderr and "Traceback" not in piped.stderr  # nothing on stderr either


@pytest.mark.requires_tosa
def test_debug_shows_what_the_backend_printed(capfd):
    from inspector import clear_cache

    clear_cache()  # a cached result prints nothing new
    assert main(["--debug", "compare", "sample:conv_mul_scalar", "--variants", "upstream", "--json"]) == 0
    out, err = capfd.readouterr()
    json.loads(out)
    assert "what the backend printed while running upstream" in err and "WARNING: Different TOSA spec" in err
