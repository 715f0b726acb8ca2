"""Streams and the task's own numbers (issue 53): a new input at every step, calibration over streams, accuracy and
decision mismatches as measurements, the trained networks on an Ethos-U, one-line errors for bad streams."""

from __future__ import annotations

import json
import wave

import numpy as np
import pytest
import torch

import inspector
import sample_models
from inspector._front import cli
from inspector._targets.load import load


class Accumulate(torch.nn.Module):
    """``state <- 0.5 state + conv(x) * 0.25`` in a buffer: the output depends on every frame before."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.conv = torch.nn.Conv2d(2, 4, 3, padding=1)
        self.register_buffer("state", torch.zeros(1, 4, 6, 6))

    def forward(self, x):
        self.state.copy_(0.5 * self.state + self.conv(x) * 0.25)
        return self.state.clone()


def _frames(n: int, seed: int = 1) -> list[tuple[torch.Tensor]]:
    g = torch.Generator().manual_seed(seed)
    return [(torch.randn(1, 2, 6, 6, generator=g),) for _ in range(n)]


def test_a_stream_feeds_each_step_its_own_frame_and_is_part_of_the_key():
    frames = _frames(5)
    from inspector._decide.stages import default_steps

    target = load(Accumulate(), frames)
    assert target.stream is not None and len(target.stream) == 5 and default_steps(target) == 5
    assert torch.equal(target.inputs[0], frames[0][0])
    from inspector._numbers.flow import float_reference

    expected, model = [], Accumulate()
    with torch.no_grad():
        for (x,) in frames:
            expected.append(model(x))
    got = float_reference(target, 5)
    assert all(torch.equal(a[0], b) for a, b in zip(got, expected))  # frame i at step i, state carried
    again = load(Accumulate(), _frames(5, seed=2))
    assert again.key != target.key  # another stream: another model key, so no stored answer is shared
    with pytest.raises(inspector.InspectorError, match="at most 5 steps"):
        target.steps(6)


@pytest.mark.parametrize("stream, message", [
    ([], "the stream is empty"),
    ([(torch.zeros(1, 2, 6, 6),), (torch.zeros(1, 2, 5, 6),)], "frame 1 of the stream is"),
    ([(torch.zeros(1, 2, 6, 6),), (torch.zeros(1, 2, 6, 6, dtype=torch.float64),)], "frame 1 of the stream is"),
    ([(torch.full((1, 2, 6, 6), float("nan")),)], "contains NaN"),
])
def test_a_bad_stream_is_one_line(stream, message):
    with pytest.raises(inspector.InspectorError, match=message) as info:
        inspector.Stream(frames=tuple(stream)) if stream else load(Accumulate(), stream)
    assert "\n" not in str(info.value)


def test_the_cli_reads_a_stream_from_npy_and_wav_and_refuses_another_rate(tmp_path, capsys):
    frames = np.stack([f[0].numpy() for f in _frames(3)])
    np.save(tmp_path / "frames.npy", frames)
    model = tmp_path / "acc.py"
    model.write_text(_model_file())
    assert cli.main(["analyze", f"{model}:Accumulate", "--stream", str(tmp_path / "frames.npy"), "--stage", "tfa",
                     "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["sites"]
    wav = tmp_path / "speech.wav"
    with wave.open(str(wav), "wb") as f:
        f.setnchannels(1), f.setsampwidth(2), f.setframerate(8000)
        f.writeframes((np.zeros(1024)).astype("<i2").tobytes())
    assert cli.main(["analyze", "sample:silero_vad", "--stream", str(wav), "--stage", "tfa"]) == 2
    err = capsys.readouterr().err.strip()
    assert "is at 8000 Hz but the model listens at 16000 Hz" in err and len(err.splitlines()) == 1
    assert cli.main(["analyze", f"{model}:Accumulate", "--stream", str(tmp_path / "frames.npy"),
                     "--input-shape", "1,2,6,6"]) == 2
    assert "not both" in capsys.readouterr().err


def _model_file() -> str:
    return ("import torch\n\n\nclass Accumulate(torch.nn.Module):\n    def __init__(self):\n        super().__init__()\n"
            "        self.conv = torch.nn.Conv2d(2, 4, 3, padding=1)\n"
            "        self.register_buffer('state', torch.zeros(1, 4, 6, 6))\n\n    def forward(self, x):\n"
            "        self.state.copy_(0.5 * self.state + self.conv(x) * 0.25)\n        return self.state.clone()\n")


def test_calibration_over_several_streams():
    frames = _frames(4)
    c = inspector.compare(Accumulate(), variants=("upstream",), example_inputs=frames, engine="simulation",
                          calibration=[_frames(4, seed=7), _frames(6, seed=8)])
    assert c.steps == 4 and "2 stream(s) of 4, 6 frame(s)" in c.calibration and c.stream
    other = inspector.compare(Accumulate(), variants=("upstream",), example_inputs=frames, engine="simulation",
                              calibration=[_frames(4, seed=9)])
    assert c.results[0].metrics != other.results[0].metrics  # another calibration, other numbers (no stale answer)


def test_decision_mismatch_and_accuracy_are_measurements_of_the_task():
    from inspector._numbers.measures import metric_of

    vad = metric_of("decision-mismatch@0.55")
    f, q = torch.tensor([[0.6]]), torch.tensor([[0.5]])
    assert vad.compute(f, q) == 1.0 and vad.compute(f, f) == 0.0 and vad.better == "lower"
    accuracy = inspector.metrics.get("accuracy")
    logits = torch.tensor([[0.1, 2.0, 0.3], [3.0, 0.0, 0.0]])
    assert accuracy.compute(logits, logits, torch.tensor([1, 2])) == 50.0
    with pytest.raises(inspector.InspectorError, match="takes no argument"):
        metric_of("mse@2")


@pytest.mark.requires_tosa
def test_the_trained_digits_report_accuracy_per_variant_on_an_ethos_u():
    c = inspector.compare("sample:digits_layerscale", variants=("off", "upstream"), accelerator="ethos-u55-128")
    images, labels = sample_models.get("digits_layerscale").held_out()
    assert c.steps == len(labels) == 360 and "360 held-out digits" in c.stream
    for r in c.results:
        accuracy = r.summary("accuracy")
        correct = sum(int(torch.as_tensor(r.outputs[s][0]).argmax()) == int(labels[s]) for s in range(c.steps))
        assert accuracy == pytest.approx(100.0 * correct / 360)  # the TOSA reference model's own answers, counted
        assert r.cost is not None and accuracy > 85
    assert "accuracy %" in c.to_markdown() and "accuracy" in c.to_dataframe().columns


@pytest.mark.requires_tosa
def test_silero_over_its_speech_on_the_ethos_u85_and_u55():
    """79 frames of speech, each a new input: numbers at every step for off and upstream, a decision-mismatch
    figure; on the u55 what does not lower is listed, never a crash."""
    c = inspector.compare("sample:silero_vad", variants=("off", "upstream"), steps=79, accelerator="ethos-u85-256")
    for r in c.results:
        assert r.error is None and len(r.metrics) == 79 and r.cost is not None
        mismatch = r.summary("decision-mismatch@0.5")
        assert mismatch is not None and 0 <= mismatch <= 1
    reference = [float(step[0].reshape(-1)[0]) for step in c.reference]
    decided = [p > 0.5 for p in reference]
    assert any(decided) and not all(decided)  # the float VAD's decision changes across the frames
    u55 = inspector.compare("sample:silero_vad", variants=("upstream",), steps=2, accelerator="ethos-u55-128")
    r = u55.results[0]
    assert r.error is None or "\n" not in r.error
    assert r.error is not None or r.not_delegated is not None


def test_the_widget_runs_a_models_stream_by_default_and_shows_every_frame():
    from widgets import FoldInspector

    app = FoldInspector("sample:digits_layerscale", stage="tfa")
    assert app.steps_input.value == 360  # the held-out digits, one per step
    c = inspector.compare(Accumulate(), variants=("upstream",), example_inputs=_frames(4), engine="simulation")
    html = inspector.present.comparison_html(c)
    assert "fi-per-frame" in html and html.count("<tr>") >= 1 + 4 + 2  # a row per frame beside the summary
    text = inspector.present.comparison_text(c)
    assert "per frame:" in text and "stream: the stream given for Accumulate: 4 frames" in text
