"""Streams: a model called step after step on a new input each time (the next audio frame, the next image column).

A ``Stream`` is the inputs in order, one tuple per step, with the labels a task measurement needs (a true class per
frame, or None where a frame has none) and how long one sequence is (the model's state starts fresh every
``sequence`` frames: eight columns make one digit). It is data like any example input: wherever example inputs or a
calibration are taken, a stream is accepted too (a ``Stream``, or a plain list of input tuples), its length is the
default number of steps, and the keys of every stored result include it.
"""

from __future__ import annotations

import contextlib
import os
import stat
import struct
from dataclasses import dataclass, field
from typing import Any
from collections.abc import Sequence

import torch

from .._base.errors import InspectorError, first_line
from .._base.hashing import digest

MAX_FRAMES = 100_000  # a stream longer than this is refused (each frame is a run of the reference model)


@dataclass(frozen=True, kw_only=True)
class Stream:
    """Inputs in order, one tuple per step, and what a task measurement needs of each frame."""

    frames: tuple = field(kw_only=False)  # one input tuple per step, each shaped like the first (Stream(frames, ...))
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


# What a stream file is, when it is not a regular file: a FIFO would block the reader until a writer comes, a
# device (/dev/zero) never ends, so neither is ever read.
_KINDS = ((stat.S_ISFIFO, "a FIFO (a named pipe)"), (stat.S_ISCHR, "a character device"),
          (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"), (stat.S_ISDIR, "a directory"))
# Opened without waiting for a FIFO's writer (the kind is looked at on the descriptor itself, so a name swapped
# between a look and the open changes nothing); not inherited by a worker started meanwhile.
_READ = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0)


@contextlib.contextmanager
def _regular(path: str | os.PathLike, what: str):
    """``path`` opened for reading (binary) if it is a regular file; anything else (a FIFO, a device, a folder, a
    socket) is one line naming what it is, before a byte is read. Yields the file and its size."""
    text = os.fspath(path)
    try:
        fd = os.open(text, _READ)
    except FileNotFoundError:
        raise InspectorError(f"no such file: {text} (a stream is read from {what})") from None
    except OSError as exc:  # a FIFO with no reader may refuse O_NONBLOCK opens on some systems; a folder on others
        raise InspectorError(f"cannot open {text}: {exc.strerror or exc} (a stream is read from {what})") from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            kind = next((k for test, k in _KINDS if test(info.st_mode)), "not a regular file")
            raise InspectorError(f"{text} is {kind}, not a regular file: a stream is read from {what} on disk, "
                                 "never from a pipe or a device (which may block or never end); save it to a file "
                                 "first")
        if hasattr(os, "set_blocking"):
            os.set_blocking(fd, True)
        f = os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise
    with f:
        yield f, info.st_size


# float32 holds every integer up to 2**24 exactly, and no float beyond its largest finite value.
_EXACT_INT = 2 ** 24
_FLOAT32_MAX = float(torch.finfo(torch.float32).max)
_NPY = "a .npy array of frames"


def read_npy(path: str | os.PathLike, name: str = "") -> Stream:
    """A stream from a ``.npy`` array (T, *input shape): frame i feeds ``array[i]`` as the model's one input, as
    float32. Read without pickles (a file from a stranger runs no code), from a regular file only (a FIFO or a
    device is refused before it is read), its header checked before its data is read. A conversion that would lose
    information is refused in one line: complex numbers (their imaginary part), integers beyond float32's exact
    range (2**24), values beyond float32's range; float64 is rounded to float32 (the model's precision), and the
    stream's name says so."""
    import numpy as np  # lazy: only a stream from a file needs it

    text = os.fspath(path)
    with _regular(text, _NPY) as (f, size):
        shape, dtype, offset = _npy_header(np, f, text)
        _check_npy_dtype(np, dtype, text)
        if len(shape) < 2:
            raise InspectorError(f"{text} holds a {len(shape)}-d {dtype} array; a stream is a number array of frames "
                                 "(T, *the model's input shape)")
        if shape[0] > MAX_FRAMES:
            raise InspectorError(f"{text} holds {shape[0]:,} frames, more than {MAX_FRAMES:,}: give a shorter one")
        needed = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
        if size - offset < needed:
            raise InspectorError(f"{text} is cut short: its header says a {_said_array(shape, dtype)} array "
                                 f"({needed:,} bytes of data) but the file holds {max(size - offset, 0):,} bytes "
                                 "after its header")
        try:
            f.seek(0)
            array = np.load(f, allow_pickle=False)
        except (OSError, ValueError, EOFError) as exc:
            raise InspectorError(f"cannot read {text} as {_NPY}: {first_line(exc)}") from exc
    rounded = _check_npy_values(np, array, text)
    frames = tuple((torch.from_numpy(np.ascontiguousarray(a, dtype=np.float32)),) for a in array)
    said = f", {array.dtype} rounded to float32" if rounded else ""
    return Stream(frames=frames, name=name or f"{text}, {len(frames)} frames{said}")


def _npy_header(np, f, path: str) -> tuple[tuple[int, ...], Any, int]:
    """(shape, dtype, where the data starts) from a ``.npy`` file's header, its data not read."""
    fmt = np.lib.format
    try:
        version = fmt.read_magic(f)
        readers = {(1, 0): fmt.read_array_header_1_0, (2, 0): fmt.read_array_header_2_0}
        if version not in readers:  # 3.0 exists only for structured arrays with non-latin-1 field names
            raise InspectorError(f"{path} is a .npy file of format {version[0]}.{version[1]} (structured fields); a "
                                 "stream is a number array of frames (T, *the model's input shape)")
        shape, _, dtype = readers[version](f)
    except InspectorError:
        raise
    except (OSError, ValueError, EOFError) as exc:
        raise InspectorError(f"cannot read {path} as {_NPY}: {first_line(exc)}") from exc
    return tuple(int(d) for d in shape), dtype, f.tell()


def _check_npy_dtype(np, dtype, path: str) -> None:
    """A dtype a stream can hold: real numbers (complex ones would lose their imaginary part)."""
    if dtype.kind == "c":
        raise InspectorError(f"{path} holds complex numbers ({dtype}): the model takes real inputs, and converting "
                             "would drop every imaginary part; save the part you mean (a.real, a.imag or abs(a)) as "
                             "a real array")
    if dtype.kind not in "iuf" or dtype.fields is not None or dtype.subdtype is not None:
        raise InspectorError(f"{path} holds an array of {dtype}; a stream is a number array of frames (T, *the "
                             "model's input shape) of floats or integers")


def _check_npy_values(np, array, path: str) -> bool:
    """Refuse values float32 cannot hold (integers past 2**24, floats past its range); True when float64 (or wider)
    values are rounded to float32."""
    if array.size == 0:
        return False
    if array.dtype.kind in "iu" and array.dtype.itemsize > 2:
        low, high = int(array.min()), int(array.max())
        worst = max(abs(low), abs(high))
        if worst > _EXACT_INT:
            raise InspectorError(f"{path} holds {array.dtype} values up to {worst:,}: float32, the model's input, "
                                 f"holds integers exactly only up to {_EXACT_INT:,}, so converting would change "
                                 "them; scale them first (e.g. to [-1, 1])")
        return False
    if array.dtype.kind == "f" and array.dtype.itemsize > 4:
        finite = array[np.isfinite(array)]
        worst = float(np.abs(finite).max()) if finite.size else 0.0
        if worst > _FLOAT32_MAX:
            raise InspectorError(f"{path} holds {array.dtype} values up to {worst:.3g}, beyond float32's range "
                                 f"({_FLOAT32_MAX:.3g}): converting would make them infinite; scale them first")
        return True
    return False


def _said_array(shape: tuple[int, ...], dtype) -> str:
    return "x".join(map(str, shape)) + f" {dtype}"


@dataclass(frozen=True, kw_only=True)
class WavHeader:
    """What a ``.wav`` file's header says, checked against the file: 16-bit mono PCM and where its samples are."""

    path: str  # the file as named
    channels: int
    bits: int  # bits per sample
    rate: int  # samples per second
    offset: int  # where the samples start in the file
    size: int  # bytes of samples (the data chunk's size, which the file was checked to hold)

    @property
    def samples(self) -> int:
        return self.size // 2


_WAV = "a .wav recording (16-bit mono PCM)"
_PCM, _EXTENSIBLE = 1, 0xFFFE  # WAVE format tags: integer PCM, and the extensible header (its sub-format then says)
_TAGS = {3: "IEEE float", 6: "A-law", 7: "mu-law", 0x11: "IMA ADPCM", 0x55: "MPEG layer 3"}


def read_wav_header(path: str | os.PathLike) -> WavHeader:
    """The header of a ``.wav`` file, checked before any sample is read (what the CLI checks before it loads the
    model): a regular file (a FIFO or a device is refused unread), a RIFF/WAVE header that is all there, a ``fmt``
    chunk of 16-bit mono integer PCM, and a ``data`` chunk of whole samples the file really holds. Anything else
    is one line naming what is wrong."""
    text = os.fspath(path)
    with _regular(text, _WAV) as (f, size):
        return _wav_header(f, size, text)


def _wav_header(f, size: int, path: str) -> WavHeader:
    if size == 0:
        raise InspectorError(f"{path} is empty (0 bytes): a .wav file starts with a RIFF/WAVE header of 44 bytes "
                             "or more")
    head = f.read(12)
    if len(head) < 12 or head[:4] != b"RIFF" or head[8:12] != b"WAVE":
        found = "too short to be one" if len(head) < 12 else f"it starts with {head[:4]!r}"
        raise InspectorError(f"{path} is not a .wav file ({size:,} bytes; {found}): a .wav starts with 'RIFF' and "
                             "'WAVE'")
    fmt = None
    while True:
        at = f.tell()
        chunk = f.read(8)
        if len(chunk) < 8:
            missing = "fmt and data chunks" if fmt is None else "data chunk"
            raise InspectorError(f"{path} has no {missing} ({size:,} bytes, the header ends at byte {at:,}): the file "
                                 "is cut short or not a PCM recording")
        kind, length = chunk[:4], struct.unpack("<I", chunk[4:])[0]
        body = at + 8
        if kind == b"data":
            if fmt is None:
                raise InspectorError(f"{path} has its data chunk before its fmt chunk: the recording's format is "
                                     "unknown where its samples start")
            break
        if body + length > size:
            raise InspectorError(f"{path} is cut short ({size:,} bytes): its {kind.decode('latin-1')!r} chunk says "
                                 f"{length:,} bytes but only {max(size - body, 0):,} of them are in the file")
        if kind == b"fmt ":
            fmt = f.read(length)
        f.seek(body + length + (length & 1))  # chunks are padded to an even size
    if len(fmt) < 16:
        raise InspectorError(f"{path}'s fmt chunk is {len(fmt)} bytes, fewer than the 16 a PCM format needs")
    tag, channels, rate, _, _, bits = struct.unpack("<HHIIHH", fmt[:16])
    if tag == _EXTENSIBLE and len(fmt) >= 26:
        tag = struct.unpack("<H", fmt[24:26])[0]  # the sub-format GUID starts with the format tag
    if tag != _PCM:
        raise InspectorError(f"{path} is not integer PCM (format {_TAGS.get(tag, f'tag {tag}')}): give 16-bit mono "
                             f"PCM (e.g. sox {path} -b 16 -e signed-integer -c 1 out.wav)")
    if channels != 1 or bits != 16:
        raise InspectorError(f"{path} has {channels} channel(s) of {bits}-bit samples: give 16-bit mono PCM "
                             f"(e.g. sox {path} -b 16 -c 1 out.wav)")
    held = size - body
    if length > held:
        raise InspectorError(f"{path} is cut short: its header says {length:,} bytes of samples ({length // 2:,} "
                             f"samples) but the file holds {held:,} bytes after the header"
                             + (" (it ends in the middle of a sample)" if held % 2 else ""))
    if length % 2:
        raise InspectorError(f"{path}'s data chunk is {length:,} bytes: not whole 16-bit samples (the recording is "
                             "cut at an odd byte)")
    return WavHeader(path=path, channels=channels, bits=bits, rate=rate, offset=body, size=length)


def read_wav(path: str | os.PathLike, frame: tuple[int, ...], rate: int, name: str = "") -> Stream:
    """A stream from a 16-bit PCM ``.wav`` (mono) at ``rate`` Hz, cut into frames shaped ``frame`` (the model's input,
    its last dimension the samples of one call), as floats in [-1, 1); the samples after the last whole frame are
    left out. The header is checked first (``read_wav_header``: a FIFO, a device, a file cut short, a header that
    claims more samples than the file holds are each one line); a file at another rate is refused in one line
    (resample it first)."""
    import numpy as np  # lazy: only a stream from a file needs it

    text = os.fspath(path)
    with _regular(text, _WAV) as (f, size):
        header = _wav_header(f, size, text)
        if header.rate != rate:
            raise InspectorError(f"{text} is at {header.rate} Hz but the model listens at {rate} Hz: resample it "
                                 f"first (e.g. sox {text} -r {rate} out.wav)")
        per_frame = frame[-1]
        if header.samples // per_frame > MAX_FRAMES:
            raise InspectorError(f"{text} holds {header.samples // per_frame:,} frames of {per_frame} samples, more "
                                 f"than {MAX_FRAMES:,}: give a shorter recording")
        f.seek(header.offset)
        data = f.read(header.size)
    if len(data) != header.size:  # the file shrank since its size was read
        raise InspectorError(f"{text} changed while it was read: {len(data):,} of {header.size:,} bytes of samples")
    samples = torch.from_numpy(np.frombuffer(data, dtype="<i2").astype(np.float32) / 32768)
    whole = len(samples) // per_frame
    if whole == 0:
        raise InspectorError(f"{text} holds {len(samples)} samples, fewer than one frame of {per_frame}")
    frames = tuple((chunk.reshape(frame),) for chunk in samples[: whole * per_frame].split(per_frame))
    return Stream(frames=frames, name=name or f"{text}, {whole} frames of {per_frame} samples at {rate} Hz")


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
        return Stream(frames=tuple(value), name=name)
    raise InspectorError(f"a stream is a list of input tuples (one per step), got a {type(value).__name__}")


def streams_of(values: Sequence) -> tuple[Stream, ...]:
    """Several streams (a calibration over several recordings)."""
    return tuple(stream_of(v) for v in values)


__all__ = ["MAX_FRAMES", "Stream", "WavHeader", "is_stream", "read_npy", "read_wav", "read_wav_header", "stream_of",
           "streams_of"]
