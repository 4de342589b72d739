"""Tables and columns ranked by how related they are to a question: BM25 over the schema index
(schema_index.py), with the question's own words masked, a table raised to its best-matched
copy (`frpm_2019` of `frpm`), and the foreign-key neighbours of the best hits raised next to
them (a question names the table it asks about, rarely the one it joins through)."""

from __future__ import annotations

import difflib
import re
import sqlite3
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from itertools import pairwise
from typing import NamedTuple

from edge_sql.tools.schema_index import IndexOptions
from edge_sql.tools.schema_words import PLURAL_ENDINGS, identifier_words, split_glued

# Words of how questions are asked, not of what they ask about: as query terms they only add
# noise (every `name` column matches "name the ..."; "many" matches nothing but costs time).
STOP_WORDS = frozenset(
    """a about above after all also among an and any are as at average be been before being
    below between both but by can could did do does each either equal etc for from given greater
    had has have having her his how i if in include including into is it its least less list
    many more most much my name names no not number of on one or other our over per please
    refer refers referring same show should so than that the their them then there these they
    this those through to total under up was we were what when where whether which while who
    whom whose why will with within without would you your""".split()
)
WEIGHTS = (4.0, 1.0, 0.5)  # bm25 weights of the name, columns and stored values
NEIGHBOUR_SEEDS = 10  # the best hits whose foreign-key neighbours are raised
NEIGHBOUR_HOPS = 2  # a join through a bridge table (client -> disp -> account) is two links away
NEIGHBOUR_SHARE = 0.8  # a neighbour ranks as if it scored this share of its seed
NEIGHBOUR_LIMIT = 32  # a seed raises at most this many neighbours, the best-linked first (`spread`)
MAX_TERMS = 64  # a long question's terms beyond this add time, not recall
SUGGESTIONS = 5
REPEATS = 3  # columns named alike once numbers are masked are a table's repeats from this many on
FAMILY_SHOWN = 2  # matched repeats of one name (`cost_2019_q1`, `cost_2020_q3`) kept with the matched columns
PREFIX_LETTERS = 5  # a too-wide table's columns also meet a question's words by their first letters
COVER_TOP = 2  # per question word, the tables whose own name matches it best ...
COVER_SHARE = 0.85  # ... rank at least this share of the best score: above the neighbours (0.8)
REACH_HOPS = 4  # unmatched tables this many links from a matched one are listed first, nearest first
REACH_SOURCES = 100  # ... from the best matched tables (and the best reached at each link)
REACH_LIMIT = 600  # ... until this many are reached: more than a share shows (about 200 names)
# Columns are named for what a question asks even where tables are not: `name`, `total`.
COLUMN_STOP_WORDS = STOP_WORDS - {"name", "names", "number", "total", "average"}
_NUMBER = re.compile(r"[0-9]+")
_YEAR = re.compile(r"1[89][0-9][0-9]|20[0-9][0-9]")
AGE_WORDS = frozenset({"old", "older", "oldest", "young", "younger", "youngest", "aged"})


