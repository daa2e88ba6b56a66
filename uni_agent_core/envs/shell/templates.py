"""The shell task templates: what each asks, its starting files, its hidden checks and a
reference solution, all drawn from one seeded `random.Random`.

Level `L0` asks for one operation (write a file, count matching lines, read a JSON value, write
an executable script); `L1` for two or three (rename by extension through a tree, sort and
count distinct lines, archive a directory without some files, find a token and report where).
Every name and word a template draws comes from the split's own vocabulary (`vocabulary`), so
no held-out task shares its files or words with a training task. Every check fails on the
starting state, so partial credit measures progress, not what was there already; the reference
solution is the generator's alone (task rows never carry it) and exists so tests can prove that
each task is solvable.
"""

from __future__ import annotations

import json
import random
import shlex
import zlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Literal

from uni_agent_core.config.tasks import ShellLevel
from uni_agent_core.envs.shell.checks import Check

Split = Literal["train", "heldout"]

_WORD_TEXT = (
    "amber anchor apple arrow aspen badger basil beacon birch bison blossom bramble breeze brook "
    "cactus canyon carbon cedar cherry cinder clover cobalt comet copper coral cotton crane "
    "crystal cypress dahlia delta desert dolphin dune eagle ember falcon fennel fern fjord flint "
    "forest fossil garnet geyser ginger glacier granite gravel harbor hazel heron hickory indigo "
    "iris ivory jasper juniper kestrel lagoon lantern larch lemon lilac linden lotus magnet maple "
    "marble meadow mesa mint nectar nickel nutmeg oasis olive onyx orchid otter pebble pepper "
    "plume prairie quartz quill raven reef ridge river saffron sage salmon sequoia shale sierra "
    "silver sparrow spruce summit thistle thunder tulip tundra valley velvet walnut willow yarrow "
    "zephyr acorn alpine bamboo cobble dewdrop fjeld gale hollow kelp lichen moss nimbus orbit "
    "poplar rowan sorrel tansy umber vale wren"
)
_WORDS = tuple(_WORD_TEXT.split())
_HELDOUT_SHARE = 5
"""One word in `_HELDOUT_SHARE` belongs to the held-out split's vocabulary."""


def vocabulary(split: Split) -> tuple[str, ...]:
    """The words a split's tasks are made of (the splits share none)."""
    return tuple(
        word
        for word in _WORDS
        if (zlib.crc32(word.encode()) % _HELDOUT_SHARE == 0) == (split == "heldout")
    )


@dataclass(frozen=True)
class Draft:
    """One drawn task: its instruction, starting files, checks and a reference solution."""

    statement: str
    setup: str
    """Bash that creates the starting files in the (empty) working directory."""
    checks: list[Check]
    reference: str
    """Bash that solves the task from the starting state (tests only; never in a task row)."""


@dataclass(frozen=True)
class Template:
    name: str
    level: ShellLevel
    draw: Callable[[random.Random, Sequence[str]], Draft]


def _q(text: str) -> str:
    return shlex.quote(text)


def files_script(files: dict[str, str]) -> str:
    """Bash that writes `files` (path relative to the working directory -> contents)."""
    lines, made = ["set -eu"], set()
    for path, content in files.items():
        parent = path.rpartition("/")[0]
        if parent and parent not in made:
            lines.append(f"mkdir -p -- {_q(parent)}")
            made.add(parent)
        lines.append(f"printf '%s' {_q(content)} > {_q(path)}")
    return "\n".join(lines) + "\n"


_README = {"README": "This directory is yours to work in.\n"}


def _exists(name: str, path: str) -> Check:
    return Check(name, f"need_file {_q(path)}")


def _filler(rng: random.Random, words: Sequence[str], lines: int) -> str:
    return "".join(
        f"{rng.choice(words)} {rng.choice(words)} {rng.randint(1, 999)}\n" for _ in range(lines)
    )


def _tree_stems(rng: random.Random, words: Sequence[str], root: str, count: int) -> list[str]:
    """`count` distinct file paths under `root`, up to two directories deep, without suffix."""
    subdirs = ["", *(f"{rng.choice(words)}/" for _ in range(2))]
    subdirs.append(subdirs[1] + f"{rng.choice(words)}/")
    stems: list[str] = []
    while len(stems) < count:
        stem = f"{root}/{rng.choice(subdirs)}{rng.choice(words)}"
        if stem not in stems:
            stems.append(stem)
    return stems


