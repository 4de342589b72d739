"""The HTTP routes of what a person teaches about a database (issue 51; edge_sql/knowledge):

    GET    /v1/notes?database=NAME          -> {database, notes, verified, schema_change}
    POST   /v1/notes                        {database, text, question?} -> {note, message}: 201
    DELETE /v1/notes/{id}?database=NAME     -> {removed: id, note, message}
    POST   /v1/verify                       {database, question, sql, evidence?, follows?, replace?}
                                            -> {verified, action, replaced, message}: 201 (200: unchanged)
    GET    /v1/notes/history?database=NAME  -> {database, changes}: what teaching changed, oldest first
    POST   /v1/notes/undo                   {database, change} -> {undone, message}

Notes and verified answers live in edge-sql's own knowledge database in the model store, never
in the served files. A refused note or answer (empty, over its bound, SQL that writes or does
not run, no such note) is 422 with the knowledge's one line; verifying a question that has a
verified answer with other SQL is 409 naming it, unless `"replace": true` (issue 61). With
`serve --teach-token`, every route here that writes needs that token (403, tokens.py).
"""

from __future__ import annotations

import asyncio

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from edge_sql.errors import BadRequest, EdgeSqlError
from edge_sql.knowledge.changes import Surface
from edge_sql.serve.http_plumbing import error_response, read_body
from edge_sql.serve.request import NoteRequest, UndoRequest, VerifyRequest
from edge_sql.serve.service import Service
from edge_sql.serve.tokens import check_teacher

SURFACE_HEADER = "X-Edge-Sql-Surface"  # "page" from the web page (api.js)


def knowledge_routes(service: Service) -> list[Route]:
    async def list_notes(request: Request) -> Response:
        try:
            database = database_param(request)
            return JSONResponse(await asyncio.to_thread(service.knowledge_of, database))
        except EdgeSqlError as exc:
            return error_response(exc)

    async def add_note(request: Request) -> Response:
        try:
            check_teacher(request.scope)
            note = NoteRequest.from_json(await read_body(request, service.limits.max_body_bytes))
            added = await asyncio.to_thread(service.add_note, note, surface(request))
        except EdgeSqlError as exc:
            return error_response(exc)
        return JSONResponse(
            {"note": added.to_json(), "message": f"added note {added.id}: {added.text}"}, status_code=201
        )

    async def remove_note(request: Request) -> Response:
        try:
            check_teacher(request.scope)
            note_id = request.path_params["note_id"]
            note = await asyncio.to_thread(service.remove_note, database_param(request), note_id, surface(request))
        except EdgeSqlError as exc:
            return error_response(exc)
        said = f"removed note {note_id}: {note.text} (the history keeps it)"
        return JSONResponse({"removed": note_id, "note": note.to_json(), "message": said})

    async def verify(request: Request) -> Response:
        try:
            check_teacher(request.scope)
            confirmed = VerifyRequest.from_json(await read_body(request, service.limits.max_body_bytes))
            answer = await asyncio.to_thread(service.verify, confirmed, surface(request))
        except EdgeSqlError as exc:
            return error_response(exc)
        return JSONResponse(answer.reply_json(), status_code=200 if answer.action == "unchanged" else 201)

    async def history(request: Request) -> Response:
        try:
            return JSONResponse(await asyncio.to_thread(service.history, database_param(request)))
        except EdgeSqlError as exc:
            return error_response(exc)

    async def undo(request: Request) -> Response:
        try:
            check_teacher(request.scope)
            asked = UndoRequest.from_json(await read_body(request, service.limits.max_body_bytes))
            change = await asyncio.to_thread(service.undo, asked.database, asked.change, surface(request))
        except EdgeSqlError as exc:
            return error_response(exc)
        return JSONResponse({"undone": change.to_json(), "message": change.undone_line()})

    return [
        Route("/v1/notes", list_notes, methods=["GET"]),
        Route("/v1/notes", add_note, methods=["POST"]),
        Route("/v1/notes/history", history, methods=["GET"]),
        Route("/v1/notes/undo", undo, methods=["POST"]),
        Route("/v1/notes/{note_id:int}", remove_note, methods=["DELETE"]),
        Route("/v1/verify", verify, methods=["POST"]),
    ]


def surface(request: Request) -> Surface:
    """Where a change came from, for the history: the page (its calls say so) or HTTP."""
    return "page" if request.headers.get(SURFACE_HEADER, "").lower() == "page" else "HTTP"


def database_param(request: Request) -> str:
    """The `database` query parameter (BadRequest when it is missing)."""
    name = request.query_params.get("database")
    if not name:
        raise BadRequest("missing query parameter 'database' (a name from GET /v1/databases)")
    return name
