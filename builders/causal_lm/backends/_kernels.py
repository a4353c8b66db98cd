"""The inductor engine's kernels, made at build (runtime/kernels.py says what they are).

    engine["kernels"] = compile_kernels(request, files, engine, writer)

writes the step's engine.zip with the kernels in it. Two fresh processes
(builders/common/child.py), so that nothing of the build's own process (its in-memory
caches, its GPU memory) takes part:

  compile  opens the engine as the runtime does (runtime.inductor.InductorEngine),
           told to compile here, with an empty Inductor cache folder: the programs
           become plain FX graphs (runtime/graphs.py: graphs.json, graphs.safetensors,
           which a load compiles without torch.export.load or Dynamo), and every one
           is compiled, autotuned in CUDA's max-autotune mode, and captured; that
           folder becomes the engine's `kernels/` members, with `kernels.json` (the
           host key) and the graphs.
  check    opens the engine with those members through runtime.open's own path, in
           another empty cache folder: the load must compile nothing (Inductor's and
           AOTAutograd's cache-miss counters) and, on CUDA, time no kernel to choose
           its config (runtime.kernels.Tuning; the runtime refuses a load that does
           either), and its seconds are the warm-disk load time engine.json records.
"""

from __future__ import annotations

import json
import shutil
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kiln import proc

if TYPE_CHECKING:
    from kiln.store.api import Request, Writer

# A compile of an 8B-class engine with autotuning takes minutes; past this, a hang.
TIMEOUT = 3600.0


def compile_kernels(
    request: Request, files: dict[str, bytes], engine: dict[str, Any], writer: Writer
) -> dict[str, Any]:
    """Writes the engine (`files`, emptied once written) as the step's weights files
    and engine.zip, then adds the `kernels/...` members and `kernels.json` to it (appended:
    the weights are written once); what the two processes measured (engine.json's
    `kernels`; the caller writes engine.json again with it)."""
    from builders.causal_lm.backends.inductor import WEIGHTS, write_zip
    from runtime.kernels import META, PINNED_ROOT, new_pinned
    from runtime.kernels import files as cache_files

    weights = sorted(n for n in files if WEIGHTS.fullmatch(n))
    engine["data"] = weights  # beside engine.zip; the bundle step links them with it
    folder = writer.write_json("engine.json", engine).parent
    for name in weights:
        writer.write_bytes(name, files.pop(name))
    write_zip(folder / "engine.zip", files)
    files.clear()  # on disk now: the weights' bytes (16 GB at 8B) leave before the children
    # CUDA: compiled in the engine's pinned folder, where every load installs them
    # (runtime/kernels.py says why), emptied before the check so that it installs them
    pinned = new_pinned() if engine["provider"] == "cuda" else None
    with tempfile.TemporaryDirectory(prefix="kiln-kernels-") as tmp:
        compiled = PINNED_ROOT / pinned if pinned else Path(tmp) / "compiled"
        request.log("compiling the programs on this host (Inductor; autotuned on CUDA)")
        derived = Path(tmp) / "graphs"
        try:
            made = _child(request, "compile", folder, compiled, derived)
            kernels = cache_files(compiled)
        finally:
            if pinned:
                shutil.rmtree(compiled, ignore_errors=True)
        # the programs as the compile read them back (runtime/graphs.py): every load
        # compiles these graphs, so Inductor's caches find the kernels made from them
        programs = {p.name: p.read_bytes() for p in sorted(derived.iterdir())}
        carried = {
            "key": made["key"],
            **({"threads": made["threads"]} if "threads" in made else {}),
            **({"folder": pinned} if pinned else {}),
        }
        meta = json.dumps(carried, sort_keys=True, indent=1).encode()
        added = {**kernels, **programs, META: meta}
        write_zip(folder / "engine.zip", added, append=True)
        try:
            checked = _child(request, "check", folder, Path(tmp) / "checked")
        finally:
            if pinned:  # the first load here installs them again
                shutil.rmtree(compiled, ignore_errors=True)
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


def _child(
    request: Request, verb: str, work: Path, cache: Path, derived: Path | None = None
) -> dict[str, Any]:
    from builders.common.child import ChildFailed, run_json
    from runtime.kernels import RECOMPILE

    # the child's own Inductor cache; KILN_RECOMPILE of the caller's is not the child's
    env = {"TORCHINDUCTOR_CACHE_DIR": str(cache), RECOMPILE: ""}
    args = [verb, str(work), *([str(derived)] if derived else [])]
    try:
        return run_json("builders.causal_lm.backends._kernels", args, TIMEOUT, env)
    except proc.TimeoutExpired:
        raise request.error(
            f"the engine's {verb} process ran past {TIMEOUT:.0f} s", "see the step's log"
        ) from None
    except ChildFailed as exc:
        raise request.error(
            f"the engine's {verb} process failed (exit {exc.status}):\n" + "\n".join(exc.tail),
            "a kiln bug if the engine's programs exported: report it with the step's log",
        ) from None


def main(verb: str, work: Path, derived: Path | None = None) -> None:
    """`derived`: where the compile writes the graphs it derived and compiled."""
    engine = json.loads((work / "engine.json").read_text())
    start = time.perf_counter()
    if engine.get("tensor_parallel", 1) > 1:
        out = _ranks(verb, work, engine)
        files = out.pop("graphs", None)
    elif verb == "compile":
        import torch

        from runtime.inductor import InductorEngine
        from runtime.kernels import host_key

        made = InductorEngine(work / "engine.zip", engine, None, compile_here=True)
        files = made.graph_files
        out = {"key": host_key(engine["provider"])}
        if engine["provider"] == "cpu":
            out["threads"] = torch.get_num_threads()
    else:
        from runtime.backends import open_engine

        opened: Any = open_engine(work, engine, None)  # an InductorEngine
        out = {"kernels": opened.kernels}
        files = None
    if verb == "compile" and derived:
        from runtime.graphs import CONSTANTS, GRAPHS

        if files is None:
            raise SystemExit("the compile derived no graphs (engine.zip carries them already?)")
        derived.mkdir(parents=True, exist_ok=True)
        (derived / GRAPHS).write_bytes(files[0])
        (derived / CONSTANTS).write_bytes(files[1])
    print(json.dumps({**out, "seconds": time.perf_counter() - start}))


def _ranks(verb: str, work: Path, engine: dict[str, Any]) -> dict[str, Any]:
    """compile or check a tensor-parallel engine in its ranks (runtime/sharded.py): the
    programs all-reduce, so every rank runs them, each over its own shard, in one
    Inductor cache folder (the ranks' programs are the same graphs: one set of kernels)."""
    from runtime.kernels import host_key
    from runtime.sharded import Ranks

    target = ("engine", str(work / "engine.zip"), engine, verb == "compile")
    ranks = Ranks(int(engine["tensor_parallel"]), engine["provider"], target)
    try:
        ready = ranks.ready
    finally:
        ranks.close()
    if verb == "compile":
        key = host_key(engine["provider"])
        return {"key": key, "threads": ready[0]["threads"], "graphs": ready[0]["graphs"]}
    return {"kernels": ready[0]["kernels"]}


if __name__ == "__main__":
    import argparse

    parser = argparse.ArgumentParser()
    parser.add_argument("verb", choices=("compile", "check"))
    parser.add_argument("work", type=Path)
    parser.add_argument("derived", type=Path, nargs="?")
    args = parser.parse_args()
    main(args.verb, args.work, args.derived)
