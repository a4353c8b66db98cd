"""runtime.open, the one loader: bundle.json's task and variant pick the runner, and a
bundle it cannot run is refused with a BundleError that says why. Also the runtime's
import graph: no module imports one that imports it back.

The refusals need no build extra. The dispatch builds each runner on small real files
(a one-node ONNX graph, a word-level tokenizer.json), so it needs onnx, onnxruntime and
tokenizers; tests/builds/ checks the same dispatch on built bundles."""

from __future__ import annotations

import ast
import json
from pathlib import Path
from typing import Any

import pytest
from conftest import ROOT

import runtime
from kiln.schema import TASKS, VARIANTS
from runtime import BundleError
from runtime.speculative import SPECULATIVE


def write_meta(path: Path, meta: Any) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    (path / "bundle.json").write_text(json.dumps(meta))
    return path


# ---------------------------------------------------------------- refusals


def test_a_folder_without_bundle_json_is_not_a_bundle(tmp_path: Path) -> None:
    with pytest.raises(BundleError, match=r"is not a bundle: bundle\.json is missing"):
        runtime.open(tmp_path)
    with pytest.raises(BundleError, match="is not a bundle"):
        runtime.open(tmp_path / "nowhere")


def test_a_newer_bundle_format_is_refused_with_what_to_do(tmp_path: Path) -> None:
    write_meta(tmp_path, {"schema_version": 2, "variant": "ordinary"})
    with pytest.raises(
        BundleError, match=r"bundle schema 2 is newer than this runtime reads \(1\)"
    ):
        runtime.open(tmp_path)
    with pytest.raises(BundleError, match="rebuild the bundle with this one"):
        runtime.open(tmp_path)


@pytest.mark.parametrize("version", [0, None, "1", True])
def test_an_older_or_malformed_schema_version_is_refused(tmp_path: Path, version: Any) -> None:
    meta = {"variant": "ordinary"} if version is None else {"schema_version": version}
    write_meta(tmp_path, meta)
    with pytest.raises(BundleError, match=r"bundle schema .* is not supported"):
        runtime.open(tmp_path)


def test_a_bundle_json_that_is_not_a_json_object_is_refused(tmp_path: Path) -> None:
    tmp_path.joinpath("bundle.json").write_text("{not json")
    with pytest.raises(BundleError, match="is not UTF-8 JSON"):
        runtime.open(tmp_path)
    write_meta(tmp_path, [1, 2])
    with pytest.raises(BundleError, match="holds a list, not an object"):
        runtime.open(tmp_path)


def test_an_unknown_task_is_refused_and_the_known_ones_are_listed(tmp_path: Path) -> None:
    write_meta(tmp_path, {"schema_version": 1, "task": "image-segmentation", "variant": "ordinary"})
    with pytest.raises(BundleError, match="task 'image-segmentation'") as raised:
        runtime.open(tmp_path)
    assert all(task in str(raised.value) for task in TASKS)


@pytest.mark.parametrize(
    ("task", "variant"),
    [(None, "beam"), (None, None), ("text-classification", "draft"), ("feature-extraction", 3)],
)
def test_an_unknown_variant_is_refused(tmp_path: Path, task: str | None, variant: Any) -> None:
    meta = {"schema_version": 1, "variant": variant, **({"task": task} if task else {})}
    write_meta(tmp_path, meta)
    with pytest.raises(BundleError, match=f"variant {variant!r}; a .* bundle runs as ordinary"):
        runtime.open(tmp_path)


def test_every_task_and_text_generation_variant_has_a_runner() -> None:
    """The table covers what recipes can declare (kiln/schema/recipe.py), no more, no less."""
    assert set(runtime.RUNNERS) == set(TASKS)
    text = runtime.RUNNERS["text-generation"]
    assert set(text) == set(VARIANTS)
    speculative = {v for v, r in text.items() if runtime.resolve(r) is runtime.SpeculativeBundle}
    assert speculative == set(SPECULATIVE)
    assert all(
        set(runners) == {"ordinary"}
        for t, runners in runtime.RUNNERS.items()
        if t != "text-generation"
    )


# ---------------------------------------------------------------- dispatch on real files


