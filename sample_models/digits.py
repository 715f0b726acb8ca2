"""Two small networks of this project trained on scikit-learn's handwritten digits (8x8 images).

``scripts/train_digits.py`` trains both on the first 1,437 digits in seconds on a CPU and writes
their weights and the top-1 accuracy they reached on the last 360 into ``data/``
(``digits.json``); the samples load those weights. Images are scaled to [0, 1] by dividing by 16.
"""

from __future__ import annotations

import functools
import json
from pathlib import Path

import torch
from torch import nn

from ._base import FOLD, SampleModel, Verdict, skip

DATA = Path(__file__).resolve().parent / "data"
RECORD = DATA / "digits.json"  # seed, split and accuracy of the committed weights
TRAIN = 1437  # the first 1,437 digits train; the last 360 are held out
STREAMED = 125  # held-out digits in digits_stateful's stream: 8 calls each, 1,000 steps (the most a comparison runs)


@functools.lru_cache(maxsize=1)  # the 1,797 digits, read once per process (scikit-learn's import is a second)
def digits() -> tuple[torch.Tensor, torch.Tensor]:
    """All 1,797 digits as images (N, 1, 8, 8) in [0, 1] and their labels (N,), in scikit-learn's order."""
    from sklearn.datasets import load_digits  # here: importing the samples must not import scikit-learn

    data = load_digits()
    images = torch.from_numpy(data.images).to(torch.float32).unsqueeze(1) / 16
    return images, torch.from_numpy(data.target).to(torch.int64)


def split(part: str) -> tuple[torch.Tensor, torch.Tensor]:
    """``"train"`` (the first 1,437 digits) or ``"held-out"`` (the last 360): images and labels."""
    images, labels = digits()
    if part == "train":
        return images[:TRAIN], labels[:TRAIN]
    if part == "held-out":
        return images[TRAIN:], labels[TRAIN:]
    raise ValueError(f"unknown part {part!r}; choose train or held-out")


def recorded() -> dict:
    """What ``scripts/train_digits.py`` recorded when it wrote the committed weights."""
    return json.loads(RECORD.read_text(encoding="utf-8"))


class _TrainedDigits(SampleModel):
    """Loads the committed weights of ``WEIGHTS`` (a state_dict, read with ``weights_only=True``)."""

    WEIGHTS = ""

    def load_trained(self) -> None:
        self.load_state_dict(torch.load(DATA / self.WEIGHTS, map_location="cpu", weights_only=True))
        self.eval()

    def held_out(self) -> tuple[torch.Tensor, torch.Tensor]:
        """The last 360 digits, never trained on: images (360, 1, 8, 8) and labels (a stateful sample reads
        each image through its ``columns``)."""
        return split("held-out")

    def example_inputs(self):
        return (split("held-out")[0][:1],)  # the first held-out digit

    def example_stream(self):
        """The held-out digits a call each, with their labels: the task's own measure (accuracy) is read on them."""
        from inspector import Stream  # the samples import the core only when they need it

        images, labels = split("held-out")
        return Stream(frames=tuple((image[None],) for image in images), labels=tuple(labels),
                      name="the 360 held-out digits")

    def top1(self, images: torch.Tensor, labels: torch.Tensor) -> float:
        """The share of ``images`` whose most likely class is their label."""
        return int((self.predict(images) == labels).sum()) / len(labels)


class DigitsLayerScale(_TrainedDigits):
    """A trained digit classifier: two convs, each times a learned per-channel layer scale; both fold.

    ``conv(1->8) * s1 -> relu -> conv(8->16) * s2 -> relu -> average pool -> linear``, trained on
    scikit-learn's digits (``scripts/train_digits.py``). Both sites fold at every stage: the layer
    scales are real trained values, so the fold's effect on the quantized numbers is that of a real
    network, and the held-out accuracy (``held_out()``, ``predict``) says what it costs.
    """

    SEED = 53
    WEIGHTS = "digits_layerscale.pt"

    def __init__(self, trained: bool = True) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(1, 8, 3, padding=1)
        self.scale1 = nn.Parameter(torch.ones(1, 8, 1, 1))
        self.conv2 = nn.Conv2d(8, 16, 3, padding=1)
        self.scale2 = nn.Parameter(torch.ones(1, 16, 1, 1))
        self.pool = nn.AvgPool2d(2)
        self.classifier = nn.Linear(16 * 4 * 4, 10)
        if trained:
            self.load_trained()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = torch.relu(self.conv1(x) * self.scale1)
        x = torch.relu(self.conv2(x) * self.scale2)
        return self.classifier(self.pool(x).flatten(1))

    @torch.no_grad()
    def predict(self, images: torch.Tensor) -> torch.Tensor:
        """The most likely digit of each image (N, 1, 8, 8)."""
        return self(images).argmax(dim=1)

    def expected_upstream(self, stage: str) -> tuple[Verdict, ...]:
        return () if stage == "lowering" else (FOLD, FOLD)  # folded at tfa: gone from the quantized graph


