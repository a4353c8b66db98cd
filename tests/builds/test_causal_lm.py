"""`doit build` as a user runs it: real checkpoints, real ONNX, real onnxruntime,
a real fp32 transformers reference, and the manifest it leaves behind."""

from __future__ import annotations

import hashlib
import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml
from conftest import ROOT, World, heavy, make_world

import tinyhub
from kiln import hostinfo

pytestmark = heavy

EXECUTED = re.compile(r"^\.  (\w+)", re.MULTILINE)  # doit prints ".  title" for tasks it runs


def executed(output: str) -> list[str]:
    return EXECUTED.findall(output)


def test_build_writes_a_passing_manifest_with_lock_and_evidence(built: World) -> None:
    for name in ("tiny-llama", "tiny-qwen3"):
        m = built.manifest(name)
        assert m["schema_version"] == 1 and m["recipe"] == name
        evidence = m["evidence"][-1]
        assert evidence["verdict"] == "pass", evidence
        assert evidence["metrics"]["max_abs_logit_diff"] < 1e-4
        assert evidence["metrics"]["token_match_rate"] == 1.0
        assert evidence["backend"]["name"] == "onnxruntime"
        assert evidence["host"]["cpu"]
        kinds = [s["kind"] for s in m["lock"]["steps"]]
        assert kinds == ["fetch", "reference", "export", "onnx", "engine", "bundle", "validate"]
        assert evidence["step_key"] == m["lock"]["steps"][-1]["key"]
        assert m["lock"]["toolchain"]["onnxruntime"] == evidence["backend"]["version"]


def test_lock_records_the_sha256_of_every_checkpoint_file(built: World) -> None:
    lock = built.manifest("tiny-llama")["lock"]["model"]
    snapshot = tinyhub.repo_dir(built.hub, lock["repo"]) / "snapshots" / lock["revision"]
    on_disk = {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in snapshot.iterdir()}
    assert {f["path"]: f["sha256"] for f in lock["files"]} == on_disk


def test_manifest_is_canonical_json(built: World) -> None:
    path = built.root / "manifests" / "tiny-llama.json"
    text = path.read_text()
    assert text.endswith("}\n")
    assert text == json.dumps(json.loads(text), sort_keys=True, indent=2) + "\n"


def test_a_second_build_executes_nothing(built: World) -> None:
    out = built.doit("build", check=True).stdout
    assert executed(out) == []
    assert out.count("-- ") >= 14
    *_, head, tail = out.splitlines()  # the summary, last
    assert head.startswith("summary: 2 recipes in ") and tail == "  2 recipes up to date", out


def test_recipes_that_share_a_checkpoint_share_its_steps(built: World) -> None:
    data = built.recipe("tiny-llama")
    data["build"]["max_batch_size"] = 2
    built.write_recipe("tiny-llama-b2", data)
    try:
        out = built.doit("build", "recipe=tiny-llama-b2", check=True).stdout
        assert executed(out) == ["engine", "bundle", "validate", "manifest"]
        assert built.manifest("tiny-llama-b2")["evidence"][-1]["verdict"] == "pass"
        # what decided the verdict, then one summary line for the recipe
        gates = [line.strip() for line in out.splitlines() if line.startswith("     gate ")]
        assert gates and all(g.endswith(": pass") for g in gates), out
        summary = out.splitlines()[-1]
        bundle = built.artifact("tiny-llama-b2", "bundle")
        assert summary.startswith("  tiny-llama-b2: pass; steps 3 run ("), summary
        assert summary.endswith(f", 4 reused; bundle {bundle}"), summary
    finally:
        (built.root / "recipes" / "tiny-llama-b2.yaml").unlink()


def test_changing_max_seq_len_reruns_only_engine_bundle_and_validate(world: World) -> None:
    world.doit("build", "recipe=tiny-llama", check=True)
    before = world.last("tiny-llama")
    data = world.recipe("tiny-llama")
    data["build"]["max_seq_len"] = 128
    world.write_recipe("tiny-llama", data)
    out = world.doit("build", "recipe=tiny-llama", check=True).stdout
    assert executed(out) == ["engine", "bundle", "validate", "manifest"]
    # the manifest is the current state: the new build's record replaces the old one's
    (record,) = world.manifest("tiny-llama")["evidence"]
    assert record["step_key"] != before["step_key"]


