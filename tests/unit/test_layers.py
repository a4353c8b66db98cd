"""The layout's rules, read off the code (REDESIGN section 5; issue 13, item 6).

Two kinds of evidence: what Python actually imports when a user runs a command
(`-X importtime`), and what the source says it reaches (the AST): every import
statement, lazy ones inside functions too, so a rule cannot be dodged by moving an
import into a function; importlib.import_module and __import__ of a literal; and a
string naming one of our modules ("runtime.causal_lm:Bundle", as runtime's RUNNERS
table holds), which code elsewhere imports by name (issue 38, item 3).

  1. The core imports no heavy library, no builder and no runtime module; only the
     `run` command and the API server (kiln/serve/) reach runtime/, inside their
     functions, and only commands/ reach tinyhub/. kiln.plan.toolchain names builder modules (the dispatch rule), and
     kiln.store.execute imports by that rule alone.
  2. Inside the core, each stage imports only the ground floor and the stages to its
     left: catalog -> plan -> store -> evidence -> {site, commands} -> {replay, serve}.
  3. runtime/ imports nothing from kiln, builders or tasks.
  4. builders/ import from kiln only the contract types (kiln.store.api), under
     TYPE_CHECKING, and kiln's pure-stdlib leaves.
  5. Only tasks.py and dodo.py import doit; they reach builders, runtime/, tinyhub
     and the heavy libraries only through a command.
  6. An `_x.py` module, or a `_name` in a module, is used only from its own folder;
     bench/ too, but for the places it lists.
  7. `doit <verb>` runs a function of kiln/commands/<verb>.py (site, serve and replay:
     their stage packages are the command).
  8. Every package's __init__.py maps its modules, one line each, by exact name.

Each rule fails a line written to break it (PROBES) and passes one that keeps it.
"""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest
from conftest import BANNED, ROOT, SLOW

# ---------------------------------------------------------------- what Python imports


