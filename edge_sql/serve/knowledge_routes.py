"""The HTTP routes of what a person teaches about a database (issue 51; edge_sql/knowledge):

    GET    /v1/notes?database=NAME      -> {database, notes, verified, schema_change}
    POST   /v1/notes                    {database, text, question?} -> {note}: 201
    DELETE /v1/notes/{id}?database=NAME -> {removed: id}
    POST   /v1/verify                   {database, question, sql, evidence?, follows?} -> {verified}: 201

Notes and verified answers live in edge-sql's own knowledge database in the model store, never
in the served files. A refused note or answer (empty, over its bound, SQL that writes or does
not run, no such note) is 422 with the knowledge's one line.
"""

from __future__ import annotations

import asyncio

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from edge_sql.errors import BadRequest, EdgeSqlError
from edge_sql.serve.http_plumbing import error_response, read_body
from edge_sql.serve.request import NoteRequest, VerifyRequest
from edge_sql.serve.service import Service


def knowledge_routes(service: Service) -> list[Route]:
    async def list_notes(request: Request) -> Response:
        try:
            database = database_param(request)
            return JSONResponse(await asyncio.to_thread(service.knowledge_of, database))
        except EdgeSqlError as exc:
            return error_response(exc)

    async def add_note(request: Request) -> Response:
        try:
            note = NoteRequest.from_json(await read_body(request, service.limits.max_body_bytes))
            added = await asyncio.to_thread(service.add_note, note)
        except EdgeSqlError as exc:
            return error_response(exc)
        return JSONResponse({"note": added.to_json()}, status_code=201)

    async def remove_note(request: Request) -> Response:
        try:
            note_id = request.path_params["note_id"]
            await asyncio.to_thread(service.remove_note, database_param(request), note_id)
        except EdgeSqlError as exc:
            return error_response(exc)
        return JSONResponse({"removed": note_id})

    async def verify(request: Request) -> Response:
        try:
            confirmed = VerifyRequest.from_json(await read_body(request, service.limits.max_body_bytes))
            answer = await asyncio.to_thread(service.verify, confirmed)
        except EdgeSqlError as exc:
            return error_response(exc)
        return JSONResponse({"verified": answer.to_json()}, status_code=201)

    return [
        Route("/v1/notes", list_notes, methods=["GET"]),
        Route("/v1/notes", add_note, methods=["POST"]),
        Route("/v1/notes/{note_id:int}", remove_note, methods=["DELETE"]),
        Route("/v1/verify", verify, methods=["POST"]),
    ]


def database_param(request: Request) -> str:
    """The `database` query parameter (BadRequest when it is missing)."""
    name = request.query_params.get("database")
    if not name:
        raise BadRequest("missing query parameter 'database' (a name from GET /v1/databases)")
    return name