def test_two_clean_builds_give_identical_locks(tmp_path: Path, hub: Path, built: World) -> None:
    other = make_world(tmp_path, hub, ("tiny-llama",))
    other.doit("build", "recipe=tiny-llama", check=True)
    assert other.manifest("tiny-llama")["lock"] == built.manifest("tiny-llama")["lock"]


def test_doit_run_prints_the_bundles_greedy_completion(built: World) -> None:
    out = built.doit(
        "run", "recipe=tiny-llama", "prompt=The quick brown fox", "max_new_tokens=8", check=True
    )
    assert "The quick brown fox" in out.stdout
    import runtime

    plan_out = built.doit("plan", "recipe=tiny-llama", check=True).stdout
    bundle_key = re.search(r"bundle\s+([0-9a-f]{12})", plan_out).group(1)  # type: ignore[union-attr]
    bundle_dir = next((built.store / "objects").glob(f"*/{bundle_key}*"))
    b = runtime.open(bundle_dir)
    gen = b.generate([b.encode("The quick brown fox")], 8)
    assert "The quick brown fox" + b.decode(gen.tokens[0]) in out.stdout


def test_plan_lists_every_step_with_its_key_and_state(built: World, world: World) -> None:
    done = built.doit("plan", "recipe=tiny-llama", check=True).stdout
    fresh = world.doit("plan", "recipe=tiny-llama", check=True).stdout
    for kind in ("fetch", "reference", "export", "onnx", "engine", "bundle", "validate"):
        assert re.search(rf"{kind}\s+[0-9a-f]{{12}}\s+up to date", done), kind
        assert re.search(rf"{kind}\s+[0-9a-f]{{12}}\s+will run", fresh), kind


# ---------------------------------------------------------------- bad input


def assert_clean_failure(world: World, args: tuple[str, ...], *expected: str) -> str:
    before = sorted(p.name for p in (world.root / "manifests").iterdir())
    proc = world.doit(*args)
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0, out
    assert "Traceback" not in out, out
    for text in expected:
        assert text in out, out
    assert sorted(p.name for p in (world.root / "manifests").iterdir()) == before
    objects = world.store / "objects"
    assert not objects.exists() or not any(objects.rglob("*.json")), "something was published"
    return out


@pytest.mark.parametrize(
    ("edit", "expected"),
    [
        (
            ("revision: 86b0c016f94ff17585b315e24e0f72b043294bed", "revision: main"),
            "recipes/bad.yaml:9:13: model -> revision",
        ),
        (
            ("  max_seq_len: 256", "  max_seq_len: 256\n  max_seqlen: 9"),
            "recipes/bad.yaml:19:3: build -> max_seqlen: unknown key",
        ),
        (
            ("thresholds: fp32-exact", "thresholds: missing"),
            "recipes/bad.yaml:20:15: validation -> thresholds: thresholds/missing.yaml",
        ),
        (
            ("revision: 86b0c016f94ff17585b315e24e0f72b043294bed", "revision: " + "ab" * 20),
            "recipes/bad.yaml:9:13: model -> revision: revision abababab",
        ),
        (
            ("repo: kiln-tiny/llama\n", "repo: kiln-tiny/lama\n"),
            "recipes/bad.yaml:8:9: model -> repo: repo kiln-tiny/lama is not in the hub cache",
        ),
    ],
)
def test_bad_recipes_fail_with_file_and_line_and_write_nothing(
    world: World, edit: tuple[str, str], expected: str
) -> None:
    text = (world.root / "recipes" / "tiny-llama.yaml").read_text()
    assert edit[0] in text
    world.write_recipe("bad", text.replace(*edit))
    assert_clean_failure(world, ("build", "recipe=bad"), expected)


def test_an_unknown_recipe_name_suggests_a_close_one(world: World) -> None:
    assert_clean_failure(
        world,
        ("build", "recipe=tiny-lama"),
        "unknown recipe 'tiny-lama'",
        "did you mean 'tiny-llama'?",
    )


