"""d2l.ai's RNN encoder--decoder with Bahdanau attention, PyTorch, as the book's users have it.

Transcribed from Dive into Deep Learning (https://d2l.ai), repository d2l-ai/d2l-en (branch master at 23d7a5ae,
identical to branch release, d2l 1.0.3), file `d2l/torch.py` (the library `from d2l import torch as d2l` imports),
plus the one class that chapter keeps out of the library: `Seq2SeqAttentionDecoder`, from
`chapter_attention-mechanisms-and-transformers/bahdanau-attention.md` (section "The Bahdanau Attention Mechanism",
:numref:`sec_seq2seq_attention`), and `Seq2Seq.loss` from `chapter_recurrent-modern/seq2seq.md` (:numref:`sec_seq2seq`,
"Sequence-to-Sequence Learning for Machine Translation").

Only what builds the model and runs it forward is kept (no Trainer, plotting, data, optimizers); the code of every kept
class is d2l's own, class for class and attribute for attribute, `d2l.xxx` replaced by the local name and d2l's tensor
aliases (`d2l.astype`, `d2l.reshape`, ...) defined here as d2l defines them. As in d2l, the attention's `W_q`, `W_k`,
`w_v` and the decoder's `dense` are `nn.LazyLinear`: call the model once (`run_once`) before reading its parameters.

Calling: `model(enc_X, dec_X, enc_valid_lens)`, d2l's `EncoderDecoder.forward(enc_X, dec_X, *args)` fed its batch
`(src, tgt, src_valid_len)`: token ids `enc_X` [batch, src_steps] and `dec_X` [batch, tgt_steps] (int64), the source's
valid lengths [batch] (or None: no masking). The valid lengths are not optional: the decoder's `init_state` needs them.
Returns logits [batch, tgt_steps, tgt_vocab].
"""

from __future__ import annotations

import inspect

import torch
from torch import nn
from torch.nn import functional as F

# d2l/torch.py's tensor aliases (end of the file), those the classes below use
float32 = torch.float32
int64 = torch.int64
reshape = lambda x, *args, **kwargs: x.reshape(*args, **kwargs)  # noqa: E731
reduce_sum = lambda x, *args, **kwargs: x.sum(*args, **kwargs)  # noqa: E731
argmax = lambda x, *args, **kwargs: x.argmax(*args, **kwargs)  # noqa: E731
astype = lambda x, *args, **kwargs: x.type(*args, **kwargs)  # noqa: E731
transpose = lambda x, *args, **kwargs: x.t(*args, **kwargs)  # noqa: E731
reduce_mean = lambda x, *args, **kwargs: x.mean(*args, **kwargs)  # noqa: E731

nn_Module = nn.Module


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
    """d2l.Module: the base class of models (an nn.Module)."""

    def __init__(self, plot_train_per_epoch=2, plot_valid_per_epoch=1):
        super().__init__()
        self.save_hyperparameters()
        self.board = ProgressBoard()

    def loss(self, y_hat, y):
        raise NotImplementedError

    def forward(self, X):
        assert hasattr(self, "net"), "Neural network is defined"
        return self.net(X)

    def apply_init(self, inputs, init=None):
        """Defined in :numref:`sec_lazy_init`"""
        self.forward(*inputs)
        if init is not None:
            self.net.apply(init)


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
        return F.cross_entropy(Y_hat, Y, reduction="mean" if averaged else "none")


class RNN(Module):
    """d2l.RNN: the RNN model implemented with high-level APIs."""

    def __init__(self, num_inputs, num_hiddens):
        super().__init__()
        self.save_hyperparameters()
        self.rnn = nn.RNN(num_inputs, num_hiddens)

    def forward(self, inputs, H=None):
        return self.rnn(inputs, H)


class GRU(RNN):
    """d2l.GRU: the multilayer GRU model."""

    def __init__(self, num_inputs, num_hiddens, num_layers, dropout=0):
        Module.__init__(self)
        self.save_hyperparameters()
        self.rnn = nn.GRU(num_inputs, num_hiddens, num_layers, dropout=dropout)


class Encoder(nn.Module):
    """d2l.Encoder: the base encoder interface for the encoder--decoder architecture."""

    def __init__(self):
        super().__init__()

    # Later there can be additional arguments (e.g., length excluding padding)
    def forward(self, X, *args):
        raise NotImplementedError


