"""The runtime's decoding features on the tiny bundles the session built: guided
decoding (runtime/guided.py) whose output always parses, on every tokenizer family
the catalog ships; the logits processors (runtime/processors.py) against
transformers' classes of the same name; prefix KV reuse and chunked prefill, token
for token against a cold one-shot run; and `doit run`'s variables for them."""

from __future__ import annotations

import json
import re
import shutil
import string
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml
from conftest import ROOT, World, bundle_dir, heavy

import runtime
from runtime import Bundle, Sampler
from runtime.guided import Grammar, GrammarError
from runtime.processors import Decoding

SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "maxLength": 10},
        "age": {"type": "integer", "minimum": 0, "maximum": 120},
        "tags": {"type": "array", "items": {"enum": ["red", "green", "blue"]}, "maxItems": 3},
        "ok": {"type": "boolean"},
    },
    "required": ["name", "age", "tags", "ok"],
    "additionalProperties": False,
}
PROMPTS = ["Hello", "The river runs past the old mill, and the miller", "{"]


@pytest.fixture(scope="module")
def llama(built: World) -> Bundle:
    found = runtime.open(bundle_dir(built, "tiny-llama"))
    assert type(found) is Bundle
    return found


def _generated_json(bundle: Bundle, sampler: Sampler, prompts: list[str]) -> list[Any]:
    import jsonschema

    ids = [bundle.encode(p) for p in prompts]
    out = bundle.generate_with(ids, 96, Decoding(grammar=Grammar.json_schema(SCHEMA)), sampler)
    docs = []
    for tokens in out.tokens:
        assert tokens[-1] in bundle.eos  # it ended where the grammar may end
        doc = json.loads(bundle.decode(tokens))
        jsonschema.validate(doc, SCHEMA)
        docs.append(doc)
    return docs


@heavy
def test_guided_json_always_parses_against_the_schema(llama: Bundle) -> None:
    greedy = _generated_json(llama, Sampler(), PROMPTS)
    sampled = [
        d for seed in range(3) for d in _generated_json(llama, Sampler(1.0, seed=seed), PROMPTS)
    ]
    # random weights left alone write no JSON; the constraint alone makes these parse
    assert not llama.decode(llama.generate([llama.encode(PROMPTS[0])], 24).tokens[0]).startswith(
        "{"
    )
    assert len({json.dumps(d) for d in greedy + sampled}) > 3  # the model still chooses


@heavy
def test_the_guided_feature_runs_a_batch_one_engine_one_prompt_at_a_time(llama: Bundle) -> None:
    """The validation's guided_decoding proof fed two prompts at once, which a batch-1
    engine refused (every GPU latency recipe's manifest said so): it now keeps to the
    bundle's max_batch_size, and proves the same."""
    from builders.causal_lm._features import _guided

    prompts = [llama.encode(p) for p in PROMPTS[:2]]
    whole = _guided(llama, prompts)
    kept = llama.max_batch_size
    llama.max_batch_size = 1
    try:
        one = _guided(llama, prompts)
    finally:
        llama.max_batch_size = kept
    assert whole["proved"] and one["proved"]
    assert one["metrics"]["outputs"] == 2.0 and one["metrics"]["valid"] == 2.0


@heavy
def test_guided_regex_and_lark_grammar(llama: Bundle) -> None:
    ids = [llama.encode(p) for p in PROMPTS]
    pattern = r"[A-Z][a-z]{2,6}-[0-9]{2,4}"
    out = llama.generate_with(ids, 24, Decoding(grammar=Grammar.regex(pattern)), Sampler(0.8))
    assert all(re.fullmatch(pattern, llama.decode(t)) for t in out.tokens)
    lark = 'start: answer ("," answer)*\nanswer: "yes" | "no" | /[0-9]{1,3}/'
    out = llama.generate_with(ids, 24, Decoding(grammar=Grammar.lark(lark)), Sampler(0.8))
    for tokens in out.tokens:
        assert all(re.fullmatch(r"yes|no|[0-9]{1,3}", a) for a in llama.decode(tokens).split(","))