@pytest.fixture(scope="module")
def parts(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A one-node ONNX graph and a word-level tokenizer: enough for every runner to load."""
    onnx = pytest.importorskip("onnx")
    pytest.importorskip("onnxruntime")
    tokenizers = pytest.importorskip("tokenizers")
    from onnx import TensorProto, helper
    from tokenizers.models import WordLevel
    from tokenizers.pre_tokenizers import Whitespace

    folder = tmp_path_factory.mktemp("parts")
    graph = helper.make_graph(
        [helper.make_node("Identity", ["x"], ["y"])],
        "identity",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    onnx.save(model, str(folder / "model.onnx"))
    tok = tokenizers.Tokenizer(WordLevel({"[PAD]": 0, "[EOS]": 1, "hello": 2}, unk_token="[PAD]"))
    tok.pre_tokenizer = Whitespace()
    tok.save(str(folder / "tokenizer.json"))
    return folder


ENGINE = {"file": "model.onnx", "backend": "onnxruntime", "provider": "CPUExecutionProvider"}
BASE = {
    "schema_version": 1,
    "variant": "ordinary",
    "engines": {"main": ENGINE},
    "tokenizer": {"file": "tokenizer.json", "add_bos": False, "bos": None, "eos": [1], "pad": 0},
    "limits": {"max_batch_size": 1, "max_seq_len": 8},
}
CAUSAL_IO = {"inputs": [], "outputs": [{"name": "logits"}], "kv_cache": {"entries": []}}
SEQ2SEQ = {
    "engines": {"encoder": ENGINE, "decoder": ENGINE},
    "decoder_start_token_id": 0,
    "io": {"kv_cache": {"entries": []}, "cross_cache": {"entries": []}},
}
AUDIO = {
    "feature_size": 16,
    "sampling_rate": 16000,
    "hop_length": 160,
    "n_fft": 400,
    "n_samples": 8000,
}
EMBEDDER = {
    "task": "feature-extraction",
    "io": {"inputs": []},
    "pooling": {"mode": "mean", "normalize": True},
}
CASES = [
    pytest.param({"io": CAUSAL_IO}, runtime.Bundle, id="no task: text-generation"),
    pytest.param({"task": "text-generation", "io": CAUSAL_IO}, runtime.Bundle, id="ordinary"),
    pytest.param({"variant": "lora", "io": CAUSAL_IO}, runtime.Bundle, id="lora"),
    *(
        pytest.param(
            {"variant": v, "io": CAUSAL_IO, "speculative": {"max_draft_len": 2}},
            runtime.SpeculativeBundle,
            id=v,
        )
        for v in SPECULATIVE
    ),
    pytest.param(
        {"task": "text-classification", "io": {"inputs": []}, "labels": ["no", "yes"]},
        runtime.Classifier,
        id="text-classification",
    ),
    pytest.param(EMBEDDER, runtime.Embedder, id="feature-extraction"),
    pytest.param({"task": "text2text-generation", **SEQ2SEQ}, runtime.Seq2Seq, id="text2text"),
    pytest.param(
        {"task": "automatic-speech-recognition", **SEQ2SEQ, "audio": AUDIO},
        runtime.Speech,
        id="speech",
    ),
]


def bundle(parts: Path, folder: Path, extra: dict[str, Any]) -> Path:
    for name in ("model.onnx", "tokenizer.json"):
        folder.mkdir(parents=True, exist_ok=True)
        (folder / name).write_bytes((parts / name).read_bytes())
    return write_meta(folder, {**BASE, **extra})


@pytest.mark.parametrize(("extra", "runner"), CASES)
def test_open_returns_the_runner_of_the_bundles_task_and_variant(
    parts: Path, tmp_path: Path, extra: dict[str, Any], runner: type
) -> None:
    got = runtime.open(bundle(parts, tmp_path, extra), threads=1)
    assert type(got) is runner
    assert got.path == tmp_path and got.meta["variant"] == extra.get("variant", "ordinary")


def test_open_with_expect_refuses_another_family_and_accepts_a_subclass(
    parts: Path, tmp_path: Path
) -> None:
    """A validate step serves one family: expect= says which, and a bundle of another
    family is refused before any engine loads."""
    path = bundle(parts, tmp_path / "embedder", EMBEDDER)
    with pytest.raises(
        BundleError, match="feature-extraction bundle, run by Embedder, not by Classifier"
    ):
        runtime.open(path, expect=runtime.Classifier)
    assert type(runtime.open(path, expect=runtime.Embedder)) is runtime.Embedder
    spec = {"variant": "eagle3", "io": CAUSAL_IO, "speculative": {"max_draft_len": 2}}
    drafting = runtime.open(bundle(parts, tmp_path / "eagle3", spec), expect=runtime.Bundle)
    assert type(drafting) is runtime.SpeculativeBundle
    speech = {"task": "automatic-speech-recognition", **SEQ2SEQ, "audio": AUDIO}
    heard = runtime.open(bundle(parts, tmp_path / "speech", speech), expect=runtime.Seq2Seq)
    assert type(heard) is runtime.Speech


def test_a_runner_refuses_a_bundle_of_another_task(parts: Path, tmp_path: Path) -> None:
    """Built directly, a runner still checks the bundle is of its own task."""
    path = bundle(parts, tmp_path, EMBEDDER)
    with pytest.raises(
        BundleError, match="is a feature-extraction bundle, not text-classification"
    ):
        runtime.Classifier(path)
    with pytest.raises(BundleError, match="is a feature-extraction bundle, not text-generation"):
        runtime.Bundle(path)


def test_a_drafting_variant_without_its_parameters_is_refused(parts: Path, tmp_path: Path) -> None:
    bundle(parts, tmp_path, {"variant": "ngram", "io": CAUSAL_IO})
    with pytest.raises(BundleError, match=r"ngram bundle without its drafting parameters"):
        runtime.open(tmp_path)


# ---------------------------------------------------------------- import graph


def imports_of(package: Path, module: str) -> set[str]:
    """The modules of `package` that `module` imports, lazy imports inside functions
    included. `from package import name` means the submodule when there is one, else
    the package's __init__. (Python also runs a package's __init__ before any of its
    submodules; that edge is the language's, not a circle of ours.)"""
    name = package.name
    path = package / ("__init__.py" if module == name else f"{module.split('.', 1)[1]}.py")
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names if a.name.split(".")[0] == name)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            if node.module == name:
                for alias in node.names:
                    sub = f"{name}.{alias.name}"
                    found.add(sub if (package / f"{alias.name}.py").is_file() else name)
            elif node.module.split(".")[0] == name:
                found.add(node.module)
    return found


