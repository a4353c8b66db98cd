"""runtime.kernels.install: an engine's carried kernel files into an Inductor cache
folder (issue 39). Real zip archives and folders; no torch needed."""

from __future__ import annotations

import os
import zipfile
from pathlib import Path

import pytest

from runtime import kernels
from runtime.format import BundleError


def _engine(path: Path, members: dict[str, bytes]) -> zipfile.ZipFile:
    with zipfile.ZipFile(path, "w") as archive:
        for name, data in members.items():
            archive.writestr(name, data)
    return zipfile.ZipFile(path)


def test_install_writes_what_is_absent_or_different_and_leaves_the_same(tmp_path: Path) -> None:
    folder = tmp_path / "cache"
    (folder / "ab").mkdir(parents=True)
    (folder / "ab" / "cabc.py").write_bytes(b"kernel source")  # the same: kept
    (folder / "ab" / "k1.best_config").write_bytes(b'{"XBLOCK": 64}')  # another choice
    engine = _engine(
        tmp_path / "engine.zip",
        {
            "kernels/ab/cabc.py": b"kernel source",
            "kernels/ab/k1.best_config": b'{"XBLOCK": 128}',
            "kernels/cd/lib.so": b"\x7fELF",
            "program.json": b"{}",  # not a kernel file
        },
    )
    assert kernels.install(engine, folder) == 2
    # the engine's autotuned choice replaced the cache's own under the same name
    assert (folder / "ab" / "k1.best_config").read_bytes() == b'{"XBLOCK": 128}'
    assert (folder / "cd" / "lib.so").stat().st_mode & 0o777 == 0o755
    assert not (folder / "program.json").exists()
    assert kernels.install(engine, folder) == 0  # all present and equal: nothing written
    assert not list(folder.rglob("*.tmp"))


def test_install_refuses_a_member_outside_its_folder(tmp_path: Path) -> None:
    engine = _engine(tmp_path / "engine.zip", {"kernels/../../evil.py": b"x"})
    with pytest.raises(BundleError, match="points outside its folder"):
        kernels.install(engine, tmp_path / "cache")
    assert not (tmp_path / "evil.py").exists()


def test_a_pinned_folder_is_a_kiln_inductor_name_under_the_root(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A CUDA engine names the folder its kernels were compiled in (kernels.json's
    `folder`): only a name of the pinned form is taken, and it becomes the Inductor
    cache of the process; any other name (a path, a traversal) is refused."""
    monkeypatch.delenv("TORCHINDUCTOR_CACHE_DIR", raising=False)
    name = kernels.new_pinned()
    assert kernels.pinned_folder(name) == kernels.PINNED_ROOT / name
    assert os.environ["TORCHINDUCTOR_CACHE_DIR"] == str(kernels.PINNED_ROOT / name)
    assert kernels.new_pinned() != name
    for bad in ("../etc", "/tmp/x", "kiln-inductor-XYZ", f"{name}/..", ""):
        with pytest.raises(BundleError, match="kiln-inductor-<16 hex>"):
            kernels.pinned_folder(bad)


def test_each_cpu_engine_load_gets_a_folder_of_its_own_unless_the_user_names_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    monkeypatch.delenv("TORCHINDUCTOR_CACHE_DIR", raising=False)
    key = {"torch": "2.13.0+cpu", "device": "cpu"}
    first = kernels.cache_folder(key, "a" * 16)
    second = kernels.cache_folder(key, "b" * 16)  # the same process, another engine
    again = kernels.cache_folder(key, "a" * 16)  # the first engine, loaded again
    assert first.parent == second.parent == again.parent
    assert len({first, second, again}) == 3 and all(f.is_dir() for f in (first, again))
    assert first.name.startswith("a" * 16 + ".") and second.name.startswith("b" * 16 + ".")
    assert os.environ["TORCHINDUCTOR_CACHE_DIR"] == str(again)
    assert first.is_relative_to(tmp_path / "kiln" / "inductor")
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path / "mine"))
    assert kernels.cache_folder(key, "c" * 16) == tmp_path / "mine"


def test_an_engine_digest_names_its_kernel_and_graph_members(tmp_path: Path) -> None:
    def digest(files: dict[str, bytes]) -> str:
        with zipfile.ZipFile(tmp_path / "e.zip", "w") as z:
            for name, data in files.items():
                z.writestr(name, data)
        with zipfile.ZipFile(tmp_path / "e.zip") as z:
            return kernels.digest(z)

    base = {"kernels/a.py": b"x", "graphs.json": b"{}", "weights.safetensors": b"w"}
    assert digest(base) == digest({**base, "weights.safetensors": b"other"})
    assert digest(base) != digest({**base, "kernels/a.py": b"y"})
    assert digest(base) != digest({**base, "graphs.json": b"[]"})
