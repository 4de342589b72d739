"""Teach it your database: notes and verified answers per database, kept beside the model.

`Knowledge` is edge-sql's own SQLite file in the model store (never the user's database);
`answers.brief` composes what it knows into BIRD's evidence channel, `answers.at_once`
answers a question asked before from its verified SQL. See docs/knowledge.md.
"""

from edge_sql.agent.given import FollowUp, Given, Note, VerifiedAnswer
from edge_sql.knowledge.identity import normalise_question, schema_identity
from edge_sql.knowledge.store import Knowledge

__all__ = ["FollowUp", "Given", "Knowledge", "Note", "VerifiedAnswer", "normalise_question", "schema_identity"]
