"""`doit help` lists a task's variables, and `doit` refuses a misspelt one before
running anything (the variables themselves: tests/unit/test_variables.py)."""

from __future__ import annotations

from pathlib import Path

from conftest import make_world

import tasks


def test_doit_run_with_a_misspelt_variable_fails_before_running_anything(tmp_path: Path) -> None:
    world = make_world(tmp_path, tmp_path / "hub", ("tiny-llama",))
    proc = world.doit("run", "recipe=tiny-llama", "prompt=hi", "temprature=0.7")
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0, out
    assert "unknown variable 'temprature' for run; did you mean 'temperature'?" in out
    assert "Traceback" not in out
    assert not (world.store / "objects").exists()  # nothing was built, nothing generated


def test_doit_help_lists_a_tasks_variables(tmp_path: Path) -> None:
    world = make_world(tmp_path, tmp_path / "hub", ("tiny-llama",))
    # the task's doc line (doit's help of a task), and kiln's table of a verb (wrapped)
    out = world.doit("help", "generate").stdout
    for var in tasks.RUN.vars:
        assert f"{var.name}=" in out and var.help in out, (var.name, out)
    for verb in (tasks.RUN, tasks.BUILD, tasks.GC):
        out = world.doit("help", verb.name).stdout
        flat = " ".join(out.split())
        for var in verb.vars:
            assert f"\n  {var.name} " in out and " ".join(var.help.split()) in flat, var.name
    proc = world.doit("build", "recipes=tiny-llama")
    assert proc.returncode != 0
    assert "unknown variable 'recipes' for build; did you mean 'recipe'?" in proc.stdout
    assert not (world.store / "objects").exists()