def imported_modules(*args: str) -> set[str]:
    """Every module Python imports while running `args` (via -X importtime)."""
    proc = subprocess.run(
        [sys.executable, "-X", "importtime", *args],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=SLOW,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    names = set()
    for line in proc.stderr.splitlines():
        if line.startswith("import time:") and "|" in line:
            names.add(line.rsplit("|", 1)[1].strip())
    assert names, "importtime printed nothing; the test would prove nothing"
    return names


def heavy_in(names: set[str]) -> set[str]:
    return {n for n in names if n.split(".")[0] in BANNED}


def ours_outside_core(names: set[str]) -> set[str]:
    return {n for n in names if n.split(".")[0] in ("builders", "runtime")}


def test_importing_the_core_imports_nothing_heavy() -> None:
    modules = sorted(
        ".".join(p.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__")
        for p in (ROOT / "kiln").rglob("*.py")
    )
    names = imported_modules("-c", f"import {', '.join(modules)}, tasks, dodo")
    assert {"kiln.plan", "tasks", "kiln.replay.ray_executor", "kiln.site"} <= names
    assert heavy_in(names) == set()
    assert ours_outside_core(names) == set()
    # Ray is imported by the Ray executor's run() only, never by importing kiln.
    assert {n for n in names if n.split(".")[0] == "ray"} == set()


@pytest.mark.parametrize(
    "command", [("list",), ("check",), ("plan", "recipe=tiny-llama"), ("help", "build")]
)
def test_doit_commands_that_read_the_catalog_import_nothing_heavy(command: tuple[str]) -> None:
    names = imported_modules("-m", "doit", *command)
    assert "kiln.catalog" in names or command[0] in ("list", "help")
    assert heavy_in(names) == set(), command
    assert ours_outside_core(names) == set(), command


# ---------------------------------------------------------------- what the source says


@dataclass(frozen=True)
class Import:
    """One way a file reaches a module. `how`: an `import` or `from` statement; a
    "call" of importlib.import_module or __import__ with a literal name; or a "name",
    a string that names one of our modules ("pkg.mod" or "pkg.mod:attr", as in
    runtime's RUNNERS table) for code elsewhere to import."""

    module: str  # the absolute module reached (for `from a import b`: a, and a.b)
    line: int
    in_function: bool
    type_checking: bool
    how: str = "import"
    names: tuple[str, ...] = ()  # what `from a import ...` (or "a:attr") takes from a


def _module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts if path != ROOT else ()
    return ".".join(parts).removesuffix(".__init__")


IMPORTERS = ("import_module", "__import__")  # importlib.import_module, the builtin
# A string that names a module of ours: "runtime.causal_lm", "runtime.causal_lm:Bundle".
NAMED = re.compile(r"[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)+(?::(\w+))?|[A-Za-z_]\w*:(\w+)")


def imports(path: Path, text: str | None = None) -> list[Import]:
    """Every way a file reaches a module, with where it sits (lazy or not, under
    TYPE_CHECKING or not): import statements, import_module/__import__ of a literal,
    and strings naming a module of ours (docstrings aside)."""
    tree = ast.parse(path.read_text() if text is None else text)
    package = _module_name(path) if path.name == "__init__.py" else _module_name(path.parent)
    skip = {id(doc) for doc in _docstrings(tree)}
    found: list[Import] = []

    def visit(node: ast.AST, in_function: bool, type_checking: bool) -> None:
        for child in ast.iter_child_nodes(node):
            lazy = in_function or isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef)
            guarded = type_checking or (
                isinstance(child, ast.If) and ast.unparse(child.test).endswith("TYPE_CHECKING")
            )
            where = (child.lineno if hasattr(child, "lineno") else 0, in_function, guarded)
            if isinstance(child, ast.Import):
                found.extend(Import(_absolute(path, a.name), *where) for a in child.names)
            elif isinstance(child, ast.ImportFrom):
                base = _absolute(path, _resolve(child.module or "", child.level, package))
                names = tuple(a.name for a in child.names)
                found.append(Import(base, *where, "from", names))
                found.extend(
                    Import(f"{base}.{name}", *where, "from")
                    for name in names
                    if _is_module(f"{base}.{name}")
                )
            elif isinstance(child, ast.Call) and (called := _called(child, package)):
                skip.add(id(child.args[0]))  # the literal is this call's, not a name
                found.append(Import(_absolute(path, called), *where, "call"))
            elif (
                isinstance(child, ast.Constant)
                and isinstance(child.value, str)
                and id(child) not in skip
                and (named := NAMED.fullmatch(child.value))
                and _is_module(module := child.value.partition(":")[0])
            ):
                attr = named.group(1) or named.group(2)
                found.append(Import(module, *where, "name", (attr,) if attr else ()))
            visit(child, lazy, guarded)

    visit(tree, False, False)
    return found


def _docstrings(tree: ast.Module) -> list[ast.expr]:
    holders = [n for n in ast.walk(tree) if isinstance(n, ast.Module | ast.ClassDef)]
    holders += [n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)]
    return [
        first.value
        for n in holders
        if n.body
        and isinstance(first := n.body[0], ast.Expr)
        and isinstance(first.value, ast.Constant)
        and isinstance(first.value.value, str)
    ]


def _resolve(module: str, level: int, package: str) -> str:
    """`from ..x import y`'s module, absolute (level: how many dots)."""
    if not level:
        return module
    parts = package.split(".")[: len(package.split(".")) - level + 1]
    return ".".join([*parts, *([module] if module else [])])


