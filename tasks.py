"""doit's task dicts, and nothing else: what each verb runs lives in kiln/commands/.

Every verb declares its variables in one table (name, type, default, help), in
kiln/commands/variables.py: `doit help TASK` lists them, `doit VERB name=value` sets
them, and a name the verb does not declare is an error with a did-you-mean.

`doit build` yields one `build:<kind>-<key>` subtask per step of the selected
recipes; steps with equal keys are yielded once, so recipes that share a checkpoint
share its fetch and export. A step is up to date when its artifact is in the store
(the store is the truth; doit's DB is only a hint). The last task of a recipe
writes its manifest.

Actions, titles and up-to-date checks are module-level functions with plain
arguments, so doit's process runner (`doit -n 2 build`) pickles them with the
standard pickle. Only the tasks a command runs load the catalog (`build` and `site`
are created when they run), and what they need is imported when they need it:
`doit check` imports neither the store nor tinyhub.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Iterator
from typing import Any

from doit import create_after, doit_cmd
from doit.cmd_base import DoitCmdBase
from doit.cmd_clean import Clean as DoitClean
from doit.cmd_completion import TabCompletion as DoitTabCompletion
from doit.cmd_forget import Forget as DoitForget
from doit.cmd_help import Help as DoitHelp
from doit.cmd_ignore import Ignore as DoitIgnore
from doit.cmd_info import Info as DoitInfo
from doit.cmd_list import List as DoitList
from doit.cmd_resetdep import ResetDep as DoitResetDep
from doit.cmd_run import Run as DoitRun
from doit.cmd_strace import Strace as DoitStrace
from doit.exceptions import TaskError, TaskFailed, UnmetDependency
from doit.reporter import ConsoleReporter

from kiln import hostinfo
from kiln.commands.variables import (
    ALL,
    BUILD,
    CHECK,
    DIFF,
    EXPORT,
    GC,
    NEW,
    PLAN,
    REPLAY,
    RUN,
    SCHEMA,
    SERVE,
    SITE,
    STATUS,
    VERIFY,
    Verb,
    resolve,
)
from kiln.errors import KilnError
from kiln.paths import Paths

Task = dict[str, Any]

VERBS = {v.name: v for v in ALL}
# `doit serve` runs `site` first: site accepts serve's variables without using them.
ALSO = {"site": [v.name for v in SERVE.vars]}


# What this `doit build` did, told each task's outcome by the reporter (set by
# task_build, in the main process whatever `-n` is).
SUMMARY: Any = None
# What failed in this run, as the reporter saw it (the main process): the failures,
# and the tasks doit skipped because a task they need failed (dodo.py's `continue`).
FAILED: list[Any] = []
SKIPPED: list[str] = []


class Reporter(ConsoleReporter):
    """doit's console reporter; at the end of a build, kiln's summary of it."""

    def execute_task(self, task: Any) -> None:
        self._for(task, super().execute_task, task)
        self._saw(task, "ran")

    def _for(self, task: Any, write: Callable[..., None], *args: Any) -> None:
        """`write`, on stderr for `doit run`'s task: its stdout is the generated text
        alone, so its title and its failure go to stderr."""
        out = self.outstream
        if task is not None and task.name == "generate":
            self.outstream = sys.stderr
        try:
            write(*args)
        finally:
            self.outstream = out

    def skip_uptodate(self, task: Any) -> None:
        super().skip_uptodate(task)
        self._saw(task, "reused")

    def add_failure(self, task: Any, fail: Any) -> None:
        if isinstance(fail, UnmetDependency):  # not run: a task it needs failed
            SKIPPED.append(task.name)
            if SUMMARY is None:  # a build's summary says "not run"; elsewhere one line
                self.write(f"-  {task.name}: not run (needs {fail.message})\n")
            return
        FAILED.append(fail)
        self._for(task, super().add_failure, task, fail)
        self._saw(task, "failed")

    def complete_run(self) -> None:
        generated = [f for f in self.failures if f["task"].name == "generate"]
        self._for(generated[0]["task"] if generated else None, super().complete_run)
        if SUMMARY is not None and SUMMARY.plans:
            self.outstream.write(SUMMARY.render() + "\n")

    def _saw(self, task: Any, outcome: str) -> None:
        if SUMMARY is not None and task.name.startswith("build:"):
            SUMMARY.saw(task.name, outcome)


class StderrReporter(Reporter):
    """doit's own lines (`.  diff`, a task's failure) on stderr, so that stdout holds
    only what the command prints: with `format=json`, one JSON document (dodo.py)."""

    def __init__(self, _outstream: Any, options: dict[str, Any]) -> None:
        super().__init__(sys.stderr, options)


def given() -> dict[str, str]:
    """Every `name=value` of the command line. doit keeps them in doit_cmd and offers
    only get_var(name); refusing unknown names needs them all."""
    return dict(doit_cmd._CMDLINE_VARS or {})


# ---------------------------------------------------------------- actions


def _title(task: Any) -> str:
    return str(task.meta["title"])


def command(verb: str) -> Callable[..., Any]:
    """The function `doit <verb>` runs, called with its variables by name. Imported
    when the verb runs: `doit check` never imports what `doit build` needs."""
    if verb == "check":
        from kiln.commands import check

        return check.check
    if verb == "plan":
        from kiln.commands import plan

        return plan.show_plan
    if verb == "status":
        from kiln.commands import status

        return status.show_status
    if verb == "diff":
        from kiln.commands import diff

        return diff.diff
    if verb == "run":
        from kiln.commands import run

        return run.generate
    if verb == "new":
        from kiln.commands import new

        return new.new
    if verb == "export":
        from kiln.commands import export

        return export.export
    if verb == "schema":
        from kiln.commands import schema

        return schema.regenerate
    if verb == "verify":
        from kiln.commands import verify

        return verify.verify
    if verb == "gc":
        from kiln.commands import gc

        return gc.gc
    if verb == "site":
        from kiln import site

        return site.command
    if verb == "serve":
        from kiln.serve import command as serve

        return serve.command
    if verb == "replay":
        from kiln.replay import driver

        return driver.command
    raise KeyError(verb)  # build runs its steps (task_build)


def run_verb(verb: str, values: dict[str, str]) -> TaskFailed | None:
    """A verb's action: its variables resolved and checked, its command run; a
    KilnError is a clean task failure (a message, no traceback)."""
    spec = VERBS[verb]
    try:
        code = command(verb)(**resolve(spec.vars, values, spec.name, ALSO.get(verb, ())))
    except KilnError as exc:
        return TaskFailed(f"error: {exc}")
    if isinstance(code, int) and not isinstance(code, bool) and code:
        sys.exit(code)  # doit's own codes are 1-3; verify's say what it found (README)
    return None


def run_step(name: str, plan: Any, key: str, origin: tuple[str, ...]) -> TaskFailed | None:
    """A step's action; a problem a builder raised without a location is pinned to the
    recipe line the step comes from."""
    from kiln.commands import build, workspace

    try:
        build.step(name, plan, key)
    except KilnError as exc:
        return TaskFailed(f"error: {workspace.located(exc, name, origin)}")
    return None


def run_build(function: Callable[..., Any], *args: Any) -> TaskFailed | None:
    """Any other build action (mirror, packaged checkpoints, manifest)."""
    try:
        function(*args)
    except KilnError as exc:
        return TaskFailed(f"error: {exc}")
    return None


def fail(message: str) -> TaskFailed:
    return TaskFailed(f"error: {message}")


def say(message: str) -> None:
    print(f"   {message}")


def run_replay(values: dict[str, str]) -> TaskFailed | TaskError | bool:
    """`doit replay`: exit 0 all good, 1 regressions (TaskFailed), 2 infrastructure
    failure or a replay that could not start (TaskError): doit's own exit codes for
    a failed and an erroring task."""
    try:
        code, path = command("replay")(**resolve(REPLAY.vars, values, REPLAY.name))
    except KilnError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return TaskError(f"replay could not run: {exc}")
    print(path.read_text())
    print(f"report: {path} and {path.with_name('junit.xml')}")
    if code == 2:
        return TaskError("replay: infrastructure failure (see the report)")
    if code == 1:
        return TaskFailed("replay: regressions (see the report)")
    return True


def _verb_task(verb: Verb, **extra: Any) -> Task:
    return {
        "doc": verb.doc(),
        "actions": [(run_verb, [verb.name, given()])],
        "uptodate": [False],
        "verbosity": 2,
        **extra,
    }


# ---------------------------------------------------------------- build


def _failing(name: str, message: str) -> Task:
    return {"name": name, "actions": [(fail, [message])], "uptodate": [False], "verbosity": 2}


def _note(name: str, message: str) -> Task:
    return {"name": name, "actions": [(say, [message])], "uptodate": [False], "verbosity": 2}


def _workers() -> int:
    """How many worker processes doit builds in: N of `doit -n N` with the process
    runner, else 1 (threads share one process's pools). doit keeps N on its runner
    only, so it is read there: `build` is created inside the runner's dispatch, which
    forks the workers once it has their first tasks."""
    from doit.runner import MRunner, MThreadRunner

    frame = sys._getframe(1)
    while frame is not None:
        runner = frame.f_locals.get("self")
        if isinstance(runner, MRunner):
            return 1 if isinstance(runner, MThreadRunner) else int(runner.num_process)
        frame = frame.f_back  # type: ignore[assignment]
    return 1


@create_after(executed=None, creates=["build"])
def task_build() -> Iterator[Task]:
    from kiln.commands import build, summary

    try:
        values = resolve(BUILD.vars, given(), BUILD.name)
        if values["publish"] is not None:  # the workers doit forks inherit it
            os.environ[hostinfo.PUBLISH] = "1" if values["publish"] else "0"
        hostinfo.publishes(hostinfo.scope())  # a bad KILN_PUBLISH, before anything runs
    except KilnError as exc:
        yield _failing("variables", str(exc))
        return
    if not values["verbose"]:
        build.quiet_libraries()
    targets = build.targets(values["recipe"])
    workers = _workers()
    build.share_cores(workers)  # before doit forks the workers,
    build.preload(targets, workers)  # which then start with the libraries imported
    allow = values["allow_quality_fail"]
    global SUMMARY
    SUMMARY = summary.Summary(targets.plans)
    for name, message in targets.notes:
        yield _note(name, message)
    hub = Paths.from_env().hub
    if targets.mirror:
        yield {
            "name": "mirror",
            "meta": {"title": f"mirror    tiny checkpoints -> {hub}"},
            "title": _title,
            "actions": [(run_build, [build.write_mirror, values["verbose"]])],
            "uptodate": [build.mirror_is_current],
            "verbosity": 2,
        }
    if targets.packaged:
        yield {
            "name": "packaged",
            "meta": {"title": f"packaged  {', '.join(targets.packaged)} -> {hub}"},
            "title": _title,
            "actions": [(run_build, [build.place_packaged, targets.packaged])],
            "uptodate": [(build.packaged_placed, [targets.packaged])],
            "verbosity": 2,
        }
    seen: dict[str, Any] = {}
    for p in targets.plans:
        by_key = p.by_key()
        for step in p.steps:
            if step.key in seen:
                continue
            seen[step.key] = step
            deps = [f"build:{summary.task_name(by_key[k])}" for k in step.inputs.values()]
            deps += [f"build:{name}" for name in targets.hub_tasks(step)]
            yield {
                "name": summary.task_name(step),
                "meta": {"title": f"{step.kind:<9} {step.name}  [{step.key[:12]}]"},
                "title": _title,
                "actions": [(run_step, [p.recipe, p, step.key, step.origin])],
                "task_dep": deps,
                "uptodate": [(build.built, [step.key])],
                "verbosity": 2,
            }
        path = Paths.from_env().rel(Paths.from_env().manifest(p.recipe))
        yield {
            "name": f"manifest-{p.recipe}",
            "meta": {"title": f"manifest  {p.recipe} -> {path}"},
            "title": _title,
            "actions": [(run_build, [build.manifest, p.recipe, p, allow])],
            "task_dep": [f"build:{summary.task_name(p.step('validate'))}"],
            "uptodate": [(build.recorded, [p.recipe, p, allow])],
            "verbosity": 2,
        }
    for name, error in targets.failures:
        yield _failing(name, str(error))


task_build.__doc__ = BUILD.doc()


# ---------------------------------------------------------------- the other verbs


def task_check() -> Task:
    return _verb_task(CHECK)


def task_plan() -> Task:
    return _verb_task(PLAN)


def task_status() -> Task:
    return _verb_task(STATUS)


def task_diff() -> Task:
    return _verb_task(DIFF)


def task_generate() -> Task:
    return _verb_task(RUN)


@create_after(executed=None, creates=["site"])
def task_site() -> Task:
    from kiln import site

    paths = Paths.from_env()
    return _verb_task(
        SITE,
        file_dep=[str(p) for p in site.inputs(paths)],
        targets=[str(paths.site / "index.html")],
        clean=True,
        uptodate=[],
    )


task_site.__doc__ = SITE.doc()


def task_serve() -> Task:
    return _verb_task(SERVE, task_dep=["site"])


def task_new() -> Task:
    return _verb_task(NEW)


def task_export() -> Task:
    return _verb_task(EXPORT)


def task_schema() -> Task:
    return _verb_task(SCHEMA)


def task_verify() -> Task:
    return _verb_task(VERIFY)


def task_gc() -> Task:
    return _verb_task(GC)


def task_replay() -> Task:
    return {
        "doc": REPLAY.doc(),
        "actions": [(run_replay, [given()])],
        "uptodate": [False],
        "verbosity": 2,
    }


# doit's commands, as pyproject.toml's `[project.entry-points."doit.COMMAND"]` installs
# them in place of doit's own: an installed entry point is found wherever doit runs,
# whereas doit reads its config files (pyproject.toml, doit.cfg) only in the folder it
# runs in. Every command that loads dodo.py is here, so that each works from any
# folder of the repository.


class Anywhere(DoitCmdBase):  # type: ignore[misc]  # doit ships no types
    """A doit command that works from any folder of the repository as from its root:
    it seeks dodo.py in the folders above (doit's `-k`, on by default here), and doit
    then works in dodo.py's folder, the root, as kiln's paths do (kiln/paths.py).
    `seek_file = False` in a doit.cfg, or DOIT_SEEK_FILE=0, turns it off."""

    def get_options(self) -> list[Any]:
        options: list[Any] = super().get_options()
        for option in options:
            if option.name == "seek_file":
                option.default = True
        return options


class Run(Anywhere, DoitRun):  # type: ignore[misc]
    """`doit VERB` (and `doit run`): every kiln verb is a task doit's run runs.

    With `continue` (dodo.py), doit reports each task skipped for a failed one as an
    UnmetDependency, a TaskError, and so exits 2, "a task raised". kiln's exit codes
    (README) say 1 for a failed step, its dependents not run: where every failure was a
    task failing (TaskFailed) and the rest were skipped for them, the exit is 1. A task
    that raised, or replay's infrastructure failure (a TaskError), still exits 2."""

    def execute(self, params: Any, args: Any) -> int:
        FAILED.clear()
        SKIPPED.clear()
        code: int = super().execute(params, args)
        if code == 2 and SKIPPED and FAILED and all(isinstance(f, TaskFailed) for f in FAILED):
            return 1
        return code


class Info(Anywhere, DoitInfo):  # type: ignore[misc]
    """`doit info TASK`."""


class Clean(Anywhere, DoitClean):  # type: ignore[misc]
    """`doit clean`."""


class Forget(Anywhere, DoitForget):  # type: ignore[misc]
    """`doit forget`."""


class Ignore(Anywhere, DoitIgnore):  # type: ignore[misc]
    """`doit ignore`."""


class Strace(Anywhere, DoitStrace):  # type: ignore[misc]
    """`doit strace`."""


class ResetDep(Anywhere, DoitResetDep):  # type: ignore[misc]
    """`doit reset-dep`."""


class TabCompletion(Anywhere, DoitTabCompletion):  # type: ignore[misc]
    """`doit tabcompletion`."""


class Help(Anywhere, DoitHelp):  # type: ignore[misc]
    """`doit help`, kiln's verbs first (kiln/commands/help.py), in place of doit's own."""

    def execute(self, params: Any, args: list[str]) -> int:
        from kiln.commands import help as kiln_help

        found = kiln_help.text(args)
        if found is None:
            return int(super().execute(params, args))
        return _page(found)


class List(Anywhere, DoitList):  # type: ignore[misc]
    """`doit list`: kiln's verbs by the names users type (`run`, not the `generate` task
    behind it), one line each, as `doit help` shows them; with an option or a task
    name (`doit list --all`, `doit list build`), doit's own list."""

    def execute(self, params: Any, args: list[str]) -> int:
        from kiln.commands import help as kiln_help

        options = ("subtasks", "status", "private", "list_deps", "template")
        if args or any(params.get(k) for k in options):
            return int(super().execute(params, args))
        return _page(kiln_help.text([]) or "")


def _page(text: str) -> int:
    """Print help text; a reader that stops early (`| head`) ends it quietly."""
    try:
        print(text, flush=True)
    except BrokenPipeError:
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    return 0
