"""Paths are contained (issue 37): a local checkpoint, a file inside one, a `doit new`
source and a file a command variable names are resolved and refused, before a byte is
read, when they lead out of their root through a symbolic link, are a FIFO, a device or
an empty folder, or are the repository, git's folder or kiln's own.

Each case is built as a stranger's pull request would build it, around canary files
outside the root; each refusal is a located error naming the real cause, and no canary
is read into the store.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from conftest import ROOT, World, make_world, measured

from kiln import pins

SHA = "a" * 64
SECRET = "canary: this line must never reach the store\n"


def _checkpoint(folder: Path) -> Path:
    folder.mkdir(parents=True)
    (folder / "config.json").write_text('{"architectures": ["LlamaForCausalLM"]}')
    (folder / "model.safetensors").write_bytes(b"\0" * 16)
    return folder


def _inside_link(root: Path) -> None:
    _checkpoint(root / "real")
    _checkpoint(root / "ckpt")
    (root / "ckpt" / "sub").symlink_to(root / "real")


# name -> (how it is made under a root, given `out`, a folder beside it; what is said)
CASES: dict[str, tuple[Callable[[Path, Path], object], str]] = {
    "folder-link-out": (
        lambda root, out: (root / "ckpt").symlink_to(out / "ckpt"),
        "ckpt is a symbolic link to {out}/ckpt, outside",
    ),
    "gguf-link-out": (
        lambda root, out: (root / "ckpt").symlink_to(out / "model.gguf"),
        "ckpt is a symbolic link to {out}/model.gguf, outside",
    ),
    "file-inside-links-out": (
        lambda root, out: (_checkpoint(root / "ckpt") / "notes.txt").symlink_to(out / "secret"),
        "ckpt/notes.txt is a symbolic link to {out}/secret, outside",
    ),
    "file-inside-links-to-etc": (
        lambda root, out: (_checkpoint(root / "ckpt") / "vocab.txt").symlink_to("/etc/passwd"),
        "ckpt/vocab.txt is a symbolic link to /etc/passwd, outside",
    ),
    "link-to-dev-zero": (
        lambda root, out: (root / "ckpt").symlink_to("/dev/zero"),
        "ckpt is a symbolic link to /dev/zero, outside",
    ),
    "fifo": (lambda root, out: os.mkfifo(root / "ckpt"), "ckpt is a FIFO (named pipe)"),
    "fifo-inside": (
        lambda root, out: os.mkfifo(_checkpoint(root / "ckpt") / "tokenizer.json"),
        "ckpt/tokenizer.json is a FIFO (named pipe)",
    ),
    "empty-folder": (lambda root, out: (root / "ckpt").mkdir(), "ckpt is an empty folder"),
    "folder-link-inside": (
        lambda root, out: _inside_link(root),
        "ckpt/sub is a symbolic link to the folder",
    ),
    "missing": (lambda root, out: None, "ckpt does not exist"),
}


def _outside(base: Path) -> Path:
    out = base / "outside"
    _checkpoint(out / "ckpt")
    (out / "secret").write_text(SECRET)
    (out / "model.gguf").write_bytes(b"GGUF" + SECRET.encode())
    return out


@pytest.mark.parametrize("case", sorted(CASES))
def test_a_local_source_that_leads_out_or_is_no_file_is_refused(tmp_path: Path, case: str) -> None:
    root, out = tmp_path / "root", _outside(tmp_path)
    root.mkdir()
    make, said = CASES[case]
    make(root, out)
    with pytest.raises(pins.PinError) as caught:
        pins.local_source(root, "ckpt")
    expected = said.format(out=out).replace("ckpt/", "").replace("ckpt ", "")
    assert expected in caught.value.cause, caught.value.cause


def test_a_folder_of_regular_files_and_links_inside_is_a_source(tmp_path: Path) -> None:
    folder = _checkpoint(tmp_path / "ckpt")
    (tmp_path / "blob").write_text("{}")
    (folder / "generation_config.json").symlink_to(tmp_path / "blob")  # a hub snapshot's way
    files = pins.local_source(tmp_path, "ckpt")
    assert [p.name for p in files] == ["config.json", "generation_config.json", "model.safetensors"]


@pytest.mark.parametrize(
    ("rel", "said"),
    [(".", "the repository itself"), (".kiln/store", "kiln's own folder"), (".git", "git's")],
)
def test_the_repository_git_and_kiln_are_never_sources(tmp_path: Path, rel: str, said: str) -> None:
    _checkpoint(tmp_path / (rel if rel != "." else "x"))
    with pytest.raises(pins.PinError, match=said):
        pins.local_source(tmp_path, rel)
    store = _checkpoint(tmp_path / "my-store")  # KILN_STORE inside the root
    with pytest.raises(pins.PinError, match="kiln's own folder"):
        pins.local_source(tmp_path, "my-store", [store])


# ---------------------------------------------------------------- through doit


def _world(tmp_path: Path) -> World:
    return make_world(tmp_path, tmp_path / "no-hub", ("tiny-llama",))


def _local_recipe(world: World, name: str, path: str) -> None:
    data = world.recipe("tiny-llama")
    data["model"] = {"path": path, "sha256": SHA, "architecture": "LlamaForCausalLM"}
    world.write_recipe(name, data)


def test_check_and_plan_refuse_each_case_at_its_line(tmp_path: Path) -> None:
    world = _world(tmp_path)
    out = _outside(tmp_path)
    for case, (make, _said) in CASES.items():
        folder = world.root / "cases" / case
        folder.mkdir(parents=True)
        make(folder, out)
        _local_recipe(world, case, f"cases/{case}/ckpt")
    done = world.doit("check")
    said = done.stdout + done.stderr
    assert done.returncode == 1 and "Traceback" not in said, said
    for case, (_make, cause) in CASES.items():
        line = next((ln for ln in said.splitlines() if f"recipes/{case}.yaml:6:9:" in ln), "")
        assert "model -> path:" in line and cause.format(out=out) in line, (case, said)
    plan = world.doit("plan", "recipe=fifo")
    assert plan.returncode == 1 and "is a FIFO" in plan.stdout + plan.stderr


def _text(path: Path) -> str:
    try:
        return path.read_text(errors="replace")
    except OSError:
        return ""


def test_build_fetches_nothing_through_a_link_out(tmp_path: Path) -> None:
    world = _world(tmp_path)
    out = _outside(tmp_path)
    CASES["file-inside-links-out"][0](world.root, out)
    _local_recipe(world, "leak", "ckpt")
    done = world.doit("build", "recipe=leak")
    said = done.stdout + done.stderr
    assert done.returncode != 0 and "is a symbolic link to" in said and "Traceback" not in said
    leaked = [p for p in world.store.rglob("*") if p.is_file() and SECRET in _text(p)]
    assert leaked == []


@pytest.mark.parametrize("case", ["folder-link-out", "gguf-link-out", "fifo", "empty-folder"])
def test_doit_new_refuses_what_check_refuses(tmp_path: Path, case: str) -> None:
    world = _world(tmp_path)
    out = _outside(tmp_path)
    CASES[case][0](world.root, out)
    done = world.doit("new", "name=fresh", "model=ckpt")
    said = done.stdout + done.stderr
    assert done.returncode == 1 and "Traceback" not in said, said
    assert "command line: model:" in said and CASES[case][1].format(out=out) in said, said
    assert not (world.root / "recipes" / "fresh.yaml").exists()


def test_doit_new_refuses_a_deeply_nested_config(tmp_path: Path) -> None:
    world = _world(tmp_path)
    folder = _checkpoint(world.root / "ckpt")
    (folder / "config.json").write_text("[" * 100_000 + "]" * 100_000)
    done = world.doit("new", "name=fresh", "model=ckpt")
    said = done.stdout + done.stderr
    assert done.returncode == 1 and "Traceback" not in said, said
    assert "config.json is not JSON kiln can read: nesting depth over 32 levels" in said, said


def test_fetch_refuses_a_deeply_nested_checkpoint_json(tmp_path: Path) -> None:
    folder = _checkpoint(tmp_path / "ckpt")
    (folder / "tokenizer_config.json").write_text('{"a": ' * 50_000 + "1" + "}" * 50_000)
    with pytest.raises(pins.PinError, match="nests deeper than 32 levels"):
        pins.checkpoint_json(folder / "tokenizer_config.json", "ckpt/tokenizer_config.json")
    pins.checkpoint_json(folder / "config.json", "ckpt/config.json")  # a plain one reads


# ---------------------------------------------------------------- command variables


def _run(*args: str) -> tuple[int, str, float]:
    """`doit run ARGS` in a child: its exit code, output and own peak RSS, MB."""
    got = measured([sys.executable, "-m", "doit", "-f", str(ROOT / "dodo.py"), "run", *args])
    return got.code, got.out, got.peak_mb


@pytest.fixture(scope="module")
def hostile_files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    base = tmp_path_factory.mktemp("vars")
    os.mkfifo(base / "fifo.json")
    (base / "zero.json").symlink_to("/dev/zero")
    (base / "passwd.json").symlink_to("/etc/passwd")
    (base / "deep.json").write_text("[" * 100_000 + "]" * 100_000)
    (base / "big.json").write_text(json.dumps([{"role": "user", "content": "a " * 5_000_000}]))
    (base / "clips").mkdir()
    os.mkfifo(base / "clips" / "a.wav")
    return {p.name: str(p) for p in base.iterdir()}


@pytest.mark.parametrize(
    ("variable", "file", "said"),
    [
        ("messages", "fifo.json", "is a FIFO (named pipe)"),
        ("messages", "zero.json", "is a symbolic link to /dev/zero, outside"),
        ("messages", "passwd.json", "is a symbolic link to /etc/passwd, outside"),
        ("messages", "deep.json", "nesting depth over 32 levels"),
        ("messages", "big.json", "bytes; at most 1,048,576"),
        ("json_schema", "fifo.json", "is a FIFO (named pipe)"),
        ("json_schema", "deep.json", "nesting depth over 32 levels"),
        ("grammar", "zero.json", "is a symbolic link to /dev/zero, outside"),
        ("audio", "fifo.json", "is a FIFO (named pipe)"),
        ("audio", "clips", "is a FIFO (named pipe)"),
    ],
)
def test_a_file_variable_is_refused_before_it_is_read(
    hostile_files: dict[str, str], variable: str, file: str, said: str
) -> None:
    chat = ("chat=1",) if variable == "messages" else ("prompt=hi",)
    code, out, rss = _run("recipe=tiny-llama", *chat, f"{variable}={hostile_files[file]}")
    assert code == 1 and "Traceback" not in out, out
    assert said in out, out
    assert rss < 200, rss  # nothing was read whole or tokenized


def test_a_variable_outside_the_repository_and_temp_is_refused() -> None:
    code, out, _ = _run("recipe=tiny-llama", "chat=1", "messages=/etc/hostname")
    assert code == 1, out
    assert "command line: messages: /etc/hostname is outside" in out, out


@pytest.mark.parametrize("folder", ["thresholds", "prompts", "recipes", "manifests"])
def test_a_catalog_folder_linked_out_is_refused(tmp_path: Path, folder: str) -> None:
    world = _world(tmp_path)
    moved = tmp_path / "outside" / folder
    moved.parent.mkdir()
    (world.root / folder).rename(moved)
    (world.root / folder).symlink_to(moved)
    done = world.doit("check")
    said = done.stdout + done.stderr
    assert done.returncode == 1 and "Traceback" not in said, said
    assert f"{folder}/: {folder}/ is a symbolic link to {moved}, outside" in said, said
