"""What an own parallel corpus is asked with (`rosetta train MODEL --corpus DIR --langs SRC,TGT`; shared.data.parallel
reads it): its options checked (`normalize`), the special tokens laid out for the model (`layout`), the files of its
folder (`find_files`), and a saved corpus checked against a request (`check_saved`: the options it was read with,
and its files unchanged since).

The folder holds `train.SRC` and `train.TGT`, a validation split `valid.*` (or `val.*`, `dev.*`) and optionally
`test.*` (without one the final evaluation uses the validation split, as `runs.final_split` does), each plain text
or `.gz` (shared.data.text_files). The four special tokens are laid out as the model's catalogue entry expects: its
pad, sos and eos ids, `<unk>` in the remaining slot of 0..3, named as its document's data named them (torchtext's
`<unk> <pad> <sos> <eos>`, the 2022 TensorFlow tutorial's `'' [UNK] [START] [END]`, ...).
"""

from __future__ import annotations

import re
from pathlib import Path

from shared import catalogue, documents
from shared.data import text_files
from shared.data.corpora import OWN_CORPUS, Corpus, check_count, trains_on_text

SPLIT_STEMS = {"train": ("train",), "val": ("valid", "val", "dev"), "test": ("test",)}  # split -> file stems
TOKENIZERS = ("spacy", "whitespace")
# the special tokens of each document's data (shared.data.readers), by role: the layout a model of that data expects
SPECIAL_NAMES = {
    "multi30k": {"unk": "<unk>", "pad": "<pad>", "sos": "<sos>", "eos": "<eos>"},  # torchtext (documents 002/003)
    "spa_eng": {"pad": "<pad>", "sos": "<start>", "eos": "<end>", "unk": "<unk>"},  # Keras Tokenizer (document 004)
    "spa_eng_2022": {"pad": "", "unk": "[UNK]", "sos": "[START]", "eos": "[END]"},  # TextVectorization (2022 tutorial)
}
ROLES = ("pad", "sos", "eos", "unk")
# load_corpus's options for an own corpus and their defaults (path, langs and the layout have none)
OPTIONS = {"path": None, "langs": None, "tokenizer": "spacy", "lowercase": True, "min_freq": 2, "max_vocab": None,
           "specials": None, "special_ids": None}  # fmt: skip
_LANG = re.compile(r"[A-Za-z][A-Za-z0-9_-]{0,31}")


def parse_langs(text) -> list[str]:
    """`"de,en"` -> `["de", "en"]`: two different language codes (file suffixes: letters, digits, `_`, `-`)."""
    langs = text.split(",") if isinstance(text, str) else list(text) if isinstance(text, (list, tuple)) else None
    if langs is None or len(langs) != 2 or not all(isinstance(lang, str) and _LANG.fullmatch(lang.strip()) for lang in langs):
        raise ValueError(
            f"--langs takes two language codes SRC,TGT, the suffixes of the corpus files (e.g. de,en for "
            f"train.de and train.en), got {text!r}"
        )
    langs = [lang.strip() for lang in langs]
    if langs[0] == langs[1]:
        raise ValueError(f"--langs names {langs[0]!r} twice: the source and target files need different suffixes")
    return langs


def layout(model: str) -> dict:
    """The special tokens `model` expects, as load_corpus's options: `specials` (the tokens of ids 0..3) and
    `special_ids` (pad, sos, eos from its catalogue entry, unk in the slot left). Refuses a model that trains on no
    sentence pairs (the reverse task, the attention layer alone)."""
    if not trains_on_text(model):
        what = documents.dataset_for_model(model)
        text_models = ", ".join(name for name in catalogue.CATALOGUE if trains_on_text(name))
        raise ValueError(
            f"model {model!r} trains on {'no data' if what is None else f'the synthetic {what} task'}, not on sentence "
            f"pairs: --corpus trains the models of real data ({text_models})"
        )
    spec = catalogue.get(model)
    ids = {"pad": spec.pad_id, "sos": spec.sos_id, "eos": spec.eos_id}
    free = sorted(set(range(len(ROLES))) - set(ids.values()))
    if len(free) != 1:
        raise ValueError(f"model {model!r}: its pad, sos and eos ids {ids} are not three of 0..3")
    ids["unk"] = free[0]
    names = SPECIAL_NAMES[documents.dataset_for_model(model)]
    specials = [""] * len(ROLES)
    for role, index in ids.items():
        specials[index] = names[role]
    return {"specials": specials, "special_ids": {f"{role}_id": ids[role] for role in ROLES}}