@dataclass(frozen=True)
class Ranking:
    """What the ranking uses (the benchmark turns each part off to show what it buys)."""

    columns: bool = True
    values: bool = True
    neighbours: bool = True
    mask: bool = True
    stem: bool = True  # porter stemming in the index ("orders" meets "order")
    fold: bool = (
        True  # look-alikes folded into one line (+2.0 and +1.4 points of recall: retrieval/bench_schema_recall.py)
    )
    copies: bool = True  # copies (`frpm_2019`: a name and a suffix, most columns) folded: +0.2 and +7.6 points
    split: bool = True  # glued names split against the schema's words, in the index and the question
    keys: bool = True  # neighbours through key names no foreign key declares (`cust_no` -> customers)
    same_shape: bool = True  # copies only of the same shape; look-alikes of other shapes folded apart
    real_tokens: bool = True  # the share counted with the model's tokenizer where one is given
    cover: bool = True  # each question word's best name match ranks above the neighbours
    joined: bool = True  # two question words joined where the schema spells them glued ("high schoolers")
    table_columns: bool = True  # links by a column named as a table (`course_offering.semester` -> semester)
    reach: bool = True  # unmatched tables near the matched ones (by links) before the rest
    spread: bool = True  # a hub seed raises its `NEIGHBOUR_LIMIT` best-linked neighbours, not hundreds
    english: bool = True  # glued names the schema's words leave whole split by English word frequency
    counts_only: bool = True  # a folded line counts its members; names one only where it raised the line

    def index_options(self) -> IndexOptions:
        return IndexOptions(
            stem=self.stem,
            split=self.split,
            keys=self.keys,
            same_shape=self.same_shape,
            table_columns=self.table_columns,
            english=self.english,
        )


ALL_PARTS = Ranking()


class RankedTable(NamedTuple):
    """One table in ranked order: `score` 0 for a table the question says nothing about (a
    tuple: thousands are made a question)."""

    name: str
    kind: str
    score: float
    signature: str
    via: str  # "words" (matched), "link" (foreign-key neighbour of a best hit), "copy" or "" (none)
    copy_of: str = ""  # the table this one copies (schema_index.copy_roots), when copies are folded
    look_alike_of: str = ""  # the table this one is a variant of, of another shape (`event_2019` of `event`)


def query_terms(text: str, *, mask: bool = True, stop: frozenset[str] = STOP_WORDS) -> list[str]:
    """The question's words as search terms: identifiers split, lower-cased, each once; question
    words masked (`mask`, the words in `stop`), and short numbers with them (a `24` of a date
    matches every `_24` shard); a year such as `2019` is kept (a table named for it is worth matching)."""
    terms: list[str] = []
    for word in identifier_words(text):
        noise = word in stop or (word.isdigit() and len(word) < 4)
        if (mask and noise) or word in terms or (len(word) < 2 and not word.isdigit()):
            continue
        terms.append(word)
    return terms[:MAX_TERMS]


def fts_query(terms: Sequence[str], columns: Sequence[str]) -> str:
    """An FTS5 query matching any term in the given columns (terms quoted: no operators)."""
    alternatives = " OR ".join('"' + t.replace('"', '""') + '"' for t in terms)
    return "{" + " ".join(columns) + "} : (" + alternatives + ")"


def rank_tables(conn: sqlite3.Connection, text: str, ranking: Ranking = ALL_PARTS) -> list[RankedTable]:
    """Every table and view of the index, most related to `text` first; ties and unmatched
    tables in schema order. A table ranks at least as high as its best-matched copy or variant
    (its name and a suffix, half of the variant's columns its own: `event_2019` of `event`), and
    the neighbours of the best tables that are neither are raised next to them."""
    rows = index_rows(conn)
    terms = query_terms(text, mask=ranking.mask)
    if ranking.split or ranking.joined:
        terms = _with_parts(conn, terms, split=ranking.split, joined=ranking.joined)
    scores = _word_scores(conn, terms, ranking)
    if ranking.cover:
        _cover(conn, terms, scores)
    via = dict.fromkeys(scores, "words")
    copy_of, variant_of, blanks = _per_schema(rows, ranking.copies)
    for roots in (copy_of, variant_of):
        for copy in [i for i in scores if i in roots]:
            root = roots[copy]
            if scores[copy] > scores.get(root, 0.0):
                scores[root], via[root] = scores[copy], "copy"
    links = _links(conn) if ranking.neighbours else {}
    for _ in range(NEIGHBOUR_HOPS if ranking.neighbours else 0):
        originals = [i for i in scores if i not in copy_of and i not in variant_of]
        seeds = sorted(originals, key=lambda i: (-scores[i], i))[:NEIGHBOUR_SEEDS]
        for seed in seeds:
            for other in _raised(links, seed, copy_of, variant_of) if ranking.spread else links.get(seed, ()):
                raised = NEIGHBOUR_SHARE * scores[seed]
                if raised > scores.get(other, 0.0):
                    scores[other], via[other] = raised, "link"
    matched = sorted((i for i in scores if scores[i] > 0.0), key=lambda i: (-scores[i], i))
    ranked = [
        RankedTable(b[0], b[1], scores[i], b[3], via.get(i, ""), b[5], b[6]) for i in matched for b in (blanks[i - 1],)
    ]
    near = _reach(links, scores, matched[:REACH_SOURCES]) if ranking.reach else {}
    ranked += [blanks[i - 1]._replace(via="near") for i in sorted(near, key=lambda i: (-near[i], i))]
    return ranked + [b for i, b in enumerate(blanks, 1) if scores.get(i, 0.0) <= 0.0 and i not in near]  # ids 1..n


