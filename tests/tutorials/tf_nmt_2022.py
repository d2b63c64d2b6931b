"""TensorFlow's "Neural machine translation with attention" tutorial as it is today (the 2022 rewrite): its own
classes, transcribed in the package (tf_impl/tutorials/nmt_2022.py: the source, its revision and what changed),
where `rosetta port --from tf-nmt-2022` runs them on a file; here with the factories the tests build them by.

Calling: `Translator` takes `(context, target_in)`, int token ids [batch, s] and [batch, t] with 0 the pad id
(`mask_zero=True`), and returns logits [batch, t, target_vocab_size] (`teacher_forced` below);
`model.decoder.last_attention_weights` [batch, t, s] holds the attention averaged over its one head.
"""

import numpy as np
import tensorflow as tf

from tf_impl.tutorials.nmt_2022 import (  # noqa: F401  (the tutorial's classes, as the tests name them)
    CrossAttention,
    Decoder,
    Encoder,
    ShapeChecker,
    Translator,
    masked_acc,
    masked_loss,
)

# --- factories for the tests (not the tutorial's) ---


def translator(input_vocab=23, target_vocab=19, units=16):
    """The model as the tutorial builds it, `Translator(UNITS, context_text_processor, target_text_processor)`,
    with the processors' vocabulary sizes given directly (the tutorial: UNITS = 256, vocabularies of up to
    5000). Unbuilt until the first call (`teacher_forced`)."""
    return Translator(units, input_vocab, target_vocab)


def teacher_forced(model, context, target_in):
    """The tutorial's `logits = model((ex_context_tok, ex_tar_in))`: int token ids [batch, s] and [batch, t]
    (0 is the pad id) in, logits [batch, t, target_vocab] out; the first call builds the layers."""
    return model((tf.convert_to_tensor(context), tf.convert_to_tensor(target_in)))


def example_batch(batch=3, context_steps=7, target_steps=5, input_vocab=23, target_vocab=19, seed=0):
    """(context, target_in): int64 token ids [batch, context_steps], [batch, target_steps], all >= 1 (no padding)."""
    rng = np.random.default_rng(seed)
    return rng.integers(1, input_vocab, (batch, context_steps)), rng.integers(1, target_vocab, (batch, target_steps))
