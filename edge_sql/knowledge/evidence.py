"""The evidence a question is asked with: the user's own, then what the knowledge adds.

The model was trained with one channel for hints, BIRD's evidence, written inline after the
question (`<question>, evidence: <hint>`; the prompt's `evidence_template`). Notes, similar
verified answers and the previous answer of a follow-up go into that channel as more hints,
joined the way BIRD joins its own (`; `), so nothing new enters the prompt's shape. What is
added is bounded in tokens, measured with the model's own tokenizer.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from edge_sql.agent.given import FollowUp, Given, Note, VerifiedAnswer
from edge_sql.errors import KnowledgeError

TokenCounter = Callable[[str], int]
HINT_SEPARATOR = "; "
EVIDENCE_TOKEN_BOUND = 512  # all that the knowledge adds to one question's evidence
ITEM_TOKEN_BOUND = 256  # one note, one verified answer's hint, one follow-up pair
EXAMPLES_PER_QUESTION = 3


def utf8_bytes(text: str) -> int:
    """An upper bound on the tokens of `text` for a byte-level BPE such as Qwen's (every token is at
    least one byte): the bound used where no model's tokenizer is at hand (`edge-sql notes add`)."""
    return len(text.encode("utf-8"))


def one_line(sql: str) -> str:
    """SQL on one line (the evidence is inline after the question): whitespace runs folded."""
    return " ".join(sql.split())


def note_hint(note: Note) -> str:
    return note.text.strip()


def example_hint(example: VerifiedAnswer) -> str:
    return f"a similar question '{example.question.strip()}' was answered by: {one_line(example.sql)}"


def follow_up_hint(follow_up: FollowUp) -> str:
    return f"this question follows the question '{follow_up.question.strip()}', answered by: {one_line(follow_up.sql)}"


def check_item(kind: str, hint: str, count_tokens: TokenCounter, bound: int = ITEM_TOKEN_BOUND) -> None:
    """Refuse (KnowledgeError, one line) a note or verified answer whose hint is over `bound` tokens."""
    n = count_tokens(hint)
    if n > bound:
        # without a model's tokenizer the bound is counted in UTF-8 bytes: say so, not "tokens"
        unit = "bytes (UTF-8, an upper bound on its tokens)" if count_tokens is utf8_bytes else "tokens"
        raise KnowledgeError(
            f"{kind} is {n} {unit} long as a hint, over the bound of {bound}: shorten it "
            "(the model reads it with every matching question)"
        )


@dataclass(frozen=True)
class Composed:
    """The evidence to ask with (None: none at all) and what the knowledge put into it."""

    evidence: str | None
    given: Given


def compose(
    evidence: str | None,
    *,
    notes: Sequence[Note] = (),
    examples: Sequence[VerifiedAnswer] = (),
    follow_up: FollowUp | None = None,
    count_tokens: TokenCounter = utf8_bytes,
    bound: int = EVIDENCE_TOKEN_BOUND,
    schema_change: str | None = None,
) -> Composed:
    """The user's evidence, then the follow-up pair, the notes and the examples (most similar
    first), each as one hint, as many as fit within `bound` tokens of added text (the user's own
    evidence is not counted: it is theirs). A follow-up that alone is over the bound is refused:
    the previous SQL is too long to carry."""
    added: list[str] = []
    used = 0

    def fits(hint: str) -> bool:
        nonlocal used
        cost = count_tokens((HINT_SEPARATOR if added or evidence else "") + hint)
        if used + cost > bound:
            return False
        added.append(hint)
        used += cost
        return True

    kept_follow_up = None
    if follow_up is not None:
        if not fits(follow_up_hint(follow_up)):
            raise KnowledgeError(
                f"the previous answer's SQL is too long to follow (over {bound} tokens as a hint): ask a new question"
            )
        kept_follow_up = follow_up
    kept_notes = [n for n in notes if fits(note_hint(n))]
    kept_examples = [e for e in examples if fits(example_hint(e))]
    own = evidence.strip() if evidence and evidence.strip() else None
    parts = ([own] if own else []) + added
    return Composed(
        HINT_SEPARATOR.join(parts) if parts else None,
        Given(notes=kept_notes, examples=kept_examples, follow_up=kept_follow_up, schema_change=schema_change),
    )
