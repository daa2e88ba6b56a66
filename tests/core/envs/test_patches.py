"""Reading patches: the one block of lines a gold patch changes, with its line number."""

from uni_agent_core.envs.patches import single_block_change, unified_patch

BEFORE = "def f(items):\n    if not items:\n        return []\n    return items[-1:]\n"


def test_a_replaced_line_is_a_block_of_one_line_at_its_number() -> None:
    after = BEFORE.replace("items[-1:]", "items[-2:]")
    change = single_block_change(unified_patch({"m.py": BEFORE}, {"m.py": after}))
    assert change is not None
    assert (change.path, change.line) == ("m.py", 4)
    assert change.old == ("    return items[-1:]",) and change.new == ("    return items[-2:]",)
    assert change.hunk_start == 1 and change.hunk_old == tuple(BEFORE.splitlines())


def test_a_pure_insertion_is_numbered_by_the_line_it_goes_before() -> None:
    after = BEFORE.replace("    return items", "    items = items[:]\n    return items")
    change = single_block_change(unified_patch({"m.py": BEFORE}, {"m.py": after}))
    assert change is not None
    assert (change.line, change.old, change.new) == (4, (), ("    items = items[:]",))
    at_end = single_block_change(unified_patch({"m.py": BEFORE}, {"m.py": BEFORE + "x = 1\n"}))
    assert at_end is not None and (at_end.line, at_end.new) == (5, ("x = 1",))
    no_context = "--- a/m.py\n+++ b/m.py\n@@ -2,0 +3 @@\n+    pass\n"
    change = single_block_change(no_context)
    assert change is not None and (change.line, change.new) == (3, ("    pass",))


def test_several_lines_replaced_in_one_place_are_one_block() -> None:
    after = BEFORE.replace("    if not items:\n        return []\n", "    items = items or [0]\n")
    change = single_block_change(unified_patch({"m.py": BEFORE}, {"m.py": after}))
    assert change is not None
    assert change.line == 2 and len(change.old) == 2 and change.new == ("    items = items or [0]",)


def test_patches_of_several_places_or_files_are_not_one_block() -> None:
    long = "".join(f"x{i} = {i}\n" for i in range(20))
    two_places = long.replace("x1 = 1", "x1 = 2").replace("x18 = 18", "x18 = 0")
    assert single_block_change(unified_patch({"m.py": long}, {"m.py": two_places})) is None
    close = long.replace("x1 = 1", "x1 = 2").replace("x3 = 3", "x3 = 0")
    assert single_block_change(unified_patch({"m.py": long}, {"m.py": close})) is None
    files = unified_patch({"a.py": "a = 1\n", "b.py": "b = 1\n"}, {"a.py": "a = 2\n", "b.py": ""})
    assert single_block_change(files) is None
