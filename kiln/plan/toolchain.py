"""What a step's output depends on besides its options: library versions and our code.

Versions come from package metadata, so nothing heavy is imported. Code versions are
the sha256 of the source files a step runs, so editing a builder invalidates exactly
the steps it builds.
"""

from __future__ import annotations

import hashlib
import platform
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cache
from importlib import metadata
from pathlib import Path
from typing import Any

from kiln.paths import ROOT

# Libraries whose version can change a step's output, by step kind.
LIBRARIES: dict[str, tuple[str, ...]] = {
    "fetch": (),
    "reference": ("torch", "transformers", "tokenizers", "safetensors", "peft"),
    "quantize": ("nvidia-modelopt", "torch", "transformers", "safetensors"),
    "export": ("torch", "transformers", "onnx", "safetensors", "peft"),
    "onnx": ("onnx", "onnxscript"),
    "engine": ("onnxruntime",),
    "drafter": ("torch", "transformers", "onnx", "onnxruntime", "safetensors"),
    "bundle": (),
    "validate": ("onnxruntime", "numpy", "tokenizers"),
}

# What an engine built by a backend other than onnxruntime also depends on. Added
# only for that backend, so onnxruntime steps keep their keys.
BACKEND_LIBRARIES: dict[str, tuple[str, ...]] = {
    "onnxruntime": (),
    "aoti": ("torch",),
    "tensorrt": ("tensorrt",),
}

_TEXT_RUNTIME = (
    "runtime/__init__.py",
    "runtime/backends.py",
    "runtime/causal_lm.py",
    "runtime/drafters.py",
    "runtime/ngram.py",
    "runtime/sampling.py",
    "runtime/speculative.py",
)

# Source files each step kind runs, relative to the repo root. A directory means
# every .py file under it.
CODE: dict[str, tuple[str, ...]] = {
    "fetch": ("builders/fetch.py",),
    "reference": (
        "builders/causal_lm/reference.py",
        "builders/common/hf.py",
        "builders/causal_lm/_adapter.py",
        "builders/causal_lm/_text.py",
        "builders/data/texts",
        "builders/unsupported.py",
        "kiln/store/unsupported.py",
    ),
    "quantize": (
        "builders/causal_lm/quantize.py",
        "builders/common/hf.py",
        "builders/data/texts",
        "builders/unsupported.py",
        "kiln/store/unsupported.py",
    ),
    "export": (
        "builders/causal_lm/export.py",
        "builders/common/hf.py",
        "builders/causal_lm/_adapter.py",
        "builders/causal_lm/_cache.py",
        "builders/causal_lm/_capture.py",
        "builders/causal_lm/_tracefix.py",
        "builders/unsupported.py",
        "kiln/store/unsupported.py",
    ),
    "onnx": (
        "builders/causal_lm/onnx.py",
        "builders/causal_lm/_qdq.py",
        "kiln/store/unsupported.py",
    ),
    "engine": (
        "builders/causal_lm/engine.py",
        "builders/common/hf.py",
        "builders/causal_lm/_cache.py",
        "builders/causal_lm/_tracefix.py",
        "builders/causal_lm/export.py",
        "kiln/store/unsupported.py",
    ),
    "drafter": ("builders/causal_lm/drafter.py", "builders/causal_lm/_drafters.py"),
    "bundle": ("builders/causal_lm/bundle.py", "builders/causal_lm/_bundle_variants.py"),
    # The text-generation runtime files, listed one by one (the same digest as the
    # directory had): runtime/ also holds other tasks' runtimes, which must not
    # change text-generation keys.
    "validate": (
        "builders/causal_lm/validate.py",
        "kiln/hostinfo.py",
        "builders/causal_lm/_text.py",
        *_TEXT_RUNTIME,
    ),
}

