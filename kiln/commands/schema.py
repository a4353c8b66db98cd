"""JSON Schema for editors, generated from the pydantic models into schema/.

Recipes carry a `# yaml-language-server: $schema=../schema/recipe.schema.json`
modeline, so editors complete keys and flag mistakes as you type. A test fails
when a committed schema is stale: run `doit schema` to refresh them.
"""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel

from kiln.canonical import pretty
from kiln.schema import Manifest, PromptSet, Recipe, Thresholds

MODELS: dict[str, type[BaseModel]] = {
    "recipe": Recipe,
    "thresholds": Thresholds,
    "prompts": PromptSet,
    "manifest": Manifest,
}


def render() -> dict[str, bytes]:
    """File name -> bytes of every schema."""
    out = {}
    for name, model in MODELS.items():
        schema = model.model_json_schema(mode="validation")
        if name == "recipe":
            # A recipe with `extends` holds only overrides; its parent supplies the rest.
            required = schema.pop("required")
            schema["if"] = {"not": {"required": ["extends"]}}
            schema["then"] = {"required": required}
        schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
        schema["$id"] = f"{name}.schema.json"
        out[f"{name}.schema.json"] = pretty(schema)
    return out


def regenerate() -> None:
    """`doit schema`: rewrite the schemas in <root>/schema/ that changed."""
    from kiln.paths import Paths

    folder = Paths.from_env().root / "schema"
    changed = write(folder)
    print(f"   schema: {len(changed)} of {len(MODELS)} files changed in {folder}")


def write(folder: Path) -> list[Path]:
    from kiln.store import atomic_write

    written = []
    for name, data in render().items():
        target = folder / name
        if not target.exists() or target.read_bytes() != data:
            atomic_write(target, data)
            written.append(target)
    return written
