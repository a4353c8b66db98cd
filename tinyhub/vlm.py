"""Tiny vision-language checkpoints: a real VLM config with tiny text and vision
sub-configs, seeded weights like every tiny checkpoint, and the files a real VLM
checkpoint ships besides (image processor settings, processor settings, a chat
template with image parts, the tokenizer with the image tokens added).

We shrink the sub-configs and keep the real processor, as TRL's tiny VLMs do
(shared/reference/vlm_tp_facts.md). The text decoders use the tiny common sizes
(hidden 64, 2 layers, 4 heads, 2 KV heads, head_dim 16). The vision towers have 2
layers of hidden 32, and their images are small enough that one image is a handful
of tokens:

  kiln-tiny/llava       LlavaForConditionalGeneration: CLIP tower on 32 x 32 images,
                        8 x 8 patches, so 16 image tokens (the CLS state is dropped,
                        vision_feature_select_strategy "default", as in llava-1.5)
  kiln-tiny/qwen2.5-vl  Qwen2_5_VLForConditionalGeneration: 14 x 14 patches merged
                        2 x 2; an image is resized to 56 x 56 to 112 x 112 pixels'
                        area, so it is 4 to 16 tokens. mrope_section [2, 3, 3] sums to
                        head_dim / 2 in the ratios of the real [16, 24, 24]. Layer 0
                        attends within windows of one merged patch, layer 1
                        (fullatt_block_indexes) globally
  kiln-tiny/qwen2-vl    Qwen2VLForConditionalGeneration: Qwen2.5-VL's processor, tokens and
                        mrope_section, and Qwen2-VL's tower: every layer attends over
                        the whole picture (no windows), LayerNorm blocks, a fc1/fc2 MLP
  kiln-tiny/qwen3-vl    Qwen3VLForConditionalGeneration: Qwen3-VL-Instruct's processor (16 x
                        16 patches merged 2 x 2, an image resized within 64 x 64 to 128 x
                        128 pixels' area: 4 to 16 tokens) and chat template; a 3-block
                        tower with learned position embeddings on a 4 x 4 grid (bilinearly
                        resampled to each picture's grid) whose blocks 0 and 1 feed
                        DeepStack mergers, added to the hidden states at the image tokens
                        after decoder layers 0 and 1 of 3; interleaved mrope_section
                        [4, 2, 2] (the real [24, 20, 20] at head_dim 16) and q/k norms
  kiln-tiny/gemma3-vlm  Gemma3ForConditionalGeneration: SigLIP tower on 32 x 32 images,
                        8 x 8 patches average-pooled 2 x 2 into 4 image tokens between
                        <start_of_image> and <end_of_image>; the text decoder is the
                        tiny gemma3's (a sliding layer of 8 tokens, then a global one)
  kiln-tiny/idefics3    Idefics3ForConditionalGeneration (SmolVLM's): an Idefics3 (SigLIP)
                        tower on 32 x 32 crops, 8 x 8 patches pixel-shuffled 2 x 2 into 4
                        image tokens a crop; an image is resized to a longest edge of 64
                        (SmolVLM-Instruct's 4 x 384 at the tiny crop size) and split into
                        crops of 32 plus a global view, so a square image is 2 x 2 crops +
                        1, 20 image tokens, wrapped in <fake_token_around_image>,
                        <row_i_col_j> and <global-img> as Idefics3Processor writes them
  kiln-tiny/internvl    InternVLForConditionalGeneration (InternVL3-1B-hf's): an InternViT
                        tower on 32 x 32 tiles, 8 x 8 patches pixel-shuffled 2 x 2 into 4
                        image tokens a tile, and a Qwen2 decoder; GotOcr2ImageProcessor
                        tiles a picture into the grid of at most 6 tiles (InternVL3's 12,
                        halved as the tiny Idefics3 halves SmolVLM's edge) whose aspect
                        ratio is nearest its own, plus a thumbnail: the circle is 2 rows
                        of 3 tiles + 1, 28 image tokens between <img> and </img>

The added tokens get the ids after the shipped tokenizer's 512, in the order listed,
and vocab_size counts them. The chat templates are the real checkpoints' (llava-hf's
llava-1.5, Qwen2.5-VL-Instruct's, gemma-3-it's), written as chat_template.jinja,
which both the processor and the tokenizer of transformers 5 read.
"""

from __future__ import annotations

import json
from typing import Any

BASE_VOCAB = 512  # tinyhub/tokenizer.json's size; added tokens come after it
CLIP_MEAN = [0.48145466, 0.4578275, 0.40821073]
CLIP_STD = [0.26862954, 0.26130258, 0.27577711]

