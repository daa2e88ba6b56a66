"""Bugs in list functions: search, running maximum, chunks, de-duplication, flattening, rotation."""

from __future__ import annotations

from uni_agent_core.envs.micro_swe import reference
from uni_agent_core.envs.micro_swe.cases import (
    chunks_exact,
    chunks_ragged,
    consecutive_dupes,
    increasing,
    ints,
    search_absent,
    search_middle,
    search_single,
    spread_dupes,
    unsorted_unique,
    with_drop,
)
from uni_agent_core.envs.micro_swe.templates import Mutation, Template

SEQUENCE_TEMPLATES: tuple[Template, ...] = (
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
                search_single,
                search_middle,
            ),
            Mutation(
                "missing",
                "    return -1\n",
                "    return None\n",
                "values that are absent",
                search_absent,
                search_middle,
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
                lambda r: [(increasing(r),)],
                lambda r: [([r.randint(0, 9)] * 3,)],
            ),
            Mutation(
                "append",
                "result.append(best)",
                "result.append(item)",
                "sequences that go down after going up",
                lambda r: [(with_drop(r),)],
                lambda r: [(increasing(r),)],
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
                chunks_ragged,
                chunks_exact,
            ),
            Mutation(
                "slice_end",
                "items[start : start + size]",
                "items[start : start + size - 1]",
                "any non-empty list",
                chunks_exact,
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
                spread_dupes,
                consecutive_dupes,
            ),
            Mutation(
                "order",
                "    return result\n",
                "    return sorted(result)\n",
                "inputs that are not already sorted",
                unsorted_unique,
                lambda r: [(sorted(r.sample(range(50), 4)),)],
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
                lambda r: [([ints(r, 2), ints(r, 1)],)],
                lambda r: [([],)],
            ),
            Mutation(
                "first_group",
                "for group in groups:",
                "for group in groups[1:]:",
                "inputs whose first list is not empty",
                lambda r: [([ints(r, 2), ints(r, 2)],)],
                lambda r: [([[], ints(r, 3)],)],
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
                lambda r: [(ints(r, 4), r.randint(0, 3))],
            ),
            Mutation(
                "direction",
                "items[-steps:] + items[:-steps]",
                "items[steps:] + items[:steps]",
                "rotations that are not half the length",
                lambda r: [([1, 2, 3, 4, 5], r.randint(1, 4))],
                lambda r: [(ints(r, 4), 0), (ints(r, 4), 2)],
            ),
        ),
    ),
)
