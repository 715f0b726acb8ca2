"""Blocks shaped like real networks (BatchNorm, depthwise, squeeze-excitation, weight
standardization, layer scale) go through analyze at every stage and policy, render, and compare.

Their decisions per stage and policy are checked with every other sample in test_samples.py;
here: they draw, and they quantize and run on the TOSA reference with finite numbers.
"""

from __future__ import annotations

import math

import pytest

import inspector
from conftest import NO_LOWERING as STAGES  # lowering: test_lowering_stage.py

NETWORKS = ["resnet_basic_block", "mobilenetv2_inverted_residual", "squeeze_excitation", "nf_resnet_block",
            "convnext_block"]


@pytest.mark.parametrize("name", NETWORKS)
def test_every_stage_and_policy_draws_before_and_after(stage_analyses, name):
    for stage in STAGES:
        for policy in inspector.rules:
            result = stage_analyses(name, stage).with_rule(policy)
            assert result.mismatches == ()
            for which in ("before", "after"):
                source = result.render(which).source
                assert f"{stage}, rule {policy}" in source
                for s in result.sites:
                    assert s.id in source  # every site is labelled in both pictures


@pytest.mark.requires_dot
@pytest.mark.parametrize("name", NETWORKS)
def test_svg_of_the_pair(stage_analyses, name):
    svg = inspector.present.svg(stage_analyses(name, "tfa").render_pair())
    assert svg.startswith("<svg") and svg.rstrip().endswith("</svg>")


@pytest.mark.requires_tosa
@pytest.mark.parametrize("name", NETWORKS)
def test_compare_off_and_upstream_gives_finite_numbers(stage_analyses, name):
    comparison = inspector.compare("sample:" + name, variants=("off", "upstream"))
    off, upstream = comparison.results
    folded = len(stage_analyses(name, "tfa").folded)
    assert off.folds["tfa"] == 0 and upstream.folds["tfa"] == folded
    for r in comparison.results:
        for m in r.metrics:
            assert math.isfinite(m.sqnr_db) and m.sqnr_db > 20, (r.variant.label, m)
            assert all(math.isfinite(v) for v in m.sqnr_per_channel_db)
            assert math.isfinite(m.max_abs_error)
