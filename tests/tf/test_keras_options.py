"""A `.keras` file keeps each catalogue option (tests/catalogue_options.py): its config, types and weights, and the
loaded model computes what the saved one did."""

from __future__ import annotations

import numpy as np
import pytest

from shared import catalogue
from shared.verify import fixtures
from shared.verify.equality import assert_close
from tests.catalogue_options import OPTIONS, option_model
from tests.conftest import STACK_MODULES


@pytest.mark.parametrize("case", OPTIONS)
def test_a_keras_file_keeps_the_options(tmp_path, case):
    from tf_impl.files import load_keras, save_keras

    tf_impl = STACK_MODULES["tf"]
    name, overrides = OPTIONS[case]
    model = option_model(tf_impl, name, overrides)
    save_keras(model, tmp_path / "model.keras")
    loaded, _ = load_keras(tmp_path / "model.keras")
    assert loaded.rosetta_config == {**catalogue.get(name).fixture_config, **overrides}
    assert all(type(loaded.rosetta_config[k]) is type(v) for k, v in overrides.items())
    weights, again = tf_impl.get_weights(model), tf_impl.get_weights(loaded)
    assert again.keys() == weights.keys() and all(np.array_equal(again[k], weights[k]) for k in weights)
    batch = fixtures.make_batch(catalogue.get(name))
    assert_close(tf_impl.run(loaded, name, batch)["logits"], tf_impl.run(model, name, batch)["logits"], 0.0)


def test_the_runners_early_stopping_is_kerass_early_stopping():
    """shared.train.runner.stops_early against keras.callbacks.EarlyStopping(patience=p) (monitor val_loss, no
    min_delta, the weights not restored) on random validation curves, ties included."""
    import keras

    from shared.train.runner import stops_early

    class _Model:
        stop_training = False

    rng = np.random.default_rng(0)
    for trial in range(200):
        patience, losses = int(rng.integers(1, 4)), np.round(rng.uniform(0, 1, 12), 1).tolist()  # rounding makes ties
        callback, model = keras.callbacks.EarlyStopping(patience=patience), _Model()
        callback.set_model(model)
        callback.on_train_begin()
        for epoch, loss in enumerate(losses):
            callback.on_epoch_end(epoch, {"val_loss": loss})
            ours = stops_early([{"loss": value} for value in losses[: epoch + 1]], patience)
            assert ours == model.stop_training, (trial, patience, losses[: epoch + 1])
            if ours:
                break
