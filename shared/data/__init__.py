"""The data of the source documents: the synthetic reverse task, Multi30k and Tatoeba spa-eng (two ways), and batches.

- "reverse" (document 001): random token ids, the target is the source reversed; no download.
- "multi30k" (documents 002/003): the WMT16 task-1 release, German -> English, tokenized as Ben Trevett's
  tutorials did (spaCy's rule-based tokenizers, lowercased, min_freq 2: 7,853 / 5,893 types).
- "spa_eng" (document 004, the TensorFlow "nmt_with_attention" tutorial of the TF 2.0 era): the first
  30,000 Tatoeba pairs, Spanish -> English, the tutorial's `preprocess_sentence` and Keras word index.
- "spa_eng_2022" (the 2022 rewrite of that tutorial): all 118,964 pairs, Spanish -> English, split 80/20 at
  random, `tf_lower_and_split_punct` (`readers.standardize_2022`) and TextVectorization vocabularies adapted
  on the train split (max_tokens 5000, `''` and `[UNK]` first, so val has unknown words); no tensorflow-text.
- "corpus": your own parallel text (`rosetta train MODEL --corpus DIR --langs SRC,TGT`, shared.data.parallel):
  train/valid/test files per language, plain or .gz, read once, streaming; the specials laid out for the model.

The data sets are read from a folder the user names (`--data-dir` or ROSETTA_DATA_DIR); nothing is ever
downloaded. A `Corpus` holds token ids per split and both vocabularies; `Corpus.save` / `Corpus.load`
keep a prepared corpus (npz + JSON), so a machine without spaCy can train on it. `batches` pads and
buckets: `src [B, S]`, `src_len [B]`, `tgt_in [B, T]`, `tgt_out [B, T]`, int64.
"""

from __future__ import annotations

import os
from pathlib import Path

from shared.core import moved
from shared.data import parallel, parallel_options
from shared.data.corpora import CORPUS_FILE, DATASETS, OWN_CORPUS, Corpus
from shared.data.readers import read_multi30k, read_spa_eng, read_spa_eng_2022, reverse_corpus

__getattr__ = moved.getattr_for(__name__)  # the readers and batches that moved to readers.py and corpora.py warn

ENV_VAR = "ROSETTA_DATA_DIR"
# the defaults of `load_corpus`'s options, per dataset; any other option name is an error
OPTIONS = {
    # document 001 gives no data sizes; these are ours
    "reverse": {"train_size": 10_000, "val_size": 1_000, "test_size": 1_000, "seq_len": 10, "vocab_size": 20, "seed": 0},
    "multi30k": {"min_freq": 2},
    # the old tutorial: first 30,000 lines, sklearn train_test_split(test_size=0.2), unseeded
    "spa_eng": {"num_examples": 30_000, "val_fraction": 0.2, "seed": 0},
    # the 2022 tutorial: all lines, np.random.uniform(size=N) < 0.8, unseeded; TextVectorization(max_tokens=5000)
    "spa_eng_2022": {"max_vocab_size": 5000, "val_fraction": 0.2, "seed": 0},
    # a folder of your own (shared.data.parallel): path, langs and the model's specials (parallel_options.layout) are needed
    OWN_CORPUS: parallel_options.OPTIONS,
}


# ---------------------------------------------------------------- where the data is, which model uses what


def resolve_data_dir(cli_value: str | os.PathLike | None) -> Path:
    """The data folder: `cli_value` (--data-dir), else $ROSETTA_DATA_DIR; it must exist."""
    if cli_value:
        path, origin = Path(cli_value), f"--data-dir {cli_value}"
    elif os.environ.get(ENV_VAR):
        path, origin = Path(os.environ[ENV_VAR]), f"{ENV_VAR}={os.environ[ENV_VAR]}"
    else:
        raise ValueError(f"no data folder given: pass --data-dir or set {ENV_VAR} (the folder holding multi30k/ and spa-eng/)")
    if not path.is_dir():
        raise ValueError(f"the data folder {path} (from {origin}) does not exist or is not a folder")
    return path


# ---------------------------------------------------------------- one entry point


def load_corpus(
    dataset: str,
    data_dir: str | os.PathLike | None = None,
    cache_dir: str | os.PathLike | None = None,
    *,
    progress: bool = False,
    **options,
) -> Corpus:
    """The corpus of `dataset` (one of DATASETS) with `options` (see OPTIONS for names and defaults).

    `data_dir` goes through `resolve_data_dir` (--data-dir, else $ROSETTA_DATA_DIR); the reverse task
    and an own corpus (`OWN_CORPUS`: its folder is the option `path`) need none. With `cache_dir`, a corpus
    saved there is loaded (its dataset and options must match; an own corpus's files must not have changed) or
    the new one is saved there, so a later run needs neither the data files nor spaCy. `progress`: an own
    corpus's progress bar and summary on stderr.
    """
    if dataset not in DATASETS:
        raise ValueError(f"unknown dataset {dataset!r}; known: {', '.join(DATASETS)}")
    unknown = sorted(set(options) - set(OPTIONS[dataset]))
    if unknown:
        raise ValueError(f"dataset {dataset!r} takes no option {', '.join(unknown)}; it takes: {', '.join(OPTIONS[dataset])}")
    options = parallel_options.normalize(options) if dataset == OWN_CORPUS else {**OPTIONS[dataset], **options}
    if cache_dir is not None and (Path(cache_dir) / CORPUS_FILE).is_file():
        corpus = Corpus.load(cache_dir)
        if dataset == OWN_CORPUS:
            parallel_options.check_saved(corpus, options, cache_dir)
        elif (corpus.name, corpus.options) != (dataset, options):
            raise ValueError(
                f"the corpus saved in {cache_dir} is {corpus.name} with {corpus.options}, not {dataset} with {options}; "
                "use another cache folder or delete it"
            )
        return corpus
    if dataset == "reverse":
        corpus = reverse_corpus(**options)
    elif dataset == "multi30k":
        corpus = read_multi30k(resolve_data_dir(data_dir), **options)
    elif dataset == "spa_eng":
        corpus = read_spa_eng(resolve_data_dir(data_dir), **options)
    elif dataset == OWN_CORPUS:
        corpus = parallel.read_corpus(progress=progress, **options)
    else:
        corpus = read_spa_eng_2022(resolve_data_dir(data_dir), **options)
    if cache_dir is not None:
        corpus.save(cache_dir)
    return corpus