def _raised(links: dict[int, list[int]], seed: int, copy_of: dict[int, int], variant_of: dict[int, int]) -> list[int]:
    """The seed's neighbours it raises: at most `NEIGHBOUR_LIMIT`, those with the most links
    first, copies and variants left out (their table's line shows them). A hub (`patients`,
    `customers`) is linked to hundreds of tables in a big schema, archive copies and link
    tables among them; raised all at one score, they filled the share in schema order and
    hid the next seed's neighbours (eICU's `lab` behind MIMIC's `PATIENTS`)."""
    others = [o for o in links.get(seed, ()) if o not in copy_of and o not in variant_of]
    return sorted(others, key=lambda o: (-len(links.get(o, ())), o))[:NEIGHBOUR_LIMIT]


def _reach(links: dict[int, list[int]], scores: dict[int, float], sources: list[int]) -> dict[int, float]:
    """Unmatched tables within `REACH_HOPS` links of the `sources` (the best matched tables), each
    with the best of their scores times `NEIGHBOUR_SHARE` per link: where the matched tables leave room,
    the tables a join would pass through (`semester` of "courses in Fall 2000", three links from
    `course`) fill it instead of tables in schema order."""
    near: dict[int, float] = {}
    frontier = {i: scores[i] for i in sources}
    for _ in range(REACH_HOPS):
        reached: dict[int, float] = {}
        for i, score in frontier.items():
            share = NEIGHBOUR_SHARE * score
            for other in links.get(i, ()):
                if scores.get(other, 0.0) <= 0.0 and share > near.get(other, 0.0) and share > reached.get(other, 0.0):
                    reached[other] = share
        near.update(reached)
        if len(near) >= REACH_LIMIT:  # more than a share can show: a dense schema's links reach thousands
            break
        frontier = dict(sorted(reached.items(), key=lambda item: (-item[1], item[0]))[:REACH_SOURCES])
    return near


def _root(rows: list[tuple], roots: dict[int, int], i: int) -> str:
    return rows[roots[i] - 1][1] if i in roots else ""


_PER_SCHEMA: dict[tuple[int, bool], tuple[list[tuple], dict[int, int], dict[int, int], list[RankedTable]]] = {}


def _per_schema(rows: list[tuple], copies: bool) -> tuple[dict[int, int], dict[int, int], list[RankedTable]]:
    """The copies' and variants' roots, and every table unranked (score 0): the same for every
    question on a schema, so made once per index rows (5,000 tuples a question cost 10 ms)."""
    key = (id(rows), copies)
    kept = _PER_SCHEMA.get(key)
    if kept is None or kept[0] is not rows:
        copy_of = {r[0]: r[4] for r in rows if r[4] is not None} if copies else {}
        variant_of = {r[0]: r[5] for r in rows if r[5] is not None} if copies else {}
        blanks = [
            RankedTable(r[1], r[2], 0.0, r[3], "", _root(rows, copy_of, r[0]), _root(rows, variant_of, r[0]))
            for r in rows
        ]
        while len(_PER_SCHEMA) >= 2 * _ROWS_KEPT:
            _PER_SCHEMA.pop(next(iter(_PER_SCHEMA)))
        kept = _PER_SCHEMA[key] = (rows, copy_of, variant_of, blanks)
    return kept[1], kept[2], kept[3]


