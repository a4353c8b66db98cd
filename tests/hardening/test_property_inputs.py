"""Property: whatever a stranger passes as `doit new model=` or as a `doit run` file or
text variable, kiln answers with a located KilnError or a correct result, never another
exception, and opens nothing outside the repository, the store and the temp folder
(issue 37). Driven by hypothesis over hostile files made here (FIFOs, links out, a link
to /dev/zero, empty and deeply nested files, kiln's own folders) and arbitrary text.

What is opened is watched with an audit hook (sys.addaudithook, PEP 578): every `open`
of a path outside the allowed roots and the Python installation fails the example.
"""

from __future__ import annotations

import os
import sys
import tempfile
import zipfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from conftest import ROOT
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kiln.commands import run, sources, variables
from kiln.errors import KilnError
from kiln.paths import Paths

_WATCHING: list[list[str]] = []


def _hook(event: str, args: tuple[Any, ...]) -> None:
    if event == "open" and _WATCHING and isinstance(args[0], str | bytes | os.PathLike):
        _WATCHING[-1].append(os.fsdecode(args[0]))


sys.addaudithook(_hook)  # a hook cannot be removed: it records only while watching


@contextmanager
def opened() -> Iterator[list[str]]:
    _WATCHING.append([])
    try:
        yield _WATCHING[-1]
    finally:
        _WATCHING.pop()


def _allowed(roots: list[Path]) -> list[str]:
    return [str(r.resolve()) for r in roots] + [
        os.path.realpath(p) for p in {sys.prefix, sys.base_prefix, sys.exec_prefix}
    ]


def _outside(paths: list[str], roots: list[str]) -> list[str]:
    out = []
    for p in paths:
        real = os.path.realpath(p)
        if not any(real == r or real.startswith(r + os.sep) for r in roots):
            out.append(p)
    return out


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    base = tmp_path_factory.mktemp("prop")
    root = base / "repo"
    (root / "recipes").mkdir(parents=True)
    (root / ".git").mkdir()
    (root / ".kiln" / "store").mkdir(parents=True)
    files = {
        "fifo": lambda p: os.mkfifo(p),
        "link-out.json": lambda p: p.symlink_to("/etc/passwd"),
        "zero.gguf": lambda p: p.symlink_to("/dev/zero"),
        "empty": lambda p: p.mkdir(),
        "deep.json": lambda p: p.write_text("[" * 50_000 + "]" * 50_000),
        "chat.json": lambda p: p.write_text('[{"role": "user", "content": "hi"}]'),
        "truncated.gguf": lambda p: p.write_bytes(b"GGUF\x03\x00\x00\x00" + b"\xff" * 20),
    }
    for name, make in files.items():
        make(root / name)
    ckpt = root / "ckpt"
    ckpt.mkdir()
    (ckpt / "config.json").write_text('{"architectures": ["LlamaForCausalLM"]}')
    (ckpt / "model.safetensors").write_bytes(b"\0" * 8)
    (ckpt / "leak.txt").symlink_to("/etc/hostname")
    packages = root / ".kiln" / "packages"
    packages.mkdir()
    with zipfile.ZipFile(packages / "ok_name-1.0-py3-none-any.whl", "w") as zf:
        zf.writestr("ok_name/readme.txt", "no gguf here")
    names = [*files, "ckpt", ".", ".git", ".kiln/store", "recipes", "/etc/passwd", "/dev/zero"]
    env = {
        "KILN_ROOT": str(root),
        "KILN_STORE": str(root / ".kiln" / "store"),
        "KILN_HUB_CACHE": str(base / "hub"),
        "KILN_PACKAGES": str(packages),
        "PIP_NO_INDEX": "1",  # a name that slips through never reaches the network
    }
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    cwd = os.getcwd()
    os.chdir(root)
    try:
        # this checkout (its code is imported), the world's repo, its store and caches
        # under .kiln, and the temp folder (where `new` unpacks a wheel's file)
        roots = _allowed([ROOT, root, base / "hub", Path(tempfile.gettempdir())])
        yield {"root": root, "names": names, "roots": roots}
    finally:
        os.chdir(cwd)
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


NAMES = st.sampled_from(["-r/etc/passwd", "--index-url=http://x", "a b", "-e.", "ok-name", ""])
VERSIONS = st.sampled_from(["1.0", ">=1", "-r x", "1.0; rm -rf /", ""])
TEXT = st.text(max_size=30)


def _sources(names: list[str]) -> st.SearchStrategy[str]:
    return st.one_of(
        st.sampled_from(names),
        TEXT,
        st.builds(lambda n, v, f: f"pypi:{n}=={v}:{f}", NAMES, VERSIONS, TEXT),
        st.builds(lambda r, v: f"{r}@{v}", st.sampled_from(["a/b", "-x/y", "../../etc"]), TEXT),
        st.builds(lambda n: f"{n}/config.json", st.sampled_from(names)),
    )


def _refused_or_read(call: Any, roots: list[str]) -> None:
    with opened() as paths:
        try:
            call()
        except KilnError as exc:
            assert exc.problems and all(p.cause for p in exc.problems)
    assert _outside(paths, roots) == []


@settings(max_examples=100, deadline=None, suppress_health_check=list(HealthCheck))
@given(data=st.data())
def test_doit_new_sources_are_refused_cleanly(world: dict[str, Any], data: st.DataObject) -> None:
    spec = data.draw(_sources(world["names"]))
    _refused_or_read(lambda: sources.read(spec, Paths.from_env()), world["roots"])


@settings(max_examples=100, deadline=None, suppress_health_check=list(HealthCheck))
@given(data=st.data())
def test_run_variables_are_refused_cleanly(world: dict[str, Any], data: st.DataObject) -> None:
    value = data.draw(st.one_of(st.sampled_from(world["names"]), TEXT.filter(bool)))
    which = data.draw(st.sampled_from(["messages", "json_schema", "grammar", "audio", "prompt"]))
    calls = {
        "messages": lambda: run._messages(value),
        "json_schema": lambda: run._grammar(value, None, None),
        "grammar": lambda: run._grammar(None, None, value),
        "audio": lambda: run._clips(value),
        "prompt": lambda: variables.capped_text("prompt", value * 100_000),
    }
    _refused_or_read(calls[which], world["roots"])


def test_the_watch_sees_an_open_outside(world: dict[str, Any]) -> None:
    """The property can fail: reading a file outside is seen."""
    with opened() as paths:
        Path("/etc/hostname").read_text()
    assert _outside(paths, world["roots"]) == ["/etc/hostname"]
