"""The site shows what manifests prove, escapes what recipes say, and stays in sync."""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml
from browser import tags_of
from conftest import ROOT, SLOW, copy_catalog
from site_api import api_validator

from kiln import catalog, schema
from kiln import site as sitegen
from kiln.commands import schema as editor_schema


def test_a_recipe_without_evidence_is_shown_as_not_built(tmp_path: Path) -> None:
    root = tmp_path / "cat"
    for folder in ("recipes", "thresholds", "prompts"):
        (root / folder).mkdir(parents=True)
        for f in (ROOT / folder).glob("*.yaml"):
            (root / folder / f.name).write_text(f.read_text())
    (root / "manifests").mkdir()
    sitegen.build(catalog.load(catalog.Paths(root)), tmp_path / "site")
    index = (tmp_path / "site" / "index.html").read_text()
    assert "not built" in index and ">pass<" not in index


def test_recipe_strings_are_escaped(tmp_path: Path) -> None:
    root = tmp_path / "cat"
    for folder in ("thresholds", "prompts"):
        (root / folder).mkdir(parents=True)
        for f in (ROOT / folder).glob("*.yaml"):
            (root / folder / f.name).write_text(f.read_text())
    (root / "recipes").mkdir()
    (root / "manifests").mkdir()
    data = yaml.safe_load((ROOT / "recipes" / "tiny-llama.yaml").read_text())
    data["description"] = '<script>alert(1)</script><img src=x onerror="alert(2)">'
    (root / "recipes" / "evil.yaml").write_text(yaml.safe_dump(data))
    sitegen.build(catalog.load(catalog.Paths(root)), tmp_path / "site")
    page = (tmp_path / "site" / "recipes" / "evil.html").read_text()
    assert "<script>" not in page and "<img" not in page
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page


def test_committed_json_schemas_are_current() -> None:
    for name, data in editor_schema.render().items():
        path = ROOT / "schema" / name
        assert path.read_bytes() == data, f"{path} is stale: run `doit schema`"


def test_shipped_recipes_validate_against_the_editor_schema() -> None:
    schema = json.loads((ROOT / "schema" / "recipe.schema.json").read_text())
    recipes = sorted((ROOT / "recipes").glob("*.yaml"))
    assert recipes
    # one validator, its schema checked once (jsonschema.validate checks it per call)
    validator = jsonschema.validators.validator_for(schema)(schema)
    validator.check_schema(schema)
    for path in recipes:
        assert path.read_text().startswith(
            "# yaml-language-server: $schema=../schema/recipe.schema.json"
        )
        validator.validate(yaml.safe_load(path.read_text()))


# ---------------------------------------------------------------- JSON API


def test_a_recipe_without_evidence_is_untested_in_the_matrix_and_the_api(tmp_path: Path) -> None:
    world = copy_catalog(tmp_path, manifests=False)
    sitegen.build(catalog.load(catalog.Paths(world.root)), tmp_path / "site")
    matrix = json.loads((tmp_path / "site" / "api" / "matrix.json").read_text())
    api_validator("Matrix").validate(matrix)
    every = sorted(p.stem for p in (world.root / "recipes").glob("*.yaml"))
    assert matrix["rows"] == [] and matrix["not_built"] == every
    listing = json.loads((tmp_path / "site" / "api" / "recipes.json").read_text())
    api_validator("RecipeList").validate(listing)
    assert {(r["verdict"], r["evidence"]) for r in listing["recipes"]} == {("not built", None)}
    page = (tmp_path / "site" / "matrix.html").read_text()
    assert "claims nothing" in page and 'class="cell' not in page


def test_evidence_for_another_pin_proves_nothing(tmp_path: Path) -> None:
    world = copy_catalog(tmp_path)
    data = world.recipe("tiny-llama")
    data["model"]["revision"] = "0" * 40
    world.write_recipe("tiny-llama", data)
    sitegen.build(catalog.load(catalog.Paths(world.root)), tmp_path / "site")
    listing = json.loads((tmp_path / "site" / "api" / "recipes.json").read_text())
    llama = next(r for r in listing["recipes"] if r["name"] == "tiny-llama")
    assert (llama["verdict"], llama["evidence"], llama["stale"]) == ("not built", None, True)
    page = (tmp_path / "site" / "recipes" / "tiny-llama.html").read_text()
    assert "proves nothing about the recipe as written" in page


# ---------------------------------------------------------------- doit site / serve


