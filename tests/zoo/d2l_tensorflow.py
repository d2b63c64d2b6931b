"""d2l.ai's RNN encoder--decoder with Bahdanau attention, TensorFlow/Keras, as the book's users have it.

Transcribed from Dive into Deep Learning (https://d2l.ai), repository d2l-ai/d2l-en (branch master at 23d7a5ae,
identical to branch release, d2l 1.0.3), file `d2l/tensorflow.py` (the library `from d2l import tensorflow as d2l`
imports), plus the one class that chapter keeps out of the library: `Seq2SeqAttentionDecoder`, from
`chapter_attention-mechanisms-and-transformers/bahdanau-attention.md` (section "The Bahdanau Attention Mechanism",
:numref:`sec_seq2seq_attention`), and `Seq2Seq.loss` from `chapter_recurrent-modern/seq2seq.md` (:numref:`sec_seq2seq`,
"Sequence-to-Sequence Learning for Machine Translation").

Only what builds the model and runs it forward is kept (no Trainer, plotting, data, optimizers); the code of every kept
class is d2l's own, class for class and attribute for attribute, `d2l.xxx` replaced by the local name and d2l's tensor
aliases (`d2l.transpose`, `d2l.reshape`, ...) defined here as d2l defines them. As in d2l, `Module` (so `Seq2Seq` and
the encoder's `GRU`) is a `tf.keras.Model`, the encoder, decoder and attention are `tf.keras.layers.Layer`s, and
`save_hyperparameters` keeps the constructor's arguments both in a `self.hparams` dict and as attributes: `Seq2Seq`
holds its encoder and decoder twice, as `self.encoder`/`self.decoder` and in `self.hparams` (Keras tracks the dict).

d2l's TensorFlow code was written for Keras 2 (`tf.keras` before TF 2.16). Under Keras 3 one class needs a change,
d2l's `GRU`, marked `Keras 3:` below: Keras 3's `RNN` has no `time_major` (the time-major layout is kept by transposing
around it) and returns each `GRUCell`'s state wrapped in a list (flattened, as Keras 2 returned it). Left as published,
Keras 3's `Model.__init__` sets an instance attribute `self.loss = None` that hides d2l's `loss` method on every
`Module` (Keras 2 did not): call it as `Seq2Seq.loss(model, Y_hat, Y)`.

Calling: `model(enc_X, dec_X, enc_valid_lens)`, d2l's `EncoderDecoder.call(enc_X, dec_X, *args)` fed its batch
`(src, tgt, src_valid_len)`: token ids `enc_X` [batch, src_steps] and `dec_X` [batch, tgt_steps] (int), the source's
valid lengths [batch] (or None: no masking). The valid lengths are not optional: the decoder's `init_state` needs them.
Returns logits [batch, tgt_steps, tgt_vocab]. The layers build on that first call (`run_once`); d2l's `call` always
passes `training=True` to the encoder and decoder.
"""

from __future__ import annotations

import inspect

import tensorflow as tf

# d2l/tensorflow.py's tensor aliases (end of the file), those the classes below use
reshape = tf.reshape
reduce_sum = tf.reduce_sum
reduce_mean = tf.reduce_mean
argmax = tf.argmax
astype = tf.cast
float32 = tf.float32
transpose = tf.transpose

nn_Module = tf.keras.Model


def add_to_class(Class):
    """Register functions as methods in created class.

    Defined in :numref:`sec_oo-design`"""

    def wrapper(obj):
        setattr(Class, obj.__name__, obj)

    return wrapper


class HyperParameters:
    """d2l.HyperParameters: the base class of hyperparameters."""

    def save_hyperparameters(self, ignore=[]):  # noqa: B006
        """Save function arguments into class attributes.

        Defined in :numref:`sec_utils`"""
        frame = inspect.currentframe().f_back
        _, _, _, local_vars = inspect.getargvalues(frame)
        self.hparams = {k: v for k, v in local_vars.items() if k not in set(ignore + ["self"]) and not k.startswith("_")}
        for k, v in self.hparams.items():
            setattr(self, k, v)


class ProgressBoard(HyperParameters):
    """d2l.ProgressBoard: the board that plots data points in animation (its constructor only; no plotting here)."""

    def __init__(
        self,
        xlabel=None,
        ylabel=None,
        xlim=None,
        ylim=None,
        xscale="linear",
        yscale="linear",
        ls=["-", "--", "-.", ":"],  # noqa: B006
        colors=["C0", "C1", "C2", "C3"],  # noqa: B006
        fig=None,
        axes=None,
        figsize=(3.5, 2.5),
        display=True,
    ):
        self.save_hyperparameters()


