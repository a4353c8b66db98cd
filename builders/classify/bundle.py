"""bundle (text-classification): the engine, the tokenizer and bundle.json with the
labels (builders/common/encoder.py). runtime/classify.py loads it."""

from __future__ import annotations

from typing import TYPE_CHECKING

from pydantic import BaseModel, ConfigDict, Field

from builders.common import encoder

if TYPE_CHECKING:
    from kiln.store.api import Request, Writer


class Options(BaseModel):
    model_config = ConfigDict(extra="forbid")
    variant: str = Field(pattern="^ordinary$", description="Execution variant.")
    precision: dict[str, str] = Field(description="Recipe precision, recorded for readers.")
    task: str = Field(pattern="^text-classification$", description="The recipe's task.")


def build(request: Request, writer: Writer) -> None:
    opts = Options.model_validate(request.options)
    encoder.bundle(request, writer, opts, ("labels",))
