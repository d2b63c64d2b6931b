"""The model catalogue: every model of the five source documents, by the name both stacks build it under.

Each entry says which document and class it follows, which module and class implement it in
`torch_impl/` and `tf_impl/` (the same in both), its document-default config, the small fixture config
the equality tests use (all dimensions distinct, so a missing transpose cannot pass), and the tolerance
the equality policy grants it, with the reason for any override.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from types import MappingProxyType

DOCUMENTS = {
    "000": "000_54ddd9fdfef18775.txt",
    "001": "001_53808794ad28b78b.txt",
    "002": "002_c293ad85667b8fb0.txt",
    "003": "003_b5e5fc45bfc80153.txt",
    "004": "004_1820e7ea9d3d655d.txt",
}

# Special token ids of the synthetic reverse task (document 001 gives none; ours).
PAD_ID, SOS_ID, EOS_ID = 0, 1, 2


@dataclass(frozen=True)
class Tolerance:
    """The equality policy of DESIGN.md; a model that needs more says why in `reason`."""

    f64_outputs: float = 1e-12
    f32_abs: float = 1e-5
    f32_rel: float = 1e-5
    f64_grads: float = 1e-10
    f32_grad_abs: float = 1e-5
    f32_grad_rel: float = 1e-4
    reason: str = "the policy of DESIGN.md, no override"


@dataclass(frozen=True)
class ModelSpec:
    """One catalogue entry.

    Args:
        interface: "seq2seq" (token batches: src, tgt_in, tgt_out -> logits, attention) or
            "attention" (vector batches: query, values -> context, attention).
        config: constructor arguments at the document's own sizes.
        fixture_config: the small constructor arguments of the equality fixtures.
        fixture_batch: batch sizes of the fixtures, `{"B": .., "S": .., "T": ..}`.
        dropout: how equality is proved where the model has dropout.
    """

    name: str
    document: str
    doc_class: str
    module: str
    class_name: str
    interface: str
    config: dict
    fixture_config: dict
    fixture_batch: dict = field(default_factory=lambda: {"B": 3, "S": 5, "T": 6})
    has_attention: bool = True
    built: bool = True
    pad_id: int = PAD_ID
    tolerance: Tolerance = Tolerance()
    dropout: str = "the model has no dropout"
    notes: str = ""

    @property
    def vocab_size(self) -> int | None:
        return self.fixture_config.get("vocab_size")


_REVERSE = {"vocab_size": 20, "embedding_dim": 64, "hidden_size": 128}
_REVERSE_FIXTURE = {"vocab_size": 19, "embedding_dim": 7, "hidden_size": 11}
_ATTN = {"attention_size": 128}
_ATTN_FIXTURE = {"attention_size": 13}


def _reverse(name, doc_class, class_name, attention=None, notes=""):
    """An entry of document 001 (the reverse task); `attention` adds the attention size to the config."""
    return ModelSpec(
        name=name,
        document="001",
        doc_class=doc_class,
        module="reverse_task",
        class_name=class_name,
        interface="seq2seq",
        config={**_REVERSE, **(_ATTN if attention else {})},
        fixture_config={**_REVERSE_FIXTURE, **(_ATTN_FIXTURE if attention else {})},
        has_attention=class_name != "ReverseTaskV0",
        notes=notes,
    )


def _planned(name, document, doc_class, module, class_name):
    """An entry whose implementation has not landed yet (its issue is open)."""
    return ModelSpec(name, document, doc_class, module, class_name, "seq2seq", {}, {}, built=False)


_ENTRIES = [
    ModelSpec(
        name="additive_attention",
        document="000",
        doc_class="AdditiveAttention",
        module="additive",
        class_name="AdditiveAttention",
        interface="attention",
        config={"encoder_dim": 100, "decoder_dim": 50},
        fixture_config={"encoder_dim": 7, "decoder_dim": 11},
        notes="unbatched as the document, also batched; v drawn from U[0, 1) as the listing's torch.rand",
    ),
    _reverse("reverse_rnn", "ReverseTaskV0", "ReverseTaskV0"),
    _reverse(
        "reverse_bahdanau",
        "ReverseTaskV6",
        "ReverseTaskV6",
        attention=True,
        notes="encoder projection W_h(enc_out) computed once, not at every step (same values)",
    ),
    _reverse(
        "reverse_bahdanau_concat",
        "Bahdanau concatenative (formula only)",
        "ReverseTaskBahdanauConcat",
        attention=True,
        notes="score v . tanh(W_a [s_{t-1}; h_i]); the document gives the formula, not the code",
    ),
    _reverse("reverse_luong_general", "ReverseTaskV7", "ReverseTaskV7"),
    _reverse("reverse_luong_dot", "ReverseTaskV8", "ReverseTaskV8"),
    _reverse(
        "reverse_luong_concat",
        "Luong concat (formula only)",
        "ReverseTaskLuongConcat",
        attention=True,
        notes="score v . tanh(W_a [s_t; h_i]) with the current state; the document gives the formula only",
    ),
    _planned("bahdanau_bigru", "002", "Seq2Seq", "bahdanau_bigru", "Seq2Seq"),
    _planned("luong_dot", "003", "Model (score_fn='dot')", "luong", "Model"),
    _planned("luong_general", "003", "Model (score_fn='general')", "luong", "Model"),
    _planned("luong_concat", "003", "Model (score_fn='concat')", "luong", "Model"),
    _planned("tf_tutorial", "004", "Encoder/Decoder/BahdanauAttention", "tf_tutorial", "Seq2Seq"),
]

CATALOGUE = MappingProxyType({spec.name: spec for spec in _ENTRIES})


def get(name: str) -> ModelSpec:
    """The entry for `name`; an unknown or not-yet-built name raises ValueError listing what exists."""
    spec = CATALOGUE.get(name)
    if spec is None:
        raise ValueError(f"unknown model {name!r}; the catalogue holds: {', '.join(CATALOGUE)}")
    if not spec.built:
        raise ValueError(f"model {name!r} (document {spec.document}) is not yet built")
    return spec


def built() -> list[str]:
    """Names of the models implemented in both stacks, in catalogue order."""
    return [name for name, spec in CATALOGUE.items() if spec.built]


DTYPES = ("float32", "float64")


def resolve_config(spec: ModelSpec, dtype: str, overrides: dict) -> dict:
    """The constructor config of `spec` with `overrides` applied; unknown keys or dtypes raise ValueError."""
    if dtype not in DTYPES:
        raise ValueError(f"dtype must be one of {', '.join(DTYPES)}, got {dtype!r}")
    unknown = sorted(set(overrides) - set(spec.config))
    if unknown:
        raise ValueError(f"model {spec.name!r} has no config {', '.join(unknown)}; it takes: {', '.join(spec.config)}")
    bad = {key: value for key, value in overrides.items() if not isinstance(value, int) or value <= 0}
    if bad:
        raise ValueError(f"model {spec.name!r}: config sizes must be positive integers, got {bad}")
    return {**spec.config, **overrides}


def check_teacher_forcing(spec: ModelSpec, teacher_forcing) -> None:
    """Document 001's models always feed the true previous token: a schedule for them is a mistake."""
    if teacher_forcing is not None:
        raise ValueError(f"model {spec.name!r} always teacher-forces (document {spec.document}); pass teacher_forcing=None")
