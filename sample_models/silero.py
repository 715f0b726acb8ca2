"""Silero's trained voice activity detector (the silero-vad package, MIT), rebuilt as a plain module.

The weights are read from the installed package's TorchScript file (``silero_vad/data/silero_vad.jit``)
each time the sample is built: nothing of the model is copied into this repository. (The package's
``silero_vad_16k.safetensors`` holds different values; the jit is what ``load_silero_vad()`` runs.)
The speech it listens to is ``data/speech.wav``, made by ``scripts/make_speech.py`` (``data/README.md``).
"""

from __future__ import annotations

import importlib.util
import wave
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from ._base import SampleModel, Verdict

SPEECH = Path(__file__).resolve().parent / "data" / "speech.wav"
RATE, FRAME, CONTEXT = 16_000, 512, 64  # the 16 kHz model: 512 new samples a call, 64 carried over
INSTALL = "pip install silero-vad==6.2.3"


def jit_file() -> Path:
    """The installed package's ``silero_vad.jit``, found without importing the package (its import sets
    torch's thread count to 1 for the whole process)."""
    spec = importlib.util.find_spec("silero_vad")
    path = Path(spec.submodule_search_locations[0]) / "data" / "silero_vad.jit" if spec else None
    if path is None or not path.is_file():
        from inspector import InspectorError  # the samples import the core only when they need it

        raise InspectorError(f"sample:silero_vad needs the silero-vad package: {INSTALL}")
    return path


def speech() -> torch.Tensor:
    """The clip of ``data/speech.wav``: 16 kHz mono, float in [-1, 1), a whole number of frames."""
    with wave.open(str(SPEECH)) as f:
        audio = np.frombuffer(f.readframes(f.getnframes()), dtype="<i2")
    return torch.from_numpy(audio.astype(np.float32) / 32768)


class SileroVad(SampleModel):
    """Silero's trained voice activity detector on real speech, frame after frame: LSTM state in buffers, no site.

    ``forward(x)`` takes 512 new samples at 16 kHz (1, 512) and returns the probability of speech
    (1, 1). As the package's own wrapper does, it keeps the LSTM's ``h`` and ``c`` and the last 64
    samples between calls (here in registered buffers written with ``copy_``); ``reset()`` starts a
    new recording. A short-time Fourier transform as a conv1d with a fixed basis, four conv1d+ReLU
    blocks, the LSTM cell, a 1x1 conv1d and a sigmoid: equal to ``silero_vad.load_silero_vad()``
    frame by frame. The installed pass has nothing to fold here; what the quantized state does over
    many frames is what the example stream (``example_stream()``: 125 frames of synthesized speech
    with quiet, noisy stretches around it) is for.
    """

    SEED = 0  # trained weights: nothing is seeded
    SAMPLE_RATE = RATE  # what a .wav stream must be recorded at (--stream speech.wav)
    METRICS = ("decision-mismatch@0.5",)  # the task's own number: frames whose speech/no-speech decision changed

    def __init__(self) -> None:
        super().__init__()
        weights = torch.jit.load(str(jit_file()), map_location="cpu")._model.state_dict()
        self.register_buffer("stft_basis", weights["stft.forward_basis_buffer"].clone())
        self.encoder = nn.ModuleList(nn.Conv1d(cin, cout, 3, stride=stride, padding=1)
                                     for cin, cout, stride in ((129, 128, 1), (128, 64, 2), (64, 64, 2), (64, 128, 1)))
        self.rnn = nn.LSTMCell(128, 128)
        self.head = nn.Conv1d(128, 1, 1)
        with torch.no_grad():
            for i, conv in enumerate(self.encoder):
                conv.weight.copy_(weights[f"encoder.{i}.reparam_conv.weight"])
                conv.bias.copy_(weights[f"encoder.{i}.reparam_conv.bias"])
            for name in ("weight_ih", "weight_hh", "bias_ih", "bias_hh"):
                getattr(self.rnn, name).copy_(weights[f"decoder.rnn.{name}"])
            self.head.weight.copy_(weights["decoder.decoder.2.weight"])
            self.head.bias.copy_(weights["decoder.decoder.2.bias"])
        self.register_buffer("h", torch.zeros(1, 128))
        self.register_buffer("c", torch.zeros(1, 128))
        self.register_buffer("context", torch.zeros(1, CONTEXT))
        self.eval()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = torch.cat([self.context, x], dim=1)
        self.context.copy_(x[:, -CONTEXT:])
        # the package's STFT: reflect-pad 64 on the right, a conv1d with the fixed basis, magnitude
        x = F.pad(x, (0, CONTEXT), mode="reflect").unsqueeze(1)
        spectrum = F.conv1d(x, self.stft_basis, stride=128)
        real, imag = spectrum[:, :129], spectrum[:, 129:]
        x = torch.sqrt(real.pow(2) + imag.pow(2))
        for conv in self.encoder:
            x = torch.relu(conv(x))
        h, c = self.rnn(x.squeeze(-1), (self.h, self.c))
        self.h.copy_(h)
        self.c.copy_(c)
        return torch.sigmoid(self.head(torch.relu(h).unsqueeze(-1))).squeeze(-1)

    def reset(self) -> None:
        """Zero the LSTM's state and the carried samples: the next call starts a new recording."""
        for buffer in (self.h, self.c, self.context):
            buffer.zero_()

    def example_stream(self):
        """The whole clip, a frame of 512 samples per call: speech, quiet and noise, 125 frames (4 s)."""
        from inspector import Stream  # the samples import the core only when they need it

        return Stream(frames=tuple((frame.unsqueeze(0),) for frame in speech().split(FRAME)),
                      name=f"speech.wav (espeak-ng, {RATE // 1000} kHz), frames of {FRAME} samples")

    def example_inputs(self):
        return self.example_stream()[40]  # a frame inside the first sentence

    def expected_upstream(self, stage: str) -> tuple[Verdict, ...]:
        return ()
