"""Bugs in number functions: clamping, means, temperatures, medians, gcd, factorials, FizzBuzz."""

from __future__ import annotations

from uni_agent_core.envs.micro_swe import reference
from uni_agent_core.envs.micro_swe.cases import (
    clamp_above,
    clamp_below,
    clamp_inside,
    ints,
    multiples,
    plain_numbers,
)
from uni_agent_core.envs.micro_swe.templates import Mutation, Template

NUMBER_TEMPLATES: tuple[Template, ...] = (
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
                clamp_above,
                clamp_inside,
            ),
            Mutation(
                "lower_bound",
                "        return low\n",
                "        return value\n",
                "values below the lower bound",
                clamp_below,
                clamp_inside,
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
                lambda r: [(ints(r, 3, 1, 9),)],
                lambda r: [([0] * r.randint(1, 4),)],
            ),
            Mutation(
                "initial_total",
                "total = 0\n",
                "total = values[0]\n",
                "lists whose first number is not zero",
                lambda r: [([r.randint(1, 9), 2, 4],)],
                lambda r: [([0, *ints(r, 3)],)],
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
                lambda r: [(sorted(ints(r, 5)),)],
            ),
            Mutation(
                "even_length",
                "(ordered[middle - 1] + ordered[middle]) / 2",
                "ordered[middle]",
                "lists of even length",
                lambda r: [([1, 3, 5 + 2 * r.randint(0, 5), 20],)],
                lambda r: [(ints(r, 3),), (ints(r, 5),)],
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
                plain_numbers,
                lambda r: multiples(r, 3, but_not=5),
            ),
        ),
    ),
)
