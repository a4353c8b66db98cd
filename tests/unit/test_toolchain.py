"""A step's code is its builder's import closure: one dispatch rule picks the builder
(fetch, a text-generation engine's backend, else the task family's module), an edit
re-keys exactly the steps whose builders import the edited file, and comments,
formatting and docstrings re-key nothing."""

from __future__ import annotations

import shutil
from functools import cache
from pathlib import Path

import pytest
from conftest import ROOT, copy_code
from samples import base, quantized, steps

from kiln import catalog, statcache
from kiln.paths import Paths
from kiln.plan import plan, toolchain
from kiln.plan.step import Plan
from kiln.plan.toolchain import builder_module, current
from kiln.schema import FAMILY, TASKS

SPEECH = "automatic-speech-recognition"


@cache
def _catalog() -> catalog.Catalog:
    return catalog.load(catalog.Paths(ROOT))


def _plan(name: str, root: Path = ROOT) -> Plan:
    recipe = _catalog().recipe(name)
    return plan(name, recipe, _catalog().prompts[recipe.validation.prompts], current(root))


def _code_tree(tmp_path: Path, name: str) -> Path:
    return copy_code(tmp_path / name)


def _keys(root: Path, recipe: str = "tiny-llama") -> dict[str, str]:
    return {s.kind: s.key for s in _plan(recipe, root).steps}


# ---------------------------------------------------------------- dispatch


def test_one_rule_picks_every_builder_and_every_step_hashes_its_closure() -> None:
    llama, tools = _plan("tiny-llama"), current()
    for step in llama.steps:
        module = builder_module(step.kind, step.options)
        if step.kind == "fetch":
            assert "task" not in step.options and module == "builders.fetch"
        elif step.kind == "engine":  # the backend module is the builder
            assert module == "builders.causal_lm.backends.onnxruntime"
        else:
            assert module == f"builders.causal_lm.{step.kind}"
        assert step.kind == "fetch" or step.options["task"] == "text-generation"
        assert step.material["code"] == tools.code(step.kind, step.options)
        assert step.material["code"] == toolchain.digest(module)
    # every recipe task has its family; "image-features" is the vision program's steps'
    assert set(FAMILY) == {*TASKS, "image-features"}


def test_the_task_picks_its_familys_builders_and_code_and_shares_the_fetch() -> None:
    llama, bert, tools = _plan("tiny-llama"), _plan("tiny-bert-classifier"), current()
    for step in bert.steps[1:]:  # everything after the shared fetch is the classifier's
        assert step.options["task"] == "text-classification"
        assert step.material["code"] == toolchain.digest(f"builders.classify.{step.kind}")
        assert step.material["code"] != llama.step(step.kind).material["code"]
    assert builder_module("export", {"task": "text-classification"}) == "builders.classify.export"
    assert bert.step("fetch").material["code"] == llama.step("fetch").material["code"]
    assert bert.step("fetch").material["code"] == tools.code("fetch", {})


def test_seq2seq_and_embedding_plans_use_their_own_builders() -> None:
    t5 = _plan("tiny-t5")
    for step in t5.steps[1:]:
        assert step.options["task"] == "text2text-generation"
        assert step.material["code"] == toolchain.digest(f"builders.seq2seq.{step.kind}")
    assert builder_module("bundle", {"task": "text2text-generation"}) == "builders.seq2seq.bundle"
    # Whisper shares the package (tests/builds/test_speech.py).
    assert builder_module("export", {"task": SPEECH}) == "builders.seq2seq.export"
    embed = _plan("real-all-minilm-l6-v2")
    for step in embed.steps[1:]:
        assert step.options["task"] == "feature-extraction"
        assert step.material["code"] == toolchain.digest(f"builders.embed.{step.kind}")
    assert embed.step("fetch").material["code"] == toolchain.digest("builders.fetch")
    assert builder_module("export", {"task": "feature-extraction"}) == "builders.embed.export"


def test_whisper_steps_hash_the_speech_paths_and_the_clips() -> None:
    p = _plan("tiny-whisper")
    for step in p.steps[1:]:
        assert step.options["task"] == SPEECH
        assert step.material["code"] == toolchain.digest(f"builders.seq2seq.{step.kind}")
    files = {s.kind: current().files(s.kind, s.options) for s in p.steps}
    for kind in ("export", "reference"):  # the speech paths' own code
        assert "builders/seq2seq/speech.py" in files[kind]
    assert "runtime/audio.py" in files["bundle"]  # its FIELDS
    # The clips' bytes are in the digest: they are inputs, not decoration.
    for kind in ("reference", "validate"):
        clips = {f for f in files[kind] if f.endswith(".wav")}
        assert clips == {f"builders/data/audio/{p.name}" for p in audio_clips()}


def audio_clips() -> list[Path]:
    return sorted((ROOT / "builders" / "data" / "audio").glob("*.wav"))


