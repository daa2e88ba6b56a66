"""Reference implementations the micro-swe generator plants bugs into.

Each function is self-contained (no imports, no calls to other functions, no recursion): its
source text, renamed, becomes a function of a generated repository, and calling it here gives
the expected values of the generated tests. A bug is a textual mutation of this source (see
`catalog.py`), so the correct code and the expected values can never drift apart.
"""

# ruff: noqa: SIM108


def clamp(value, low, high):
    """Return value limited to the closed range [low, high]."""
    if value < low:
        return low
    if value > high:
        return high
    return value


def mean(values):
    """Arithmetic mean of a non-empty list of numbers."""
    total = 0
    for item in values:
        total += item
    return total / len(values)


def is_palindrome(text):
    """True when text reads the same backwards, ignoring case and non-alphanumerics."""
    cleaned = [ch.lower() for ch in text if ch.isalnum()]
    return cleaned == cleaned[::-1]


def word_count(text):
    """Map each lower-cased word of text to how often it occurs."""
    counts = {}
    for word in text.lower().split():
        counts[word] = counts.get(word, 0) + 1
    return counts


def binary_search(items, target):
    """Index of target in the sorted list items, or -1 when it is absent."""
    low, high = 0, len(items) - 1
    while low <= high:
        middle = (low + high) // 2
        if items[middle] == target:
            return middle
        if items[middle] < target:
            low = middle + 1
        else:
            high = middle - 1
    return -1


def running_max(values):
    """List whose i-th item is the largest of values[0..i]."""
    result = []
    best = None
    for item in values:
        if best is None or item > best:
            best = item
        result.append(best)
    return result


def chunk(items, size):
    """Split items into consecutive lists of length size (the last one may be shorter)."""
    return [items[start : start + size] for start in range(0, len(items), size)]


def dedupe(items):
    """items without repeats, keeping the first occurrence of each, in order."""
    seen = set()
    result = []
    for item in items:
        if item not in seen:
            seen.add(item)
            result.append(item)
    return result


def roman_to_int(numeral):
    """Value of a Roman numeral such as 'XIV'."""
    values = {"I": 1, "V": 5, "X": 10, "L": 50, "C": 100, "D": 500, "M": 1000}
    total = 0
    for index, letter in enumerate(numeral):
        value = values[letter]
        if index + 1 < len(numeral) and values[numeral[index + 1]] > value:
            total -= value
        else:
            total += value
    return total


def celsius_to_fahrenheit(celsius):
    """Temperature in degrees Fahrenheit for one in degrees Celsius."""
    return celsius * 9 / 5 + 32


def flatten(groups):
    """Concatenate a list of lists into one list."""
    result = []
    for group in groups:
        result.extend(group)
    return result


def count_vowels(text):
    """Number of vowels (a, e, i, o, u, in either case) in text."""
    return sum(1 for ch in text.lower() if ch in "aeiou")


def median(values):
    """Middle value of a non-empty list (mean of the two middle values for even lengths)."""
    ordered = sorted(values)
    middle = len(ordered) // 2
    if len(ordered) % 2 == 1:
        return ordered[middle]
    return (ordered[middle - 1] + ordered[middle]) / 2


def gcd(a, b):
    """Greatest common divisor of two non-negative integers."""
    while b:
        a, b = b, a % b
    return a


def factorial(n):
    """n! for a non-negative integer n."""
    result = 1
    for factor in range(2, n + 1):
        result *= factor
    return result


def slugify(title):
    """Lower-case, hyphen-separated form of a title ('Hello World' -> 'hello-world')."""
    words = title.lower().split()
    return "-".join(words)


def rotate(items, steps):
    """items rotated right by steps positions (steps may exceed the length)."""
    if not items:
        return []
    steps %= len(items)
    return items[-steps:] + items[:-steps]


def parse_pairs(text):
    """Parse 'key=value' entries separated by ';' into a dict (blank entries are skipped)."""
    result = {}
    for entry in text.split(";"):
        entry = entry.strip()
        if not entry:
            continue
        key, _, value = entry.partition("=")
        result[key.strip()] = value.strip()
    return result


def fizzbuzz(n):
    """'Fizz' for multiples of 3, 'Buzz' for multiples of 5, 'FizzBuzz' for both, else str(n)."""
    if n % 15 == 0:
        return "FizzBuzz"
    if n % 3 == 0:
        return "Fizz"
    if n % 5 == 0:
        return "Buzz"
    return str(n)
