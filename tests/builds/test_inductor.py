"""The inductor backend as a user builds it on CPU (issue 18): torch.export programs
over a static KV cache, weights stored once, compiled by Inductor's CPU backend in
runtime/; the fp32 bundle reproduces the reference's greedy tokens exactly. bf16 on a
CPU without native bf16 arithmetic, and the sm90 recipe on a host without CUDA, are
unsupported-here, never a pass. The ngram variant on the same engine (a verify program
of max_draft_len + 1 tokens) drafts losslessly: speculative greedy equals the bundle's
own greedy. About two minutes on 2 cores."""

from __future__ import annotations

import io
import json
import zipfile
from pathlib import Path
from typing import Any

import pytest
from conftest import World, heavy, make_world

pytestmark = heavy

BUILT = "tiny-llama-inductor"
CPU_BF16 = "tiny-llama-inductor-bf16"
GPU = "tiny-llama-inductor-h200"
PROGRAMS = ("decode.pt2", "decode_one.pt2", "prefill.pt2")
NGRAM = "tiny-llama-ngram-inductor"
NGRAM_GPU = "tiny-llama-ngram-inductor-h200"
INT8 = "tiny-llama-inductor-int8-wo-h200"
RECIPES = ("tiny-llama", BUILT, CPU_BF16, GPU, NGRAM, NGRAM_GPU, INT8)


@pytest.fixture(scope="module")
def ind(tmp_path_factory: pytest.TempPathFactory, hub: Path) -> World:
    w = make_world(tmp_path_factory.mktemp("inductor"), hub, RECIPES)
    # unsupported is no failure; the ngram recipe shares the fetch and reference steps
    w.doit("build", f"recipe={BUILT},{GPU},{NGRAM},{NGRAM_GPU},{INT8}", check=True)
    return w


def test_the_fp32_bundle_reproduces_the_reference_exactly(ind: World) -> None:
    e = ind.last(BUILT)
    assert e["verdict"] == "pass", e["reason"]
    assert e["backend"]["name"] == "inductor"
    assert e["metrics"]["token_match_rate"] == 1.0
    assert e["metrics"]["max_abs_logit_diff"] < 1e-4
    kinds = [s["kind"] for s in ind.manifest(BUILT)["lock"]["steps"]]
    assert "onnx" not in kinds and "export" not in kinds  # it compiles the checkpoint


def test_the_engine_holds_decode_and_prefill_programs_and_one_copy_of_the_weights(
    ind: World,
) -> None:
    import torch

    from runtime import graphs as runtime_graphs

    bundle = ind.artifact(BUILT, "bundle")
    with zipfile.ZipFile(bundle / "engine.zip") as archive:
        names = set(archive.namelist())
        program = json.loads(archive.read("program.json"))
        programs = [torch.export.load(io.BytesIO(archive.read(n))) for n in PROGRAMS]
        weights = (bundle / "weights.safetensors").stat().st_size  # beside the zip
        graphs = runtime_graphs.decode(
            archive.read(runtime_graphs.GRAPHS), archive.read(runtime_graphs.CONSTANTS)
        )
    # what a load compiles: the decode programs (max batch, and one row: the recipe's
    # build.decode_batch_one) with their greedy bookkeeping, the prefill's
    assert set(graphs) == {"decode", "decode_one", "prefill"}
    argmax = {k: any("argmax" in str(n.target) for n in g.graph.nodes) for k, g in graphs.items()}
    assert argmax == {"decode": True, "decode_one": True, "prefill": False}
    assert program["decode_batch_one"] is True
    kernels = {n for n in names if n.startswith("kernels/")}
    assert kernels and names - kernels == {
        *PROGRAMS,
        "program.json",
        "kernels.json",
        "graphs.json",
        "graphs.safetensors",
    }
    assert program["prefill_chunk_len"] == 16 and program["dtype"] == "float32"
    # q/k/v and gate/up run as one matmul each: their weights are stored fused
    layers = {n.rsplit(".", 2)[-2] for n in program["weights"] if ".layers." in n}
    assert {"qkv_proj", "gate_up_proj"} <= layers
    assert not layers & {"q_proj", "k_proj", "v_proj", "gate_proj", "up_proj"}
    for ep in programs:  # the weights are inputs: no copy in either program
        assert len(ep.state_dict) == 0 and ep.example_inputs is None
        assert sum(t.numel() for t in ep.constants.values()) * 4 < weights / 100
        # attention over the 2 KV heads, each with its 2 query heads' rows: the cache
        # is never expanded to the 4 query heads
        attention = [n for n in ep.graph.nodes if "scaled_dot_product" in str(n.target) and n.args]
        assert attention and all(
            n.args[0].meta["val"].shape[1] == n.args[1].meta["val"].shape[1] == 2 for n in attention
        )


