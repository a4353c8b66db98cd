"""Builders for tasks text2text-generation (encoder-decoders: T5, Bart, MBart) and
automatic-speech-recognition (Whisper: the same decoding, audio features in).

One module per step kind, picked by kiln.store.execute from the step's `task` option
(kiln.schema.FAMILY); each step's key covers its module's import closure.
speech.py holds what speech exports and references do differently, and _graph.py
what the text and speech exports share (the decoder's cache and dynamic axes).

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

Speech (automatic-speech-recognition) changes only the encoder's input and moves
the cross-attention cache out of the decoder (builders/seq2seq/speech.py):

    encoder.onnx  input_features [batch, num_mel_bins, frames] float32 (Whisper's
                  log-mel, runtime/audio.py) -> encoder_hidden [batch, frames/2, d_model],
                  cross.<layer>.key / cross.<layer>.value [batch, heads, frames/2, dim]
    decoder.onnx  decoder_input_ids, past.<layer>.key / .value, cross.<layer>.key / .value
                  -> logits, present.<layer>.key / .value

There the cross-attention keys and values are computed once per input, by the
encoder graph, and fed to every decoder step unchanged: a 30 s Whisper input is
1500 encoder positions, too many to project again at every token. Features have a
fixed length (the preprocessor pads or cuts the audio), so no mask is needed.

  export.py     the checkpoint -> ONNX, with the contract above
  onnx.py       graph tidy and check (builders/common/graph.py)
  engine.py     onnxruntime's offline optimization and a smoke run (builders/common/ort.py)
  bundle.py     engine + tokenizer + bundle.json
  reference.py  the independent fp32 transformers reference
  validate.py   the bundle through runtime/, measured against the reference
  speech.py     what speech exports and references do differently
  _graph.py     what the text and speech exports share (decoder cache, dynamic axes)
"""

TASK = "text2text-generation"
SPEECH = "automatic-speech-recognition"
TASK_PATTERN = f"^({TASK}|{SPEECH})$"
