"""Small declarative worlds for tests: a catalog written from dicts, a private store,
a private hub mirror, and doit run as a user runs it (a subprocess)."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parent.parent
BANNED = ("torch", "transformers", "onnx", "onnxruntime", "modelopt", "tensorrt")


def has_build_extra() -> bool:
    import importlib.util

    return all(importlib.util.find_spec(m) for m in ("torch", "transformers", "onnxruntime"))


# A subprocess's time limit: a hang detector, never a speed test. A loaded 2-core CI
# machine once ran a build past a fixed 600 s (issue 38): no test fails for slowness.
SLOW = 1800

heavy = pytest.mark.skipif(not has_build_extra(), reason="needs the build extra")
# A heavy build CI leaves to `make nightly` (pytest -m nightly with KILN_NIGHTLY=1): CI
# must finish in 25 minutes on 2 cores. pytest_collection_modifyitems skips it elsewhere.
nightly = pytest.mark.nightly


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if os.environ.get("KILN_NIGHTLY") == "1":
        return
    later = pytest.mark.skip(reason="nightly: KILN_NIGHTLY=1")
    for item in items:
        if item.get_closest_marker("nightly"):
            item.add_marker(later)


def shipped_gpu() -> str:
    """The GPU the shipped GPU manifests were last validated on (a GPU run may get an
    H100 or an H200): what tests of those manifests expect to see named."""
    data = json.loads((ROOT / "manifests" / "tiny-llama-inductor-h200.json").read_text())
    return str(data["evidence"][-1]["host"]["gpu"])


@dataclass
class World:
    """A catalog of its own (recipes, thresholds, prompts, manifests), with a store."""

    root: Path
    hub: Path
    store: Path

    @property
    def env(self) -> dict[str, str]:
        """The world's catalog and store. Its builds publish into its own manifests/
        (KILN_PUBLISH=1) whatever the scope, CI or not: what most tests read. Tests of
        a person's build recording into the store set KILN_PUBLISH=0 (or remove it)."""
        env = dict(os.environ)
        env.update(
            KILN_ROOT=str(self.root),
            KILN_STORE=str(self.store),
            KILN_HUB_CACHE=str(self.hub),
            KILN_SITE=str(self.root / "_site"),
            KILN_PUBLISH="1",
        )
        return env

    def recipe(self, name: str) -> dict[str, Any]:
        data: dict[str, Any] = yaml.safe_load((self.root / "recipes" / f"{name}.yaml").read_text())
        return data

    def local_model(self, folder: Path) -> dict[str, str]:
        """A recipe's `model:` for the checkpoint folder under this world's root, pinned
        by its tree digest (kiln.pins)."""
        from kiln.pins import sha256_file, tree_digest

        digest = tree_digest(
            (p.relative_to(folder).as_posix(), sha256_file(p))
            for p in sorted(folder.rglob("*"))
            if p.is_file()
        )
        return {"path": folder.relative_to(self.root).as_posix(), "sha256": digest}

    def write_recipe(self, name: str, data: dict[str, Any] | str) -> Path:
        path = self.root / "recipes" / f"{name}.yaml"
        path.write_text(data if isinstance(data, str) else yaml.safe_dump(data, sort_keys=False))
        return path

    def argv(self, *args: str) -> list[str]:
        """`doit ARGS` on this world's catalog, as a user runs it."""
        return [
            sys.executable,
            "-m",
            "doit",
            "-f",
            str(ROOT / "dodo.py"),
            "-d",
            str(self.root),
            *args,
        ]

    def doit(
        self, *args: str, check: bool = False, env: dict[str, str] | None = None
    ) -> subprocess.CompletedProcess[str]:
        """`doit ARGS` in this world (`env`: the whole environment instead of its own)."""
        proc = subprocess.run(
            self.argv(*args),
            env=self.env if env is None else env,
            capture_output=True,
            text=True,
            timeout=SLOW,
        )
        if check and proc.returncode != 0:
            raise AssertionError(f"doit {' '.join(args)} failed:\n{proc.stdout}\n{proc.stderr}")
        return proc

    def manifest(self, name: str) -> dict[str, Any]:
        import json

        data: dict[str, Any] = json.loads((self.root / "manifests" / f"{name}.json").read_text())
        return data

    def checkpoint(self, name: str) -> Path:
        """The recipe's checkpoint folder in the world's hub mirror, as its lock pins it.
        transformers given a repo id asks the Hub for an adapter_config.json even with
        local_files_only (5 retries, about 23 s where the Hub is unreachable); a folder
        it reads from disk."""
        m = self.manifest(name)["lock"]["model"]
        return self.hub / f"models--{m['repo'].replace('/', '--')}" / "snapshots" / m["revision"]

    def last(self, name: str) -> dict[str, Any]:
        """The recipe's newest evidence record."""
        evidence: dict[str, Any] = self.manifest(name)["evidence"][-1]
        return evidence

    def plan(self, name: str) -> Any:
        """The recipe's plan on this world's catalog (kiln.plan.Plan)."""
        from kiln import catalog
        from kiln.plan import plan
        from kiln.plan.toolchain import current

        cat = catalog.load(catalog.Paths(self.root))
        recipe = cat.recipe(name)
        return plan(name, recipe, cat.prompts[recipe.validation.prompts], current())

    def artifact(self, name: str, kind: str) -> Path:
        """Where this world's store keeps the recipe's `kind` step output."""
        from kiln.store import Store

        return Store(self.store).get(self.plan(name).step(kind).key).path


