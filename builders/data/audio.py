"""The audio clips automatic-speech-recognition recipes validate on.

Four short mono 16-bit PCM WAV files at 16 kHz, synthesized by the numpy formulas
below (no recording, no licence question), and committed next to this file so a
reader can play them and `doit run` can transcribe them. Their bytes are hashed into
the code digest of every step whose builder imports this module (kiln.plan.toolchain:
a module's data is the folder of its name), so changing a clip rebuilds those steps.
tests/builds/test_speech.py regenerates them and compares.

`python -m builders.data.audio` rewrites the files. Lengths differ (0.5 s to 1.25 s), so
padding to the feature extractor's chunk and cutting a longer clip are both used.
"""

from __future__ import annotations

import wave
from collections.abc import Callable
from pathlib import Path

import numpy as np

HERE = Path(__file__).parent / "audio"
RATE = 16000


def _fade(x: np.ndarray, ms: float = 20.0) -> np.ndarray:
    """Linear 20 ms fade in and out, so a clip starts and ends at silence."""
    n = int(RATE * ms / 1000)
    ramp = np.linspace(0.0, 1.0, n)
    x[:n] *= ramp
    x[-n:] *= ramp[::-1]
    return x


def tone() -> np.ndarray:
    """0.6 s of A4: 0.5 sin(2 pi 440 t)."""
    t = np.arange(int(0.6 * RATE)) / RATE
    return _fade(0.5 * np.sin(2 * np.pi * 440.0 * t))


def chirp() -> np.ndarray:
    """1.25 s linear chirp from 200 Hz to 3 kHz: 0.4 sin(2 pi (200 t + 1120 t^2))
    (instantaneous frequency 200 + 2240 t Hz). Longer than the tiny model's 1 s chunk."""
    t = np.arange(int(1.25 * RATE)) / RATE
    return _fade(0.4 * np.sin(2 * np.pi * (200.0 * t + 1120.0 * t**2)))


def vowel() -> np.ndarray:
    """0.9 s of a synthetic 'ah': harmonics k = 1..30 of 120 Hz, amplitude 1/k, times
    formant bumps at 700, 1220 and 2600 Hz (exp(-((k f0 - F) / 150)^2)), scaled to
    peak 0.6, under a 4 Hz, 10% amplitude vibrato."""
    t = np.arange(int(0.9 * RATE)) / RATE
    x = np.zeros_like(t)
    for k in range(1, 31):
        f = 120.0 * k
        gain = sum(np.exp(-(((f - formant) / 150.0) ** 2)) for formant in (700.0, 1220.0, 2600.0))
        x += (gain + 0.05) / k * np.sin(2 * np.pi * f * t)
    x *= 1.0 + 0.1 * np.sin(2 * np.pi * 4.0 * t)
    return _fade(0.6 * x / np.abs(x).max())


def noise() -> np.ndarray:
    """0.5 s of white noise from PCG64(seed 9), 0.3 * (uniform[0, 1) * 2 - 1)."""
    rng = np.random.Generator(np.random.PCG64(9))
    return _fade(0.3 * (rng.random(int(0.5 * RATE)) * 2.0 - 1.0))


CLIPS: dict[str, Callable[[], np.ndarray]] = {
    "chirp": chirp,
    "noise": noise,
    "tone": tone,
    "vowel": vowel,
}


def pcm16(x: np.ndarray) -> bytes:
    """Round to 16-bit PCM, little-endian."""
    return np.clip(np.round(x * 32767.0), -32768, 32767).astype("<i2").tobytes()


def write(folder: Path = HERE) -> list[Path]:
    paths = []
    for name, make in CLIPS.items():
        path = folder / f"{name}.wav"
        with wave.open(str(path), "wb") as fh:
            fh.setnchannels(1)
            fh.setsampwidth(2)
            fh.setframerate(RATE)
            fh.writeframes(pcm16(make()))
        paths.append(path)
    return paths


def path(name: str) -> Path:
    return HERE / f"{name}.wav"


if __name__ == "__main__":  # `python -m builders.data.audio`: rewrite the committed clips
    for written in write():
        print(written)