def test_every_builder_exists_and_validate_closures_cover_the_runtime() -> None:
    kinds = ("reference", "export", "onnx", "engine", "bundle", "validate")
    for task in TASKS:
        for kind in kinds:
            options = {"task": task, "backend": "onnxruntime"}
            module = builder_module(kind, options)
            own = module.replace(".", "/") + ".py"
            assert (ROOT / own).is_file(), module
            assert own in current().files(kind, options)
    # The runtime's other-task files are not in text-generation's validate key.
    text = set(current().files("validate", {"task": "text-generation"}))
    assert "runtime/causal_lm.py" in text
    assert not text & {f"runtime/{n}.py" for n in ("classify", "embed", "encoder", "seq2seq")}
    validated = set().union(*(current().files("validate", {"task": t}) for t in TASKS))
    assert {f"runtime/{p.name}" for p in (ROOT / "runtime").glob("*.py")} <= validated


def test_the_texts_a_builder_reads_are_in_its_closure() -> None:
    quantize = current().files("quantize", {"task": "text-generation"})
    assert "builders/data/texts/calibration.txt" in quantize
    reference = current().files("reference", {"task": "text-generation"})
    assert "builders/data/texts/eval.txt" in reference
    # the clips are data of builders.data.audio, which no text-generation step imports
    assert not any(f.endswith(".wav") for f in reference)


# ---------------------------------------------------------------- engines


def test_a_quantized_onnxruntime_engine_is_the_backends_quantized_branch(tmp_path: Path) -> None:
    got = steps(quantized("int8-wo"), tmp_path)["engine"]
    fp32 = steps(base(), tmp_path)["engine"]
    assert got.options["quantized"] is True and fp32.options["quantized"] is False
    for step in (got, fp32):
        assert builder_module("engine", step.options) == "builders.causal_lm.backends.onnxruntime"
        assert step.material["code"] == toolchain.digest("builders.causal_lm.backends.onnxruntime")
    assert got.key != fp32.key


def test_tensorrt_and_aoti_engines_hash_their_own_backend(tmp_path: Path) -> None:
    trt = steps(quantized(backend="tensorrt", target="sm90"), tmp_path)["engine"]
    aoti = steps(quantized("fp32", backend="aoti"), tmp_path)["engine"]
    ort = steps(base(), tmp_path)["engine"]
    codes = set()
    for step, backend in ((trt, "tensorrt"), (aoti, "aoti"), (ort, "onnxruntime")):
        module = f"builders.causal_lm.backends.{backend}"
        assert builder_module("engine", step.options) == module
        assert f"builders/causal_lm/backends/{backend}.py" in current().files(
            "engine", step.options
        )
        codes.add(step.material["code"])
    assert len(codes) == 3
    # an edit to one backend re-keys only the engines it builds
    assert "builders/causal_lm/backends/aoti.py" not in current().files("engine", ort.options)


# ---------------------------------------------------------------- edits


def test_editing_what_export_imports_rekeys_export_and_its_dependents_only(
    tmp_path: Path,
) -> None:
    before, after = _code_tree(tmp_path, "before"), _code_tree(tmp_path, "after")
    assert _keys(before) == _keys(ROOT)  # the copy is the same code
    export = current(before).files("export", {"task": "text-generation"})
    assert "builders/causal_lm/_cache.py" in export  # through export.py's own imports
    cache = after / "builders" / "causal_lm" / "_cache.py"
    cache.write_text(cache.read_text() + "\nSEQ_AXIS_NAME = 'seq'\n")
    a, b = _keys(before), _keys(after)
    assert {k for k in a if a[k] != b[k]} == {"export", "onnx", "engine", "bundle", "validate"}
    # one level further: builders/common/hf.py, which the reference loads with too
    hf = after / "builders" / "common" / "hf.py"
    hf.write_text(hf.read_text() + "\nEDITED = True\n")
    c = _keys(_copy_of(after, tmp_path / "after-hf"))
    assert {k for k in a if a[k] != c[k]} == {
        "reference",
        "export",
        "onnx",
        "engine",
        "bundle",
        "validate",
    }
    assert a["fetch"] == b["fetch"] == c["fetch"]


def _copy_of(root: Path, to: Path) -> Path:
    """A fresh root: files are read once per process, so an edit needs a new root."""
    shutil.copytree(root, to)
    return to


def test_comments_formatting_and_docstrings_change_no_key(tmp_path: Path) -> None:
    root = _code_tree(tmp_path, "reformatted")
    for path in sorted(root.rglob("*.py")):
        lines = path.read_text().splitlines()
        out = ["# a comment at the top"]
        for line in lines:
            if line.startswith("def build(request: Request, writer: Writer) -> None:"):
                out += ["def build(", "    request: Request,", "    writer: Writer,", ") -> None:"]
            elif line.startswith("def "):
                out += ["", "# a comment between functions", line + "  # and after a def"]
            else:
                out.append(line)
        path.write_text("\n".join(out) + "\n\n\n# the end\n")
    export = root / "builders" / "causal_lm" / "export.py"
    text = export.read_text()
    assert text.count('"""') >= 2
    export.write_text(text.replace('"""', '"""Reworded. ', 1))  # the module docstring
    for recipe in ("tiny-llama", "tiny-llama-fp8", "tiny-bert-classifier", "tiny-whisper"):
        assert _keys(root, recipe) == _keys(ROOT, recipe), recipe


