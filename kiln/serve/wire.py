"""The API's request bodies and the shapes of its answers, after OpenAI's reference
(https://platform.openai.com/docs/api-reference/chat). A body is checked field by
field with pydantic, so a bad one is refused at the field that is wrong
(`ApiError.param`). Fields OpenAI defines that change nothing here (`user`,
`stream_options`, `presence_penalty` at 0, ...) are ignored, as OpenAI's own server
ignores unknown ones; those that would change the answer and are not served
(`logprobs`, `tools`) are refused by name, never silently dropped."""

from __future__ import annotations

import json
import time
import uuid
from typing import Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    ValidationInfo,
    field_validator,
)


class ApiError(Exception):
    """An answer in OpenAI's error shape: {"error": {message, type, param, code}}."""

    def __init__(
        self,
        status: int,
        message: str,
        param: str | None = None,
        code: str | None = None,
        kind: str = "invalid_request_error",
    ) -> None:
        super().__init__(message)
        self.status, self.message, self.param, self.code, self.kind = (
            status,
            message,
            param,
            code,
            kind,
        )

    def body(self) -> dict[str, Any]:
        return {
            "error": {
                "message": self.message,
                "type": self.kind,
                "param": self.param,
                "code": self.code,
            }
        }


class _Body(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True)


class JsonSchema(_Body):
    name: str = Field("response", description="the schema's name (OpenAI requires one)")
    schema_: dict[str, Any] = Field(alias="schema", description="the JSON Schema the answer meets")
    strict: bool | None = Field(None, description="accepted; kiln's grammar is always strict")


class ResponseFormat(_Body):
    type: Literal["text", "json_object", "json_schema"] = Field(
        description="text: free; json_object: any JSON object; json_schema: one that meets it"
    )
    json_schema: JsonSchema | None = Field(None, description="with type json_schema")


class _Sampling(_Body):
    model: str = Field(description="a served recipe's name (GET /v1/models lists them)")
    temperature: float = Field(1.0, ge=0, le=2, description="0: greedy")
    top_p: float = Field(1.0, gt=0, le=1, description="nucleus sampling's mass")
    seed: int | None = Field(None, ge=0, description="the sampler's seed (default: a random one)")
    max_tokens: int | None = Field(None, ge=1, description="new tokens at most")
    stop: str | list[str] | None = Field(None, description="up to 4 texts that end the answer")
    stream: bool = Field(False, description="server-sent events, one chunk per piece of text")
    n: int = Field(1, ge=1, le=8, description="answers per request")

    @field_validator("stop")
    @classmethod
    def _stops(cls, v: str | list[str] | None) -> list[str] | None:
        stops = [v] if isinstance(v, str) else v
        if stops is not None and (len(stops) > 4 or any(not s for s in stops)):
            raise ValueError("stop takes up to 4 non-empty texts")
        return stops

    @property
    def stops(self) -> list[str]:
        return list(self.stop or [])


class Message(_Body):
    role: Literal["system", "user", "assistant", "developer"] = Field(description="who says it")
    content: str | list[dict[str, Any]] = Field(description="text, or a list of text parts")

    def text(self) -> str:
        if isinstance(self.content, str):
            return self.content
        parts = [p.get("text") for p in self.content if p.get("type") == "text"]
        if len(parts) != len(self.content) or not all(isinstance(t, str) for t in parts):
            raise ValueError("only text parts are served")
        return "".join(str(t) for t in parts)


class ChatRequest(_Sampling):
    messages: list[Message] = Field(min_length=1, description="the conversation so far")
    max_completion_tokens: int | None = Field(None, ge=1, description="max_tokens' newer name")
    response_format: ResponseFormat | None = Field(None, description="text or JSON (guided)")
    tools: list[Any] | None = Field(None, max_length=0, description="not served")
    logprobs: bool = Field(False, description="each answer token's log probability")
    top_logprobs: int | None = Field(
        None, ge=0, le=20, description="with logprobs: this many likeliest tokens per position"
    )

    @field_validator("top_logprobs")
    @classmethod
    def _top_needs_logprobs(cls, v: int | None, info: ValidationInfo) -> int | None:
        if v is not None and not info.data.get("logprobs"):
            raise ValueError("set logprobs to true to use it")
        return v

    @property
    def top(self) -> int | None:
        """The likeliest tokens to list per position; None: no logprobs."""
        return (self.top_logprobs or 0) if self.logprobs else None

    def turns(self) -> list[dict[str, str]]:
        # developer is OpenAI's newer name for system
        return [
            {"role": "system" if m.role == "developer" else m.role, "content": m.text()}
            for m in self.messages
        ]

    @property
    def budget(self) -> int | None:
        return self.max_completion_tokens or self.max_tokens


class CompletionRequest(_Sampling):
    prompt: str | list[str] = Field(description="the text to complete (one)")
    echo: bool = Field(False, description="the prompt before the completion")
    logprobs: int | None = Field(
        None, ge=0, le=5, description="each token's log probability, and this many likeliest"
    )

    @property
    def top(self) -> int | None:
        return self.logprobs

    @field_validator("prompt")
    @classmethod
    def _one(cls, v: str | list[str]) -> str | list[str]:
        if isinstance(v, list) and len(v) != 1:
            raise ValueError("one prompt per request")
        return v

    def text(self) -> str:
        return self.prompt if isinstance(self.prompt, str) else self.prompt[0]

    @property
    def budget(self) -> int | None:
        return self.max_tokens


class EmbeddingRequest(_Body):
    model: str = Field(description="a served feature-extraction recipe")
    input: str | list[str] = Field(description="a text or a list of texts")
    encoding_format: Literal["float", "base64"] = Field("float", description="as the client asks")

    def texts(self) -> list[str]:
        return [self.input] if isinstance(self.input, str) else list(self.input)


def parse(kind: type[_Body], raw: bytes) -> Any:
    """The request body as `kind`, or an ApiError at the first field that is wrong."""
    try:
        data = json.loads(raw)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ApiError(400, f"the body is not JSON: {exc}") from None
    if not isinstance(data, dict):
        raise ApiError(400, "the body must be a JSON object")
    try:
        return kind.model_validate(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"]) or None
        message = first["msg"].removeprefix("Value error, ")
        raise ApiError(400, f"{where}: {message}", where, "invalid_value") from None


def ident(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:24]}"


def now() -> int:
    return int(time.time())


def usage(prompt: int, completion: int) -> dict[str, int]:
    return {
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": prompt + completion,
    }
