"""A vision-language record's answers (issue 40): an optional field of the manifest's
evidence record, kept short, that round-trips through a manifest unchanged and leaves
every record made before it valid."""

from __future__ import annotations

import json
from pathlib import Path

import pydantic
import pytest

from kiln.evidence import manifest
from kiln.evidence.record import _answers
from kiln.paths import ROOT
from kiln.schema import Evidence
from kiln.schema.manifest import ANSWER_CHARS

SHIPPED = manifest.read(ROOT / "manifests" / "tiny-llama.json")
assert SHIPPED is not None and SHIPPED.evidence
BASE = SHIPPED.evidence[-1]
ASKED = [
    {"image": "circle_64x48.png", "prompt": "What is in the picture?", "answer": "a circle"},
    {"image": "square_200x120.jpg", "prompt": "Describe the shape.", "answer": ""},
]


def test_a_record_made_before_answers_is_valid_and_written_as_it_was() -> None:
    assert BASE.answers is None
    assert "answers" not in BASE.model_dump(mode="json")
    raw = json.loads((ROOT / "manifests" / "tiny-llama.json").read_text())["evidence"][-1]
    assert "answers" not in raw
    assert Evidence.model_validate(raw) == BASE


def test_answers_round_trip_through_a_manifest(tmp_path: Path) -> None:
    record = Evidence.model_validate({**BASE.model_dump(mode="json"), "answers": _answers(ASKED)})
    path = tmp_path / "m.json"
    written = manifest.record(path, "tiny-llama", SHIPPED.lock, record)
    read = manifest.read(path)
    assert read == written and read is not None
    (again,) = read.evidence
    assert again.answers is not None
    assert [a.model_dump() for a in again.answers] == ASKED  # in the order asked
    on_disk = json.loads(path.read_text())["evidence"][0]["answers"]
    assert on_disk == [dict(sorted(a.items())) for a in ASKED]


def test_the_recorder_keeps_each_answers_start_and_says_it_cut() -> None:
    long = "y" * (ANSWER_CHARS + 50)
    exact = "z" * ANSWER_CHARS
    kept = _answers([{**ASKED[0], "answer": long}, {**ASKED[1], "answer": exact}])
    assert kept[0]["answer"] == "y" * (ANSWER_CHARS - 1) + "…"
    assert len(kept[0]["answer"]) == ANSWER_CHARS and kept[1]["answer"] == exact
    assert kept[0]["image"] == ASKED[0]["image"] and kept[0]["prompt"] == ASKED[0]["prompt"]
    Evidence.model_validate({**BASE.model_dump(mode="json"), "answers": kept})
    assert _answers(None) is None  # other tasks record none


def test_an_answer_the_recorder_did_not_cut_is_refused() -> None:
    data = {**BASE.model_dump(mode="json"), "answers": [{**ASKED[0], "answer": "w" * 201}]}
    assert ANSWER_CHARS == 200
    with pytest.raises(pydantic.ValidationError, match=r"answers\.0\.answer"):
        Evidence.model_validate(data)
