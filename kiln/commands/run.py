"""`doit run recipe=NAME prompt=...`: the recipe's bundle, built first if needed, run
once. `runtime.open` picks the runner from bundle.json; this module only says what
each kind of runner prints. The runtime is imported inside `generate`: the core
never imports it at module level."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

from kiln.commands import variables
from kiln.commands.build import ensure_bundle
from kiln.commands.variables import WHERE
from kiln.commands.workspace import catalog, selected, store
from kiln.errors import KilnError, Location
from kiln.store import unsupported

VLM = "image-text-to-text"


def generate(
    recipe: str | None,
    prompt: str | None,
    audio: str | None,
    max_new_tokens: int | None,
    temperature: float,
    top_k: int,
    top_p: float,
    seed: int,
    stats: bool,
    chat: bool | None = None,
    system: str | None = None,
    messages: str | None = None,
    thinking: str | None = None,
    json_schema: str | None = None,
    regex: str | None = None,
    grammar: str | None = None,
    repetition_penalty: float = 1.0,
    banned_ids: str | None = None,
    bad_words: str | None = None,
    min_new_tokens: int = 0,
    min_length: int = 0,
    num_beams: int = 1,
    image: str | None = None,
    video: str | None = None,
    fps: float | None = None,
) -> None:
    import runtime
    from runtime import BundleError, Sampler
    from runtime.guided import GrammarError

    steer = {
        "json_schema": json_schema,
        "regex": regex,
        "grammar": grammar,
        "repetition_penalty": repetition_penalty if repetition_penalty != 1.0 else None,
        "banned_ids": banned_ids,
        "bad_words": bad_words,
        "min_new_tokens": min_new_tokens or None,
        "min_length": min_length or None,
    }
    steered = [k for k, v in steer.items() if v is not None]
    # Every file and text variable is read and refused here, before a bundle is built.
    prompt, system = (
        variables.capped_text("prompt", prompt),
        variables.capped_text("system", system),
    )
    constraint = _grammar(json_schema, regex, grammar)
    earlier = _messages(messages) if messages else []
    clips = _clips(audio) if audio else []
    pictures = _pictures(image) if image else []
    videos = _videos(video) if video else []
    if fps is not None and not videos:
        raise KilnError.one("fps applies to a video's frames", variables.at("fps"), "drop fps")
    if fps is not None and fps <= 0:
        raise KilnError.one(
            f"fps={fps:g}: a video's frames are taken a number of times a second above 0",
            variables.at("fps"),
            "e.g. fps=2, the rate the frames were extracted at",
        )

    names = selected(recipe) if recipe else []
    if len(names) != 1:
        raise KilnError.one("name one recipe", None, 'doit run recipe=tiny-llama prompt="Hello"')
    name = names[0]
    task = catalog().recipe(name).task
    asked = chat
    if chat is None:  # a chat model chats unless told otherwise (its recipe says it has one)
        chat = task == VLM or (task == "text-generation" and catalog().recipe(name).validation.chat)
    for media, kind in ((pictures, "image"), (videos, "video")):
        if media and task != VLM:
            raise KilnError.one(
                f"{kind} applies to image-text-to-text recipes; {name} is a {task} recipe",
                variables.at(kind),
                f"drop {kind}, or name a vision-language recipe",
            )
    if task == VLM and not chat:
        raise KilnError.one(
            "a vision-language recipe answers chat turns only (its images are placed by the "
            "chat template)",
            variables.at("chat"),
            "drop chat=0",
        )
    if task == "automatic-speech-recognition":
        if not audio:  # a speech recipe reads audio (_transcribe)
            raise KilnError.one(
                "no audio", None, f"doit run recipe={name} audio=builders/data/audio"
            )
        prompt = ""
    elif not chat and (system or messages or thinking):
        given = {"system": system, "messages": messages, "thinking": thinking}
        named = " and ".join(n for n, v in given.items() if v)
        fix = "drop chat=0" if asked is False else "add chat=1"
        raise KilnError.one(f"{named} apply to a chat only", None, fix)
    elif not prompt and not chat:
        raise KilnError.one("no prompt", None, f'doit run recipe={name} prompt="Hello"')
    p = ensure_bundle(name)
    _warn_unvalidated(name, p)
    try:
        sampler = Sampler(temperature=temperature, top_k=top_k, top_p=top_p, seed=seed)
        artifact = store().get(p.step("bundle").key).path
        found = unsupported.marker_of(artifact)
        if found is not None:
            raise KilnError.one(f"unsupported here: {found['reason']}", None)
        bundle = runtime.open(artifact)
        if num_beams > 1 and not isinstance(bundle, runtime.Seq2Seq):
            raise KilnError.one(
                f"num_beams applies to encoder-decoder recipes; {name} is a {task} recipe",
                Location(WHERE, key_path=("num_beams",)),
                "drop num_beams, or name a text2text or speech recipe",
            )
        if steered and type(bundle) not in (runtime.Bundle, runtime.VisionBundle):
            raise KilnError.one(
                f"{', '.join(steered)} steer ordinary text-generation decoding; {name} is a "
                f"{task} recipe run by {type(bundle).__name__}",
                Location(WHERE, key_path=(steered[0],)),
                "name an ordinary text-generation recipe",
            )
        if not isinstance(bundle, runtime.Bundle):  # other tasks' runners answer in their terms
            print(_run_task(bundle, prompt or "", clips, max_new_tokens or PLAIN, num_beams))
            return
        decoding = _decoding(bundle, constraint, repetition_penalty, banned_ids, bad_words)
        decoding = replace(decoding, min_new_tokens=min_new_tokens, min_length=min_length)
        if chat:
            think = None if thinking is None else thinking == "1"
            turns = _conversation(system, earlier, prompt, len(pictures), len(videos))
            features = _features(bundle, turns, pictures, videos, fps)
            _chat(bundle, turns, think, max_new_tokens, sampler, stats, decoding, features)
            return
        budget = max_new_tokens or PLAIN
        out = _generate(bundle, [bundle.encode(prompt or "")], budget, decoding, sampler)
        _said_if_cut(bundle, out.tokens[0], budget, max_new_tokens)
    except GrammarError as exc:  # llguidance refused it: located at the variable that gave it
        variable = {"json_schema": "json_schema", "regex": "regex", "lark": "grammar"}
        where = Location(WHERE, key_path=(variable[constraint.kind],)) if constraint else None
        raise KilnError.one(str(exc), where) from None
    except (BundleError, ValueError) as exc:
        raise KilnError.one(str(exc), None) from None
    print((prompt or "") + bundle.decode(out.tokens[0]))
    if stats:
        print(_stats_line(bundle, out.tokens[0]))
        print(_timing_line(bundle, out))
        print(_evidence_line(name))


# The default budgets: a plain completion's, and a chat answer's ceiling (it ends at its
# end of turn, and within the bundle's max_seq_len).
PLAIN, CHAT = 32, 256


def _said_if_cut(bundle: Any, tokens: list[int], budget: int, asked: int | None) -> None:
    """Say on stderr when the budget, not an end of sequence or turn, ended the text."""
    import sys

    if len(tokens) >= budget and (not tokens or tokens[-1] not in bundle.eos):
        hint = "raise max_new_tokens" if asked else f"max_new_tokens={budget * 2} gives more"
        print(f"note: stopped after {budget} new tokens, before the end: {hint}", file=sys.stderr)


def _warn_unvalidated(name: str, p: Any) -> None:
    """Say on stderr, before generating, when the bundle's build has not passed here."""
    import sys

    from kiln import hostinfo
    from kiln.evidence import manifest
    from kiln.paths import Paths

    try:
        record = manifest.passed_here(manifest.known(Paths.from_env(), name), p)
    except KilnError:
        record = None
    if record is None or record.verdict != "pass":
        label = hostinfo.host_class(hostinfo.host()).label
        said = f"its verdict is {record.verdict}" if record else "no validation of this build"
        print(
            f"note: {name}'s bundle is not validated on this host class ({label}): {said}; "
            f"doit build recipe={name} validates it",
            file=sys.stderr,
        )


