"""Builders for task text2text-generation (encoder-decoders: T5, Bart, MBart).

One module per step kind, picked by kiln.execute from the step's `task` option
(kiln.toolchain.TASK_BUILDERS); their code is hashed under `text2text-generation/<kind>`.

Two graphs, whose contract runtime/seq2seq.py relies on:

    encoder.onnx  input_ids [batch, src] int64, attention_mask [batch, src] int64
                  -> encoder_hidden [batch, src, d_model]
    decoder.onnx  decoder_input_ids [batch, seq] int64, encoder_hidden,
                  encoder_attention_mask [batch, src] int64,
                  past.<layer>.key / past.<layer>.value [batch, heads, past, dim]
                  -> logits [batch, seq, vocab], present.<layer>.key / .value

Only the decoder's self-attention is cached. Cross-attention keys and values are
recomputed from encoder_hidden at every step (a choice: one decoder graph serves
the first step and the rest, with no Python branch on "cross cache filled" frozen
into the trace; it costs two small matmuls per layer and step). Encoder inputs are
right-padded and masked; all rows decode in lockstep, so the decoder needs no mask.
"""

TASK = "text2text-generation"
