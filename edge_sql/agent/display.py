"""Terminal text for episodes: one line per tool call, the answer's rows as an aligned table."""

from __future__ import annotations

import json
from collections.abc import Sequence

from edge_sql.agent.how import answer_notes
from edge_sql.agent.result import CallRecord, EpisodeResult
from edge_sql.agent.stats import VoteStats
from edge_sql.tools import format_value

CALL_LINE_WIDTH = 110
CELL_WIDTH = 40
TABLE_ROWS = 20
FAILED_SQL_LINES = 12  # of an answer that did not run (a broken one can be long)


def plural(n: int, word: str, words: str | None = None) -> str:
    """`1 round`, `3 rounds`, `2 queries` (`words`: the plural when it is not `word` + s)."""
    return f"{n} {word if n == 1 else (words or word + 's')}"


def shorten(text: str, width: int) -> str:
    """`text` on one line, cut to `width` characters with an ellipsis."""
    line = " ".join(text.split())
    return line if len(line) <= width else line[: max(0, width - 1)] + "…"


def call_signature(call: CallRecord) -> str:
    """`run_query(sql="SELECT 1")`: the call as a function call."""
    args = ", ".join(f"{name}={json.dumps(value, ensure_ascii=False)}" for name, value in call.args.items())
    return f"{call.tool}({args})"


def result_summary(call: CallRecord) -> str:
    """A one-line view of what the call returned."""
    if not call.ok:
        return (
            "error: " + call.output.removeprefix("Error: ").strip().splitlines()[0] if call.output.strip() else "error"
        )
    lines = [line.strip() for line in call.output.splitlines() if line.strip()]
    if not lines:
        return "(empty)"
    if call.tool == "list_tables":
        return plural(len(lines), "table") + ": " + ", ".join(lines)
    return " / ".join(lines)  # cut to the line width by the caller


def call_line(call: CallRecord, width: int = CALL_LINE_WIDTH) -> str:
    """`  ok  describe_table(table_name="Album") -> CREATE TABLE ...`, within `width` characters."""
    mark = "ok " if call.ok else "err"
    head = f"{mark} {shorten(call_signature(call), width // 2)}"
    return "  " + shorten(f"{head} -> {result_summary(call)}", width - 2)


def table_text(
    columns: Sequence[str],
    rows: Sequence[Sequence[object]],
    *,
    max_rows: int = TABLE_ROWS,
    cell_width: int = CELL_WIDTH,
) -> str:
    """Rows as an aligned text table with a header rule; at most `max_rows` rows."""
    if not columns:
        return "(no columns)"
    shown = [[shorten(format_value(v), cell_width) for v in row] for row in rows[:max_rows]]
    header = [shorten(c, cell_width) for c in columns]
    widths = [max(len(h), *(len(r[i]) for r in shown)) if shown else len(h) for i, h in enumerate(header)]
    numeric = [
        bool(rows) and all(isinstance(row[i], (int, float)) or row[i] is None for row in rows[:max_rows])
        for i in range(len(columns))
    ]

    def line(cells: Sequence[str]) -> str:
        return "  ".join(c.rjust(w) if num else c.ljust(w) for c, w, num in zip(cells, widths, numeric)).rstrip()

    out = [line(header), "  ".join("-" * w for w in widths)] + [line(r) for r in shown]
    if not rows:
        out.append("(no rows)")
    elif len(rows) > max_rows:
        out.append(f"... {len(rows) - max_rows} more rows")
    return "\n".join(out)


def answer_text(result: EpisodeResult) -> str:
    """The final SQL, how it was reached, and its rows as a table."""
    if result.stop == "cancelled":
        return "stopped."
    if result.stop == "abstained":  # --abstain-below: the vote agreed too little
        lines = [f"{result.error}; the voted SQL was: {result.answer}"]
        if result.checks is not None:
            lines.append(result.checks.summary())
        return "\n".join([*lines, stats_line(result, "not sure")])
    notes = answer_notes(result)
    lines = [f"({'; '.join(notes)})"] if notes else []
    if result.sql is None:
        if result.answer:
            answer = result.answer.splitlines()
            lines.append("SQL (did not run): " + "\n".join(answer[:FAILED_SQL_LINES]))
            if len(answer) > FAILED_SQL_LINES:
                lines.append(f"... {len(answer) - FAILED_SQL_LINES} more lines (--json shows the whole answer)")
        error = result.error or ""
        lines += [error if error.startswith("no answer") else f"no answer: {error}", stats_line(result, "no result")]
        return "\n".join(lines)
    lines += ["SQL: " + result.sql, "", table_text(result.columns, result.rows)]
    if result.checks is not None:
        lines.append(result.checks.summary())
    count = f"{len(result.rows)}{'+' if result.truncated else ''} row{'s' if len(result.rows) != 1 else ''}"
    lines.append(stats_line(result, count))
    return "\n".join(lines)


def stats_line(result: EpisodeResult, head: str) -> str:
    """`(<head>; 3 rounds, 7 calls; 46.1 s; 436 tokens generated at 15.5 tok/s)`; a verified
    answer ran no episode: `(<head>; no episode: a verified answer)`."""
    if result.stop == "verified":
        return f"({head}; no episode: a verified answer)"
    figures = result.stats.measured
    timings = figures.timings
    return (
        f"({head}; {plural(figures.rounds, 'round')}, {plural(figures.calls, 'call')}; "
        f"{figures.wall_s:.1f} s; "
        f"{plural(timings.generated_tokens, 'token')} generated at {figures.decode_tok_s:.1f} tok/s"
        + (
            f"; {timings.accepted_draft_tokens} of {timings.draft_tokens} draft tokens accepted"
            if timings.draft_tokens
            else ""
        )
        + ")"
    )


def vote_text(vote: VoteStats) -> str:
    """Each episode's answer and group, then the agreement: `3 of 4 episodes agreed`."""
    from edge_sql.agent.majority_vote import agreement_line

    assert vote.seeds is not None and vote.wall_s is not None  # an Agent's vote sets them
    lines = []
    for i, episode in enumerate(vote.episodes):
        mark = "*" if i == vote.chosen else " "
        failed = episode.failed_queries
        shown = f"no vote: {episode.reason}" if episode.group is None else f"group {episode.group + 1}: {episode.sql}"
        lines.append(
            f"{mark} "
            + shorten(
                f"episode {i + 1} (seed {vote.seeds[i]}, {failed} failed quer{'y' if failed == 1 else 'ies'}): {shown}",
                CALL_LINE_WIDTH - 2,
            )
        )
    lines.append(
        f"{agreement_line(vote)}; the answer is episode {vote.chosen + 1}'s ({vote.wall_s:.1f} s for all {vote.k})"
    )
    return "\n".join(lines)
