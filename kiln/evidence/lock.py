"""The lock of a built recipe: each checkpoint's files with their sha256, every step's
key and material, and the toolchain. Read from the store, after the build."""

from __future__ import annotations

from kiln.catalog.yaml import read_json
from kiln.plan import toolchain
from kiln.plan.step import Plan, Step
from kiln.schema import CheckpointLock, FileHash, ImportLock, Lock, StepLock
from kiln.store import Store

PIN = (
    "repo",
    "revision",
    "package",
    "version",
    "chunks",
    "file",
    "path",
    "sha256",
    "wheel_sha256",
)


def _hashes(files: list[dict[str, object]]) -> list[FileHash]:
    return [FileHash.model_validate(f) for f in sorted(files, key=lambda f: str(f["path"]))]


def checkpoint_lock(store: Store, fetch: Step, imported: Step | None = None) -> CheckpointLock:
    """What a fetch step fetched (its pin and every file's hash), the architecture its
    config names, and for an imported file what the import wrote."""
    fetched = store.get(fetch.key)
    files = read_json(fetched.file("files.json"))
    made = store.get(imported.key) if imported is not None else fetched
    config_file = made.path / "checkpoint" / "config.json"
    config = read_json(config_file) if config_file.is_file() else {}
    if not config and (made.path / "checkpoint" / "adapter_config.json").is_file():
        config = {"model_type": "peft-adapter"}  # an adapter-only checkpoint has no config.json
    record = None
    if imported is not None:
        done = read_json(made.file("files.json"))
        record = ImportLock(
            format=done["format"],
            quantization=done["quantization"],
            dtype=done["dtype"],
            converter=done["converter"],
            files=_hashes(done["files"]),
        )
    return CheckpointLock(
        **{k: files[k] for k in PIN if files.get(k) is not None},
        architecture=(config.get("architectures") or [config.get("model_type", "unknown")])[0],
        files=_hashes(files["files"]),
        imported=record,
    )


def _imported(p: Plan, fetch: Step) -> Step | None:
    return next(
        (s for s in p.steps if s.kind == "import" and s.inputs.get("source") == fetch.key), None
    )


def lock(store: Store, p: Plan) -> Lock:
    model = p.step("fetch")
    return Lock(
        model=checkpoint_lock(store, model, _imported(p, model)),
        companions={
            s.role: checkpoint_lock(store, s, _imported(p, s))
            for s in p.steps
            if s.kind == "fetch" and s.role != "model"
        },
        steps=[StepLock(name=s.name, role=s.role, key=s.key, **s.material) for s in p.steps],
        toolchain=_toolchain(p),
    )


def _toolchain(p: Plan) -> dict[str, str]:
    """Every library a step of the plan uses, at the version its key has, and Python."""
    libraries = {lib: v for s in p.steps for lib, v in s.material["libraries"].items()}
    return {**dict(sorted(libraries.items())), "python": toolchain.python()}
