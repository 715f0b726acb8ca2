"""The trained samples (docs/real-networks.md): Silero's VAD equals the packaged model frame by frame on the
committed speech clip, the clip changes the VAD's decision, and the digits networks reach their recorded
accuracy both from the committed weights and from a retrain by scripts/train_digits.py.

Their fold decisions at every stage and rule are checked with every other sample in test_samples.py.
"""

from __future__ import annotations

import importlib.util
import sys
from contextlib import contextmanager

import pytest
import torch

import inspector
import sample_models
from sample_models import digits, silero
from conftest import ROOT

THRESHOLD = 0.5  # the package's own default threshold for speech


@contextmanager
def one_thread():
    """Frame after frame of small ops: one thread is ~100x faster than two on a busy 2-core machine
    (measured: 125 Silero frames 0.09 s against 10.8 s), and as fast on an idle one."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        with torch.no_grad():
            yield
    finally:
        torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def packaged_probabilities() -> list[float]:
    """The packaged model's probability of speech for every frame of the clip, from a fresh state."""
    with one_thread():
        import silero_vad  # its import sets torch's thread count to 1 for the whole process: one_thread restores it

        packaged = silero_vad.load_silero_vad()
        return [packaged(frame, silero.RATE).item() for (frame,) in sample_models.get("silero_vad").example_stream()]


def test_silero_equals_the_packaged_model_frame_by_frame(packaged_probabilities):
    model = sample_models.get("silero_vad")
    stream = model.example_stream()
    assert len(stream) >= 79 and all(frame.shape == (1, silero.FRAME) for (frame,) in stream)
    assert model.example_inputs()[0].shape == (1, silero.FRAME)
    with one_thread():
        for _ in range(2):  # and again after reset(): a new recording starts from the same state
            rebuilt = [model(frame).item() for (frame,) in stream]
            worst = max(abs(a - b) for a, b in zip(rebuilt, packaged_probabilities))
            assert worst <= 1e-5, worst
            model.reset()


def test_the_clip_changes_the_vads_decision_both_ways(packaged_probabilities):
    speech = [p > THRESHOLD for p in packaged_probabilities]
    assert not speech[0] and not speech[-1]  # quiet, noisy stretches at both ends
    starts = sum(1 for a, b in zip(speech, speech[1:]) if b and not a)
    ends = sum(1 for a, b in zip(speech, speech[1:]) if a and not b)
    assert starts >= 2 and ends >= 2, (starts, ends)  # two sentences, each heard and left


def test_silero_without_the_package_says_how_to_install_it(monkeypatch):
    monkeypatch.setitem(sys.modules, "silero_vad", None)  # what find_spec sees when it is not installed
    assert importlib.util.find_spec("silero_vad") is None
    with pytest.raises(inspector.InspectorError) as caught:
        inspector.analyze("sample:silero_vad")
    assert str(caught.value) == "sample:silero_vad needs the silero-vad package: pip install silero-vad==6.2.3"


@pytest.mark.parametrize("name,floor", [("digits_layerscale", 0.90), ("digits_stateful", 0.80)])
def test_the_committed_weights_reach_the_recorded_accuracy(name, floor):
    model = sample_models.get(name)
    images, labels = model.held_out()
    assert images.shape == (360, 1, 8, 8) and labels.shape == (360,)
    assert images.min() >= 0 and images.max() <= 1
    top1 = model.top1(images, labels)
    record = digits.recorded()[name]
    assert top1 == pytest.approx(record["held_out_top1"], abs=5e-5) and round(top1 * 360) == record["held_out_correct"]
    assert top1 >= floor


def test_the_stateful_digits_read_column_by_column_through_the_buffer_as_in_training():
    model = sample_models.get("digits_stateful")
    images, labels = model.held_out()
    images = images[:12]
    stream = model.example_stream()  # the first held-out digits, each column by column, its label on its last column
    assert stream.sequence == 8 and len(stream) == 8 * digits.STREAMED
    expected = [column for image in images for column in model.columns(image[None])]
    assert all(torch.equal(a, b) for (a,), (b,) in zip(stream, expected))  # frame 8k + i is digit k's column i
    assert [int(x) for x in stream.labels[7:96:8]] == labels[:12].tolist() and stream.labels[0] is None
    read = []
    with one_thread():
        for image in images:
            model.reset()
            for column in model.columns(image[None]):
                logits = model(*column)
            read.append(int(logits.argmax()))
    assert read == model.predict(images).tolist()


def test_a_retrain_from_the_script_reaches_the_recorded_accuracy():
    spec = importlib.util.spec_from_file_location("train_digits", ROOT / "scripts" / "train_digits.py")
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    record = digits.recorded()
    for name in script.RECIPES:
        weights, top1 = script.train(name)
        assert top1 >= record[name]["held_out_top1"] - 5e-5, (name, top1)
        model = script.RECIPES[name][0](trained=False)
        model.load_state_dict(weights)
        assert model.eval().top1(*model.held_out()) == top1  # the weights it returned are the ones it scored


def test_digits_stateful_has_a_site_whose_output_is_the_carried_state():
    analysis = inspector.analyze("sample:digits_stateful", stage="tfa")
    (site,) = analysis.sites
    assert site.decision == "fold" and site.scale.kind == "channel"
    risk = next(r for r in site.risks if r.code == "feeds-carried-state")
    assert "buffer 'state'" in risk.detail
    (guarded,) = analysis.with_rule("state-aware-strict").sites
    assert guarded.decision == "skip" and guarded.reason_codes == ("feeds-buffer-mutation",)