def test_the_runtime_prefills_in_chunks_and_decodes_what_the_reference_did(ind: World) -> None:
    import numpy as np

    import runtime
    from runtime.inductor_lm import InductorBundle

    bundle = runtime.open(ind.artifact(BUILT, "bundle"))
    assert isinstance(bundle, InductorBundle) and sorted(bundle.session.steps) == [1, 16]
    reference = json.loads((ind.artifact(BUILT, "reference") / "reference.json").read_text())
    record = reference["records"][0]
    engine = bundle.engine
    one, steps = engine.step_one, []
    assert one is not None

    def counted(*args: Any) -> Any:
        steps.append(args[len(engine.weights)].shape[0])  # the ids' rows
        return one(*args)

    engine.step_one = counted
    out = bundle.generate([record["prompt_ids"]], len(record["tokens"]))
    assert out.tokens[0] == record["tokens"]
    # batch 1 decoded through the one-row program; two rows through the max-batch one,
    # which gives each row the same tokens
    assert steps == [1] * (len(record["tokens"]) - 1)
    two = bundle.generate([record["prompt_ids"]] * 2, len(record["tokens"]))
    assert two.tokens == [record["tokens"]] * 2 and len(steps) == len(record["tokens"]) - 1
    ids = record["prompt_ids"] + record["tokens"]
    chunked = bundle.logits(ids)  # 16-token chunks, then single tokens
    bundle.session.chunk = 0
    single = bundle.logits(ids)  # token by token through the decode program
    assert chunked.shape == single.shape == (len(ids), 512)
    assert np.abs(chunked - single).max() < 1e-4


def test_what_this_host_cannot_run_is_unsupported_here_with_the_reason(ind: World) -> None:
    gpu = ind.last(GPU)
    assert gpu["verdict"] == "unsupported-here"
    assert "needs a CUDA device" in gpu["reason"]
    int8 = ind.last(INT8)  # calibrated, then refused by the engine on any host
    assert int8["verdict"] == "unsupported-here"
    assert "builds fp8 weights (torch._scaled_mm) and no other" in int8["reason"]
    assert "quantize" in [s["kind"] for s in ind.manifest(INT8)["lock"]["steps"]]
    flags = Path("/proc/cpuinfo").read_text()
    if "avx512_bf16" in flags or "amx_bf16" in flags:
        pytest.skip("this CPU has native bf16 arithmetic")
    ind.doit("build", f"recipe={CPU_BF16}", check=True)
    bf16 = ind.last(CPU_BF16)
    assert bf16["verdict"] == "unsupported-here"
    assert "no native arithmetic" in bf16["reason"]


