"""The task calibration text for `edge-sql imatrix --calibration auto`: agent transcripts.

An importance matrix weighs each weight column by how large its inputs are on some text; the
text this model meets in its job is the agent protocol: the system prompt and tool list, tool
calls, DDL, result tables and SQL, inside the chat template. The calibration is two kinds of
transcripts in exactly that form (the packaged prompt template's strings and chat framing, each
piece tokenized with special tokens only where the episode loop parses them):

- the three published SQaLe episodes (`sqale_published.py`) replayed as text: their reasoning
  excerpts, every call (a collapsed call `n` times), the published outputs (clipped where the
  page clipped them; `list_tables` gets the episode's published table list), the budget lines
  and the forced answer;
- episodes on the bundled databases (Chinook, Northwind), written from the bundled questions'
  gold SQL through the real tools, so DDL, sample rows and results are real: list the tables,
  describe the tables the gold SQL names and sample the first, run the gold SQL, submit it.

`questions_per_database` and `max_tokens` (each transcript's first tokens only) bound its size:
the default (3 of each database's 32 questions, every difficulty; every transcript cut at 2,048
tokens, so the longest published episode keeps its opening rounds) makes 13,034 tokens with the
Qwen3.5 tokenizer. benchmarks/results/imatrix.md measures it against the 49,415-token set of
12 questions per database and whole episodes: as good on held-out transcripts, a quarter of the
collection time (13.7 minutes for the 2B shape on the shared 2-core EPYC).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from edge_sql.agent.budget import Budget
from edge_sql.agent.prompt import PromptTemplate, load_prompt
from edge_sql.agent.transcript import Piece
from edge_sql.evaluation.datasets import Question, load_bundled
from edge_sql.evaluation.sqale_published import PublishedEpisode, call_args, load_episodes
from edge_sql.json_types import JSONValue
from edge_sql.tools import ReadOnlyDatabase, Toolbox

QUESTIONS_PER_DATABASE = 3
MAX_TOKENS = 2048  # per transcript: the opening rounds of a long episode
SAMPLE_ROWS = 3
_TURNS_LEFT = re.compile(r"(\d+) tool turns? left")


@dataclass(frozen=True)
class Calibration:
    """Calibration transcripts and the name an imatrix file records for them."""

    name: str
    transcripts: list[list[Piece]]
    max_tokens: int | None = None  # each transcript's first tokens only (None: whole)

    def cut(self, sequences: Sequence[Sequence[int]]) -> list[list[int]]:
        """The transcripts' tokens, each cut to `max_tokens`."""
        return [list(tokens[: self.max_tokens]) for tokens in sequences]


def task_calibration(
    prompt: PromptTemplate | None = None,
    *,
    questions_per_database: int = QUESTIONS_PER_DATABASE,
    max_tokens: int | None = MAX_TOKENS,
) -> Calibration:
    """The published episodes replayed, then bundled-question episodes through the real tools."""
    prompt = prompt or load_prompt()
    questions = spread(load_bundled(), questions_per_database)
    transcripts = published_transcripts(prompt) + gold_sql_transcripts(prompt, questions)
    cut = f", each transcript's first {max_tokens:,} tokens" if max_tokens else ""
    name = (
        f"edge-sql task calibration ({prompt.version}): {len(load_episodes())} published SQaLe episodes, "
        f"{len(questions)} bundled questions{cut}"
    )
    return Calibration(name, transcripts, max_tokens)


def spread(questions: Sequence[Question], per_database: int) -> list[Question]:
    """Up to `per_database` questions of each database, evenly spaced over the file's order (which
    runs from simple to challenging)."""
    chosen: list[Question] = []
    for db_id in dict.fromkeys(q.db_id for q in questions):
        mine = [q for q in questions if q.db_id == db_id]
        step = max(1, len(mine) / max(1, per_database))
        chosen += [mine[int(i * step)] for i in range(min(per_database, len(mine)))]
    return chosen


# -- the framing of turns ----------------------------------------------------------------------


def _assistant_turn(prompt: PromptTemplate, think: str, answer: str) -> list[Piece]:
    chat = prompt.chat
    return [
        (think.strip() + "\n", False),
        (chat.think_end + chat.after_think, True),
        (answer, False),
        (chat.turn_end, True),
    ]


def _user_turn(prompt: PromptTemplate, content: str) -> list[Piece]:
    chat = prompt.chat
    return [
        (chat.turn_separator + chat.open_turn("user"), True),
        (content, False),
        (chat.turn_end + chat.turn_separator + chat.open_turn("assistant") + chat.assistant_prefix, True),
    ]