@heavy
def test_guided_refusals_say_what_is_wrong(llama: Bundle) -> None:
    ids = [llama.encode("Hi")]
    for grammar, said in [
        (Grammar.regex("a(b"), "the regex does not compile: .*unclosed group"),
        (Grammar.json_schema('{"type": "frob"}'), "JSON schema does not compile.*frob"),
        (Grammar.lark("start: foo"), 'Lark grammar does not compile.*unknown name: "foo"'),
        # they compile, but nothing matches them (issue 37: an empty output, exit 0)
        (Grammar.json_schema('{"$ref": "#"}'), "JSON schema matches nothing: .*empty language"),
        (Grammar.json_schema({"anyOf": [{"$ref": "#"}]}), "JSON schema matches nothing"),
        (Grammar.regex(r"[^\s\S]"), "the regex matches nothing"),
        (Grammar.lark("start: start"), "the Lark grammar matches nothing"),
    ]:
        with pytest.raises(GrammarError, match=said):
            llama.generate_with(ids, 8, Decoding(grammar=grammar))
    with pytest.raises(GrammarError, match="not JSON"):
        Grammar.json_schema('{"type": ')
    with pytest.raises(runtime.BundleError, match="did not complete its json schema"):
        llama.generate_with(ids, 3, Decoding(grammar=Grammar.json_schema(SCHEMA)))


def _sentencepiece_bpe() -> str:
    """A tokenizer.json of the family Llama 2, Mistral and Gemma ship (transformers'
    conversion of their SentencePiece BPE): spaces as U+2581 by normalizer, byte
    fallback to <0xXX> tokens, ids 0-3 the specials the tiny bundle's config names."""
    from tokenizers import Tokenizer, models, normalizers, trainers

    specials = ["<pad>", "<s>", "</s>", "<unk>"]
    trained = Tokenizer(models.BPE(unk_token="<unk>"))
    trained.normalizer = normalizers.Replace(" ", "\u2581")
    corpus = (ROOT / "tinyhub" / "corpus.txt").read_text().splitlines()
    trained.train_from_iterator(
        corpus, trainers.BpeTrainer(vocab_size=250, special_tokens=specials, show_progress=False)
    )
    data = json.loads(trained.to_str())
    learned = [t for t, _ in sorted(data["model"]["vocab"].items(), key=lambda kv: kv[1])]
    tokens = specials + [f"<0x{b:02X}>" for b in range(256)]
    tokens += [t for t in learned if t not in specials]
    assert len(tokens) <= 512
    data["model"]["vocab"] = {t: i for i, t in enumerate(tokens)}
    data["model"]["byte_fallback"] = True
    data["model"]["fuse_unk"] = True
    data["decoder"] = {
        "type": "Sequence",
        "decoders": [
            {"type": "Replace", "pattern": {"String": "\u2581"}, "content": " "},
            {"type": "ByteFallback"},
            {"type": "Fuse"},
        ],
    }
    return json.dumps(data)


def _sentencepiece_unigram() -> str:
    """The family T5, mBART and other Unigram SentencePiece models ship: a Unigram
    model behind a Metaspace pre-tokenizer and decoder. Its alphabet has JSON's
    punctuation: t5-small's has no "{", so no grammar can make it write an object."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.Unigram())
    tok.pre_tokenizer = pre_tokenizers.Metaspace()
    tok.decoder = decoders.Metaspace()
    corpus = (ROOT / "tinyhub" / "corpus.txt").read_text().splitlines()
    trainer = trainers.UnigramTrainer(
        vocab_size=500,
        special_tokens=["<pad>", "<s>", "</s>", "<unk>"],
        unk_token="<unk>",
        initial_alphabet=sorted(set(string.printable) - set(string.whitespace)),
        show_progress=False,
    )
    tok.train_from_iterator(corpus, trainer)
    assert tok.get_vocab_size() <= 512
    return str(tok.to_str())


@heavy
@pytest.mark.parametrize("family", ["sentencepiece-bpe", "sentencepiece-unigram"])
def test_guided_json_on_sentencepiece_tokenizers(
    llama: Bundle, tmp_path: Path, family: str
) -> None:
    """Every tiny checkpoint ships one byte-level BPE (tinyhub/tokenizer.json); the
    catalog's Gemma, Mistral, T5 and mBART recipes ship SentencePiece ones, which
    this host cannot fetch. The same graph behind a tokenizer of each such family:
    llguidance reads its tokens' bytes (U+2581 spaces, <0xXX> fallback) itself."""
    folder = tmp_path / "bundle"
    shutil.copytree(llama.path, folder)
    made = _sentencepiece_bpe() if family == "sentencepiece-bpe" else _sentencepiece_unigram()
    (folder / "tokenizer.json").write_text(made)
    swapped = runtime.open(folder, expect=Bundle)
    if family == "sentencepiece-bpe":  # the family's marks: fallback bytes and U+2581
        assert swapped.tokenizer.encode("\u00e9").tokens == ["<0xC3>", "<0xA9>"]
    assert any("\u2581" in t for t in swapped.tokenizer.encode("a b").tokens)
    docs = _generated_json(swapped, Sampler(), PROMPTS)
    docs += _generated_json(swapped, Sampler(1.0, seed=1), PROMPTS)
    assert len({json.dumps(d) for d in docs}) > 2