def _grammar(json_schema: str | None, regex: str | None, grammar: str | None) -> Any:
    """The runtime's Grammar for `json_schema=FILE`, `regex=TEXT` or `grammar=FILE` (a
    Lark grammar), at most one of them; a file that is missing or not JSON is refused
    at its variable. Whether llguidance compiles it is known once the tokenizer is."""
    from runtime.guided import Grammar

    given = [
        n for n, v in (("json_schema", json_schema), ("regex", regex), ("grammar", grammar)) if v
    ]
    if len(given) > 1:
        raise KilnError.one(
            f"{' and '.join(given)} both constrain the output",
            Location(WHERE, key_path=(given[1],)),
            "give one of json_schema, regex, grammar",
        )
    if regex:
        return Grammar.regex(regex)
    if grammar:
        return Grammar.lark(variables.read_text("grammar", grammar))
    if json_schema:
        schema = variables.read_json("json_schema", json_schema)
        try:
            return Grammar.json_schema(json.dumps(schema))
        except ValueError as exc:
            raise KilnError.one(f"{json_schema}: {exc}", variables.at("json_schema")) from None
    return None


def _decoding(
    bundle: Any,
    grammar: Any,
    repetition_penalty: float,
    banned_ids: str | None,
    bad_words: str | None,
) -> Any:
    """The runtime's Decoding for the steering variables: `banned_ids=5,17` are token
    ids, `bad_words=foo,bar` words the bundle's tokenizer turns into token sequences."""
    from runtime.processors import Decoding

    ids: list[int] = []
    for part in (banned_ids or "").split(","):
        if not part.strip():
            continue
        try:
            ids.append(int(part))
        except ValueError:
            raise KilnError.one(
                f"{part.strip()!r} is not a token id",
                Location(WHERE, key_path=("banned_ids",)),
                "banned_ids=ID,ID,...",
            ) from None
    words = [w for w in (bad_words or "").split(",") if w]
    sequences = [list(bundle.tokenizer.encode(w, add_special_tokens=False).ids) for w in words]
    return Decoding(
        repetition_penalty=repetition_penalty,
        banned_ids=ids,
        bad_words=[s for s in sequences if s],
        grammar=grammar,
    )


