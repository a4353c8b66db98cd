"""The inductor engine's kernels, made at build (runtime/kernels.py says what they are).

    compiled = compile_kernels(request, files, engine)   # engine.zip's members, added

Two fresh processes, so that nothing of the build's own process (its in-memory
caches, its GPU memory) takes part:

  compile  opens the engine as the runtime does (runtime.inductor.InductorEngine),
           told to compile here, with an empty Inductor cache folder: every program
           is compiled, autotuned in CUDA's max-autotune mode, and captured; that
           folder becomes the engine's `kernels/` members, with `kernels.json` (the
           host key).
  check    opens the engine with those members through runtime.open's own path, in
           another empty cache folder: the load must compile nothing (Inductor's and
           AOTAutograd's cache-miss counters) and, on CUDA, time no kernel to choose
           its config (runtime.kernels.Tuning; the runtime refuses a load that does
           either), and its seconds are the warm-disk load time engine.json records.
"""

from __future__ import annotations

import json
import sys
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kiln import proc

if TYPE_CHECKING:
    from kiln.store.api import Request

ROOT = Path(__file__).resolve().parents[3]
# A compile of an 8B-class engine with autotuning takes minutes; past this, a hang.
TIMEOUT = 3600.0


def compile_kernels(
    request: Request, files: dict[str, bytes], engine: dict[str, Any]
) -> dict[str, Any]:
    """Adds `kernels/...` and `kernels.json` to the engine's members `files`; what the
    two processes measured (engine.json's `kernels`)."""
    from builders.causal_lm.backends.inductor import write_zip

    with tempfile.TemporaryDirectory(prefix="kiln-kernels-") as tmp:
        work = Path(tmp)
        (work / "engine.json").write_text(json.dumps(engine))
        write_zip(work / "engine.zip", files)
        request.log("compiling the programs on this host (Inductor; autotuned on CUDA)")
        made = _child(request, "compile", work, "compiled")
        from runtime.kernels import META
        from runtime.kernels import files as cache_files

        kernels = cache_files(work / "compiled")
        files |= kernels
        carried = {
            "key": made["key"],
            **({"threads": made["threads"]} if "threads" in made else {}),
        }
        files[META] = json.dumps(carried, sort_keys=True, indent=1).encode()
        write_zip(work / "engine.zip", files)
        checked = _child(request, "check", work, "checked")
    size = sum(len(b) for b in kernels.values())
    timed = " and timed no kernel" if "tuned" in checked["kernels"] else ""
    request.log(
        f"{len(kernels)} kernel files ({size / 1e6:.1f} MB); a load from them compiled "
        f"nothing{timed} and took {checked['seconds']:.1f} s"
    )
    return {
        **carried,
        "files": len(kernels),
        "bytes": size,
        "compile_seconds": round(made["seconds"], 2),
        "load_seconds": round(checked["seconds"], 2),
    }


def _child(request: Request, verb: str, work: Path, cache: str) -> dict[str, Any]:
    import os

    env = {
        **os.environ,
        "TORCHINDUCTOR_CACHE_DIR": str(work / cache),
        "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
    }
    env.pop("KILN_RECOMPILE", None)
    argv = [sys.executable, "-m", "builders.causal_lm.backends._kernels", verb]
    try:
        done = proc.run(argv, [str(work)], timeout=TIMEOUT, cwd=ROOT, env=env)
    except proc.TimeoutExpired:
        raise request.error(
            f"the engine's {verb} process ran past {TIMEOUT:.0f} s", "see the step's log"
        ) from None
    lines = done.stdout.strip().splitlines()
    if done.returncode != 0 or not lines:
        tail = "\n".join(done.stderr.strip().splitlines()[-12:])
        raise request.error(
            f"the engine's {verb} process failed (exit {done.returncode}):\n{tail}",
            "a kiln bug if the engine's programs exported: report it with the step's log",
        )
    result: dict[str, Any] = json.loads(lines[-1])
    return result


def main(verb: str, work: Path) -> None:
    engine = json.loads((work / "engine.json").read_text())
    start = time.perf_counter()
    if verb == "compile":
        import torch

        from runtime.inductor import InductorEngine
        from runtime.kernels import host_key

        InductorEngine(work / "engine.zip", engine, None, compile_here=True)
        out = {"key": host_key(engine["provider"])}
        if engine["provider"] == "cpu":
            out["threads"] = torch.get_num_threads()
    else:
        from runtime.backends import open_engine

        opened: Any = open_engine(work, engine, None)  # an InductorEngine
        out = {"kernels": opened.kernels}
    print(json.dumps({**out, "seconds": time.perf_counter() - start}))


if __name__ == "__main__":
    import argparse

    parser = argparse.ArgumentParser()
    parser.add_argument("verb", choices=("compile", "check"))
    parser.add_argument("work", type=Path)
    args = parser.parse_args()
    main(args.verb, args.work)