@pytest.fixture(scope="module")
def qwen3(built: World) -> Bundle:
    return runtime.open(bundle_dir(built, "tiny-qwen3"), expect=Bundle)


def _reference(name: str, ids: np.ndarray, prompt_len: int, eos: list[int]) -> Any:
    from transformers.generation import logits_process as lp

    return {
        "repetition_penalty": lp.RepetitionPenaltyLogitsProcessor(1.7),
        "bad_words": lp.NoBadWordsLogitsProcessor(
            [[int(ids[-1])], [int(ids[-2]), 7], [int(ids[-1]), 9], [5, 6, 8]] + [[e] for e in eos],
            eos,
        ),
        "min_length": lp.MinLengthLogitsProcessor(len(ids) + 1, eos),
        "min_new_tokens": lp.MinNewTokensLengthLogitsProcessor(prompt_len, 3, eos),
        "banned_ids": lp.SuppressTokensLogitsProcessor([3, 11, 400]),
    }[name]


def _ours(name: str, ids: np.ndarray, prompt_len: int, eos: list[int]) -> Decoding:
    return {
        "repetition_penalty": Decoding(repetition_penalty=1.7),
        "bad_words": Decoding(
            bad_words=[[int(ids[-1])], [int(ids[-2]), 7], [int(ids[-1]), 9], [5, 6, 8]]
            + [[e] for e in eos]
        ),
        "min_length": Decoding(min_length=len(ids) + 1),
        "min_new_tokens": Decoding(min_new_tokens=3),
        "banned_ids": Decoding(banned_ids=[3, 11, 400]),
    }[name]


@heavy
@pytest.mark.parametrize(
    "name", ["repetition_penalty", "bad_words", "min_length", "min_new_tokens", "banned_ids"]
)
def test_processors_equal_transformers_on_the_same_logits(qwen3: Bundle, name: str) -> None:
    """Each option's processor, applied to the bundle's own next-token logits after a
    prompt, gives transformers' processor's scores bit for bit (-inf where it bans)."""
    import torch

    ids = np.asarray(qwen3.encode(PROMPTS[1]), np.int64)
    eos = sorted(qwen3.eos)
    prompt_len = len(ids) - 2  # the last two tokens count as generated ones
    logits = qwen3.logits(ids.tolist())[-1].astype(np.float32)
    want = _reference(name, ids, prompt_len, eos)(
        torch.tensor(ids[None]), torch.tensor(logits[None])
    )
    chain = _ours(name, ids, prompt_len, eos).chain(prompt_len, set(eos), logits.shape[-1])
    got = logits.copy()
    for process in chain:
        got = process(ids, got)
    assert np.array_equal(got, want[0].numpy())
    assert not np.array_equal(got, logits)  # each one changed something here