class Module(nn_Module, HyperParameters):
    """d2l.Module: the base class of models (a tf.keras.Model)."""

    def __init__(self, plot_train_per_epoch=2, plot_valid_per_epoch=1):
        super().__init__()
        self.save_hyperparameters()
        self.board = ProgressBoard()
        self.training = None

    def loss(self, y_hat, y):
        raise NotImplementedError

    def forward(self, X):
        assert hasattr(self, "net"), "Neural network is defined"
        return self.net(X)

    def call(self, X, *args, **kwargs):
        if kwargs and "training" in kwargs:
            self.training = kwargs["training"]
        return self.forward(X, *args)


class Classifier(Module):
    """d2l.Classifier: the base class of classification models."""

    def accuracy(self, Y_hat, Y, averaged=True):
        """Compute the number of correct predictions.

        Defined in :numref:`sec_classification`"""
        Y_hat = reshape(Y_hat, (-1, Y_hat.shape[-1]))
        preds = astype(argmax(Y_hat, axis=1), Y.dtype)
        compare = astype(preds == reshape(Y, -1), float32)
        return reduce_mean(compare) if averaged else compare

    def loss(self, Y_hat, Y, averaged=True):
        """Defined in :numref:`sec_softmax_concise`"""
        Y_hat = reshape(Y_hat, (-1, Y_hat.shape[-1]))
        Y = reshape(Y, (-1,))
        fn = tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True)
        return fn(Y, Y_hat)


class RNN(Module):
    """d2l.RNN: the RNN model implemented with high-level APIs (never built here: GRU replaces its __init__)."""

    def __init__(self, num_hiddens):
        super().__init__()
        self.save_hyperparameters()
        # As published; Keras 3 refuses time_major (see GRU), but nothing here constructs an RNN.
        self.rnn = tf.keras.layers.SimpleRNN(num_hiddens, return_sequences=True, return_state=True, time_major=True)

    def forward(self, inputs, H=None):
        outputs, H = self.rnn(inputs, H)
        return outputs, H


class GRU(RNN):
    """d2l.GRU: the multilayer GRU model (time-major), with the two Keras 3 changes marked below."""

    def __init__(self, num_hiddens, num_layers, dropout=0):
        Module.__init__(self)
        self.save_hyperparameters()
        gru_cells = [tf.keras.layers.GRUCell(num_hiddens, dropout=dropout) for _ in range(num_layers)]
        # Keras 3: d2l passes time_major=True, which Keras 3's RNN refuses; forward transposes instead.
        self.rnn = tf.keras.layers.RNN(gru_cells, return_sequences=True, return_state=True)

    def forward(self, X, state=None):
        # Keras 3: d2l has `outputs, *state = self.rnn(X, state); return outputs, state` (time_major=True).
        outputs, *state = self.rnn(transpose(X, (1, 0, 2)), state)
        # Keras 3: each GRUCell's state comes back as [h]; flatten to Keras 2's list of num_layers (batch, hiddens).
        return transpose(outputs, (1, 0, 2)), tf.nest.flatten(state)


class Encoder(tf.keras.layers.Layer):
    """d2l.Encoder: the base encoder interface for the encoder--decoder architecture."""

    def __init__(self):
        super().__init__()

    # Later there can be additional arguments (e.g., length excluding padding)
    def call(self, X, *args):
        raise NotImplementedError


class Decoder(tf.keras.layers.Layer):
    """d2l.Decoder: the base decoder interface for the encoder--decoder architecture."""

    def __init__(self):
        super().__init__()

    # Later there can be additional arguments (e.g., length excluding padding)
    def init_state(self, enc_all_outputs, *args):
        raise NotImplementedError

    def call(self, X, state):
        raise NotImplementedError


class EncoderDecoder(Classifier):
    """d2l.EncoderDecoder: the base class for the encoder--decoder architecture."""

    def __init__(self, encoder, decoder):
        super().__init__()
        self.encoder = encoder
        self.decoder = decoder

    def call(self, enc_X, dec_X, *args):
        enc_all_outputs = self.encoder(enc_X, *args, training=True)
        dec_state = self.decoder.init_state(enc_all_outputs, *args)
        # Return decoder output only
        return self.decoder(dec_X, dec_state, training=True)[0]


