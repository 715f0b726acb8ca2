"""Triage: a report to paste into an issue thread (Markdown, HTML, JSON) and a minimal reproducer test."""

from __future__ import annotations

import ast
import json
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import mistune
import pytest
import torch
from torch import nn

import inspector
from inspector._front.cli import main
from inspector._base.formats import GITHUB_COMMENT_LIMIT
from inspector.present.report import md_code, user_frames
from inspector._front.repro import reproducer
from conftest import NO_LOWERING, ROOT

HERE = [os.getcwd(), sys.prefix, str(Path.home()), str(ROOT), "/tmp/"]


def _no_local_paths(text: str) -> None:
    for path in HERE:
        if len(path) > 1:
            assert path not in text, f"{path} leaked"


def _render_md(text: str) -> str:
    """GitHub-flavoured rendering (tables, autolinks): what a reader of the issue thread sees."""
    return mistune.create_markdown(plugins=["table", "strikethrough", "url"])(text)


# ---------------------------------------------------------------- report


def test_done_when_markdown_report_of_the_stateful_sample(capsys):
    assert main(["report", "sample:stateful_conv_mul", "--format", "md"]) == 0
    text = capsys.readouterr().out
    assert "| site | decision | reasons | risks | scale |" in text and "`conv@models.py:149`" in text
    for package in ("python", "torch", "executorch", "tosa-tools", "fold-inspector"):
        assert f"{package} " in text
    assert "python -m inspector report sample:stateful_conv_mul --stage tfa --rule upstream --format md" in text
    assert "**Summary.**" in text and "<details>" in text and text.count("<details>") == text.count("</details>")
    _no_local_paths(text)
    html = _render_md(text)
    assert "<table>" in html and "<a " not in html and "<img" not in html


def test_markdown_with_a_comparison_and_markers(capsys):
    assert main(["report", "sample:functional_recurrent_conv_mul", "--stage", "tfa", "--rule", "state-aware",
                 "--mark", "conv@models.py:183", "--variants", "off,state-aware", "--steps", "3", "--format", "md"]) == 0
    text = capsys.readouterr().out
    assert "**TOSA INT reference vs float**, 3 step(s)" in text and "marked-carried-state" in text
    assert "--mark conv@models.py:183 --variants off,state-aware --steps 3" in text


EVIL = "x](http://evil.example)![p](http://evil.example/p.png)<img src=y onerror=alert(1)>`|https://evil.example"


class EvilName(nn.Module):
    def __init__(self):
        super().__init__()
        self.add_module(EVIL.replace(".", "_"), nn.Conv2d(3, 4, 3, padding=1))

    def forward(self, x):
        return getattr(self, EVIL.replace(".", "_"))(x) * 0.5


def test_markdown_cannot_be_injected_by_model_strings():
    analysis = inspector.analyze(EvilName(), example_inputs=(torch.ones(1, 3, 8, 8),), stage="aten")
    text = analysis.report(format="md")
    assert EVIL.replace(".", "_")[:20] in text
    html = _render_md(text)
    assert "<a " not in html and "<img" not in html  # no link, no image, no raw HTML: only text in code
    # every model string is inside a code span, backticks included
    assert md_code("a`b") == "``a`b``" and md_code("a|b", cell=True) == "`a\\|b`"


def test_markdown_stays_under_the_github_limit_and_valid():
    class Many(nn.Module):
        def __init__(self):
            super().__init__()
            # 250 sites whose module paths (and so site ids) are 120 characters long
            self.convs = nn.ModuleDict({f"block_{i:03d}_" + "x" * 110: nn.Conv2d(2, 2, 1) for i in range(250)})

        def forward(self, x):
            outs = [conv(x) * 0.5 for conv in self.convs.values()]
            return torch.stack(outs).sum(0)

    analysis = inspector.analyze(Many(), example_inputs=(torch.ones(1, 2, 4, 4),), stage="aten")
    assert len(analysis.sites) == 250
    text = analysis.report(format="md")
    assert len(text) < GITHUB_COMMENT_LIMIT
    assert "left out to stay under GitHub's comment limit" in text or "left out (see `--format json`)" in text
    assert text.count("<details>") == text.count("</details>") and text.count("```") % 2 == 0
    rows = [line for line in text.splitlines() if line.startswith("| `convs.")]
    assert 0 < len(rows) <= 250  # the table keeps what fits; details go first
    assert all(line.count(" | ") == 4 for line in rows)  # every row has its five cells