def test_doit_site_rebuilds_only_when_its_inputs_change(tmp_path: Path) -> None:
    world = copy_catalog(tmp_path, manifests=False)
    index = world.root / "_site" / "index.html"
    assert "site: " in world.doit("site", check=True).stdout
    assert "not built" in index.read_text() and ">pass<" not in index.read_text()
    assert "-- site" in world.doit("site", check=True).stdout  # nothing changed: up to date
    shutil.copy(ROOT / "manifests" / "tiny-llama.json", world.root / "manifests")
    assert "site: " in world.doit("site", check=True).stdout
    assert ">pass<" in index.read_text()
    data = world.recipe("tiny-qwen3")
    data["description"] = "Reworded for the incremental test."
    world.write_recipe("tiny-qwen3", data)
    world.doit("site", check=True)
    assert "Reworded for the incremental test." in index.read_text()


def test_doit_site_removes_pages_of_deleted_recipes(tmp_path: Path) -> None:
    world = copy_catalog(tmp_path)
    world.doit("site", check=True)
    page = world.root / "_site" / "recipes" / "tiny-mistral.html"
    assert page.exists()
    # a recipe no other extends: deleting a parent makes its children invalid, and the
    # site then refuses to render (test_doit_site_refuses_an_invalid_catalog)
    (world.root / "recipes" / "tiny-mistral.yaml").unlink()
    (world.root / "manifests" / "tiny-mistral.json").unlink()
    world.doit("site", check=True)
    assert not page.exists() and (world.root / "_site" / "recipes" / "tiny-llama.html").exists()