@heavy
def test_steered_generation_equals_transformers_generate(qwen3: Bundle, built: World) -> None:
    """Greedy decoding with all the options on equals transformers' generate with the
    same ones, each prompt alone and in one left-padded batch."""
    import torch
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(
        built.checkpoint("tiny-qwen3"), dtype=torch.float32
    ).eval()
    plain = qwen3.generate([qwen3.encode(PROMPTS[0])], 16).tokens[0]
    bad = [[plain[1]], [plain[3], plain[4]]]  # words the plain output writes
    decoding = Decoding(repetition_penalty=1.3, bad_words=bad, min_new_tokens=12, banned_ids=[7])
    ids = [qwen3.encode(p) for p in PROMPTS]
    batched = qwen3.generate_with(ids, 16, decoding).tokens
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # tiny steps: one thread is faster, and much on a busy host
    for prompt, got in zip(ids, batched, strict=True):
        with torch.no_grad():
            out = model.generate(
                torch.tensor([prompt]),
                max_new_tokens=16,
                do_sample=False,
                repetition_penalty=1.3,
                bad_words_ids=bad,
                min_new_tokens=12,
                suppress_tokens=[7],
                eos_token_id=2,
                pad_token_id=0,
            )
        want = out[0, len(prompt) :].tolist()
        if 2 in want:
            want = want[: want.index(2) + 1]
        assert got == qwen3.generate_with([prompt], 16, decoding).tokens[0] == want
    torch.set_num_threads(threads)
    assert batched[0] != plain


@heavy
def test_a_user_hook_sees_its_row_alone_and_steers_it(llama: Bundle) -> None:
    """The hook gets each row's own ids (prompt then output, no padding) and its
    logits, and what it returns is what the sampler draws from."""
    seen: list[list[int]] = []

    def only_seven_then_eos(token_ids: np.ndarray, logits: np.ndarray) -> np.ndarray:
        seen.append(token_ids.tolist())
        out = np.full_like(logits, -np.inf)
        out[7 if len(seen) < 5 else 2] = 0.0
        return out

    ids = [llama.encode("Hi"), llama.encode(PROMPTS[1])]
    out = llama.generate_with(ids, 10, Decoding(processors=[only_seven_then_eos]))
    assert seen[0] == ids[0] and seen[1] == ids[1] and seen[2] == ids[0] + [7]
    assert out.tokens == [[7, 7, 2], [7, 7, 2]]


@heavy
def test_doit_run_guides_and_refuses_cleanly(built: World, tmp_path: Path) -> None:
    schema = tmp_path / "schema.json"
    schema.write_text(json.dumps(SCHEMA))
    ok = built.doit(
        "run", "recipe=tiny-llama", "prompt=Data:", f"json_schema={schema}", "max_new_tokens=96"
    )
    assert ok.returncode == 0, ok.stderr
    line = ok.stdout.splitlines()[-1]  # the prompt, then the output
    assert line.startswith("Data:{") and json.loads(line.removeprefix("Data:"))
    bad = built.doit("run", "recipe=tiny-llama", "prompt=Hi", "regex=a(b")
    assert bad.returncode != 0 and "Traceback" not in bad.stdout + bad.stderr
    assert "command line: regex: the regex does not compile" in bad.stdout + bad.stderr
    empty = tmp_path / "self.json"  # a schema no JSON value matches
    empty.write_text('{"$ref": "#"}')
    nothing = built.doit("run", "recipe=tiny-llama", "prompt=Data:", f"json_schema={empty}")
    assert nothing.returncode == 1 and "Traceback" not in nothing.stdout + nothing.stderr
    assert "command line: json_schema: the JSON schema matches nothing" in nothing.stderr
    assert "Data:" not in nothing.stdout  # refused, not run: no (empty) output printed
    beams = built.doit("run", "recipe=tiny-llama", "prompt=Hi", "num_beams=2")
    assert beams.returncode != 0 and "Traceback" not in beams.stdout + beams.stderr
    assert "num_beams applies to encoder-decoder recipes" in beams.stderr and not beams.stdout


def test_run_variables_refuse_bad_grammar_files(tmp_path: Path) -> None:
    from kiln.commands.run import _grammar
    from kiln.errors import KilnError

    broken = tmp_path / "broken.json"
    broken.write_text('{"type": ')
    listed = tmp_path / "list.json"
    listed.write_text("[1, 2]")
    for args, said in [
        ((str(broken), None, None), "broken.json:1:10: invalid JSON"),
        ((str(listed), None, None), "a JSON schema is an object, not a list"),
        (
            (str(tmp_path / "missing.json"), None, None),
            "json_schema: .*missing.json does not exist",
        ),
        ((None, None, str(tmp_path / "missing.lark")), "grammar: .*missing.lark does not exist"),
        ((str(listed), "a+", None), "json_schema and regex both constrain the output"),
    ]:
        with pytest.raises(KilnError, match=said):
            _grammar(*args)
    assert _grammar(None, "a+", None) == Grammar.regex("a+")


