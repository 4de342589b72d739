"""Identifiers as the words people write: `SalesOrderID` -> sales order id, and glued names
split against the schema's own vocabulary (`workorder` -> work order where `work` and `order`
are words elsewhere in the schema), so a question's "work orders" meets `workorder` and its
"carmakers" meets `car_makers`.

The vocabulary is the schema's: words that appear on their own in its table and column names.
No dictionary is shipped: a word-segmentation library (wordninja, wordsegment) splits by
English word frequency and also splits names a schema uses whole (benchmarks/results/schemas/
README.md measures both), where the schema's own words only split what the schema itself
spells apart somewhere.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from functools import cache

_MIXED = re.compile(r"[A-Za-z0-9]+")
_WORD = re.compile(r"[A-Z]+(?=[A-Z][a-z])|[A-Z]?[a-z]+|[A-Z]+|[0-9]+|[^\W\d_]+")
MIN_PART = 3  # a part shorter than this splits too much ("at", "or")
MAX_PARTS = 3
PLURAL_ENDINGS = ("s", "es")


def identifier_words(name: str) -> list[str]:
    """`SalesOrderID_2` -> ["sales", "order", "id", "2"]: names split the way people write words,
    so a question's "sales order" meets `SalesOrders` and `sales_orders`; a token that mixes
    letters and digits is kept whole too (`A3`, `1k`: evidence names such columns)."""
    words = [w.lower() for w in _WORD.findall(name)]
    mixed = [t.lower() for t in _MIXED.findall(name) if not t.isdigit() and not t.isalpha()]
    return words + [t for t in mixed if t not in words]


def schema_vocabulary(names: Iterable[str]) -> frozenset[str]:
    """The words of at least `MIN_PART` letters that the schema's names spell on their own."""
    return frozenset(w for name in names for w in identifier_words(name) if len(w) >= MIN_PART and w.isalpha())


def split_glued(word: str, vocabulary: frozenset[str]) -> list[str]:
    """`gasstations` -> ["gas", "stations"] when `gas` and `station` are vocabulary words (the
    glued word may be one too: the table's own name); [] when it splits no way into two or
    three of them (the last may carry a plural ending). The split with the fewest parts wins."""
    if len(word) < 2 * MIN_PART or not word.isalpha():
        return []
    best: list[str] | None = None
    stack: list[tuple[int, list[str]]] = [(0, [])]
    while stack:
        start, parts = stack.pop()
        for end in range(start + MIN_PART, len(word) + 1):
            part = word[start:end]
            last = end == len(word)
            if part == word or not (part in vocabulary or (last and _plural_of(part, vocabulary))):
                continue
            found = [*parts, part]
            if last:
                if len(found) > 1 and (best is None or len(found) < len(best)):
                    best = found
            elif len(found) < MAX_PARTS:
                stack.append((end, found))
    return best or []


def name_forms(name: str) -> tuple[str, ...]:
    """`Customers` -> ("customers", "customer"): a table's name lower-cased, and it less each plural
    ending it has (`boxes` -> boxe, box), as columns that refer to it name it."""
    name = name.lower()
    return (name, *(name[: -len(e)] for e in PLURAL_ENDINGS if name.endswith(e)))


def _plural_of(part: str, vocabulary: frozenset[str]) -> bool:
    return any(part.endswith(e) and part[: -len(e)] in vocabulary for e in PLURAL_ENDINGS)


def split_words(name: str, vocabulary: frozenset[str], *, english: bool = False) -> list[str]:
    """`identifier_words(name)` and, after each glued word, its parts (`split_glued`); with
    `english`, a long glued word the schema's words do not split is split by English word
    frequency instead (`english_parts`)."""
    words: list[str] = []
    for word in identifier_words(name):
        words.append(word)
        parts = split_glued(word, vocabulary)
        words += parts or (english_parts(word) if english else [])
    return words


ENGLISH_MIN_LETTERS = 8  # shorter glued words are mostly abbreviations (`custno`), which English splits wrong


@cache
def english_parts(word: str) -> list[str]:
    """`haslasttradedvalue` -> ["has", "last", "traded", "value"]: a glued name split by English word
    frequency (wordninja, Wikipedia unigrams), for schemas that glue every name and spell no part
    apart anywhere (`LISTEDSECURITY.HASLASTTRADEDVALUE`), where `split_glued` finds no vocabulary;
    parts shorter than `MIN_PART` ("of", "is") are left out; [] for a word it leaves whole."""
    if len(word) < ENGLISH_MIN_LETTERS or not word.isalpha():
        return []
    import wordninja  # 0.1 s to load its word list: only when an index is built

    parts = [p for p in wordninja.split(word) if len(p) >= MIN_PART]
    return parts if len(parts) > 1 or (parts and len(parts[0]) < len(word) - MIN_PART) else []