def test_greedy_on_the_device_matches_the_host_loop_for_a_padded_batch(ind: World) -> None:
    """The engine's own greedy steps (argmax inside the compiled step, ids read once a
    block) choose what Bundle's host loop over the logits chooses, row by row of a
    left-padded batch; suppressed ids are never chosen; the first token is timed."""
    import runtime
    from runtime.causal_lm import Bundle
    from runtime.inductor import BLOCK
    from runtime.inductor_lm import InductorBundle

    bundle = runtime.open(ind.artifact(BUILT, "bundle"), expect=InductorBundle)
    reference = json.loads((ind.artifact(BUILT, "reference") / "reference.json").read_text())
    prompts = [r["prompt_ids"] for r in reference["records"][:2]]
    assert len(prompts[0]) != len(prompts[1])  # so one row is left-padded
    new = BLOCK + 5  # a whole block and single steps
    device = bundle.generate(prompts, new)
    host = Bundle.generate(bundle, prompts, new)
    assert device.tokens == host.tokens
    assert [
        t[: len(r["tokens"])] for t, r in zip(device.tokens, reference["records"], strict=False)
    ] == [r["tokens"][:new] for r in reference["records"][:2]]
    assert 0 < device.first_token_seconds <= device.seconds
    assert 0 < host.first_token_seconds <= host.seconds
    banned = tuple(sorted({t for row in device.tokens for t in row}))[:5]
    bundle.eos = set()
    out = bundle.generate(prompts, new, suppress=banned).tokens
    assert all(len(row) == new and not set(row) & set(banned) for row in out)


def test_doit_run_prints_tokens_per_second_and_time_to_first_token(ind: World) -> None:
    out = ind.doit(
        "run", f"recipe={BUILT}", "prompt=one two", "max_new_tokens=8", "stats=1", check=True
    ).stdout
    line = next(x for x in out.splitlines() if x.startswith("timing:"))
    assert "inductor on cpu: 8 tokens in" in line and "tokens/s" in line
    assert "time to first token" in line


def test_doit_run_speculates_on_the_ngram_bundle(ind: World) -> None:
    """`doit run` takes the bundle's own generate: the drafting bundle speculates, and
    its acceptance is in the timing line (seeded sampling through the same generate is
    test_seeded_sampling_speculates_reproducibly, through the runtime)."""
    prompt = "one two three one two three one two"
    out = ind.doit(
        "run", f"recipe={NGRAM}", f"prompt={prompt}", "max_new_tokens=12", "stats=1", check=True
    ).stdout
    line = next(x for x in out.splitlines() if x.startswith("timing:"))
    assert "inductor on cpu: 12 tokens in" in line and "tokens per verify forward" in line


def test_the_two_stage_argmax_picks_what_argmax_picks() -> None:
    """runtime/inductor.py's split argmax, on rows wider than a block, with ties inside
    a block and across blocks, a -inf ban and a NaN-free row of equal values."""
    import torch

    from runtime.inductor import SPLIT, _argmax

    g = torch.Generator().manual_seed(0)
    width = 5 * SPLIT + 123
    rows = torch.randint(0, 7, (6, width), generator=g).float()  # many ties
    rows[1] = 3.0  # all equal: index 0
    rows[2, : SPLIT + 5] = float("-inf")  # the first block banned
    rows[3, -1] = 99.0  # the maximum in the padded last block
    rows[4, [10, SPLIT + 10]] = 50.0  # a tie across blocks: the first
    want = rows.argmax(-1, keepdim=True)
    assert torch.equal(_argmax(rows), want)
    assert torch.equal(torch.compile(_argmax, dynamic=False)(rows), want)


def test_grouped_sdpa_equals_transformers_sdpa_with_repeated_heads() -> None:
    """The engine's attention folds each KV head's query group into rows; the numbers
    equal transformers' sdpa over repeated KV heads, for one token and for a chunk."""
    import torch
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    from builders.causal_lm.backends.inductor import grouped_sdpa

    class Layer(torch.nn.Module):
        num_key_value_groups = 3

    g = torch.Generator().manual_seed(0)
    for t in (1, 5):
        q = torch.randn(2, 6, t, 8, generator=g)
        k, v = torch.randn(2, 2, 12, 8, generator=g), torch.randn(2, 2, 12, 8, generator=g)
        seen = torch.rand(2, 1, t, 12, generator=g) > 0.3
        seen[..., 0] = True
        mask = torch.where(seen, 0.0, torch.finfo(torch.float32).min)
        theirs, _ = sdpa_attention_forward(Layer(), q, k, v, mask, scaling=0.35)
        ours, _ = grouped_sdpa(Layer(), q, k, v, mask, scaling=0.35)
        assert ours.shape == theirs.shape == (2, t, 6, 8)
        assert torch.allclose(ours, theirs, atol=1e-6)