def test_a_tampered_checkpoint_file_is_refused_with_both_digests(
    tmp_path: Path, built: World
) -> None:
    hub = tmp_path / "hub"
    shutil.copytree(built.hub, hub, symlinks=True)
    world = make_world(tmp_path / "w", hub, ("tiny-llama",))
    shutil.copy(built.root / "manifests" / "tiny-llama.json", world.root / "manifests")
    lock = built.manifest("tiny-llama")["lock"]["model"]
    config = tinyhub.repo_dir(hub, lock["repo"]) / "snapshots" / lock["revision"] / "config.json"
    blob = config.resolve()
    recorded = next(f["sha256"] for f in lock["files"] if f["path"] == "config.json")
    blob.unlink()  # the copied hub shares nothing with the session's hub
    blob.write_text('{"tampered": true}\n')
    got = hashlib.sha256(blob.read_bytes()).hexdigest()
    out = world.doit("build", "recipe=tiny-llama").stdout
    assert "Traceback" not in out
    assert recorded in out and got in out
    assert (
        json.loads((world.root / "manifests" / "tiny-llama.json").read_text())["evidence"]
        == built.manifest("tiny-llama")["evidence"]
    )


def test_a_new_validation_run_appends_to_a_committed_manifest(tmp_path: Path, built: World) -> None:
    """A fresh clone carries manifests from elsewhere; its own run on another host
    class adds its own record (on the same class, an equivalent one adds nothing:
    test_rebuilding_an_unchanged_recipe_leaves_git_clean)."""
    world = make_world(tmp_path, built.hub, ("tiny-llama",))
    data = built.manifest("tiny-llama")
    for e in data["evidence"]:
        e["host"] = {**e["host"], "cpu": "Another CPU", "cores": 64}
    (world.root / "manifests" / "tiny-llama.json").write_text(json.dumps(data))
    before = world.manifest("tiny-llama")["evidence"]
    world.doit("build", "recipe=tiny-llama", check=True)
    after = world.manifest("tiny-llama")["evidence"]
    assert after[: len(before)] == before
    assert len(after) == len(before) + 1
    assert after[-1]["step_key"] == before[-1]["step_key"]  # same inputs, a new run


@pytest.mark.skipif(bool(hostinfo.gpu_name()), reason="this host has a GPU")
def test_building_everything_leaves_gpu_recipes_to_gpu_hosts(tmp_path: Path, hub: Path) -> None:
    """A CPU machine building the catalog must not append its records to a GPU host's
    evidence; asked by name, it builds (and says what it could not do)."""
    world = make_world(tmp_path, hub, recipes=())
    data = yaml.safe_load((ROOT / "recipes" / "tiny-llama.yaml").read_text())
    world.write_recipe("gpu-llama", {**data, "tags": ["gpu", "h200"]})
    proc = world.doit("build")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "1 recipes are tagged gpu and this host has no GPU (gpu-llama)" in proc.stdout
    assert not (world.root / "manifests" / "gpu-llama.json").exists()
    assert "validate gpu-llama" not in proc.stdout


def test_edited_gates_rejudge_the_recorded_metrics_and_a_quality_fail_exits_1(
    world: World,
) -> None:
    """Thresholds are part of a verdict's identity: an edited gate makes `doit check`
    call the verdict stale and `doit build` judge the same metrics again, running no
    step. A quality-fail is recorded and exits 1, every time, unless allowed."""
    world.doit("build", "recipe=tiny-llama", check=True)
    first = world.manifest("tiny-llama")["evidence"][-1]
    assert first["verdict"] == "pass" and first["thresholds"]["name"] == "fp32-exact"
    gates = world.root / "thresholds" / "fp32-exact.yaml"
    gates.write_text(gates.read_text().replace("threshold: 0.99999", "threshold: 1.5"))

    check = world.doit("check")
    assert check.returncode == 0, check.stdout + check.stderr  # stale is not an error ...
    assert "tiny-llama.json: its pass of " in check.stdout
    assert "was judged under other gates: thresholds/fp32-exact.yaml changed" in check.stdout
    assert world.doit("check", "strict=1").returncode == 1  # ... unless strict

    failed = world.doit("build", "recipe=tiny-llama")
    out = failed.stdout + failed.stderr
    assert failed.returncode == 1, out
    assert executed(failed.stdout) == ["manifest"], out  # judged again: no step reran
    assert "tiny-llama: quality-fail: min_logit_cosine = " in out and "needs >= 1.5" in out
    assert "allow_quality_fail=1" in out
    (again,) = world.manifest("tiny-llama")["evidence"]  # re-judged: its slot replaced
    assert again["verdict"] == "quality-fail"
    assert (again["date"], again["metrics"]) == (first["date"], first["metrics"])
    assert again["thresholds"]["sha256"] != first["thresholds"]["sha256"]

    repeat = world.doit("build", "recipe=tiny-llama")  # a recorded fail still fails
    assert repeat.returncode == 1 and "manifests/tiny-llama.json unchanged" in repeat.stdout
    assert world.manifest("tiny-llama")["evidence"] == [again]
    allowed = world.doit("build", "recipe=tiny-llama", "allow_quality_fail=1")
    assert allowed.returncode == 0, allowed.stdout + allowed.stderr
    assert world.doit("build", "recipe=tiny-llama", "allow_quality_fail=1").stdout.count(".  ") == 0
    assert "stale" not in world.doit("check", "strict=1", check=True).stdout.split("ok:")[0]


