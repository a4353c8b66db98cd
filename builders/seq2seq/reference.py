"""reference (text2text-generation, automatic-speech-recognition): transformers fp32
eager greedy `generate`.

Each input alone: a prompt through transformers' own tokenizer, or a shipped audio
clip (builders/data/audio/) through the checkpoint's own feature extractor
(WhisperFeatureExtractor). Generation semantics are the runtime's: start at
config.decoder_start_token_id (T5: 0; FIELD_NOTES), stop at EOS, and no processor
that the runtime does not apply: forced BOS/EOS, n-gram blocking, repetition penalty
and minimum length are switched off explicitly, since a real checkpoint's
generation_config may set them (FIELD_NOTES: a processor difference is a comparison
of different things); for Whisper a fresh GenerationConfig also leaves out its
suppress lists, language/task prompt tokens and timestamps. Teacher-forced decoder
logits of start token plus continuation are kept for the logit metrics, and a
speech reference keeps its input features, which validate compares with the
runtime's numpy log-mel. The first inputs are also decoded by beam search (4 beams,
transformers' default rules), which validate's beam_search feature compares with.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict, Field

from builders.seq2seq import SPEECH, TASK_PATTERN

if TYPE_CHECKING:
    from kiln.store.api import Request, Writer


class Options(BaseModel):
    model_config = ConfigDict(extra="forbid")
    prompts: list[str] = Field([], description="Prompts to run (text2text-generation).")
    audio: list[str] = Field(
        [], description="Shipped clips to transcribe (builders/data/audio/NAME.wav; speech)."
    )
    max_new_tokens: int = Field(ge=1, description="Greedy tokens per prompt.")
    dtype: str = Field(pattern="^float32$", description="Reference dtype; always fp32.")
    task: str = Field(pattern=TASK_PATTERN, description="The recipe's task.")


Item = tuple[dict[str, Any], dict[str, Any]]
BEAMS = 4  # beam search's width in the reference's beam outputs
BEAM_INPUTS = 2  # on this many of the inputs


def _inputs(opts: Options, checkpoint: Any) -> tuple[list[Item], int | None]:
    """(model inputs, record) per prompt or clip, and the padding id."""
    import torch
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(checkpoint)
    if opts.task == SPEECH:
        from builders.seq2seq.speech import features

        feats = features(checkpoint, opts.audio)
        clips = zip(opts.audio, feats, strict=True)
        return [({"input_features": f}, {"audio": c}) for c, f in clips], tokenizer.pad_token_id
    out = []
    for prompt in opts.prompts:
        ids = tokenizer(prompt, add_special_tokens=True)["input_ids"]
        out.append(({"input_ids": torch.tensor([ids])}, {"prompt": prompt, "prompt_ids": ids}))
    return out, tokenizer.pad_token_id


def _config(model: Any, opts: Options, eos_ids: list[int], pad: int | None) -> Any:
    from transformers import GenerationConfig

    return GenerationConfig(
        do_sample=False,
        num_beams=1,
        max_new_tokens=opts.max_new_tokens,
        eos_token_id=eos_ids,
        pad_token_id=pad if pad is not None else eos_ids[0],
        decoder_start_token_id=model.config.decoder_start_token_id,
        forced_bos_token_id=None,
        forced_eos_token_id=None,
        no_repeat_ngram_size=0,
        repetition_penalty=1.0,
        min_length=0,
    )


def build(request: Request, writer: Writer) -> None:
    import numpy as np
    import torch

    from builders.seq2seq.export import load_seq2seq

    opts = Options.model_validate(request.options)
    checkpoint = request.inputs["checkpoint"] / "checkpoint"
    items, pad = _inputs(opts, checkpoint)
    model = load_seq2seq(checkpoint, opts.task)
    eos = model.generation_config.eos_token_id
    eos_ids = [eos] if isinstance(eos, int) else list(eos or [])
    start = model.config.decoder_start_token_id
    config = _config(model, opts, eos_ids, pad)
    records, logits, features = [], {}, {}
    for i, (kwargs, record) in request.progress(enumerate(items), len(items), "fp32 reference"):
        with torch.no_grad():
            if opts.task == SPEECH:  # Whisper's generate returns the new tokens only
                new = model.generate(**kwargs, generation_config=config)[0].tolist()
                features[f"p{i}"] = kwargs["input_features"][0].numpy()
            else:  # generate's output starts with the start token
                ids = kwargs["input_ids"]
                mask = torch.ones_like(ids)
                new = model.generate(ids, attention_mask=mask, generation_config=config)[0, 1:]
                new = new.tolist()
            if any(t in eos_ids for t in new):
                new = new[: next(j for j, t in enumerate(new) if t in eos_ids) + 1]
            target = torch.tensor([[start, *new]])
            logits[f"p{i}"] = model(**kwargs, decoder_input_ids=target).logits[0].numpy()
        records.append({**record, "tokens": new})
    beams = _beams(model, items[:BEAM_INPUTS], config, eos_ids)
    np.savez(writer.path("logits.npz"), **{k: v.astype(np.float32) for k, v in logits.items()})
    if features:
        np.savez(writer.path("features.npz"), **features)
    writer.write_json(
        "reference.json",
        {
            "engine": "transformers",
            "dtype": "float32",
            "attn_implementation": "eager",
            "eos": eos_ids,
            "decoder_start_token_id": start,
            "records": records,
            "beams": beams,
        },
    )


def _beams(model: Any, items: list[Item], config: Any, eos_ids: list[int]) -> dict[str, Any]:
    """transformers' beam search on the first inputs, for validate's beam_search check
    (runtime/beams.py): the greedy config with BEAMS beams and its default rules."""
    import copy

    import torch

    beam = copy.deepcopy(config)
    beam.num_beams, beam.length_penalty, beam.early_stopping = BEAMS, 1.0, False
    tokens = []
    for kwargs, _ in items:
        with torch.no_grad():
            if "input_features" in kwargs:
                new = model.generate(**kwargs, generation_config=beam)[0].tolist()
            else:
                ids = kwargs["input_ids"]
                mask = torch.ones_like(ids)
                new = model.generate(ids, attention_mask=mask, generation_config=beam)[0, 1:]
                new = new.tolist()
        if any(t in eos_ids for t in new):
            new = new[: next(j for j, t in enumerate(new) if t in eos_ids) + 1]
        tokens.append(new)
    return {"num_beams": BEAMS, "length_penalty": 1.0, "early_stopping": False, "tokens": tokens}