@pytest.fixture(scope="module")
def spec(ind: World) -> Any:
    """The ngram bundle, opened (and compiled) once for the tests below."""
    import runtime
    from runtime.inductor_lm import InductorSpeculativeBundle

    return runtime.open(ind.artifact(NGRAM, "bundle"), expect=InductorSpeculativeBundle)


def test_the_ngram_variant_drafts_losslessly_on_the_inductor_engine(ind: World) -> None:
    e = ind.last(NGRAM)
    assert e["verdict"] == "pass", e["reason"]
    assert e["backend"]["name"] == "inductor"
    m = e["metrics"]
    assert m["token_match_rate"] == 1.0 and m["speculative_match_rate"] == 1.0
    assert m["tokens_per_forward"] > 1.0 and m["acceptance_rate"] > 0.0
    gpu = ind.last(NGRAM_GPU)
    assert gpu["verdict"] == "unsupported-here" and "needs a CUDA device" in gpu["reason"]


def test_the_verify_program_has_the_verify_length_and_reads_the_shared_weights(
    ind: World,
) -> None:
    import torch

    bundle = ind.artifact(NGRAM, "bundle")
    with zipfile.ZipFile(bundle / "engine.zip") as archive:
        names = set(archive.namelist())
        program = json.loads(archive.read("program.json"))
        verify = torch.export.load(io.BytesIO(archive.read("verify.pt2")))
    weights = (bundle / "weights.safetensors").stat().st_size
    kernels = {n for n in names if n.startswith("kernels/")}
    assert names - kernels == {  # batch 1: no one-row decode program beside its decode
        "decode.pt2",
        "prefill.pt2",
        "verify.pt2",
        "program.json",
        "kernels.json",
        "graphs.json",
        "graphs.safetensors",
    }
    assert program["verify_len"] == 5  # max_draft_len 4, plus the last committed token
    assert len(verify.state_dict) == 0 and verify.example_inputs is None
    assert sum(t.numel() for t in verify.constants.values()) * 4 < weights / 100
    nodes = {n.name: n for n in verify.graph.nodes if n.op == "placeholder"}
    ids = verify.graph_signature.user_inputs[len(program["weights"])]  # input_ids [B, T]
    assert tuple(nodes[ids].meta["val"].shape) == (1, 5)


def test_speculative_greedy_equals_the_bundles_own_greedy_and_the_reference(
    ind: World, spec: Any
) -> None:
    reference = json.loads((ind.artifact(NGRAM, "reference") / "reference.json").read_text())
    assert sorted(spec.session.steps) == [1, 5, 16]
    drafted = 0
    for record in reference["records"]:
        new = len(record["tokens"])
        out = spec.generate([record["prompt_ids"]], new).tokens[0]
        drafted += spec.last_stats.drafted
        assert out == spec.generate_plain([record["prompt_ids"]], new).tokens[0]
        assert out == record["tokens"]
    assert drafted > 0  # rounds that verified drafts through the 5-token program


def test_the_target_extends_truncates_and_overlaps_over_the_device_cache(
    ind: World, spec: Any
) -> None:
    """Feeds of every length (a shorter one runs as a verify call that starts inside
    the committed tokens), and a rejected round cut back, give the logits of one pass
    over the committed sequence."""
    import numpy as np

    reference = json.loads((ind.artifact(NGRAM, "reference") / "reference.json").read_text())
    ids = reference["records"][0]["prompt_ids"] + reference["records"][0]["tokens"]
    whole = spec.logits(ids)
    target = spec.target()
    rows, at = [], 0
    for n in (len(ids) - 20, 5, 3, 1, 2, 4):
        rows.append(target.extend(ids[at : at + n])[0])
        at += n
        wrong, _ = target.extend([7, 8, 9, 10, 11])  # a rejected round's drafts
        assert wrong.shape == (5, 512)
        target.truncate(at)
    assert at == len(ids) - 5
    got = np.concatenate(rows)
    assert got.shape == (at, 512)
    assert np.abs(got - whole[:at]).max() < 1e-4