def make_world(
    base: Path, hub: Path, recipes: tuple[str, ...] = ("tiny-llama", "tiny-qwen3")
) -> World:
    root = base / "catalog"
    for folder in ("thresholds", "prompts"):
        shutil.copytree(ROOT / folder, root / folder)
    (root / "recipes").mkdir(parents=True)
    (root / "manifests").mkdir()
    for name in recipes:
        shutil.copy(ROOT / "recipes" / f"{name}.yaml", root / "recipes")
    return World(root=root, hub=hub, store=base / "store")


def built_world(
    factory: pytest.TempPathFactory, hub: Path, *recipes: str, later: tuple[str, ...] = ()
) -> World:
    """A world of these recipes, built and published in one `doit build` (a module's
    fixture: the first recipe names its folder); `later`: recipes in its catalog that a
    nightly test builds (build_later), sharing the store's steps."""
    world = make_world(factory.mktemp(recipes[0]), hub, (*recipes, *later))
    world.doit("build", f"recipe={','.join(recipes)}", "publish=1", check=True)
    return world


def build_later(world: World, *recipes: str) -> World:
    """The world with these of its `later` recipes built and published too."""
    world.doit("build", f"recipe={','.join(recipes)}", "publish=1", check=True)
    return world


def run_on_picture(world: World, recipe: str, picture: Path, new: int) -> str:
    """`doit run recipe=... image=PICTURE prompt=... stats=1` for `new` tokens, as a user
    asks about a picture; its stdout, after the run exited 0 with that many tokens."""
    out = world.doit(
        "run",
        f"recipe={recipe}",
        f"image={picture}",
        "prompt=What is in the picture?",
        f"max_new_tokens={new}",
        "stats=1",
    )
    assert out.returncode == 0, out.stderr
    assert f"stats: ordinary: {new} tokens" in out.stdout
    return out.stdout