LLAVA_IMAGE = "<image>"
LLAVA_PATCHES = (32 // 8) ** 2  # image_size // patch_size, squared

QWEN_TOKENS = [
    "<|im_start|>",
    "<|im_end|>",
    "<|vision_start|>",
    "<|vision_end|>",
    "<|image_pad|>",
    "<|video_pad|>",
]
QWEN_ID = {token: BASE_VOCAB + i for i, token in enumerate(QWEN_TOKENS)}

GEMMA_TOKENS = [
    "<start_of_turn>",
    "<end_of_turn>",
    "<start_of_image>",
    "<end_of_image>",
    "<image_soft_token>",
]
GEMMA_ID = {token: BASE_VOCAB + i for i, token in enumerate(GEMMA_TOKENS)}

# SmolVLM-Instruct's added tokens: its BOS, the image markers, the end of a turn, and the
# 6 x 6 crop positions Idefics3Processor names (<row_1_col_1> .. <row_6_col_6>).
IDEFICS3_TOKENS = [
    "<|im_start|>",
    "<fake_token_around_image>",
    "<image>",
    "<end_of_utterance>",
    "<global-img>",
    *(f"<row_{r}_col_{c}>" for r in range(1, 7) for c in range(1, 7)),
]
IDEFICS3_ID = {token: BASE_VOCAB + i for i, token in enumerate(IDEFICS3_TOKENS)}

# InternVL3-1B-hf's turn markers (Qwen2.5's) and the image tokens its processor reads off
# the tokenizer (extra_special_tokens): a picture is <img>, <IMG_CONTEXT> per feature
# row, </img>.
INTERNVL_TOKENS = ["<|im_start|>", "<|im_end|>", "<img>", "</img>", "<IMG_CONTEXT>", "<video>"]
INTERNVL_ID = {token: BASE_VOCAB + i for i, token in enumerate(INTERNVL_TOKENS)}

# llava-hf/llava-1.5-7b-hf's chat_template.json: images first, then text, per turn.
LLAVA_TEMPLATE = (
    "{% for message in messages %}"
    "{% if message['role'] != 'system' %}{{ message['role'].upper() + ': '}}{% endif %}"
    "{% for content in message['content'] | selectattr('type', 'equalto', 'image') %}"
    "{{ '<image>\n' }}{% endfor %}"
    "{% if message['role'] != 'assistant' %}"
    "{% for content in message['content'] | selectattr('type', 'equalto', 'text') %}"
    "{{ content['text'] + ' '}}{% endfor %}"
    "{% else %}"
    "{% for content in message['content'] | selectattr('type', 'equalto', 'text') %}"
    "{% generation %}{{ content['text'] + ' '}}{% endgeneration %}{% endfor %}"
    "{% endif %}{% endfor %}"
    "{% if add_generation_prompt %}{{ 'ASSISTANT:' }}{% endif %}"
)

# Qwen/Qwen2.5-VL-7B-Instruct's chat_template.json.
QWEN_TEMPLATE = (
    "{% set image_count = namespace(value=0) %}{% set video_count = namespace(value=0) %}"
    "{% for message in messages %}{% if loop.first and message['role'] != 'system' %}"
    "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n{% endif %}"
    "<|im_start|>{{ message['role'] }}\n"
    "{% if message['content'] is string %}{{ message['content'] }}<|im_end|>\n"
    "{% else %}{% for content in message['content'] %}"
    "{% if content['type'] == 'image' or 'image' in content or 'image_url' in content %}"
    "{% set image_count.value = image_count.value + 1 %}"
    "{% if add_vision_id %}Picture {{ image_count.value }}: {% endif %}"
    "<|vision_start|><|image_pad|><|vision_end|>"
    "{% elif content['type'] == 'video' or 'video' in content %}"
    "{% set video_count.value = video_count.value + 1 %}"
    "{% if add_vision_id %}Video {{ video_count.value }}: {% endif %}"
    "<|vision_start|><|video_pad|><|vision_end|>"
    "{% elif 'text' in content %}{{ content['text'] }}{% endif %}{% endfor %}<|im_end|>\n"
    "{% endif %}{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)

# Qwen/Qwen3-VL-2B-Instruct's chat_template.json (no default system turn, tools and
# tool responses, which may hold pictures too).
QWEN3_TEMPLATE = (
    r"""{%- if tools %}
    {{- '<|im_start|>system\n' }}
    {%- if messages[0].role == 'system' %}
        {%- if messages[0].content is string %}
            {{- messages[0].content }}
        {%- else %}
            {%- for content in messages[0].content %}
                {%- if 'text' in content %}
                    {{- content.text }}
                {%- endif %}
            {%- endfor %}
        {%- endif %}
        {{- '\n\n' }}
    {%- endif %}
    {{- "# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"""
    r"""You are provided with function signatures within <tools></tools> XML tags:\n<tools>" }}
    {%- for tool in tools %}
        {{- "\n" }}
        {{- tool | tojson }}
    {%- endfor %}
    {{- "\n</tools>\n\nFor each function call, return a json object with function name and """
    r"""arguments within <tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": """
    r"""<function-name>, \"arguments\": <args-json-object>}\n</tool_call><|im_end|>\n" }}
{%- else %}
    {%- if messages[0].role == 'system' %}
        {{- '<|im_start|>system\n' }}
        {%- if messages[0].content is string %}
            {{- messages[0].content }}
        {%- else %}
            {%- for content in messages[0].content %}
                {%- if 'text' in content %}
                    {{- content.text }}
                {%- endif %}
            {%- endfor %}
        {%- endif %}
        {{- '<|im_end|>\n' }}
    {%- endif %}
{%- endif %}
{%- set image_count = namespace(value=0) %}
{%- set video_count = namespace(value=0) %}
{%- for message in messages %}
    {%- if message.role == "user" %}
        {{- '<|im_start|>' + message.role + '\n' }}
        {%- if message.content is string %}
            {{- message.content }}
        {%- else %}
            {%- for content in message.content %}
                {%- if content.type == 'image' or 'image' in content or 'image_url' in content %}
                    {%- set image_count.value = image_count.value + 1 %}
                    {%- if add_vision_id %}Picture {{ image_count.value }}: {% endif -%}
                    <|vision_start|><|image_pad|><|vision_end|>
                {%- elif content.type == 'video' or 'video' in content %}
                    {%- set video_count.value = video_count.value + 1 %}
                    {%- if add_vision_id %}Video {{ video_count.value }}: {% endif -%}
                    <|vision_start|><|video_pad|><|vision_end|>
                {%- elif 'text' in content %}
                    {{- content.text }}
                {%- endif %}
            {%- endfor %}
        {%- endif %}
        {{- '<|im_end|>\n' }}
    {%- elif message.role == "assistant" %}
        {{- '<|im_start|>' + message.role + '\n' }}
        {%- if message.content is string %}
            {{- message.content }}
        {%- else %}
            {%- for content_item in message.content %}
                {%- if 'text' in content_item %}
                    {{- content_item.text }}
                {%- endif %}
            {%- endfor %}
        {%- endif %}
        {%- if message.tool_calls %}
            {%- for tool_call in message.tool_calls %}
                {%- if (loop.first and message.content) or (not loop.first) %}
                    {{- '\n' }}
                {%- endif %}
                {%- if tool_call.function %}
                    {%- set tool_call = tool_call.function %}
                {%- endif %}
                {{- '<tool_call>\n{"name": "' }}
                {{- tool_call.name }}
                {{- '", "arguments": ' }}
                {%- if tool_call.arguments is string %}
                    {{- tool_call.arguments }}
                {%- else %}
                    {{- tool_call.arguments | tojson }}
                {%- endif %}
                {{- '}\n</tool_call>' }}
            {%- endfor %}
        {%- endif %}
        {{- '<|im_end|>\n' }}
    {%- elif message.role == "tool" %}
        {%- if loop.first or (messages[loop.index0 - 1].role != "tool") %}
            {{- '<|im_start|>user' }}
        {%- endif %}
        {{- '\n<tool_response>\n' }}
        {%- if message.content is string %}
            {{- message.content }}
        {%- else %}
            {%- for content in message.content %}
                {%- if content.type == 'image' or 'image' in content or 'image_url' in content %}
                    {%- set image_count.value = image_count.value + 1 %}
                    {%- if add_vision_id %}Picture {{ image_count.value }}: {% endif -%}
                    <|vision_start|><|image_pad|><|vision_end|>
                {%- elif content.type == 'video' or 'video' in content %}
                    {%- set video_count.value = video_count.value + 1 %}
                    {%- if add_vision_id %}Video {{ video_count.value }}: {% endif -%}
                    <|vision_start|><|video_pad|><|vision_end|>
                {%- elif 'text' in content %}
                    {{- content.text }}
                {%- endif %}
            {%- endfor %}
        {%- endif %}
        {{- '\n</tool_response>' }}
        {%- if loop.last or (messages[loop.index0 + 1].role != "tool") %}
            {{- '<|im_end|>\n' }}
        {%- endif %}
    {%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<|im_start|>assistant\n' }}
{%- endif %}
"""
)

# google/gemma-3-4b-it's chat template: a system turn folds into the first user turn.
GEMMA_TEMPLATE = (
    "{{ bos_token }}"
    "{%- if messages[0]['role'] == 'system' -%}"
    "{%- if messages[0]['content'] is string -%}"
    "{%- set first_user_prefix = messages[0]['content'] + '\n\n' -%}"
    "{%- else -%}"
    "{%- set first_user_prefix = messages[0]['content'][0]['text'] + '\n\n' -%}"
    "{%- endif -%}"
    "{%- set loop_messages = messages[1:] -%}"
    "{%- else -%}"
    "{%- set first_user_prefix = '' -%}"
    "{%- set loop_messages = messages -%}"
    "{%- endif -%}"
    "{%- for message in loop_messages -%}"
    "{%- if (message['role'] == 'user') != (loop.index0 % 2 == 0) -%}"
    "{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}"
    "{%- endif -%}"
    "{%- if (message['role'] == 'assistant') -%}{%- set role = 'model' -%}"
    "{%- else -%}{%- set role = message['role'] -%}{%- endif -%}"
    "{{ '<start_of_turn>' + role + '\n' + (first_user_prefix if loop.first else '') }}"
    "{%- if message['content'] is string -%}{{ message['content'] | trim }}"
    "{%- elif message['content'] is iterable -%}"
    "{%- for item in message['content'] -%}"
    "{%- if item['type'] == 'image' -%}{{ '<start_of_image>' }}"
    "{%- elif item['type'] == 'text' -%}{{ item['text'] | trim }}"
    "{%- endif -%}"
    "{%- endfor -%}"
    "{%- else -%}{{ raise_exception('Invalid content type') }}"
    "{%- endif -%}"
    "{{ '<end_of_turn>\n' }}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{ '<start_of_turn>model\n' }}{%- endif -%}"
)

# HuggingFaceTB/SmolVLM-Instruct's chat_template.json.
IDEFICS3_TEMPLATE = (
    "<|im_start|>{% for message in messages %}{{message['role'] | capitalize}}"
    "{% if message['content'][0]['type'] == 'image' %}{{':'}}{% else %}{{': '}}{% endif %}"
    "{% for line in message['content'] %}{% if line['type'] == 'text' %}{{line['text']}}"
    "{% elif line['type'] == 'image' %}{{ '<image>' }}{% endif %}{% endfor %}"
    "<end_of_utterance>\n{% endfor %}"
    "{% if add_generation_prompt %}{{ 'Assistant:' }}{% endif %}"
)

# OpenGVLab/InternVL3-1B-hf's chat_template.json: each image part is <IMG_CONTEXT> and a
# newline, which InternVLProcessor expands.
INTERNVL_TEMPLATE = (
    "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\n'}}"
    "{% if message['content'] is string %}{{ message['content'] }}{% else %}"
    "{% for content in message['content'] %}"
    "{% if content['type'] == 'image' %}{{ '<IMG_CONTEXT>\n' }}"
    "{% elif content['type'] == 'video' %}{{ '<video>\n' }}"
    "{% elif content['type'] == 'text' %}{{ content['text'] }}{% endif %}"
    "{% endfor %}{% endif %}{{'<|im_end|>\n'}}{% endfor %}"
    "{% if add_generation_prompt %}{{'<|im_start|>assistant\n' }}{% endif %}"
)


# The tiny CLIP and SigLIP towers' sizes: 4 x 4 patches of a 32-pixel image.
TOWER = {
    "hidden_size": 32,
    "intermediate_size": 64,
    "num_hidden_layers": 2,
    "num_attention_heads": 2,
    "image_size": 32,
    "patch_size": 8,
}


def vlm_specs(base: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """config.json of each tiny VLM; `base` is the tiny text models' common config."""
    ids = {k: base[k] for k in ("bos_token_id", "eos_token_id", "pad_token_id")}
    text = {k: v for k, v in base.items() if k != "torch_dtype"}
    return {
        "kiln-tiny/llava": {
            "architectures": ["LlavaForConditionalGeneration"],
            "model_type": "llava",
            "text_config": {
                **text,
                "model_type": "llama",
                "vocab_size": BASE_VOCAB + 1,
                "rope_theta": 10000.0,
            },
            "vision_config": {
                "model_type": "clip_vision_model",
                **TOWER,
                "projection_dim": 32,
                "hidden_act": "quick_gelu",
            },
            "image_token_index": BASE_VOCAB,
            "image_seq_length": LLAVA_PATCHES,
            "projector_hidden_act": "gelu",
            "vision_feature_layer": -2,
            "vision_feature_select_strategy": "default",
            "tie_word_embeddings": False,
            **ids,
            "torch_dtype": "float32",
        },
        "kiln-tiny/qwen2.5-vl": {
            "architectures": ["Qwen2_5_VLForConditionalGeneration"],
            "model_type": "qwen2_5_vl",
            "text_config": {
                **text,
                "model_type": "qwen2_5_vl_text",
                "vocab_size": BASE_VOCAB + len(QWEN_TOKENS),
                "rope_parameters": {
                    "rope_type": "default",
                    "rope_theta": 1000000.0,
                    "mrope_section": [2, 3, 3],
                },
            },
            "vision_config": {
                "model_type": "qwen2_5_vl_vision",
                "depth": 2,
                "hidden_size": 32,
                "intermediate_size": 64,
                "num_heads": 2,
                "patch_size": 14,
                "spatial_merge_size": 2,
                "temporal_patch_size": 2,
                "window_size": 28,
                "fullatt_block_indexes": [1],
                "out_hidden_size": base["hidden_size"],
            },
            "image_token_id": QWEN_ID["<|image_pad|>"],
            "video_token_id": QWEN_ID["<|video_pad|>"],
            "vision_start_token_id": QWEN_ID["<|vision_start|>"],
            "vision_end_token_id": QWEN_ID["<|vision_end|>"],
            "tie_word_embeddings": False,
            **ids,
            "torch_dtype": "float32",
        },
        "kiln-tiny/qwen2-vl": {
            "architectures": ["Qwen2VLForConditionalGeneration"],
            "model_type": "qwen2_vl",
            "text_config": {
                **text,
                "model_type": "qwen2_vl_text",
                "vocab_size": BASE_VOCAB + len(QWEN_TOKENS),
                "rope_parameters": {
                    "rope_type": "default",
                    "rope_theta": 1000000.0,
                    "mrope_section": [2, 3, 3],
                },
            },
            "vision_config": {
                "model_type": "qwen2_vl_vision",
                "depth": 2,
                "embed_dim": 32,
                "mlp_ratio": 2,
                "num_heads": 2,
                "hidden_act": "quick_gelu",
                "patch_size": 14,
                "spatial_merge_size": 2,
                "temporal_patch_size": 2,
                "hidden_size": base["hidden_size"],  # the merger's output: the decoder's width
            },
            "image_token_id": QWEN_ID["<|image_pad|>"],
            "video_token_id": QWEN_ID["<|video_pad|>"],
            "vision_start_token_id": QWEN_ID["<|vision_start|>"],
            "vision_end_token_id": QWEN_ID["<|vision_end|>"],
            "tie_word_embeddings": False,
            **ids,
            "torch_dtype": "float32",
        },
        "kiln-tiny/qwen3-vl": {
            "architectures": ["Qwen3VLForConditionalGeneration"],
            "model_type": "qwen3_vl",
            "text_config": {
                **text,
                "model_type": "qwen3_vl_text",
                "num_hidden_layers": 3,  # DeepStack feeds the first 2; the third sees none
                "head_dim": 16,
                "vocab_size": BASE_VOCAB + len(QWEN_TOKENS),
                "rope_parameters": {
                    "rope_type": "default",
                    "rope_theta": 5000000.0,
                    "mrope_section": [4, 2, 2],
                    "mrope_interleaved": True,
                },
            },
            "vision_config": {
                "model_type": "qwen3_vl_vision",
                "depth": 3,
                "hidden_size": 32,
                "intermediate_size": 64,
                "num_heads": 2,
                "patch_size": 16,
                "spatial_merge_size": 2,
                "temporal_patch_size": 2,
                "num_position_embeddings": 16,  # a 4 x 4 learned grid (the real one 48 x 48)
                "deepstack_visual_indexes": [0, 1],
                "out_hidden_size": base["hidden_size"],
            },
            "image_token_id": QWEN_ID["<|image_pad|>"],
            "video_token_id": QWEN_ID["<|video_pad|>"],
            "vision_start_token_id": QWEN_ID["<|vision_start|>"],
            "vision_end_token_id": QWEN_ID["<|vision_end|>"],
            "tie_word_embeddings": False,
            **ids,
            "torch_dtype": "float32",
        },
        "kiln-tiny/gemma3-vlm": {
            "architectures": ["Gemma3ForConditionalGeneration"],
            "model_type": "gemma3",
            "text_config": {
                **text,
                "model_type": "gemma3_text",
                "vocab_size": BASE_VOCAB + len(GEMMA_TOKENS),
                "head_dim": 16,
                "query_pre_attn_scalar": 16,
                "sliding_window": 8,
                "layer_types": ["sliding_attention", "full_attention"],
            },
            "vision_config": {
                "model_type": "siglip_vision_model",
                **TOWER,
                "vision_use_head": False,
            },
            # 4 x 4 patches average-pooled 2 x 2 (gemma-3 pools 64 x 64 to 16 x 16).
            "mm_tokens_per_image": 4,
            "boi_token_index": GEMMA_ID["<start_of_image>"],
            "eoi_token_index": GEMMA_ID["<end_of_image>"],
            "image_token_index": GEMMA_ID["<image_soft_token>"],
            "tie_word_embeddings": False,
            **ids,
            "torch_dtype": "float32",
        },
        "kiln-tiny/idefics3": {
            "architectures": ["Idefics3ForConditionalGeneration"],
            "model_type": "idefics3",
            "text_config": {
                **text,
                "model_type": "llama",
                "vocab_size": BASE_VOCAB + len(IDEFICS3_TOKENS),
                "rope_theta": 100000.0,
            },
            "vision_config": {"model_type": "idefics3_vision", **TOWER},
            # 4 x 4 patches a crop, pixel-shuffled 2 x 2 (SmolVLM-Instruct: 27 x 27 by 3)
            "scale_factor": 2,
            "image_token_id": IDEFICS3_ID["<image>"],
            "tie_word_embeddings": False,
            **ids,
            "torch_dtype": "float32",
        },
        "kiln-tiny/internvl": {
            "architectures": ["InternVLForConditionalGeneration"],
            "model_type": "internvl",
            "text_config": {
                **text,
                "model_type": "qwen2",
                "vocab_size": BASE_VOCAB + len(INTERNVL_TOKENS),
                "rope_theta": 1000000.0,
            },
            # InternViT-300M's kind: biased q/k/v, no q/k norm, LayerNorm blocks with
            # layer scale, a CLS state (dropped) and absolute positions
            "vision_config": {
                "model_type": "internvl_vision",
                **TOWER,
                "attention_bias": True,
                "use_qk_norm": False,
                "norm_type": "layer_norm",
            },
            # 4 x 4 patches a tile, pixel-shuffled by 0.5 (InternVL3: 32 x 32 of 448 px)
            "downsample_ratio": 0.5,
            "image_seq_length": 4,
            "image_token_id": INTERNVL_ID["<IMG_CONTEXT>"],
            "projector_hidden_act": "gelu",
            "vision_feature_layer": -1,
            "vision_feature_select_strategy": "default",
            "tie_word_embeddings": False,
            **ids,
            "torch_dtype": "float32",
        },
    }


def processor_files(config: dict[str, Any]) -> dict[str, bytes]:
    """Every file of a tiny VLM but its weights."""
    from tinyhub import GENERATION, json_bytes, tokenizer_bytes, tokenizer_config

    family = FAMILIES[config["model_type"]](config)
    text = config["text_config"]
    tokens = {
        **tokenizer_config(text["max_position_embeddings"]),
        **family.get("tokenizer_config", {}),
    }
    raw = tokenizer_bytes(family.get("pre_tokenizer", text["model_type"]))
    return {
        "config.json": json_bytes(config),
        "generation_config.json": json_bytes({**GENERATION, **family.get("generation", {})}),
        "tokenizer.json": _with_added_tokens(raw, family["added"]),
        "tokenizer_config.json": json_bytes(tokens),
        "preprocessor_config.json": json_bytes(family["image_processor"]),
        "processor_config.json": json_bytes(family["processor"]),
        "chat_template.jinja": family["template"].encode(),
    }


def _llava(config: dict[str, Any]) -> dict[str, Any]:
    vision = config["vision_config"]
    return {
        "added": [LLAVA_IMAGE],
        "template": LLAVA_TEMPLATE,
        "image_processor": clip_processor(vision["image_size"]),
        "processor": {
            "processor_class": "LlavaProcessor",
            "image_token": LLAVA_IMAGE,
            "patch_size": vision["patch_size"],
            "vision_feature_select_strategy": config["vision_feature_select_strategy"],
            "num_additional_image_tokens": 1,  # CLIP's CLS state
        },
    }


def _qwen2_5_vl(config: dict[str, Any], processor: str = "Qwen2_5_VLProcessor") -> dict[str, Any]:
    return {
        "added": QWEN_TOKENS,
        # transformers imposes Qwen2Tokenizer's digit-splitting pre-tokenizer on Qwen
        # model types, so the file carries it too (tinyhub.PRE_TOKENIZERS).
        "pre_tokenizer": "qwen2",
        "template": QWEN_TEMPLATE,
        "image_processor": _qwen_processor(config["vision_config"], processor),
        "processor": {"processor_class": processor},
        "generation": {"eos_token_id": [config["eos_token_id"], QWEN_ID["<|im_end|>"]]},
    }


def _gemma3(config: dict[str, Any]) -> dict[str, Any]:
    size = config["vision_config"]["image_size"]
    return {
        "added": GEMMA_TOKENS,
        "template": GEMMA_TEMPLATE,
        # The processor reads the image tokens off the tokenizer, as gemma-3's own
        # tokenizer_config.json names them.
        "tokenizer_config": {
            "extra_special_tokens": {
                "boi_token": "<start_of_image>",
                "eoi_token": "<end_of_image>",
                "image_token": "<image_soft_token>",
            }
        },
        "image_processor": {
            "image_processor_type": "Gemma3ImageProcessor",
            "processor_class": "Gemma3Processor",
            **_pixels([0.5, 0.5, 0.5], [0.5, 0.5, 0.5], 2),
            "do_pan_and_scan": False,
            "size": {"height": size, "width": size},
        },
        "processor": {
            "processor_class": "Gemma3Processor",
            "image_seq_length": config["mm_tokens_per_image"],
        },
        "generation": {"eos_token_id": [config["eos_token_id"], GEMMA_ID["<end_of_turn>"]]},
    }


def _idefics3(config: dict[str, Any]) -> dict[str, Any]:
    """SmolVLM-Instruct's processor at the tiny tower's crop size: its image processor
    (Lanczos, mean and std 0.5, splitting into crops of the tower's size plus a global
    view, a longest edge of 4 crops, here 2 to keep an image a handful of tokens) and
    its image_seq_len (the tokens of one crop)."""
    crop = config["vision_config"]["image_size"]
    patches = crop // config["vision_config"]["patch_size"]
    return {
        "added": IDEFICS3_TOKENS,
        "template": IDEFICS3_TEMPLATE,
        "image_processor": {
            "image_processor_type": "Idefics3ImageProcessor",
            "processor_class": "Idefics3Processor",
            **_pixels([0.5, 0.5, 0.5], [0.5, 0.5, 0.5], 1),  # 1: PIL's LANCZOS
            "do_image_splitting": True,
            "do_pad": True,
            "max_image_size": {"longest_edge": crop},
            "size": {"longest_edge": 2 * crop},
        },
        "processor": {
            "processor_class": "Idefics3Processor",
            "image_seq_len": patches * patches // config["scale_factor"] ** 2,
        },
        "generation": {"eos_token_id": [config["eos_token_id"], IDEFICS3_ID["<end_of_utterance>"]]},
    }


def _internvl(config: dict[str, Any]) -> dict[str, Any]:
    """InternVL3-1B-hf's processor at the tiny tower's tile size: GotOcr2ImageProcessor
    (bicubic, ImageNet's mean and std, tiles of the tower's image size; InternVLProcessor
    turns crop_to_patches on) and the image tokens a tile (image_seq_length)."""
    tile = config["vision_config"]["image_size"]
    return {
        "added": INTERNVL_TOKENS,
        "pre_tokenizer": "qwen2",  # transformers imposes Qwen2Tokenizer's (_qwen2_5_vl)
        "template": INTERNVL_TEMPLATE,
        "tokenizer_config": {
            "extra_special_tokens": {
                "start_image_token": "<img>",
                "end_image_token": "</img>",
                "context_image_token": "<IMG_CONTEXT>",
                "video_token": "<video>",
            }
        },
        "image_processor": {
            "image_processor_type": "GotOcr2ImageProcessor",
            "processor_class": "InternVLProcessor",
            **_pixels([0.485, 0.456, 0.406], [0.229, 0.224, 0.225], 3),
            "crop_to_patches": False,  # as InternVL3-1B-hf saves it; its processor asks True
            "min_patches": 1,
            "max_patches": 6,
            "size": {"height": tile, "width": tile},
        },
        "processor": {
            "processor_class": "InternVLProcessor",
            "image_seq_length": config["image_seq_length"],
        },
        "generation": {"eos_token_id": [config["eos_token_id"], INTERNVL_ID["<|im_end|>"]]},
    }


def _qwen2_vl(config: dict[str, Any]) -> dict[str, Any]:
    """Qwen2-VL-7B-Instruct ships Qwen2.5-VL-Instruct's chat template and image
    processor settings; its processor class is Qwen2VLProcessor."""
    return _qwen2_5_vl(config, "Qwen2VLProcessor")


def _qwen3_vl(config: dict[str, Any]) -> dict[str, Any]:
    """Qwen3-VL-Instruct's processor: Qwen2VLImageProcessorFast's settings as it saves
    them (mean and std 0.5, bicubic, a pixel budget as size's shortest and longest edge,
    here 2 x 2 to 4 x 4 merged patches where the real one allows 64 to 16,384), its
    tokens and its chat template (QWEN3_TEMPLATE)."""
    vision = config["vision_config"]
    unit = vision["patch_size"] * vision["spatial_merge_size"]
    return {
        **_qwen2_5_vl(config, "Qwen3VLProcessor"),
        "template": QWEN3_TEMPLATE,
        "image_processor": {
            "image_processor_type": "Qwen2VLImageProcessorFast",
            "processor_class": "Qwen3VLProcessor",
            **_pixels([0.5, 0.5, 0.5], [0.5, 0.5, 0.5], 3),
            "size": {"shortest_edge": unit * unit * 4, "longest_edge": unit * unit * 16},
            "patch_size": vision["patch_size"],
            "temporal_patch_size": vision["temporal_patch_size"],
            "merge_size": vision["spatial_merge_size"],
        },
    }


FAMILIES = {
    "llava": _llava,
    "qwen2_5_vl": _qwen2_5_vl,
    "qwen2_vl": _qwen2_vl,
    "qwen3_vl": _qwen3_vl,
    "gemma3": _gemma3,
    "idefics3": _idefics3,
    "internvl": _internvl,
}


def _pixels(mean: list[float], std: list[float], resample: int) -> dict[str, Any]:
    """What each tiny processor does to pixels, as the real ones do: RGB, resized,
    rescaled to [0, 1] and normalized."""
    return {
        "do_convert_rgb": True,
        "do_normalize": True,
        "do_rescale": True,
        "do_resize": True,
        "image_mean": mean,
        "image_std": std,
        "resample": resample,
        "rescale_factor": 1 / 255,
    }


def clip_processor(size: int) -> dict[str, Any]:
    """llava-1.5's CLIPImageProcessor settings at an image size (the tiny tower's; the
    real one's is 336)."""
    return {
        "image_processor_type": "CLIPImageProcessor",
        "processor_class": "LlavaProcessor",
        "crop_size": {"height": size, "width": size},
        "do_center_crop": True,
        **_pixels(CLIP_MEAN, CLIP_STD, 3),
        "size": {"shortest_edge": size},
    }


def _qwen_processor(vision: dict[str, Any], processor: str) -> dict[str, Any]:
    """Qwen2-VL's and Qwen2.5-VL's Qwen2VLImageProcessor settings with a tiny pixel
    budget: 2 x 2 to 4 x 4 merged patches (the real budget is 4 to 16,384)."""
    unit = vision["patch_size"] * vision["spatial_merge_size"]
    return {
        "image_processor_type": "Qwen2VLImageProcessor",
        "processor_class": processor,
        **_pixels(CLIP_MEAN, CLIP_STD, 3),
        "min_pixels": unit * unit * 4,
        "max_pixels": unit * unit * 16,
        "patch_size": vision["patch_size"],
        "temporal_patch_size": vision["temporal_patch_size"],
        "merge_size": vision["spatial_merge_size"],
    }


def _with_added_tokens(raw: bytes, tokens: list[str]) -> bytes:
    """The tokenizer file with `tokens` added as special tokens after its vocabulary."""
    data = json.loads(raw)
    assert len(data["model"]["vocab"]) == BASE_VOCAB
    for i, token in enumerate(tokens):
        data["added_tokens"].append(
            {
                "id": BASE_VOCAB + i,
                "content": token,
                "single_word": False,
                "lstrip": False,
                "rstrip": False,
                "normalized": False,
                "special": True,
            }
        )
    return json.dumps(data, ensure_ascii=False, indent=2).encode()