def test_seeded_sampling_speculates_reproducibly(spec: Any) -> None:
    from runtime import Sampler

    prompt = [1, 5, 9, 5, 9, 5, 9, 5, 9, 5]
    runs = [spec.generate([prompt], 24, Sampler(temperature=0.9, seed=4)).tokens for _ in range(2)]
    assert runs[0] == runs[1] and 0 < len(runs[0][0]) <= 24
    assert all(0 <= t < 512 for t in runs[0][0])
    other = spec.generate([prompt], 24, Sampler(temperature=0.9, seed=5)).tokens
    assert other != runs[0]


OPEN = """
import json, sys
import torch
import runtime
from torch._dynamo.utils import counters
runtime.open(sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else None)
out = {k: dict(counters[k]) for k in ("inductor", "aot_autograd")}
print(json.dumps({**out, "threads": torch.get_num_threads()}))
"""


def _open_fresh(bundle: Path, cache: Path, *args: str, **env: str) -> Any:
    """runtime.open of `bundle` (with `args`: its threads) in a fresh process whose
    Inductor cache is `cache`."""
    import os
    import subprocess
    import sys

    from conftest import ROOT, SLOW

    run_env = {**os.environ, "TORCHINDUCTOR_CACHE_DIR": str(cache), **env}
    return subprocess.run(
        [sys.executable, "-c", OPEN, str(bundle), *args],
        capture_output=True, text=True, timeout=SLOW, cwd=ROOT, env=run_env,
    )  # fmt: skip


def test_a_thread_count_the_kernels_were_not_made_for_is_said_not_used(
    ind: World, tmp_path: Path
) -> None:
    """The CPU kernels are C++ generated for a thread count: runtime.open(threads=N)
    with another N runs at the carried count, compiles nothing, and says so."""
    bundle = ind.artifact(BUILT, "bundle")
    with zipfile.ZipFile(bundle / "engine.zip") as archive:
        made = json.loads(archive.read("kernels.json"))["threads"]
    done = _open_fresh(bundle, tmp_path / "cache", str(made + 1))
    assert done.returncode == 0, done.stderr[-2000:]
    got = json.loads(done.stdout.strip().splitlines()[-1])
    assert got["threads"] == made
    assert got["inductor"].get("fxgraph_cache_miss", 0) == 0
    assert f"runs at {made} threads, not the {made + 1} asked" in done.stderr


def test_the_engine_carries_its_kernels_and_a_fresh_process_compiles_nothing(
    ind: World, tmp_path: Path
) -> None:
    """Issue 39: the kernels are chosen once, at build, and are part of the engine; a
    load in a new process with an empty Inductor cache finds every graph there (no
    FX-graph or AOTAutograd miss: nothing compiled, nothing autotuned), and the sealed
    bundle is not written to."""
    from runtime.kernels import host_key

    bundle = ind.artifact(BUILT, "bundle")
    with zipfile.ZipFile(bundle / "engine.zip") as archive:
        carried = json.loads(archive.read("kernels.json"))
        members = [n for n in archive.namelist() if n.startswith("kernels/")]
    assert carried["key"] == host_key("cpu")
    assert any(n.endswith(".so") for n in members)  # the compiled C++, not only its source
    engine = json.loads((ind.artifact(BUILT, "engine") / "engine.json").read_text())["kernels"]
    assert engine["files"] == len(members) and engine["load_seconds"] > 0
    before = sorted(p.name for p in bundle.rglob("*"))
    done = _open_fresh(bundle, tmp_path / "cache")
    assert done.returncode == 0, done.stderr[-2000:]
    counters = json.loads(done.stdout.strip().splitlines()[-1])
    assert counters["inductor"].get("fxgraph_cache_miss", 0) == 0, counters
    assert counters["aot_autograd"].get("autograd_cache_miss", 0) == 0, counters
    assert counters["inductor"]["fxgraph_cache_hit"] >= 2  # decode and prefill
    assert sorted(p.name for p in bundle.rglob("*")) == before