def write_file(rng: random.Random, words: Sequence[str]) -> Draft:
    """L0: create a file holding one given line."""
    folder = rng.choice(("notes", "out", "docs", "records"))
    path = f"{folder}/{rng.choice(words)}.txt"
    content = f"{rng.choice(words)} {rng.choice(words)} {rng.randint(100, 9999)}"
    return Draft(
        statement=f"Create the file `{path}` containing exactly one line: `{content}`",
        setup=files_script(_README),
        checks=[_exists("exists", path), Check("content", f"text_is {_q(path)} {_q(content)}")],
        reference=f"mkdir -p {folder} && printf '%s\\n' {_q(content)} > {_q(path)}\n",
    )


_LOG_LEVELS = ("INFO", "WARN", "ERROR", "DEBUG")
_LOG_MESSAGES = (
    "request served",
    "cache refreshed",
    "retrying connection",
    "job finished",
    "queue drained",
    "config reloaded",
    "timer fired",
    "disk checked",
)


def count_matches(rng: random.Random, words: Sequence[str]) -> Draft:
    """L0: count the lines of a log that contain a word; write the number."""
    log = f"logs/{rng.choice(words)}.log"
    target = rng.choice(words)
    others = rng.sample([w for w in words if target not in w and w not in target], 4)
    messages = [m for m in _LOG_MESSAGES if target not in m]
    total, hits = rng.randint(30, 60), rng.randint(3, 15)
    matching = set(rng.sample(range(total), hits))
    lines = []
    for number in range(total):
        component = target if number in matching else rng.choice(others)
        stamp = (
            f"2024-03-{rng.randint(1, 28):02d} {rng.randint(0, 23):02d}:{rng.randint(0, 59):02d}"
        )
        lines.append(f"{stamp} {rng.choice(_LOG_LEVELS)} {component}: {rng.choice(messages)}\n")
    text = "".join(lines)
    return Draft(
        statement=(
            f"Count the lines of `{log}` that contain the word `{target}`, and write that number "
            "(digits only) to `count.txt`."
        ),
        setup=files_script({log: text}),
        checks=[
            _exists("exists", "count.txt"),
            # the log must be left as it was: counting is not editing
            Check("count", f"bytes_are {_q(log)} {_q(text)} || return 1\nword_is count.txt {hits}"),
        ],
        reference=f"grep -c -w {_q(target)} {_q(log)} > count.txt\n",
    )


_JSON_LEAVES = ("name", "owner", "region", "label", "token")


def json_key(rng: random.Random, words: Sequence[str]) -> Draft:
    """L0: read the value at a key path of a JSON file; write it bare."""
    path = f"config/{rng.choice(words)}.json"
    services = rng.sample(words, 3)
    leaf = rng.choice(_JSON_LEAVES)
    numbers = rng.sample(range(1000, 10000), len(services))
    version = rng.randint(1, 9)
    entries = {
        service: {
            "port": rng.randint(1024, 65535),
            leaf: f"{rng.choice(words)}-{number}",
            "enabled": rng.random() < 0.5,
        }
        for service, number in zip(services, numbers, strict=True)
    }
    data = {"version": version, "services": entries}
    service = rng.choice(services)
    value = str(entries[service][leaf])
    key_path = f"services.{service}.{leaf}"
    return Draft(
        statement=(
            f"`{path}` holds a JSON object. Write the value at the key path `{key_path}` to "
            "`value.txt`, as bare text without quotes."
        ),
        setup=files_script({path: json.dumps(data, indent=2) + "\n"}),
        checks=[_exists("exists", "value.txt"), Check("value", f"word_is value.txt {_q(value)}")],
        reference=(
            "python3 -c 'import json, sys; d = json.load(open(sys.argv[1])); "
            'print(d["services"][sys.argv[2]][sys.argv[3]])\' '
            f"{_q(path)} {_q(service)} {_q(leaf)} > value.txt\n"
        ),
    )


