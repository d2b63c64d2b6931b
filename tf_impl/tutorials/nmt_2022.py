"""TensorFlow's "Neural machine translation with attention" tutorial as it is today (the 2022 rewrite), transcribed:
the model `rosetta port --from tf-nmt-2022` runs on a file (tf_impl.references.tf_nmt_2022; the tests build it
through tests/tutorials/tf_nmt_2022.py).

Source: github.com/tensorflow/text, docs/tutorials/nmt_with_attention.ipynb, as of commit 978fd9f2
("Update tensorflow-text notebooks from 2.8 to 2.11", 2023-02-15; blob ea0d7b11, unchanged up to the
repository's head 17c38bf0 of 2026-07-21). Its model code is that of the rewrite, commit c1ddc39b ("Update
nmt_with_attention: ...", 2022-10-06): the later commits change prose and the pip pin only.

The classes `Encoder`, `CrossAttention`, `Decoder` (`tf.keras.layers.Layer`s) and `Translator`
(`tf.keras.Model`) and the functions `masked_loss` and `masked_acc` are the notebook's own, attribute for
attribute and layer argument for layer argument. What changed:
- The notebook's `Encoder(text_processor, units)`, `Decoder(text_processor, units)` and
  `Translator(units, context_text_processor, target_text_processor)` take `TextVectorization` layers, used for
  `text_processor.vocabulary_size()`; here they take the vocabulary sizes: `Encoder(vocab_size, units)`,
  `Decoder(vocab_size, units)`, `Translator(units, context_vocab_size, target_vocab_size)`. Gone with the
  text processors: `Encoder.text_processor` and `convert_input`, `Decoder.text_processor`, its `StringLookup`s
  `word_to_id` and `id_to_word`, `start_token` and `end_token` (ids looked up in the vocabulary's strings), and
  the methods built on them: `Decoder.get_initial_state` (also not runnable on Keras 3 as published:
  `GRU.get_initial_state` takes a batch size there, not the embedded tokens), `tokens_to_text`,
  `get_next_token`, `Translator.translate`, `plot_attention` and the `Export` module.
- The notebook's `ShapeChecker` (it needs `einops`) is a no-op here; its calls are kept as written.
- `Decoder.call`, which the notebook attaches in a later cell with `@Decoder.add_method`, is written in the
  class body (the `add_method` classmethods are kept).
Left out as well: the data, text processing, training (`model.fit`), plots and anything needing
tensorflow-text.

Calling: `Translator` takes `(context, target_in)`, int token ids [batch, s] and [batch, t] with 0 the pad id
(`mask_zero=True`), and returns logits [batch, t, target_vocab_size] (tests/tutorials/tf_nmt_2022.py's `teacher_forced`);
`model.decoder.last_attention_weights` [batch, t, s] holds the attention averaged over its one head.
"""

# ruff: noqa: UP008  (the notebook's own `super(Encoder, self)`)
# the notebook's own layout (two-space indents in its classes, four in its loss functions), kept from the formatter:
# fmt: off

import tensorflow as tf


class ShapeChecker:
  """The notebook's shape checker as a no-op (the notebook's own parses shapes with einops)."""

  def __call__(self, tensor, names, broadcast=False):
    return


class Encoder(tf.keras.layers.Layer):
  def __init__(self, vocab_size, units):
    super(Encoder, self).__init__()
    self.vocab_size = vocab_size
    self.units = units

    # The embedding layer converts tokens to vectors
    self.embedding = tf.keras.layers.Embedding(self.vocab_size, units,
                                               mask_zero=True)

    # The RNN layer processes those vectors sequentially.
    self.rnn = tf.keras.layers.Bidirectional(
        merge_mode='sum',
        layer=tf.keras.layers.GRU(units,
                            # Return the sequence and state
                            return_sequences=True,
                            recurrent_initializer='glorot_uniform'))

  def call(self, x):
    shape_checker = ShapeChecker()
    shape_checker(x, 'batch s')

    # 2. The embedding layer looks up the embedding vector for each token.
    x = self.embedding(x)
    shape_checker(x, 'batch s units')

    # 3. The GRU processes the sequence of embeddings.
    x = self.rnn(x)
    shape_checker(x, 'batch s units')

    # 4. Returns the new sequence of embeddings.
    return x


