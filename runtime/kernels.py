"""The compiled kernels an inductor engine carries (issue 39): Inductor's cache of the
build host's compile, so a load compiles nothing and autotunes nothing.

The engine step compiles and (on CUDA) autotunes every program once, on the build
host, into an empty Inductor cache folder (builders/causal_lm/backends/_kernels.py),
then stores that folder in engine.zip under `kernels/`, with `kernels.json`: the host
key below and what the build measured. A load installs those files into this host's
Inductor cache (on CUDA the engine's own pinned folder, /tmp/kiln-inductor-<16 hex>,
the compile's path: `pinned_folder`; on CPU `cache_folder`: TORCHINDUCTOR_CACHE_DIR
when set, else a folder of the load's own, $XDG_CACHE_HOME/kiln/inductor/<host key
digest>/<engine digest>.<random>/, removed at exit), where
the compile that follows finds every graph (Inductor's FX-graph and AOTAutograd caches, with the
generated C++ libraries on CPU and the Triton binaries on CUDA): the kernels, and the
autotuned choices among them, are the build's.

Why the cache folder and not AOTInductor: AOTInductor packages do not load on the GPU
host (FIELD_NOTES); and torch.compiler.save_cache_artifacts alone leaves out the CPU's
compiled C++ (a load from it alone spent 15 of its 20 s in the C++ compiler:
bench/probes/results/kernels_2026-12-05.txt).

Inductor keys its caches by the torch version, the GPU's name, CUDA and Triton
versions (its `CacheBase.get_system`); a host whose key differs from the build's would
silently compile afresh, with kernels and autotuned choices of its own and so other
numerics than the validated ones. The load refuses that before compiling, naming both
keys (`check`), and refuses a load that compiled anything all the same (`Misses`), or
that timed kernels on the device to choose among them (`Tuning`: Inductor's Triton
autotuner re-times some kernels at every load unless the compile is told not to, see
runtime/inductor.py's CUDA_OPTIONS, and a choice made by this process's timings is
another summation order); on CPU it also runs at the thread count the C++ was
generated for (`threads`); KILN_RECOMPILE=1 compiles on this host instead, and says so
on stderr.
"""

from __future__ import annotations

import atexit
import functools
import hashlib
import json
import os
import platform
import re
import secrets
import shutil
import sys
import tempfile
import zipfile
from pathlib import Path
from typing import Any, ClassVar

from runtime.format import BundleError

PREFIX = "kernels/"  # engine.zip's members under it are the cache folder's files
META = "kernels.json"
CHOICE = ".best_config"  # an autotuned choice: named by its kernel, not by its content
RECOMPILE = "KILN_RECOMPILE"
# Files of the compile that a later load neither needs nor should share.
SKIPPED = (".lock", ".tmp")
# The CPU features Inductor's generated C++ may be compiled for (its cpu_vec_isa picks
# among these; asking it compiles a test program, seconds of every load).
CPU_FLAGS = (
    "avx2",
    "avx512f",
    "avx512bw",
    "avx512vl",
    "avx512_vnni",
    "avx512_bf16",
    "avx512_fp16",
    "amx_tile",
    "amx_bf16",
    "amx_fp16",
)


@functools.cache
def host_key(device: str) -> dict[str, str]:
    """What Inductor's caches depend on besides the graph: torch, Python, and the
    device (the GPU's name with CUDA and Triton, or the CPU's vector ISA)."""
    import torch

    key = {
        "torch": torch.__version__,
        "python": f"{sys.version_info.major}.{sys.version_info.minor}",
        "machine": platform.machine(),
        "device": device,
    }
    if device == "cuda":
        import triton  # type: ignore[import-not-found]  # CUDA hosts only

        major, minor = torch.cuda.get_device_capability()
        key |= {
            "gpu": torch.cuda.get_device_name(),
            "arch": f"sm{major}{minor}",
            "cuda": str(torch.version.cuda),
            "triton": triton.__version__,
        }
    else:
        key["cpu"] = " ".join(f for f in CPU_FLAGS if f in cpu_flags()) or "none"
    return key


def cpu_flags() -> set[str]:
    """This CPU's feature flags (/proc/cpuinfo); none where it cannot be read."""
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return set()
    line = next((ln for ln in text.splitlines() if ln.startswith("flags")), "")
    return set(line.partition(":")[2].split())