def test_doit_site_refuses_an_invalid_catalog(tmp_path: Path) -> None:
    """A page never goes missing silently: an invalid recipe stops the render, located."""
    world = copy_catalog(tmp_path)
    world.doit("site", check=True)
    (world.root / "recipes" / "tiny-qwen3.yaml").unlink()  # tiny-qwen3-* extend it
    (world.root / "manifests" / "tiny-qwen3.json").unlink()
    proc = world.doit("site")
    out = proc.stdout + proc.stderr
    assert proc.returncode == 1, out
    assert "recipes/tiny-qwen3-aoti.yaml:3:10:" in out and "parent recipe 'tiny-qwen3'" in out
    assert "Traceback" not in out
    assert (world.root / "_site" / "recipes" / "tiny-qwen3-aoti.html").exists()  # kept as was


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_doit_serve_previews_the_site_on_localhost(tmp_path: Path) -> None:
    world = copy_catalog(tmp_path)
    port = free_port()
    cmd = [sys.executable, "-m", "doit", "-f", str(ROOT / "dodo.py"), "-d", str(world.root)]
    proc = subprocess.Popen(
        [*cmd, "serve", f"port={port}"],
        env=world.env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        body = fetch_when_up(f"http://127.0.0.1:{port}/index.html", proc)
        assert "tiny-llama" in body and "tiny-qwen3" in body
        api = json.loads(fetch_when_up(f"http://127.0.0.1:{port}/api/recipes.json", proc))
        assert len(api["recipes"]) == len(list((world.root / "recipes").glob("*.yaml")))
    finally:
        proc.terminate()
        out, _ = proc.communicate(timeout=SLOW)
    assert f"http://127.0.0.1:{port}/" in out


def fetch_when_up(url: str, proc: subprocess.Popen[str], timeout: float = SLOW) -> str:
    deadline = time.monotonic() + timeout
    while True:
        try:
            with urllib.request.urlopen(url, timeout=5) as resp:
                return str(resp.read().decode())
        except OSError:
            if proc.poll() is not None or time.monotonic() > deadline:
                out = proc.stdout.read() if proc.stdout else ""
                raise AssertionError(f"doit serve did not come up: {out}") from None
            time.sleep(0.2)


# ---------------------------------------------------------------- pages


def test_pages_have_no_inline_scripts_styles_or_event_handlers(tmp_path: Path) -> None:
    world = copy_catalog(tmp_path)
    pages = sitegen.build(catalog.load(catalog.Paths(world.root)), tmp_path / "site")
    assert len(pages) > 10
    for page in pages:
        tags = tags_of(page)
        assert tags, page
        handlers = [(t, a) for t, attrs in tags for a in attrs if a.startswith("on")]
        assert handlers == [], f"{page}: inline event handlers {handlers}"
        assert not [t for t, attrs in tags if "style" in attrs or t == "style"], page
        scripts = [attrs.get("src") for t, attrs in tags if t == "script"]
        assert all(src and src.endswith("static/filter.js") for src in scripts), page


def test_recipe_page_and_index_show_limitations_tags_owners_and_companions(tmp_path: Path) -> None:
    world = copy_catalog(tmp_path)
    cat = catalog.load(catalog.Paths(world.root))
    draft = "kiln-tiny/qwen3", "8c0453fc635cbc01885554be7a5f6b71998ad301"
    cat.recipes["tiny-llama"] = cat.recipes["tiny-llama"].model_copy(
        update={
            "known_limitations": ["Greedy decoding only."],
            "tags": ["tiny"],
            "owners": ["site-team"],
            "companions": {"draft": schema.Companion(repo=draft[0], revision=draft[1])},
        }
    )
    sitegen.build(cat, tmp_path / "site")
    page = (tmp_path / "site" / "recipes" / "tiny-llama.html").read_text()
    for shown in ("Greedy decoding only.", "tiny", "site-team", "draft", *draft):
        assert shown in page, shown
    index = (tmp_path / "site" / "index.html").read_text()
    assert '<span class="tag">tiny</span>' in index


def test_the_commands_box_gives_the_command_that_works_for_the_task(tmp_path: Path) -> None:
    """Issue 41: a chat model's run command needs no chat=1 (a chat recipe chats by
    default), a speech recipe's reads audio, and every page says how to export."""
    world = copy_catalog(tmp_path)
    cat = catalog.load(catalog.Paths(world.root))
    sitegen.build(cat, tmp_path / "site")

    def commands(name: str) -> str:
        page = (tmp_path / "site" / "recipes" / f"{name}.html").read_text()
        return page.split('id="commands"')[1].split("</pre>")[0]

    chat = commands("smollm2-135m-instruct")
    assert "doit run recipe=smollm2-135m-instruct prompt=" in chat and "chat=1" not in chat
    assert "audio=builders/data/audio" in commands("tiny-whisper")
    assert "doit export recipe=tiny-llama dest=" in commands("tiny-llama")


# ---------------------------------------------------------------- host class and scope


def test_a_record_names_its_scope_and_older_records_read_as_local() -> None:
    from kiln.evidence.manifest import scope
    from kiln.hostinfo import scope as scope_here

    assert scope_here({"CI": "true"}) == "ci" and scope_here({"CI": "1"}) == "ci"
    assert scope_here({}) == "local" and scope_here({"CI": "false"}) == "local"
    shipped = json.loads((ROOT / "manifests" / "tiny-llama.json").read_text())["evidence"][0]
    old = {k: v for k, v in shipped.items() if k != "scope"}  # as recorded before scopes were
    record = schema.Evidence.model_validate(old)
    assert scope(record) == "local" and "scope" not in record.model_dump(mode="json")
    nightly = schema.Evidence.model_validate({**old, "scope": "nightly"})
    assert scope(nightly) == "nightly" and nightly.model_dump(mode="json")["scope"] == "nightly"


def test_host_class_is_the_gpu_or_the_cpu_and_its_cores() -> None:
    from kiln.hostinfo import host_class

    gpu = host_class({"cpu": "Intel(R) Xeon(R) Processor", "cores": 16, "gpu": "NVIDIA H200"})
    assert (gpu.label, gpu.short, gpu.kind) == ("NVIDIA H200", "H200", "gpu")
    cpu = host_class({"cpu": "AMD EPYC", "cores": 2, "gpu": None})
    assert (cpu.label, cpu.short, cpu.kind) == ("AMD EPYC, 2 cores", "EPYC ×2", "cpu")
    assert host_class({"cpu": "AMD EPYC", "cores": 4}).key != cpu.key


def test_a_plot_is_flat_below_display_precision_and_marks_where_the_build_changed() -> None:
    from kiln.site import plot

    old = json.loads((ROOT / "manifests" / "tiny-llama.json").read_text())["evidence"][0]
    a = schema.Evidence.model_validate({**old, "metrics": {"m": 0.2976221}})
    b = a.model_copy(update={"metrics": {"m": 0.2976224}, "step_key": "f" * 64})
    c = b.model_copy(update={"metrics": {"m": 0.5}})
    (flat,) = plot.plots([a, b])
    assert flat.flat and len({p.y for p in flat.points}) == 1 and flat.scale.startswith("flat")
    assert [len(s) for s in flat.series[0].segments] == [1, 1]  # no line across the rebuild
    assert [c.rebuilt for c in flat.changes] == [True]  # ... and one marker for it
    (moved,) = plot.plots([a, b, c])
    # rounded outward to two digits of the spread: each label is its tick's exact value
    assert not moved.flat and [t for _, t in moved.ticks] == ["0.50", "0.29"]
    assert (moved.low, moved.high) == (0.29, 0.5)


def test_plot_scales_are_rounded_in_the_metrics_unit() -> None:
    from kiln.site import plot

    cases = [
        ("decode_tokens_per_s", [29564.4, 52559.0], ["53k tokens/s", "29k tokens/s"]),
        ("max_abs_logit_diff", [1.96695e-06, 2.6226e-06], ["2.63e-6", "1.96e-6"]),
        ("next_token_agreement", [0.767578, 0.902344], ["0.91", "0.76"]),
        ("min_logit_cosine", [0.99998, 0.99999], ["0.999990", "0.999980"]),
        ("first_divergence", [3.0, 32.0], ["32 tokens", "3 tokens"]),
        ("log_perplexity_ratio", [0.0101, 0.6685], ["0.67 nats", "0.01 nats"]),
    ]
    old = json.loads((ROOT / "manifests" / "tiny-llama.json").read_text())["evidence"][0]
    for metric, values, ticks in cases:
        runs = [schema.Evidence.model_validate({**old, "metrics": {metric: v}}) for v in values]
        (p,) = plot.plots(runs)
        assert [t for _, t in p.ticks] == ticks, metric
        assert p.low <= min(values) and p.high >= max(values)  # the scale covers every run
        assert p.gutter >= max(len(t) for t in ticks) * plot.CHAR  # and its labels fit
    (flat,) = plot.plots(
        [schema.Evidence.model_validate({**old, "metrics": {"first_divergence": 32.0}})]
    )
    assert flat.scale == "flat: 32 tokens (unchanged)"


def test_a_plot_has_a_series_per_host_class_and_scope_a_marker_per_build_a_headline() -> None:
    from kiln.site import plot

    old = json.loads((ROOT / "manifests" / "tiny-llama.json").read_text())["evidence"][0]
    # a host of the test's own, not the committed manifest's: that one is whichever CPU
    # last rebuilt the manifests (an EPYC since 2026-12-07)
    small = {**old["host"], "cpu": "Intel(R) Xeon(R) Processor", "cores": 2}
    big = {**small, "cores": 16}

    def run(day: int, host: dict, scope: str, key: str, value: float) -> plot.Run:
        date = f"2026-11-0{day}T00:00:00+00:00"
        return plot.Run(date, host, {"m": value}, (key, None), f"#{day}", scope)

    runs = [
        run(1, small, "nightly", "a" * 64, 1.0),
        run(2, big, "nightly", "a" * 64, 2.0),
        run(3, small, "ci", "a" * 64, 1.1),
        run(4, small, "nightly", "b" * 64, 1.2),  # the new build, first seen here
        run(5, big, "nightly", "b" * 64, 2.1),  # ... and again on the big host: no 2nd marker
        run(6, small, "local", "b" * 64, 1.3),
    ]
    (p,) = plot.plots(runs, headline="#4")
    assert sorted(s.name for s in p.series) == sorted(
        ["Xeon ×2 · nightly", "Xeon ×16 · nightly", "Xeon ×2 · ci", "Xeon ×2 · local"]
    )
    assert len(p.changes) == 1 and p.points[2].x < p.changes[0].x < p.points[3].x
    nightly = next(s for s in p.series if s.name == "Xeon ×2 · nightly")
    assert [len(seg) for seg in nightly.segments] == [1, 1]
    assert p.headline.decides and p.headline.point.value == 1.2
    assert (p.headline.series.host.short, p.headline.series.scope) == ("Xeon ×2", "nightly")
    (newest,) = plot.plots(runs)  # no deciding record measured it: the newest run, said so
    assert not newest.headline.decides and newest.headline.point.value == 1.3


def test_gate_rationales_are_per_model_family_and_judge_nothing(tmp_path: Path) -> None:
    """Issue 44: a real model's page never explains its gate with the tiny models; the
    rationale is prose, outside the gates' digest, so rewording it re-judges nothing."""
    from kiln.evidence.gates import ref
    from kiln.schema.recipe import family

    cat = catalog.load(catalog.Paths(ROOT))
    judged = {
        r.validation.thresholds for r in cat.recipes.values() if family(r.model.pin) == "real"
    }
    for name in judged:
        for gate in cat.thresholds[name].gates:
            assert "tiny" not in gate.why.lower(), (name, gate.metric)
            if gate.statistical:
                assert gate.why_by_family.get("real"), (name, gate.metric)
    sitegen.build(cat, tmp_path / "site")
    page = (tmp_path / "site" / "recipes" / "smollm2-135m-instruct-int4-awq.html").read_text()
    gates = cat.thresholds["quantized-int4"].gates
    assert all(g.why_by_family["tiny"] not in page for g in gates if "tiny" in g.why_by_family)
    assert "For real checkpoints" in page and "random-weight" not in page
    tiny = (tmp_path / "site" / "recipes" / "tiny-llama-int4-awq.html").read_text()
    assert "random-weight logits make ties common" in tiny and "For real checkpoints" not in tiny
    t = cat.thresholds["quantized-int4"]
    reworded = t.model_copy(
        update={"gates": [g.model_copy(update={"why": "x", "why_by_family": {}}) for g in t.gates]}
    )
    assert ref("quantized-int4", reworded) == ref("quantized-int4", t)


def test_the_sliding_window_feature_shows_yes_only_with_its_record(tmp_path: Path) -> None:
    """A record's `sliding_window` proof (builders/causal_lm/_features.py) becomes the
    Sliding-window attention cell of its architecture: Yes linking to that record when
    proved, fails when its check failed, untested (no cell) where no record speaks."""
    from kiln.site import features as sitefeatures

    world = copy_catalog(tmp_path)
    metrics = {"window": 8.0, "prompt_tokens": 41.0, "sequence_tokens": 73.0}
    for name, proved in (("tiny-mistral", True), ("tiny-gemma3", False)):
        path = world.root / "manifests" / f"{name}.json"
        data = json.loads(path.read_text())
        record = data["evidence"][-1]
        record["features"] = {
            **(record.get("features") or {}),
            "sliding_window": {"proved": proved, "check": "past the window", "metrics": metrics},
        }
        path.write_text(json.dumps(data))
    cat = catalog.load(catalog.Paths(world.root), cache=False)
    g = sitegen.view(cat).features
    label = sitefeatures.LABELS["sliding_window"]
    cells = {(row.key, c.column.group): c for row in g.rows for c in row.cells if c.claims}
    yes = cells[("MistralForCausalLM", (label, "onnxruntime"))]
    assert yes.verdict == "pass"
    by = yes.decided_by
    assert isinstance(by, sitefeatures.FeatureClaim) and by.proof is not None
    assert by.entry.name == "tiny-mistral" and by.proof.metrics == metrics
    assert yes.href == f"{by.entry.url}#evidence-{by.index}"
    assert cells[("Gemma3ForCausalLM", (label, "onnxruntime"))].verdict == "quality-fail"
    assert ("LlamaForCausalLM", (label, "onnxruntime")) not in cells  # untested
    sitegen.build(cat, tmp_path / "site")
    api = json.loads((tmp_path / "site" / "api" / "features.json").read_text())
    api_validator("Features").validate(api)
    found = {r["architecture"]: c for r in api["rows"] for c in r["cells"] if c["feature"] == label}
    assert found["MistralForCausalLM"]["verdict"] == "yes"
    assert found["MistralForCausalLM"]["evidence"] == yes.href
    assert found["MistralForCausalLM"]["metrics"] == metrics
    assert found["Gemma3ForCausalLM"]["verdict"] == "fails"
    assert "LlamaForCausalLM" not in found
    page = (tmp_path / "site" / "features.html").read_text()
    assert label in page and f'href="{yes.href}"' in page


def test_runtime_features_say_yes_only_where_a_record_proves_them(tmp_path: Path) -> None:
    """The runtime-features view (kiln/site/features.py) over the committed manifests:
    each Yes is decided by a record whose validation proved that feature (or, for CUDA
    graph, a passing inductor record on a CUDA device) and links to it; a sliding-window
    Yes only from a record whose validated prompt ran past the window."""
    from kiln.site import features as sitefeatures

    site = sitegen.view(catalog.load(catalog.Paths(ROOT)))
    g = site.features
    decided = [(row.key, c) for row in g.rows for c in row.cells if c.claims]
    assert decided, "no committed record proves any runtime feature"
    names = {label: name for name, label in sitefeatures.FEATURES}
    for arch, c in decided:
        by = c.decided_by
        assert isinstance(by, sitefeatures.FeatureClaim) and by.proof is not None
        feature = names[c.column.group[0]]
        if feature == "sliding_window" and c.verdict == "pass":
            assert by.proof.metrics["prompt_tokens"] > by.proof.metrics["window"]
        if feature == "cuda_graph":
            assert by.record.backend["device"] == "cuda" and by.record.verdict == "pass"
        else:
            proof = (by.record.features or {})[feature]
            assert proof.proved == (c.verdict == "pass"), (arch, feature)
        assert c.href == f"{by.entry.url}#evidence-{by.index}"
    proved = {(arch, c.column.group) for arch, c in decided if c.verdict == "pass"}
    assert ("LlamaForCausalLM", ("Guided decoding", "onnxruntime")) in proved, proved
    assert ("LlamaForCausalLM", ("CUDA graph", "inductor")) in proved, proved
    sitegen.build(catalog.load(catalog.Paths(ROOT)), tmp_path / "site")
    page = (tmp_path / "site" / "features.html").read_text()
    assert ">Yes</a>" in page and "untested" in page
    api = json.loads((tmp_path / "site" / "api" / "features.json").read_text())
    api_validator("Features").validate(api)
    assert api["features"] == [label for _, label in sitefeatures.FEATURES]
    yes = [c for r in api["rows"] for c in r["cells"] if c["verdict"] == "yes"]
    assert yes and all(c["evidence"] and c["check"] for c in yes)


# ---------------------------------------------------------------- modality (issue 40)


class Rows(HTMLParser):
    """The attributes of every table row: the catalog's carry data-modality, and so do
    the matrix's rows of architectures that take images or audio."""

    def __init__(self) -> None:
        super().__init__()
        self.rows: list[dict[str, str | None]] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "tr":
            self.rows.append(dict(attrs))


def rows_of(page: Path) -> list[dict[str, str | None]]:
    parser = Rows()
    parser.feed(page.read_text())
    return parser.rows


def test_modality_is_read_off_the_task_and_filters_the_catalog_and_the_matrix(
    tmp_path: Path,
) -> None:
    from kiln.site.view import MODALITIES, modality

    world = copy_catalog(tmp_path)
    cat = catalog.load(catalog.Paths(world.root))
    site = tmp_path / "site"
    sitegen.build(cat, site)
    expected = {name: modality(r.task) for name, r in cat.recipes.items()}
    assert expected["tiny-llava"] == "image+text" and expected["tiny-whisper"] == "audio"
    assert expected["tiny-llama"] == "text"
    # the catalog: every row carries its modality, the form offers it, a page per value
    index = site / "index.html"
    shown = {r["data-search"].split()[0]: r["data-modality"] for r in rows_of(index) if r}
    assert shown == expected
    html = index.read_text()
    assert '<select id="f-modality" name="modality">' in html
    images = [n for n, m in expected.items() if m == "image+text"]
    assert f'<option value="image+text">image+text ({len(images)})</option>' in html
    browse = site / "browse" / "modality" / "image-text.html"
    assert sorted(r["data-search"].split()[0] for r in rows_of(browse) if r) == sorted(images)
    assert "tiny-llava</a>" in html and '<span class="tag input">image+text input</span>' in html
    # the API says it, and its schema allows exactly the modalities the site knows
    listing = json.loads((site / "api" / "recipes.json").read_text())
    api_validator("RecipeList").validate(listing)
    assert {r["name"]: r["facets"]["modality"] for r in listing["recipes"]} == expected
    enum = json.loads((ROOT / "schema" / "site-api.schema.json").read_text())["$defs"]["Facets"]
    assert set(enum["properties"]["modality"]["enum"]) == {"text", *MODALITIES.values()}
    # the matrix: image-input rows are marked, and a Modality filter leads to a page each
    matrix = (site / "matrix.html").read_text()
    marked = {r.get("data-modality") for r in rows_of(site / "matrix.html")} - {None}
    assert marked == {"image+text", "audio"}
    llava = matrix.split('href="architectures/llavaforconditionalgeneration.html"')[1]
    assert llava.split("</th>")[0].endswith('<span class="tag input">image+text input</span>')
    nav = matrix.split('aria-label="Matrix filters"')[1].split("</nav>")[0]
    link = '<a href="matrix/ordinary-any-image-text-input.html">image+text</a>'
    assert '<span class="label">Modality</span>' in nav and link in nav
    only = site / "matrix" / "ordinary-any-image-text-input.html"
    page = only.read_text()
    heads = page.split('<th scope="row">')[1:]
    built = sorted(h.split('.html"')[0].rsplit("/", 1)[-1] for h in heads)
    assert built == [
        "gemma3forconditionalgeneration",
        "idefics3forconditionalgeneration",
        "internvlforconditionalgeneration",
        "llavaforconditionalgeneration",
        "qwen2_5_vlforconditionalgeneration",
        "qwen2vlforconditionalgeneration",
        "qwen3vlforconditionalgeneration",
    ]
    assert "taking <strong>image+text</strong> input" in page
    assert 'aria-current="page">image+text</a>' in page  # the filter says where it is
    text_only = (site / "matrix" / "ordinary-any-text-input.html").read_text()
    assert "llavaforconditionalgeneration" not in text_only
    assert "architectures/llamaforcausallm.html" in text_only


class Asked(HTMLParser):
    """A recipe page's validation images: each image's src and name, and its question
    and answer pairs, as the page shows them."""

    def __init__(self) -> None:
        super().__init__()
        self.images: list[dict[str, Any]] = []
        self.inside = False
        self.cell: str | None = None  # "code", "dt" or "dd" while inside one

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        found = dict(attrs)
        if tag == "ul" and found.get("class") == "asked":
            self.inside = True
        elif self.inside and tag == "li":
            self.images.append({"src": None, "alt": None, "name": "", "asked": []})
        elif self.inside and tag == "img":
            self.images[-1].update(src=found["src"], alt=found.get("alt"))
        elif self.inside and tag in ("code", "dt", "dd"):
            self.cell = tag
            if tag == "dt":
                self.images[-1]["asked"].append(["", ""])

    def handle_endtag(self, tag: str) -> None:
        if tag == "ul" and self.inside:
            self.inside = False
        if tag == self.cell:
            self.cell = None

    def handle_data(self, data: str) -> None:
        if self.cell == "code":
            self.images[-1]["name"] += data
        elif self.cell in ("dt", "dd"):
            self.images[-1]["asked"][-1][self.cell == "dd"] += data


def asked_on(page: Path) -> list[dict[str, Any]]:
    parser = Asked()
    parser.feed(page.read_text())
    return parser.images


def test_a_vlm_recipe_page_shows_its_images_with_the_questions_and_the_answers(
    tmp_path: Path,
) -> None:
    """Issue 40: each validation image, copied into the site, with the questions asked
    about it and the answers of the deciding record; the site needs nothing outside it."""
    from kiln.errors import printable
    from kiln.plan import VALIDATION_IMAGES

    world = copy_catalog(tmp_path)
    site = tmp_path / "site"
    sitegen.build(catalog.load(catalog.Paths(world.root)), site)
    record = world.manifest("tiny-llava")["evidence"][-1]
    assert len(record["answers"]) == 8  # prompts/images.yaml's eight questions
    page = site / "recipes" / "tiny-llava.html"
    shown = asked_on(page)
    assert [i["name"] for i in shown] == list(VALIDATION_IMAGES)
    for image in shown:
        copied = (page.parent / image["src"]).resolve()
        assert copied == (site / "assets" / "images" / image["name"]).resolve()
        shipped = ROOT / "builders" / "data" / "images" / image["name"]
        assert copied.read_bytes() == shipped.read_bytes()
        assert image["alt"] == f"Validation image {image['name']}"
        mine = [a for a in record["answers"] if a["image"] == image["name"]]
        assert image["asked"] == [[a["prompt"], printable(a["answer"])] for a in mine]
    html = page.read_text()
    assert 'href="#evidence-0">record 0</a>' in html and "answers are not language" in html
    assert "image=builders/data/images/circle_64x48.png" in html  # the run command
    assert not any(ch in html for ch in "\x00\x04\x06\x16")  # raw control characters
    assert "<dt>Modality</dt><dd>image+text input</dd>" in html
    # only a vision-language page has the section, and only its images are copied
    assert 'id="images"' not in (site / "recipes" / "tiny-llama.html").read_text()
    assert sorted(p.name for p in (site / "assets" / "images").iterdir()) == sorted(
        VALIDATION_IMAGES
    )


def test_a_vlm_page_without_recorded_answers_shows_the_questions_on_their_images(
    tmp_path: Path,
) -> None:
    """A record made before answers were recorded is still valid; the page then pairs
    the recipe's prompts with the images as the planner does (prompt i, image i mod 4)
    and says no answer is recorded. A name that is no shipped image gets no picture,
    and is never copied; an answer's control characters and bidi overrides are escaped."""
    from kiln.plan import VALIDATION_IMAGES

    world = copy_catalog(tmp_path)
    path = world.root / "manifests" / "tiny-llava.json"
    data = json.loads(path.read_text())
    answers = data["evidence"][-1].pop("answers")
    path.write_text(json.dumps(data))
    site = tmp_path / "site"
    sitegen.build(catalog.load(catalog.Paths(world.root)), site)
    shown = asked_on(site / "recipes" / "tiny-llava.html")
    prompts = yaml.safe_load((ROOT / "prompts" / "images.yaml").read_text())["prompts"]
    n = len(VALIDATION_IMAGES)
    assert [[q for q, _ in i["asked"]] for i in shown] == [prompts[k::n] for k in range(n)]
    assert {a for i in shown for _, a in i["asked"]} == {"no answer recorded"}
    assert "before answers were recorded" in (site / "recipes" / "tiny-llava.html").read_text()

    answers[0] = {**answers[0], "image": "elsewhere.png", "answer": "left\u202eright\x00"}
    data["evidence"][-1]["answers"] = answers
    path.write_text(json.dumps(data))
    sitegen.build(catalog.load(catalog.Paths(world.root), cache=False), site)
    shown = asked_on(site / "recipes" / "tiny-llava.html")
    other = next(i for i in shown if i["name"] == "elsewhere.png")
    assert other["src"] is None and other["asked"][0][1] == "left\\u202eright\\x00"
    assert not (site / "assets" / "images" / "elsewhere.png").exists()


def test_an_answer_names_an_image_never_a_path() -> None:
    """The site copies the images a manifest names: a path there is a schema error (the
    manifest is then unreadable), and so is an answer longer than the manifest keeps."""
    import pydantic

    from kiln.schema.manifest import ANSWER_CHARS, Answer

    ok = {"image": "circle_64x48.png", "prompt": "What is in the picture?", "answer": "a circle"}
    assert Answer.model_validate(ok).image == "circle_64x48.png"
    for bad in (
        {"image": "../../etc/passwd"},
        {"image": "sub/circle.png"},
        {"image": ".hidden"},
        {"answer": "x" * (ANSWER_CHARS + 1)},
    ):
        with pytest.raises(pydantic.ValidationError):
            Answer.model_validate({**ok, **bad})


# ---------------------------------------------------------------- coverage (issue 40)


def test_the_coverage_table_marks_and_counts_the_architectures_that_take_images(
    tmp_path: Path,
) -> None:
    from kiln.site import coverage

    world = copy_catalog(tmp_path)
    (world.root / "catalog").mkdir()
    (world.root / "catalog" / "architectures.yaml").write_text(
        yaml.safe_dump(
            {
                "schema_version": 1,
                "architectures": [
                    {"name": "LlamaForCausalLM", "family": "dense", "tiny": "tiny-llama"},
                    {"name": "LlavaForConditionalGeneration", "family": "vision-language"}
                    | {"tiny": "tiny-llava", "in_matrix": False},
                    {"name": "WhisperForConditionalGeneration", "family": "encoder-decoder"}
                    | {"tiny": "tiny-whisper"},
                    {"name": "PixForConditionalGeneration", "status": "not-built"}
                    | {"reason": "PixImageProcessor tiles each image into crops."}
                    | {"task": "image-text-to-text"},
                    # a reason that names an image processor decides nothing: the task does
                    {"name": "ProseForCausalLM", "status": "not-built"}
                    | {"reason": "Like PixImageProcessor's crops, its cache is refused."},
                    {"name": "WordsForCausalLM", "status": "not-in-release"}
                    | {"reason": "transformers 5.24.0 has no WordsForCausalLM."},
                ],
            }
        )
    )
    table = coverage.rows(catalog.load(catalog.Paths(world.root)))
    taking = {r.architecture: r.modality for r in table}
    assert taking == {
        "LlamaForCausalLM": "text",
        "LlavaForConditionalGeneration": "image+text",
        "WhisperForConditionalGeneration": "audio",
        "PixForConditionalGeneration": "image+text",
        "ProseForCausalLM": "text",
        "WordsForCausalLM": "text",
    }
    verdicts = {r.architecture: r.verdict for r in table}
    assert verdicts["LlavaForConditionalGeneration"] == "pass"  # the committed manifest
    section = coverage.section(table)
    line = section.strip().split("\n")[0]
    assert line.endswith("; 2 take images: 1 not-built, 1 pass.")
    rows = {r.split(" | ")[0].strip("| "): r for r in section.split("\n") if r.startswith("| ")}
    assert rows["LlavaForConditionalGeneration"].split(" | ")[2] == "**image+text**"
    assert rows["WhisperForConditionalGeneration"].split(" | ")[2] == "**audio**"
    assert rows["LlamaForCausalLM"].split(" | ")[2] == "text"


def test_the_shipped_coverage_table_marks_every_vision_language_entry() -> None:
    """Every architecture catalog/architectures.yaml lists as vision-language, or names
    the image-text-to-text task for, is counted as taking images; no text one is; and
    every not-built entry whose reason is about an image processor names that task."""
    from kiln.catalog import architectures
    from kiln.site import coverage

    cat = catalog.load(catalog.Paths(ROOT))
    table = {r.architecture: r for r in coverage.rows(cat)}
    listed = architectures.load(ROOT).architectures
    images = {
        a.name for a in listed if a.family == "vision-language" or a.task == "image-text-to-text"
    }
    assert {a.name for a in listed if "ImageProcessor" in a.reason} <= images
    assert {"LlavaForConditionalGeneration", "MllamaForConditionalGeneration"} <= images
    assert {n for n, r in table.items() if "image+text" in r.modality} == images
    line = coverage.summary(list(table.values()))
    assert f"; {len(images)} take images: " in line
