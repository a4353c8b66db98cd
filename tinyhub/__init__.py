"""Embedded tiny checkpoints, written into a local Hugging Face hub mirror.

No model hub is reachable from this project's machines, so kiln makes its default
checkpoints itself. A tiny checkpoint is a real transformers config whose weights
come from a seeded PCG64 stream, turned into floats by our own arithmetic (not by
numpy's distribution code, whose algorithms may change between releases), so the
weights are bit-identical on every machine and across library versions.

The mirror uses the hub's cache layout (documented in huggingface_hub's
``file_download.py``), so ``snapshot_download(repo, revision=sha,
local_files_only=True)`` and ``from_pretrained`` resolve from it unchanged:

    models--kiln-tiny--llama/
      blobs/<sha256>                       file contents
      refs/main                            40-hex revision, no newline
      snapshots/<revision>/<file> -> ../../blobs/<sha256>

A revision is the sha1 of the sorted ``<sha256>  <path>`` listing of its files:
content-addressed, like a git commit id, and 40 hex like one.

This package imports numpy, safetensors and (for parameter shapes) transformers
inside its functions; the core (kiln/) never imports it.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from pathlib import Path
from typing import Any

from tinyhub.specs import PREPROCESSORS, SENTENCE_MODULES
from tinyhub.specs import breadth_specs as _breadth_specs
from tinyhub.specs import task_specs as _task_specs
from tinyhub.vlm import vlm_specs as _vlm_specs

HERE = Path(__file__).parent
TOKENIZER_FILE = HERE / "tokenizer.json"
GENERATOR_VERSION = 1

PAD, BOS, EOS = 0, 1, 2
_COMMON: dict[str, Any] = {
    "vocab_size": 512,
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "max_position_embeddings": 512,
    "rms_norm_eps": 1e-6,
    "tie_word_embeddings": False,
    "bos_token_id": BOS,
    "eos_token_id": EOS,
    "pad_token_id": PAD,
    "torch_dtype": "float32",
}

# repo id -> config.json. Adding an architecture is adding an entry here (the
# breadth catalog's entries live in tinyhub/specs.py).
SPECS: dict[str, dict[str, Any]] = {
    "kiln-tiny/llama": {
        **_COMMON,
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "rope_theta": 10000.0,
    },
    "kiln-tiny/qwen3": {
        **_COMMON,
        "architectures": ["Qwen3ForCausalLM"],
        "model_type": "qwen3",
        "head_dim": 16,
        "rope_theta": 1000000.0,
    },
}

SPECS.update(_breadth_specs(_COMMON))
SPECS.update(_task_specs(_COMMON))
# Vision-language models: config, processor and chat template files (tinyhub/vlm.py).
VLMS = _vlm_specs(_COMMON)
SPECS.update(VLMS)


# The tiny Llama with one layer, its tensors drawn from the target's seed stream
# (tinyhub/drafters.py says why), and a DeepseekV3 with an MTP module.
SPECS["kiln-tiny/llama-draft"] = {**SPECS["kiln-tiny/llama"], "num_hidden_layers": 1}
SEED_FROM = {"kiln-tiny/llama-draft": "kiln-tiny/llama"}

# Checkpoints that are not plain causal LMs: an adapter and drafters (tinyhub/drafters.py).
COMPANIONS = (
    "kiln-tiny/gemma4-assistant",
    "kiln-tiny/qwen3-dflash",
    "kiln-tiny/qwen3-dspark",
    "kiln-tiny/qwen3-eagle3",
    "kiln-tiny/qwen3-lora",
)


def _add_deepseek() -> None:
    from tinyhub.drafters import DEEPSEEK_V3

    SPECS["kiln-tiny/deepseek-v3-mtp"] = DEEPSEEK_V3


_add_deepseek()


def is_tiny(repo: str) -> bool:
    return repo in SPECS or repo in COMPANIONS


STAMP = "kiln-tiny.stamp"


def generator_digest() -> str:
    """Changes whenever the generated mirror could: our code, the shipped tokenizer,
    or transformers (which names the parameters)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        transformers_version = version("transformers")
    except PackageNotFoundError:
        transformers_version = "absent"
    h = hashlib.sha256(transformers_version.encode())
    for path in [*sorted(HERE.glob("*.py")), TOKENIZER_FILE]:
        h.update(path.name.encode() + b"\0" + path.read_bytes())
    return h.hexdigest()