def executable_script(rng: random.Random, words: Sequence[str]) -> Draft:
    """L0: write an executable script that prints a given line (the check runs it)."""
    path = f"bin/{rng.choice(words)}.sh"
    line = f"{rng.choice(words)} {rng.choice(words)} {rng.randint(10, 999)}"
    run = (
        f"local out\nout=$(timeout 10 ./{path} 2>/dev/null)\n"
        f"[[ $out == {_q(line)} ]] || {{ echo \"./{path} printed '${{out:0:80}}'\"; return 1; }}"
    )
    return Draft(
        statement=(
            f"Write an executable shell script `{path}` that prints exactly the line `{line}` "
            f"when it is run as `./{path}`."
        ),
        setup=files_script(_README),
        checks=[
            _exists("exists", path),
            Check(
                "executable",
                f'[[ -x {_q(path)} ]] || {{ echo "{path} is not executable"; return 1; }}',
            ),
            Check("output", run),
        ],
        reference=(
            f"mkdir -p bin\nprintf '%s\\n' '#!/bin/sh' {_q('echo ' + _q(line))} > {_q(path)}\n"
            f"chmod +x {_q(path)}\n"
        ),
    )


def rename_ext(rng: random.Random, words: Sequence[str]) -> Draft:
    """L1: rename every `.txt` file through a tree to `.md`, leaving the other files alone."""
    root = rng.choice(words)
    renames = rng.randint(2, 4)
    stems = _tree_stems(rng, words, root, renames + rng.randint(2, 3))
    renamed = [stem + ".txt" for stem in stems[:renames]]
    kept = [stem + rng.choice((".csv", ".log", ".cfg")) for stem in stems[renames:]]
    paths = renamed + kept
    files = {p: _filler(rng, words, rng.randint(1, 3)) for p in paths}
    guard = "".join(f"bytes_are {_q(p)} {_q(files[p])} || return 1\n" for p in kept)
    checks = [
        Check(
            f"renamed:{p}",
            f'[[ ! -e {_q(p)} ]] || {{ echo "{p} is still there"; return 1; }}\n'
            f"bytes_are {_q(p[: -len('.txt')] + '.md')} {_q(files[p])} || return 1\n{guard}",
        )
        for p in renamed
    ]
    return Draft(
        statement=(
            f"Under `{root}/` (subdirectories included), rename every file whose name ends in "
            "`.txt` so that it ends in `.md` instead, keeping its contents. Leave every other "
            "file as it is."
        ),
        setup=files_script(files),
        checks=checks,
        reference=(
            f"find {_q(root)} -type f -name '*.txt' "
            '-exec sh -c \'for f; do mv -- "$f" "${f%.txt}.md"; done\' sh {} +\n'
        ),
    )


def sort_uniq(rng: random.Random, words: Sequence[str]) -> Draft:
    """L1: write a list's distinct lines sorted, and how many there are."""
    path = f"lists/{rng.choice(words)}.txt"
    pool = rng.sample(words, rng.randint(6, 10))
    lines = pool + [rng.choice(pool) for _ in range(rng.randint(14, 25))]
    rng.shuffle(lines)
    distinct = sorted(pool)
    return Draft(
        statement=(
            f"`{path}` has one word per line, with repeats. Write its distinct words, sorted "
            "alphabetically and one per line, to `sorted.txt`, and the number of distinct words "
            "to `count.txt`."
        ),
        setup=files_script({path: "".join(line + "\n" for line in lines)}),
        checks=[
            Check("sorted", f"text_is sorted.txt {_q(chr(10).join(distinct))}"),
            Check("count", f"word_is count.txt {len(distinct)}"),
        ],
        reference=f"sort -u {_q(path)} > sorted.txt\nwc -l < sorted.txt > count.txt\n",
    )