def _called(call: ast.Call, package: str) -> str | None:
    """The module an import_module(...) or __import__(...) call names, when it is a
    literal ("..x" with a literal or this file's package as the anchor)."""
    func = call.func
    name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", None)
    if name not in IMPORTERS or not call.args:
        return None
    first = call.args[0]
    if not isinstance(first, ast.Constant) or not isinstance(first.value, str):
        return None
    target = first.value
    if not target.startswith("."):
        return target
    anchor = [a.value for a in call.args[1:2] if isinstance(a, ast.Constant)]
    anchor += [k.value.value for k in call.keywords if isinstance(k.value, ast.Constant)]
    dots = len(target) - len(target.lstrip("."))
    return _resolve(target.lstrip("."), dots, str(anchor[0]) if anchor else package)


def _absolute(path: Path, module: str) -> str:
    """bench/ runs as scripts, with bench/ first on sys.path: there `import _process`
    is bench/_process.py."""
    head = module.split(".")[0]
    if path.parent == ROOT / "bench" and (ROOT / "bench" / f"{head}.py").is_file():
        return f"bench.{module}"
    return module


def _is_module(dotted: str) -> bool:
    path = ROOT / Path(*dotted.split("."))
    return path.with_suffix(".py").is_file() or (path / "__init__.py").is_file()


def sources(folder: str) -> list[Path]:
    files = sorted((ROOT / folder).rglob("*.py"))
    assert files, f"no Python files under {folder}/: the rule would prove nothing"
    return files


Rule = Callable[[Path, Import], "bool | str"]


def violations(folder: str, allowed: Rule, files: list[Path] | None = None) -> list[str]:
    out = []
    for path in sources(folder) if files is None else files:
        for imp in imports(path):
            verdict = allowed(path, imp)
            if verdict is not True:
                out.append(f"{path.relative_to(ROOT)}:{imp.line}: {imp.module} ({verdict})")
    return out


GROUND = {"kiln", "kiln.schema", "kiln.errors", "kiln.canonical", "kiln.fsio", "kiln.hostinfo"}
GROUND |= {f"kiln.schema.{m}" for m in ("vocabulary", "recipe", "thresholds", "manifest")}
GROUND |= {"kiln.paths", "kiln.statcache", "kiln.pins", "kiln.proc", "kiln.headers"}
# The pure-stdlib leaves builders may import beside the contract (kiln.plan.toolchain
# LEAVES: followed into their steps' keys).
LEAVES = {"kiln.pins", "kiln.proc"}
CONTRACT = "kiln.store.api"  # the builder contract: Request and Writer, nothing else
STAGES = {"catalog": 0, "plan": 1, "store": 2, "evidence": 3, "site": 4, "commands": 4}
STAGES["replay"] = STAGES["serve"] = 5


def _stage(module: str) -> str | None:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 and parts[0] == "kiln" and parts[1] in STAGES else None


def _core_rule(path: Path, imp: Import) -> bool | str:
    top = imp.module.split(".")[0]
    here = _module_name(path)
    if top in BANNED:
        return "a heavy library in the core"
    if top == "builders" and here == "kiln.plan.toolchain" and imp.how == "name":
        return True  # the dispatch rule names builder modules; execute imports by it alone
    if top == "doit" or top == "tasks" or top == "builders":
        return "the core never imports doit, tasks.py or a builder"
    if top == "runtime":
        runs = here in ("kiln.commands.run", "kiln.serve.models", "kiln.serve.app")
        return (runs and imp.in_function) or "only run and serve reach runtime/, in functions"
    if top == "tinyhub":
        return _stage(here) == "commands" or "only commands/ reach tinyhub/"
    if top != "kiln" or imp.module in GROUND:
        return True
    mine, theirs = _stage(here), _stage(imp.module)
    if mine is None:  # a ground-floor module
        return "the ground floor imports only the ground floor"
    if theirs is None:
        return f"{imp.module} is neither a stage nor the ground floor"
    if theirs == mine or STAGES[theirs] < STAGES[mine]:
        return True
    return f"stage {mine} may import only stages to its left, not {theirs}"


def test_the_core_imports_only_leftwards_and_nothing_heavy() -> None:
    assert violations("kiln", _core_rule) == []


