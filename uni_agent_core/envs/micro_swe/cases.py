"""Seeded case generators for micro-swe bugs: argument tuples that expose a bug or avoid it.

Each generator takes a `random.Random` and returns a list of argument tuples; the catalog's
mutations pair them as `triggers` (the bug shows) and `safe` (the buggy code is still right).
"""

from __future__ import annotations

import random
from collections.abc import Callable

from uni_agent_core.envs.micro_swe.templates import Args


def ints(rng: random.Random, n: int, low: int = -20, high: int = 20) -> list[int]:
    return [rng.randint(low, high) for _ in range(n)]


def random_word(rng: random.Random, alphabet: str = "bcdfghklmnprst", length: int = 0) -> str:
    return "".join(rng.choice(alphabet) for _ in range(length or rng.randint(3, 6)))


def random_words(rng: random.Random, n: int) -> list[str]:
    pool: list[str] = []
    while len(pool) < n:
        word = random_word(rng)
        if word not in pool:
            pool.append(word)
    return pool


def palindrome(rng: random.Random, alphabet: str = "abcdeklmnrst") -> str:
    half = random_word(rng, alphabet, rng.randint(2, 4))
    middle = rng.choice(["", rng.choice(alphabet)])
    return half + middle + half[::-1]


ROMAN_DIGITS = (
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


def to_roman(number: int) -> str:
    out = []
    for value, letters in ROMAN_DIGITS:
        while number >= value:
            out.append(letters)
            number -= value
    return "".join(out)


def romans(rng: random.Random, keep: Callable[[str], bool], n: int = 3) -> list[Args]:
    found: list[Args] = []
    while len(found) < n:
        numeral = to_roman(rng.randint(1, 3999))
        if keep(numeral) and (numeral,) not in found:
            found.append((numeral,))
    return found


def has_double(numeral: str) -> bool:
    return any(a == b for a, b in zip(numeral, numeral[1:], strict=False))


def subtractive(numeral: str) -> bool:
    order = "IVXLCDM"
    return any(order.index(a) < order.index(b) for a, b in zip(numeral, numeral[1:], strict=False))


def bounds(rng: random.Random) -> tuple[int, int]:
    low = rng.randint(-10, 5)
    return low, low + rng.randint(4, 12)


def clamp_inside(rng: random.Random) -> list[Args]:
    low, high = bounds(rng)
    return [(rng.randint(low + 1, high - 1), low, high) for _ in range(2)]


def clamp_above(rng: random.Random) -> list[Args]:
    low, high = bounds(rng)
    return [(high + rng.randint(1, 9), low, high) for _ in range(2)]


def clamp_below(rng: random.Random) -> list[Args]:
    low, high = bounds(rng)
    return [(low - rng.randint(1, 9), low, high) for _ in range(2)]


def sorted_unique(rng: random.Random, n: int) -> list[int]:
    return sorted(rng.sample(range(-30, 30), n))


def search_middle(rng: random.Random) -> list[Args]:
    items = sorted_unique(rng, rng.choice([3, 5, 7]))
    return [(items, items[len(items) // 2])]


def search_single(rng: random.Random) -> list[Args]:
    value = rng.randint(-9, 9)
    items = sorted_unique(rng, 2)
    return [([value], value), (items, items[1])]


def search_absent(rng: random.Random) -> list[Args]:
    items = [2 * v for v in sorted_unique(rng, 5)]
    return [(items, items[2] + 1), ([], 3)]


def increasing(rng: random.Random) -> list[int]:
    return sorted(rng.sample(range(-20, 20), rng.randint(3, 6)))


def with_drop(rng: random.Random) -> list[int]:
    top = rng.randint(5, 20)
    return [top - 3, top, top - rng.randint(1, 9), top - 2]


def chunks_exact(rng: random.Random) -> list[Args]:
    size = rng.randint(2, 4)
    return [(ints(rng, size * rng.randint(1, 3)), size)]


def chunks_ragged(rng: random.Random) -> list[Args]:
    size = rng.randint(2, 4)
    return [(ints(rng, size * rng.randint(1, 2) + rng.randint(1, size - 1)), size)]


def consecutive_dupes(rng: random.Random) -> list[Args]:
    a, b, c = rng.sample(range(1, 50), 3)
    return [([a, a, b, c, c],)]


def spread_dupes(rng: random.Random) -> list[Args]:
    a, b, c = rng.sample(range(1, 50), 3)
    return [([a, b, a, c, b],)]


def unsorted_unique(rng: random.Random) -> list[Args]:
    values = rng.sample(range(1, 50), 4)
    while values == sorted(values):
        rng.shuffle(values)
    return [(values,)]


def pairs(rng: random.Random, spaced: bool, extra_equals: bool) -> list[Args]:
    keys = random_words(rng, 2)
    values = [str(rng.randint(0, 99)) for _ in keys]
    if extra_equals:
        values[0] = f"{values[0]}={random_word(rng)}"
    sep = " = " if spaced else "="
    return [(";".join(f"{k}{sep}{v}" for k, v in zip(keys, values, strict=True)),)]


def multiples(rng: random.Random, of: int, but_not: int = 0) -> list[Args]:
    found: list[Args] = []
    while len(found) < 2:
        n = of * rng.randint(1, 40)
        if (not but_not or n % but_not) and (n,) not in found:
            found.append((n,))
    return found


def plain_numbers(rng: random.Random) -> list[Args]:
    return [(n,) for n in rng.sample([1, 2, 4, 7, 8, 11, 13, 14, 16, 17, 19, 22, 23], 2)]


def punctuated_palindrome(rng: random.Random) -> str:
    text = palindrome(rng)
    cut = rng.randint(1, len(text) - 1)
    return text[:cut] + rng.choice(",;!?") + text[cut:] + rng.choice(".!")


def cased_repeat(rng: random.Random) -> str:
    word, other = random_words(rng, 2)
    return f"{word.capitalize()} {other} {word}"


def repeated(rng: random.Random) -> str:
    word, other = random_words(rng, 2)
    return f"{word} {other} {word} {word}"
