"""Bugs in text functions: palindromes, word counts, vowels, slugs, settings, Roman numerals."""

from __future__ import annotations

from uni_agent_core.envs.micro_swe import reference
from uni_agent_core.envs.micro_swe.cases import (
    cased_repeat,
    has_double,
    pairs,
    palindrome,
    punctuated_palindrome,
    random_word,
    random_words,
    repeated,
    romans,
    subtractive,
)
from uni_agent_core.envs.micro_swe.templates import Mutation, Template

TEXT_TEMPLATES: tuple[Template, ...] = (
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
                lambda r: [(palindrome(r).capitalize(),)],
                lambda r: [(palindrome(r),)],
            ),
            Mutation(
                "punctuation",
                "if ch.isalnum()",
                "if ch != ' '",
                "texts with punctuation",
                lambda r: [(punctuated_palindrome(r),)],
                lambda r: [(palindrome(r),)],
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
                lambda r: [(cased_repeat(r),)],
                lambda r: [(" ".join(random_words(r, 3)),)],
            ),
            Mutation(
                "increment",
                "counts.get(word, 0) + 1",
                "1",
                "words that occur more than once",
                lambda r: [(repeated(r),)],
                lambda r: [(" ".join(random_words(r, 3)),)],
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
                lambda r: [("AEIOU" + random_word(r),), ("Apple " + random_word(r),)],
                lambda r: [(random_word(r, "aeiobcdfg"),)],
            ),
            Mutation(
                "vowel_set",
                '"aeiou"',
                '"aeio"',
                "words with the letter u",
                lambda r: [(random_word(r, "bcdfg") + "u",), ("umbrella",)],
                lambda r: [(random_word(r, "aeiobcdfg"),)],
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
                lambda r: [(" ".join(w.capitalize() for w in random_words(r, 3)),)],
                lambda r: [(" ".join(random_words(r, 3)),)],
            ),
            Mutation(
                "spaces",
                "title.lower().split()",
                "title.lower().split(' ')",
                "titles with repeated spaces",
                lambda r: [("  ".join(random_words(r, 2)),)],
                lambda r: [(" ".join(random_words(r, 3)),)],
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
                lambda r: pairs(r, spaced=False, extra_equals=True),
                lambda r: pairs(r, spaced=False, extra_equals=False),
            ),
            Mutation(
                "strip_value",
                "= value.strip()",
                "= value",
                "spaces around '='",
                lambda r: pairs(r, spaced=True, extra_equals=False),
                lambda r: pairs(r, spaced=False, extra_equals=False),
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
                lambda r: romans(r, has_double),
                lambda r: romans(r, lambda s: not has_double(s)),
            ),
            Mutation(
                "subtractive",
                "total -= value",
                "total += value",
                "subtractive numerals such as IV",
                lambda r: romans(r, subtractive),
                lambda r: romans(r, lambda s: not subtractive(s)),
            ),
        ),
    ),
)
