"""What a bundle holds beyond the target engine: a draft model's engine or a drafter's
engines, and the speculative parameters the runtime reads (runtime/speculative.py).

bundle.json's "engines" lists every engine the bundle holds; "speculative" is present
only when the variant drafts, so an ordinary bundle that carries MTP engines
(build.mtp_engines) still decodes one token per forward.
"""

from __future__ import annotations

import json
import shutil
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from kiln.store.api import Request, Writer


def _same_tokenizer(request: Request) -> None:
    """A draft model must speak the target's vocabulary, token for token."""
    target = request.inputs["checkpoint"] / "checkpoint" / "tokenizer.json"
    draft = request.inputs["draft_checkpoint"] / "checkpoint" / "tokenizer.json"
    if draft.is_file() and draft.read_bytes() != target.read_bytes():
        raise request.error(
            "the draft model's tokenizer.json differs from the target's",
            "use a draft checkpoint of the same model family (same tokenizer)",
        )


def add_draft(request: Request, writer: Writer, meta: dict[str, Any]) -> None:
    _same_tokenizer(request)
    engine_dir = request.inputs["draft"]
    engine = json.loads((engine_dir / "engine.json").read_text())
    io = json.loads((engine_dir / "io.json").read_text())
    if io["vocab_size"] != meta["vocab_size"]:
        raise request.error(
            f"the draft model's vocabulary ({io['vocab_size']}) differs from the target's "
            f"({meta['vocab_size']})",
            "use a draft checkpoint with the target's tokenizer",
        )
    # its own folder: the graph names its weights' file, which is the target's name too
    for name in [engine["file"], *engine.get("data", [])]:
        shutil.copyfile(engine_dir / name, writer.path(f"draft/{name}"))
    meta["engines"]["draft"] = {
        "file": f"draft/{engine['file']}",
        "backend": engine["backend"],
        "backend_version": engine["version"],
        "provider": engine["provider"],
        "architecture": io["architecture"],
    }


def add_drafter(request: Request, writer: Writer, meta: dict[str, Any]) -> None:
    source = request.inputs["drafter"]
    drafter = json.loads((source / "drafter.json").read_text())
    for role, file in drafter["engines"].items():
        shutil.copyfile(source / file, writer.path(file))
        meta["engines"][role] = {
            "file": file,
            "backend": drafter["backend"],
            "backend_version": drafter["version"],
            "provider": drafter["provider"],
        }
    if drafter.get("d2t"):
        shutil.copyfile(source / drafter["d2t"], writer.path(drafter["d2t"]))
    meta["drafter"] = {
        "kind": drafter["kind"],
        "d2t": drafter.get("d2t"),
        "mask_token_id": drafter.get("mask_token_id"),
    }
    if drafter.get("target_layers"):  # an MTP assistant reads these layers' KV cache
        meta["drafter"]["target_layers"] = drafter["target_layers"]


def extend(
    request: Request, writer: Writer, meta: dict[str, Any], speculative: dict[str, Any]
) -> None:
    if "draft" in request.inputs:
        add_draft(request, writer, meta)
    if "drafter" in request.inputs:
        add_drafter(request, writer, meta)
    if speculative:
        meta["speculative"] = speculative
