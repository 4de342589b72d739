"""The names and literals of one SQL statement, resolved as SQLite resolves them.

sqlglot (dialect sqlite) parses the statement and qualifies every column with the table it comes
from against the schema of the tables the statement names (aliases, CTEs, subqueries, USING and
unqualified columns followed; identifiers matched case-insensitively, quoted or not, bracketed
names such as `[Order Details]` included). A column of a CTE or subquery is followed to the stored
column it selects where it selects one plainly.

Each comparison of a column with literals (`=`, `!=`, `IN`, `LIKE`, `GLOB`, `BETWEEN` on text)
becomes a `Comparison` whose `condition` is the same comparison over the bare column, ready to run
as `SELECT 1 FROM <table> WHERE <condition>` against the table alone.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import TypeVar, cast

import sqlglot
from sqlglot import exp
from sqlglot.errors import SqlglotError
from sqlglot.optimizer.qualify import qualify
from sqlglot.optimizer.scope import Scope, traverse_scope

from edge_sql.tools.identifiers import fold_identifier

_T = TypeVar("_T")

DIALECT = "sqlite"


@dataclass(frozen=True)
class ColumnRef:
    """A stored column: table and column as the schema spells them."""

    table: str
    column: str


@dataclass(frozen=True)
class Comparison:
    """A column compared with a literal. `condition` runs over the bare column of `column.table`;
    `bare` says the column is compared as it is (an index on it can answer `=`/`IN`)."""

    column: ColumnRef
    op: str
    value: str | int | float  # the literal as Python reads it (a number, or the text)
    literal: str
    condition: str
    bare: bool
    pattern: bool
    column_expr: str


@dataclass
class SqlNames:
    """Everything the statement names, in order of first use; `unknown` are names the schema lacks."""

    tables: list[str] = field(default_factory=list)
    columns: list[ColumnRef] = field(default_factory=list)
    comparisons: list[Comparison] = field(default_factory=list)
    unknown: list[str] = field(default_factory=list)
    unparsed: str | None = None  # why the SQL cannot be read at all, in a plain sentence
    error: str | None = None  # why its names could not be resolved


# stored table name -> its stored column names; None when the table does not exist
SchemaLookup = Callable[[str], tuple[str, list[str]] | None]


NOT_SQL = "it does not parse as SQL"


def parse_sql(sql: str) -> exp.Expression:
    """The one statement of `sql`; SqlglotError for none, several, one that is not a query or
    text that does not parse, its message a plain sentence (never the parser's internals)."""
    try:
        statements = [s for s in sqlglot.parse(sql, read=DIALECT) if s is not None]
    except SqlglotError:
        raise SqlglotError(NOT_SQL) from None
    if not statements:
        raise SqlglotError("there is no SQL statement")
    if len(statements) > 1:
        raise SqlglotError(f"it holds {len(statements)} statements; one is checked at a time")
    if not isinstance(statements[0], exp.Query):
        raise SqlglotError(
            f"it is a {statements[0].key.upper()} statement, not a query: only SELECT, WITH and VALUES are checked"
        )
    return cast(exp.Expression, statements[0])


def read_names(sql: str, lookup: SchemaLookup) -> SqlNames:
    """Resolve the tables, columns and compared literals of `sql`; `lookup(name)` gives a table's
    stored name and columns (matched as SQLite matches names) or None."""
    names = SqlNames()
    try:
        tree = parse_sql(sql)
    except SqlglotError as exc:
        names.unparsed = str(exc)
        return names
    ctes = {fold_identifier(c.alias_or_name) for c in tree.find_all(exp.CTE)}
    schema: dict[str, object] = {}
    stored: dict[str, str] = {}  # folded table name -> stored name
    columns_of: dict[str, dict[str, str]] = {}  # stored table -> folded column -> stored column
    for table in tree.find_all(exp.Table, bfs=False):  # in the order the SQL names them
        folded = fold_identifier(table.name)
        if not table.name or folded in ctes or folded in stored or table.args.get("db"):
            continue
        found = lookup(table.name)
        if found is None:
            _add(names.unknown, f"table {table.name}")
            continue
        real, cols = found
        stored[folded] = real
        columns_of[real] = {fold_identifier(c): c for c in cols}
        schema[real] = {c: "TEXT" for c in cols}
    try:
        tree = qualify(
            tree,
            schema=schema,
            dialect=DIALECT,
            validate_qualify_columns=False,
            quote_identifiers=False,
            identify=False,
        )
        scopes = list(traverse_scope(tree))
    except SqlglotError as exc:
        message = str(exc).splitlines()[0]
        if message.startswith("Unknown column: "):  # a qualified name the table lacks
            _add(names.unknown, f"column {message.removeprefix('Unknown column: ')}")
            return names
        names.error = f"the names could not be resolved ({message[:200]})"
        return names
    except (KeyError, ValueError, AttributeError) as exc:
        names.error = f"the names could not be resolved ({str(exc).splitlines()[0][:200]})"
        return names
    resolved: dict[int, ColumnRef | None] = {}
    for scope in scopes:
        for source in scope.sources.values():
            if isinstance(source, exp.Table) and fold_identifier(source.name) in stored:
                _add(names.tables, stored[fold_identifier(source.name)])
        for column in scope.columns:
            ref = _resolve(column, scope, stored, columns_of, resolved)
            resolved[id(column)] = ref
            if ref is not None:
                _add(names.columns, ref)
            elif column.table and isinstance(scope.sources.get(column.table), exp.Table):
                _add(names.unknown, f"column {column.table}.{column.name}")
            elif not column.table and not _is_alias(column, scope):
                _add(names.unknown, f"column {column.name}")
    order = list(stored.values())
    names.tables.sort(key=order.index)
    names.comparisons = list(_comparisons(tree, resolved))
    return names


def _add(items: list[_T], item: _T) -> None:
    if item not in items:
        items.append(item)


def _is_alias(column: exp.Column, scope: Scope) -> bool:
    """An unqualified name that is one of the scope's own output aliases (ORDER BY total)."""
    if column.find_ancestor(exp.Order, exp.Group, exp.Having) is None:
        return False
    select = scope.expression
    aliases = {fold_identifier(s.alias_or_name) for s in getattr(select, "selects", [])}
    return fold_identifier(column.name) in aliases


def _resolve(
    column: exp.Column,
    scope: Scope,
    stored: dict[str, str],
    columns_of: dict[str, dict[str, str]],
    resolved: dict[int, ColumnRef | None],
) -> ColumnRef | None:
    """The stored column `column` reads, followed through CTEs and subqueries that select it plainly."""
    source = scope.sources.get(column.table) if column.table else None
    if isinstance(source, exp.Table):
        real = stored.get(fold_identifier(source.name))
        if real is None:
            return None
        name = columns_of[real].get(fold_identifier(column.name))
        return ColumnRef(real, name) if name is not None else None
    if isinstance(source, Scope):
        for projection in getattr(source.expression, "selects", []):
            if fold_identifier(projection.alias_or_name) != fold_identifier(column.name):
                continue
            inner = projection.this if isinstance(projection, exp.Alias) else projection
            if isinstance(inner, exp.Column):
                if id(inner) in resolved:
                    return resolved[id(inner)]
                return _resolve(inner, source, stored, columns_of, resolved)
            return None
    return None


# -- comparisons ---------------------------------------------------------------------------


def _literal_only(node: exp.Expression | None) -> exp.Literal | None:
    """The first literal of an expression made of literals only (no column, query or NULL)."""
    if node is None or node.find(exp.Column, exp.Query, exp.Null, exp.Placeholder, exp.Parameter) is not None:
        return None
    if isinstance(node, exp.Column):
        return None
    return node.find(exp.Literal)


def _value(literal: exp.Literal, node: exp.Expression) -> str | int | float:
    if literal.is_string:
        return literal.this
    text = str(literal.this)
    try:
        number: int | float = int(text)
    except ValueError:
        try:
            number = float(text)
        except ValueError:
            return text
    return -number if isinstance(node, exp.Neg) or isinstance(node.find(exp.Neg), exp.Neg) else number


def _column_side(
    node: exp.Expression, resolved: dict[int, ColumnRef | None]
) -> tuple[ColumnRef, exp.Expression, bool] | None:
    """The one stored column `node` reads, `node` rewritten over the bare column, and whether it is bare."""
    if node.find(exp.Query) is not None:
        return None
    columns = list(node.find_all(exp.Column))
    refs = {resolved.get(id(c)) for c in columns}
    if len(refs) != 1 or None in refs:
        return None
    ref = refs.pop()
    assert ref is not None

    def bare(n: exp.Expression) -> exp.Expression:
        return exp.column(ref.column, quoted=True) if isinstance(n, exp.Column) else n

    rewritten = node.copy().transform(bare)
    return ref, rewritten, isinstance(node, exp.Column)


def _comparisons(tree: exp.Expression, resolved: dict[int, ColumnRef | None]) -> Iterator[Comparison]:
    for node in tree.find_all(exp.EQ, exp.NEQ, exp.In, exp.Like, exp.Glob, exp.Between):
        if isinstance(node, (exp.EQ, exp.NEQ)):
            pairs = [(node.this, node.expression), (node.expression, node.this)]
            for column_node, other in pairs:
                literal = _literal_only(other)
                side = _column_side(column_node, resolved) if literal is not None else None
                if side is not None and literal is not None:
                    op = "=" if isinstance(node, exp.EQ) else "!="
                    yield _make(side, op, exp.EQ(this=side[1], expression=other.copy()), literal, other, False)
                    break
        elif isinstance(node, exp.In):
            side = _column_side(node.this, resolved)
            if side is None or node.args.get("query") is not None:
                continue
            for item in node.expressions:
                literal = _literal_only(item)
                if literal is not None:
                    yield _make(side, "IN", exp.EQ(this=side[1], expression=item.copy()), literal, item, False)
        elif isinstance(node, exp.Between):
            side = _column_side(node.this, resolved)
            low, high = node.args.get("low"), node.args.get("high")
            lows, highs = _literal_only(low), _literal_only(high)
            if (
                side is None
                or low is None
                or high is None
                or lows is None
                or highs is None
                or not (lows.is_string or highs.is_string)
            ):
                continue
            between = exp.Between(this=side[1], low=low.copy(), high=high.copy())
            yield _make(
                side, "BETWEEN", between, lows, node, False, literal_text=f"{low.sql(DIALECT)} AND {high.sql(DIALECT)}"
            )
        else:  # LIKE / GLOB, perhaps with ESCAPE, perhaps negated
            side = _column_side(node.this, resolved)
            literal = _literal_only(node.expression)
            if side is None or literal is None or not literal.is_string:
                continue
            kind: type[exp.Like] | type[exp.Glob] = exp.Like if isinstance(node, exp.Like) else exp.Glob
            match: exp.Expression = kind(this=side[1], expression=node.expression.copy())
            if isinstance(node.parent, exp.Escape):
                match = exp.Escape(this=match, expression=node.parent.expression.copy())
            op = "LIKE" if kind is exp.Like else "GLOB"
            yield _make(side, op, match, literal, node.expression, True)


def _make(
    side: tuple[ColumnRef, exp.Expression, bool],
    op: str,
    condition: exp.Expression,
    literal: exp.Literal,
    literal_node: exp.Expression,
    pattern: bool,
    literal_text: str | None = None,
) -> Comparison:
    ref, column_expr, bare = side
    return Comparison(
        column=ref,
        op=op,
        value=_value(literal, literal_node),
        literal=literal_text or literal_node.sql(DIALECT),
        condition=condition.sql(DIALECT),
        bare=bare,
        pattern=pattern,
        column_expr=column_expr.sql(DIALECT),
    )
