"""Recipes fail with file:line:col, the key path, a cause and a fix; never a traceback."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from conftest import ROOT

from kiln.catalog.yaml import load_yaml_model
from kiln.errors import KilnError
from kiln.schema import Recipe

GOOD = (ROOT / "recipes" / "tiny-llama.yaml").read_text()


def errors_for(tmp_path: Path, text: str | bytes) -> str:
    path = tmp_path / "r.yaml"
    if isinstance(text, str):
        path.write_text(text)
    else:
        path.write_bytes(text)
    with pytest.raises(KilnError) as info:
        load_yaml_model(Recipe, path, "recipes/r.yaml")
    return str(info.value)


def test_shipped_recipe_loads() -> None:
    recipe = load_yaml_model(Recipe, ROOT / "recipes" / "tiny-llama.yaml")
    assert recipe.model.repo == "kiln-tiny/llama"
    assert recipe.build.max_seq_len == 256


def test_unknown_key_names_line_column_path_and_a_close_match(tmp_path: Path) -> None:
    text = GOOD.replace("  max_seq_len: 256", "  max_seq_len: 256\n  max_seqlen: 12")
    msg = errors_for(tmp_path, text)
    line = text.splitlines().index("  max_seqlen: 12") + 1
    assert msg.startswith(f"recipes/r.yaml:{line}:3: build -> max_seqlen: unknown key 'max_seqlen'")
    assert "did you mean 'max_seq_len'?" in msg
    assert "^" in msg  # the snippet with a caret


def test_enum_value_suggests_the_closest_choice(tmp_path: Path) -> None:
    msg = errors_for(tmp_path, GOOD.replace("variant: ordinary", "variant: ordinry"))
    assert "execution -> variant: 'ordinry' is not one of ordinary" in msg
    assert "did you mean 'ordinary'?" in msg


@pytest.mark.parametrize(
    "revision", ["main", "v1.0", "86b0c01", "86B0C016F94FF17585B315E24E0F72B043294BED"]
)
def test_a_revision_must_be_40_hex(tmp_path: Path, revision: str) -> None:
    text = GOOD.replace(
        "revision: 86b0c016f94ff17585b315e24e0f72b043294bed", f"revision: {revision}"
    )
    msg = errors_for(tmp_path, text)
    assert "model -> revision:" in msg and "is not a 40-hex revision" in msg
    assert "branch and tag names are not pins" in msg


def test_a_revision_yaml_reads_as_a_number_says_to_quote_it(tmp_path: Path) -> None:
    text = GOOD.replace(
        "revision: 86b0c016f94ff17585b315e24e0f72b043294bed", "revision: " + "1" * 40
    )
    msg = errors_for(tmp_path, text)
    assert "is read by YAML as int" in msg and "quote it" in msg


def test_every_error_is_reported_at_once(tmp_path: Path) -> None:
    text = GOOD.replace("variant: ordinary", "variant: nope").replace(
        "max_batch_size: 4", "max_batch_size: 0"
    )
    msg = errors_for(tmp_path, text + "colour: blue\n")
    assert "3 errors" in msg
    assert "colour" in msg and "nope" in msg and "max_batch_size" in msg


def test_missing_key_says_what_it_is(tmp_path: Path) -> None:
    data = yaml.safe_load(GOOD)
    del data["validation"]
    msg = errors_for(tmp_path, yaml.safe_dump(data))
    assert "missing required key 'validation'" in msg


@pytest.mark.parametrize(
    ("text", "cause"),
    [
        ("a: 1\na: 2\n", "duplicate key 'a'"),
        ("a: &x 1\nb: *x\n", "anchors"),
        ("a:\n\tb: 1\n", "tab"),
        ("- 1\n- 2\n", "not a mapping"),
        ("a: !!python/object/apply:os.system ['true']\n", "not allowed"),
        ("<<<<<<< HEAD\na: 1\n=======\na: 2\n>>>>>>> b\n", "merge-conflict marker"),
        ("a: [1, 2\n", "YAML syntax"),
        ("", "not a mapping"),
        (b"\xef\xbb\xbfa: 1\n", "byte-order mark"),
        (b"a: \xff\xfe\n", "invalid UTF-8"),
        ("a: 1\x00\n", "NUL"),
        ("a: " + "[" * 5000 + "]" * 5000 + "\n", "nesting depth"),
        ("x: 1\n" * 300000, "over the"),
        ("base: &b {k: 1}\nchild:\n  <<: *b\n", "not allowed"),
    ],
)
def test_hostile_yaml_fails_cleanly_with_a_location(
    tmp_path: Path, text: str | bytes, cause: str
) -> None:
    msg = errors_for(tmp_path, text)
    assert cause in msg
    assert msg.startswith("recipes/r.yaml")


@pytest.mark.parametrize(
    ("old", "new", "expected"),
    [
        (
            "schema_version: 1",
            "schema_version: true",
            "schema_version must be the integer 1, not true",
        ),
        (
            "schema_version: 1",
            "schema_version: 1.0",
            "schema_version must be the integer 1, not 1.0",
        ),
        (
            "  max_batch_size: 4",
            "  max_batch_size: yes",
            "'yes' is read by YAML as a boolean, not an integer; write a whole number",
        ),
        (
            "schema_version: 1",
            "schema_version: 1\nallow_pickle_weights: 1",
            "'1' is read by YAML as an integer, not a boolean; write true or false",
        ),
        (
            "schema_version: 1",
            "schema_version: 1\ntrust_remote_code: 'false'",
            "'false' is read by YAML as text (it is quoted), not a boolean",
        ),
        ("  max_seq_len: 256", "  max_seq_len: 256.0", "not an integer"),
    ],
)
def test_values_are_what_they_say(tmp_path: Path, old: str, new: str, expected: str) -> None:
    """Strict values (issue 14): no YAML 1.1 yes as 1, no 1 or 'false' as a boolean."""
    assert old in GOOD
    msg = errors_for(tmp_path, GOOD.replace(old, new, 1))
    assert expected in msg, msg
    assert msg.startswith("recipes/r.yaml:")


def test_a_manifest_metric_must_be_finite() -> None:
    from pydantic import ValidationError

    from kiln.schema import Evidence

    good = json.loads((ROOT / "manifests" / "tiny-llama.json").read_text())["evidence"][-1]
    Evidence.model_validate(good)
    for bad in (float("nan"), float("inf")):
        with pytest.raises(ValidationError, match="finite"):
            Evidence.model_validate({**good, "metrics": {**good["metrics"], "x": bad}})
