"""Make the speech clip of ``sample:silero_vad`` (sample_models/data/speech.wav) with espeak-ng.

Two short English sentences spoken by espeak-ng's ``en-us`` voice, resampled to 16 kHz, with quiet
stretches before, between and after them, and seeded white noise under the whole clip: the voice
activity detector says "no speech" in the gaps and "speech" in the sentences, so its decision
changes across the clip's 512-sample frames. The same espeak-ng gives the same file byte for byte.

    apt-get install -y espeak-ng   # Debian's package; the clip is committed, so CI needs none
    .venv/bin/python scripts/make_speech.py
"""

from __future__ import annotations

import io
import shutil
import subprocess
import sys
import wave
from pathlib import Path

import numpy as np
from scipy.signal import resample_poly

OUT = Path(__file__).resolve().parent.parent / "sample_models" / "data" / "speech.wav"
RATE = 16_000
SENTENCES = ("Fold the scale.", "Then keep the state.")
VOICE, WORDS_PER_MINUTE = "en-us", 160
# Seconds of noise only: before the first sentence, between the two, after the second.
GAPS = (0.5, 0.7, 0.5)
NOISE_SEED, NOISE_RMS = 53, 0.004  # white noise about 48 dB below full scale
PEAK = 0.5  # the sentences' peak, in full scale
FRAME = 512  # samples per call of the 16 kHz VAD


def speak(text: str) -> np.ndarray:
    """espeak-ng's waveform of ``text`` at 16 kHz, float in [-1, 1], its own leading and trailing silence cut."""
    wav = subprocess.run(["espeak-ng", "-v", VOICE, "-s", str(WORDS_PER_MINUTE), "--stdout", text],
                         check=True, capture_output=True).stdout
    with wave.open(io.BytesIO(wav)) as f:
        rate = f.getframerate()
        # espeak-ng streams to stdout: its header's length is a placeholder, so read whatever frames follow it
        samples = np.frombuffer(f.readframes(sys.maxsize), dtype="<i2").astype(np.float64) / 32768
    samples = resample_poly(samples, RATE, rate)
    loud = np.flatnonzero(np.abs(samples) > 0.01)
    return samples[loud[0]:loud[-1] + 1]


def clip() -> np.ndarray:
    """The whole clip: gap, sentence, gap, sentence, gap, with noise under all of it; int16."""
    spoken = [speak(text) for text in SENTENCES]
    peak = max(np.abs(s).max() for s in spoken)
    parts = []
    for gap, sentence in zip(GAPS, [*spoken, None]):
        parts.append(np.zeros(int(gap * RATE)))
        if sentence is not None:
            parts.append(sentence * (PEAK / peak))
    audio = np.concatenate(parts)
    audio = np.pad(audio, (0, -len(audio) % FRAME))  # whole frames: the last gap grows by under one frame
    audio += np.random.default_rng(NOISE_SEED).normal(0.0, NOISE_RMS, audio.shape)
    return np.round(np.clip(audio, -1, 1 - 2**-15) * 32768).astype("<i2")


def main() -> None:
    if shutil.which("espeak-ng") is None:
        sys.exit("make_speech.py needs espeak-ng: apt-get install -y espeak-ng")
    audio = clip()
    OUT.parent.mkdir(parents=True, exist_ok=True)
    with wave.open(str(OUT), "wb") as f:
        f.setnchannels(1)
        f.setsampwidth(2)
        f.setframerate(RATE)
        f.writeframes(audio.tobytes())
    version = subprocess.run(["espeak-ng", "--version"], check=True, capture_output=True, text=True).stdout
    version = version.split("Data at")[0].strip()
    print(f"wrote {OUT} ({len(audio) / RATE:.2f} s, {len(audio) // FRAME} frames of {FRAME} samples) with {version}")


if __name__ == "__main__":
    main()
