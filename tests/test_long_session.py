"""A long session stays small, and a background reference run does not hold the main thread up.

Each cache of the core has one owner and one bound (``inspector/_cache.py``): the same actions
repeated keep memory flat and give the same answers. The fold pass is chosen per context, not
by a process-wide switch behind a lock, so an analysis in the main thread does not wait for a
reference run in another thread (as the widget's background runs are).
"""

from __future__ import annotations

import gc
import threading
import time

import psutil
import pytest
import torch
from torch import nn

import inspector
from inspector import _cache

BIG = "sample:generated_blocks"  # 1,142 nodes at tfa, 200 sites
ROUNDS = 30
MIB = 2 ** 20


def _rss_mib() -> float:
    gc.collect()
    return psutil.Process().memory_info().rss / MIB


def _round(rng_sites: range) -> dict:
    """One round of what a user does in a session: analyse again, switch policies and stages,
    toggle markers (drawing a focused picture now and then). Returns the last answer's records."""
    current = inspector.analyze(BIG, stage="tfa")
    for policy in ("off", "state-aware-strict", "upstream", "state-aware"):
        current = current.with_policy(policy)
    for k, i in enumerate(rng_sites):
        site = current.sites[i]
        current = current.toggle_marker(site.id)
        if k == 0:
            current.render_pair(focus=site.id)
    current = current.with_stage("edge").with_stage("tfa")
    return current.to_dict()


@pytest.mark.slow
def test_thirty_rounds_of_a_session_keep_memory_flat_and_answers_equal():
    first = _round(range(10, 16))
    start = _rss_mib()
    for _ in range(ROUNDS - 1):
        last = _round(range(10, 16))
    grown = _rss_mib() - start
    per_round = grown / (ROUNDS - 1)
    # Before every cache had an owner: about 47 MiB a round (975 MiB after ten), never freed.
    assert per_round < 5, f"RSS grew {grown:.1f} MiB over {ROUNDS - 1} rounds ({per_round:.2f} MiB a round)"
    assert last == first


def test_clear_cache_empties_every_cache_of_the_core():
    analysis = inspector.analyze("sample:stateful_conv_mul", stage="tfa")
    analysis.toggle_marker(analysis.sites[0].id).render_pair(focus=analysis.sites[0].id)
    filled = [c for c in _cache.caches() if len(c)]
    assert filled, "nothing was cached"
    inspector.clear_cache()
    assert not [c for c in _cache.caches() if len(c)]


def test_a_weak_cache_refuses_a_value_that_holds_its_key():
    cache = _cache.WeakCache("test")
    key = nn.Linear(1, 1)
    with pytest.raises(ValueError, match="never be freed"):
        cache.put(key, (1, lambda: key))
    cache.put(key, (1, "fine"))
    assert cache.get(key) == (1, "fine")
    del key
    gc.collect()
    assert len(cache) == 0


class _Tower(nn.Module):
    """Twelve conv -> relu -> mul blocks: a few seconds of quantize and lower on the reference."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.convs = nn.ModuleList(nn.Conv2d(3 if i == 0 else 16, 16, 3, padding=1) for i in range(12))

    def forward(self, x):
        for conv in self.convs:
            x = torch.relu(conv(x)) * 0.5
        return x


class _Small(nn.Module):
    def __init__(self, seed: int) -> None:
        super().__init__()
        torch.manual_seed(seed)
        self.conv = nn.Conv2d(3, 4, 3, padding=1)

    def forward(self, x):
        return self.conv(x) * 0.5


@pytest.mark.requires_tosa
def test_an_analysis_at_tfa_does_not_wait_for_a_reference_run_in_another_thread():
    x = (torch.randn(1, 3, 8, 8),)
    inspector.analyze(_Small(0), x, stage="tfa")  # warm: imports, the pass manager, the dispatching pass
    t0 = time.perf_counter()
    inspector.analyze(_Small(1), x, stage="tfa")  # a model not seen: export, tfa capture, decide
    alone = time.perf_counter() - t0

    started, done, errors = threading.Event(), threading.Event(), []

    def progress(phase: str, fraction: float) -> None:
        if phase.endswith(("prepare", "calibrate", "convert", "lower")):
            started.set()

    def background():
        try:
            inspector.compare(_Tower(), ("upstream",), example_inputs=(torch.randn(1, 3, 32, 32),), steps=1,
                              workers=1, progress=progress)
        except Exception as exc:  # noqa: BLE001 - reported below
            errors.append(exc)
        finally:
            started.set()
            done.set()

    worker = threading.Thread(target=background, daemon=True)
    worker.start()
    assert started.wait(300), "the reference run never started"
    t0 = time.perf_counter()
    analysis = inspector.analyze(_Small(2), x, stage="tfa")
    meanwhile = time.perf_counter() - t0
    finished_first = not done.is_set()
    worker.join(900)
    assert not errors, errors
    assert analysis.summary() == "1 site, 1 folded, 0 skipped"
    assert finished_first, "the reference run finished before the analysis did"
    assert meanwhile <= alone + 2.0, f"{meanwhile:.2f} s during a background run, {alone:.2f} s alone"
