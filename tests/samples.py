"""Small declarative inputs shared by tests: recipe dicts, their planned steps, manifests."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml
from conftest import ROOT

from kiln import catalog
from kiln.canonical import key_of
from kiln.catalog.yaml import load_yaml_model
from kiln.plan import plan
from kiln.plan.toolchain import current
from kiln.schema import Manifest, PromptSet, Recipe

PROMPTS = load_yaml_model(PromptSet, ROOT / "prompts" / "default.yaml")


def base() -> dict[str, Any]:
    data: dict[str, Any] = yaml.safe_load((ROOT / "recipes" / "tiny-llama.yaml").read_text())
    return data


def steps(data: dict[str, Any], tmp_path: Path, name: str = "r") -> dict[str, Any]:
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    recipe = load_yaml_model(Recipe, path)
    return {s.kind: s for s in plan(name, recipe, PROMPTS, current()).steps}


def quantized(weights: str = "fp8", **build: Any) -> dict[str, Any]:
    data = base()
    data["precision"]["weights"] = weights
    data["build"].update(build)
    return data


def sample_manifest(n: int) -> Manifest:
    sha = key_of(n)
    material = {"kind": "fetch", "options": {"n": n}, "inputs": {}, "libraries": {}, "code": sha}
    return Manifest.model_validate(
        {
            "schema_version": 1,
            "recipe": "tiny",
            "lock": {
                "model": {
                    "repo": "kiln-tiny/llama",
                    "revision": sha[:40],
                    "architecture": "LlamaForCausalLM",
                    "files": [{"path": "config.json", "sha256": sha, "size": n}],
                },
                "steps": [{**material, "name": "fetch", "key": key_of(material)}],
                "toolchain": {"python": "3.11"},
            },
            "evidence": [],
        }
    )


TEXTS = [
    "Hello",
    "The quick brown fox",
    "What is the capital of France? Paris, of course, and it is lovely in spring.",
    "def add(a, b): return a + b",
    "3.14159",
]


def shipped_plan(name: str) -> Any:
    """The plan of a recipe of the repository's own catalog."""
    cat = catalog.load(catalog.Paths(ROOT))
    recipe = cat.recipe(name)
    return plan(name, recipe, cat.prompts[recipe.validation.prompts], current())


def chunk_wheel(cache: Path, i: int, data: bytes, inner: str) -> dict[str, Any]:
    """A real wheel `chunky-part<i>` 1.0 in `cache`, carrying `data` as `inner`: the
    chunk's pin (kiln.schema.Chunk)."""
    import hashlib
    import zipfile

    path = cache / f"chunky_part{i}-1.0-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as zf:
        zf.writestr(f"chunky_part{i}/__init__.py", "")
        zf.writestr(inner, data)
    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    return {
        "package": {"name": f"chunky-part{i}", "version": "1.0", "wheel_sha256": digest},
        "file": inner,
    }


def chunked(cache: Path, whole: bytes, cuts: tuple[int, ...], name: str) -> dict[str, Any]:
    """`whole` cut at `cuts` into wheels of `cache` (chunk i holds `<name>.part<i-1>`):
    the recipe's `model:` that assembles it."""
    import hashlib
    import itertools

    cache.mkdir(parents=True, exist_ok=True)
    chunks = [
        chunk_wheel(cache, i, whole[a:b], f"chunky_part{i}/data/{name}.part{i - 1:02d}")
        for i, (a, b) in enumerate(itertools.pairwise(cuts), 1)
    ]
    return {"chunks": chunks, "file": name, "sha256": hashlib.sha256(whole).hexdigest()}