class Recording:
    """The bundle's engine, passed through, with the input_ids width of each run."""

    def __init__(self, engine: Any) -> None:
        self.engine, self.widths = engine, []

    def run(self, names: list[str], feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
        self.widths.append(int(feeds["input_ids"].shape[1]))
        out: list[np.ndarray] = self.engine.run(names, feeds)
        return out


@heavy
@pytest.mark.parametrize(
    ("precision", "words"),
    [
        ({"weights": "fp8", "kv_cache": "auto", "compute": "fp32"}, "fp8 precision quantizes"),
        ({"weights": "int8-sq", "kv_cache": "auto", "compute": "fp32"}, "quantizes activations"),
        ({"weights": "fp32", "kv_cache": "fp8", "compute": "fp32"}, "KV cache is fp8"),
        ({"weights": "int4-awq", "kv_cache": "auto", "compute": "fp32"}, "at run time"),
    ],
)
def test_the_runtime_refuses_a_prefix_cache_where_reuse_is_not_exact(
    llama: Bundle, tmp_path: Path, precision: dict[str, str], words: str
) -> None:
    """Bundle.enable_prefix_cache reads the rule from bundle.json itself: a bundle whose
    precision quantizes activations or the KV cache is refused with the reason, and
    keeps generating without a cache; so is a weight-only onnxruntime bundle (MatMulNBits
    quantizes activations at run time), while the same precision on another backend is
    served; an inductor bundle, whose cache stays in its engine's buffers, is refused."""
    from runtime.causal_lm import prefix_reuse_refusal
    from runtime.format import BundleError

    folder = tmp_path / "bundle"
    shutil.copytree(llama.path, folder)
    meta = json.loads((folder / "bundle.json").read_text())
    assert prefix_reuse_refusal(meta) is None  # tiny-llama itself: fp32
    aoti = {**meta["engines"]["main"], "backend": "aoti"}
    on_aoti = {**meta, "engines": {**meta["engines"], "main": aoti}}
    assert prefix_reuse_refusal({**on_aoti, "precision": {"weights": "int4-awq"}}) is None
    inductor = {**meta["engines"]["main"], "backend": "inductor"}
    on_inductor = {**meta, "engines": {**meta["engines"], "main": inductor}}
    assert "static buffers" in (prefix_reuse_refusal(on_inductor) or "")
    meta["precision"] = precision
    (folder / "bundle.json").write_text(json.dumps(meta))
    quantized = runtime.open(folder, expect=Bundle)
    with pytest.raises(BundleError, match=f"prefix cache refused: .*{words}"):
        quantized.enable_prefix_cache()
    assert quantized.prefix_cache is None
    assert quantized.generate([[1, 5, 6]], 3).tokens == llama.generate([[1, 5, 6]], 3).tokens


def _prompts(n: int, prefix: int, suffix: int, seed: int = 0) -> list[list[int]]:
    rng = np.random.default_rng(seed)
    shared = rng.integers(3, 500, prefix).tolist()
    return [shared + rng.integers(3, 500, suffix).tolist() for _ in range(n)]


@heavy
@pytest.mark.parametrize("which", ["llama", "qwen3"])
def test_prefix_reuse_prefills_only_the_rest_and_changes_no_token(
    which: str, request: pytest.FixtureRequest
) -> None:
    bundle: Bundle = request.getfixturevalue(which)
    prompts = _prompts(3, 120, 12)
    cold = [bundle.generate([p], 20).tokens[0] for p in prompts]
    recording = Recording(bundle.session)
    bundle.session, engine = recording, bundle.session  # type: ignore[assignment]
    try:
        bundle.enable_prefix_cache(entries=3)
        warm = []
        for p in prompts:
            recording.widths.clear()
            warm.append(bundle.generate([p], 20).tokens[0])
            first = recording.widths[0]
            assert (bundle.last_reused, first) in [(0, len(p)), (120, len(p) - 120)]
        assert warm == cold and bundle.last_reused == 120
        # a follow-up turn: the earlier prompt, its answer, more: only the new part runs
        follow = prompts[0] + cold[0] + [5, 6, 7]
        recording.widths.clear()
        got = bundle.generate([follow], 12).tokens[0]
        assert bundle.last_reused == len(prompts[0]) + len(cold[0]) - 1 == len(follow) - 4
        assert recording.widths[0] == 4
        bundle.prefix_cache = None
        assert bundle.generate([follow], 12).tokens[0] == got
    finally:
        bundle.session, bundle.prefix_cache = engine, None


@heavy
@pytest.mark.parametrize("which", ["llama", "qwen3"])
def test_chunked_prefill_gives_the_one_shot_tokens(
    which: str, request: pytest.FixtureRequest
) -> None:
    bundle: Bundle = request.getfixturevalue(which)
    prompts = _prompts(3, 0, 150, seed=1)
    batch = [prompts[0][:40], prompts[1], prompts[2][:97]]  # left padding inside chunks
    one_shot = [bundle.generate([p], 16).tokens[0] for p in prompts], bundle.generate(batch, 16)
    recording = Recording(bundle.session)
    bundle.session, engine = recording, bundle.session  # type: ignore[assignment]
    try:
        for chunk in (16, 64):
            bundle.prefill_chunk_len = chunk
            recording.widths.clear()
            alone = [bundle.generate([p], 16).tokens[0] for p in prompts]
            chunks = -(-150 // chunk)
            assert recording.widths[:chunks] == [chunk] * (chunks - 1) + [
                150 - chunk * (chunks - 1)
            ]
            assert alone == one_shot[0]
            assert bundle.generate(batch, 16).tokens == one_shot[1].tokens
    finally:
        bundle.session, bundle.prefill_chunk_len = engine, 0


FEATURES = {"logits_processors", "guided_decoding", "prefix_reuse", "chunked_prefill"}
# (tiny-llama and tiny-qwen3 have no sliding-window layers: their validations record
# no sliding_window feature; tests/builds/test_breadth.py checks the windowed ones.)


@heavy
@pytest.mark.parametrize("name", ["tiny-llama", "tiny-qwen3"])
def test_validation_records_the_features_it_proved(built: World, name: str) -> None:
    """Each ordinary causal-LM validation runs the four features on its bundle and the
    manifest's evidence says what each compared and that it held."""
    evidence = built.manifest(name)["evidence"][-1]
    features = evidence["features"]
    assert set(features) == FEATURES
    assert all(f["proved"] and f["check"] for f in features.values()), features
    assert "byte-level BPE tokenizer" in features["guided_decoding"]["check"]
    assert features["prefix_reuse"]["metrics"]["reused_tokens"] > 0
    assert features["chunked_prefill"]["metrics"]["chunk"] == 8  # the validation's own chunk


@heavy
def test_a_recipe_prefill_chunk_len_reaches_bundle_json_and_validation(
    built: World, tmp_path: Path
) -> None:
    """build.prefill_chunk_len on onnxruntime: bundle.json's limits carry it, the runtime
    feeds prompts in such chunks, and validation proves it at that length. The recipe
    shares tiny-llama's engine chain: only its bundle and validate steps run."""
    from conftest import make_world

    world = World(make_world(tmp_path, built.hub, ()).root, built.hub, built.store)
    data = yaml.safe_load((ROOT / "recipes" / "tiny-llama.yaml").read_text())
    data["build"]["prefill_chunk_len"] = 16
    world.write_recipe("tiny-llama-chunked", data)
    out = world.doit("build", check=True).stdout
    ran = [line.split()[1] for line in out.splitlines() if line.startswith(".  ")]
    assert ran == ["bundle", "validate", "manifest"], out  # the engine chain was up to date
    bundle = runtime.open(bundle_dir(world, "tiny-llama-chunked"), expect=Bundle)
    assert bundle.meta["limits"]["prefill_chunk_len"] == 16 == bundle.prefill_chunk_len
    chunked = world.manifest("tiny-llama-chunked")["evidence"][-1]["features"]["chunked_prefill"]
    assert chunked["proved"] and chunked["metrics"]["chunk"] == 16
    assert "build.prefill_chunk_len" in chunked["check"]