def test_the_engine_reads_the_checkpoints_weights_as_stored_fusing_adjacent_siblings(
    built: World,
) -> None:
    """Every weight matrix the engine multiplies by is read as the checkpoint stores
    it ([N, K], FusedMatMul transB=1: builders/common/weights.py). Sibling projections
    (one input, the same K) are fused where their weights lie back to back in the
    checkpoint's file: in safetensors' name order a layer's k_proj, o_proj, q_proj,
    v_proj and gate_proj, up_proj, so q+v and gate+up each become one FusedMatMul and
    a Split, and k stays alone. The tiny llama's safetensors data starts at 40 mod 64,
    off a cache line, so the engine reads none of it in place: every tensor lies in
    its own data file, each on a 64-byte boundary (the SmolLM2 import, whose data
    starts on a page, is read in place: tests/builds/test_real_chat.py). No grouped
    attention repeats the KV heads (builders/causal_lm/_attention.py); the manifest
    above shows the graph still reproduces the reference exactly."""
    import onnx

    from builders.common.weights import ALIGN

    steps = {s["kind"]: s["key"] for s in built.manifest("tiny-llama")["lock"]["steps"]}
    key, fetched = steps["engine"], steps["fetch"]
    folder = built.store / "objects" / key[:2] / key
    graph = onnx.load(str(folder / "engine.onnx"), load_external_data=False).graph
    checkpoint = built.store / "objects" / fetched[:2] / fetched / "checkpoint"
    with (checkpoint / "model.safetensors").open("rb") as fh:
        assert (8 + int.from_bytes(fh.read(8), "little")) % ALIGN == 40
    data = json.loads((folder / "engine.json").read_text())["data"]
    assert "model.safetensors" not in data and all(f.endswith(".data") for f in data), data
    weights = {t.name: t for t in graph.initializer}
    external = [{e.key: e.value for e in t.external_data} for t in weights.values()]
    assert {e["location"] for e in external if e} == set(data)
    assert all(int(e.get("offset", 0)) % ALIGN == 0 for e in external if e)
    assert not [n.name for n in graph.node if n.op_type == "MatMul" and n.input[1] in weights]
    readers: dict[str, list[str]] = {}
    for node in graph.node:
        if node.op_type == "FusedMatMul" and node.input[1] in weights:
            assert {a.name: a.i for a in node.attribute}["transB"] == 1, node.name
            readers.setdefault(node.input[0], []).append(
                re.findall(r"\w+_proj|lm_head", node.name)[0]
            )
    layers = tinyhub.SPECS["kiln-tiny/llama"]["num_hidden_layers"]
    together = sorted(sorted(r) for r in readers.values() if len(r) > 1)
    assert together == [["k_proj", "q_proj"]] * layers, together  # k, and q+v fused
    producer = {o: n.op_type for n in graph.node for o in n.output}
    # onnxruntime may make other Splits (GatherSliceToSplitFusion): count the fused ones
    splits = [
        n.name
        for n in graph.node
        if n.op_type == "Split" and producer.get(n.input[0]) == "FusedMatMul"
    ]
    assert len(splits) == 2 * layers, splits  # q+v and gate+up per layer
    # no layer expands its KV heads: the attention is onnxruntime's GroupQueryAttention
    # over the shared KV heads, and the only Expands are what it reads, computed once
    # for the model: the [batch] lengths (seqlens_k, query_seqlens, cast to int32) and
    # the padding bias [batch, 1, seq, total]
    expands = [n for n in graph.node if n.op_type == "Expand" and "/layers." in n.name]
    assert len(expands) == 3, [n.name for n in expands]
    for node in expands:
        readers = [n for n in graph.node if node.output[0] in n.input]
        readers += [
            r for c in readers if c.op_type == "Cast" for r in graph.node if c.output[0] in r.input
        ]
        kinds = {r.op_type for r in readers} - {"Cast", "Shape"}  # the lengths read its shape
        assert kinds == {"GroupQueryAttention"}, (node.name, kinds)
    assert sum(n.op_type == "GroupQueryAttention" for n in graph.node) == layers


