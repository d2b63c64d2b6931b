"""The five source documents, one row each: every fact the suite keeps about a document lives here.

A row names the document's file (in `../shared/seeds/`), the dataset its models train on, its training setup
(batch, epochs, the TrainSpec), the figures it reports and how it computed them, and the sizes its models are
benchmarked at. The models themselves are in shared.catalogue, each naming its document.
"""

from __future__ import annotations

from dataclasses import dataclass
from types import MappingProxyType

from shared import catalogue
from shared.specs import Sizes, TrainSpec


@dataclass(frozen=True)
class Training:
    """How a document's models train: batch size, epochs and the optimiser setup (`why`: where it comes from).

    Args:
        steps_per_epoch: an epoch of this many batches from the repeated, reshuffled training data (Keras's
            `fit(train_ds.repeat(), steps_per_epoch=...)`); None: an epoch is one pass over the data.
        eval_batches: validation batches after each epoch (Keras's `validation_steps`); None: the whole split.
        patience: stop when the validation loss has not improved for this many epochs (Keras's
            `EarlyStopping(patience=...)`, monitoring `val_loss`); None: every epoch.
    """

    batch_size: int
    epochs: int
    spec: TrainSpec
    why: str
    steps_per_epoch: int | None = None
    eval_batches: int | None = None
    patience: int | None = None


@dataclass(frozen=True)
class Reported:
    """The figures a document reports for one of its models, and the protocol it computed them with."""

    model: str
    figures: dict
    teacher_force_ratio: float  # the ratio its evaluation decodes with
    count_first_position: bool  # whether its loss counts position 0 (whose logits are a zero row)
    how: str

    @property
    def protocol(self) -> dict:
        return {"teacher_force_ratio": self.teacher_force_ratio, "count_first_position": self.count_first_position}


@dataclass(frozen=True)
class Document:
    """One source document.

    Args:
        file: its file in `../shared/seeds/`.
        dataset: "reverse", "multi30k", "spa_eng", or None (it trains nothing).
        sizes: its models' training batch shape, as `rosetta bench` times them (real-data lengths: typical
            padded batch lengths; Multi30k batches padded to a multiple of 8: 24; spa-eng: the tutorial's 16, 10).
    """

    number: str
    file: str
    dataset: str | None
    training: Training | None
    reported: Reported | None
    sizes: Sizes


DOCUMENTS = MappingProxyType({
    "000": Document("000", "000_54ddd9fdfef18775.txt", None, None, None, Sizes(32, 10, 10)),
    "001": Document(
        "001", "001_53808794ad28b78b.txt", "reverse",
        Training(32, 10, TrainSpec(lr=5e-4, clip_norm=1.0),
                 "document 001 shows no training loop; ours: its batch of 32, Adam at lr 5e-4, clip 1.0 (measured with "
                 "reverse_bahdanau: Adam's default 1e-3 without clipping oscillates and ends at 88% sequence accuracy)"),
        None, Sizes(32, 10, 10),
    ),
    "002": Document(
        "002", "002_c293ad85667b8fb0.txt", "multi30k",
        Training(128, 10, TrainSpec(clip_norm=1.0, teacher_force_ratio=0.5),
                 "Ben Trevett's tutorial for this architecture: Adam, clip 1, teacher forcing 0.5, batch 128, 10 epochs"),
        Reported("bahdanau_bigru", {"test perplexity": 25.6, "test BLEU": 28.3}, 0.0, False,
                 "Ben Trevett's published figures for this architecture: evaluate with teacher forcing off, "
                 "BLEU on greedy translations of at most 50 tokens"),
        Sizes(128, 24, 24),
    ),
    "003": Document(
        "003", "003_b5e5fc45bfc80153.txt", "multi30k",
        Training(128, 10, TrainSpec(clip_norm=1.0, teacher_force_ratio=0.5),
                 "document 003: Adam, clip 1.0, 10 epochs, batch 128, Model.forward's teacher_force_ratio 0.5"),
        Reported("luong_general", {"test loss": 2.63, "test perplexity": 13.84}, 0.5, True,
                 "its `step` evaluates with Model.forward's default teacher_force_ratio 0.5 and counts position 0, "
                 "whose logits are the zero row (log V per sentence); it also leaves dropout on, which we do not copy"),
        Sizes(128, 24, 24),
    ),
    "004": Document(
        "004", "004_1820e7ea9d3d655d.txt", "spa_eng",
        Training(64, 10, TrainSpec(eps=1e-7, clip_norm=None),
                 "the TensorFlow tutorial: Adam (Keras defaults; eps 1e-7), no clipping, teacher forcing, batch 64, "
                 "10 epochs"),
        None, Sizes(64, 16, 10),
    ),
})  # fmt: skip


# a model that trains otherwise than its document's others: the recipe of the source it follows
MODEL_TRAINING = MappingProxyType({
    "tf_tutorial_mha": Training(
        64, 100, TrainSpec(eps=1e-7, clip_norm=None),
        "the 2022 TensorFlow tutorial: Adam (Keras defaults; eps 1e-7), no clipping, batch 64, fit(train_ds.repeat(), "
        "epochs=100, steps_per_epoch=100, validation_steps=20, callbacks=[EarlyStopping(patience=3)])",
        steps_per_epoch=100, eval_batches=20, patience=3,
    ),
})  # fmt: skip


def training_for_model(name: str) -> Training | None:
    """How catalogue model `name` trains: its own recipe (MODEL_TRAINING), else its document's; None: it trains nothing."""
    return MODEL_TRAINING.get(name) or get(catalogue.get(name).document).training


def get(number: str) -> Document:
    """The document numbered `number` ("000" to "004"); ValueError naming the known ones otherwise."""
    if number not in DOCUMENTS:
        raise ValueError(f"unknown document {number!r}; known: {', '.join(DOCUMENTS)}")
    return DOCUMENTS[number]


def with_reports() -> list[Document]:
    """The documents that report figures, in order."""
    return [document for document in DOCUMENTS.values() if document.reported is not None]


def dataset_for_model(name: str) -> str | None:
    """The dataset a catalogue model trains on: "reverse", "multi30k", "spa_eng", or None (no seq2seq data)."""
    spec = catalogue.CATALOGUE.get(name)
    if spec is None:
        raise ValueError(f"unknown model {name!r}; the catalogue holds: {', '.join(catalogue.CATALOGUE)}")
    return spec.dataset or get(spec.document).dataset