def _call_text(tool: str, args: Mapping[str, JSONValue]) -> str:
    return json.dumps({"tool": tool, "args": args}, ensure_ascii=False)


def _results(prompt: PromptTemplate, calls: Sequence[tuple[str, str]]) -> str:
    return prompt.result_separator.join(
        prompt.result_text(call, output, i=i, n=len(calls)) for i, (call, output) in enumerate(calls, start=1)
    )


# -- the published episodes ----------------------------------------------------------------


def published_transcripts(prompt: PromptTemplate) -> list[list[Piece]]:
    """The published SQaLe episodes as transcripts."""
    return [_published(prompt, ep) for ep in load_episodes()]


def _published(prompt: PromptTemplate, ep: PublishedEpisode) -> list[Piece]:
    max_rounds = Budget().max_rounds
    shared, own = prompt.opening(ep["question"], ep.get("hint"), max_rounds=max_rounds)
    pieces: list[Piece] = shared + own
    for round_ in ep["rounds"]:
        if round_.get("forced"):
            pieces += _assistant_turn(prompt, round_["think"], round_["calls"][0]["args"])
            break
        calls: list[tuple[str, str]] = []
        for call in round_["calls"]:
            text = _call_text(call["tool"], call_args(call["tool"], call["args"]))
            output = "\n".join(ep["tables"]) if call["tool"] == "list_tables" else call["out"] or ""
            calls += [(text, output)] * call["n"]
        pieces += _assistant_turn(prompt, round_["think"], "\n".join(text for text, _ in calls))
        if any(call["tool"] == "submit_sql" for call in round_["calls"]):
            break
        budget = round_.get("budget") or ""
        left = _TURNS_LEFT.search(budget)
        pieces += _user_turn(
            prompt,
            _results(prompt, calls) + prompt.result_separator + (prompt.budget_text(int(left[1])) if left else budget),
        )
    return pieces


# -- episodes from the bundled questions' gold SQL --------------------------------------------


def gold_sql_transcripts(prompt: PromptTemplate, questions: Sequence[Question]) -> list[list[Piece]]:
    """One episode per question, its tool outputs from the real tools on the question's database."""
    transcripts = []
    for db_path in dict.fromkeys(q.db_path for q in questions):
        with ReadOnlyDatabase(db_path) as db:
            toolbox = Toolbox(db)
            tables = db.table_names()
            transcripts += [_gold_episode(prompt, toolbox, tables, q) for q in questions if q.db_path == db_path]
    return transcripts


def tables_named(sql: str, tables: Sequence[str]) -> list[str]:
    """The tables of `tables` that `sql` names, in the order it first names them."""
    found = [
        (m.start(), t)
        for t in tables
        if (m := re.search(r"(?<![\w])" + re.escape(t) + r"(?![\w])", sql, re.IGNORECASE))
    ]
    return [t for _, t in sorted(found)]


def _gold_episode(prompt: PromptTemplate, toolbox: Toolbox, tables: Sequence[str], q: Question) -> list[Piece]:
    max_rounds = Budget().max_rounds
    shared, own = prompt.opening(q.question, q.evidence, max_rounds=max_rounds)
    pieces: list[Piece] = shared + own
    named = tables_named(q.gold_sql, tables) or list(tables[:1])
    Calls = list[tuple[str, dict[str, JSONValue]]]
    inspect: Calls = [("describe_table", {"table_name": t}) for t in named]
    inspect.append(("sample_rows", {"table_name": named[0], "limit": SAMPLE_ROWS}))
    rounds: list[tuple[str, Calls]] = [
        ("I start by listing the tables.", [("list_tables", {})]),
        (f"The question is about {', '.join(named)}. I read their definitions and a few rows.", inspect),
        ("I run the query to check that its result answers the question.", [("run_query", {"sql": q.gold_sql})]),
    ]
    for index, (think, calls) in enumerate(rounds):
        texts = [_call_text(tool, args) for tool, args in calls]
        pieces += _assistant_turn(prompt, think, "\n".join(texts))
        results = [(text, toolbox.call(tool, args).output) for text, (tool, args) in zip(texts, calls)]
        pieces += _user_turn(
            prompt, _results(prompt, results) + prompt.result_separator + prompt.budget_text(max_rounds - index - 1)
        )
    pieces += _assistant_turn(prompt, "The result answers the question.", _call_text("submit_sql", {"sql": q.gold_sql}))
    return pieces