def test_the_layers_share_their_shape_computations_and_compute_the_same_values(
    built: World,
) -> None:
    """The TorchScript export computes each layer's shapes anew; the onnx step points
    every Shape at the first one symbolic shape inference proves equal (graph.py
    share_shapes), so the step's graph holds one Shape per distinct shape whatever the
    depth. The graph with and without the sharing gives identical outputs for a
    batch of 2 with a past and a multi-token step (bit for bit: the same ops run on
    the same values)."""
    import numpy as np
    import onnx
    import onnxruntime as ort

    from builders.common import graph

    # tiny-qwen3: its attention (per-head q/k norms) keeps ONNX's own ops, whose shape
    # computations repeat per layer; tiny-llama's fused attention has none to share
    steps = {s["kind"]: s["key"] for s in built.manifest("tiny-qwen3")["lock"]["steps"]}
    folder = {k: built.store / "objects" / v[:2] / v for k, v in steps.items()}
    plain = graph.tidy(graph.load(folder["export"] / "model.onnx"))
    per_layer = sum(n.op_type == "Shape" for n in plain.graph.node)
    shared_model = graph.load(folder["export"] / "model.onnx")
    shared_model = graph.tidy(shared_model)
    moved, why = graph.share_shapes(shared_model)
    assert why is None and moved > 0
    shared_model = graph.tidy(shared_model)
    shapes = sum(n.op_type == "Shape" for n in shared_model.graph.node)
    assert shapes == per_layer - moved and shapes < per_layer / 2, (shapes, per_layer)
    step = onnx.load(str(folder["onnx"] / "model.onnx"), load_external_data=False)
    assert sum(n.op_type == "Shape" for n in step.graph.node) == shapes  # what was built
    assert len(shared_model.graph.node) < len(plain.graph.node)

    io = json.loads((folder["onnx"] / "io.json").read_text())
    rng = np.random.default_rng(0)
    feeds: dict[str, np.ndarray] = {
        "input_ids": rng.integers(0, 100, (2, 3)),
        "attention_mask": np.ones((2, 8), np.int64),
        "position_ids": np.tile(np.arange(5, 8), (2, 1)),
    }
    for e in io["kv_cache"]["entries"]:
        dims = [{"batch": 2, "seq": 5}.get(d, d) for d in e["shape"]]
        feeds[e["past"]] = rng.standard_normal(dims).astype(np.float32)
    feeds["logits_to_keep"] = np.array(0)  # every position (builders/causal_lm/export.py)
    outs = []
    for model in (plain, shared_model):
        so = ort.SessionOptions()
        so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
        sess = ort.InferenceSession(
            model.SerializeToString(), so, providers=["CPUExecutionProvider"]
        )
        outs.append(sess.run(None, feeds))
    for a, b in zip(*outs, strict=True):
        assert a.shape == b.shape and np.array_equal(a, b)


def test_shapes_it_cannot_prove_are_left_alone_with_the_reason_and_no_stray_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An op symbolic shape inference does not know: nothing is re-pointed, the reason
    is returned, and the inference's own debug dump (sym_shape_infer_temp.onnx, written
    to the working directory) does not land in the user's folder."""
    from onnx import TensorProto, helper

    from builders.common import graph

    nodes = [
        helper.make_node("NoSuchOp", ["x"], ["y"], domain="example.custom"),
        helper.make_node("Shape", ["y"], ["s1"]),
        helper.make_node("Shape", ["y"], ["s2"]),
        helper.make_node("Add", ["s1", "s2"], ["z"]),
    ]
    model = helper.make_model(
        helper.make_graph(
            nodes,
            "g",
            [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["a"])],
            [helper.make_tensor_value_info("z", TensorProto.INT64, [1])],
        ),
        opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("example.custom", 1)],
    )
    monkeypatch.chdir(tmp_path)
    moved, why = graph.share_shapes(model)
    assert moved == 0 and why is not None and "symbolic shape inference" in why
    assert [n.input[:] for n in model.graph.node][-1] == ["s1", "s2"]
    assert list(tmp_path.iterdir()) == []