def _messages(messages: str) -> list[dict[str, Any]]:
    """The turns of a `messages=FILE.json` chat file (text and image parts: which
    bundle takes image parts is known once it is open)."""
    from runtime import BundleError
    from runtime.chat import check_messages

    data = variables.read_json("messages", messages)
    try:
        return check_messages(data, messages, parts=True, videos=True)
    except BundleError as exc:
        raise KilnError.one(str(exc), variables.at("messages")) from None


def _conversation(
    system: str | None,
    earlier: list[dict[str, Any]],
    prompt: str | None,
    images: int = 0,
    videos: int = 0,
) -> list[dict[str, Any]]:
    """The turns so far: the system message, a messages file's turns, then the prompt.
    `images` (`videos`) given beside a messages file without image (video) parts, or a
    prompt, go with the first user turn that follows, as image parts, then video parts,
    before its text."""
    turns: list[dict[str, Any]] = []
    if system:
        turns.append({"role": "system", "content": system})
    turns += earlier
    if prompt:
        turns.append({"role": "user", "content": prompt})
    for kind, count in (("video", videos), ("image", images)):  # images end up first
        if count and not any(_image_parts(t, kind) for t in turns):
            user = next((t for t in turns if t["role"] == "user"), None)
            if user is not None:
                text = user["content"]
                parts = text if isinstance(text, list) else [{"type": "text", "text": text}]
                user["content"] = [{"type": kind} for _ in range(count)] + parts
    return turns


def _image_parts(turn: dict[str, Any], kind: str = "image") -> int:
    content = turn["content"]
    return sum(p["type"] == kind for p in content) if isinstance(content, list) else 0


def _pictures(image: str) -> list[Path]:
    """The files of `image=FILE,FILE,...`, each resolved and refused like any file
    variable (outside the repository, a FIFO, a folder, past MAX_IMAGE_BYTES)."""
    parts = [p.strip() for p in image.split(",")]
    if not all(parts):
        raise KilnError.one(f"image={image!r} names an empty file", variables.at("image"))
    return [variables.file_of("image", p, limit=variables.MAX_IMAGE_BYTES) for p in parts]