def test_the_leaves_import_only_the_standard_library_and_each_other() -> None:
    for module in LEAVES:
        path = ROOT / Path(*module.split(".")).with_suffix(".py")
        for imp in imports(path):
            top = imp.module.split(".")[0]
            ours = top in ("kiln", "builders", "runtime", "tinyhub", "tasks")
            assert imp.module in LEAVES | {"kiln"} or (
                not ours and top in sys.stdlib_module_names
            ), f"{path.relative_to(ROOT)}:{imp.line}: {imp.module}"


def _runtime_rule(_path: Path, imp: Import) -> bool | str:
    top = imp.module.split(".")[0]
    return top not in ("kiln", "builders", "tasks", "tinyhub", "doit") or "runtime stands alone"


def test_runtime_imports_nothing_from_kiln_builders_or_tasks() -> None:
    assert violations("runtime", _runtime_rule) == []


def _builders_rule(_path: Path, imp: Import) -> bool | str:
    top = imp.module.split(".")[0]
    if top in ("tasks", "doit", "tinyhub"):
        return "builders never import tasks.py, doit or tinyhub"
    if top != "kiln":
        return True
    # `from kiln.store import api` takes the contract module, `from kiln.store import
    # Store` the store itself: the names decide.
    if imp.module == CONTRACT or (imp.module == "kiln.store" and set(imp.names) == {"api"}):
        return imp.type_checking or "the contract types, under TYPE_CHECKING only"
    leaf_names = {leaf.rpartition(".")[2] for leaf in LEAVES}
    if imp.module in LEAVES or (
        imp.module == "kiln" and imp.names and set(imp.names) <= leaf_names
    ):
        return True  # `from kiln import pins`, `from kiln.pins import ...`
    return f"only {CONTRACT}'s types under TYPE_CHECKING, and kiln's leaves"


def test_builders_see_the_core_only_as_the_contract_types() -> None:
    assert violations("builders", _builders_rule) == []


def _tasks_rule(_path: Path, imp: Import) -> bool | str:
    """tasks.py and dodo.py wire verbs to commands: lazy imports inside a task function
    too reach only the ground floor and the stages that are commands."""
    top = imp.module.split(".")[0]
    if top in BANNED or top in ("builders", "runtime", "tinyhub"):
        return "tasks.py and dodo.py reach builders, runtime/ and tinyhub only through a command"
    if top != "kiln" or imp.module in GROUND:
        return True
    return (
        _stage(imp.module) in ("commands", "site", "replay", "serve") or "only the command stages"
    )


def test_tasks_and_dodo_reach_the_core_only_through_its_commands() -> None:
    files = [ROOT / "tasks.py", ROOT / "dodo.py"]
    assert violations(".", _tasks_rule, files) == []


def test_only_tasks_and_dodo_import_doit() -> None:
    files = [p for p in ROOT.rglob("*.py") if not _ignored(p)]
    importers = {
        p.relative_to(ROOT).as_posix()
        for p in files
        if any(i.module.split(".")[0] == "doit" for i in imports(p))
    }
    assert importers == {"tasks.py", "dodo.py"}


def _ignored(path: Path) -> bool:
    parts = path.relative_to(ROOT).parts
    # hidden folders are tools' (.venv, .kiln, a helper's staging copy), not the project's
    return parts[0].startswith(".") or parts[0] in ("node_modules", "_site", "build", "tests")


OURS = ("kiln", "builders", "runtime", "tinyhub", "bench", "tasks")