def test_rebuilding_an_unchanged_recipe_leaves_git_clean(tmp_path: Path, hub: Path) -> None:
    """Issue 43: a build that validates again what the manifest already says (same
    lock, host class, scope, verdict and gates passed) rewrites nothing tracked, on a
    fresh store and with another thread count; its timings alone never do."""
    world = make_world(tmp_path, hub, ("tiny-llama",))
    world.doit("build", "recipe=tiny-llama", check=True)

    def git(*args: str) -> str:
        return subprocess.run(
            ["git", "-C", str(world.root), *args], capture_output=True, text=True, check=True
        ).stdout

    git("init", "-q")
    git("add", "-A")
    git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "built")
    for store, threads in ((tmp_path / "store-2", "2"), (tmp_path / "store-3", "1")):
        again = World(root=world.root, hub=hub, store=store)
        out = again.doit(
            "build", "recipe=tiny-llama", env={**again.env, "OMP_NUM_THREADS": threads}
        )
        assert out.returncode == 0, out.stdout + out.stderr
        assert "validate" in executed(out.stdout)  # it did validate again
        assert "manifest" not in executed(out.stdout), out.stdout  # and it is recorded
        assert git("status", "--porcelain", "manifests/") == ""


def test_a_persons_build_records_into_the_store_until_published(tmp_path: Path, hub: Path) -> None:
    """Issue 43: a local build (scope local, KILN_PUBLISH unset) records its evidence
    into the store, which doit status and doit run stats=1 read, and leaves manifests/
    untouched; publish=1 is the deliberate act that writes the manifest."""
    world = make_world(tmp_path, hub, ("tiny-llama",))
    env = {k: v for k, v in world.env.items() if k != "KILN_PUBLISH"}
    env["CI"] = ""  # a person's machine

    def doit(*args: str) -> subprocess.CompletedProcess[str]:
        return world.doit(*args, check=True, env=env)

    built = doit("build", "recipe=tiny-llama")
    assert "in the store; publish=1 writes manifests/tiny-llama.json" in built.stdout
    assert not (world.root / "manifests" / "tiny-llama.json").exists()
    local = list((world.store / "evidence").glob("*/tiny-llama.json"))
    assert len(local) == 1
    status = json.loads(doit("status", "recipe=tiny-llama", "format=json").stdout)
    (row,) = status["recipes"]
    assert row["here"]["verdict"] == "pass" and row["here"]["scope"] == "local"
    assert row["here"]["published"] is False and row["built_here"] is True
    ran = doit("run", "recipe=tiny-llama", "prompt=Hello", "max_new_tokens=4", "stats=1")
    assert "evidence: pass on" in ran.stdout and "this store only" in ran.stdout
    published = doit("build", "recipe=tiny-llama", "publish=1")
    assert "-> manifests/tiny-llama.json" in published.stdout
    found = world.manifest("tiny-llama")
    assert [e["scope"] for e in found["evidence"]] == ["local"]
    assert not (world.root / "manifests" / "history").exists()  # a local record: no history
    status = json.loads(doit("status", "recipe=tiny-llama", "format=json").stdout)
    assert status["recipes"][0]["here"]["published"] is True


def test_run_says_when_its_bundle_is_unvalidated_and_when_the_budget_cut_it(
    world: World,
) -> None:
    """Issue 41: `doit run` on a recipe never validated here builds its bundle and says,
    on stderr before generating, that it is not validated; a text the budget ended says
    so too. Generated text alone goes to stdout."""
    out = world.doit("run", "recipe=tiny-llama", "prompt=Hello", "max_new_tokens=4", check=True)
    assert "note: tiny-llama's bundle is not validated on this host class" in out.stderr
    assert "doit build recipe=tiny-llama validates it" in out.stderr
    assert "note: stopped after 4 new tokens, before the end: raise max_new_tokens" in out.stderr
    assert "note:" not in out.stdout
    world.doit("build", "recipe=tiny-llama", check=True)
    again = world.doit("run", "recipe=tiny-llama", "prompt=Hello", "max_new_tokens=4", check=True)
    assert "not validated" not in again.stderr
    # doit's own step line goes to stderr too: stdout is the completion, one line
    assert ".  generate" in again.stderr and again.stdout.startswith("Hello")
    assert len(again.stdout.splitlines()) == 1, again.stdout
