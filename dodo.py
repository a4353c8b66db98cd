"""doit entry point, thin: doit commands -> the tasks in tasks.py.

doit build recipe=NAME     build one recipe (or all), incrementally
doit check                 validate the catalog
doit plan recipe=NAME      what a build would run, with step keys
doit run recipe=NAME prompt="..."
doit site                  render the Models & Recipes site into _site/
doit verify                re-hash the store against records and locks (exit 0/4/5/6)
doit gc [dry_run=1]        remove stale temp dirs and unreferenced artifacts
"""

from doit import get_var

from tasks import (
    task_build,
    task_check,
    task_gc,
    task_generate,
    task_plan,
    task_schema,
    task_site,
    task_verify,
)

__all__ = [
    "task_build",
    "task_check",
    "task_gc",
    "task_generate",
    "task_plan",
    "task_schema",
    "task_site",
    "task_verify",
]

DOIT_CONFIG = {
    # `run` is doit's own command: `doit run recipe=X prompt=...` names no task, so
    # the default task decides. With a prompt it generates; otherwise it checks.
    "default_tasks": ["generate"] if get_var("prompt") is not None else ["check"],
    # sqlite3 tolerates several doit processes at once; dbm does not. Either way the
    # DB is only a hint: up-to-date is decided by the store.
    "backend": "sqlite3",
    "dep_file": ".doit.sqlite",
    "verbosity": 2,
}