SCRIPT = textwrap.dedent('''
    import torch
    from torch import nn

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = nn.Conv2d(3, 4, 3, padding=1)
            self.register_buffer("state", torch.zeros(1, 4, 8, 8))

        def forward(self, x):
            y = self.conv(x + self.state[:, :3]) * 0.5
            self.state.copy_(y)
            return y

        def example_inputs(self):
            return (torch.ones(1, 3, 8, 8),)
''')


@pytest.mark.requires_dot
def test_html_and_json_reports_redact_local_paths_and_keep_user_frames(tmp_path, capsys):
    model = tmp_path / "project" / "net.py"
    model.parent.mkdir()
    model.write_text(SCRIPT)
    out = tmp_path / "r.html"
    assert main(["report", f"{model}:Net", "--stage", "tfa", "--format", "html", "--out", str(out)]) == 0
    html = out.read_text()
    assert html.startswith("<!doctype html>") and "<svg" in html
    assert str(tmp_path) not in html and "net.py" in html  # relative to the model file
    assert "torch/nn/modules/conv.py" not in html  # the user's frames only
    assert not re.search(r"(src|href)=['\"]?(https?:)?//", html)  # no external URL of any kind
    full = tmp_path / "full.html"
    assert main(["report", f"{model}:Net", "--stage", "tfa", "--format", "html", "--full-traces",
                 "--out", str(full)]) == 0
    text = full.read_text()
    assert "&lt;site-packages&gt;/torch/nn/modules/conv.py" in text and str(tmp_path) not in text
    capsys.readouterr()
    assert main(["report", f"{model}:Net", "--stage", "tfa", "--format", "json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["analysis"]["sites"][0]["decision"] == "fold" and data["environment"]["executorch"]
    assert str(tmp_path) not in json.dumps(data) and data["command"].startswith("python -m inspector report net.py:Net")


def test_user_frames_drop_library_frames():
    trace = (f'File "/home/u/net.py", line 3, in forward\n    y = self.conv(x)\n'
             f'  File "{sys.prefix}/lib/python3.11/site-packages/torch/nn/modules/conv.py", line 565, in forward\n'
             f'    return self._conv_forward(input)')
    kept = user_frames(trace)
    assert "net.py" in kept and "conv.py" not in kept and "_conv_forward" not in kept


@pytest.mark.requires_dot
def test_the_widget_exports_the_same_markdown(tmp_path):
    from widgets import FoldInspector

    app = FoldInspector("sample:stateful_conv_mul", stage="edge", rule="upstream")
    path = app.export_report(tmp_path / "r.md", format="md")
    expected = inspector.analyze("sample:stateful_conv_mul", stage="edge").report(format="md")
    assert path.read_text() == expected


# ---------------------------------------------------------------- reproducer


def _run_pytest_without_the_inspector(folder: Path, *args: str) -> subprocess.CompletedProcess:
    """pytest in a fresh process where ``import inspector`` (and the samples) fail: the files stand alone."""
    code = ("import sys; sys.modules['inspector'] = None; sys.modules['sample_models'] = None; "
            "sys.modules['widgets'] = None; import pytest; "
            f"sys.exit(pytest.main(['-q', '-p', 'no:cacheprovider', *{list(args)!r}]))")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    return subprocess.run([sys.executable, "-c", code], cwd=folder, capture_output=True, text=True, env=env,
                          timeout=900)


def _imports(source: str) -> set[str]:
    tree = ast.parse(source)
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(a.name.split(".")[0] for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            names.add((node.module or "").split(".")[0])
    return names


@pytest.mark.slow  # runs the reproducer it writes in a pytest of its own: make test runs it
def test_done_when_repro_of_the_multiple_users_sample(tmp_path):
    empty = tmp_path / "empty"
    empty.mkdir()
    site = inspector.analyze("sample:conv_mul_multiple_users").sites[0].id
    cli = subprocess.run([sys.executable, "-m", "inspector", "repro", "sample:conv_mul_multiple_users", "--site", site,
                          "--out", str(empty / "t.py")], cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert cli.returncode == 0, cli.stderr[-2000:]
    assert [p.name for p in empty.iterdir()] == ["t.py"]
    source = (empty / "t.py").read_text()
    assert _imports(source) <= {"copy", "re", "torch", "executorch"}
    assert "def test_conv_models_py_72_skipped" in source
    run = _run_pytest_without_the_inspector(empty, "t.py")
    assert run.returncode == 0 and "1 passed" in run.stdout, run.stdout[-3000:]


@pytest.fixture(scope="module")
def all_reproducers(tmp_path_factory, stage_analyses):
    """A reproducer for every site of every sample (the real-network blocks among them) at every stage;
    of the 220 identical-but-for-index blocks of generated_blocks, one of each pattern (plain, state,
    second user, both)."""
    folder = tmp_path_factory.mktemp("repros")
    expected = {}
    for name in inspector.samples.names():
        for stage in NO_LOWERING:  # a reproducer runs the pass alone: no lowering stage
            analysis = stage_analyses(name, stage)  # shared with test_samples.py: built once per run
            for i, site in enumerate(analysis.sites):
                if name == "generated_blocks" and i not in (0, 3, 4, 19):  # one site of each of its patterns
                    continue
                repro = reproducer(analysis, site_id=site.id)
                (folder / f"test_{name}_{stage}_{i}.py").write_text(repro.source)
                expected[f"test_{name}_{stage}_{i}.py::{repro.test_name}"] = (site.decision, repro)
    return folder, expected


@pytest.mark.slow  # one reproducer per site of every sample at every stage, each run by pytest: make test runs it
def test_every_sample_site_reproduces_its_decision_without_the_inspector(all_reproducers):
    folder, expected = all_reproducers
    assert len(expected) >= 50
    for decision, repro in expected.values():
        assert repro.decision == decision and repro.test_name.endswith("_folds" if decision == "fold" else "_skipped")
        assert _imports(repro.source) <= {"copy", "re", "torch", "executorch"}
        assert (repro.muls_before > repro.muls_after) == (decision == "fold")
    run = _run_pytest_without_the_inspector(folder, "-rA", ".")
    assert run.returncode == 0, run.stdout[-4000:]
    passed = set(re.findall(r"^PASSED (\S+)", run.stdout, re.M))
    assert passed == set(expected)


class Unseen(nn.Module):
    """Shapes the samples do not have: depthwise with stride and dilation, no bias, 'same' padding, conv3d."""

    def __init__(self):
        super().__init__()
        self.dw = nn.Conv2d(8, 8, 3, stride=2, dilation=2, padding=2, groups=8, bias=False)
        self.same = nn.Conv2d(8, 4, 3, padding="same")
        self.deconv = nn.ConvTranspose2d(4, 4, 3, stride=2, padding=1, output_padding=1)
        self.c3 = nn.Conv3d(2, 2, 1)
        self.register_buffer("gain", torch.linspace(0.5, 2.0, 8).reshape(1, 8, 1, 1))

    def forward(self, x, v):
        a = self.dw(x) * self.gain
        b = self.same(a) * 0.125
        c = self.deconv(b) * 2.0
        d = self.c3(v) * 3.0
        return c, d


@pytest.mark.slow  # runs the reproducers it writes in a pytest of their own: make test runs it
def test_models_the_samples_do_not_have(tmp_path):
    inputs = (torch.rand(1, 8, 16, 16, generator=torch.Generator().manual_seed(0)), torch.ones(1, 2, 3, 4, 4))
    written = 0
    for stage in NO_LOWERING:
        analysis = inspector.analyze(Unseen(), example_inputs=inputs, stage=stage)
        stage_written = 0
        for i, site in enumerate(analysis.sites):
            try:
                repro = reproducer(analysis, site_id=site.id)
            except inspector.InspectorError as exc:  # allowed, but only as one honest line
                assert str(exc).startswith(f"site {site.id} cannot be reproduced by a minimal module: ")
                continue
            assert repro.decision == site.decision
            (tmp_path / f"test_unseen_{stage}_{i}.py").write_text(repro.source)
            stage_written += 1
        assert stage_written >= len(analysis.sites) - 1, stage
        written += stage_written
    run = _run_pytest_without_the_inspector(tmp_path, ".")
    assert run.returncode == 0 and f"{written} passed" in run.stdout, run.stdout[-3000:]


def test_a_decision_a_minimal_module_cannot_express_is_one_line():
    class IntScale(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = nn.Conv2d(3, 4, 3, padding=1)
            self.register_buffer("scale", torch.tensor(2, dtype=torch.int64))

        def forward(self, x):
            return self.conv(x) * self.scale

    analysis = inspector.analyze(IntScale(), example_inputs=(torch.ones(1, 3, 8, 8),), stage="tfa")
    site = analysis.sites[0]
    assert site.reason_codes[0] == "disallowed-by-quantizer"  # set by the quantizer's own int64 passes
    with pytest.raises(inspector.InspectorError) as info:
        reproducer(analysis, site_id=site.id)
    message = str(info.value)
    assert "\n" not in message and message.startswith(f"site {site.id} cannot be reproduced by a minimal module")
    assert "the quantizer's own passes decide it" in message
