"""Command-line variables: one table per verb, typed, and no unknown name ignored."""

from __future__ import annotations

import inspect

import pytest

import tasks
from kiln.commands.variables import Var, resolve
from kiln.errors import KilnError

TABLE = (
    Var("temperature", float, 0.0, "sampling temperature", minimum=0),
    Var("top_k", int, 0, "k"),
    Var("dry_run", bool, False, "list only"),
    Var("recipe", str, None, "a recipe"),
)


def test_defaults_and_typed_values() -> None:
    assert resolve(TABLE, {}, "run") == {
        "temperature": 0.0,
        "top_k": 0,
        "dry_run": False,
        "recipe": None,
    }
    got = resolve(TABLE, {"temperature": "0.7", "top_k": "5", "recipe": "x"}, "run")
    assert got == {"temperature": 0.7, "top_k": 5, "dry_run": False, "recipe": "x"}


@pytest.mark.parametrize(
    ("text", "value"),
    [("1", True), ("0", False), ("true", True), ("False", False), ("yes", True), ("NO", False)],
)
def test_bools_are_spelled_explicitly(text: str, value: bool) -> None:
    assert resolve(TABLE, {"dry_run": text}, "gc")["dry_run"] is value


@pytest.mark.parametrize("text", ["", "y", "on", "2", "maybe", "nein"])
def test_anything_else_is_not_a_bool(text: str) -> None:
    with pytest.raises(KilnError) as err:
        resolve(TABLE, {"dry_run": text}, "gc")
    assert str(err.value) == (
        f"command line: dry_run: {text!r} is not a bool; write dry_run=1 or dry_run=0"
    )


@pytest.mark.parametrize(
    ("given", "message"),
    [
        ({"top_k": "1.5"}, "command line: top_k: '1.5' is not an integer; e.g. top_k=0"),
        ({"temperature": "hot"}, "command line: temperature: 'hot' is not a number"),
        ({"temperature": "nan"}, "command line: temperature: 'nan' is not a finite number"),
        ({"temperature": "-1"}, "command line: temperature: -1 is below 0"),
    ],
)
def test_bad_numbers_are_located_errors(given: dict[str, str], message: str) -> None:
    with pytest.raises(KilnError) as err:
        resolve(TABLE, given, "run")
    assert str(err.value).startswith(message)


def test_an_unknown_variable_is_an_error_with_a_did_you_mean() -> None:
    with pytest.raises(KilnError) as err:
        resolve(TABLE, {"temprature": "0.7", "top_k": "x"}, "run")
    text = str(err.value)
    assert "unknown variable 'temprature' for run; did you mean 'temperature'?" in text
    assert "top_k: 'x' is not an integer" in text and "2 errors" in text  # all at once
    with pytest.raises(KilnError, match="run takes temperature, top_k, dry_run, recipe"):
        resolve(TABLE, {"zzz": "1"}, "run")
    with pytest.raises(KilnError, match="schema takes no variables"):
        resolve((), {"zzz": "1"}, "schema")


def test_each_verb_names_its_commands_parameters_and_documents_them() -> None:
    """One table per verb: its names are exactly what its command takes, and the task's
    one line of doc (what `doit help TASK` prints) lists every one."""
    for verb in tasks.ALL:
        doc = verb.doc()
        assert "\n" not in doc
        for var in verb.vars:
            assert f"{var.name}=" in doc and var.help in doc, (verb.name, var.name)
        if verb.name != "build":  # build's actions are its steps
            params = inspect.signature(tasks.command(verb.name)).parameters
            assert list(params) == [v.name for v in verb.vars], verb.name


def test_run_takes_sampling_values_within_their_bounds() -> None:
    got = resolve(tasks.RUN.vars, {"temperature": "0.7", "top_p": "0.5", "top_k": "3"}, "run")
    assert (got["temperature"], got["top_p"], got["top_k"]) == (0.7, 0.5, 3)
    with pytest.raises(KilnError, match=r"top_p: 1\.5 is over 1"):
        resolve(tasks.RUN.vars, {"top_p": "1.5"}, "run")
    with pytest.raises(KilnError, match="port: 70000 is over 65535"):
        resolve(tasks.SERVE.vars, {"port": "70000"}, "serve")


def test_chat_reuses_its_prefix_only_where_that_gives_a_cold_runs_tokens() -> None:
    """`doit run chat=1` resumes each turn from the chat so far only for precisions
    whose prefill does not depend on token boundaries; every committed record whose
    prefix_reuse check failed is one of those it leaves alone, and the records of those
    carry no prefix_reuse proof at all (the runtime refuses it there)."""
    import json

    from kiln.commands.run import reuses_exactly

    for weights, kv, backend, exact in [
        ("fp32", "auto", "onnxruntime", True),
        ("bf16", "auto", "inductor", False),  # its cache lives in the engine's buffers
        ("int8-wo", "auto", "onnxruntime", False),
        ("int4-awq", "auto", "onnxruntime", False),
        ("int8-wo", "auto", "aoti", True),
        ("int8-wo", "auto", "inductor", False),
        ("fp8", "auto", "onnxruntime", False),
        ("int8-sq", "auto", "onnxruntime", False),
        ("w4a8-awq", "auto", "onnxruntime", False),
        ("fp32", "fp8", "onnxruntime", False),
    ]:
        meta = {
            "precision": {"weights": weights, "kv_cache": kv},
            "engines": {"main": {"backend": backend}},
        }
        assert reuses_exactly(meta) is exact, (weights, kv, backend)
    from conftest import ROOT

    from kiln import catalog

    cat = catalog.load(catalog.Paths(ROOT), cache=False)
    for path in sorted((ROOT / "manifests").glob("*.json")):
        record = json.loads(path.read_text())["evidence"][-1]
        proof = (record.get("features") or {}).get("prefix_reuse")
        recipe = cat.recipe(path.stem)
        meta = {
            "precision": recipe.precision.model_dump(),
            "engines": {"main": {"backend": recipe.build.backend}},
        }
        if proof and not proof["proved"]:
            assert not reuses_exactly(meta), path.stem
        if not reuses_exactly(meta):  # refused: not tried, not failed
            assert proof is None, (path.stem, proof)


def test_a_video_is_its_frames_image_files_and_never_a_container() -> None:
    from kiln.commands.run import _videos

    frames = "builders/data/images/circle_64x48.png,builders/data/images/square_200x120.jpg"
    assert [len(v) for v in _videos(f"{frames};{frames}")] == [2, 2]
    for given, said in (
        ("clip.mp4", "kiln decodes no video containers"),
        ("builders/data/images/circle_64x48.png", "a video needs at least 2 frames"),
        ("builders/data/images/circle_64x48.png,,x.png", "names an empty file"),
    ):
        with pytest.raises(KilnError, match=said):
            _videos(given)