def threads() -> int:
    """The intra-op threads a CPU engine's kernels are generated for: the machine's
    cores up to 4, not OMP_NUM_THREADS (a build sets that to its worker's share of the
    cores free at the time, so kernels made then would fit no later load). A load uses
    the count the engine carries, whatever the caller asked: the C++ is written for
    it, and another count is another cache key (a recompile) and other sums."""
    return min(4, os.cpu_count() or 1)


def recompile() -> bool:
    return os.environ.get(RECOMPILE, "") not in ("", "0")


def check(file: Path, carried: dict[str, Any] | None, device: str) -> bool:
    """Whether the engine's kernels load here; raises where they cannot and
    KILN_RECOMPILE is not set. False: compile here (KILN_RECOMPILE=1, said on stderr)."""
    here = host_key(device)
    if carried is None:
        why = "it carries no compiled kernels (built before kernels were part of engines)"
    elif carried["key"] != here:
        differs = ", ".join(
            f"{k} {carried['key'].get(k, '-')} (here {here.get(k, '-')})"
            for k in sorted(set(here) | set(carried["key"]))
            if carried["key"].get(k) != here.get(k)
        )
        why = f"its kernels were compiled for another host: {differs}"
    else:
        return True
    if not recompile():
        raise BundleError(
            f"{file}: {why}. Compiling here would choose other kernels, with numerics "
            "nobody validated: rebuild the bundle on this host (doit build recipe=NAME), "
            f"or set {RECOMPILE}=1 to compile here anyway"
        )
    print(f"kiln: {file.name}: {why}; compiling here ({RECOMPILE}=1)", file=sys.stderr)
    return False


# On CUDA each engine's kernels are compiled, and loaded, in a folder of their own at
# one absolute path on every host: PINNED_ROOT/kiln-inductor-<16 hex> (kernels.json's
# `folder`). Inductor's Triton autotuners keep the path their kernel's module had at
# compile (it travels in the cached graph) and look for their autotuned choice
# (`.best_config`) beside it; loaded from any other folder they find none and time the
# kernel afresh, which the load refuses (on the H100 the validate step's load timed 6
# pointwise kernels whose choices sat in the deleted compile folder).
PINNED_ROOT = Path("/tmp")
# The cache folders set in this process (pinned_folder, cache_folder): a second engine's
# load gets its own, not the first one's.
_SET: set[str] = set()
PINNED = re.compile(r"^kiln-inductor-[0-9a-f]{16}$")


def new_pinned() -> str:
    """A fresh engine folder's name (under PINNED_ROOT)."""
    return f"kiln-inductor-{secrets.token_hex(8)}"


def pinned_folder(name: str) -> Path:
    """The engine's pinned folder, set as this process's Inductor cache."""
    if not PINNED.match(name):
        raise BundleError(f"kernels.json names the folder {name!r}, not kiln-inductor-<16 hex>")
    folder = PINNED_ROOT / name
    os.environ["TORCHINDUCTOR_CACHE_DIR"] = str(folder)
    _SET.add(str(folder))
    return folder


def cache_folder(key: dict[str, str], engine: str | None = None) -> Path:
    """This process's Inductor cache: TORCHINDUCTOR_CACHE_DIR when set (then it is
    used as it is), else one per host key under the user's cache, and in it, for an
    engine's load (`engine`: `digest`), a folder of this load's own, named by the
    engine, removed when the process exits; set for Inductor. A load's folder holds
    the engine's files and what this process writes, nothing another process reads
    or writes: under `doit -n 2` tiny-llama-inductor's validate once found 4 graphs
    compiled afresh in the folder all engines shared, and with a folder per engine,
    tiny-qwen2.5-vl-inductor's validate found graphs compiled afresh while a
    benchmark process loaded the same engine from it. (A CUDA engine's pinned folder
    cannot be private: its path is the compile's.)"""
    given = os.environ.get("TORCHINDUCTOR_CACHE_DIR")
    if given and given not in _SET:  # the user's (a folder set here is the last engine's)
        return Path(given)
    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    digest = hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:16]
    folder = base / "kiln" / "inductor" / digest
    if engine:
        folder.mkdir(parents=True, exist_ok=True)
        folder = Path(tempfile.mkdtemp(prefix=f"{engine}.", dir=folder))
        atexit.register(shutil.rmtree, folder, True)
    os.environ["TORCHINDUCTOR_CACHE_DIR"] = str(folder)
    _SET.add(str(folder))
    return folder


