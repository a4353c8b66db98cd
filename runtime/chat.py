"""Chat: a conversation rendered through the checkpoint's own chat template, and the
prompt policy a bundle enforces before anything is tokenized.

The template is the checkpoint's (the bundle carries it as chat_template.jinja, with
the special tokens it refers to), and it is rendered by transformers' own renderer,
`render_jinja_template`, the code `apply_chat_template` runs, so a bundle's prompt is
token for token what transformers would feed the model. transformers is imported
only here, and only when a conversation is rendered (no torch is loaded).

    messages = [{"role": "system", "content": "..."}, {"role": "user", "content": "..."}]
"""

from __future__ import annotations

import unicodedata
from pathlib import Path
from typing import Any

from runtime.format import BundleError, read_json

ROLES = ("system", "user", "assistant", "tool")


def read_messages(path: Path, parts: bool = False) -> list[dict[str, Any]]:
    """A conversation file: a JSON list of {"role": ..., "content": ...} objects."""
    return check_messages(read_json(path), str(path), parts)


def check_messages(
    data: Any, where: str = "messages", parts: bool = False, videos: bool = False
) -> list[dict[str, Any]]:
    """Messages in the usual role/content form, or a BundleError saying which is not.
    With `parts` (a vision-language bundle), a content may also be a list of parts,
    {"type": "text", "text": ...} and {"type": "image"} (the images are given apart,
    in the order of their parts), as transformers' processors take them; with `videos`
    (a bundle that takes videos, runtime/grid_vlm.py), {"type": "video"} too, its
    frames given apart the same way."""
    if not isinstance(data, list) or not data:
        raise BundleError(f"{where}: expected a non-empty JSON list of messages")
    out = []
    for i, m in enumerate(data):
        if not isinstance(m, dict) or set(m) != {"role", "content"}:
            raise BundleError(
                f'{where}[{i}]: a message is {{"role": ..., "content": ...}}, nothing else'
            )
        content = m["content"]
        if parts and isinstance(content, list):
            content = [
                _part(p, f"{where}[{i}].content[{j}]", videos) for j, p in enumerate(content)
            ]
        elif not isinstance(content, str):
            kind = "a string or a list of text and image parts" if parts else "a string"
            raise BundleError(f"{where}[{i}]: content must be {kind}")
        if m["role"] not in ROLES:
            raise BundleError(f"{where}[{i}]: role must be one of {', '.join(ROLES)}")
        out.append({"role": m["role"], "content": content})
    return out


def _part(part: Any, where: str, videos: bool = False) -> dict[str, str]:
    if isinstance(part, dict) and part == {"type": "image"}:
        return {"type": "image"}
    if videos and isinstance(part, dict) and part == {"type": "video"}:
        return {"type": "video"}
    text = isinstance(part, dict) and set(part) == {"type", "text"} and part["type"] == "text"
    if text and isinstance(part["text"], str):
        return {"type": "text", "text": part["text"]}
    kinds = '{"type": "image"} or {"type": "video"}' if videos else '{"type": "image"}'
    raise BundleError(f'{where}: a part is {{"type": "text", "text": ...}}, {kinds}')


def texts(content: str | list[dict[str, str]]) -> list[str]:
    """The text of a message's content, as the prompt policy checks it."""
    if isinstance(content, str):
        return [content]
    return [p["text"] for p in content if p["type"] == "text"]


class Policy:
    """What prompts a bundle accepts (bundle.json "prompt_policy"): a charset ('any' or
    'ascii') and a length in characters. Checked before tokenization."""

    def __init__(self, spec: dict[str, Any] | None) -> None:
        spec = spec or {}
        self.charset = str(spec.get("charset", "any"))
        self.max_chars = spec.get("max_chars")

    def check(self, text: str, what: str = "prompt") -> None:
        if self.charset == "ascii":
            bad = next((i for i, c in enumerate(text) if ord(c) > 127), None)
            if bad is not None:
                c = text[bad]
                name = unicodedata.name(c, f"U+{ord(c):04X}")
                raise BundleError(
                    f"this bundle's prompt policy accepts ASCII only: the {what} has {c!r} "
                    f"({name}) at character {bad}; rewrite it in ASCII"
                )
        if self.max_chars is not None and len(text) > int(self.max_chars):
            raise BundleError(
                f"this bundle's prompt policy accepts at most {self.max_chars} characters: "
                f"the {what} has {len(text)}"
            )


class Template:
    """The bundle's chat template (bundle.json "chat") and the special tokens it uses."""

    def __init__(self, path: Path, spec: dict[str, Any]) -> None:
        self.source = (path / spec["template"]).read_text(encoding="utf-8")
        self.special: dict[str, str] = dict(spec.get("special_tokens", {}))
        self.thinking = bool(spec.get("thinking", False))

    def render(self, messages: list[dict[str, Any]], thinking: bool | None = None) -> str:
        """The conversation as the model reads it, with the assistant's turn opened."""
        from transformers.utils.chat_template_utils import render_jinja_template

        extra: dict[str, Any] = {}
        if thinking is not None:
            if not self.thinking:
                raise BundleError(
                    "this bundle's chat template has no thinking switch (enable_thinking); "
                    "leave thinking= out"
                )
            extra["enable_thinking"] = thinking
        try:
            rendered = render_jinja_template(
                conversations=[messages],
                chat_template=self.source,
                add_generation_prompt=True,
                **self.special,
                **extra,
            )
        except Exception as exc:  # the template's own raise_exception, or a jinja error
            raise BundleError(f"the chat template refused the conversation: {exc}") from None
        text = rendered[0] if isinstance(rendered, tuple) else rendered
        return str(text[0] if isinstance(text, list) else text)
