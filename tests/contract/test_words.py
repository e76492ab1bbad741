"""contract.words: counts, articles, possessives and lists in generated text (issue 31's wording slips)."""

from __future__ import annotations

import pytest

from contract.words import article, count, join_words, plural, possessive, with_article


def test_counts_agree_with_their_number() -> None:
    assert count(1, "pod") == "1 pod"
    assert count(2, "pod") == "2 pods"
    assert count(1024, "GPU") == "1,024 GPUs"
    assert count(0, "node pool") == "0 node pools"
    assert plural(1, "was", "were") == "was"
    assert plural(3, "was", "were") == "were"


@pytest.mark.parametrize(
    ("word", "expected"),
    [
        ("a3-ultragpu-8g", "an"),  # "ay-three": the "a a3-ultragpu-8g"
        ("n2-standard-32", "an"),  # "en-two"
        ("H200", "an"),
        ("g2-standard-4", "a"),
        ("c3-highmem", "a"),
        ("e2-medium", "an"),
        ("machine", "a"),
        ("old plan", "an"),
        ("8-GPU node", "an"),
        ("1-node pool", "a"),
        ("", "a"),
    ],
)
def test_articles_follow_how_the_word_is_spoken(word: str, expected: str) -> None:
    assert article(word) == expected
    assert with_article(word) == f"{expected} {word}"


def test_possessives_and_lists() -> None:
    assert possessive("evals") == "evals'"
    assert possessive("research") == "research's"
    assert join_words([]) == ""
    assert join_words(["a"]) == "a"
    assert join_words(["a", "b"]) == "a and b"
    assert join_words(["a", "b", "c"], "or") == "a, b or c"
