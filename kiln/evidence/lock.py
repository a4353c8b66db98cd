"""The lock of a built recipe: each checkpoint's files with their sha256, every step's
key and material, and the toolchain. Read from the store, after the build."""

from __future__ import annotations

from kiln.catalog.yaml import read_json
from kiln.plan import toolchain
from kiln.plan.step import Plan, Step
from kiln.schema import CheckpointLock, FileHash, Lock, StepLock
from kiln.store import Store


def checkpoint_lock(store: Store, fetch: Step) -> CheckpointLock:
    """What a fetch step fetched: repo, revision, architecture and every file's hash."""
    fetched = store.get(fetch.key)
    files = read_json(fetched.file("files.json"))
    config_file = fetched.path / "checkpoint" / "config.json"
    config = read_json(config_file) if config_file.is_file() else {}
    if not config and (fetched.path / "checkpoint" / "adapter_config.json").is_file():
        config = {"model_type": "peft-adapter"}  # an adapter-only checkpoint has no config.json
    return CheckpointLock(
        repo=files["repo"],
        revision=files["revision"],
        architecture=(config.get("architectures") or [config.get("model_type", "unknown")])[0],
        files=[FileHash(**f) for f in sorted(files["files"], key=lambda f: f["path"])],
    )


def lock(store: Store, p: Plan) -> Lock:
    return Lock(
        model=checkpoint_lock(store, p.step("fetch")),
        companions={
            s.role: checkpoint_lock(store, s)
            for s in p.steps
            if s.kind == "fetch" and s.role != "model"
        },
        steps=[StepLock(name=s.name, role=s.role, key=s.key, **s.material) for s in p.steps],
        toolchain=toolchain.current().lock(),
    )
