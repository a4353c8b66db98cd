"""A LoRA adapter on its pinned base: resolve, check, and load it with peft.

An adapter-only checkpoint names its base in adapter_config.json. The name alone is
not a pin (peft leaves `revision` null by default and loaders then fetch `main`:
peft issue #1567), so kiln requires peft's own `revision` field and checks both
against the recipe's model repo@revision before anything is loaded.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from kiln.store.api import Request


def adapter_base(adapter: Path) -> tuple[str, str | None]:
    """(base_model_name_or_path, revision) recorded in the adapter's metadata."""
    config = json.loads((adapter / "adapter_config.json").read_text())
    return str(config.get("base_model_name_or_path") or ""), config.get("revision")


def check_base(request: Request, adapter: Path, repo: str, revision: str) -> None:
    """The adapter's pinned base must be exactly the recipe's model."""
    if not (adapter / "adapter_config.json").is_file():
        raise request.error(
            "the adapter companion has no adapter_config.json",
            "companions.adapter must be a peft LoRA checkpoint",
        )
    base, pinned = adapter_base(adapter)
    if pinned is None:
        raise request.error(
            f"the adapter's adapter_config.json pins no base revision (base {base!r})",
            "set its 'revision' to the base checkpoint's 40-hex revision (peft issue #1567)",
        )
    if (base, pinned) != (repo, revision):
        raise request.error(
            f"the adapter was made for {base}@{pinned}, "
            f"but the recipe's model is {repo}@{revision}",
            f"set model to repo: {base}, revision: {pinned}, or use an adapter for this model",
        )


def with_adapter(request: Request, model: Any, merge: bool) -> Any:
    """`model` (the fetched base) with the fetched adapter of request.inputs["adapter"]:
    peft's PeftModel, merged into plain weights when `merge` (export)."""
    from peft import PeftModel

    base = json.loads((request.inputs["checkpoint"] / "files.json").read_text())
    adapter = request.inputs["adapter"] / "checkpoint"
    check_base(request, adapter, base["repo"], base["revision"])
    peft_model = PeftModel.from_pretrained(model, adapter, is_trainable=False)
    return (peft_model.merge_and_unload() if merge else peft_model).eval()