def tar_dir(rng: random.Random, words: Sequence[str]) -> Draft:
    """L1: archive a directory as .tar.gz, leaving out its `.tmp` files."""
    root = rng.choice(words)
    archive = f"{root}.tar.gz"
    kept = rng.randint(4, 7)
    stems = _tree_stems(rng, words, root, kept + rng.randint(1, 2))
    paths = [stem + rng.choice((".txt", ".cfg", ".csv")) for stem in stems[:kept]]
    scratch = [stem + ".tmp" for stem in stems[kept:]]
    files = {p: _filler(rng, words, rng.randint(1, 4)) for p in paths + scratch}
    listed = (
        f"need_file {_q(archive)} || return 1\nlocal listing\n"
        f"listing=$(tar -tzf {_q(archive)} 2>/dev/null) || "
        f'{{ echo "{archive} is not a gzip-compressed tar archive"; return 1; }}\n'
    )
    compare = "".join(
        f'bytes_are "$d"/{_q(p)} {_q(files[p])} || {{ rm -rf "$d"; return 1; }}\n' for p in paths
    )
    return Draft(
        statement=(
            f"Create the gzip-compressed tar archive `{archive}` in the working directory, "
            f"holding the directory `{root}/` (so the paths inside it start with `{root}/`) but "
            "none of its files whose names end in `.tmp`."
        ),
        setup=files_script(files),
        checks=[
            Check("archive", listed),
            Check(
                "files",
                listed + "local d\nd=$(mktemp -d)\n"
                f'tar -xzf {_q(archive)} -C "$d" 2>/dev/null || '
                f'{{ rm -rf "$d"; echo "{archive} does not extract"; return 1; }}\n'
                f'{compare}rm -rf "$d"',
            ),
            Check(
                "no_tmp",
                listed + "if grep -q '[.]tmp/*$' <<<\"$listing\"; then "
                f'echo "{archive} holds .tmp files"; return 1; fi',
            ),
        ],
        reference=f"tar --exclude='*.tmp' -czf {_q(archive)} {_q(root)}\n",
    )


def find_token(rng: random.Random, words: Sequence[str]) -> Draft:
    """L1: find the one file that holds a token; write its path and the token's line."""
    root = rng.choice(words)
    stems = _tree_stems(rng, words, root, rng.randint(8, 12))
    paths = [stem + rng.choice((".txt", ".log", ".cfg")) for stem in stems]
    stem = rng.choice(words).upper()
    token, decoy = (f"{stem}-{value:08x}" for value in rng.sample(range(1 << 32), 2))
    files = {p: _filler(rng, words, rng.randint(3, 8)) for p in paths}
    holder, other = rng.sample(paths, 2)
    line = f"{rng.choice(words)} {token} {rng.choice(words)}"
    for path, text in ((holder, line), (other, f"{rng.choice(words)} {decoy}")):
        rows = files[path].splitlines()
        rows.insert(rng.randint(0, len(rows)), text)
        files[path] = "".join(row + "\n" for row in rows)
    found = (
        "need_file found.txt || return 1\nlocal got\ngot=$(trimmed found.txt)\ngot=${got#./}\n"
        f"[[ $got == {_q(holder)} ]] || {{ echo \"found.txt names '${{got:0:80}}'\"; return 1; }}"
    )
    return Draft(
        statement=(
            f"Exactly one file under `{root}/` contains the token `{token}`. Write that file's "
            f"path relative to the working directory (for example `{root}/some/file.txt`) to "
            "`found.txt`, and the whole line of that file that holds the token to `line.txt`."
        ),
        setup=files_script(files),
        checks=[Check("path", found), Check("line", f"text_is line.txt {_q(line)}")],
        reference=(
            f"f=$(grep -rlF {_q(token)} {_q(root)})\nprintf '%s\\n' \"$f\" > found.txt\n"
            f'grep -hF {_q(token)} "$f" > line.txt\n'
        ),
    )


TEMPLATES: tuple[Template, ...] = (
    Template("write_file", "L0", write_file),
    Template("count_matches", "L0", count_matches),
    Template("json_key", "L0", json_key),
    Template("executable_script", "L0", executable_script),
    Template("rename_ext", "L1", rename_ext),
    Template("sort_uniq", "L1", sort_uniq),
    Template("tar_dir", "L1", tar_dir),
    Template("find_token", "L1", find_token),
)
"""Every template, by level."""


def templates_of(level: str) -> list[Template]:
    """The templates of one level, in a fixed order."""
    found = [template for template in TEMPLATES if template.level == level]
    if not found:
        raise ValueError(f"unknown shell task level {level!r}; expected L0 or L1")
    return found
