"""The runtime's prompt policy and conversation checks (runtime/chat.py): what a user
gets wrong is a BundleError that says what and where, before anything is tokenized."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from runtime.chat import Policy, check_messages, read_messages, texts
from runtime.format import BundleError


def test_ascii_policy_names_the_character_and_its_place() -> None:
    Policy({"charset": "ascii"}).check("plain text, 100% ASCII")
    with pytest.raises(BundleError) as caught:
        Policy({"charset": "ascii"}).check("caf\u00e9 au lait", "message 0 (user)")
    said = str(caught.value)
    assert "ASCII only" in said and "LATIN SMALL LETTER E WITH ACUTE" in said
    assert "character 3" in said and "message 0 (user)" in said
    Policy(None).check("caf\u00e9")  # no policy: any text


def test_a_length_bound_counts_characters() -> None:
    Policy({"max_chars": 5}).check("12345")
    with pytest.raises(BundleError, match="at most 5 characters: the prompt has 6"):
        Policy({"max_chars": 5}).check("123456")


@pytest.mark.parametrize(
    ("data", "said"),
    [
        ([], "non-empty JSON list"),
        ({"role": "user", "content": "hi"}, "non-empty JSON list"),
        ([{"role": "user"}], 'a message is {"role": ..., "content": ...}'),
        ([{"role": "user", "content": "hi", "name": "x"}], "nothing else"),
        ([{"role": "robot", "content": "hi"}], "role must be one of"),
        ([{"role": "user", "content": 3}], "content must be a string"),
        ([{"role": "user", "content": [{"type": "image"}]}], "content must be a string"),
    ],
)
def test_messages_in_the_usual_form_or_a_clear_error(data: Any, said: str) -> None:
    with pytest.raises(BundleError) as caught:
        check_messages(data)
    assert said in str(caught.value)


def test_a_messages_file_that_is_not_json_says_so(tmp_path: Path) -> None:
    bad = tmp_path / "turns.json"
    bad.write_bytes(b"\xff\xfe not json")
    with pytest.raises(BundleError, match="is not UTF-8 JSON"):
        read_messages(bad)
    good = tmp_path / "ok.json"
    good.write_text(
        json.dumps([{"role": "system", "content": "s"}, {"role": "user", "content": "u"}])
    )
    assert [m["role"] for m in read_messages(good)] == ["system", "user"]


@pytest.mark.parametrize(
    ("part", "said"),
    [
        ({"type": "image", "url": "x.png"}, "a part is"),
        ({"type": "text", "text": 3}, "a part is"),
        ({"type": "video"}, "a part is"),
        ("just text", "a part is"),
    ],
)
def test_a_vision_bundles_parts_are_text_and_images_only(part: Any, said: str) -> None:
    turn = [{"role": "user", "content": [{"type": "image"}, part]}]
    with pytest.raises(BundleError, match=r"messages\[0\]\.content\[1\]: " + said):
        check_messages(turn, parts=True)


def test_text_and_image_parts_pass_and_their_text_is_what_the_policy_reads() -> None:
    content = [{"type": "image"}, {"type": "text", "text": "What is it?"}]
    turns = check_messages([{"role": "user", "content": content}], parts=True)
    assert turns == [{"role": "user", "content": content}]
    assert texts(turns[0]["content"]) == ["What is it?"]
    assert texts("plain") == ["plain"]
