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


# ---------------------------------------------------------------- the fast build


def _located(text: str) -> object:
    """What the located walk alone makes of `text`: its data, or its problems."""
    from kiln.catalog import yaml as guarded

    try:
        text = guarded.decode("f", text.encode())
        node = guarded.compose("f", text)
        if guarded._anchors(text):
            return ("error", "anchors")
    except KilnError as exc:
        return ("error", str(exc))
    builder = guarded._Builder("f", text)
    try:
        data = builder.build(node)
    except KilnError as exc:
        return ("error", str(exc))
    return ("error", str(KilnError(builder.problems))) if builder.problems else ("data", data)


def _read(text: str) -> object:
    from kiln.catalog import yaml as guarded

    try:
        return ("data", guarded.read_yaml("f", text.encode())[2])
    except KilnError as exc:
        return ("error", "anchors" if exc.problems[0].cause == guarded.NO_ALIASES else str(exc))


SCALARS = [
    "0",
    "017",
    "0o17",
    "0x1F",
    "0b101",
    "-0",
    "+12",
    "1_000",
    "190:20:30",
    "08",
    "1e3",
    "1.5",
    ".inf",
    "-.Inf",
    ".nan",
    "yes",
    "No",
    "on",
    "OFF",
    "true",
    "~",
    "null",
    "",
    "'017'",
    '"yes"',
    "!!str 12",
    "!!int '12'",
    "!!float 1",
    "!!binary aGk=",
    "!!set {a}",
    "2024-01-01",
    "12345678901234567890",
    "9" * 101,
    "a b",
    "'x': 1",
]


def test_the_fast_build_gives_the_located_walks_data_and_problems(tmp_path: Path) -> None:
    """Every shipped YAML file, and documents built from every kind of scalar YAML 1.1
    reads (octal, sexagesimal, booleans, tags, huge integers), read twice: through
    read_yaml (the fast build, falling back) and through the located walk alone."""
    texts = [p.read_text() for p in sorted(ROOT.glob("*/*.yaml"))]
    texts += [
        p.read_text(errors="replace") for p in sorted((ROOT / "tests" / "hostile").glob("*.yaml"))
    ]
    for value in SCALARS:
        texts.append(f"a: {value}\nb: [{value}]\nc:\n  - {value}\n")
        texts.append(f"{value}: x\nd: 1\n")
    texts += ["a: 1\na: 2\n", "a: {b: 1, b: 2}\n", "? [a]\n: 1\n", "<<: {a: 1}\n", "a: !!map [1]\n"]
    assert len(texts) > 150
    for text in texts:
        assert _read(text) == _located(text), text[:200]


def test_integers_keep_their_yaml_11_meaning_when_remembered(tmp_path: Path) -> None:
    from kiln.catalog import yaml as guarded

    for _ in range(2):  # the second read comes from the remembered values
        data = guarded.read_yaml("f", b"a: 017\nb: 0x1F\nc: 1_0\nd: yes\ne: 08\nf: 0o17\n")[2]
        assert data == {"a": 15, "b": 31, "c": 10, "d": True, "e": "08", "f": "0o17"}


@pytest.mark.parametrize(
    "text",
    [
        "x:\n" + "- " * 40 + "a\n",
        "".join(" " * i + f"k{i}:\n" for i in range(40)) + "v: 1\n",
        "x:\n" + "".join(" " * (2 * i) + "- k:\n" for i in range(20)) + " " * 40 + "- v\n",
        "x:\n" + "- " * 1020 + "a\n",  # past libyaml's own 1,000 levels
    ],
)
def test_short_block_nesting_is_refused_at_level_33_like_the_event_scan(text: str) -> None:
    """Under 2 KB and without brackets, the event scan does not run (issue 14: 500
    nested block sequences were a RecursionError); the build counts the levels and
    says what the scan says, at the same place."""
    from kiln.catalog import yaml as guarded

    assert len(text) < 64 * guarded.MAX_DEPTH and "[" not in text
    with pytest.raises(KilnError) as built:
        guarded.read_yaml("recipes/r.yaml", text.encode())
    with pytest.raises(KilnError) as scanned:
        guarded._check_depth("recipes/r.yaml", text, scan=True)
    assert str(built.value) == str(scanned.value)
    assert str(built.value).startswith("recipes/r.yaml:") and "nesting depth over 32" in str(
        built.value
    )
    thirty_two = "".join(" " * i + f"k{i}:\n" for i in range(31)) + " " * 31 + "v: 1\n"
    assert guarded.read_yaml("f", thirty_two.encode())[2]  # 32 levels are fine
