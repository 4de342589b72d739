"""`edge-sql serve`: one Agent behind a bounded queue, offered over MCP and a local HTTP API."""

from edge_sql.errors import QueueFull, QueueTimeout
from edge_sql.serve.queue import AskQueue
from edge_sql.serve.request import AskRequest
from edge_sql.serve.service import Limits, Service

__all__ = ["AskQueue", "AskRequest", "Limits", "QueueFull", "QueueTimeout", "Service"]