# Values made per pass of the generator: the arithmetic's temporaries stay in cache
# (14 ns a value on the 2-core CI host, against 120 ns for one pass over a 50M-value
# tensor), and an 8B-parameter checkpoint is generated in slices, in parallel
# (bench/shape.py).
CHUNK = 1 << 20


def _bits(seed_text: str) -> Any:
    import numpy as np

    seed = int.from_bytes(hashlib.sha256(seed_text.encode()).digest()[:16], "little")
    return np.random.PCG64(seed)


def tensor_values(repo: str, name: str, shape: tuple[int, ...]) -> Any:
    """The float32 values of one parameter, a pure function of (repo, name, shape)."""
    count = 1
    for dim in shape:
        count *= dim
    return tensor_slice(repo, name, shape, 0, count).reshape(shape)


def tensor_slice(repo: str, name: str, shape: tuple[int, ...], start: int, count: int) -> Any:
    """Values `start` to `start + count` of tensor_values(repo, name, shape) flattened,
    made without the rest: the stream is advanced to `start` (PCG64.advance)."""
    import numpy as np

    bits = _bits(f"kiln-tiny/v{GENERATOR_VERSION}/{repo}/{name}")
    bits.advance(start)
    if len(shape) == 1:
        # Norm scales hover around one; biases around zero.
        center, factor = (1.0 if "norm" in name else 0.0), 0.1
    else:
        # Uniform with std 1/sqrt(fan_in), so activations keep their scale through
        # the layers and the logits are peaked enough for a stable greedy decode.
        # Embeddings get std 1.
        fan_in = 1 if "embed" in name else shape[-1]
        center, factor = 0.0, (3.0 / fan_in) ** 0.5
    out = np.empty(count, "<f4")
    for at in range(0, count, CHUNK):
        # Only the raw 64-bit outputs of PCG64 are used; the mapping to floats is
        # ours: (raw >> 11) / 2**53 in [0, 1), then 2u - 1 in [-1, 1), scaled.
        raw = bits.random_raw(min(CHUNK, count - at))
        raw >>= np.uint64(11)
        u = raw.astype(np.float64)
        u *= 1.0 / (1 << 53)
        u *= 2.0
        u -= 1.0
        u *= factor
        u += center
        out[at : at + len(u)] = u
    return out


def parameter_shapes(config: dict[str, Any]) -> dict[str, tuple[int, ...]]:
    """Names and shapes of the checkpoint's tensors, read from transformers on meta."""
    import torch
    import transformers
    from transformers import AutoConfig

    cfg = AutoConfig.for_model(**{k: v for k, v in config.items() if k != "architectures"})
    # The architecture's own class, not an Auto class: the same config serves a
    # causal LM, a classifier or an encoder-decoder depending on its head.
    cls = getattr(transformers, config["architectures"][0])
    with torch.device("meta"):
        model = cls(cfg)
    return {name: tuple(t.shape) for name, t in model.state_dict().items()}


# Every tiny checkpoint's generation config (a VLM adds its end-of-turn ids).
GENERATION = {"bos_token_id": BOS, "eos_token_id": EOS, "pad_token_id": PAD, "do_sample": False}


def tokenizer_config(max_length: int) -> dict[str, Any]:
    """The shipped tokenizer's tokenizer_config.json for a model of `max_length`."""
    return {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "bos_token": "<|bos|>",
        "eos_token": "<|eos|>",
        "pad_token": "<|pad|>",
        "model_max_length": max_length,
        "clean_up_tokenization_spaces": False,
    }


def text_files(config: dict[str, Any]) -> dict[str, bytes]:
    """A tiny checkpoint's files besides its weights: config, generation config and the
    shipped tokenizer (the bench's seeded checkpoints use them too)."""
    return {
        "config.json": _json(config),
        "generation_config.json": _json(GENERATION),
        "tokenizer.json": tokenizer_bytes(config["model_type"]),
        "tokenizer_config.json": _json(tokenizer_config(config["max_position_embeddings"])),
    }


def checkpoint_files(repo: str) -> dict[str, bytes]:
    """Every file of the tiny checkpoint `repo`, by path."""
    from safetensors.numpy import save

    from tinyhub import drafters, vlm

    if repo in COMPANIONS:
        return drafters.companion_files(repo)
    config = SPECS[repo]
    shapes = parameter_shapes(config)
    if config.get("num_nextn_predict_layers"):
        shapes.update(drafters.mtp_shapes(config))
    seed = SEED_FROM.get(repo, repo)
    tensors = {name: tensor_values(seed, name, shape) for name, shape in sorted(shapes.items())}
    weights = save(tensors, metadata={"format": "pt"})
    if repo in VLMS:
        return {"model.safetensors": weights, **vlm.processor_files(config)}
    files = {
        "model.safetensors": weights,
        **text_files(config),
        **{path: _json(obj) for path, obj in SENTENCE_MODULES.get(repo, {}).items()},
    }
    if repo in PREPROCESSORS:  # audio models: the feature extractor's settings
        files["preprocessor_config.json"] = _json(PREPROCESSORS[repo])
    return files