class Seq2SeqEncoder(Encoder):
    """d2l.Seq2SeqEncoder: the RNN encoder for sequence-to-sequence learning."""

    def __init__(self, vocab_size, embed_size, num_hiddens, num_layers, dropout=0):
        super().__init__()
        self.embedding = tf.keras.layers.Embedding(vocab_size, embed_size)
        self.rnn = GRU(num_hiddens, num_layers, dropout)

    def call(self, X, *args):
        # X shape: (batch_size, num_steps)
        embs = self.embedding(transpose(X))
        # embs shape: (num_steps, batch_size, embed_size)
        outputs, state = self.rnn(embs)
        # outputs shape: (num_steps, batch_size, num_hiddens)
        # state shape: (num_layers, batch_size, num_hiddens)
        return outputs, state


class Seq2Seq(EncoderDecoder):
    """d2l.Seq2Seq: the RNN encoder--decoder for sequence to sequence learning."""

    def __init__(self, encoder, decoder, tgt_pad, lr):
        super().__init__(encoder, decoder)
        self.save_hyperparameters()


@add_to_class(Seq2Seq)
def loss(self, Y_hat, Y):
    l = super(Seq2Seq, self).loss(Y_hat, Y, averaged=False)  # noqa: E741
    mask = astype(reshape(Y, -1) != self.tgt_pad, float32)
    return reduce_sum(l * mask) / reduce_sum(mask)


def masked_softmax(X, valid_lens):
    """Perform softmax operation by masking elements on the last axis.

    Defined in :numref:`sec_attention-scoring-functions`"""

    # X: 3D tensor, valid_lens: 1D or 2D tensor
    def _sequence_mask(X, valid_len, value=0):
        maxlen = X.shape[1]
        mask = tf.range(start=0, limit=maxlen, dtype=tf.float32)[None, :] < tf.cast(valid_len[:, None], dtype=tf.float32)

        if len(X.shape) == 3:
            return tf.where(tf.expand_dims(mask, axis=-1), X, value)
        else:
            return tf.where(mask, X, value)

    if valid_lens is None:
        return tf.nn.softmax(X, axis=-1)
    else:
        shape = X.shape
        if len(valid_lens.shape) == 1:
            valid_lens = tf.repeat(valid_lens, repeats=shape[1])

        else:
            valid_lens = tf.reshape(valid_lens, shape=-1)
        # On the last axis, replace masked elements with a very large negative
        # value, whose exponentiation outputs 0
        X = _sequence_mask(tf.reshape(X, shape=(-1, shape[-1])), valid_lens, value=-1e6)
        return tf.nn.softmax(tf.reshape(X, shape=shape), axis=-1)


class AdditiveAttention(tf.keras.layers.Layer):
    """d2l.AdditiveAttention: additive attention (key_size and query_size are taken and unused, as in d2l)."""

    def __init__(self, key_size, query_size, num_hiddens, dropout, **kwargs):
        super().__init__(**kwargs)
        self.W_k = tf.keras.layers.Dense(num_hiddens, use_bias=False)
        self.W_q = tf.keras.layers.Dense(num_hiddens, use_bias=False)
        self.w_v = tf.keras.layers.Dense(1, use_bias=False)
        self.dropout = tf.keras.layers.Dropout(dropout)

    def call(self, queries, keys, values, valid_lens, **kwargs):
        queries, keys = self.W_q(queries), self.W_k(keys)
        # After dimension expansion, shape of queries: (batch_size, no. of
        # queries, 1, num_hiddens) and shape of keys: (batch_size, 1, no. of
        # key-value pairs, num_hiddens). Sum them up with broadcasting
        features = tf.expand_dims(queries, axis=2) + tf.expand_dims(keys, axis=1)
        features = tf.nn.tanh(features)
        # There is only one output of self.w_v, so we remove the last
        # one-dimensional entry from the shape. Shape of scores: (batch_size,
        # no. of queries, no. of key-value pairs)
        scores = tf.squeeze(self.w_v(features), axis=-1)
        self.attention_weights = masked_softmax(scores, valid_lens)
        # Shape of values: (batch_size, no. of key-value pairs, value
        # dimension)
        return tf.matmul(self.dropout(self.attention_weights, **kwargs), values)


class AttentionDecoder(Decoder):
    """d2l.AttentionDecoder: the base attention-based decoder interface."""

    def __init__(self):
        super().__init__()

    @property
    def attention_weights(self):
        raise NotImplementedError