def _videos(video: str) -> list[list[Path]]:
    """The frames of `video=FRAME,FRAME,...` (videos separated by ';'), each resolved
    and refused like an image file; a video container, or a video of one frame, is
    refused here, before a bundle is built (runtime/images.py refuses the rest: a file
    that is no image, frames of mixed sizes)."""
    from kiln.commands.variables import at

    videos = []
    for clip in video.split(";"):
        parts = [p.strip() for p in clip.split(",")]
        if not all(parts):
            raise KilnError.one(f"video={video!r} names an empty file", at("video"))
        for part in parts:
            if Path(part).suffix.lower() in CONTAINERS:
                raise KilnError.one(
                    f"{part} is a video container; kiln decodes no video containers",
                    at("video"),
                    "give the frames as image files: ffmpeg -i clip.mp4 -vf fps=2 "
                    "frame_%03d.png, then video=frame_001.png,frame_002.png,...",
                )
        if len(parts) < 2:
            raise KilnError.one(
                f"a video needs at least 2 frames; video= gives {len(parts)}",
                at("video"),
                "give 2 or more frames, or the picture as image=FILE",
            )
        videos.append(
            [variables.file_of("video", p, limit=variables.MAX_IMAGE_BYTES) for p in parts]
        )
    return videos


# Video containers (runtime/images.py CONTAINERS, repeated: kiln imports no runtime here)
CONTAINERS = (".mp4", ".mov", ".mkv", ".webm", ".avi", ".m4v", ".mpg", ".mpeg", ".flv", ".wmv")


def _features(
    bundle: Any,
    turns: list[dict[str, Any]],
    pictures: list[Path],
    clips: list[list[Path]] | None = None,
    fps: float | None = None,
) -> Any:
    """A vision-language bundle's image (and video) features for the conversation's
    image parts and then its video parts, their frames taken `fps` a second (None for
    other bundles); as many images and videos as parts, or a located error."""
    from runtime.vlm import VisionBundle

    if not isinstance(bundle, VisionBundle):
        return None
    clips = clips or []
    for kind, given, what in (("image", pictures, "files"), ("video", clips, "videos")):
        parts = sum(_image_parts(t, kind) for t in turns)
        if parts != len(given):
            raise KilnError.one(
                f"the conversation has {parts} {kind} parts and {kind}= gives {len(given)} {what}",
                variables.at(kind),
                f"give one {'file' if kind == 'image' else 'video'} per {kind} part, in order",
            )
    if not clips:
        return bundle.image_features(pictures)
    if bundle.video_token is None:
        raise KilnError.one(
            "video applies to recipes whose processor takes videos (Qwen2-VL, Qwen2.5-VL, "
            f"Qwen3-VL, InternVL); this bundle ({type(bundle).__name__}) takes none",
            variables.at("video"),
            "drop video, or name tiny-qwen2.5-vl, tiny-qwen3-vl or tiny-internvl",
        )
    return _in_part_order(bundle, turns, pictures, clips, fps)


def _in_part_order(
    bundle: Any,
    turns: list[dict[str, Any]],
    pictures: list[Path],
    clips: list[list[Path]],
    fps: float | None = None,
) -> Any:
    """The features of the pictures and videos in the order of the conversation's parts
    (each kind in its own order), as encode_chat takes them."""
    from runtime.crops_vlm import CropsVisionBundle
    from runtime.crops_vlm import join as crops_join
    from runtime.grid_vlm import join as grid_join

    kinds = [
        p["type"]
        for t in turns
        if isinstance(t["content"], list)
        for p in t["content"]
        if p["type"] in ("image", "video")
    ]
    images = iter(bundle.image_features([p]) for p in pictures)
    videos = iter(bundle.video_features([c], fps) for c in clips)
    join = crops_join if isinstance(bundle, CropsVisionBundle) else grid_join
    return join(*(next(images) if k == "image" else next(videos) for k in kinds))