_ROWS: dict[
    str, list[tuple]
] = {}  # an index file -> its tables' rows (the file never changes: it is named by its schema)
_ROWS_KEPT = 8


def index_rows(conn: sqlite3.Connection) -> list[tuple]:
    """(id, name, kind, signature, copy_of, variant_of) of every table, by id (read once per index file)."""
    path = conn.execute("PRAGMA database_list").fetchone()[2]
    rows = _ROWS.get(path) if path else None
    if rows is None:
        rows = conn.execute("SELECT id, name, kind, signature, copy_of, variant_of FROM tables ORDER BY id").fetchall()
        if path:
            while len(_ROWS) >= _ROWS_KEPT:
                _ROWS.pop(next(iter(_ROWS)))
            _ROWS[path] = rows
    return rows


_LINKS: dict[str, dict[int, list[int]]] = {}  # an index file -> each table's neighbours (as _ROWS)


def _links(conn: sqlite3.Connection) -> dict[int, list[int]]:
    """Each table's foreign-key neighbours, both ways, in id order (read once per index file: the
    links table has no index, and 20 scans of 5,000 links a question cost milliseconds)."""
    path = conn.execute("PRAGMA database_list").fetchone()[2]
    links = _LINKS.get(path) if path else None
    if links is None:
        links = {}
        for a, b in conn.execute("SELECT a, b FROM links UNION SELECT b, a FROM links ORDER BY 1, 2"):
            links.setdefault(a, []).append(b)
        if path:
            while len(_LINKS) >= _ROWS_KEPT:
                _LINKS.pop(next(iter(_LINKS)))
            _LINKS[path] = links
    return links


def _with_parts(conn: sqlite3.Connection, terms: list[str], *, split: bool = True, joined: bool = True) -> list[str]:
    """The terms, the parts of a glued one (`carmakers` -> car makers) and two neighbouring
    terms joined ("high schoolers" -> `highschooler`), in the schema's words."""
    words = [t for t in terms if t.isalpha()]
    pieces = {t[i:j] for t in words for i in range(len(t)) for j in range(i + 3, len(t) + 1)} if split else set()
    pairs = [a + b for a, b in pairwise(words)] if joined else []
    glued = {p[: len(p) - len(end)] for p in pairs for end in ("", *PLURAL_ENDINGS)}
    if not pieces and not glued:
        return terms
    asked = sorted(pieces | glued)
    marks = ", ".join("?" * len(asked))
    vocabulary = frozenset(w for (w,) in conn.execute(f"SELECT word FROM vocabulary WHERE word IN ({marks})", asked))
    parts = [p for term in terms for p in split_glued(term, vocabulary) if p not in terms] if split else []
    parts += [w for p in pairs for end in ("", *PLURAL_ENDINGS) for w in (p[: len(p) - len(end)],) if w in vocabulary]
    return (terms + [p for p in dict.fromkeys(parts) if p not in terms])[:MAX_TERMS]


def _cover(conn: sqlite3.Connection, terms: list[str], scores: dict[int, float]) -> None:
    """Each term's `COVER_TOP` best name matches rank at least `COVER_SHARE` of the best score:
    a question names the tables it asks about ("teachers"), and a strong match of another word
    ("teach") must not bury them under its own neighbours."""
    if not scores:
        return
    best = max(scores.values())
    floor = COVER_SHARE * best
    sql = (  # the shortest names first (bm25 weighs the whole row, where few columns win)
        "SELECT rowid FROM words WHERE words MATCH ? "
        "ORDER BY length(name) - length(replace(name, ' ', '')), rowid LIMIT ?"
    )
    for term in terms:
        for (rowid,) in conn.execute(sql, (fts_query([term], ["name"]), COVER_TOP)):
            own = scores.get(rowid, 0.0)
            if own < floor:
                scores[rowid] = floor + (best - floor) * own / best  # their own order kept among them