def bundle_without_torch(
    bundle: Path, question: str, pictures: tuple[Path, ...] | None = None
) -> list[str]:
    """A grid or crops VLM bundle asked about `pictures` in a fresh process:
    onnxruntime, numpy, Pillow, tokenizers (and transformers' chat template renderer, as
    every chat bundle: runtime/chat.py), no torch and no model code. Prints the new
    tokens' count, the features' shape and grids, whether torch was imported and the
    transformers model modules that were (split into words). `pictures`: the circle and
    the square unless given."""
    files = ", ".join(repr(str(p)) for p in (pictures or (CIRCLE, SQUARE)))
    code = (
        "import sys, runtime\n"
        f"b = runtime.open({str(bundle)!r})\n"
        f"ids, feats = b.ask({question!r}, [{files}])\n"
        "out = b.generate_images([(ids, feats)], 4)\n"
        "models = [m for m in sys.modules if m.startswith('transformers.models.')]\n"
        "print(len(out.tokens[0]), feats.shape, feats.grids, 'torch' in sys.modules, models)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    assert done.returncode == 0, done.stderr
    return done.stdout.split()


def picture_turn(pictures: int, text: str) -> list[dict[str, Any]]:
    """One user turn of `pictures` image parts, then the text."""
    parts = [{"type": "image"} for _ in range(pictures)] + [{"type": "text", "text": text}]
    return [{"role": "user", "content": parts}]


@pytest.fixture(scope="session")
def hub(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One hub mirror for the whole session (it is read-only once written)."""
    if not has_build_extra():
        pytest.skip("needs the build extra")
    import tinyhub

    path = tmp_path_factory.mktemp("hub")
    tinyhub.write_mirror(path)
    return path


@pytest.fixture
def world(tmp_path: Path, hub: Path) -> World:
    return make_world(tmp_path, hub)


@pytest.fixture(scope="session")
def built(tmp_path_factory: pytest.TempPathFactory, hub: Path) -> World:
    """Both tiny recipes built once, for tests that only read the results."""
    w = make_world(tmp_path_factory.mktemp("built"), hub)
    w.doit("build", check=True)
    return w


SPECULATIVE = (
    "tiny-llama-draft",
    "tiny-llama-ngram",
    "tiny-qwen3-eagle3",
    "tiny-qwen3-dflash",
    "tiny-qwen3-dspark",
    "tiny-deepseek-v3-mtp",
)
VARIANT_RECIPES = (*SPECULATIVE, "tiny-qwen3-lora")


@pytest.fixture(scope="session")
def variants_built(tmp_path_factory: pytest.TempPathFactory, built: World) -> World:
    """Every execution-variant recipe built once, in one doit run, on the store of the
    ordinary builds: the targets' fetch, reference and plain export chains are reused."""
    w = make_world(tmp_path_factory.mktemp("variants"), built.hub, VARIANT_RECIPES)
    w = World(root=w.root, hub=built.hub, store=built.store)
    w.doit("build", check=True)
    return w


def bundle_dir(world: World, recipe: str) -> Path:
    import re

    out = world.doit("plan", f"recipe={recipe}", check=True).stdout
    key = re.search(r"bundle\s+([0-9a-f]{12})", out).group(1)  # type: ignore[union-attr]
    return next((world.store / "objects").glob(f"*/{key}*"))


# Runs `-m MODULE ARGS` and writes the process's own peak RSS (VmHWM, KiB) to the file
# $KILN_TEST_PEAK at exit. wait4's ru_maxrss cannot say it: it survives fork and exec,
# so a child of a large pytest worker reports the worker's peak (559 MB for a refusal
# that used 50).
_PEAK = """import atexit, os, runpy, sys
def peak():
    with open("/proc/self/status") as f:
        kib = next(line.split()[1] for line in f if line.startswith("VmHWM"))
    with open(os.environ["KILN_TEST_PEAK"], "w") as out:
        out.write(kib)
atexit.register(peak)
sys.argv = [sys.argv[2], *sys.argv[3:]]
runpy.run_module(sys.argv[0], run_name="__main__", alter_sys=True)
"""


@dataclass(frozen=True)
class Measured:
    code: int
    out: str  # stdout and stderr, interleaved
    cpu_s: float  # the child's own user + system seconds (wait4)
    peak_mb: float  # the child's own peak RSS


def measured(argv: list[str], env: dict[str, str] | None = None, cwd: Path = ROOT) -> Measured:
    """Run `python -m MODULE ARGS` (argv as World.argv gives it) in a child and measure it."""
    assert argv[:2] == [sys.executable, "-m"], argv
    with tempfile.TemporaryDirectory() as tmp:
        peak = Path(tmp) / "peak"
        child = subprocess.Popen(
            [sys.executable, "-c", _PEAK, *argv[1:]],
            env={**(env or os.environ), "KILN_TEST_PEAK": str(peak)},
            cwd=cwd,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        assert child.stdout is not None
        hang = threading.Timer(SLOW, child.kill)  # a hang fails the test, never blocks it
        hang.start()
        out = child.stdout.read()
        _, status, usage = os.wait4(child.pid, 0)
        hang.cancel()
        child.returncode = os.waitstatus_to_exitcode(status)
        kib = int(peak.read_text()) if peak.exists() else 0
    return Measured(child.returncode, out, usage.ru_utime + usage.ru_stime, kib / 1024)


def copy_code(dest: Path) -> Path:
    """A copy of the code step keys cover (builders/, runtime/, the core's leaves that
    kiln.plan.toolchain follows), to edit without touching this checkout."""
    from kiln.plan.toolchain import LEAVES

    for folder in ("builders", "runtime"):
        shutil.copytree(ROOT / folder, dest / folder, ignore=shutil.ignore_patterns("__pycache__"))
    (dest / "kiln").mkdir()
    for leaf in LEAVES:
        rel = Path(*leaf.split(".")).with_suffix(".py")
        shutil.copyfile(ROOT / rel, dest / rel)
    return dest


def copy_catalog(base: Path, manifests: bool = True) -> World:
    """The repository's catalog (recipes, thresholds, prompts and, optionally, the
    committed manifests) copied into `base`: enough for the site, no build needed."""
    root = base / "catalog"
    folders = ("recipes", "thresholds", "prompts", *(("manifests",) if manifests else ()))
    for folder in folders:
        shutil.copytree(ROOT / folder, root / folder)
    (root / "manifests").mkdir(exist_ok=True)
    return World(root=root, hub=base / "hub", store=base / "store")


@pytest.fixture(scope="session")
def built_site(built: World) -> Path:
    """The site rendered by `doit site` from the freshly built tiny recipes."""
    built.doit("site", check=True)
    return built.root / "_site"


# ---------------------------------------------------------------- a planning world

PLANNED = ("tiny-llama", "tiny-qwen3", "tiny-bert-classifier", "tiny-t5")


def new_process() -> None:
    """Forget what this process computed: only the store's caches are left."""
    from kiln import statcache
    from kiln.commands import plancache, workspace

    for cached in (workspace._catalog, workspace._plan, plancache.inputs):
        cached.cache_clear()
    statcache._SHARED.clear()


@pytest.fixture
def planning_world(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[World]:
    """A world of PLANNED whose KILN_* this process uses, planned as if online (no
    mirror is needed to plan), with nothing remembered from earlier tests."""
    w = make_world(tmp_path, tmp_path / "hub", PLANNED)
    for name, value in w.env.items():
        if name.startswith("KILN_"):
            monkeypatch.setenv(name, value)
    monkeypatch.setenv("KILN_HUB_ONLINE", "1")
    w.store.mkdir()
    new_process()
    yield w
    new_process()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextlib.contextmanager
def serving(world: World, *variables: str) -> Iterator[tuple[str, subprocess.Popen[str]]]:
    """`doit serve VARIABLES` as a user starts it, up and answering; its base URL."""
    port = free_port()
    proc = subprocess.Popen(
        [*world.argv("serve", *variables, f"port={port}")],
        env=world.env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    base = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + SLOW
    while True:
        try:
            with urllib.request.urlopen(f"{base}/v1/models", timeout=5):
                break
        except OSError:
            if proc.poll() is not None or time.monotonic() > deadline:
                proc.kill()
                raise AssertionError(
                    f"doit serve did not come up: {proc.communicate()[0]}"
                ) from None
            time.sleep(0.2)
    try:
        yield base, proc
    finally:
        if proc.poll() is None:
            proc.terminate()
            proc.communicate(timeout=SLOW)


def two_images(bundle: Any, text: str) -> list[int]:
    """A vision-language bundle's ids for one user turn of two images, then `text`."""
    parts = [{"type": "image"}, {"type": "image"}, {"type": "text", "text": text}]
    return list(bundle.encode_chat([{"role": "user", "content": parts}]))


PICTURES = ROOT / "builders" / "data" / "images"
CIRCLE, SQUARE, STRIPES = (
    PICTURES / n for n in ("circle_64x48.png", "square_200x120.jpg", "stripes_37x91.png")
)


def alone(bundle: Any, prompt: tuple[list[int], Any], new: int = 10) -> list[int]:
    """One picture prompt's greedy tokens (ids, features), generated by itself."""
    return list(bundle.generate_images([prompt], new).tokens[0])


def check_video_positions_and_logits(
    bundle: Any, model: Any, encoded: Any, ids: list[int], features: Any, **rope: Any
) -> Any:
    """A prompt with a video (`encoded`, the processor's; `ids` and `features`, the
    bundle's): the bundle's positions are get_rope_index's (given `rope`, its video
    keywords beyond the grid) and its logits transformers' at every position (< 1e-4);
    transformers' logits."""
    import numpy as np
    import torch

    from runtime.mrope import rope_positions

    theirs_positions, _ = model.model.get_rope_index(
        encoded["input_ids"],
        encoded["mm_token_type_ids"],
        video_grid_thw=encoded["video_grid_thw"],
        **rope,
    )
    tokens = [bundle.image_token, bundle.video_token]
    ours = rope_positions(ids, tokens, features.grids, bundle.merge, features.intervals)
    assert np.array_equal(ours, theirs_positions[:, 0].numpy())
    with torch.no_grad():
        theirs = model(**encoded).logits[0].numpy()
    assert np.abs(bundle.logits(ids, features) - theirs).max() < 1e-4
    return theirs


def check_pictures_survive_batches_and_chunks(bundle: Any) -> None:
    """A batch of a one-picture and a two-picture prompt, then prefill chunks of 5
    tokens that cut through the pictures' rows, each give every prompt's tokens alone
    (a bundle whose pictures are each their own size: Idefics3's crops, Qwen's grids)."""
    short = bundle.ask("Colour?", [SQUARE])
    long = bundle.ask("Which way do the stripes run, and how many are there?", [STRIPES, CIRCLE])
    each = [alone(bundle, short), alone(bundle, long)]
    assert [list(t) for t in bundle.generate_images([short, long], 10).tokens] == each
    bundle.prefill_chunk_len = 5
    try:
        assert [alone(bundle, short), alone(bundle, long)] == each
    finally:
        bundle.prefill_chunk_len = 0


def check_inductor_gives_onnxruntime_outputs(compiled: Any, bundle: Any) -> None:
    """The stripes and the square in one prompt (pictures of their own crop or tile
    counts) across the inductor bundle's prefill windows: the onnxruntime bundle's
    ids, logits at every position (itself transformers') and greedy tokens."""
    import numpy as np

    features = compiled.image_features([STRIPES, SQUARE])
    ids = compiled.encode_chat(picture_turn(2, "Compare them."), images=features)
    theirs = bundle.image_features([STRIPES, SQUARE])
    assert ids == bundle.encode_chat(picture_turn(2, "Compare them."), images=theirs)
    assert features.grids == theirs.grids and len(ids) > 2 * compiled.engine.chunk
    assert np.abs(compiled.logits(ids, features) - bundle.logits(ids, features)).max() < 1e-4
    assert alone(compiled, (ids, features)) == alone(bundle, (ids, features))


def check_fp32_vlm_record(record: dict[str, Any]) -> None:
    """An fp32 vision-language manifest record that passed as the vlm-fp32 gates ask:
    tokens and pixels exact, logits within 1e-4, and the image read as the reference
    reads it (its sensitivity to another picture within 1%)."""
    assert record["verdict"] == "pass", record["gates"]
    metrics = record["metrics"]
    assert metrics["token_match_rate"] == 1.0 and metrics["tokenizer_match_rate"] == 1.0
    assert metrics["max_abs_logit_diff"] < 1e-4
    assert metrics["max_abs_pixel_diff"] <= 1e-6
    assert metrics["reference_image_sensitivity"] > 0.1
    assert 0.99 < metrics["image_sensitivity_ratio"] < 1.01