# Tasks other than text-generation build with their own package of builders,
# `<package>.<kind>` (kiln.store.execute picks it from the step's `task` option), and
# their steps hash their own code. Kinds not listed (fetch) are shared.
TASK_BUILDERS: dict[str, str] = {
    "text-classification": "builders.classify",
    "text2text-generation": "builders.seq2seq",
    "automatic-speech-recognition": "builders.seq2seq",
    "feature-extraction": "builders.embed",
}
# The encoder tasks share builders/common/encoder.py (export, graph check, engine, bundle,
# evidence) and runtime/encoder.py (loading and padding).
_ENCODER = ("builders/common/encoder.py",)
_CLASSIFY = ("builders/classify/__init__.py", *_ENCODER)
_EMBED = ("builders/embed/__init__.py", *_ENCODER)
_SEQ2SEQ = ("builders/seq2seq/__init__.py",)
# Speech runs the seq2seq builders' speech paths too, reads the shipped clips
# (builders/data/audio/: the .wav bytes are hashed, _sources) and computes log-mel features.
_SPEECH = ("builders/seq2seq/speech.py",)
_AUDIO = ("builders/data/audio", "runtime/audio.py")
TASK_CODE: dict[str, dict[str, tuple[str, ...]]] = {
    "text-classification": {
        "export": (*_CLASSIFY, "builders/classify/export.py"),
        "onnx": (*_CLASSIFY, "builders/classify/onnx.py", "builders/causal_lm/onnx.py"),
        "engine": (*_CLASSIFY, "builders/classify/engine.py"),
        "bundle": (*_CLASSIFY, "builders/classify/bundle.py"),
        "reference": (
            *_CLASSIFY,
            "builders/classify/reference.py",
            "builders/classify/export.py",  # its load_classifier
        ),
        "validate": (
            *_CLASSIFY,
            "builders/classify/validate.py",
            "builders/causal_lm/validate.py",
            "kiln/hostinfo.py",  # the host in its evidence
            *_TEXT_RUNTIME,  # importing runtime.classify runs the package's init
            "runtime/encoder.py",
            "runtime/classify.py",
        ),
    },
    "feature-extraction": {
        "export": (*_EMBED, "builders/embed/export.py", "kiln/store/unsupported.py"),
        "onnx": (*_EMBED, "builders/embed/onnx.py", "builders/causal_lm/onnx.py"),
        "engine": (*_EMBED, "builders/embed/engine.py"),
        "bundle": (*_EMBED, "builders/embed/bundle.py"),
        "reference": (
            *_EMBED,
            "builders/embed/reference.py",
            "builders/embed/export.py",  # its load_encoder and pooling
            "kiln/store/unsupported.py",
        ),
        "validate": (
            *_EMBED,
            "builders/embed/validate.py",
            "builders/causal_lm/validate.py",
            "kiln/hostinfo.py",  # the host in its evidence
            *_TEXT_RUNTIME,  # importing runtime.embed runs the package's init
            "runtime/encoder.py",
            "runtime/embed.py",
        ),
    },
    "text2text-generation": {
        "export": (*_SEQ2SEQ, "builders/seq2seq/export.py"),
        "onnx": (*_SEQ2SEQ, "builders/seq2seq/onnx.py", "builders/causal_lm/onnx.py"),
        "engine": (*_SEQ2SEQ, "builders/seq2seq/engine.py"),
        "bundle": (*_SEQ2SEQ, "builders/seq2seq/bundle.py", "builders/causal_lm/bundle.py"),
        "reference": (
            *_SEQ2SEQ,
            "builders/seq2seq/reference.py",
            "builders/seq2seq/export.py",  # its load_seq2seq
        ),
        "validate": (
            *_SEQ2SEQ,
            "builders/seq2seq/validate.py",
            "builders/causal_lm/validate.py",
            "kiln/hostinfo.py",  # the host in its evidence
            *_TEXT_RUNTIME,  # importing runtime.seq2seq runs the package's init
            "runtime/seq2seq.py",
            "runtime/encoder.py",  # its bundle loading, imported by runtime.seq2seq
            "runtime/audio.py",  # imported by runtime.seq2seq
        ),
    },
    "automatic-speech-recognition": {
        "export": (*_SEQ2SEQ, "builders/seq2seq/export.py", *_SPEECH),
        "onnx": (*_SEQ2SEQ, "builders/seq2seq/onnx.py", "builders/causal_lm/onnx.py"),
        "engine": (*_SEQ2SEQ, "builders/seq2seq/engine.py"),
        "bundle": (
            *_SEQ2SEQ,
            "builders/seq2seq/bundle.py",
            "builders/causal_lm/bundle.py",
            "runtime/audio.py",  # its FIELDS
        ),
        "reference": (
            *_SEQ2SEQ,
            "builders/seq2seq/reference.py",
            "builders/seq2seq/export.py",  # its load_seq2seq
            *_SPEECH,
            *_AUDIO,
        ),
        "validate": (
            *_SEQ2SEQ,
            "builders/seq2seq/validate.py",
            "builders/causal_lm/validate.py",
            "kiln/hostinfo.py",  # the host in its evidence
            *_TEXT_RUNTIME,
            "runtime/seq2seq.py",
            "runtime/encoder.py",  # its bundle loading
            *_AUDIO,
        ),
    },
}

# Builders chosen by a true step option, each with its own code entry `kind/option`:
# an engine step of a quantized graph (option `quantized`, kiln/plan/__init__.py) builds with
# builders/causal_lm/qengine.py, which keeps the quantized weights, while every other engine step
# keeps the code digest, and so the key, it had.
OPTION_BUILDERS: dict[tuple[str, str], str] = {
    ("engine", "quantized"): "builders.causal_lm.qengine"
}
OPTION_CODE: dict[str, tuple[str, ...]] = {
    "engine/quantized": (*CODE["engine"], "builders/causal_lm/qengine.py"),
}

