"""Every process kiln starts goes through kiln/proc.py, and no user value reaches a
program as an option (issue 37).

Read off the code (the AST, so a call cannot hide in a function): outside kiln/proc.py
nothing imports subprocess or calls os.system, os.exec*, os.spawn*, os.popen,
pty.spawn or asyncio's subprocess functions; and every call of kiln.proc is one of the
CALLS below, each with the way its values are guarded. A new call fails the test until
it is added there, which is where a reviewer sees it.

Then the two holes the issue found, as a user meets them through doit.
"""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import ROOT, SLOW

from kiln import pins, proc

PRODUCT = ("kiln", "builders", "runtime", "tinyhub")
STARTERS = {
    "os": {"system", "popen", "posix_spawn", "posix_spawnp", "fork", "forkpty"},
    "pty": {"spawn"},
    "asyncio": {"create_subprocess_exec", "create_subprocess_shell"},
}
STARTER_PREFIXES = {"os": ("exec", "spawn")}

# file -> {kiln.proc function called there: how the values it passes are guarded}
CALLS: dict[str, dict[str, str]] = {
    "kiln/pins.py": {
        "run": "pip download: the spec after `--`, name and version by the schema's rule"
    },
    "kiln/commands/diffing.py": {
        "git_object": "base=REV resolved to a tree id with --end-of-options",
        "run_bytes": "git archive of that tree id, never the value",
    },
    "kiln/replay/select.py": {
        "git_object": "changed_since=REV resolved to a commit id with --end-of-options",
        "git_lines": "git diff and ls-files of that id; the pathspec after `--`",
    },
    "kiln/site/__init__.py": {
        "git_lines": "rev-parse HEAD: constants only",
        "run": "git diff --quiet HEAD: the pathspecs after `--`",
    },
    "kiln/hostinfo.py": {"run": "nvidia-smi with constant options"},
    "builders/common/child.py": {
        "run": "python -m (a builders module, a constant of its caller): after `--` the "
        "inductor engine's compile|check and work folder, or the determinism job file, "
        "both in temp dirs"
    },
    "kiln/replay/chain.py": {
        "start": "python -m kiln.replay.step; the step travels as JSON on stdin",
        "kill_group": "the child's own process group",
    },
}


def _files() -> list[Path]:
    found = [ROOT / "tasks.py", ROOT / "dodo.py"]
    for top in PRODUCT:
        found += sorted((ROOT / top).rglob("*.py"))
    return found


def process_starts(tree: ast.AST) -> list[tuple[int, str]]:
    """(line, what) for every way a module could start a process itself."""
    found: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [
                (node.lineno, f"import {a.name}") for a in node.names if a.name == "subprocess"
            ]
        elif isinstance(node, ast.ImportFrom) and node.module == "subprocess":
            found.append((node.lineno, "from subprocess import"))
        elif isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
            base, attr = node.value.id, node.attr
            if attr in STARTERS.get(base, ()) or attr.startswith(
                STARTER_PREFIXES.get(base, ("\0",))
            ):
                found.append((node.lineno, f"{base}.{attr}"))
    return found


def proc_calls(tree: ast.AST) -> set[str]:
    """The kiln.proc functions a module calls (`proc.run(...)`)."""
    return {
        node.func.attr
        for node in ast.walk(tree)
        if isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and isinstance(node.func.value, ast.Name)
        and node.func.value.id == "proc"
        and node.func.attr in {"run", "run_bytes", "start", "kill_group", "git_object", "git_lines"}
    }


def test_only_kiln_proc_starts_processes() -> None:
    offenders = []
    for path in _files():
        if path == ROOT / "kiln" / "proc.py":
            continue
        for line, what in process_starts(ast.parse(path.read_text())):
            offenders.append(f"{path.relative_to(ROOT)}:{line}: {what}")
    assert offenders == []


def test_every_call_of_kiln_proc_is_listed_with_its_guard() -> None:
    calls = {}
    for path in _files():
        found = proc_calls(ast.parse(path.read_text()))
        if found:
            calls[path.relative_to(ROOT).as_posix()] = found
    assert calls == {f: set(v) for f, v in CALLS.items()}


def test_the_checks_see_a_process_started_elsewhere() -> None:
    for text in (
        "import subprocess\n",
        "def f():\n    from subprocess import run\n",
        "import os\nos.system('x')\n",
        "import os\nos.execvp('x', [])\n",
        "import asyncio\nasyncio.create_subprocess_exec('x')\n",
    ):
        assert process_starts(ast.parse(text)), text
    assert proc_calls(ast.parse("from kiln import proc\nproc.run(['git'], timeout=1)\n")) == {"run"}


# ---------------------------------------------------------------- values as options


def _git(repo: Path, *args: str) -> None:
    subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True)


@pytest.fixture(scope="module")
def repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    repo = tmp_path_factory.mktemp("repo")
    _git(repo, "init", "-q")
    (repo / "a.txt").write_text("a\n")
    _git(repo, "add", "a.txt")
    _git(repo, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "a")
    return repo


@pytest.mark.parametrize(
    "rev", ["--output=CANARY", "--list", "-o", "--end-of-options", "a b", "x\x00y", "", "HEAD\n"]
)
def test_a_revision_is_never_an_option(repo: Path, rev: str) -> None:
    canary = repo / "CANARY"
    canary.write_text("kept\n")
    with pytest.raises(proc.Refused):
        proc.git_object(repo, rev.replace("CANARY", str(canary)), "tree")
    assert canary.read_text() == "kept\n"


def test_a_revision_resolves_to_an_object_id(repo: Path) -> None:
    tree = proc.git_object(repo, "HEAD", "tree")
    assert len(tree) == 40 and int(tree, 16) >= 0
    with pytest.raises(proc.Refused, match="names no commit"):
        proc.git_object(repo, "no-such-branch", "commit")


@pytest.mark.parametrize("name", ["-r/etc/passwd", "--index-url=http://x", "-e.", "a b", "x" * 300])
def test_a_distribution_name_is_never_an_option(tmp_path: Path, name: str) -> None:
    with pytest.raises(pins.PinError, match="is not a PyPI distribution name"):
        pins.wheel(name, "1.0", tmp_path, print)
    assert list(tmp_path.iterdir()) == []  # nothing downloaded, pip never ran


def _refused(*args: str, **env: str) -> str:
    """`doit ARGS` in this checkout, which must refuse (exit 1, no traceback): its output."""
    done = subprocess.run(
        [sys.executable, "-m", "doit", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=SLOW,
        env={**os.environ, **env},
    )
    out = done.stdout + done.stderr
    assert done.returncode == 1 and "Traceback" not in out, out
    return out


def test_doit_diff_refuses_an_option_as_base(tmp_path: Path) -> None:
    canary = tmp_path / "canary"
    canary.write_text("kept\n")
    for base in (f"--output={canary}", "--list"):
        out = _refused("diff", f"base={base}", KILN_STORE=str(tmp_path / "store"))
        assert "command line: base:" in out and "is not a revision name" in out, out
    assert canary.read_text() == "kept\n"


def test_doit_new_refuses_an_option_as_a_distribution(tmp_path: Path) -> None:
    reqs = tmp_path / "reqs.txt"
    reqs.write_text("six\n")
    packages = tmp_path / "packages"
    model = f"model=pypi:-r{reqs}==1:x.gguf"
    out = _refused("new", "name=x", model, KILN_PACKAGES=str(packages))
    assert "command line: model:" in out and "is not a PyPI distribution name" in out, out
    assert not packages.exists() or not any(packages.iterdir())
    assert not (ROOT / "recipes" / "x.yaml").exists()
