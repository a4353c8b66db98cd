"""kiln/catalog/indent.py: an indentation mistake is reported at its line, in our words."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import ROOT

from kiln.catalog.indent import misindented
from kiln.catalog.yaml import read_source
from kiln.errors import KilnError

GOOD = (ROOT / "recipes" / "tiny-llama.yaml").read_text()


def error_of(tmp_path: Path, text: str) -> str:
    path = tmp_path / "r.yaml"
    path.write_text(text)
    with pytest.raises(KilnError) as info:
        read_source(path, "recipes/r.yaml")
    return str(info.value)


@pytest.mark.parametrize("spaces", [1, 3, 5])
def test_a_key_indented_off_its_siblings_is_named_with_both_widths(
    tmp_path: Path, spaces: int
) -> None:
    text = GOOD.replace("  max_seq_len: 256", " " * spaces + "max_seq_len: 256")
    line = text.splitlines().index(" " * spaces + "max_seq_len: 256") + 1
    msg = error_of(tmp_path, text)
    assert msg.startswith(f"recipes/r.yaml:{line}:{spaces + 1}: YAML indentation: "), msg
    unit = "space" if spaces == 1 else "spaces"
    assert f"line {line} is indented {spaces} {unit}; its siblings use 2" in msg


def test_a_misindented_list_item_key(tmp_path: Path) -> None:
    text = "schema_version: 1\nrules:\n  - id: a\n    when: {x: 1}\n     then: {y: 2}\n"
    msg = error_of(tmp_path, text)
    assert "line 5 is indented 5 spaces; its siblings use 4" in msg, msg


def test_block_scalars_and_comments_are_not_indentation() -> None:
    text = "a: >-\n    folded text\n      more text\nb:\n  # note\n  c: 1\n"
    assert misindented(text, 10) is None


def test_no_shipped_yaml_file_looks_misindented() -> None:
    files = [*ROOT.glob("recipes/*.yaml"), *ROOT.glob("thresholds/*.yaml")]
    files += [*ROOT.glob("prompts/*.yaml"), *ROOT.glob("catalog/*.yaml")]
    assert len(files) > 90
    for path in files:
        assert misindented(path.read_text(), 10**6) is None, path
