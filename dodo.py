"""doit entry point, thin: doit commands -> the tasks in tasks.py.

Every verb's variables, with their types and defaults: `doit help TASK`.

doit build recipe=NAME     build one recipe (or all), incrementally; -n 2 builds in parallel
doit check                 validate the catalog
doit plan recipe=NAME      what a build would run, with step keys
doit run recipe=NAME prompt="..."   (a speech recipe: audio=FILE.wav or a folder of them)
doit new name=NAME model=SOURCE   write recipes/NAME.yaml for a checkpoint (precision=...)
doit site                  render the Models & Recipes site into _site/
doit serve                 preview the site on http://127.0.0.1:8000/
doit diff base=REV         what a PR changes, as Markdown (format=json for a bot; exit 0/1)
doit verify                re-hash the store against records and locks (exit 0/4/5/6)
doit gc [dry_run=1]        remove stale temp dirs and unreferenced artifacts
doit replay [recipes=..] [tags=..] [changed_since=REV] [shard=i/n] [executor=local|ray]
                           re-measure recipes, report regressions (exit 0/1/2)
"""

import atexit
import gc
import os

from doit import get_var

# kiln validates with pydantic and uses no pydantic plugin; looking for plugins reads
# the entry points of every installed distribution, 80 ms of each `doit check` with
# the build extra installed. A user who does use one sets the variable themselves.
os.environ.setdefault("PYDANTIC_DISABLE_PLUGINS", "__all__")

import tasks

# An exiting interpreter tears down every module, its cyclic collector walking every
# live object on the way, pass after pass: after a cold check of 1,000 recipes,
# 0.13 s of a 0.8 s command. Frozen at exit, they are skipped, and refcounting
# frees them as their modules are cleared. Only the collector's finalizing of
# cycles still alive at exit is skipped, which Python never promises ("It is not
# guaranteed that __del__() methods are called for objects that still exist when
# the interpreter exits"): kiln closes what it opens. A process that runs doit
# in-process collects as usual until it exits.
atexit.register(gc.freeze)

# Every task_* creator in tasks.py is a doit task; listing them here again would
# only be one more place to forget a new one.
globals().update({name: f for name, f in vars(tasks).items() if name.startswith("task_")})

DOIT_CONFIG = {
    # `run` is doit's own command: `doit run recipe=X prompt=...` names no task, so
    # the default task decides: given any variable of `run`, it generates (and says
    # what is missing); otherwise it checks.
    "default_tasks": ["generate"] if any(get_var(v.name) for v in tasks.RUN.vars) else ["check"],
    # One recipe's failed step stops its own later steps, not the other recipes': a
    # catalog build goes on with every independent step, the summary naming what
    # failed and what was not run, and exits 1 as for any failed step (tasks.Run).
    "continue": True,
    # sqlite3 tolerates several doit processes at once; dbm does not. Either way the
    # DB is only a hint: up-to-date is decided by the store.
    "backend": "sqlite3",
    "dep_file": ".doit.sqlite",
    "verbosity": 2,
    # format=json: stdout is one JSON document, so doit's own lines go to stderr.
    "reporter": tasks.StderrReporter if get_var("format") == "json" else tasks.Reporter,
}
