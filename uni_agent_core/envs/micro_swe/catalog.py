"""The micro-swe bug catalog: which functions a task is built from and how each can break.

A `Template` wraps one reference function of `reference.py` with the public names it may get
in a generated repository, a plain-words description of what it does (for statements that must
not name it), and its `Mutation`s. A mutation is a textual edit of the reference source that
plants one bug, plus two seeded case generators: `triggers` (arguments on which the bug shows)
and `safe` (arguments on which the buggy code still gives the right answer). Triggers become the
hidden FAIL_TO_PASS tests, safe cases the visible and hidden PASS_TO_PASS tests. The data
validator checks every generated task against exactly these claims, and a unit test executes
every mutation against its own cases.
"""

from __future__ import annotations

import inspect
import random
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from uni_agent_core.envs.micro_swe import reference

Args = tuple[Any, ...]
CaseGen = Callable[[random.Random], list[Args]]


@dataclass(frozen=True)
class Mutation:
    """One planted bug: replace `find` (exactly once in the source) with `replace`."""

    name: str
    find: str
    replace: str
    symptom: str
    """When the bug shows, in plain words (`values above the upper bound`)."""
    triggers: CaseGen
    safe: CaseGen


@dataclass(frozen=True)
class Template:
    """A reference function and the bugs that can be planted in it."""

    function: Callable[..., Any]
    names: tuple[str, ...]
    """Public names it may get in a generated repository (the first is the reference's)."""
    behaviour: str
    """What it does, without naming it (`limiting a number to a range`)."""
    mutations: tuple[Mutation, ...]

    @property
    def key(self) -> str:
        return self.function.__name__

    def source(self, name: str) -> str:
        """The reference source with the function renamed to `name`."""
        text = inspect.getsource(self.function)
        return text.replace(f"def {self.key}(", f"def {name}(", 1)

    def buggy_source(self, name: str, mutation: Mutation) -> str:
        """The source with `mutation` applied; raises if its anchor is not unique."""
        text = self.source(name)
        if text.count(mutation.find) != 1:
            raise ValueError(
                f"{self.key}/{mutation.name}: anchor {mutation.find!r} must occur exactly once"
            )
        return text.replace(mutation.find, mutation.replace, 1)


def _ints(rng: random.Random, n: int, low: int = -20, high: int = 20) -> list[int]:
    return [rng.randint(low, high) for _ in range(n)]


def _word(rng: random.Random, alphabet: str = "bcdfghklmnprst", length: int = 0) -> str:
    return "".join(rng.choice(alphabet) for _ in range(length or rng.randint(3, 6)))


def _words(rng: random.Random, n: int) -> list[str]:
    pool: list[str] = []
    while len(pool) < n:
        word = _word(rng)
        if word not in pool:
            pool.append(word)
    return pool


def _palindrome(rng: random.Random, alphabet: str = "abcdeklmnrst") -> str:
    half = _word(rng, alphabet, rng.randint(2, 4))
    middle = rng.choice(["", rng.choice(alphabet)])
    return half + middle + half[::-1]


_ROMAN = (
    (1000, "M"),
    (900, "CM"),
    (500, "D"),
    (400, "CD"),
    (100, "C"),
    (90, "XC"),
    (50, "L"),
    (40, "XL"),
    (10, "X"),
    (9, "IX"),
    (5, "V"),
    (4, "IV"),
    (1, "I"),
)


def _roman(number: int) -> str:
    out = []
    for value, letters in _ROMAN:
        while number >= value:
            out.append(letters)
            number -= value
    return "".join(out)


def _romans(rng: random.Random, keep: Callable[[str], bool], n: int = 3) -> list[Args]:
    found: list[Args] = []
    while len(found) < n:
        numeral = _roman(rng.randint(1, 3999))
        if keep(numeral) and (numeral,) not in found:
            found.append((numeral,))
    return found


def _has_double(numeral: str) -> bool:
    return any(a == b for a, b in zip(numeral, numeral[1:], strict=False))


def _subtractive(numeral: str) -> bool:
    order = "IVXLCDM"
    return any(order.index(a) < order.index(b) for a, b in zip(numeral, numeral[1:], strict=False))


def _range(rng: random.Random) -> tuple[int, int]:
    low = rng.randint(-10, 5)
    return low, low + rng.randint(4, 12)


