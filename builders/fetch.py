"""fetch: resolve `repo@revision` with huggingface_hub and hash every file.

Offline by default, against the hub cache at `context["hub"]` (the local mirror of
tiny checkpoints, or any cache in the same layout). With KILN_HUB_ONLINE=1 the same
call reaches the real Hub. Either way the recipe names the checkpoint the same way.

Every file is hashed as it is copied into the artifact. A file whose sha256 differs
from its blob name (the hub names LFS blobs by sha256) or from the hash recorded in
the manifest's lock is refused, and the error shows both digests.
"""

from __future__ import annotations

import difflib
import hashlib
import os
import shutil
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict, Field

if TYPE_CHECKING:
    from kiln.store.api import Request, Writer

# Pickle-based weights can run code when loaded; safetensors cannot.
PICKLE_SUFFIXES = (".bin", ".pt", ".pth", ".pkl", ".ckpt")


class Options(BaseModel):
    model_config = ConfigDict(extra="forbid")
    repo: str = Field(description="Hugging Face repo id.")
    revision: str = Field(pattern=r"^[0-9a-f]{40}$", description="40-hex revision.")


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as fh:
        while chunk := fh.read(1 << 20):
            h.update(chunk)
    return h.hexdigest()


def _resolve(request: Request, opts: Options) -> Path:
    from huggingface_hub import snapshot_download
    from huggingface_hub.errors import LocalEntryNotFoundError, RevisionNotFoundError

    hub: Path = request.context["hub"]
    online = os.environ.get("KILN_HUB_ONLINE") == "1"
    try:
        return Path(
            snapshot_download(
                opts.repo,
                revision=opts.revision,
                cache_dir=hub,
                local_files_only=not online,
                ignore_patterns=[f"*{s}" for s in PICKLE_SUFFIXES],
            )
        )
    except (LocalEntryNotFoundError, RevisionNotFoundError, FileNotFoundError) as exc:
        snapshots = hub / ("models--" + opts.repo.replace("/", "--")) / "snapshots"
        known = sorted(p.name for p in snapshots.glob("*"))
        where = "the Hub" if online else f"the hub cache {hub}"
        if not online and not snapshots.is_dir():  # the repo itself is unknown here
            cached = sorted(
                p.name[len("models--") :].replace("--", "/", 1) for p in hub.glob("models--*")
            )
            close = difflib.get_close_matches(opts.repo, cached, n=1, cutoff=0.6)
            raise request.error(
                f"repo {opts.repo} is not in {where}",
                f"did you mean {close[0]!r}?"
                if close
                else "check the repo id; with network access: KILN_HUB_ONLINE=1",
                key="repo",
            ) from None
        raise request.error(
            f"revision {opts.revision} of {opts.repo} is not in {where} ({type(exc).__name__})",
            f"pin a revision that exists; the cache has: {', '.join(known) or 'none'}"
            if not online
            else "check the revision on the Hub",
        ) from None


def build(request: Request, writer: Writer) -> None:
    opts = Options.model_validate(request.options)
    snapshot = _resolve(request, opts)
    expected: dict[str, str] = request.context.get("expected", {})
    files: list[dict[str, Any]] = []
    for src in sorted(p for p in snapshot.rglob("*") if p.is_file()):
        rel = src.relative_to(snapshot).as_posix()
        if rel.endswith(PICKLE_SUFFIXES):
            continue
        digest = _sha256(src)
        blob = src.resolve().name
        if len(blob) == 64 and blob != digest:
            raise request.error(
                f"{opts.repo}@{opts.revision[:7]}/{rel} is corrupt: "
                f"blob {blob} has sha256 {digest}",
                "delete the blob from the hub cache and fetch again",
            )
        if rel in expected and expected[rel] != digest:
            raise request.error(
                f"{opts.repo}@{opts.revision[:7]}/{rel} does not match the lock: "
                f"expected sha256 {expected[rel]}, got {digest}",
                "the checkpoint file changed under a pinned revision; restore it, or review "
                "the change and delete the manifest's lock to accept it",
            )
        shutil.copyfile(src, writer.path(f"checkpoint/{rel}"))
        files.append({"path": rel, "sha256": digest, "size": src.stat().st_size})
    if not any(f["path"].endswith(".safetensors") for f in files):
        raise request.error(
            f"{opts.repo}@{opts.revision[:7]} has no safetensors weights",
            "kiln loads safetensors only; pickle-based weights can execute code",
        )
    writer.write_json("files.json", {"repo": opts.repo, "revision": opts.revision, "files": files})
    request.log(f"{opts.repo}@{opts.revision[:7]}: {len(files)} files hashed")
