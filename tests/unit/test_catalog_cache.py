"""The parse cache (kiln/catalog/cache.py): an unchanged catalog is parsed once, its
problems are the same from the cache, and a bad cache is never trusted."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

import yaml
from conftest import ROOT

from kiln import catalog
from kiln.catalog import cache as parse_cache

BASE: dict[str, Any] = yaml.safe_load((ROOT / "recipes" / "tiny-llama.yaml").read_text())


def write(root: Path) -> dict[str, Path]:
    for folder in ("thresholds", "prompts"):
        shutil.copytree(ROOT / folder, root / folder, dirs_exist_ok=True)
    (root / "recipes").mkdir(parents=True, exist_ok=True)
    (root / "manifests").mkdir(exist_ok=True)
    draft = dict(BASE, execution={"variant": "draft"})  # violates draft-needs-draft-companion
    texts = {
        "good": yaml.safe_dump(BASE, sort_keys=False),
        "child": "schema_version: 1\nextends: good\nbuild:\n  max_seq_len: 12x\n",
        "typo": yaml.safe_dump(BASE, sort_keys=False).replace("max_seq_len", "max_seqlen"),
        "ruled": yaml.safe_dump(draft, sort_keys=False),
        "broken": "schema_version: 1\nmodel: [unclosed\n",
        "dupe": "schema_version: 1\nschema_version: 1\n",
    }
    paths = {}
    for name, text in texts.items():
        paths[name] = root / "recipes" / f"{name}.yaml"
        paths[name].write_text(text)
    return paths


def messages(cat: catalog.Catalog) -> str:
    return "\n".join(p.render() for p in cat.all_problems())


def files(root: Path) -> int:
    return len([*root.glob("*/*.yaml")]) + 1  # recipes, thresholds, prompts; and rules.yaml


def cache_file(root: Path) -> Path:
    (found,) = (root / ".kiln" / "store" / "cache" / "parse").glob("*.json")
    return found


def old(path: Path) -> None:
    """Age a file past the racy window, as any file not written this very second is."""
    t = path.stat().st_mtime - 10
    os.utime(path, (t, t))


def test_an_unchanged_catalog_is_parsed_once_with_the_same_problems(tmp_path: Path) -> None:
    write(tmp_path)
    for f in tmp_path.glob("*/*.yaml"):
        old(f)
    first = catalog.load(catalog.Paths(tmp_path))
    assert first.parsed == files(tmp_path)
    second = catalog.load(catalog.Paths(tmp_path))
    assert second.parsed == 2  # only the two files that do not parse: never cached
    assert messages(second) == messages(first)
    assert sorted(second.recipes) == sorted(first.recipes) == ["good"]
    assert second.recipes["good"] == first.recipes["good"]
    text = messages(second)
    for expected in (
        "recipes/child.yaml:4:16: build -> max_seq_len",  # located through a cached parse
        "recipes/typo.yaml:",
        "rule draft-needs-draft-companion",
        "recipes/broken.yaml:3:1: YAML syntax",
        "duplicate key 'schema_version'",
    ):
        assert expected in text, text
    uncached = catalog.load(catalog.Paths(tmp_path), cache=False)
    assert messages(uncached) == text and uncached.parsed == files(tmp_path)
    assert (tmp_path / ".kiln" / "store" / "cache" / ".gitignore").read_text().endswith("*\n")


def test_an_edited_file_is_parsed_again(tmp_path: Path) -> None:
    paths = write(tmp_path)
    for f in tmp_path.glob("*/*.yaml"):
        old(f)
    catalog.load(catalog.Paths(tmp_path))
    text = paths["good"].read_text().replace("max_seq_len: 256", "max_seq_len: 128")
    paths["good"].write_text(text)
    cat = catalog.load(catalog.Paths(tmp_path))
    assert cat.parsed == 3 and cat.recipes["good"].build.max_seq_len == 128
    # The same size and the same mtime, in the clock tick the entry was cached in:
    # the racy entry is confirmed against the bytes, and the edit is seen.
    stat = paths["good"].stat()
    paths["good"].write_text(text.replace("max_seq_len: 128", "max_seq_len: 192"))
    os.utime(paths["good"], ns=(stat.st_atime_ns, stat.st_mtime_ns))
    cat = catalog.load(catalog.Paths(tmp_path))
    assert cat.recipes["good"].build.max_seq_len == 192


def test_a_file_that_became_a_symlink_is_refused_not_served_from_the_cache(
    tmp_path: Path,
) -> None:
    paths = write(tmp_path)
    catalog.load(catalog.Paths(tmp_path))
    target = tmp_path / "elsewhere.yaml"
    shutil.move(paths["good"], target)
    paths["good"].symlink_to(target)
    cat = catalog.load(catalog.Paths(tmp_path))
    assert "good" not in cat.recipes
    assert "recipes/good.yaml:1: is a symbolic link" in messages(cat)


def test_a_corrupt_or_forged_cache_is_ignored_and_rewritten(tmp_path: Path) -> None:
    write(tmp_path)
    for f in tmp_path.glob("*/*.yaml"):
        old(f)
    expected = messages(catalog.load(catalog.Paths(tmp_path)))
    path = cache_file(tmp_path)
    head, body = path.read_bytes().split(b"\n", 1)

    # A flipped byte in the body: its digest no longer matches, nothing is trusted.
    path.write_bytes(head + b"\n" + body.replace(b"256", b"257", 1))
    cat = catalog.load(catalog.Paths(tmp_path))
    assert cat.parsed == files(tmp_path) and messages(cat) == expected
    assert cat.recipes["good"].build.max_seq_len == 256
    assert catalog.load(catalog.Paths(tmp_path)).parsed == 2  # rewritten, sound again

    # A forged entry with a matching body digest: its text is not the one it was cached
    # with, so that entry (only) is parsed again.
    head, body = cache_file(tmp_path).read_bytes().split(b"\n", 1)
    entries = json.loads(body)
    good = next(k for k in entries if k.endswith("good.yaml"))
    entries[good]["data"]["build"]["max_seq_len"] = 64
    entries[good]["text"] += "# forged\n"
    forged = json.dumps(entries).encode()
    meta = json.loads(head)
    meta["sha256"] = parse_cache.hashlib.sha256(forged).hexdigest()
    cache_file(tmp_path).write_bytes(json.dumps(meta).encode() + b"\n" + forged)
    cat = catalog.load(catalog.Paths(tmp_path))
    assert cat.parsed == 3 and cat.recipes["good"].build.max_seq_len == 256

    for garbage in (b"", b"not json\n{}", b"\x00" * 100):
        cache_file(tmp_path).write_bytes(garbage)
        cat = catalog.load(catalog.Paths(tmp_path))
        assert messages(cat) == expected and cat.parsed == files(tmp_path)


def test_an_unwritable_store_only_costs_the_cache(tmp_path: Path) -> None:
    write(tmp_path)
    (tmp_path / ".kiln").write_text("a file where the store's folder would be")
    cat = catalog.load(catalog.Paths(tmp_path))
    assert sorted(cat.recipes) == ["good"]
    assert catalog.load(catalog.Paths(tmp_path)).parsed == files(tmp_path)
