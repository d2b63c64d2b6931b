"""A key map's regexes bounded (shared.port.layouts reads them): Python's `re` syntax, sized before it is compiled (the
`regex` module writes each counted repetition out: a key map's regexes together may come to MAX_REGEX_SIZE characters
so written), compiled once by the rule holding it, and each match run under a time limit (MATCH_SECONDS)."""

from __future__ import annotations

import re
import warnings

import regex  # a match with a time limit: a pattern of nested repetition must not hang a port

from shared import failures

try:
    from re import _parser as re_syntax  # the standard parser: a counted repetition stays one node, its count readable
except ImportError:  # Python 3.10
    import sre_parse as re_syntax

MATCH_SECONDS = 1.0  # one regex rename on one key: far above what a key map's patterns take (docs/measurements.md)
# A key map's regexes together, each repetition written out to its largest count: `regex` compiles `x{1000}` as 1000
# copies (nested counts multiply), its memory and compile time growing with that size; keys are a few hundred characters.
MAX_REGEX_SIZE, MAX_REGEX_VARIABLE = 20_000, "ROSETTA_MAX_REGEX_SIZE"
_REPEATS = ("MAX_REPEAT", "MIN_REPEAT", "POSSESSIVE_REPEAT")
_SHORTER = (f"write the repetition with * or + or a smaller count; {MAX_REGEX_VARIABLE}=N raises the limit, and the "
            "memory a compile takes with it")  # fmt: skip


def compiled(pattern: str):
    """`pattern` compiled in `re`'s syntax, held by its Rename, not by the module's cache (which keeps 500)."""
    return regex.compile(pattern, regex.VERSION0, cache_pattern=False)


def written_out_size(pattern: str) -> int:
    """`pattern`'s size with each repetition written out to its largest count (an unbounded one to one more than its
    least), read from the standard library's parse, which keeps a repetition as one node; ValueError where `re`
    cannot read it."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # re's FutureWarning on a set such as [[a]: the pattern is sized all the same
        try:
            return _size(re_syntax.parse(pattern))
        except (re.error, RecursionError, OverflowError) as error:
            raise ValueError(f"bad regex {pattern!r} (a key map's regex is Python's re syntax: {error})") from None


def _size(items) -> int:
    total = 0
    for op, argument in items:
        inner = max(1, sum(_size(part) for part in _subpatterns(argument)))
        if str(op) in _REPEATS:
            least, most, _ = argument
            inner *= least + 1 if most == re_syntax.MAXREPEAT else most
        total += inner
    return total


def _subpatterns(argument):
    """The parsed groups inside one node's argument (a repetition's body, an alternation's branches, ...)."""
    if isinstance(argument, re_syntax.SubPattern):
        yield argument
    elif isinstance(argument, (tuple, list)):
        for part in argument:
            yield from _subpatterns(part)


class RegexBudget:
    """The size a key map's regexes may come to together, written out (MAX_REGEX_SIZE, raised by its variable);
    each is sized before it is compiled."""

    def __init__(self):
        self.spent = 0

    def spend(self, pattern: str, label: str) -> None:
        """`pattern` (the key map's entry `label`) counted against the limit; ValueError naming the entry past it."""
        limit, regex_shown = max_regex_size(), failures.shown(pattern)
        past = f"past the limit of {limit:,} for a key map's regexes (a key is a few hundred characters: {_SHORTER})"
        if len(pattern) > limit:  # not even parsed: the parse of a huge pattern takes memory of its own
            raise ValueError(f"{label}: the regex {regex_shown} is {len(pattern):,} characters long, {past}")
        try:
            size = written_out_size(pattern)
        except ValueError as error:
            raise ValueError(f"{label}: {error}") from None
        if self.spent + size > limit:
            before = f"; with the key map's regexes before it, {self.spent + size:,}" if self.spent else ""
            raise ValueError(f"{label}: the regex {regex_shown} is {size:,} characters with each repetition written out, "
                             f"as the regex module compiles it{before}: {past}")  # fmt: skip
        self.spent += size


def max_regex_size() -> int:
    """MAX_REGEX_SIZE, or the size its variable names."""
    rule = "the size a key map's regexes may come to is a number, e.g. 100000"
    return failures.limit_from_environment(MAX_REGEX_VARIABLE, MAX_REGEX_SIZE, rule)