def _word_scores(conn: sqlite3.Connection, terms: list[str], ranking: Ranking) -> dict[int, float]:
    if not terms:
        return {}
    columns = ["name"] + (["columns"] if ranking.columns else []) + (["vals"] if ranking.values else [])
    query = fts_query(terms, columns)
    sql = "SELECT rowid, bm25(words, ?, ?, ?) FROM words WHERE words MATCH ?"
    return {rowid: -score for rowid, score in conn.execute(sql, (*WEIGHTS, query))}


def closest_tables(conn: sqlite3.Connection, guessed: str, limit: int = SUGGESTIONS) -> list[str]:
    """Existing tables closest to a name that does not exist: spelt alike first, then those whose
    name (or columns) share words with it; at most `limit`."""
    names = [name for (name,) in conn.execute("SELECT name FROM tables ORDER BY id")]
    folded = {name.lower(): name for name in names}
    found = [folded[n] for n in difflib.get_close_matches(guessed.lower(), list(folded), n=limit, cutoff=0.6)]
    terms = query_terms(guessed, mask=False)
    if terms and len(found) < limit:
        sql = (
            "SELECT t.name FROM words JOIN tables AS t ON t.id = words.rowid WHERE words MATCH ? "
            "ORDER BY bm25(words, ?, ?, ?), t.id LIMIT ?"
        )
        for (name,) in conn.execute(sql, (fts_query(terms, ["name", "columns"]), *WEIGHTS, limit)):
            if name not in found:
                found.append(name)
    return found[:limit]


def column_terms(text: str) -> list[str]:
    """The question's words as a column's: `query_terms` with names, numbers and totals kept;
    "year" for a year in it ("in 2014": `Year`), "age" for old and young, and two neighbouring
    words glued whole or by the first one's initial ("first name": `firstname`, `Fname`)."""
    terms = query_terms(text, stop=COLUMN_STOP_WORDS)
    words = [w if w.isalpha() and w not in COLUMN_STOP_WORDS else "" for w in identifier_words(text)]
    hints = ["year"] if any(_YEAR.fullmatch(t) for t in terms) else []
    hints += ["age"] if AGE_WORDS.intersection(words) else []
    hints += [glued for a, b in pairwise(words) if a and b for glued in (a + b, a[0] + b)]
    return (terms + [h for h in dict.fromkeys(hints) if h not in terms])[:MAX_TERMS]


def column_scores(columns: Sequence[str], text: str, *, prefixes: bool = False) -> dict[int, float]:
    """BM25 of each column related to `text` (same words and stemming as the tables, over a
    table of its own in memory), by position; columns it says nothing about are absent.
    `prefixes`: match the first `PREFIX_LETTERS` letters of longer words instead ("consumed"
    meets `Consumption`, which stemming leaves apart)."""
    terms = column_terms(text)
    if prefixes:
        terms = list(dict.fromkeys(t[:PREFIX_LETTERS] for t in terms if len(t) > PREFIX_LETTERS and t.isalpha()))
    if not terms:
        return {}
    query = fts_query(terms, ["name"])
    if prefixes:
        query = query.replace('" OR', '"* OR').replace('")', '"*)')
    with sqlite3.connect(":memory:") as conn:
        conn.execute("CREATE VIRTUAL TABLE words USING fts5(name, tokenize='porter unicode61')")
        conn.executemany(
            "INSERT INTO words(rowid, name) VALUES (?, ?)",
            [(i + 1, " ".join(identifier_words(c))) for i, c in enumerate(columns)],
        )
        sql = "SELECT rowid, bm25(words) FROM words WHERE words MATCH ?"
        scores = {rowid - 1: -score for rowid, score in conn.execute(sql, (query,))}
    conn.close()
    return scores