class Decoder(nn.Module):
    """d2l.Decoder: the base decoder interface for the encoder--decoder architecture."""

    def __init__(self):
        super().__init__()

    # Later there can be additional arguments (e.g., length excluding padding)
    def init_state(self, enc_all_outputs, *args):
        raise NotImplementedError

    def forward(self, X, state):
        raise NotImplementedError


class EncoderDecoder(Classifier):
    """d2l.EncoderDecoder: the base class for the encoder--decoder architecture."""

    def __init__(self, encoder, decoder):
        super().__init__()
        self.encoder = encoder
        self.decoder = decoder

    def forward(self, enc_X, dec_X, *args):
        enc_all_outputs = self.encoder(enc_X, *args)
        dec_state = self.decoder.init_state(enc_all_outputs, *args)
        # Return decoder output only
        return self.decoder(dec_X, dec_state)[0]


def init_seq2seq(module):
    """Initialize weights for sequence-to-sequence learning.

    Defined in :numref:`sec_seq2seq`"""
    if type(module) == nn.Linear:  # noqa: E721
        nn.init.xavier_uniform_(module.weight)
    if type(module) == nn.GRU:  # noqa: E721
        for param in module._flat_weights_names:
            if "weight" in param:
                nn.init.xavier_uniform_(module._parameters[param])


class Seq2SeqEncoder(Encoder):
    """d2l.Seq2SeqEncoder: the RNN encoder for sequence-to-sequence learning."""

    def __init__(self, vocab_size, embed_size, num_hiddens, num_layers, dropout=0):
        super().__init__()
        self.embedding = nn.Embedding(vocab_size, embed_size)
        self.rnn = GRU(embed_size, num_hiddens, num_layers, dropout)
        self.apply(init_seq2seq)

    def forward(self, X, *args):
        # X shape: (batch_size, num_steps)
        embs = self.embedding(astype(transpose(X), int64))
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
        maxlen = X.size(1)
        mask = torch.arange((maxlen), dtype=torch.float32, device=X.device)[None, :] < valid_len[:, None]
        X[~mask] = value
        return X

    if valid_lens is None:
        return nn.functional.softmax(X, dim=-1)
    else:
        shape = X.shape
        if valid_lens.dim() == 1:
            valid_lens = torch.repeat_interleave(valid_lens, shape[1])
        else:
            valid_lens = valid_lens.reshape(-1)
        # On the last axis, replace masked elements with a very large negative
        # value, whose exponentiation outputs 0
        X = _sequence_mask(X.reshape(-1, shape[-1]), valid_lens, value=-1e6)
        return nn.functional.softmax(X.reshape(shape), dim=-1)


class AdditiveAttention(nn.Module):
    """d2l.AdditiveAttention: additive attention."""

    def __init__(self, num_hiddens, dropout, **kwargs):
        super(AdditiveAttention, self).__init__(**kwargs)  # noqa: UP008
        self.W_k = nn.LazyLinear(num_hiddens, bias=False)
        self.W_q = nn.LazyLinear(num_hiddens, bias=False)
        self.w_v = nn.LazyLinear(1, bias=False)
        self.dropout = nn.Dropout(dropout)

    def forward(self, queries, keys, values, valid_lens):
        queries, keys = self.W_q(queries), self.W_k(keys)
        # After dimension expansion, shape of queries: (batch_size, no. of
        # queries, 1, num_hiddens) and shape of keys: (batch_size, 1, no. of
        # key-value pairs, num_hiddens). Sum them up with broadcasting
        features = queries.unsqueeze(2) + keys.unsqueeze(1)
        features = torch.tanh(features)
        # There is only one output of self.w_v, so we remove the last
        # one-dimensional entry from the shape. Shape of scores: (batch_size,
        # no. of queries, no. of key-value pairs)
        scores = self.w_v(features).squeeze(-1)
        self.attention_weights = masked_softmax(scores, valid_lens)
        # Shape of values: (batch_size, no. of key-value pairs, value
        # dimension)
        return torch.bmm(self.dropout(self.attention_weights), values)


class AttentionDecoder(Decoder):
    """d2l.AttentionDecoder: the base attention-based decoder interface."""

    def __init__(self):
        super().__init__()

    @property
    def attention_weights(self):
        raise NotImplementedError


