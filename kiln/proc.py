"""Every process kiln starts is started here (tests/hardening/test_processes.py reads
the code and fails on a process started anywhere else).

Values come from other people: a recipe in a pull request, a command variable a CI
bot copied out of a PR. A value that reaches a program's command line as an option
runs that program's option parser on it: `git archive --output=FILE` truncated a file
of the user's choosing, and `pip download -r FILE` read a requirements file and ran a
local project's setup.py (issue 37). So:

- a program's own arguments (`program`) are our code's constants;
- values go in `values`, always after `--`, where no parser reads an option;
- a value that must come before `--` (a git revision) is first resolved to an object
  id by `git_object`, whose `--end-of-options` keeps git from reading it as one.

Pure stdlib, on the ground floor: builders/fetch.py downloads wheels through
kiln.pins, which runs pip here (kiln.plan.toolchain follows both into fetch's key).
"""

from __future__ import annotations

import os
import re
import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path

Completed = subprocess.CompletedProcess
TimeoutExpired = subprocess.TimeoutExpired

# A revision as a user names one (a branch, a tag, origin/main, HEAD~2, a hex id):
# no leading '-', no whitespace or control character; git's own rules do the rest.
_REV = re.compile(r"^[A-Za-z0-9_.@{}^~/+:-]{1,256}$")
_OBJECT = re.compile(r"^([0-9a-f]{40}|[0-9a-f]{64})$")


class Refused(ValueError):
    """A value kiln will not hand to a program, or a program that could not answer:
    the cause, for the caller to locate (`command line: base: ...`)."""


def run(
    program: Sequence[str],
    values: Sequence[str] = (),
    *,
    timeout: float,
    cwd: Path | None = None,
    env: Mapping[str, str] | None = None,
    stdin: str | None = None,
) -> Completed[str]:
    """`program` with `values` after `--`; its output as text. OSError when the
    program cannot start, TimeoutExpired past `timeout`."""
    argv = [*program, *(("--", *values) if values else ())]
    return subprocess.run(
        argv,
        cwd=cwd,
        env=dict(env) if env is not None else None,
        input=stdin,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def run_bytes(program: Sequence[str], *, timeout: float, cwd: Path | None = None) -> bytes:
    """`program`'s standard output as bytes (git archive); Refused when it fails."""
    try:
        done = subprocess.run(
            list(program), cwd=cwd, capture_output=True, timeout=timeout, check=False
        )
    except (OSError, subprocess.SubprocessError) as exc:
        raise Refused(f"{program[0]} could not run: {exc}") from None
    if done.returncode != 0:
        raise Refused(done.stderr.decode(errors="replace").strip() or f"exit {done.returncode}")
    return done.stdout


def start(program: Sequence[str], *, env: Mapping[str, str]) -> subprocess.Popen[bytes]:
    """A child with a pipe on its standard input and a process group of its own (a
    timeout kills all of it): kiln.replay.chain's step runner."""
    return subprocess.Popen(
        list(program), stdin=subprocess.PIPE, env=dict(env), start_new_session=True
    )


def kill_group(child: subprocess.Popen[bytes]) -> None:
    os.killpg(child.pid, 9)
    child.wait()


def git_rev(rev: str) -> str:
    """`rev` if it can name a revision and cannot be read as an option."""
    if not _REV.fullmatch(rev) or rev.startswith("-"):
        raise Refused(
            f"{rev!r} is not a revision name: a revision starts with a letter or digit and "
            "holds no spaces (a branch, a tag, origin/main, HEAD~1 or a commit id)"
        )
    return rev


def git_object(repo: Path, rev: str, kind: str) -> str:
    """The id of the `kind` (commit, tree) that `rev` names in `repo`, resolved by
    `git rev-parse --verify --end-of-options REV^{kind}`: the id, never `rev`, is what
    later git commands see."""
    spec = f"{git_rev(rev)}^{{{kind}}}"
    try:
        done = run(
            ["git", "-C", str(repo), "rev-parse", "--verify", "--quiet", "--end-of-options", spec],
            timeout=60,
        )
    except (OSError, subprocess.SubprocessError) as exc:
        raise Refused(f"git could not run: {exc}") from None
    found = done.stdout.strip()
    if done.returncode != 0 or not _OBJECT.fullmatch(found):
        raise Refused(f"{rev!r} names no {kind} in {repo}")
    return found


def git_lines(repo: Path, program: Sequence[str], paths: Sequence[str] = ()) -> list[str]:
    """`git -C repo PROGRAM -- PATHS`'s output lines; Refused when git fails."""
    try:
        done = run(["git", "-C", str(repo), *program], paths, timeout=60)
    except (OSError, subprocess.SubprocessError) as exc:
        raise Refused(f"git could not run: {exc}") from None
    if done.returncode != 0:
        raise Refused(f"git {' '.join(program)} failed in {repo}: {done.stderr.strip()}")
    return [line for line in done.stdout.splitlines() if line]