class Seq2SeqAttentionDecoder(AttentionDecoder):
    """Seq2SeqAttentionDecoder of d2l's Bahdanau attention chapter (not in d2l/tensorflow.py; the chapter's tensorflow tab)."""

    def __init__(self, vocab_size, embed_size, num_hiddens, num_layers, dropout=0):
        super().__init__()
        self.attention = AdditiveAttention(num_hiddens, num_hiddens, num_hiddens, dropout)
        self.embedding = tf.keras.layers.Embedding(vocab_size, embed_size)
        self.rnn = tf.keras.layers.RNN(
            tf.keras.layers.StackedRNNCells([tf.keras.layers.GRUCell(num_hiddens, dropout=dropout) for _ in range(num_layers)]),
            return_sequences=True,
            return_state=True,
        )
        self.dense = tf.keras.layers.Dense(vocab_size)

    def init_state(self, enc_outputs, enc_valid_lens):
        # Shape of outputs: (batch_size, num_steps, num_hiddens).
        # Length of list hidden_state is num_layers, where the shape of its
        # element is (batch_size, num_hiddens)
        outputs, hidden_state = enc_outputs
        return (tf.transpose(outputs, (1, 0, 2)), hidden_state, enc_valid_lens)

    def call(self, X, state, **kwargs):
        # Shape of output enc_outputs: # (batch_size, num_steps, num_hiddens)
        # Length of list hidden_state is num_layers, where the shape of its
        # element is (batch_size, num_hiddens)
        enc_outputs, hidden_state, enc_valid_lens = state
        # Shape of the output X: (num_steps, batch_size, embed_size)
        X = self.embedding(X)  # Input X has shape: (batch_size, num_steps)
        X = tf.transpose(X, perm=(1, 0, 2))
        outputs, self._attention_weights = [], []
        for x in X:
            # Shape of query: (batch_size, 1, num_hiddens)
            query = tf.expand_dims(hidden_state[-1], axis=1)
            # Shape of context: (batch_size, 1, num_hiddens)
            context = self.attention(query, enc_outputs, enc_outputs, enc_valid_lens, **kwargs)
            # Concatenate on the feature dimension
            x = tf.concat((context, tf.expand_dims(x, axis=1)), axis=-1)
            out = self.rnn(x, hidden_state, **kwargs)
            hidden_state = out[1:]
            outputs.append(out[0])
            self._attention_weights.append(self.attention.attention_weights)
        # After fully connected layer transformation, shape of outputs:
        # (batch_size, num_steps, vocab_size)
        outputs = self.dense(tf.concat(outputs, axis=1))
        return outputs, [enc_outputs, hidden_state, enc_valid_lens]

    @property
    def attention_weights(self):
        return self._attention_weights


# --- factories for the tests (not d2l's) ---


def bahdanau_seq2seq(src_vocab=20, tgt_vocab=18, embed_size=8, num_hiddens=16, num_layers=2, dropout=0.0, tgt_pad=0):
    """The model as the Bahdanau chapter builds it (`len(data.src_vocab)`, `len(data.tgt_vocab)` -> src_vocab,
    tgt_vocab; `tgt_pad=data.tgt_vocab['<pad>']`, whose index depends on the data's sorted vocabulary, -> tgt_pad;
    the chapter builds it under `with d2l.try_gpu():`, left out). Unbuilt until the first call: see `run_once`."""
    encoder = Seq2SeqEncoder(src_vocab, embed_size, num_hiddens, num_layers, dropout)
    decoder = Seq2SeqAttentionDecoder(tgt_vocab, embed_size, num_hiddens, num_layers, dropout)
    return Seq2Seq(encoder, decoder, tgt_pad=tgt_pad, lr=0.005)


def example_batch(batch=3, src_steps=7, tgt_steps=5, src_vocab=20, tgt_vocab=18, seed=0):
    """(src, tgt, src_valid_len): int32 token ids [batch, src_steps], [batch, tgt_steps], valid lengths [batch]."""
    g = tf.random.Generator.from_seed(seed)
    src = g.uniform((batch, src_steps), 0, src_vocab, dtype=tf.int32)
    tgt = g.uniform((batch, tgt_steps), 0, tgt_vocab, dtype=tf.int32)
    src_valid_len = g.uniform((batch,), 1, src_steps + 1, dtype=tf.int32)
    return src, tgt, src_valid_len


def run_once(model, src, tgt, src_valid_len=None):
    """One forward pass, `model(src, tgt, src_valid_len)`, which builds the Keras layers; returns the logits
    [batch, tgt_steps, tgt_vocab]. `src_valid_len=None` means no masking (d2l's masked_softmax then is a softmax)."""
    return model(src, tgt, src_valid_len)