class Seq2SeqAttentionDecoder(AttentionDecoder):
    """Seq2SeqAttentionDecoder of d2l's Bahdanau attention chapter (not in d2l/torch.py; the chapter's pytorch tab)."""

    def __init__(self, vocab_size, embed_size, num_hiddens, num_layers, dropout=0):
        super().__init__()
        self.attention = AdditiveAttention(num_hiddens, dropout)
        self.embedding = nn.Embedding(vocab_size, embed_size)
        self.rnn = nn.GRU(embed_size + num_hiddens, num_hiddens, num_layers, dropout=dropout)
        self.dense = nn.LazyLinear(vocab_size)
        self.apply(init_seq2seq)

    def init_state(self, enc_outputs, enc_valid_lens):
        # Shape of outputs: (num_steps, batch_size, num_hiddens).
        # Shape of hidden_state: (num_layers, batch_size, num_hiddens)
        outputs, hidden_state = enc_outputs
        return (outputs.permute(1, 0, 2), hidden_state, enc_valid_lens)

    def forward(self, X, state):
        # Shape of enc_outputs: (batch_size, num_steps, num_hiddens).
        # Shape of hidden_state: (num_layers, batch_size, num_hiddens)
        enc_outputs, hidden_state, enc_valid_lens = state
        # Shape of the output X: (num_steps, batch_size, embed_size)
        X = self.embedding(X).permute(1, 0, 2)
        outputs, self._attention_weights = [], []
        for x in X:
            # Shape of query: (batch_size, 1, num_hiddens)
            query = torch.unsqueeze(hidden_state[-1], dim=1)
            # Shape of context: (batch_size, 1, num_hiddens)
            context = self.attention(query, enc_outputs, enc_outputs, enc_valid_lens)
            # Concatenate on the feature dimension
            x = torch.cat((context, torch.unsqueeze(x, dim=1)), dim=-1)
            # Reshape x as (1, batch_size, embed_size + num_hiddens)
            out, hidden_state = self.rnn(x.permute(1, 0, 2), hidden_state)
            outputs.append(out)
            self._attention_weights.append(self.attention.attention_weights)
        # After fully connected layer transformation, shape of outputs:
        # (num_steps, batch_size, vocab_size)
        outputs = self.dense(torch.cat(outputs, dim=0))
        return outputs.permute(1, 0, 2), [enc_outputs, hidden_state, enc_valid_lens]

    @property
    def attention_weights(self):
        return self._attention_weights


# --- factories for the tests (not d2l's) ---


def bahdanau_seq2seq(src_vocab=20, tgt_vocab=18, embed_size=8, num_hiddens=16, num_layers=2, dropout=0.0, tgt_pad=0):
    """The model as the Bahdanau chapter builds it (`len(data.src_vocab)`, `len(data.tgt_vocab)` -> src_vocab,
    tgt_vocab; `tgt_pad=data.tgt_vocab['<pad>']`, whose index depends on the data's sorted vocabulary, -> tgt_pad).
    Its lazy layers are unmaterialised until the first call: see `run_once`."""
    encoder = Seq2SeqEncoder(src_vocab, embed_size, num_hiddens, num_layers, dropout)
    decoder = Seq2SeqAttentionDecoder(tgt_vocab, embed_size, num_hiddens, num_layers, dropout)
    return Seq2Seq(encoder, decoder, tgt_pad=tgt_pad, lr=0.005)


def example_batch(batch=3, src_steps=7, tgt_steps=5, src_vocab=20, tgt_vocab=18, seed=0):
    """(src, tgt, src_valid_len): int64 token ids [batch, src_steps], [batch, tgt_steps], valid lengths [batch]."""
    g = torch.Generator().manual_seed(seed)
    src = torch.randint(0, src_vocab, (batch, src_steps), generator=g)
    tgt = torch.randint(0, tgt_vocab, (batch, tgt_steps), generator=g)
    src_valid_len = torch.randint(1, src_steps + 1, (batch,), generator=g)
    return src, tgt, src_valid_len


def run_once(model, src, tgt, src_valid_len=None):
    """One forward pass, `model(src, tgt, src_valid_len)`, materialising the `nn.LazyLinear` layers; returns the logits
    [batch, tgt_steps, tgt_vocab]. `src_valid_len=None` means no masking (d2l's masked_softmax then is a softmax)."""
    with torch.no_grad():
        return model(src, tgt, src_valid_len)
