"""Audio input for speech bundles: 16-bit PCM WAV reading and Whisper's log-mel
features, in numpy only (the runtime imports neither transformers nor torch).

`log_mel` computes what transformers' WhisperFeatureExtractor computes on its numpy
path (feature_extraction_whisper.py `_np_extract_fbank_features` and
audio_utils.py `spectrogram`, `mel_filter_bank`, transformers 5.24): pad or cut
the waveform to `n_samples`, centred frames with reflect padding, a periodic Hann
window of `n_fft`, the power spectrum in float64, a Slaney-normalized Slaney-scale
mel bank from 0 to 8 kHz, log10 floored at 1e-10, the last frame dropped, clamped to
8 below the maximum and scaled by (x + 4) / 4. tests/builds/test_speech.py checks it is
bit-identical to that path. Where torch is installed the extractor's __call__ takes
its torch STFT instead (feature_extraction_whisper.py, `__call__`), which differs by
up to ~2e-5 near the clamp; that is what the reference feeds the model, and
validate measures the difference (max_abs_feature_diff).
"""

from __future__ import annotations

import wave
from pathlib import Path
from typing import Any

import numpy as np

from runtime.format import BundleError

# The preprocessor fields the features depend on (a checkpoint's preprocessor_config.json).
FIELDS = ("feature_size", "sampling_rate", "hop_length", "n_fft", "n_samples")


def read_wav(path: Path | str, sampling_rate: int) -> np.ndarray:
    """Mono 16-bit PCM at `sampling_rate`, as float32 in [-1, 1). No resampling:
    a file at another rate is refused, never silently misread."""
    try:
        with wave.open(str(path), "rb") as fh:
            channels, width, rate = fh.getnchannels(), fh.getsampwidth(), fh.getframerate()
            data = fh.readframes(fh.getnframes())
    except (OSError, EOFError, wave.Error) as exc:
        raise BundleError(f"{path}: not a readable WAV file ({exc})") from None
    if channels != 1 or width != 2 or rate != sampling_rate:
        raise BundleError(
            f"{path}: {channels} channel(s), {8 * width}-bit, {rate} Hz; this bundle reads "
            f"mono 16-bit PCM at {sampling_rate} Hz (convert it, e.g. "
            f"ffmpeg -i IN -ac 1 -ar {sampling_rate} -sample_fmt s16 OUT.wav)"
        )
    return (np.frombuffer(data, "<i2").astype(np.float32) / 32768.0).astype(np.float32)


def _hz_to_mel(freq: np.ndarray) -> np.ndarray:
    """Slaney's scale: linear below 1 kHz, logarithmic above."""
    mels = 3.0 * freq / 200.0
    high = freq >= 1000.0
    mels[high] = 15.0 + np.log(freq[high] / 1000.0) * (27.0 / np.log(6.4))
    return mels


def _mel_to_hz(mels: np.ndarray) -> np.ndarray:
    freq = 200.0 * mels / 3.0
    high = mels >= 15.0
    freq[high] = 1000.0 * np.exp((np.log(6.4) / 27.0) * (mels[high] - 15.0))
    return freq


def mel_filters(n_fft: int, feature_size: int, sampling_rate: int) -> np.ndarray:
    """[1 + n_fft // 2, feature_size] triangular Slaney-normalized filters, 0 to 8 kHz."""
    edges = np.array([0.0, 8000.0])
    mel_min, mel_max = _hz_to_mel(edges)
    freqs = _mel_to_hz(np.linspace(mel_min, mel_max, feature_size + 2))
    fft_freqs = np.linspace(0, sampling_rate // 2, 1 + n_fft // 2)
    slopes = freqs[None, :] - fft_freqs[:, None]
    widths = np.diff(freqs)
    down, up = -slopes[:, :-2] / widths[:-1], slopes[:, 2:] / widths[1:]
    bank = np.maximum(np.zeros(1), np.minimum(down, up))
    return bank * (2.0 / (freqs[2 : feature_size + 2] - freqs[:feature_size]))[None, :]


def log_mel(waveform: np.ndarray, settings: dict[str, Any]) -> np.ndarray:
    """[feature_size, n_samples // hop_length] float32 log-mel features of one waveform."""
    n_fft, hop, n_samples = settings["n_fft"], settings["hop_length"], settings["n_samples"]
    audio = np.zeros(n_samples, np.float32)
    clip = np.asarray(waveform, np.float32)[:n_samples]
    audio[: len(clip)] = clip
    padded = np.pad(audio, n_fft // 2, mode="reflect").astype(np.float64)
    count = 1 + (len(padded) - n_fft) // hop
    window = np.hanning(n_fft + 1)[:-1]  # periodic
    # Frame by frame, complex64 spectrum, float64 power: transformers' numpy path
    # step for step, so the features are bit-identical to it (tests/builds/test_speech.py).
    spectrum = np.empty((count, 1 + n_fft // 2), np.complex64)
    for i in range(count):
        spectrum[i] = np.fft.rfft(padded[i * hop : i * hop + n_fft] * window)
    power = np.abs(spectrum, dtype=np.float64) ** 2
    bank = mel_filters(n_fft, settings["feature_size"], settings["sampling_rate"])
    mel = np.maximum(1e-10, bank.T @ power.T)
    spec = np.log10(mel).astype(np.float32)[:, :-1]
    spec = np.maximum(spec, spec.max() - 8.0)
    return ((spec + 4.0) / 4.0).astype(np.float32)
