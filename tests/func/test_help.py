"""`doit help` explains kiln (issue 41, item 4): kiln's verbs first, one line each;
`doit help VERB` for every kiln verb, `run` included, as a wrapped table of its
variables with examples; doit's own commands keep doit's help."""

from __future__ import annotations

import subprocess
import sys

import pytest
from conftest import ROOT, SLOW

from kiln.commands.variables import ALL


def doit_help(*args: str, command: str = "help") -> str:
    out = subprocess.run(
        [sys.executable, "-m", "doit", command, *args],
        cwd=ROOT,  # any folder of the repository would do (test_any_folder.py)
        capture_output=True,
        text=True,
        timeout=SLOW,
        env={"PATH": "/usr/bin:/bin", "COLUMNS": "100", "PYTHONPATH": str(ROOT)},
    )
    assert out.returncode == 0, out.stdout + out.stderr
    return out.stdout


def test_doit_help_lists_kilns_verbs_first() -> None:
    text = doit_help()
    lines = text.splitlines()
    assert lines[0].startswith("kiln's commands")
    listed = [line.split()[0] for line in lines[2:] if line.startswith("  ") and line[2] != " "]
    assert listed[: len(ALL)] == [v.name for v in ALL]
    assert "doit's own commands" in text and "'.  NAME'" in text
    assert all(len(line) <= 100 for line in lines), max(lines, key=len)


@pytest.mark.parametrize("verb", [v.name for v in ALL])
def test_every_verb_has_a_table_and_examples(verb: str) -> None:
    text = doit_help(verb)
    table = next(v for v in ALL if v.name == verb).vars
    assert text.startswith(f"doit {verb}: ")
    for var in table:
        assert any(line.split()[:1] == [var.name] for line in text.splitlines()), var.name
    assert "Examples:" in text and f"  doit {verb}" in text.replace("doit -n 2 build", "doit build")
    assert all(len(line) <= 100 for line in text.splitlines())


def test_doits_own_commands_keep_doits_help() -> None:
    text = doit_help("forget")
    assert "forget" in text and "kiln's commands" not in text


def test_doit_list_names_the_verbs_as_users_type_them() -> None:
    """`doit list` showed the task behind `doit run` as `generate`, each on one line of
    up to ~2,000 characters; now it lists the verbs as `doit help` does, and doit's own
    list stays behind an option."""
    lines = doit_help(command="list").splitlines()
    listed = [line.split()[0] for line in lines[2:] if line.startswith("  ") and line[2] != " "]
    assert listed[: len(ALL)] == [v.name for v in ALL] and "run" in listed
    assert "generate" not in listed
    assert all(len(line) <= 100 for line in lines), max(lines, key=len)
    tasks = [line.split()[0] for line in doit_help("--all", command="list").splitlines()]
    assert "generate" in tasks and "build" in tasks  # doit's own list, as it was
