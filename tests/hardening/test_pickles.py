"""Pickle-based weights never enter the store (issue 7): fetch skips `*.bin`, `*.pt`,
... even when the snapshot has them, and refuses a checkpoint with no safetensors.
Loading reads the fetch artifact only, so it never sees a pickle."""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import pytest
from conftest import make_world

import tinyhub
from kiln import catalog
from kiln.errors import KilnError
from kiln.plan import plan, toolchain
from kiln.plan.step import Step
from kiln.store import Store
from kiln.store.execute import run_step

PICKLES = ("pytorch_model.bin", "model.pt", "weights.pth", "extra.pkl", "last.ckpt")


def fetch_step(tmp_path: Path) -> Step:
    world = make_world(tmp_path, tmp_path / "unused", ("tiny-llama",))
    cat = catalog.load(catalog.Paths(world.root))
    recipe = cat.recipe("tiny-llama")
    return plan("tiny-llama", recipe, cat.prompts["default"], toolchain.current()).step("fetch")


def hub_with_pickles(hub: Path, tmp_path: Path, step: Step, keep_safetensors: bool) -> Path:
    copy = tmp_path / "hub"
    shutil.copytree(hub, copy, symlinks=True)
    repo = tinyhub.repo_dir(copy, step.options["repo"])
    snapshot = repo / "snapshots" / step.options["revision"]
    for name in PICKLES:
        data = b"\x80\x04cos\nsystem\n" + name.encode()  # a pickle that would call os.system
        sha = hashlib.sha256(data).hexdigest()
        (repo / "blobs" / sha).write_bytes(data)
        (snapshot / name).symlink_to(f"../../blobs/{sha}")
    if not keep_safetensors:
        for f in snapshot.glob("*.safetensors"):
            f.unlink()
    return copy


def test_fetch_never_copies_pickle_weights(hub: Path, tmp_path: Path) -> None:
    step = fetch_step(tmp_path)
    copy = hub_with_pickles(hub, tmp_path, step, keep_safetensors=True)
    store = Store(tmp_path / "store")
    assert run_step(step, store, {"hub": copy, "expected": {}})
    art = store.get(step.key)
    names = {p.name for p in (art.path / "checkpoint").rglob("*")}
    listed = {f["path"] for f in json.loads(art.file("files.json").read_text())["files"]}
    assert not names & set(PICKLES) and not listed & set(PICKLES)
    assert any(n.endswith(".safetensors") for n in names)


def test_a_checkpoint_with_only_pickle_weights_is_refused(hub: Path, tmp_path: Path) -> None:
    step = fetch_step(tmp_path)
    copy = hub_with_pickles(hub, tmp_path, step, keep_safetensors=False)
    store = Store(tmp_path / "store")
    with pytest.raises(KilnError, match="has no safetensors weights"):
        run_step(step, store, {"hub": copy, "expected": {}})
    assert not store.has(step.key)