def circles(package: Path) -> list[list[str]]:
    """Every import circle among the package's modules, each as a path back to its start."""
    mods = [package.name] + [
        f"{package.name}.{p.stem}" for p in sorted(package.glob("*.py")) if p.stem != "__init__"
    ]
    graph = {m: imports_of(package, m) for m in mods}
    found: list[list[str]] = []

    def walk(path: list[str]) -> None:
        for nxt in sorted(graph.get(path[-1], ())):
            if nxt == path[0]:
                found.append([*path, nxt])
            elif nxt not in path and nxt > path[0]:  # each circle once, from its least module
                walk([*path, nxt])

    for m in mods:
        walk([m])
    return found


def test_no_runtime_module_imports_one_that_imports_it_back() -> None:
    assert circles(ROOT / "runtime") == []


def test_the_circle_check_finds_a_lazy_circle(tmp_path: Path) -> None:
    """Guard on the guard: a circle closed by an import inside a function is found."""
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("from pkg.a import A\n")
    (pkg / "a.py").write_text("from pkg import b\nA = 1\n")
    (pkg / "b.py").write_text("def f():\n    from pkg.a import A\n    return A\n")
    assert circles(pkg) == [["pkg.a", "pkg.b", "pkg.a"]]
    (pkg / "b.py").write_text("from pkg import A\n")  # the package's own names: its __init__
    assert circles(pkg) == [["pkg", "pkg.a", "pkg.b", "pkg"]]


# ---------------------------------------------------------------- the format, versioned

FIXTURE = ROOT / "tests" / "unit" / "fixtures" / "bundle-v1"


def test_a_bundle_json_of_todays_format_still_reads_and_names_its_runner() -> None:
    """tests/unit/fixtures/bundle-v1/bundle.json is a built tiny-llama bundle's, copied
    as it was (2026-12-01, schema 1): every later runtime must keep reading it."""
    from runtime.format import read_meta

    meta = read_meta(FIXTURE, "text-generation")
    assert meta["schema_version"] == 1 == runtime.BUNDLE_SCHEMA
    assert runtime.RUNNERS["text-generation"][meta["variant"]] == "runtime.causal_lm:Bundle"
    assert meta["engines"]["main"]["backend"] == "onnxruntime"
    assert {"io", "tokenizer", "limits", "vocab_size"} <= set(meta)


def test_an_inductor_bundle_is_run_by_its_own_runner() -> None:
    from runtime.causal_lm import Bundle

    named = runtime.BACKEND_RUNNERS[("text-generation", "ordinary", "inductor")]
    assert issubclass(runtime.resolve(named), Bundle)
