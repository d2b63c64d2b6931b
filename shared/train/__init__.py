"""Training runs on real corpora (`rosetta train / evaluate / translate`): the runner, evaluation, metrics and
attention heatmaps."""
