"""What a client may ask, as one pydantic model that both interfaces validate with (and the
SQL the web page runs, `POST /v1/query`, validated the same way).

HTTP bodies and MCP tool arguments go through the same `AskRequest` (no unknown fields, no
coercion: `"5"` is not a seed, `true` is not a number), and a mistake becomes one `BadRequest`
line that names the field, so both interfaces answer the same mistake with the same words.
"""

from __future__ import annotations

from typing import Annotated, Literal, Self

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator
from pydantic_core import ErrorDetails

from edge_sql.errors import BadRequest

SEED_LIMIT = 2**32
VOTE_MAX = 16  # episodes of one vote (`Settings.parallel_max`: the most that run at once)


class Request(BaseModel):
    """What every request model shares: no unknown fields, no coercion, frozen; read from an HTTP
    body with the first mistake as one BadRequest line."""

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)

    @classmethod
    def from_json(cls, body: bytes) -> Self:
        """An HTTP body; BadRequest with the first mistake otherwise."""
        try:
            return cls.model_validate_json(body)
        except ValidationError as exc:
            raise BadRequest(_first_mistake(exc, cls)) from None


class FollowUpRequest(Request):
    """The answer a question follows: the previous question and its SQL."""

    question: str = Field(description="The previous question")
    sql: str = Field(description="Its answer's SQL")


class AskRequest(Request):
    """A question about a database the operator named (by name, never by path)."""

    question: str = Field(description="The question, in plain language")
    database: str = Field(description="A name from list_databases (GET /v1/databases)")
    evidence: str | None = Field(None, description="An optional hint, e.g. what a term means")
    seed: int | None = Field(None, ge=0, lt=SEED_LIMIT, description="Makes the answer reproducible")
    vote: Annotated[int, Field(ge=2, le=VOTE_MAX)] | Literal["auto"] | None = Field(
        None,
        description=(
            "Answer by vote: K sampled episodes, the result most of them return (no progress events meanwhile); "
            '"auto": the largest K this server answers within 2x one episode (1: no vote)'
        ),
    )
    abstain_below: float | None = Field(
        None,
        gt=0,
        le=1,
        description=(
            "With vote: answer 'not sure' (stop 'abstained', no rows) when fewer than this share of the K "
            "episodes agree"
        ),
    )

    follow_up: FollowUpRequest | None = Field(
        None,
        description=(
            "The answer this question follows (e.g. 'and by year?'): the previous question and its SQL go to "
            "the model as evidence, and it decides what to keep"
        ),
    )
    fresh: bool = Field(
        False, description="Ask the model even when this very question has a verified answer on this database"
    )

    @model_validator(mode="after")
    def _abstain_needs_a_vote(self) -> AskRequest:
        if self.abstain_below is not None and self.vote is None:
            raise ValueError("abstain_below needs vote (the share of the vote's episodes that agree)")
        return self

    @classmethod
    def from_arguments(cls, arguments: dict[str, object]) -> AskRequest:
        """MCP tool arguments (already parsed JSON); BadRequest with the first mistake otherwise."""
        try:
            return cls.model_validate(arguments)
        except ValidationError as exc:
            raise BadRequest(_first_mistake(exc, cls)) from None


class NoteRequest(Request):
    """A note about a database for the model (`POST /v1/notes`, MCP `add_note`)."""

    database: str = Field(description="A name from list_databases (GET /v1/databases)")
    text: str = Field(description="What the model should know, e.g. 'amounts are in cents'")
    question: str | None = Field(
        None, description="Words the note is tied to: given only to questions that have them (none: always given)"
    )


class VerifyRequest(Request):
    """A person confirms an answer: this SQL answers this question (`POST /v1/verify`, MCP `verify`)."""

    database: str = Field(description="A name from list_databases (GET /v1/databases)")
    question: str = Field(description="The question the SQL answers")
    sql: str = Field(description="The answer's SQL, or its fix: one read-only statement that runs")
    evidence: str | None = Field(None, description="The hint the question was asked with, if any")
    follows: str | None = Field(
        None, description="The question this one followed (for the answer to a follow-up question)"
    )
    replace: bool = Field(
        False,
        description="Replace the question's verified answer if it has one with other SQL (only once the person "
        "confirmed it; without it such a request is refused, naming the stored SQL)",
    )


class UndoRequest(Request):
    """Undo one change of a database's notes and verified answers (`POST /v1/notes/undo`, MCP `undo`)."""

    database: str = Field(description="A name from list_databases (GET /v1/databases)")
    change: int = Field(description="The change's id, from GET /v1/notes/history (MCP: history)")


class QueryRequest(Request):
    """SQL of the client's own (the web page's edited SQL) for a database the operator named."""

    database: str = Field(description="A name from GET /v1/databases")
    sql: str = Field(description="One SELECT, WITH or VALUES statement, or a PRAGMA that only reads")


def _first_mistake(exc: ValidationError, model: type[BaseModel]) -> str:
    """One line for the most telling error: not JSON, not an object, unknown, missing, then wrong."""
    errors = exc.errors()
    by_type: dict[str, list[ErrorDetails]] = {}
    for error in errors:
        by_type.setdefault(error["type"], []).append(error)
    if "json_invalid" in by_type:
        return f"the body is not JSON: {by_type['json_invalid'][0]['ctx']['error']}"
    if "model_type" in by_type:
        required = ", ".join(f'"{name}": ...' for name, field in model.model_fields.items() if field.is_required())
        return f"the body must be a JSON object: {{{required}}}"
    if "extra_forbidden" in by_type:
        unknown = ", ".join(repr(e["loc"][0]) for e in by_type["extra_forbidden"])
        return (
            f"unknown field(s) {unknown}; allowed: {', '.join(model.model_fields)} "
            "(databases are named by the server: see GET /v1/databases)"
        )
    if "missing" in by_type:
        return f"missing field {'.'.join(str(part) for part in by_type['missing'][0]['loc'])!r}"
    error = errors[0]
    if error["type"] == "value_error" and not error["loc"]:  # a rule across fields (abstain_below needs vote)
        return str(error["msg"]).removeprefix("Value error, ")
    name = error["loc"][0] if error["loc"] else "body"
    if error["type"] in ("greater_than_equal", "less_than"):
        return f"field {name!r} is out of range ({error['msg'][0].lower()}{error['msg'][1:]})"
    literal = next((e for e in errors if e["type"] == "literal_error" and e["loc"][:1] == error["loc"][:1]), None)
    if error["type"].endswith("_type") and literal is not None:  # a number or a word (vote: K or "auto")
        return f"field {name!r} is neither a whole number nor {literal['ctx']['expected']}"
    if error["type"].endswith("_type"):
        return f"field {name!r} has the wrong type ({type(error['input']).__name__})"
    return f"field {name!r}: {error['msg']}"
