"""doit works from any folder of the repository (issue 41): kiln installs doit's
commands as entry points (pyproject.toml's `doit.COMMAND`, found wherever doit runs;
doit reads pyproject.toml or a doit.cfg only in the folder it runs in), and each
seeks dodo.py in the folders above and works from the root (tasks.Anywhere). Run as
a user runs it: the installed `doit` script, in a folder below the root."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import ROOT, SLOW, World, make_world

import tasks

DOIT = Path(sys.executable).with_name("doit")  # the script the venv installed
FOLDERS = ("recipes", "docs", "kiln/commands")  # a catalog folder, the manual, a deep one


def doit_in(
    folder: str, *args: str, world: World | None = None
) -> subprocess.CompletedProcess[str]:
    """`doit ARGS` typed in `ROOT/folder`, on `world`'s catalog when given."""
    given = world.env if world else os.environ
    env = {k: v for k, v in given.items() if not k.startswith("DOIT_")}  # no -k from outside
    env["COLUMNS"] = "100"
    return subprocess.run(
        [str(DOIT), *args],
        cwd=ROOT / folder,
        env=env,
        capture_output=True,
        text=True,
        timeout=SLOW,
    )


@pytest.fixture
def small(tmp_path: Path) -> World:
    """One recipe's catalog and a private store: the test reads its own data."""
    return make_world(tmp_path, tmp_path / "hub", ("tiny-llama",))


@pytest.mark.parametrize("folder", FOLDERS)
def test_doit_check_and_plan_below_the_root_are_the_roots(folder: str, small: World) -> None:
    assert not (ROOT / folder / "dodo.py").exists()
    for args in (("check",), ("plan", "recipe=tiny-llama")):
        below = doit_in(folder, *args, world=small)
        assert below.returncode == 0, below.stdout + below.stderr
        assert "Could not find dodo file" not in below.stderr
        root = doit_in(".", *args, world=small)
        assert root.returncode == 0, root.stdout + root.stderr
        assert below.stdout == root.stdout
    check = doit_in(folder, "check", world=small).stdout
    assert "ok: 1 recipes, " in check
    plan = doit_in(folder, "plan", "recipe=tiny-llama", world=small).stdout
    assert "tiny-llama" in plan and "fetch" in plan


@pytest.mark.parametrize("folder", FOLDERS)
def test_doit_help_and_list_below_the_root_are_kilns(folder: str) -> None:
    run = doit_in(folder, "help", "run")
    assert run.returncode == 0, run.stdout + run.stderr
    assert run.stdout.startswith("doit run: Generate with a recipe's bundle")
    lines = run.stdout.splitlines()
    assert any(line.split()[:3] == ["variable", "value", "default"] for line in lines)
    assert any(line.split()[:1] == ["recipe"] for line in lines)
    assert "Examples:" in run.stdout
    assert "PURPOSE" not in run.stdout and "run tasks" not in run.stdout  # doit's own help
    listed = doit_in(folder, "list")
    assert listed.returncode == 0, listed.stdout + listed.stderr
    assert listed.stdout.startswith("kiln's commands")
    assert "doit runs from any folder of the repository" in listed.stdout


def test_a_relative_path_in_a_variable_starts_at_the_root(small: World) -> None:
    """doit works from dodo.py's folder, the root: `json_schema=pyproject.toml` typed in
    docs/ is the root's pyproject.toml (read, and refused as JSON), and docs/'s own
    commands.md is not found."""
    assert not (ROOT / "docs" / "pyproject.toml").exists()
    assert (ROOT / "docs" / "commands.md").exists()
    args = ("run", "recipe=tiny-llama", "prompt=hi")
    found = doit_in("docs", *args, "json_schema=pyproject.toml", world=small)
    assert found.returncode == 1
    assert "pyproject.toml:1:2: invalid JSON" in found.stdout + found.stderr
    missing = doit_in("docs", *args, "json_schema=commands.md", world=small)
    assert missing.returncode == 1
    assert "json_schema: commands.md does not exist" in missing.stdout + missing.stderr


def test_every_doit_command_that_loads_dodo_is_kilns() -> None:
    """A doit upgrade that adds a command loading dodo.py fails here until tasks.py has
    it, so no command works only from the root."""
    from importlib.metadata import entry_points

    from doit.cmd_base import DoitCmdBase
    from doit.doit_cmd import DoitMain

    installed = {e.name: e.value for e in entry_points(group="doit.COMMAND")}
    loads_dodo = [c for c in DoitMain.DOIT_CMDS if issubclass(c, DoitCmdBase)]
    assert {c.get_name() for c in loads_dodo} == set(installed), installed
    for command in loads_dodo:
        module, _, name = installed[command.get_name()].partition(":")
        ours = getattr(tasks, name)
        assert module == "tasks" and issubclass(ours, command), command
        assert issubclass(ours, tasks.Anywhere) and ours.get_name() == command.get_name()