def test_a_load_that_compiles_what_it_installed_is_refused_saying_its_state(
    ind: World, tmp_path: Path
) -> None:
    """The guard behind "a load compiles nothing": with Inductor's FX-graph cache off,
    the installed kernels are not found and the graphs compile afresh, with numerics
    nobody validated; the load is refused, with this process's share of Inductor's
    cache key (threads, grad mode, dtype, ...: what to compare where a long-lived
    `doit -n 2` worker missed, runtime/inductor.py _key_state)."""
    import re

    bundle = ind.artifact(BUILT, "bundle")
    done = _open_fresh(bundle, tmp_path / "cache", TORCHINDUCTOR_FX_GRAPH_CACHE="0")
    assert done.returncode != 0, done.stdout[-2000:]
    assert "graphs were compiled afresh on this load" in done.stderr, done.stderr[-3000:]
    state = r"\[threads \d+ \(carried \d+\); grad \w+; .*; load in this process 1; pid \d+\]"
    assert re.search(state, done.stderr), done.stderr[-3000:]


def test_kernels_built_for_another_host_are_refused_unless_recompiling_is_asked(
    ind: World, tmp_path: Path
) -> None:
    """A host whose torch (or GPU, Triton, CPU features) differs from the build's would
    compile kernels of its own, with numerics nobody validated: the load is refused,
    naming both keys; KILN_RECOMPILE=1 compiles here and says so on stderr."""
    import shutil

    import runtime
    from runtime.format import BundleError

    copy = tmp_path / "bundle"
    shutil.copytree(ind.artifact(BUILT, "bundle"), copy)
    for p in [copy, *copy.rglob("*")]:
        p.chmod(0o755)
    engine = copy / "engine.zip"
    with zipfile.ZipFile(engine) as archive:
        files = {n: archive.read(n) for n in archive.namelist()}
    key = json.loads(files["kernels.json"])["key"]
    files["kernels.json"] = json.dumps({"key": {**key, "torch": "2.0.0"}}).encode()
    with zipfile.ZipFile(engine, "w") as archive:
        for name, data in files.items():
            archive.writestr(name, data)
    with pytest.raises(BundleError, match=r"another host: torch 2\.0\.0 \(here .*KILN_RECOMPILE=1"):
        runtime.open(copy)
    done = _open_fresh(copy, tmp_path / "cache", KILN_RECOMPILE="1")
    assert done.returncode == 0, done.stderr[-2000:]
    assert "compiling here (KILN_RECOMPILE=1)" in done.stderr
    counters = json.loads(done.stdout.strip().splitlines()[-1])
    assert counters["inductor"]["fxgraph_cache_miss"] >= 2


def test_damaged_or_missing_weights_are_refused_not_loaded(ind: World, tmp_path: Path) -> None:
    """The weights file beside engine.zip is mapped, not read through zipfile (runtime/
    inductor.py _mapped): one flipped byte fails the CRC-32 the build recorded, and a
    missing file is named, instead of a load running on either."""
    import shutil

    import runtime
    from runtime.format import BundleError

    copy = tmp_path / "bundle"
    shutil.copytree(ind.artifact(BUILT, "bundle"), copy)
    weights = copy / "weights.safetensors"
    weights.chmod(0o644)
    data = bytearray(weights.read_bytes())
    data[len(data) // 2] ^= 0xFF
    weights.write_bytes(bytes(data))
    with pytest.raises(BundleError, match=r"weights\.safetensors: truncated or corrupt"):
        runtime.open(copy)
    weights.unlink()
    with pytest.raises(BundleError, match=r"weights\.safetensors: cannot read the engine's"):
        runtime.open(copy)


def test_greedy_tokens_are_the_same_in_five_fresh_processes(ind: World) -> None:
    """The determinism feature of the validation (issue 39), on the CPU form: five
    fresh processes load the bundle and decode the validation's prompts; one distinct
    output. A proof that failed would fail the verdict (kiln/evidence/record.py)."""
    e = ind.last(BUILT)
    proof = e["features"]["determinism"]
    assert proof["proved"], proof["check"]
    assert proof["metrics"]["processes"] == 5 and proof["metrics"]["distinct_outputs"] == 1
    assert 0 < proof["metrics"]["load_seconds_median"] <= proof["metrics"]["load_seconds_max"]
