"""automatic-speech-recognition: the tiny Whisper builds to a pass, and its bundle
(runtime/seq2seq.py Speech: numpy log-mel features, an encoder graph that also
returns the cross-attention cache, a decoder graph with a growing self-attention
cache) transcribes the shipped clips exactly as transformers' greedy `generate`
does on WhisperFeatureExtractor features.

CI cost: one tiny-whisper build (~11 s on 2 cores) plus the checks (~10 s).
"""

from __future__ import annotations

import json
import wave
from pathlib import Path
from typing import Any

import pytest
from conftest import ROOT, World, heavy, make_world

from builders.data import audio
from kiln import catalog
from kiln.plan import AUDIO_CLIPS, plan, toolchain

SPEECH = "automatic-speech-recognition"
TINY = {"feature_size": 16, "sampling_rate": 16000, "hop_length": 160, "n_fft": 400}


def test_the_shipped_clips_are_their_formulas(tmp_path: Path) -> None:
    """The committed WAVs are what builders/data/audio's formulas write (to one 16-bit
    step: float rounding may differ by an ulp across machines), and the plan
    validates on exactly those clips."""
    import numpy as np

    from runtime.audio import read_wav

    audio.write(tmp_path)
    for name in audio.CLIPS:
        want = read_wav(tmp_path / f"{name}.wav", 16000)
        got = read_wav(audio.path(name), 16000)
        assert got.shape == want.shape and np.abs(got - want).max() <= 1 / 32768
        assert 0.1 < np.abs(got).max() < 1.0  # audible, not clipped
    shipped = ROOT / "builders" / "data" / "audio"
    assert sorted(p.stem for p in shipped.glob("*.wav")) == list(AUDIO_CLIPS)
    lengths = {len(read_wav(audio.path(n), 16000)) for n in audio.CLIPS}
    assert min(lengths) < 16000 < max(lengths)  # padded and cut, both


def test_runtime_log_mel_is_whisper_feature_extractor() -> None:
    """runtime/audio.py equals transformers' numpy path bit for bit (the tiny model's
    settings and Whisper's own 128-bin 30 s ones), and its torch path, which the
    extractor's __call__ takes where torch is installed, to within 1e-4."""
    import numpy as np
    from transformers import WhisperFeatureExtractor

    from runtime.audio import log_mel, mel_filters, read_wav

    tiny = WhisperFeatureExtractor(feature_size=16, chunk_length=1)
    for name in audio.CLIPS:
        wav = read_wav(audio.path(name), 16000)
        clip = np.zeros(16000, np.float32)
        clip[: min(len(wav), 16000)] = wav[:16000]
        mine = log_mel(wav, {**TINY, "n_samples": 16000})
        assert mine.shape == (16, 100)
        assert np.array_equal(mine, tiny._np_extract_fbank_features(clip[None], "cpu")[0])
        torch_path = tiny(wav, sampling_rate=16000, return_tensors="np")["input_features"][0]
        assert np.abs(mine - torch_path).max() < 1e-4
    large = WhisperFeatureExtractor(feature_size=128)
    noise = np.random.default_rng(0).standard_normal(3 * 16000).astype(np.float32) * 0.1
    padded = np.zeros(480000, np.float32)
    padded[: len(noise)] = noise
    mine = log_mel(noise, {**TINY, "feature_size": 128, "n_samples": 480000})
    assert np.array_equal(mine, large._np_extract_fbank_features(padded[None], "cpu")[0])
    assert np.array_equal(mel_filters(400, 128, 16000), large.mel_filters)


def test_read_wav_refuses_what_it_would_misread(tmp_path: Path) -> None:
    from runtime import BundleError
    from runtime.audio import read_wav

    stereo = tmp_path / "stereo.wav"
    with wave.open(str(stereo), "wb") as fh:
        fh.setnchannels(2)
        fh.setsampwidth(2)
        fh.setframerate(16000)
        fh.writeframes(b"\0\0" * 200)
    with pytest.raises(BundleError, match=r"2 channel.*mono 16-bit PCM at 16000 Hz"):
        read_wav(stereo, 16000)
    with pytest.raises(BundleError, match="mono 16-bit PCM at 8000 Hz"):
        read_wav(audio.path("tone"), 8000)
    with pytest.raises(BundleError, match="not a readable WAV"):
        read_wav(tmp_path / "missing.wav", 16000)


def test_whisper_validates_on_the_shipped_clips() -> None:
    cat = catalog.load(catalog.Paths(ROOT))
    recipe = cat.recipe("tiny-whisper")
    # which builders and code (the speech paths, the clips) it hashes: tests/unit/test_toolchain.py
    p = plan("tiny-whisper", recipe, cat.prompts[recipe.validation.prompts], toolchain.current())
    for kind in ("reference", "validate"):
        options = p.step(kind).options
        assert options["audio"] == list(AUDIO_CLIPS) and "prompts" not in options


@pytest.fixture(scope="module")
def whisper_world(tmp_path_factory: pytest.TempPathFactory, hub: Path) -> World:
    world = make_world(tmp_path_factory.mktemp("whisper"), hub, ("tiny-whisper",))
    world.doit("build", check=True)
    return world


def _bundle(world: World) -> Any:
    import runtime
    from runtime.seq2seq import Speech

    found = [
        p.parent
        for p in world.store.rglob("bundle.json")
        if json.loads(p.read_text()).get("task") == SPEECH
    ]
    assert len(found) == 1
    bundle = runtime.open(found[0])
    assert isinstance(bundle, Speech)
    return bundle


