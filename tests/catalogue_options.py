"""The catalogue options third-party tutorial layouts need (document 002: distinct embedding sizes and
`attention_bias=False`, after Trevett's notebook 3; document 004: `w1_on_query`, the 2021 revision), as cases for the
tests of tests/{shared,stack,tf,cross}/test_catalogue_options.py: a model built with them, and what it computes."""

from __future__ import annotations

from shared import catalogue
from shared.verify import fixtures

# (model, overrides): each option alone, then with the other options of its model
OPTIONS = {
    "bigru-no-bias": ("bahdanau_bigru", {"attention_bias": False}),
    "bigru-embed-sizes": ("bahdanau_bigru", {"encoder_embed_dim": 6, "decoder_embed_dim": 4}),
    "bigru-trevett": ("bahdanau_bigru", {"encoder_embed_dim": 6, "decoder_embed_dim": 4, "attention_bias": False}),
    "tutorial-2021": ("tf_tutorial", {"w1_on_query": True}),
    "tutorial-2021-fed": ("tf_tutorial", {"w1_on_query": True, "feed_state": True}),
}


def weight_shapes(stack, model) -> dict[str, tuple]:
    return {key: array.shape for key, array in stack.get_weights(model).items()}


def option_model(stack, name: str, overrides: dict, dtype: str = "float64", weights=None, **build_options):
    """`name` at its fixture config with `overrides`, holding `weights` (default: drawn for its shapes)."""
    model = stack.build(name, dtype, **build_options, **{**catalogue.get(name).fixture_config, **overrides})
    stack.set_weights(
        model, fixtures.make_weights(f"{name}/options", weight_shapes(stack, model)) if weights is None else weights
    )
    return model


def option_results(stack, model, name: str) -> dict:
    """Outputs (with the fixture's mixed teacher-forcing schedule), loss, gradients and greedy decoding."""
    spec = catalogue.get(name)
    batch, schedule = fixtures.make_batch(spec), fixtures.make_schedule(spec)
    loss, grads = stack.loss_and_grads(model, name, batch, teacher_forcing=schedule)
    return {
        "outputs": stack.run(model, name, batch, teacher_forcing=schedule),
        "loss": loss,
        "grads": grads,
        "greedy": stack.greedy(model, name, batch, max_len=batch["tgt_in"].shape[1] + fixtures.GREEDY_EXTRA_STEPS),
    }