def rank_columns(
    columns: Sequence[str],
    text: str,
    *,
    plain_first: bool = True,
    repeats_last: bool = True,
    short_first: bool = True,
    families: bool = True,
) -> list[int]:
    """Positions of `columns`, most related to `text` first (`column_scores`), then those that
    share only a word's beginning with it; the rest keep their order, those named without a
    number first (`plain_first`): a wide table's numbered columns are its repeats (`amount_2019_q2`,
    `reading_17`, `q_412`), each one of many alike, while its plain ones (`department`, `title`)
    are what a question filters and groups by. `repeats_last`: of a family of matched repeats
    (names alike once their numbers are masked) only the best `FAMILY_SHOWN` stay with the
    matched columns, the others follow the plain ones (a question's "cost" matched all 300 of
    `cost_2019_q1` ... `cost_2024_q4` and pushed the table's other columns out of the share).
    `short_first`: plain columns of fewer words first (`title` before `projects_title`: a
    denormalised table's columns carried from other tables are named with the table they came from).
    `families`: a column with a number counts as numbered only where it is a repeat (`_repeated`):
    `access_ip_v4` and `md5` are plain names."""
    scores = column_scores(columns, text)
    near = column_scores(columns, text, prefixes=True)
    matched = sorted(scores, key=lambda i: (-scores[i], i))
    matched += sorted((i for i in near if i not in scores), key=lambda i: (-near[i], i))
    repeats = _extra_repeats(columns, matched) if repeats_last else set()
    seen = set(matched)
    numbered = _repeated(columns) if families else [_NUMBER.search(c) is not None for c in columns]
    rest = [i for i in range(len(columns)) if i not in seen]
    if short_first:  # stable: table order among equals, and numbered ones in table order
        rest.sort(key=lambda i: 0 if numbered[i] and families else len(identifier_words(columns[i])))
    if plain_first:
        rest.sort(key=lambda i: numbered[i])
    head = [i for i in matched if i not in repeats]
    if not repeats:
        return head + rest
    plain = [i for i in rest if not numbered[i]]
    return head + plain + [i for i in matched if i in repeats] + [i for i in rest if numbered[i]]


def _repeated(columns: Sequence[str]) -> list[bool]:
    """Per column, whether it is a repeat: one of at least `REPEATS` named alike once numbers are
    masked, or numbered from 10 on (`amount_archive_17`, `cost_2019`); a single digit in a name of
    a small family is part of the name (`access_ip_v4`, `address_line_2`)."""
    family = [numbers_masked(c) for c in columns]
    sizes = Counter(family)
    return [
        f != c.lower() and (sizes[f] >= REPEATS or any(len(n) > 1 for n in _NUMBER.findall(c)))
        for f, c in zip(family, columns, strict=True)
    ]


def _extra_repeats(columns: Sequence[str], matched: list[int]) -> set[int]:
    """The matched numbered columns beyond the best `FAMILY_SHOWN` of their family."""
    per_family: dict[str, int] = {}
    extra: set[int] = set()
    for i in matched:
        family = numbers_masked(columns[i])
        if family != columns[i].lower():
            per_family[family] = per_family.get(family, 0) + 1
            if per_family[family] > FAMILY_SHOWN:
                extra.add(i)
    return extra


def alike_key(name: str, signature: str) -> tuple[str, str]:
    """Tables that differ only in their numbers and have the same columns (shards, years,
    copies) share this key: they are folded into one line."""
    return numbers_masked(name), signature


def numbers_masked(name: str) -> str:
    """`Cost_2019_Q1` -> `cost_#_q#`: the name its shards, periods and repeats share."""
    return _NUMBER.sub("#", name.lower())