class DigitsStateful(_TrainedDigits):
    """A trained digit classifier reading a column per call: its carried state is a conv times a learned gain.

    Each call takes one column (1, 1, 8, 1); ``state`` (1, C, 8, 1), a buffer, becomes
    ``conv(cat(column, tanh(state))) * gain`` (written back with ``copy_``) and the logits are read
    from it. After the 8th column the logits name the digit; ``reset()`` starts the next image.
    This is the case upstream's hazard test (#21152) and state guard (#21234) are about: the
    installed pass folds the gain into the conv, the state-aware rules skip it because its output
    feeds carried state. ``example_stream()`` is the 8 columns of the first held-out digit.
    """

    SEED = 54
    WEIGHTS = "digits_stateful.pt"
    CHANNELS = 16

    def __init__(self, trained: bool = True) -> None:
        super().__init__()
        c = self.CHANNELS
        self.conv = nn.Conv2d(1 + c, c, (3, 1), padding=(1, 0))
        self.gain = nn.Parameter(torch.ones(1, c, 1, 1))
        self.classifier = nn.Linear(c * 8, 10)
        # persistent (the committed state_dict holds it, zero): an exported program keeps a non-persistent
        # buffer among its constants, which copies of the program share
        self.register_buffer("state", torch.zeros(1, c, 8, 1))
        if trained:
            self.load_trained()

    def step(self, column: torch.Tensor, state: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """One column (N, 1, 8, 1) and the state (N, C, 8, 1) -> (logits (N, 10), the next state)."""
        state = self.conv(torch.cat([column, torch.tanh(state)], dim=1)) * self.gain
        return self.classifier(torch.tanh(state).flatten(1)), state

    def forward(self, column: torch.Tensor) -> torch.Tensor:
        logits, state = self.step(column, self.state)
        self.state.copy_(state)
        return logits

    def reset(self) -> None:
        """Zero the carried state: the next call reads the first column of a new image."""
        self.state.zero_()

    @staticmethod
    def columns(image: torch.Tensor) -> list[tuple[torch.Tensor]]:
        """Images (N, 1, 8, 8) as 8 one-column inputs (N, 1, 8, 1), left to right."""
        return [(image[..., i:i + 1],) for i in range(image.shape[-1])]

    def example_inputs(self):
        return self.columns(split("held-out")[0][:1])[0]

    def example_stream(self):
        """The held-out digits, each read column by column from a fresh state (a sequence of 8 calls), its label
        on its last column."""
        from inspector import Stream  # the samples import the core only when they need it

        images, labels = split("held-out")
        images, labels = images[:STREAMED], labels[:STREAMED]
        frames = tuple(column for image in images for column in self.columns(image[None]))
        marks = tuple(label if i % 8 == 7 else None for label in labels for i in range(8))
        return Stream(frames=frames, labels=marks, sequence=8,
                      name=f"the first {STREAMED} held-out digits, a column per call")

    @torch.no_grad()
    def predict(self, images: torch.Tensor) -> torch.Tensor:
        """The digit of each image (N, 1, 8, 8), read column by column from a zero state (the buffer is untouched)."""
        state = torch.zeros(images.shape[0], *self.state.shape[1:])
        for (column,) in self.columns(images):
            logits, state = self.step(column, state)
        return logits.argmax(dim=1)

    def expected_upstream(self, stage: str) -> tuple[Verdict, ...]:
        return () if stage == "lowering" else (FOLD,)  # folded at tfa: gone from the quantized graph

    def expected(self, stage: str, rule: str) -> tuple[Verdict, ...]:
        if stage == "lowering":
            return ()
        if rule == "off":
            return (skip("rule-off"),)
        guarded = rule == "state-aware-strict" or (rule == "state-aware" and stage == "edge")
        return (skip("feeds-buffer-mutation"),) if guarded else (FOLD,)
