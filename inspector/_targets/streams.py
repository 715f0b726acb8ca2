"""Streams: a model called step after step on a new input each time (the next audio frame, the next image column).

A ``Stream`` is the inputs in order, one tuple per step, with the labels a task measurement needs (a true class per
frame, or None where a frame has none) and how long one sequence is (the model's state starts fresh every
``sequence`` frames: eight columns make one digit). It is data like any example input: wherever example inputs or a
calibration are taken, a stream is accepted too (a ``Stream``, or a plain list of input tuples), its length is the
default number of steps, and the keys of every stored result include it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Sequence

import torch

from .._base.errors import InspectorError
from .._base.hashing import digest

MAX_FRAMES = 100_000  # a stream longer than this is refused (each frame is a run of the reference model)


@dataclass(frozen=True)
class Stream:
    """Inputs in order, one tuple per step, and what a task measurement needs of each frame."""

    frames: tuple  # one input tuple per step, each shaped like the first
    labels: tuple | None = None  # per frame: the true class(es) as a tensor, or None where the frame has no label
    sequence: int = 0  # frames per sequence: the state starts fresh every ``sequence`` frames (0: one sequence)
    name: str = ""  # where it comes from, in words ("speech.wav, 79 frames of 512 samples")
    key: str = field(default="", compare=False)  # a digest of its frames and labels (set when it is made)

    def __post_init__(self) -> None:
        frames = tuple(_frame(f, i) for i, f in enumerate(self.frames))
        if not frames:
            raise InspectorError("the stream is empty: give at least one input tuple (one per step)")
        if len(frames) > MAX_FRAMES:
            raise InspectorError(f"the stream has {len(frames):,} frames, more than {MAX_FRAMES:,}: give a shorter one")
        first = _shape(frames[0])
        for i, f in enumerate(frames[1:], 1):
            if _shape(f) != first:
                raise InspectorError(f"frame {i} of the stream is {_said(_shape(f))} but frame 0 is {_said(first)}: "
                                     "every frame holds inputs of the same shapes and dtypes")
        labels = self.labels
        if labels is not None:
            labels = tuple(None if x is None else torch.as_tensor(x) for x in labels)
            if len(labels) != len(frames):
                raise InspectorError(f"the stream has {len(frames)} frames but {len(labels)} labels: one label (or "
                                     "None) per frame")
        if isinstance(self.sequence, bool) or not isinstance(self.sequence, int) or self.sequence < 0:
            raise InspectorError(f"a stream's sequence is a number of frames (0: one sequence), got {self.sequence!r}")
        if self.sequence and len(frames) % self.sequence:
            raise InspectorError(f"the stream's {len(frames)} frames are not whole sequences of {self.sequence}")
        object.__setattr__(self, "frames", frames)
        object.__setattr__(self, "labels", labels)
        object.__setattr__(self, "key", digest(frames, labels, self.sequence))

    def __len__(self) -> int:
        return len(self.frames)

    def __iter__(self):
        return iter(self.frames)

    def __getitem__(self, index):
        return self.frames[index]

    @property
    def inputs(self) -> tuple:
        """The first frame: what the model is exported with."""
        return self.frames[0]

    def starts(self, step: int) -> bool:
        """The state starts fresh at ``step`` (the first frame of a sequence after the first)."""
        return bool(self.sequence) and step > 0 and step % self.sequence == 0

    def label(self, step: int):
        """The label of ``step`` (None: none)."""
        return None if self.labels is None else self.labels[step]

    def text(self) -> str:
        """The stream in words, as every result that ran on it says it."""
        what = self.name or "a stream"
        seq = f" in sequences of {self.sequence}" if self.sequence else ""
        labelled = "" if self.labels is None else f", {sum(x is not None for x in self.labels)} labelled"
        return f"{what}: {len(self.frames)} frames{seq}{labelled}"

    def __repr__(self) -> str:
        return f"<Stream {self.text()}>"


def _frame(frame, i: int) -> tuple:
    if isinstance(frame, torch.Tensor):
        frame = (frame,)
    if not isinstance(frame, (tuple, list)) or not frame:
        raise InspectorError(f"frame {i} of the stream is a {type(frame).__name__}: each frame is a tuple of the "
                             "model's inputs")
    for j, x in enumerate(frame):
        if isinstance(x, torch.Tensor) and x.is_floating_point() and not torch.isfinite(x).all():
            raise InspectorError(f"frame {i} of the stream: input {j} contains NaN or Inf; give finite inputs")
    return tuple(x.detach().clone() if isinstance(x, torch.Tensor) else x for x in frame)


def _shape(frame: tuple) -> tuple[str, ...]:
    return tuple(f"{tuple(x.shape)} {str(x.dtype).removeprefix('torch.')}" if isinstance(x, torch.Tensor)
                 else type(x).__name__ for x in frame)


def _said(shape: tuple[str, ...]) -> str:
    return "[" + ", ".join(shape) + "]"


def read_npy(path: str, name: str = "") -> Stream:
    """A stream from a ``.npy`` array (T, *input shape): frame i feeds ``array[i]`` as the model's one input. Read
    without pickles (a file from a stranger runs no code)."""
    import numpy as np  # lazy: only a stream from a file needs it

    try:
        array = np.load(path, allow_pickle=False)
    except (OSError, ValueError) as exc:
        raise InspectorError(f"cannot read {path} as a .npy array of frames: {exc}") from None
    if array.ndim < 2 or not np.issubdtype(array.dtype, np.number):
        raise InspectorError(f"{path} holds a {array.ndim}-d {array.dtype} array; a stream is a number array of frames "
                             "(T, *the model's input shape)")
    frames = tuple((torch.from_numpy(np.ascontiguousarray(a)).to(torch.float32),) for a in array)
    return Stream(frames, name=name or f"{path}, {len(frames)} frames")


def read_wav(path: str, frame: tuple[int, ...], rate: int, name: str = "") -> Stream:
    """A stream from a 16-bit PCM ``.wav`` (mono) at ``rate`` Hz, cut into frames shaped ``frame`` (the model's input,
    its last dimension the samples of one call), as floats in [-1, 1); the samples after the last whole frame are
    left out. A file at another rate is refused in one line (resample it first)."""
    import wave  # lazy, as numpy: only a stream from a file needs them

    import numpy as np  # lazy: only a stream from a file needs it

    try:
        with wave.open(path, "rb") as f:
            channels, width, found, count = f.getnchannels(), f.getsampwidth(), f.getframerate(), f.getnframes()
            data = f.readframes(count)
    except (OSError, EOFError, wave.Error) as exc:
        raise InspectorError(f"cannot read {path} as a .wav file: {exc}") from None
    if found != rate:
        raise InspectorError(f"{path} is at {found} Hz but the model listens at {rate} Hz: resample it first "
                             f"(e.g. sox {path} -r {rate} out.wav)")
    if channels != 1 or width != 2:
        raise InspectorError(f"{path} has {channels} channel(s) of {8 * width}-bit samples: give 16-bit mono PCM")
    samples = torch.from_numpy(np.frombuffer(data, dtype="<i2").astype(np.float32) / 32768)
    size = frame[-1]
    whole = len(samples) // size
    if whole == 0:
        raise InspectorError(f"{path} holds {len(samples)} samples, fewer than one frame of {size}")
    frames = tuple((chunk.reshape(frame),) for chunk in samples[: whole * size].split(size))
    return Stream(frames, name=name or f"{path}, {whole} frames of {size} samples at {rate} Hz")


def is_stream(value: Any) -> bool:
    """``value`` is a stream: a ``Stream``, or a list (not a tuple) whose items are input tuples (not tensors)."""
    if isinstance(value, Stream):
        return True
    return isinstance(value, list) and all(isinstance(f, (tuple, list)) for f in value)  # [] is an empty stream


def stream_of(value: Any, name: str = "") -> Stream:
    """``value`` as a ``Stream`` (a list of input tuples becomes one)."""
    if isinstance(value, Stream):
        return value
    if isinstance(value, list):
        return Stream(tuple(value), name=name)
    raise InspectorError(f"a stream is a list of input tuples (one per step), got a {type(value).__name__}")


def streams_of(values: Sequence) -> tuple[Stream, ...]:
    """Several streams (a calibration over several recordings)."""
    return tuple(stream_of(v) for v in values)


__all__ = ["MAX_FRAMES", "Stream", "is_stream", "read_npy", "read_wav", "stream_of", "streams_of"]
