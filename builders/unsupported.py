"""Builders raise kiln.store.unsupported.Unsupported; this is the name they import."""

from kiln.store.unsupported import Unsupported

__all__ = ["Unsupported", "task_not_built"]


def task_not_built(task: str) -> str:
    """The exact reason a recipe of another task is not built yet."""
    return (
        f"task {task}: the schema, plan and recipe exist, but this kiln has no export, "
        "runtime path or reference metric for it yet (the export and reference build "
        "decoder-only causal LMs with a KV cache)"
    )