def _transformers(hub: Path) -> tuple[Any, Any]:
    import torch
    from transformers import WhisperFeatureExtractor, WhisperForConditionalGeneration

    import tinyhub

    folder = tinyhub.repo_dir(hub, "kiln-tiny/whisper")
    ckpt = folder / "snapshots" / (folder / "refs" / "main").read_text()
    model = WhisperForConditionalGeneration.from_pretrained(
        ckpt, dtype=torch.float32, attn_implementation="eager"
    ).eval()
    return model, WhisperFeatureExtractor.from_pretrained(ckpt)


@heavy
def test_whisper_builds_and_passes_its_gates(whisper_world: World) -> None:
    evidence = whisper_world.manifest("tiny-whisper")["evidence"][-1]
    assert evidence["verdict"] == "pass", evidence
    metrics = evidence["metrics"]
    assert metrics["token_match_rate"] == 1.0 and metrics["unexplained_divergences"] == 0
    assert metrics["max_abs_logit_diff"] < 1e-4 and metrics["min_logit_cosine"] > 0.99999
    assert metrics["max_abs_feature_diff"] < 1e-4
    gated = {g["metric"] for g in evidence["gates"]}
    assert {"max_abs_feature_diff", "max_abs_logit_diff", "unexplained_divergences"} <= gated
    beams = evidence["features"]["beam_search"]  # runtime/beams.py on audio, as transformers'
    assert beams["proved"] and beams["metrics"]["equal"] == beams["metrics"]["inputs"] == 2


@heavy
def test_whisper_runtime_transcribes_as_transformers_generate(
    whisper_world: World, hub: Path
) -> None:
    import torch

    from runtime.audio import read_wav

    bundle = _bundle(whisper_world)
    model, extractor = _transformers(hub)
    want = []
    for name in AUDIO_CLIPS:  # each clip alone, the extractor's own features
        feats = extractor(read_wav(audio.path(name), 16000), sampling_rate=16000)
        ids = torch.tensor(feats["input_features"])
        with torch.no_grad():
            out = model.generate(
                ids, max_new_tokens=16, do_sample=False, decoder_start_token_id=2, eos_token_id=2
            )
        want.append(out[0].tolist())
    got = bundle.generate([bundle.read(audio.path(n)) for n in AUDIO_CLIPS], 16).tokens
    assert got == want  # one batch of 4, features from the runtime's numpy log-mel
    # Non-trivial: tokens depend on the audio (random weights still hear the difference).
    assert all(len(t) > 3 for t in want) and len({tuple(t) for t in want}) == len(want)
    assert [bundle.generate([bundle.read(audio.path(n))], 16).tokens[0] for n in AUDIO_CLIPS] == got


@heavy
def test_whisper_cross_cache_is_computed_once_and_exact(whisper_world: World, hub: Path) -> None:
    """The encoder graph returns transformers' encoder states and every layer's
    cross-attention keys and values; the decoder graph never sees the encoder states,
    and stepping it with its own growing cache gives the teacher-forced logits."""
    import numpy as np
    import torch

    bundle = _bundle(whisper_world)
    model, _ = _transformers(hub)
    decoder_inputs = {i.name for i in bundle.sessions["decoder"].get_inputs()}
    assert "encoder_hidden" not in decoder_inputs
    assert {e["name"] for e in bundle.cross} <= decoder_inputs
    feats = bundle.read(audio.path("vowel"))
    hidden, *cross = bundle.sessions["encoder"].run(None, {"input_features": feats[None]})
    with torch.no_grad():
        states = model.get_encoder()(torch.tensor(feats[None])).last_hidden_state
        out = model(encoder_outputs=(states,), decoder_input_ids=torch.tensor([[2]]))
    assert np.abs(hidden - states.numpy()).max() < 1e-4
    layers = out.past_key_values.cross_attention_cache.layers
    theirs = [t.numpy() for layer in layers for t in (layer.keys, layer.values)]
    assert len(cross) == len(theirs) == 2 * len(model.get_decoder().layers)
    for mine, ref in zip(cross, theirs, strict=True):
        assert mine.shape == ref.shape and np.abs(mine - ref).max() < 1e-4
    target = bundle.generate([feats], 8).tokens[0]
    full = bundle.logits(feats, target)
    context, past = bundle._encoder([feats]), bundle._empty(1)
    for j, tok in enumerate([bundle.start, *target]):
        step, past = bundle._decode(np.asarray([[tok]], np.int64), context, past)
        assert np.abs(step[0, -1] - full[j]).max() < 1e-4
    assert past[0].shape[2] == len(target) + 1


@heavy
def test_whisper_runtime_refuses_what_it_cannot_serve(whisper_world: World) -> None:
    import numpy as np

    from runtime import BundleError

    bundle = _bundle(whisper_world)
    feats = bundle.read(audio.path("tone"))
    with pytest.raises(BundleError, match="serves 1 to 4"):
        bundle.generate([feats] * 5, 4)
    with pytest.raises(BundleError, match=r"features of shape \(16, 50\)"):
        bundle.generate([np.zeros((16, 50), np.float32)], 4)


@heavy
def test_doit_run_transcribes_audio(whisper_world: World) -> None:
    bundle = _bundle(whisper_world)
    tone = audio.path("tone")
    out = whisper_world.doit("run", "recipe=tiny-whisper", f"audio={tone}", check=True)
    assert f"tone.wav: {bundle.transcribe([tone], 32)[0]!r}" in out.stdout
    folder = whisper_world.doit("run", "recipe=tiny-whisper", f"audio={tone.parent}", check=True)
    assert all(f"{n}.wav: " in folder.stdout for n in AUDIO_CLIPS)
    missing = whisper_world.doit("run", "recipe=tiny-whisper", "prompt=Hello")
    assert missing.returncode != 0 and "no audio" in missing.stdout + missing.stderr