def normalize(options: dict) -> dict:
    """load_corpus's options for an own corpus, checked, in the form run.json keeps (JSON types, absolute path)."""
    unknown = sorted(set(options) - set(OPTIONS))
    if unknown:
        raise ValueError(f"an own corpus takes no option {', '.join(unknown)}; it takes: {', '.join(OPTIONS)}")
    options = {**OPTIONS, **options}
    if options["path"] is None or options["langs"] is None:
        raise ValueError("an own corpus needs its folder and languages: --corpus DIR --langs SRC,TGT")
    path = Path(options["path"]).expanduser()
    if not path.is_dir():
        raise ValueError(f"--corpus {options['path']}: no such folder (it should hold train.SRC, train.TGT, valid.*)")
    if options["tokenizer"] not in TOKENIZERS:
        raise ValueError(f"--tokenizer must be one of {', '.join(TOKENIZERS)}, got {options['tokenizer']!r}")
    if not isinstance(options["lowercase"], bool):
        raise ValueError(f"lowercase must be true or false, got {options['lowercase']!r}")
    min_freq = check_count("--min-freq", options["min_freq"])
    max_vocab = None if options["max_vocab"] is None else check_count("--max-vocab", options["max_vocab"], len(ROLES) + 1)
    specials, special_ids = options["specials"], options["special_ids"]
    if specials is None or special_ids is None:
        raise ValueError("an own corpus needs the model's special tokens: pass **parallel_options.layout(model)")
    if (
        not isinstance(specials, (list, tuple))
        or len(specials) != len(ROLES)
        or not isinstance(special_ids, dict)
        or sorted(special_ids) != sorted(f"{role}_id" for role in ROLES)
        or sorted(special_ids.values()) != list(range(len(ROLES)))
    ):
        raise ValueError(
            f"specials {specials!r} / special_ids {special_ids!r} are not a layout of four tokens (parallel_options.layout)"
        )
    return {"path": str(path.resolve()), "langs": parse_langs(options["langs"]), "tokenizer": options["tokenizer"],
            "lowercase": options["lowercase"], "min_freq": min_freq, "max_vocab": max_vocab, "specials": list(specials),
            "special_ids": dict(special_ids)}  # fmt: skip


def find_files(folder: str | Path, langs: list[str]) -> dict[str, tuple[Path, Path]]:
    """split -> (source file, target file): `train` and one of `valid`/`val`/`dev` required, `test` optional."""
    folder, found = Path(folder), {}
    for split, stems in SPLIT_STEMS.items():
        names = {lang: [f"{stem}.{lang}{end}" for stem in stems for end in ("", ".gz")] for lang in langs}
        present = {lang: [name for name in candidates if (folder / name).is_file()] for lang, candidates in names.items()}
        for lang, names_there in present.items():
            if len(names_there) > 1:
                raise ValueError(f"{folder} holds {' and '.join(names_there)}: keep one {split} file for {lang}")
        if not any(present.values()):
            if split == "test":
                continue
            tried = ", ".join(name for candidates in names.values() for name in candidates)
            raise ValueError(f"no {split} split in {folder}: looked for {tried}")
        for lang in langs:
            if not present[lang]:
                other = next(names_there[0] for names_there in present.values() if names_there)
                raise ValueError(f"{folder} has {other} but no {split} file for {lang}: looked for {', '.join(names[lang])}")
        found[split] = tuple(folder / present[lang][0] for lang in langs)
    stems = {path.name.split(".")[0] for paths in found.values() for path in paths}
    for split, (src, tgt) in found.items():
        if src.name.split(".")[0] != tgt.name.split(".")[0]:
            raise ValueError(f"the {split} split is {src.name} and {tgt.name}: name both sides alike ({sorted(stems)})")
    return found


# ---------------------------------------------------------------- a corpus saved with a run


def check_options(saved: dict, options: dict, folder) -> None:
    """Refuse a corpus read with other options (the folder, languages, tokenizer, case, sizes, specials) than
    `options` (normalized), or from files that have changed since (`saved["files"]`: their names, sizes and sha256):
    one ValueError naming each difference of options, or the first file that differs. `folder`: the run that read it."""
    differences = [f"{key} {saved.get(key)!r} (saved) vs {options.get(key)!r} (asked)"
                   for key in sorted((set(saved) | set(options)) - {"files"}) if saved.get(key) != options.get(key)]  # fmt: skip
    if differences:
        raise ValueError(
            f"the corpus saved in {folder} was read with other options: {'; '.join(differences)}; use another "
            "--run-dir, or delete it"
        )
    if "files" in saved:
        _check_files(saved["files"], options, folder)


def _check_files(recorded: dict, options: dict, folder) -> None:
    """Refuse corpus files that are not those `recorded` (split -> each side's name, size and sha256) when read."""
    files = find_files(options["path"], options["langs"])
    now_names = {split: [path.name for path in paths] for split, paths in files.items()}
    then_names = {split: [record["file"] for record in records] for split, records in recorded.items()}
    if now_names != then_names:
        raise ValueError(
            f"{options['path']} now holds the files {now_names}, the corpus saved in {folder} was read from {then_names}; "
            "use another --run-dir, or delete it"
        )
    for split, paths in files.items():
        for path, record in zip(paths, recorded[split], strict=True):
            now = text_files.file_fingerprint(path)
            if now != record:
                what = "size" if now["bytes"] != record["bytes"] else "content (sha256)"
                raise ValueError(
                    f"{path} has changed since the run read it into {folder} (its {what} differs): the run trains on the "
                    "copy it read; put the file back as it was, or train the changed corpus in another --run-dir"
                )


def check_saved(corpus: Corpus, options: dict, folder) -> None:
    """Refuse a saved corpus (a run's `corpus/`) that was read with other options than `options` (normalized), or
    from files that have changed since: one ValueError saying what differs."""
    if corpus.name != OWN_CORPUS:
        raise ValueError(f"the corpus saved in {folder} is {corpus.name}, not an own corpus; use another --run-dir")
    check_options(corpus.options, options, folder)