def _private_to(dotted: str) -> str | None:
    """The folder (as a package) that the first underscore part of `dotted`, one of our
    modules or a name in one, is private to: an `_x.py` module's folder, or the folder
    of the module defining a `_name`."""
    parts = dotted.split(".")
    if parts[0] not in OURS:
        return None  # another project's privacy is its own business
    for i, part in enumerate(parts):
        if part.startswith("_") and not part.startswith("__"):
            if ROOT.joinpath(*parts[:i], f"{part}.py").is_file():
                return ".".join(parts[:i])  # an `_x.py` module: its folder's
            package = ROOT.joinpath(*parts[:i], "__init__.py").is_file()
            return ".".join(parts[: i if package else i - 1])  # a name: its module's folder's
    return None


def _private_rule(path: Path, imp: Import) -> bool | str:
    """An `_x.py` module, or a `_name` in a module, is private to its folder (and the
    folders below it, such as builders/causal_lm/backends/)."""
    here = ".".join(path.relative_to(ROOT).parent.parts)
    for dotted in (imp.module, *(f"{imp.module}.{name}" for name in imp.names)):
        owner = _private_to(dotted)
        if owner is not None and not f"{here}.".startswith(f"{owner}."):
            return f"{dotted} is private to {owner.replace('.', '/')}/"
    return True


# What bench/ takes from builders' private modules, each place listed (file, module:
# how many imports): a settled probe of lm_head quantization (_nbits), measured as the
# builder runs it. The validate step's scoring, which the chat benchmark measures its
# peers with, is public (builders/causal_lm/scoring.py). A new place fails the test;
# one made public must leave the list.
BENCH_USES_PRIVATE = {
    ("bench/probes/lm_head_variants.py", "builders.causal_lm._nbits"): 2,
}


def test_underscore_modules_and_names_stay_in_their_own_folder() -> None:
    for folder in ("kiln", "builders", "runtime", "tinyhub"):
        assert violations(folder, _private_rule) == []
    bench: Counter[tuple[str, str]] = Counter()
    for path in sources("bench"):
        reached = {(i.line, i.module) for i in imports(path) if _private_rule(path, i) is not True}
        bench.update((path.relative_to(ROOT).as_posix(), module) for _, module in reached)
    assert dict(bench) == BENCH_USES_PRIVATE


# ---------------------------------------------------------------- the rules fail

BUILDER = ROOT / "builders" / "classify" / "export.py"
CORE = ROOT / "kiln" / "catalog" / "__init__.py"
EXECUTE = ROOT / "kiln" / "store" / "execute.py"
RUNTIME = ROOT / "runtime" / "__init__.py"
TASKS = ROOT / "tasks.py"
BENCH = ROOT / "bench" / "chat_peers.py"
TYPING = "from typing import TYPE_CHECKING\n\nif TYPE_CHECKING:\n"

