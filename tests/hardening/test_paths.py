"""Paths derived from data stay under their roots (issue 7): artifact paths a builder
asks for, store keys, recipe names from `recipe=`, checkpoint paths a manifest names.
Fuzzed with `..`, absolute paths, NUL, backslashes and symlinks out: 0 escapes."""

from __future__ import annotations

import hashlib
import os
import shutil
from pathlib import Path

import pytest
from conftest import ROOT, World, make_world
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kiln import catalog
from kiln.canonical import key_of
from kiln.errors import KilnError
from kiln.schema import Manifest
from kiln.store import Store, Writer
from kiln.store.verify import audit

PIECES = ["..", ".", "a", "b.bin", "", "/", "\\", "\x00", "~", "link", "..\\..", "/etc", "%2e%2e"]
names = st.lists(st.sampled_from(PIECES), min_size=1, max_size=8).map("/".join) | st.text(
    alphabet="./\\\x00ab~ ", max_size=24
)
SETTINGS = settings(
    max_examples=400, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)


def snapshot(folder: Path) -> set[str]:
    return {str(p) for p in folder.rglob("*")}


@pytest.fixture(scope="module")
def fenced(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """An artifact dir with a symlink in it that points outside, next to a secret."""
    base = tmp_path_factory.mktemp("fenced")
    outside = base / "outside"
    outside.mkdir()
    (outside / "secret").write_text("secret")
    art = base / "art"
    art.mkdir()
    (art / "link").symlink_to(outside)
    return base, art


@SETTINGS
@given(name=names)
def test_writer_paths_never_leave_the_artifact(fenced: tuple[Path, Path], name: str) -> None:
    base, art = fenced
    before = snapshot(base / "outside")
    try:
        path = Writer(art).path(name)
    except KilnError:
        pass
    else:
        assert path.resolve().is_relative_to(art.resolve()) and path.resolve() != art.resolve()
        assert "\x00" not in name and "\\" not in name
    assert snapshot(base / "outside") == before


@SETTINGS
@given(key=st.text(alphabet="0123456789abcdefABCDEF./\\\x00g", min_size=0, max_size=70))
def test_store_keys_are_hex_and_stay_in_the_store(tmp_path: Path, key: str) -> None:
    store = Store(tmp_path)
    try:
        folder = store.object_dir(key)
    except KilnError:
        assert len(key) != 64 or set(key) - set("0123456789abcdef")
        return
    assert folder.parent.parent == tmp_path / "objects" and folder.name == key


@pytest.fixture(scope="module")
def cat(tmp_path_factory: pytest.TempPathFactory) -> catalog.Catalog:
    world = make_world(tmp_path_factory.mktemp("cat"), Path("/nonexistent"), ("tiny-llama",))
    return catalog.load(catalog.Paths(world.root))


@SETTINGS
@given(name=names | st.sampled_from(["tiny-llama/../tiny-llama", "./tiny-llama", "TINY-LLAMA"]))
def test_recipe_names_only_name_recipes_in_the_catalog(cat: catalog.Catalog, name: str) -> None:
    try:
        cat.recipe(name)
    except KilnError:
        return
    assert name == "tiny-llama"


@pytest.mark.parametrize("name", ["../../etc/passwd", "/etc/passwd", "..", "tiny-llama/..", "a\\b"])
def test_doit_refuses_recipe_names_that_climb_out(tmp_path: Path, name: str) -> None:
    world = make_world(tmp_path, tmp_path / "hub", ("tiny-llama",))
    before = snapshot(tmp_path)
    proc = world.doit("plan", f"recipe={name}")
    assert proc.returncode != 0 and "Traceback" not in proc.stdout + proc.stderr
    assert "unknown recipe" in proc.stdout + proc.stderr
    assert {Path(p).name for p in snapshot(tmp_path) - before} <= {".doit.sqlite"}


@pytest.fixture(scope="module")
def checkpoint_store(tmp_path_factory: pytest.TempPathFactory) -> tuple[Store, str, str]:
    """A store with one fetch artifact, and a secret beside the store whose sha256 a
    hostile manifest will claim: if verify followed the path, it would find a match."""
    base = tmp_path_factory.mktemp("ckpt")
    (base / "secret").write_text("secret")
    secret_sha = hashlib.sha256(b"secret").hexdigest()
    store = Store(base / "store")
    key = key_of("fetch")
    with store.publish(key, {"kind": "fetch"}) as w:
        w.write_bytes("checkpoint/config.json", b"{}")
    return store, key, secret_sha


@SETTINGS
@given(path=names.map(lambda n: n.replace("\x00", "")))
def test_manifest_checkpoint_paths_never_lead_verify_out_of_the_store(
    checkpoint_store: tuple[Store, str, str], path: str
) -> None:
    store, key, secret_sha = checkpoint_store
    m = Manifest.model_validate(
        {
            "schema_version": 1,
            "recipe": "tiny",
            "lock": {
                "model": {
                    "repo": "kiln-tiny/llama",
                    "revision": "0" * 40,
                    "architecture": "LlamaForCausalLM",
                    "files": [{"path": path, "sha256": secret_sha, "size": 6}],
                },
                "steps": [
                    {
                        "kind": "fetch",
                        "name": "fetch",
                        "key": key,
                        "options": {},
                        "inputs": {},
                        "libraries": {},
                        "code": key,
                    }
                ],
                "toolchain": {},
            },
            "evidence": [],
        }
    )
    report = audit(store, {"manifests/tiny.json": m}, [key])
    assert report.corrupt or report.missing  # never silently "verified"


def test_a_builder_symlink_out_of_the_artifact_is_refused_and_changes_nothing(
    tmp_path: Path,
) -> None:
    outside = tmp_path / "outside.bin"
    outside.write_bytes(b"precious")
    mode = outside.stat().st_mode
    store = Store(tmp_path / "store")
    key = key_of("symlinker")
    with pytest.raises(KilnError, match="symlink"), store.publish(key, {}) as w:
        w.write_bytes("real.bin", b"x")
        os.symlink(outside, w.root / "weights.bin")
    assert not store.has(key)
    assert outside.read_bytes() == b"precious" and outside.stat().st_mode == mode


def test_a_store_temp_dir_symlinked_out_is_refused(tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    store = Store(tmp_path / "store")
    key = "ab" + "0" * 62
    store.root.mkdir()
    (store.root / "tmp").symlink_to(outside)
    with (
        pytest.raises(KilnError, match=f"tmp: is a symbolic link to {outside}"),
        store.publish(key, {}) as w,
    ):
        w.write_bytes("f", b"x")
    assert not store.has(key)
    assert not any(outside.rglob("*"))


def test_a_shard_symlinked_out_is_replaced_by_a_real_one_and_left_alone(tmp_path: Path) -> None:
    """A linked shard holds no artifact (issue 37): publishing a key of it replaces the
    link, only the link, and writes nothing through it."""
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "canary").write_text("not kiln's")
    store = Store(tmp_path / "store")
    key = "ab" + "0" * 62
    (store.root / "objects").mkdir(parents=True)
    (store.root / "objects" / "ab").symlink_to(outside)
    assert not store.has(key)
    with store.publish(key, {}) as w:
        w.write_bytes("f", b"x")
    assert store.has(key) and not (store.root / "objects" / "ab").is_symlink()
    assert [p.name for p in outside.iterdir()] == ["canary"]


def test_verify_reports_a_symlinked_artifact_file(built: World, tmp_path: Path) -> None:
    store = Store(tmp_path / "store")
    shutil.copytree(built.store / "objects", store.root / "objects", symlinks=True)
    key = next(store.keys())
    victim = next(
        p
        for p in store.object_dir(key).rglob("*")
        if p.is_file() and p.name != ".kiln-artifact.json"
    )
    victim.parent.chmod(0o755)
    victim.unlink()
    victim.symlink_to(ROOT / "README.md")
    assert victim.relative_to(store.object_dir(key)).as_posix() in store.verify(key)
