"""Fine-tuning a Keras port of a Hugging Face seq2seq model with Keras's `fit`, as HF's PyTorch loop trains it.

Follows transformers 5.23 models/marian/modeling_marian.py (MarianMTModel.forward with `labels`): the labels -> decoder
inputs shift of shift_tokens_right, no decoder attention mask, and CrossEntropyLoss (ignore_index -100, the mean over
the kept tokens). Legend: B batch, S source length, T target length, V vocabulary.

    model = marian.MarianSeq2SeqLM.from_hf_config(config, dtype="float64")
    fine_tuning.compile_for_fine_tuning(model, TorchAdamW(1e-3, weight_decay=0.01))
    x, y = fine_tuning.keras_batch(input_ids, attention_mask, labels, pad_token_id=58100, decoder_start_token_id=58100)
    model.fit(x, y, batch_size=16, shuffle=False)
"""

from __future__ import annotations

import keras
import numpy as np
from keras import ops

from tf_impl.fitting import floatx_as

IGNORE_INDEX = -100  # torch.nn.CrossEntropyLoss's ignore_index: HF's labels at padding


def shift_tokens_right(labels, pad_token_id: int, decoder_start_token_id: int) -> np.ndarray:
    """HF's shift_tokens_right: decoder inputs [B, T] are the labels moved one right, decoder_start_token_id first,
    the ignored labels (-100) read as pad_token_id."""
    labels = np.asarray(labels)  # [B, T]
    shifted = np.empty_like(labels)  # [B, T]
    shifted[:, 1:] = labels[:, :-1]
    shifted[:, 0] = decoder_start_token_id
    return np.where(shifted == IGNORE_INDEX, pad_token_id, shifted).astype("int32")  # [B, T]


def _check_ids(name: str, ids: np.ndarray, vocabulary: int | None, allowed: tuple = ()) -> None:
    if ids.ndim != 2 or not np.issubdtype(ids.dtype, np.integer):
        raise ValueError(f"fine-tuning batch field {name!r}: expected integer ids [B, L], got {ids.dtype} of shape {ids.shape}")
    bad = ids[~np.isin(ids, allowed) & ((ids < 0) | (ids >= (vocabulary or np.iinfo(ids.dtype).max)))]
    if bad.size:
        raise ValueError(f"fine-tuning batch field {name!r}: ids {sorted(set(bad.tolist()))[:5]} are outside the vocabulary "
                         f"[0, {vocabulary}){' and not -100' if allowed else ''}")  # fmt: skip


def _check_batch(input_ids, attention_mask, labels, vocabulary, decoder_vocabulary) -> None:
    _check_ids("input_ids", input_ids, vocabulary)
    _check_ids("labels", labels, decoder_vocabulary, allowed=(IGNORE_INDEX,))
    if attention_mask.shape != input_ids.shape or not np.isin(attention_mask, (0, 1)).all():
        raise ValueError(f"fine-tuning batch field 'attention_mask': expected 0/1 of input_ids' shape {input_ids.shape}, "
                         f"got shape {attention_mask.shape}")  # fmt: skip
    if labels.shape[0] != input_ids.shape[0]:
        raise ValueError(f"fine-tuning batch field 'labels': {labels.shape[0]} rows, input_ids has {input_ids.shape[0]}")


def keras_batch(input_ids, attention_mask, labels, pad_token_id: int, decoder_start_token_id: int, vocabulary_size=None,
                decoder_vocabulary_size=None) -> tuple[dict, np.ndarray]:  # fmt: skip
    """HF's fine-tuning batch (input_ids [B, S], attention_mask [B, S], labels [B, T] with -100 at padding) as
    Keras's `(x, y)`: x the Seq2SeqLM's four inputs, y the labels. The decoder's padding mask is all ones: HF's forward
    with labels passes no decoder attention mask (causal only); the positions it differs at are ignored by the loss.
    Ids are checked (vocabulary sizes, when given, bound them): one ValueError naming the field."""
    input_ids, attention_mask, labels = (np.asarray(a) for a in (input_ids, attention_mask, labels))
    _check_batch(input_ids, attention_mask, labels, vocabulary_size, decoder_vocabulary_size)
    decoder_token_ids = shift_tokens_right(labels, pad_token_id, decoder_start_token_id)  # [B, T]
    x = {"encoder_token_ids": input_ids.astype("int32"), "encoder_padding_mask": attention_mask.astype("int32"),
         "decoder_token_ids": decoder_token_ids, "decoder_padding_mask": np.ones_like(decoder_token_ids)}  # fmt: skip
    return x, labels.astype("int32")


@keras.saving.register_keras_serializable(package="rosetta_hf")
class HFCrossEntropy(keras.losses.Loss):
    """MarianMTModel's loss, torch's CrossEntropyLoss(ignore_index=-100) on the logits: -log softmax at each label,
    summed over the kept labels and divided by their count (padding neither adds nor counts; a batch whose labels are
    all -100 gives nan, as torch's). In `dtype` (Keras's default, floatx, would compute a float64 model's in float32)."""

    def __init__(self, ignore_index: int = IGNORE_INDEX, name="hf_cross_entropy", dtype=None, **kwargs):
        super().__init__(name=name, reduction="sum", dtype=dtype, **kwargs)  # `call` returns the batch's mean: summed alone
        self.ignore_index = ignore_index

    def call(self, y_true, y_pred):
        labels = ops.cast(y_true, "int32")  # [B, T] (Keras hands them in the loss's dtype)
        kept = ops.not_equal(labels, self.ignore_index)  # [B, T]
        log_probs = ops.log_softmax(y_pred, axis=-1)  # [B, T, V]
        picked = ops.take_along_axis(log_probs, ops.where(kept, labels, 0)[..., None], axis=-1)[..., 0]  # [B, T]
        total = -ops.sum(ops.where(kept, picked, ops.zeros_like(picked)))
        return total / ops.sum(ops.cast(kept, picked.dtype))

    def get_config(self):
        return {**super().get_config(), "ignore_index": self.ignore_index}

    @classmethod
    def from_config(cls, config):
        config = {k: v for k, v in config.items() if k != "reduction"}
        return cls(**config)


def compile_for_fine_tuning(model, optimizer, loss=None, **compile_options) -> None:
    """`model.compile` with HF's loss in the model's dtype (default), the loss tracker made in that dtype too (Keras's
    makes it in floatx: a float64 model's reported loss would be rounded to float32)."""
    with floatx_as(model.compute_dtype):
        model.compile(optimizer=optimizer, loss=loss or HFCrossEntropy(dtype=model.compute_dtype), **compile_options)


class StepLosses(keras.callbacks.Callback):
    """Each `fit` step's own loss in `losses` (the metrics reset before every step: Keras's logs otherwise hold the
    epoch's running mean), as a PyTorch loop's `loss.item()` per step."""

    def __init__(self):
        super().__init__()
        self.losses: list[float] = []

    def on_train_batch_begin(self, batch, logs=None):
        self.model.reset_metrics()

    def on_train_batch_end(self, batch, logs=None):
        self.losses.append(float(logs["loss"]))