def _chat(
    bundle: Any,
    turns: list[dict[str, str]],
    thinking: bool | None,
    max_new_tokens: int | None,
    sampler: Any,
    stats: bool,
    decoding: Any = None,
    features: Any = None,
) -> None:
    """Answer the conversation's last user turn; with none, read user turns from
    standard input, one a line, until its end (or a line `/exit`), keeping the history.
    `features`: a vision-language bundle's image features, for every answer."""
    import sys

    def answer() -> None:
        # the features tell a bundle whose pictures are each their own size (Idefics3's
        # crops, Qwen2.5-VL's grids) how many tokens each image part takes
        pictured = {} if features is None else {"images": features}
        ids = bundle.encode_chat(turns, thinking, **pictured)
        budget = max_new_tokens or max(1, min(CHAT, bundle.max_seq_len - len(ids)))
        out = _generate(bundle, [ids], budget, decoding, sampler, features)
        _said_if_cut(bundle, out.tokens[0], budget, max_new_tokens)
        reply = bundle.decode(out.tokens[0])
        turns.append({"role": "assistant", "content": reply})
        print(reply, flush=True)
        if stats:
            print(_stats_line(bundle, out.tokens[0]), flush=True)
            print(_timing_line(bundle, out), flush=True)

    if turns and turns[-1]["role"] == "user":
        answer()
        return
    import runtime

    if type(bundle) is runtime.Bundle and reuses_exactly(bundle.meta):
        bundle.enable_prefix_cache(entries=1)  # each turn prefills only what is new
    interactive = sys.stdin.isatty()
    if interactive:
        print("chat: a line is a turn; /exit or the end of input (Ctrl-D) ends", file=sys.stderr)
    while True:
        if interactive:
            print("> ", end="", file=sys.stderr, flush=True)
        line = sys.stdin.readline()
        if not line or line.strip() == "/exit":
            return
        if line.strip():
            turns.append({"role": "user", "content": line.rstrip("\n")})
            answer()


def _stats_line(bundle: Any, tokens: list[int]) -> str:
    """Acceptance diagnostics of the last generation (`doit run ... stats=1`)."""
    stats = getattr(bundle, "last_stats", None)
    if stats is None:
        return f"stats: {bundle.meta['variant']}: {len(tokens)} tokens, one per target forward"
    d = stats.as_dict()
    return (
        f"stats: {bundle.meta['variant']}: {len(tokens)} tokens; drafted {d['drafted']:.0f}, "
        f"accepted {d['accepted']:.0f} (acceptance rate {d['acceptance_rate']:.3f}); "
        f"{d['verify_forwards']:.0f} verify forwards, "
        f"{d['tokens_per_forward']:.3f} committed tokens per target forward"
    )


def _generate(
    bundle: Any,
    prompts: list[list[int]],
    max_new_tokens: int,
    decoding: Any,
    sampler: Any,
    features: Any = None,
) -> Any:
    """The bundle's own generate where nothing steers the logits (an inductor bundle's
    greedy loop runs on the device; a drafting bundle speculates); generate_with, the
    loop that applies `decoding` to each step's logits on the host, where something
    does; generate_rows with the image `features` of a vision-language prompt."""
    if features is not None:
        from runtime import Row

        rows = [Row(p, max_new_tokens, decoding, sampler, features) for p in prompts]
        return bundle.generate_rows(rows)
    if decoding is None or not decoding.steers:
        return bundle.generate(prompts, max_new_tokens, sampler)
    return bundle.generate_with(prompts, max_new_tokens, decoding, sampler)


def _timing_line(bundle: Any, out: Any) -> str:
    """Speed of the generation, by the runtime's own clock (Generation.seconds and
    first_token_seconds): tokens/s overall, time to first token (prompt processing plus
    the first choice), and the decode rate after it. The bundle was loaded (and, on the
    inductor backend, compiled) before, so neither figure counts loading."""
    engine = bundle.meta["engines"]["main"]
    where = f"{engine['backend']} on {engine['provider']}"
    n, seconds, first = len(out.tokens[0]), out.seconds, out.first_token_seconds
    line = f"timing: {where}: {n} tokens in {seconds * 1e3:.1f} ms"
    if seconds > 0:
        line += f", {n / seconds:.1f} tokens/s"
    if first > 0:
        line += f"; time to first token {first * 1e3:.1f} ms"
        if n > 1 and seconds > first:
            line += f"; then {(n - 1) / (seconds - first):.1f} tokens/s"
    else:
        line += "; this runner does not time the first token"
    stats = getattr(bundle, "last_stats", None)  # a drafting bundle's last generation
    if stats is not None and stats.verify_forwards:
        got = stats.as_dict()
        line += (
            f"; drafts accepted {got['acceptance_rate']:.2f}, "
            f"{got['tokens_per_forward']:.2f} tokens per verify forward"
        )
    return line


