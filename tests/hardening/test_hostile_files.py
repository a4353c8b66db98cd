"""Property-based hostile input beyond recipes (issue 14 item 9): manifests, thresholds
and prompt sets, mutated from the shipped ones and generated from scratch, read by the
loaders `doit check` uses. Every case is a correct result or a KilnError whose every
problem names the file; nothing else may escape."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest
from conftest import ROOT
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kiln.catalog.yaml import load_yaml_model
from kiln.errors import KilnError
from kiln.evidence import manifest
from kiln.schema import PromptSet, Thresholds

MANIFEST = (ROOT / "manifests" / "tiny-llama.json").read_text()
THRESHOLDS = (ROOT / "thresholds" / "quantized-int8.yaml").read_text()
PROMPTS = (ROOT / "prompts" / "default.yaml").read_text()
SETTINGS = settings(
    max_examples=300,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)

JSONISH = st.sampled_from(
    [
        *("NaN", "Infinity", "-Infinity", "1e999", "null", "true", "[", "]", "{", "}", '"'),
        *(",", ":", '"\\ud800"', '"\x00"', "1.0", "[[[[[[[[", "0x10", "-0", '"sha256"'),
    ]
)
YAMLISH = st.sampled_from(
    [
        *("&a ", "*a", "<<: ", "!!python/object/apply:os.system ['x']", "yes", "~", "- ", "  "),
        *("\t", "\x00", "\ufeff", "{", "[", "'", '"', ": ", "1e5", ".nan", "0o17", "\n"),
    ]
)


def mutate(draw: st.DrawFn, text: str, tokens: st.SearchStrategy[str]) -> str:
    for _ in range(draw(st.integers(1, 4))):
        op = draw(st.sampled_from(["insert", "delete", "replace"]))
        i = draw(st.integers(0, len(text)))
        if op == "insert":
            text = text[:i] + draw(st.one_of(tokens, st.text(max_size=6))) + text[i:]
        elif op == "delete":
            text = text[:i] + text[i + draw(st.integers(1, 40)) :]
        else:
            text = text[:i] + draw(st.text(max_size=4)) + text[i + 4 :]
    return text


@st.composite
def mutated_manifest(draw: st.DrawFn) -> str:
    return mutate(draw, MANIFEST, JSONISH)


@st.composite
def edited_manifest(draw: st.DrawFn) -> str:
    """Valid JSON, wrong content: a value somewhere replaced by any JSON value."""
    data: Any = json.loads(MANIFEST)
    values = st.recursive(
        st.none()
        | st.booleans()
        | st.integers()
        | st.floats(allow_nan=True, allow_infinity=True)
        | st.text(max_size=10),
        lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner),
        max_leaves=20,
    )
    parent: Any = None
    node, key = data, None
    for _ in range(draw(st.integers(1, 5))):
        if isinstance(node, dict) and node:
            step: Any = draw(st.sampled_from(sorted(node)))
        elif isinstance(node, list) and node:
            step = draw(st.integers(0, len(node) - 1))
        else:
            break
        parent, key, node = node, step, node[step]
    if parent is not None:
        parent[key] = draw(values)
    return json.dumps(data, allow_nan=True)


def located_or_valid(path: Path, shown: str, read: Any) -> Any:
    try:
        return read(path, shown)
    except KilnError as exc:
        assert exc.problems
        for p in exc.problems:
            assert p.location is not None and p.location.file == shown, p
            assert p.render()
        return None


@SETTINGS
@given(text=st.one_of(mutated_manifest(), edited_manifest()))
def test_no_hostile_manifest_gives_anything_but_a_located_error(
    tmp_path_factory: pytest.TempPathFactory, text: str
) -> None:
    path = tmp_path_factory.getbasetemp() / "m.json"
    path.write_bytes(text.encode("utf-8", "surrogatepass"))
    found = located_or_valid(path, "manifests/m.json", manifest.read)
    if found is not None:  # what loads is sound: finite metrics, typed fields
        for e in found.evidence:
            assert all(math.isfinite(v) for v in e.metrics.values())
            assert isinstance(e.host.cores, int) and not isinstance(e.host.cores, bool)


@SETTINGS
@given(
    text=st.builds(lambda t: t, st.just(THRESHOLDS)).flatmap(
        lambda t: st.composite(lambda draw: mutate(draw, t, YAMLISH))()
    )
)
def test_no_hostile_thresholds_file_gives_anything_but_a_located_error(
    tmp_path_factory: pytest.TempPathFactory, text: str
) -> None:
    path = tmp_path_factory.getbasetemp() / "t.yaml"
    path.write_bytes(text.encode("utf-8", "surrogatepass"))
    found = located_or_valid(
        path, "thresholds/t.yaml", lambda p, s: load_yaml_model(Thresholds, p, s)
    )
    if found is not None:
        for g in found.gates:
            assert g.threshold is None or math.isfinite(g.threshold)


@SETTINGS
@given(
    text=st.just(PROMPTS).flatmap(lambda t: st.composite(lambda draw: mutate(draw, t, YAMLISH))())
)
def test_no_hostile_prompt_set_gives_anything_but_a_located_error(
    tmp_path_factory: pytest.TempPathFactory, text: str
) -> None:
    path = tmp_path_factory.getbasetemp() / "p.yaml"
    path.write_bytes(text.encode("utf-8", "surrogatepass"))
    found = located_or_valid(path, "prompts/p.yaml", lambda p, s: load_yaml_model(PromptSet, p, s))
    if found is not None:
        assert len(found.prompts) >= 8 and all(isinstance(x, str) for x in found.prompts)


@pytest.mark.parametrize("value", ["NaN", "Infinity", "-Infinity"])
def test_a_manifest_with_a_non_finite_metric_is_refused_at_its_line(
    tmp_path: Path, value: str
) -> None:
    data = json.loads(MANIFEST)
    metric = next(iter(data["evidence"][-1]["metrics"]))
    text = json.dumps(data, indent=2).replace(
        f'"{metric}": {json.dumps(data["evidence"][-1]["metrics"][metric])}',
        f'"{metric}": {value}',
    )
    assert value in text
    path = tmp_path / "m.json"
    path.write_text(text)
    with pytest.raises(KilnError) as err:
        manifest.read(path, "manifests/m.json")
    assert "finite" in str(err.value) and "manifests/m.json" in str(err.value)