def test_a_code_change_after_a_comment_still_rekeys(tmp_path: Path) -> None:
    root = _code_tree(tmp_path, "edited")
    # what causal_lm/onnx.py tidies with, and export saves its external data with
    graph = root / "builders" / "common" / "graph.py"
    graph.write_text(graph.read_text().replace("FOLD_LIMIT =", "# tuned\nFOLD_LIMIT = 1 + ", 1))
    a, b = _keys(ROOT), _keys(root)
    assert {k for k in a if a[k] != b[k]} == {"export", "onnx", "engine", "bundle", "validate"}


@pytest.mark.parametrize("missing", ["builders/causal_lm/_capture.py"])
def test_a_base_revision_without_a_module_still_plans(tmp_path: Path, missing: str) -> None:
    """`doit diff base=REV` plans an older tree, which may lack a file a closure names."""
    root = _code_tree(tmp_path, "older")
    (root / missing).unlink()
    a, b = _keys(ROOT), _keys(root)
    assert a["export"] != b["export"] and a["fetch"] == b["fetch"]


def test_every_runner_the_loader_names_is_in_its_family_validate_closure() -> None:
    """runtime.open imports a runner by name, which a static closure cannot follow: the
    family's validate builder imports it itself, so an edit to it re-keys validation."""
    import runtime

    for task, variants in runtime.RUNNERS.items():
        files = set(current().files("validate", {"task": task}))
        assert "runtime/__init__.py" in files, task
        names = [*variants.values()]
        names += [n for (t, _, _), n in runtime.BACKEND_RUNNERS.items() if t == task]
        for name in names:
            module = name.partition(":")[0]
            assert module.replace(".", "/") + ".py" in files, (task, name)


# ---------------------------------------------------------------- the stat cache


def _new_process() -> statcache.StatCache:
    """Forget what this process computed, as a new process would: only the store's
    stat cache (kiln.statcache) is left, read afresh. Its racy window is 0 here: the
    copied tree was written this second (and a ctime cannot be aged), so every entry
    would be confirmed by the bytes, and these tests pin what the stats alone see."""
    for cached in (toolchain.digest, toolchain.closure, toolchain._imports):
        cached.cache_clear()
    statcache._SHARED.clear()
    store = Paths.from_env().store
    cache = statcache._SHARED[store.absolute()] = statcache.StatCache(statcache.path_in(store), 0)
    return cache


MODULES = (
    "builders.fetch",
    "builders.causal_lm.reference",
    "builders.causal_lm.export",
    "builders.causal_lm.validate",
    "builders.seq2seq.validate",
)


def _warm(root: Path) -> dict[str, str]:
    cache = _new_process()
    digests = {m: toolchain.digest(m, root) for m in MODULES}
    cache.save()
    _new_process()
    return digests


def test_an_unchanged_tree_is_hashed_from_stats_parsing_no_python(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("KILN_STORE", str(tmp_path / "store"))
    (tmp_path / "store").mkdir()
    root = _code_tree(tmp_path, "code")
    here = {m: toolchain.digest(m, ROOT) for m in MODULES}
    before = _warm(root)
    assert before == here  # the copy's digests, through the cache

    def no_parsing(*args: object, **kwargs: object) -> None:
        raise AssertionError("a Python file was parsed")

    monkeypatch.setattr(toolchain, "_scan", no_parsing)  # the one place Python is parsed
    stats = statcache.shared(Paths.from_env().store)
    assert {m: toolchain.digest(m, root) for m in MODULES} == before
    assert stats.reads == 0  # not a byte read: stats only
    statcache._SHARED.clear()


def test_with_a_warm_cache_an_edited_import_and_an_added_data_file_are_seen(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("KILN_STORE", str(tmp_path / "store"))
    (tmp_path / "store").mkdir()
    root = _code_tree(tmp_path, "code")
    before = _warm(root)
    assert "runtime/audio.py" not in toolchain.closure("builders.fetch", root)
    fetch = root / "builders" / "fetch.py"
    fetch.write_text(fetch.read_text() + "\n\ndef _clips():\n    import runtime.audio\n")
    _new_process()
    assert "runtime/audio.py" in toolchain.closure("builders.fetch", root)
    assert toolchain.digest("builders.fetch", root) != before["builders.fetch"]

    (root / "builders" / "data" / "texts" / "extra.txt").write_text("more text\n")
    _new_process()
    assert "builders/data/texts/extra.txt" in toolchain.closure(
        "builders.causal_lm.reference", root
    )
    after = {m: toolchain.digest(m, root) for m in MODULES}
    assert after["builders.causal_lm.reference"] != before["builders.causal_lm.reference"]
    assert after["builders.seq2seq.validate"] == before["builders.seq2seq.validate"]
    statcache._SHARED.clear()