# Each engine backend's own module, hashed into its engines' keys on top of
# CODE["engine"]: an edit to one backend re-keys only the engines it builds.
BACKEND_CODE: dict[str, tuple[str, ...]] = {
    backend: (
        "builders/causal_lm/backends/__init__.py",
        f"builders/causal_lm/backends/{backend}.py",
    )
    for backend in BACKEND_LIBRARIES
}


def _option(kind: str, options: Mapping[str, Any] | None) -> str | None:
    for k, name in OPTION_BUILDERS:
        if k == kind and options and options.get(name) is True:
            return name
    return None


def code_name(
    kind: str,
    task: str | None,
    backend: str | None = None,
    options: Mapping[str, Any] | None = None,
) -> str:
    """The name under which a step's code digest is kept: `task/kind` where the task
    has its own builder for the kind, `kind/option` where an option picks the builder,
    `engine@backend` for another engine, else the kind."""
    if task in TASK_CODE and kind in TASK_CODE[task]:
        return f"{task}/{kind}"
    option = _option(kind, options)
    if option:
        return f"{kind}/{option}"
    if kind == "engine" and backend in BACKEND_CODE:
        return f"engine@{backend}"
    return kind


def builder_module(kind: str, task: str | None, options: Mapping[str, Any] | None = None) -> str:
    """The module whose build() runs a step."""
    if task in TASK_BUILDERS and kind in TASK_CODE[task]:
        return f"{TASK_BUILDERS[task]}.{kind}"
    option = _option(kind, options)
    if option:
        return OPTION_BUILDERS[(kind, option)]
    return "builders.fetch" if kind == "fetch" else f"builders.causal_lm.{kind}"


def version(dist: str) -> str:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return "absent"


@dataclass(frozen=True)
class Toolchain:
    """Everything outside the recipe that step keys depend on."""

    versions: dict[str, str]
    code: dict[str, str]

    def libraries(self, kind: str, backend: str | None = None) -> dict[str, str]:
        extra = BACKEND_LIBRARIES.get(backend or "", ()) if kind == "engine" else ()
        return {lib: self.versions[lib] for lib in (*LIBRARIES[kind], *extra)}

    def material(self, kind: str, options: dict[str, Any]) -> dict[str, str | dict[str, str]]:
        """What outside the recipe goes into a step's key: its libraries' versions and
        its builder code's digest."""
        backend, task = options.get("backend"), options.get("task")
        return {
            "libraries": self.libraries(kind, backend),
            "code": self.code[code_name(kind, task, backend, options)],
        }

    def lock(self) -> dict[str, str]:
        """What the manifest's lock records: every library a step uses, and Python."""
        return {**self.versions, "python": ".".join(platform.python_version_tuple()[:2])}


def _digest(paths: tuple[str, ...], root: Path) -> str:
    h = hashlib.sha256()
    for rel in paths:
        target = root / rel
        files = sorted(_sources(target)) if target.is_dir() else [target]
        files = [f for f in files if f.exists()]  # a base revision may predate a file
        for f in files:
            h.update(f.relative_to(root).as_posix().encode() + b"\0")
            h.update(f.read_bytes() + b"\0")
    return h.hexdigest()


def _sources(folder: Path) -> list[Path]:
    """Python and shipped text and audio (calibration and evaluation texts, validation
    clips change outputs too)."""
    suffixes = (".py", ".txt", ".wav")  # audio clips are inputs too (builders/data/audio/)
    return [p for p in folder.rglob("*") if p.suffix in suffixes and p.is_file()]


def code_digests(root: Path) -> dict[str, str]:
    """The code version of every step kind, read from the tree at `root`."""
    digests = {kind: _digest(paths, root) for kind, paths in CODE.items()}
    for task, kinds in TASK_CODE.items():
        digests.update({code_name(k, task): _digest(paths, root) for k, paths in kinds.items()})
    for backend, paths in BACKEND_CODE.items():
        digests[code_name("engine", None, backend)] = _digest((*CODE["engine"], *paths), root)
    digests.update({name: _digest(paths, root) for name, paths in OPTION_CODE.items()})
    return digests


@cache
def current(root: Path = ROOT) -> Toolchain:
    groups = (*LIBRARIES.values(), *BACKEND_LIBRARIES.values())
    libs = sorted({lib for group in groups for lib in group})
    return Toolchain(versions={lib: version(lib) for lib in libs}, code=code_digests(root))