def _clips(audio: str) -> list[Path]:
    """`audio=FILE.wav`, or every .wav of a folder (`audio=builders/data/audio`: the
    shipped clips), each a regular file inside the repository or the temp folder."""
    path = variables.file_of("audio", audio, folder=True)
    clips = variables.files_in("audio", path, "*.wav") if path.is_dir() else [path]
    if not clips:
        raise KilnError.one(f"{audio} holds no .wav file", variables.at("audio"), "audio=FILE.wav")
    return clips


def _transcribe(model: Any, clips: list[Path], max_new_tokens: int, num_beams: int = 1) -> str:
    """A speech bundle's transcript of each clip."""
    lines = []
    for p in clips:
        out = model.generate([model.read(p)], max_new_tokens, num_beams=num_beams)
        lines.append(f"{p.name}: {model.decode(out.tokens[0])!r}")
    return "\n".join(lines)


def _run_task(
    model: Any, prompt: str, clips: list[Path], max_new_tokens: int, num_beams: int = 1
) -> str:
    """A runner of another task (runtime.open chose it): its label, its embedding's
    size, norm and first components, or its greedy output."""
    import runtime

    if isinstance(model, runtime.Speech):
        return _transcribe(model, clips, max_new_tokens, num_beams)
    if isinstance(model, runtime.Classifier):
        label, prob = model.classify([prompt])[0]
        return f"{label} ({prob:.4f})"
    if isinstance(model, runtime.Embedder):
        vector = model.embed([prompt])[0]
        head = ", ".join(f"{v:.6f}" for v in vector[:8])
        norm = float((vector**2).sum()) ** 0.5
        return f"embedding [{vector.size}] (L2 norm {norm:.6f}): [{head}, ...]"
    tokens = model.generate([model.encode(prompt)], max_new_tokens, num_beams=num_beams)
    return str(model.decode(tokens.tokens[0]))


def reuses_exactly(meta: dict[str, Any]) -> bool:
    """Whether resuming a bundle's KV cache gives a cold run's tokens: not where
    activations or the KV cache are quantized, with static scales or at run time (the
    SmolLM2 fp8 and int8-wo records' prefix_reuse checks generated other tokens than
    their cold runs), nor on the inductor backend, whose cache stays in its engine's
    buffers. The rule is the runtime's own (Bundle.enable_prefix_cache refuses the
    others)."""
    from runtime.causal_lm import prefix_reuse_refusal

    return prefix_reuse_refusal(meta) is None


def _evidence_line(name: str) -> str:
    """What this checkout knows of the recipe's validation on this host class: the
    deciding record, published or kept in this store (`doit build` records a person's
    build there unless publish=1), with its decode rate."""
    from kiln import hostinfo
    from kiln.evidence import manifest
    from kiln.paths import Paths

    paths = Paths.from_env()
    try:
        published = manifest.read(paths.manifest(name))
        found = manifest.joined(published, paths, name)
    except KilnError:
        return f"evidence: {paths.rel(paths.manifest(name))} is unreadable (doit check says why)"
    here = hostinfo.host_class(hostinfo.host())
    mine = [e for e in (found.evidence if found else []) if hostinfo.host_class(e.host) == here]
    chosen = manifest.best(mine)
    if chosen is None:
        return f"evidence: none on this host class ({here.label}); doit build recipe={name}"
    where = (
        paths.rel(paths.manifest(name))
        if published is not None and chosen in published.evidence
        else f"this store only ({paths.rel(paths.local_evidence(name))})"
    )
    rate = chosen.metrics.get("decode_tokens_per_s")
    speed = f", decode {rate:.1f} tokens/s" if rate is not None else ""
    return (
        f"evidence: {chosen.verdict} on {here.label} ({manifest.scope(chosen)}, "
        f"{chosen.date[:10]}{speed}): {where}"
    )