# (rule, file, text): each text breaks its rule. The holes of issue 38 item 3 first.
PROBES: list[tuple[Rule, Path, str]] = [
    # modules reached through import_module or __import__ (kiln -> builders, runtime -> kiln)
    (_core_rule, EXECUTE, 'import importlib\n\nimportlib.import_module("builders.gguf")\n'),
    (
        _core_rule,
        EXECUTE,
        'def f():\n    from importlib import import_module\n    import_module("builders.fetch")\n',
    ),
    (_core_rule, CORE, '__import__("builders.fetch")\n'),
    (_core_rule, CORE, 'import importlib\n\nimportlib.import_module(".causal_lm", "builders")\n'),
    (
        _runtime_rule,
        RUNTIME,
        'import importlib\n\ndef f():\n    importlib.import_module("kiln.paths")\n',
    ),
    (_runtime_rule, RUNTIME, 'def f():\n    return __import__("kiln")\n'),
    # names in RUNNERS-style tables, imported by name elsewhere
    (_runtime_rule, RUNTIME, 'RUNNERS = {"text-generation": {"ordinary": "kiln.store:Store"}}\n'),
    (_core_rule, EXECUTE, 'PRELOAD = ("builders.gguf",)\n'),
    # lazy imports inside tasks.py
    (_tasks_rule, TASKS, "def task_x():\n    from builders import fetch\n"),
    (_tasks_rule, TASKS, "def task_x():\n    import runtime\n"),
    (_tasks_rule, TASKS, "def task_x():\n    import torch\n"),
    # builders type-checking against kiln.store beyond its api
    (_builders_rule, BUILDER, TYPING + "    from kiln.store import Store\n"),
    (_builders_rule, BUILDER, TYPING + "    import kiln.store\n"),
    (_builders_rule, BUILDER, TYPING + "    from kiln.store import Store, api\n"),
    (_builders_rule, BUILDER, "from kiln.store.api import Request\n"),  # not for type checking
    (_builders_rule, BUILDER, "from kiln import schema\n"),
    # bench/ takes builders' private modules
    (
        _private_rule,
        BENCH,
        "def f():\n    from builders.causal_lm._nbits import quantize_lm_head\n",
    ),
    (_private_rule, BENCH, "from builders.causal_lm import _cache\n"),
    (_private_rule, BENCH, 'import importlib\n\nimportlib.import_module("runtime._x")\n'),
    (_private_rule, BENCH, "from builders.causal_lm.export import _MODES\n"),
    # what the rules caught before
    (_private_rule, BUILDER, "from builders.causal_lm import _cache\n"),
    (_core_rule, BUILDER, "def f():\n    import torch\n"),
    (_core_rule, CORE, "from kiln.store import Store\n"),
    (_core_rule, CORE, "import runtime\n"),
    (_core_rule, CORE, "import builders.fetch\n"),
]
# (rule, file, text): each text keeps its rule, so a rule cannot pass probes by
# refusing everything.
KEPT: list[tuple[Rule, Path, str]] = [
    (_core_rule, CORE, "from kiln import paths\n"),
    (
        _core_rule,
        ROOT / "kiln" / "plan" / "toolchain.py",
        'HALF = "builders.causal_lm.backends.onnxruntime"\n',
    ),
    (
        _core_rule,
        EXECUTE,
        "def f(module):\n    import importlib\n    return importlib.import_module(module)\n",
    ),
    (
        _runtime_rule,
        RUNTIME,
        'RUNNERS = {"text-generation": {"ordinary": "runtime.causal_lm:Bundle"}}\n',
    ),
    (_builders_rule, BUILDER, TYPING + "    from kiln.store.api import Request, Writer\n"),
    (_builders_rule, BUILDER, TYPING + "    from kiln.store import api\n"),
    (_builders_rule, BUILDER, "from kiln import pins\nfrom kiln.proc import run\n"),
    (
        _tasks_rule,
        TASKS,
        "def task_x():\n    from kiln.commands import build\n    from kiln import site\n",
    ),
    (_private_rule, BENCH, "from _process import peak_rss\nfrom builders.data import texts\n"),
    (
        _private_rule,
        ROOT / "builders" / "causal_lm" / "export.py",
        "from builders.causal_lm import _cache\n",
    ),
]


@pytest.mark.parametrize(("rule", "path", "text"), PROBES)
def test_each_rule_fails_a_line_written_to_break_it(rule: Rule, path: Path, text: str) -> None:
    found = imports(path, text)
    assert found and any(rule(path, i) is not True for i in found), text


@pytest.mark.parametrize(("rule", "path", "text"), KEPT)
def test_each_rule_passes_a_line_that_keeps_it(rule: Rule, path: Path, text: str) -> None:
    found = imports(path, text)
    assert found and all(rule(path, i) is True for i in found), text


def test_a_package_map_is_read_by_exact_module_name() -> None:
    """`api` is not mapped by a line for `capital.py` or `api_v2.py`, nor by prose
    that mentions it (a substring match took all three)."""
    for doc in ("  capital.py  holds no api\n", "  api_v2.py  the next api\n", "The api.\n"):
        assert _unmapped(doc, ["api"]) == ["api"], doc
    kept = {
        "  api.py  the contract\n": "api",
        "cache/   c\napi.py  a\n": "api",
        "_api _x\n": "_api",
    }
    for doc, name in kept.items():
        assert _unmapped(doc, [name]) == [], doc


