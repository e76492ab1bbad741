"""English for generated text, the one way every component writes it: counts, articles, possessives, lists.

Text people read (the review, gkr's refusals, plan warnings) is built from names and numbers, so "1 pods",
"a a3-ultragpu-8g" and "evals's" appear unless each sentence gets this right; these helpers do it once.
"""

from __future__ import annotations

from collections.abc import Sequence

# Letters whose spoken name starts with a vowel sound ("an n2-standard-32", "an H200"): a name that starts
# with a letter and a digit, or is all capitals, is read letter by letter.
_VOWEL_SOUND_LETTERS = set("aefhilmnorsx")


def plural(count: int, one: str, many: str | None = None) -> str:
    """The word for `count` things: `one` for exactly one, else `many` (default: `one` + "s")."""
    return one if count == 1 else many if many is not None else f"{one}s"


def count(n: int, one: str, many: str | None = None) -> str:
    """ "1 pod", "2 pods", "1,024 GPUs"."""
    return f"{n:,} {plural(n, one, many)}"


def article(word: str) -> str:
    """ "a" or "an" as `word` is spoken: "an a3-ultragpu-8g", "an n2-standard-32", "a g2-standard-4", "an H200"."""
    if not word:
        return "a"
    first = word[0]
    spelled = (len(word) > 1 and word[1].isdigit()) or word.split("-", maxsplit=1)[0].isupper()
    if first.isalpha() and spelled:
        return "an" if first.lower() in _VOWEL_SOUND_LETTERS else "a"
    if first.isdigit():
        return "an" if first == "8" or word.startswith(("11", "18")) else "a"
    return "an" if first.lower() in "aeio" else "a"


def with_article(word: str) -> str:
    return f"{article(word)} {word}"


def possessive(name: str) -> str:
    """ "research's", "evals'": a name ending in s takes the apostrophe alone."""
    return f"{name}'" if name.endswith("s") else f"{name}'s"


def join_words(items: Sequence[str], last: str = "and") -> str:
    """ "a", "a and b", "a, b and c"."""
    items = list(items)
    if len(items) <= 1:
        return "".join(items)
    return f"{', '.join(items[:-1])} {last} {items[-1]}"