def _clamp_inside(rng: random.Random) -> list[Args]:
    low, high = _range(rng)
    return [(rng.randint(low + 1, high - 1), low, high) for _ in range(2)]


def _clamp_above(rng: random.Random) -> list[Args]:
    low, high = _range(rng)
    return [(high + rng.randint(1, 9), low, high) for _ in range(2)]


def _clamp_below(rng: random.Random) -> list[Args]:
    low, high = _range(rng)
    return [(low - rng.randint(1, 9), low, high) for _ in range(2)]


def _sorted_unique(rng: random.Random, n: int) -> list[int]:
    return sorted(rng.sample(range(-30, 30), n))


def _search_middle(rng: random.Random) -> list[Args]:
    items = _sorted_unique(rng, rng.choice([3, 5, 7]))
    return [(items, items[len(items) // 2])]


def _search_single(rng: random.Random) -> list[Args]:
    value = rng.randint(-9, 9)
    items = _sorted_unique(rng, 2)
    return [([value], value), (items, items[1])]


def _search_absent(rng: random.Random) -> list[Args]:
    items = [2 * v for v in _sorted_unique(rng, 5)]
    return [(items, items[2] + 1), ([], 3)]


def _increasing(rng: random.Random) -> list[int]:
    return sorted(rng.sample(range(-20, 20), rng.randint(3, 6)))


def _with_drop(rng: random.Random) -> list[int]:
    top = rng.randint(5, 20)
    return [top - 3, top, top - rng.randint(1, 9), top - 2]


def _chunks_exact(rng: random.Random) -> list[Args]:
    size = rng.randint(2, 4)
    return [(_ints(rng, size * rng.randint(1, 3)), size)]


def _chunks_ragged(rng: random.Random) -> list[Args]:
    size = rng.randint(2, 4)
    return [(_ints(rng, size * rng.randint(1, 2) + rng.randint(1, size - 1)), size)]


def _consecutive_dupes(rng: random.Random) -> list[Args]:
    a, b, c = rng.sample(range(1, 50), 3)
    return [([a, a, b, c, c],)]


def _spread_dupes(rng: random.Random) -> list[Args]:
    a, b, c = rng.sample(range(1, 50), 3)
    return [([a, b, a, c, b],)]


def _unsorted_unique(rng: random.Random) -> list[Args]:
    values = rng.sample(range(1, 50), 4)
    while values == sorted(values):
        rng.shuffle(values)
    return [(values,)]


def _pairs(rng: random.Random, spaced: bool, extra_equals: bool) -> list[Args]:
    keys = _words(rng, 2)
    values = [str(rng.randint(0, 99)) for _ in keys]
    if extra_equals:
        values[0] = f"{values[0]}={_word(rng)}"
    sep = " = " if spaced else "="
    return [(";".join(f"{k}{sep}{v}" for k, v in zip(keys, values, strict=True)),)]


def _multiple(rng: random.Random, of: int, but_not: int = 0) -> list[Args]:
    found: list[Args] = []
    while len(found) < 2:
        n = of * rng.randint(1, 40)
        if (not but_not or n % but_not) and (n,) not in found:
            found.append((n,))
    return found


def _plain(rng: random.Random) -> list[Args]:
    return [(n,) for n in rng.sample([1, 2, 4, 7, 8, 11, 13, 14, 16, 17, 19, 22, 23], 2)]


TEMPLATES: tuple[Template, ...] = (
    Template(
        reference.clamp,
        ("clamp", "limit", "bound_value"),
        "limiting a number to a range",
        (
            Mutation(
                "upper_bound",
                "        return high\n",
                "        return high - 1\n",
                "values above the upper bound",
                _clamp_above,
                _clamp_inside,
            ),
            Mutation(
                "lower_bound",
                "        return low\n",
                "        return value\n",
                "values below the lower bound",
                _clamp_below,
                _clamp_inside,
            ),
        ),
    ),
    Template(
        reference.mean,
        ("mean", "average", "arithmetic_mean"),
        "averaging a list of numbers",
        (
            Mutation(
                "denominator",
                "total / len(values)",
                "total / (len(values) + 1)",
                "any list with a non-zero total",
                lambda r: [(_ints(r, 3, 1, 9),)],
                lambda r: [([0] * r.randint(1, 4),)],
            ),
            Mutation(
                "initial_total",
                "total = 0\n",
                "total = values[0]\n",
                "lists whose first number is not zero",
                lambda r: [([r.randint(1, 9), 2, 4],)],
                lambda r: [([0, *_ints(r, 3)],)],
            ),
        ),
    ),
    Template(
        reference.is_palindrome,
        ("is_palindrome", "reads_same_backwards", "palindromic"),
        "checking whether a text is a palindrome",
        (
            Mutation(
                "case",
                "ch.lower() for",
                "ch for",
                "texts with capital letters",
                lambda r: [(_palindrome(r).capitalize(),)],
                lambda r: [(_palindrome(r),)],
            ),
            Mutation(
                "punctuation",
                "if ch.isalnum()",
                "if ch != ' '",
                "texts with punctuation",
                lambda r: [(_punctuated_palindrome(r),)],
                lambda r: [(_palindrome(r),)],
            ),
        ),
    ),
    Template(
        reference.word_count,
        ("word_count", "count_words", "word_frequencies"),
        "counting how often each word occurs in a text",
        (
            Mutation(
                "case",
                "text.lower().split()",
                "text.split()",
                "the same word written with different capitalisation",
                lambda r: [(_cased_repeat(r),)],
                lambda r: [(" ".join(_words(r, 3)),)],
            ),
            Mutation(
                "increment",
                "counts.get(word, 0) + 1",
                "1",
                "words that occur more than once",
                lambda r: [(_repeated(r),)],
                lambda r: [(" ".join(_words(r, 3)),)],
            ),
        ),
    ),
    Template(
        reference.binary_search,
        ("binary_search", "find_index", "search_sorted"),
        "looking up a value's position in a sorted list",
        (
            Mutation(
                "loop_bound",
                "while low <= high:",
                "while low < high:",
                "single-element lists and values found last",
                _search_single,
                _search_middle,
            ),
            Mutation(
                "missing",
                "    return -1\n",
                "    return None\n",
                "values that are absent",
                _search_absent,
                _search_middle,
            ),
        ),
    ),
    Template(
        reference.running_max,
        ("running_max", "prefix_maxima", "cumulative_max"),
        "computing the running maximum of a sequence",
        (
            Mutation(
                "comparison",
                "item > best",
                "item < best",
                "increasing sequences",
                lambda r: [(_increasing(r),)],
                lambda r: [([r.randint(0, 9)] * 3,)],
            ),
            Mutation(
                "append",
                "result.append(best)",
                "result.append(item)",
                "sequences that go down after going up",
                lambda r: [(_with_drop(r),)],
                lambda r: [(_increasing(r),)],
            ),
        ),
    ),
    Template(
        reference.chunk,
        ("chunk", "batched", "split_into_chunks"),
        "splitting a list into fixed-size pieces",
        (
            Mutation(
                "ragged_tail",
                "range(0, len(items), size)",
                "range(0, len(items) - size + 1, size)",
                "lists whose length is not a multiple of the size",
                _chunks_ragged,
                _chunks_exact,
            ),
            Mutation(
                "slice_end",
                "items[start : start + size]",
                "items[start : start + size - 1]",
                "any non-empty list",
                _chunks_exact,
                lambda r: [([], r.randint(1, 4))],
            ),
        ),
    ),
    Template(
        reference.dedupe,
        ("dedupe", "unique_in_order", "remove_duplicates"),
        "removing repeated items while keeping the original order",
        (
            Mutation(
                "membership",
                "if item not in seen:",
                "if item not in result[-1:]:",
                "repeats that are not next to each other",
                _spread_dupes,
                _consecutive_dupes,
            ),
            Mutation(
                "order",
                "    return result\n",
                "    return sorted(result)\n",
                "inputs that are not already sorted",
                _unsorted_unique,
                lambda r: [(sorted(r.sample(range(50), 4)),)],
            ),
        ),
    ),
    Template(
        reference.roman_to_int,
        ("roman_to_int", "parse_roman", "from_roman"),
        "converting Roman numerals to integers",
        (
            Mutation(
                "comparison",
                "values[numeral[index + 1]] > value",
                "values[numeral[index + 1]] >= value",
                "numerals with a repeated letter",
                lambda r: _romans(r, _has_double),
                lambda r: _romans(r, lambda s: not _has_double(s)),
            ),
            Mutation(
                "subtractive",
                "total -= value",
                "total += value",
                "subtractive numerals such as IV",
                lambda r: _romans(r, _subtractive),
                lambda r: _romans(r, lambda s: not _subtractive(s)),
            ),
        ),
    ),
    Template(
        reference.celsius_to_fahrenheit,
        ("celsius_to_fahrenheit", "to_fahrenheit", "c_to_f"),
        "converting temperatures from Celsius to Fahrenheit",
        (
            Mutation(
                "ratio",
                "celsius * 9 / 5",
                "celsius * 5 / 9",
                "any temperature but zero",
                lambda r: [(r.choice([10, 25, 37, 100]),)],
                lambda r: [(0,)],
            ),
            Mutation(
                "floor_division",
                "celsius * 9 / 5",
                "celsius * 9 // 5",
                "temperatures that are not multiples of 5",
                lambda r: [(5 * r.randint(0, 8) + r.randint(1, 4),)],
                lambda r: [(5 * r.randint(-8, 20),)],
            ),
        ),
    ),
    Template(
        reference.flatten,
        ("flatten", "concat_lists", "join_lists"),
        "concatenating a list of lists",
        (
            Mutation(
                "extend",
                "result.extend(group)",
                "result.append(group)",
                "any non-empty input",
                lambda r: [([_ints(r, 2), _ints(r, 1)],)],
                lambda r: [([],)],
            ),
            Mutation(
                "first_group",
                "for group in groups:",
                "for group in groups[1:]:",
                "inputs whose first list is not empty",
                lambda r: [([_ints(r, 2), _ints(r, 2)],)],
                lambda r: [([[], _ints(r, 3)],)],
            ),
        ),
    ),
    Template(
        reference.count_vowels,
        ("count_vowels", "vowel_count", "num_vowels"),
        "counting the vowels in a text",
        (
            Mutation(
                "case",
                "text.lower()",
                "text",
                "upper-case vowels",
                lambda r: [("AEIOU" + _word(r),), ("Apple " + _word(r),)],
                lambda r: [(_word(r, "aeiobcdfg"),)],
            ),
            Mutation(
                "vowel_set",
                '"aeiou"',
                '"aeio"',
                "words with the letter u",
                lambda r: [(_word(r, "bcdfg") + "u",), ("umbrella",)],
                lambda r: [(_word(r, "aeiobcdfg"),)],
            ),
        ),
    ),
    Template(
        reference.median,
        ("median", "middle_value", "median_of"),
        "computing the median of a list of numbers",
        (
            Mutation(
                "sorting",
                "ordered = sorted(values)",
                "ordered = list(values)",
                "unsorted input",
                lambda r: [([9, 1, 2, r.randint(3, 6), 7],)],
                lambda r: [(sorted(_ints(r, 5)),)],
            ),
            Mutation(
                "even_length",
                "(ordered[middle - 1] + ordered[middle]) / 2",
                "ordered[middle]",
                "lists of even length",
                lambda r: [([1, 3, 5 + 2 * r.randint(0, 5), 20],)],
                lambda r: [(_ints(r, 3),), (_ints(r, 5),)],
            ),
        ),
    ),
    Template(
        reference.gcd,
        ("gcd", "greatest_common_divisor", "common_divisor"),
        "computing the greatest common divisor of two numbers",
        (
            Mutation(
                "result",
                "    return a\n",
                "    return b\n",
                "any pair other than (0, 0)",
                lambda r: [(6 * r.randint(1, 9), 4 * r.randint(1, 9))],
                lambda r: [(0, 0)],
            ),
            Mutation(
                "loop",
                "while b:",
                "if b:",
                "pairs where the second number does not divide the first",
                lambda r: [(12, 8), (21 * r.choice([1, 3, 5]), 6)],
                lambda r: [(r.randint(1, 9) * 6, 6)],
            ),
        ),
    ),
    Template(
        reference.factorial,
        ("factorial", "fact", "product_up_to"),
        "computing factorials",
        (
            Mutation(
                "range_end",
                "range(2, n + 1)",
                "range(2, n)",
                "any number from 2 up",
                lambda r: [(r.randint(2, 8),)],
                lambda r: [(0,), (1,)],
            ),
            Mutation(
                "product",
                "result *= factor",
                "result += factor",
                "2 and numbers from 4 up",
                lambda r: [(2,), (r.randint(4, 8),)],
                lambda r: [(0,), (1,), (3,)],
            ),
        ),
    ),
    Template(
        reference.slugify,
        ("slugify", "to_slug", "make_slug"),
        "turning titles into URL slugs",
        (
            Mutation(
                "case",
                "title.lower().split()",
                "title.split()",
                "titles with capital letters",
                lambda r: [(" ".join(w.capitalize() for w in _words(r, 3)),)],
                lambda r: [(" ".join(_words(r, 3)),)],
            ),
            Mutation(
                "spaces",
                "title.lower().split()",
                "title.lower().split(' ')",
                "titles with repeated spaces",
                lambda r: [("  ".join(_words(r, 2)),)],
                lambda r: [(" ".join(_words(r, 3)),)],
            ),
        ),
    ),
    Template(
        reference.rotate,
        ("rotate", "rotate_right", "shift_items"),
        "rotating a list to the right",
        (
            Mutation(
                "modulo",
                "    steps %= len(items)\n",
                "",
                "rotations longer than the list",
                lambda r: [([1, 2, 3, 4], 4 + r.randint(1, 3))],
                lambda r: [(_ints(r, 4), r.randint(0, 3))],
            ),
            Mutation(
                "direction",
                "items[-steps:] + items[:-steps]",
                "items[steps:] + items[:steps]",
                "rotations that are not half the length",
                lambda r: [([1, 2, 3, 4, 5], r.randint(1, 4))],
                lambda r: [(_ints(r, 4), 0), (_ints(r, 4), 2)],
            ),
        ),
    ),
    Template(
        reference.parse_pairs,
        ("parse_pairs", "parse_settings", "parse_key_values"),
        "parsing 'key=value' settings strings",
        (
            Mutation(
                "partition",
                'entry.partition("=")',
                'entry.rpartition("=")',
                "values that themselves contain '='",
                lambda r: _pairs(r, spaced=False, extra_equals=True),
                lambda r: _pairs(r, spaced=False, extra_equals=False),
            ),
            Mutation(
                "strip_value",
                "= value.strip()",
                "= value",
                "spaces around '='",
                lambda r: _pairs(r, spaced=True, extra_equals=False),
                lambda r: _pairs(r, spaced=False, extra_equals=False),
            ),
        ),
    ),
    Template(
        reference.fizzbuzz,
        ("fizzbuzz", "fizz_buzz", "fizzbuzz_word"),
        "the FizzBuzz game's answer for a number",
        (
            Mutation(
                "both",
                "n % 15 == 0",
                "n % 10 == 0",
                "multiples of 10 or 15",
                lambda r: [(15 * (2 * r.randint(0, 5) + 1),), (10 * (3 * r.randint(0, 5) + 1),)],
                lambda r: [(3,), (7,), (30 * r.randint(1, 5),)],
            ),
            Mutation(
                "plain",
                "    return str(n)\n",
                "    return n\n",
                "numbers divisible by neither 3 nor 5",
                _plain,
                lambda r: _multiple(r, 3, but_not=5),
            ),
        ),
    ),
)
"""Every template, in a fixed order (the generator's seeds index into it)."""


def _punctuated_palindrome(rng: random.Random) -> str:
    text = _palindrome(rng)
    cut = rng.randint(1, len(text) - 1)
    return text[:cut] + rng.choice(",;!?") + text[cut:] + rng.choice(".!")


def _cased_repeat(rng: random.Random) -> str:
    word, other = _words(rng, 2)
    return f"{word.capitalize()} {other} {word}"


def _repeated(rng: random.Random) -> str:
    word, other = _words(rng, 2)
    return f"{word} {other} {word} {word}"


def template(key: str) -> Template:
    """The template of reference function `key`."""
    for item in TEMPLATES:
        if item.key == key:
            return item
    raise KeyError(f"no micro-swe template {key!r}; known: {', '.join(t.key for t in TEMPLATES)}")