def digest(archive: zipfile.ZipFile) -> str:
    """16 hex of the engine's kernel and graph members (names and CRCs, from the zip's
    directory: nothing is read): its folder's name under the host's cache."""
    h = hashlib.sha256()
    for info in sorted(archive.infolist(), key=lambda i: i.filename):
        if info.filename.startswith(PREFIX) or info.filename.startswith(("graphs.", META)):
            h.update(f"{info.filename}\0{info.CRC:08x}\0{info.file_size}\n".encode())
    return h.hexdigest()[:16]


def install(archive: zipfile.ZipFile, folder: Path) -> int:
    """The engine's kernel files into the cache folder, each written whole (a temp
    file renamed into place) where absent. A present file is the same file where its
    name is Inductor's content hash; an autotuned choice (`.best_config`, a few bytes)
    is named by its kernel instead, so a cache another compile wrote may hold another
    choice under that name: it is compared, and the engine's wins. The files written."""
    written = 0
    for info in archive.infolist():
        if not info.filename.startswith(PREFIX) or info.is_dir():
            continue
        rel = Path(info.filename[len(PREFIX) :])
        if rel.is_absolute() or ".." in rel.parts:
            raise BundleError(f"engine member {info.filename!r} points outside its folder")
        target = folder / rel
        if target.is_file() and (rel.suffix != CHOICE or target.read_bytes() == archive.read(info)):
            continue
        data = archive.read(info)
        target.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=".kiln-", suffix=".tmp")
        with os.fdopen(fd, "wb") as out:
            out.write(data)
        os.chmod(tmp, 0o755 if rel.suffix == ".so" else 0o644)
        os.replace(tmp, target)
        written += 1
    return written


def files(folder: Path) -> dict[str, bytes]:
    """A cache folder's files as engine.zip members (under PREFIX)."""
    return {
        PREFIX + p.relative_to(folder).as_posix(): p.read_bytes()
        for p in sorted(folder.rglob("*"))
        if p.is_file() and not p.name.endswith(SKIPPED)
    }


class Misses:
    """Inductor's and AOTAutograd's cache misses and bypasses during a block: each is
    a graph compiled afresh (and, in a max-autotune mode, autotuned). A bypass is a
    lookup the cache did not make (TORCHINDUCTOR_FX_GRAPH_CACHE=0, an uncacheable
    graph): its graph compiled too, and counted only as a bypass, so a load with the
    cache off passed as compiling nothing."""

    def __init__(self) -> None:
        self.before = self._counts()

    @staticmethod
    def _counts() -> int:
        from torch._dynamo.utils import counters

        kinds = (
            ("inductor", "fxgraph_cache_miss"),
            ("inductor", "fxgraph_cache_bypass"),
            ("aot_autograd", "autograd_cache_miss"),
            ("aot_autograd", "autograd_cache_bypass"),
        )
        return sum(int(counters[group][name]) for group, name in kinds)

    def count(self) -> int:
        return self._counts() - self.before


class Tuning:
    """The kernels Inductor's Triton autotuner timed on the device during a block, by
    name: each is a choice among candidate configs made by this process's timings
    (a candidate's block sizes are its summation order, so its numerics). A load from
    the engine's kernels must time none: every choice is in the carried autotune
    cache. Counted by wrapping the autotuner's two timing entries, once per process;
    where this torch has neither, nothing is counted."""

    names: ClassVar[list[str]] = []

    def __init__(self) -> None:
        _count_tuning()
        self.before = len(Tuning.names)

    def tuned(self) -> list[str]:
        return Tuning.names[self.before :]


@functools.cache
def _count_tuning() -> None:
    try:
        from torch._inductor.runtime.triton_heuristics import CachingAutotuner
    except ImportError:  # a torch without Inductor's Triton runtime: nothing to time
        return
    for entry in ("benchmark_all_configs", "coordinate_descent_tuning"):
        original = getattr(CachingAutotuner, entry, None)
        if original is None:
            continue

        def counted(self: Any, *args: Any, _original: Any = original, **kwargs: Any) -> Any:
            name = getattr(getattr(self, "fn", None), "__name__", "?")
            source = getattr(self, "filename", None)  # where its autotune cache was sought
            Tuning.names.append(f"{name} ({source})" if source else name)
            return _original(self, *args, **kwargs)

        setattr(CachingAutotuner, entry, counted)
