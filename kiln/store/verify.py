"""`doit verify`: re-hash the store and the resolved checkpoint files against the locks.

Like `nix-store --verify --check-contents`: every artifact is re-hashed against its
record, and every manifest's lock is checked against the store (each step key it
names, each checkpoint file it names with its sha256). Findings fall into four
kinds, each with its own exit code (the most serious wins), above doit's own 1-3:

    0  everything verified
    4  corrupt or partial: bytes differ from a record or a lock, an entry with no
       valid record, a file that should not be there; or a symbolic link where the
       store's layout has a folder or file (kiln/store/links.py), named with its target
    5  missing: a manifest names an artifact or a checkpoint file the store lacks
    6  extra: stale temp dirs, artifacts no manifest or current plan references
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from kiln.errors import KilnError
from kiln.fsio import inside, real_entries, sha256_file
from kiln.schema import CheckpointLock, FileHash, Manifest
from kiln.store import RECORD, Store, gc, links
from kiln.store.links import Link

EXIT = {"corrupt": 4, "partial": 4, "links": 4, "missing": 5, "extra": 6}
KINDS = ("corrupt", "partial", "links", "missing", "extra")  # the most serious first


@dataclass
class Report:
    artifacts: int = 0
    manifests: int = 0
    corrupt: list[str] = field(default_factory=list)
    partial: list[str] = field(default_factory=list)
    missing: list[str] = field(default_factory=list)
    extra: list[str] = field(default_factory=list)
    links: list[str] = field(default_factory=list)  # each link with its target and the fix
    linked: list[Link] = field(default_factory=list)  # what repair removes (only them)
    damaged: set[str] = field(default_factory=set)  # keys of corrupt or partial artifacts
    not_here: list[str] = field(default_factory=list)  # manifests none of whose steps are here
    hub_files: int = 0  # locked checkpoint files re-hashed in the hub cache

    def as_dict(self) -> dict[str, object]:
        """The report for `format=json`."""
        return {
            "exit": self.exit_code(),
            "artifacts": self.artifacts,
            "manifests": self.manifests,
            "hub_files": self.hub_files,
            **{k: getattr(self, k) for k in KINDS},
            "not_built_here": self.not_here,
            "damaged": sorted(self.damaged),
        }

    def exit_code(self) -> int:
        for kind in KINDS:
            if getattr(self, kind):
                return EXIT[kind]
        return 0

    def render(self) -> str:
        lines = []
        for kind in KINDS:
            lines += [f"{kind.removesuffix('s')}: {item}" for item in getattr(self, kind)]
        if self.not_here:
            shown = ", ".join(self.not_here[:5]) + (", ..." if len(self.not_here) > 5 else "")
            lines.append(
                f"not built here: {len(self.not_here)} manifests name artifacts this store "
                f"never had ({shown}); nothing is damaged: `doit build` makes them"
            )
        lines.append(
            f"verify: {self.artifacts} artifacts, {self.manifests} manifests: "
            f"{len(self.corrupt)} corrupt, {len(self.partial)} partial, "
            f"{len(self.missing)} missing, {len(self.extra)} extra, {len(self.links)} links; "
            f"{self.hub_files} hub-cache files re-hashed"
        )
        return "\n".join(lines)


def audit(
    store: Store,
    manifests: Mapping[str, Manifest],
    referenced: Iterable[str],
    hub: Path | None = None,
) -> Report:
    """Check everything; never stop at the first finding. `manifests` maps a display
    name (the file) to its parsed manifest; `referenced` are the keys of current plans;
    `hub`: the hub cache, whose files of every locked checkpoint are re-hashed too."""
    report = Report(manifests=len(manifests))
    _check_links(store, report)
    _check_objects(store, report)
    built = store.built_here()
    for where, m in sorted(manifests.items()):
        _check_manifest(store, where, m, report, built)
        if hub is not None:
            _check_hub(hub, where, m, report)
    keep = set(referenced) | {s.key for m in manifests.values() for s in m.lock.steps}
    report.extra += [
        f"{c.path} ({c.why})" for c in gc.candidates(store, keep) if c.kind != "partial"
    ]
    return report


def _check_links(store: Store, report: Report) -> None:
    """Every link in the layout is damage, named with its target; an artifact whose
    record is one is damaged as a whole (repair removes its entry)."""
    report.linked = links.find(store)
    report.links = [f"{link}; {link.fix(store.root)}" for link in report.linked]
    report.damaged |= {link.key for link in report.linked if link.key is not None}


def _check_objects(store: Store, report: Report) -> None:
    """Re-hash every artifact; never through a link (_check_links named those)."""
    linked = {link.path for link in report.linked}
    for shard in real_entries(store.root / "objects"):
        if not shard.is_dir():
            report.partial.append(f"{shard}: not a directory of artifacts")
            continue
        for entry in real_entries(shard):
            if entry / RECORD not in linked:
                _check_entry(store, entry, report)


def _check_entry(store: Store, entry: Path, report: Report) -> None:
    key = entry.name
    try:
        ok_name = store.object_dir(key) == entry and entry.is_dir()
    except KilnError:
        ok_name = False
    if not ok_name or not store.has(key):
        if ok_name:
            report.damaged.add(key)
        why = "no artifact record" if ok_name else "not an artifact directory"
        report.partial.append(f"{entry}: {why}")
        return
    report.artifacts += 1
    art = store.get(key)
    try:
        recorded_key = art.record().get("key")
    except (OSError, ValueError, AttributeError):
        recorded_key = None
    if recorded_key != key:
        report.partial.append(f"{entry}: its record is unreadable or names another key")
        report.damaged.add(key)
        return
    bad = store.damage(key)
    if bad:
        name = art.record().get("name", "")
        report.corrupt.append(f"{entry} ({name}): {'; '.join(map(str, bad))}")
        report.damaged.add(key)


def _check_manifest(store: Store, where: str, m: Manifest, report: Report, built: set[str]) -> None:
    """Missing: a step this store built (its journal says so) whose artifact is gone.
    A step it never built is not damage, even beside shared steps it did build (a
    build of tiny-llama fetches what tiny-llama-fp8's lock names too; issue 43)."""
    absent = [s for s in m.lock.steps if not store.has(s.key)]
    gone = [s for s in absent if s.key in built]
    if absent and not gone and not any(s.key in built for s in m.lock.steps):
        # A fresh clone, or a lock of another toolchain or host: never built here.
        report.not_here.append(where)
        return
    for s in gone:  # built here, and removed since
        report.missing.append(f"{where}: {s.kind} [{s.key[:12]}] is not in the store")
    fetch = next((s for s in m.lock.steps if s.kind == "fetch"), None)
    if fetch is None or not store.has(fetch.key):
        return
    root = store.get(fetch.key).path / "checkpoint"
    sealed = _sealed(store, fetch.key, report)
    for f in m.lock.model.files:
        try:
            path = inside(root, f.path, "checkpoint file")
        except KilnError as exc:
            report.corrupt.append(f"{where}: {exc}")
            continue
        if not path.is_file():
            report.missing.append(f"{where}: checkpoint file {f.path} is not in the store")
            continue
        got = sha256_file(path)
        if got != f.sha256:
            report.corrupt.append(_store_mismatch(where, m, f, got, sealed))


def _store_mismatch(
    where: str, m: Manifest, f: FileHash, got: str, sealed: Mapping[str, str]
) -> str:
    found = f"{where}: checkpoint file {f.path}: the lock says sha256 {f.sha256}, "
    found += f"the store has {got}"
    if sealed.get(f"checkpoint/{f.path}") != got:
        return found
    why = "as the fetch artifact's sealed record does: the lock changed, not the file"
    return f"{found}, {why}; {_restore(where, m)}"


def _sealed(store: Store, key: str, report: Report) -> dict[str, str]:
    """The files an artifact's record lists, when the record is sealed with its own
    digest and the artifact verified against it (else nothing: an unsealed record
    can be rewritten to match a changed file)."""
    if key in report.damaged:  # its record may not even parse: _check_entry said so
        return {}
    record = store.get(key).record()
    files: dict[str, str] = record["files"] if "sha256" in record else {}
    return files


def _restore(where: str, m: Manifest) -> str:
    """The fix for an edited lock: never delete the good checkpoint file."""
    return (
        f"keep the file and restore {where} from git (`git checkout -- {where}`), or "
        f"rebuild (`doit build recipe={m.recipe}` writes the lock again)"
    )


def _check_hub(hub: Path, where: str, m: Manifest, report: Report) -> None:
    """Re-hash the hub-cache copy of every checkpoint file the lock names (the model's
    and each companion's), where the cache has that revision: a flipped byte there
    would otherwise surface only at the next fetch."""
    for role, cp in [("model", m.lock.model), *sorted(m.lock.companions.items())]:
        if cp.repo is None or cp.revision is None:
            continue  # a packaged or local file: fetch re-hashes it against its pin
        # snapshots/<rev>/<file> links to ../../blobs/<sha>: both inside the repo's folder
        repo_dir = hub / f"models--{cp.repo.replace('/', '--')}"
        if not (repo_dir / "snapshots" / cp.revision).is_dir():
            continue
        for f in cp.files:
            try:
                path = inside(repo_dir, f"snapshots/{cp.revision}/{f.path}", "hub-cache file")
            except KilnError as exc:
                report.corrupt.append(f"{where}: {exc}")
                continue
            if not path.is_file():
                continue  # a cache holds what was downloaded, not always every file
            report.hub_files += 1
            got = sha256_file(path)
            if got != f.sha256:
                report.corrupt.append(_hub_mismatch(where, m, role, cp, f, path, got))


def _hub_mismatch(
    where: str, m: Manifest, role: str, cp: CheckpointLock, f: FileHash, path: Path, got: str
) -> str:
    """Which changed, the file or the lock? The hub names every blob by its own digest
    of the bytes (sha256 for an LFS file, the git blob sha1 for any other), so a file
    that still matches its blob's name is what the hub served, and the lock is what
    changed: then the fix keeps the file (issue 37: deleting the good checkpoint file
    would not mend an edited lock)."""
    what = f"{where}: hub cache {role} {cp.repo}@{(cp.revision or '')[:7]} {f.path}"
    blob = path.resolve().name
    served = _blob_digest(path, blob, got)
    if served == blob:
        return (
            f"{what}: the lock says sha256 {f.sha256}, but the file matches its blob name, "
            f"the hub's own digest of it ({blob}): the manifest's lock was edited, not the "
            f"file; {_restore(where, m)}"
        )
    found = f"{what}: the lock says sha256 {f.sha256}, the hub cache has {got} ({path})"
    if served is not None:
        return f"{found}, and its blob is named {blob}: the file changed; delete it and fetch again"
    return (
        f"{found}; it is not a blob the hub named by digest, so whether the file or the lock "
        f"changed is unknown: if {where} was edited, restore it from git; if not, delete the "
        "file and fetch again"
    )


def _blob_digest(path: Path, blob: str, sha256: str) -> str | None:
    """The file's digest in the form its blob's name has (None: the name is no digest)."""
    if re.fullmatch("[0-9a-f]{64}", blob):
        return sha256
    if re.fullmatch("[0-9a-f]{40}", blob):  # git's: sha1 of "blob <size>\0" and the bytes
        h = hashlib.sha1(f"blob {path.stat().st_size}\0".encode())
        with path.open("rb") as fh:
            while chunk := fh.read(1 << 20):
                h.update(chunk)
        return h.hexdigest()
    return None