# Pre-tokenizers a model type's real tokenizer.json carries and transformers imposes
# by model type whatever the file says (transformers 5.24 loads Qwen2Tokenizer for
# qwen2 and Qwen3_5Tokenizer for qwen3.5, which split every digit). The tiny
# checkpoints ship the same, so their file and transformers agree, as they do for
# the real models (tests/builds/test_tinyhub.py checks every tiny checkpoint).
QWEN2_SPLIT = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}"
    r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)
QWEN3_5_SPLIT = (  # letters may carry combining marks (\p{M})
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}"
    r"| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)


def _split_then_bytes(pattern: str) -> dict[str, Any]:
    return {
        "type": "Sequence",
        "pretokenizers": [
            {
                "type": "Split",
                "pattern": {"Regex": pattern},
                "behavior": "Isolated",
                "invert": False,
            },
            {
                "type": "ByteLevel",
                "add_prefix_space": False,
                "trim_offsets": True,
                "use_regex": False,
            },
        ],
    }


PRE_TOKENIZERS: dict[str, dict[str, Any]] = {
    "qwen2": _split_then_bytes(QWEN2_SPLIT),
    "qwen3_5_moe_text": _split_then_bytes(QWEN3_5_SPLIT),
}


def tokenizer_bytes(model_type: str) -> bytes:
    """The shipped tokenizer, with the model type's own pre-tokenizer where it has one
    (other types get the shipped file's bytes unchanged)."""
    raw = TOKENIZER_FILE.read_bytes()
    if model_type not in PRE_TOKENIZERS:
        return raw
    data = json.loads(raw)
    data["pre_tokenizer"] = PRE_TOKENIZERS[model_type]
    return json.dumps(data, ensure_ascii=False, indent=2).encode()


def json_bytes(obj: Any) -> bytes:
    return _json(obj)


def _json(obj: Any) -> bytes:
    return (json.dumps(obj, sort_keys=True, indent=2) + "\n").encode()


def revision_of(files: dict[str, bytes]) -> str:
    listing = "".join(
        f"{hashlib.sha256(data).hexdigest()}  {path}\n" for path, data in sorted(files.items())
    )
    return hashlib.sha1(listing.encode()).hexdigest()


def repo_dir(cache_dir: Path, repo: str) -> Path:
    return cache_dir / ("models--" + repo.replace("/", "--"))


def write_repo(cache_dir: Path, repo: str) -> str:
    """Write `repo` into the hub cache at `cache_dir`; returns its revision."""
    files = checkpoint_files(repo)
    revision = revision_of(files)
    root = repo_dir(cache_dir, repo)
    snapshot = root / "snapshots" / revision
    for path, data in sorted(files.items()):
        digest = hashlib.sha256(data).hexdigest()
        blob = root / "blobs" / digest
        if not blob.exists():
            _atomic_write(blob, data)
        link = snapshot / path
        link.parent.mkdir(parents=True, exist_ok=True)
        if not link.is_symlink():
            link.symlink_to(os.path.relpath(blob, link.parent))
    _atomic_write(root / "refs" / "main", revision.encode())
    return revision


def _atomic_write(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".incomplete")
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def mirror_is_current(cache_dir: Path) -> bool:
    stamp = cache_dir / STAMP
    return stamp.is_file() and stamp.read_text() == generator_digest()


def write_mirror(cache_dir: Path) -> dict[str, str]:
    """Write every tiny checkpoint the installed transformers can describe, then the
    stamp; returns {repo: revision}. An older transformers (a GPU host's image, say)
    rejects configs of architectures it predates; those repos are left out, with a
    line saying so, and a recipe on them then fails at fetch with the missing revision."""
    made = {}
    for repo in sorted([*SPECS, *COMPANIONS]):
        try:
            made[repo] = write_repo(cache_dir, repo)
        except Exception as exc:  # the config class refuses it, or is unknown
            print(f"tinyhub: {repo} left out: this transformers cannot build it ({exc})")
    _atomic_write(cache_dir / STAMP, generator_digest().encode())
    return made
