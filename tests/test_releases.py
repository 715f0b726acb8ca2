"""The executorch releases the inspector runs on: checked once per process, refused in one line outside them.

scripts/check_releases.py measures every supported release in its own environment (docs/stack-facts.md has the
table); these tests need none: they change what the door reads (the version, a name) and look at the one line.
"""

from __future__ import annotations

import pytest

import inspector
from inspector import InspectorError
from inspector._doors import executorch as _executorch

KNOWN = "supported: 1.5.1, 1.5.0, 1.4.1, 1.4.0 ("


@pytest.fixture
def fresh_checks():
    """Every check of the door forgotten before and after the test: a changed stack is checked again."""
    _executorch.clear_checks()
    yield
    _executorch.clear_checks()


@pytest.mark.parametrize("release", ["1.4.0", "1.4.1", "1.5.0", "1.5.1", "1.5.1+cpu", "1.5.2"])
def test_a_release_in_the_range_passes(release):
    _executorch.check_version(release)


@pytest.mark.parametrize("release", ["1.3.0", "1.3.9+cpu", "1.6.0", "1.6.0.dev20260301+cpu", "1.6.0a0", "2.0.0",
                                     "0.7.0", "nightly"])
def test_a_release_outside_the_range_is_one_line_naming_it_and_the_known_ones(release):
    with pytest.raises(InspectorError) as info:
        _executorch.check_version(release)
    message = str(info.value)
    assert message.startswith(f"executorch {release} is not supported: it is outside >=1.4.0,<1.6")
    assert KNOWN in message and "pip install executorch==1.5.1" in message and "\n" not in message


def test_no_executorch_at_all_is_one_line(monkeypatch):
    monkeypatch.setattr(_executorch, "installed_version", lambda package="executorch", missing="": missing)
    with pytest.raises(InspectorError, match=rf"^executorch \(not installed\) is not supported: it is not installed; "
                                             rf"{KNOWN.replace('(', '')}"):
        _executorch.check_version()


# A model no cache of this process or store has seen (its scale is drawn anew): the answer must reach the door.
UNSEEN = """
import torch


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 4, 3)
        self.scale = 0.5 + float(torch.rand(()))

    def forward(self, x):
        return self.conv(x) * self.scale

    def example_inputs(self):
        return (torch.ones(1, 3, 8, 8),)
"""


def test_the_version_is_checked_before_any_answer_and_once_per_process(monkeypatch, fresh_checks, capsys, tmp_path):
    """An out-of-range release stops analyze (API and CLI) in one line; once it passes it is not read again."""
    (tmp_path / "unseen.py").write_text(UNSEEN)
    target = f"{tmp_path / 'unseen.py'}:Net"
    monkeypatch.setattr(_executorch, "installed_version", lambda package="executorch", missing="": "1.6.0")
    with pytest.raises(InspectorError) as info:
        inspector.analyze(target, stage="aten")
    assert str(info.value).startswith("executorch 1.6.0 is not supported: it is outside >=1.4.0,<1.6, ")
    assert KNOWN in str(info.value) and "\n" not in str(info.value)
    from inspector._front.cli import main

    capsys.readouterr()
    assert main(["analyze", target, "--stage", "aten"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: executorch 1.6.0 is not supported") and "\n" not in err

    reads = []
    monkeypatch.setattr(_executorch, "installed_version",
                        lambda package="executorch", missing="": reads.append(package) or "1.4.1")
    _executorch.clear_checks()
    for _ in range(3):
        _executorch.check_once()
        _executorch.fold_pass_class()
    assert reads == ["executorch"]  # read once, for the version check; the passed check is remembered


def test_a_missing_name_is_one_line_naming_it_and_the_known_releases(monkeypatch, fresh_checks):
    missing = ((_executorch._FOLD_MODULE, _executorch.FOLD_PASS, ("_a_method_no_release_has",)),)
    with pytest.raises(InspectorError) as info:
        _executorch.check_once(missing)
    message = str(info.value)
    assert message.startswith(f"executorch {_executorch.installed_version()} is not supported: "
                              "FoldScalarMulIntoConvPass has no _a_method_no_release_has; " + KNOWN)
    assert "\n" not in message
    moved = (("executorch.backends.arm.quantizer", "NameThatMoved", ()),)
    with pytest.raises(InspectorError, match=r"is not supported: quantizer has no NameThatMoved; supported: 1\.5\.1"):
        _executorch.check_once(moved)


def test_every_doors_table_names_what_is_there():
    """Each door's table of ExecuTorch names holds on the installed release (the check a user's first answer runs)."""
    from inspector._doors import pipeline, tosa

    for table in (_executorch.REQUIRED, tosa.REQUIRED, pipeline.REQUIRED):
        _executorch.check_required(table)


def test_the_cli_answers_name_the_release_they_ran_on(capsys):
    import json

    from inspector._front.cli import main

    release = _executorch.installed_version()
    assert main(["analyze", "sample:conv_mul_scalar", "--stage", "aten", "--json"]) == 0
    answer = json.loads(capsys.readouterr().out)
    assert answer["executorch"] == release and f"executorch {release}" in answer["rule"]["source"]
    assert main(["analyze", "sample:conv_mul_scalar", "--stage", "aten"]) == 0
    assert capsys.readouterr().out.rstrip().splitlines()[-1] == f"executorch {release}"


@pytest.mark.parametrize("release,frozen", [("1.4.0", True), ("1.4.1", True), ("1.5.0", False), ("1.5.1+cpu", False)])
def test_the_releases_that_freeze_a_buffer_s_state(release, frozen):
    assert _executorch.freezes_buffer_state(release) is frozen


@pytest.mark.requires_tosa
def test_a_comparison_on_a_release_that_freezes_the_state_says_so(monkeypatch):
    """On 1.4.x a model writing a registered buffer is measured with its state frozen (docs/stack-facts.md): the
    comparison says so; a model without one, or the FP flow, says nothing. On the installed release the note is
    there exactly when that release freezes it."""
    from inspector._numbers import compare as compare_module
    from inspector._targets import load as _load

    def notes(name, accelerator="tosa-int"):
        return [n for n in compare_module.release_notes(_load.load(name), inspector.accelerators.get(accelerator))
                if "frozen" in n]

    assert bool(notes("sample:stateful_conv_mul")) == _executorch.freezes_buffer_state()
    monkeypatch.setattr(_executorch, "installed_version", lambda *a, **k: "1.4.1")
    assert notes("sample:stateful_conv_mul") and "executorch 1.4.1" in notes("sample:stateful_conv_mul")[0]
    assert not notes("sample:conv_mul_scalar")
    assert not notes("sample:stateful_conv_mul", "tosa-fp")
    comparison = inspector.compare("sample:stateful_conv_mul", variants=["upstream"], steps=2)
    assert any("frozen" in n for n in comparison.notes)