# ---------------------------------------------------------------- commands and maps

# doit's own `run` command names no task: `doit run ... prompt=` runs task `generate`.
VERB_OF_TASK = {"generate": "run"}
STAGE_COMMANDS = {"site": "kiln.site", "serve": "kiln.serve.command", "replay": "kiln.replay"}


def test_each_doit_task_runs_a_function_of_its_command_module() -> None:
    tree = ast.parse((ROOT / "tasks.py").read_text())
    tasks = [n.name.removeprefix("task_") for n in tree.body if isinstance(n, ast.FunctionDef)]
    tasks = [t for t in tasks if not t.startswith("_") and f"task_{t}" in ast.unparse(tree)]
    assert {"build", "check", "plan", "diff", "generate", "site"} <= set(tasks)
    used = {i.module for i in imports(ROOT / "tasks.py")}
    for task in tasks:
        verb = VERB_OF_TASK.get(task, task)
        module = STAGE_COMMANDS.get(verb, f"kiln.commands.{verb}")
        assert _is_module(module), f"doit {verb}: no module {module}"
        assert module in used, f"tasks.py never imports {module} for task {task}"


def _mapped(doc: str) -> set[str]:
    """The names a package docstring maps, exactly. A map line starts with a module
    (`export.py`, `backends/`: whatever follows), or with names and then two spaces
    or more (`onnxruntime  the ONNX graph`, `schema.py errors.py   the ground floor`),
    or holds names alone, each with a .py or / suffix or a leading underscore
    (`_adapter _attention _cache`); prose maps nothing."""
    names: set[str] = set()
    for line in doc.splitlines():
        head, *gap = re.split(r" {2,}", line.strip(), maxsplit=1)
        tokens = head.split(" ")
        if re.fullmatch(r"\w+(\.py|/)", tokens[0]):
            names.add(tokens[0].removesuffix(".py").removesuffix("/"))
        if not all(re.fullmatch(r"[A-Za-z_]\w*(\.py|/)?", t) for t in tokens):
            continue
        if gap or all(t.endswith((".py", "/")) or t.startswith("_") for t in tokens):
            names |= {t.removesuffix(".py").removesuffix("/") for t in tokens}
    return names


def _unmapped(doc: str, modules: list[str]) -> list[str]:
    mapped = _mapped(doc)
    return [name for name in modules if name not in mapped]


def test_every_package_maps_its_modules_in_its_docstring() -> None:
    missing = []
    for folder in ("kiln", "builders", "runtime"):
        for init in sorted((ROOT / folder).rglob("__init__.py")):
            doc = ast.get_docstring(ast.parse(init.read_text())) or ""
            modules = [
                child.stem if child.suffix == ".py" else child.name
                for child in sorted(init.parent.iterdir())
                if (child.suffix == ".py" and child.name != "__init__.py")
                or (child.is_dir() and (child / "__init__.py").is_file())
            ]
            missing += [f"{init.relative_to(ROOT)}: {name}" for name in _unmapped(doc, modules)]
    assert missing == []


def test_unit_and_func_tests_need_no_build_extra() -> None:
    """tests/unit/ and tests/func/ run without torch, transformers, onnx and onnxruntime:
    real builds live in tests/builds/ (and site checks of built recipes in tests/e2e/)."""
    unit = sorted((ROOT / "tests" / "unit").glob("test_*.py"))
    unit += sorted((ROOT / "tests" / "func").glob("test_*.py"))
    assert len(unit) > 20
    marked = []
    for path in unit:
        tree = ast.parse(path.read_text())
        names = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name)}
        if "heavy" in names:  # the build-extra marker (conftest.heavy), used or applied
            marked.append(path.name)
    assert marked == []