class CrossAttention(tf.keras.layers.Layer):
  def __init__(self, units, **kwargs):
    super().__init__()
    self.mha = tf.keras.layers.MultiHeadAttention(key_dim=units, num_heads=1, **kwargs)
    self.layernorm = tf.keras.layers.LayerNormalization()
    self.add = tf.keras.layers.Add()

  def call(self, x, context):
    shape_checker = ShapeChecker()

    shape_checker(x, 'batch t units')
    shape_checker(context, 'batch s units')

    attn_output, attn_scores = self.mha(
        query=x,
        value=context,
        return_attention_scores=True)

    shape_checker(x, 'batch t units')
    shape_checker(attn_scores, 'batch heads t s')

    # Cache the attention scores for plotting later.
    attn_scores = tf.reduce_mean(attn_scores, axis=1)
    shape_checker(attn_scores, 'batch t s')
    self.last_attention_weights = attn_scores

    x = self.add([x, attn_output])
    x = self.layernorm(x)

    return x


class Decoder(tf.keras.layers.Layer):
  @classmethod
  def add_method(cls, fun):
    setattr(cls, fun.__name__, fun)
    return fun

  def __init__(self, vocab_size, units):
    super(Decoder, self).__init__()
    self.vocab_size = vocab_size

    self.units = units


    # 1. The embedding layer converts token IDs to vectors
    self.embedding = tf.keras.layers.Embedding(self.vocab_size,
                                               units, mask_zero=True)

    # 2. The RNN keeps track of what's been generated so far.
    self.rnn = tf.keras.layers.GRU(units,
                                   return_sequences=True,
                                   return_state=True,
                                   recurrent_initializer='glorot_uniform')

    # 3. The RNN output will be the query for the attention layer.
    self.attention = CrossAttention(units)

    # 4. This fully connected layer produces the logits for each
    # output token.
    self.output_layer = tf.keras.layers.Dense(self.vocab_size)

  def call(self,
           context, x,
           state=None,
           return_state=False):
    shape_checker = ShapeChecker()
    shape_checker(x, 'batch t')
    shape_checker(context, 'batch s units')

    # 1. Lookup the embeddings
    x = self.embedding(x)
    shape_checker(x, 'batch t units')

    # 2. Process the target sequence.
    x, state = self.rnn(x, initial_state=state)
    shape_checker(x, 'batch t units')

    # 3. Use the RNN output as the query for the attention over the context.
    x = self.attention(x, context)
    self.last_attention_weights = self.attention.last_attention_weights
    shape_checker(x, 'batch t units')
    shape_checker(self.last_attention_weights, 'batch t s')

    # Step 4. Generate logit predictions for the next token.
    logits = self.output_layer(x)
    shape_checker(logits, 'batch t target_vocab_size')

    if return_state:
      return logits, state
    else:
      return logits


class Translator(tf.keras.Model):
  @classmethod
  def add_method(cls, fun):
    setattr(cls, fun.__name__, fun)
    return fun

  def __init__(self, units,
               context_vocab_size,
               target_vocab_size):
    super().__init__()
    # Build the encoder and decoder
    encoder = Encoder(context_vocab_size, units)
    decoder = Decoder(target_vocab_size, units)

    self.encoder = encoder
    self.decoder = decoder

  def call(self, inputs):
    context, x = inputs
    context = self.encoder(context)
    logits = self.decoder(context, x)

    #TODO(b/250038731): remove this
    try:
      # Delete the keras mask, so keras doesn't scale the loss+accuracy.
      del logits._keras_mask
    except AttributeError:
      pass

    return logits


def masked_loss(y_true, y_pred):
    # Calculate the loss for each item in the batch.
    loss_fn = tf.keras.losses.SparseCategoricalCrossentropy(
        from_logits=True, reduction='none')
    loss = loss_fn(y_true, y_pred)

    # Mask off the losses on padding.
    mask = tf.cast(y_true != 0, loss.dtype)
    loss *= mask

    # Return the total.
    return tf.reduce_sum(loss)/tf.reduce_sum(mask)


def masked_acc(y_true, y_pred):
    # Calculate the loss for each item in the batch.
    y_pred = tf.argmax(y_pred, axis=-1)
    y_pred = tf.cast(y_pred, y_true.dtype)

    match = tf.cast(y_true == y_pred, tf.float32)
    mask = tf.cast(y_true != 0, tf.float32)

    return tf.reduce_sum(match)/tf.reduce_sum(mask)


# fmt: on
