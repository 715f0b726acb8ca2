"""``timm:NAME@SIZE``: a timm architecture by name, seeded, the same model in every process."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys

import pytest
import torch

import inspector
from inspector._targets import load as _load
from inspector._targets import timm_nets
from inspector._base.errors import InspectorError

NET = "timm:nf_resnet26@64"


def test_a_timm_net_is_built_seeded_and_leaves_the_global_rng_alone():
    torch.manual_seed(123)
    state = torch.get_rng_state()
    target = _load.load(NET)
    assert torch.equal(torch.get_rng_state(), state)  # the seeds are the loader's own
    assert target.name == NET and target.source == NET
    (x,) = target.inputs
    assert tuple(x.shape) == (1, 3, 64, 64)
    assert _load.load(NET) is target  # the same model again: the same target


def test_its_sites_fold_at_tfa_and_are_skipped_before():
    # nf_resnet26's weight standardization is computed in forward: a site's weight is not a constant until
    # the quantizer's passes fold it at tfa (docs/stack-facts.md)
    tfa = inspector.analyze(NET, stage="tfa")
    aten = inspector.analyze(NET, stage="aten")
    assert len(tfa.sites) == 8 and len(tfa.folded) == 8
    assert len(aten.sites) == 8 and not aten.folded
    assert {r.code for s in aten.sites for r in s.reasons} == {"weight-not-constant"}


def test_another_process_builds_the_same_model():
    here = _load.load(NET).key
    code = f"from inspector._targets import load; print(load.load({NET!r}).key)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip().splitlines()[-1] == here


def test_the_cli_reads_it():
    out = subprocess.run([sys.executable, "-m", "inspector", "analyze", "timm:nf_resnet26@32", "--stage", "tfa",
                          "--json"], capture_output=True, text=True, check=True)
    data = json.loads(out.stdout)
    assert data["target"] == "timm:nf_resnet26@32" and len(data["sites"]) == 8


@pytest.mark.parametrize("spec,message", [
    ("timm:", "names no architecture"),
    ("timm:@64", "names no architecture"),
    ("timm:nf_resnet26@", "must be a whole number of pixels"),
    ("timm:nf_resnet26@6", "must be from 8 to 1024 pixels, got 6"),
    ("timm:no_such_net@64", "timm has no architecture 'no_such_net'"),
])
def test_bad_specs_are_one_line(spec, message):
    with pytest.raises(InspectorError, match=message) as info:
        inspector.analyze(spec)
    assert "\n" not in str(info.value)


def test_without_timm_the_error_says_how_to_install_it(monkeypatch):
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "timm" else real(name, *a))
    with pytest.raises(InspectorError, match=r"pip install 'fold-inspector\[timm\]'"):
        timm_nets.import_timm()
