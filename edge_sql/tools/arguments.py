"""The one check of a tool call's arguments against its spec, in two strictnesses.

Lenient (`Toolbox.call`, as the training environment ran the tools): a missing or null optional
argument takes its default; an integer may come as an integral float or a plain decimal string,
and every integer out of range, however far (-5, 1000, 10**100), is clamped into it: a limit
asks for how many rows to show, and one past the most asks for the most, so how many digits it
has changes nothing (a refusal would also cost the model a round). Strict (`agent.parsing`, the
model's own calls, which the grammar shaped): the arguments must be exactly what the grammar
allows: JSON integers within range, nothing filled in or changed. Both refuse unknown and missing arguments, wrong types and
NUL characters, with the same messages.
"""

from __future__ import annotations

import math
import re
from typing import Any

from edge_sql.tools.specs import ToolArg, ToolSpec

# Past this many digits a number is out of every range: it is read as +-10**MAX_INTEGER_DIGITS,
# which clamps the same, so a 5,000-digit string costs no conversion
MAX_INTEGER_DIGITS = 9
_INTEGER_TEXT = re.compile(r"([+-]?)0*([0-9]+)")


class ToolCallError(Exception):
    """A call the model got wrong; its message is shown to the model after `Error: `."""


def checked_args(spec: ToolSpec, args: Any, *, strict: bool = False) -> dict[str, Any]:  # Any: JSON
    """`args` checked against `spec` (see the module's docstring); raises ToolCallError."""
    if not isinstance(args, dict):
        raise ToolCallError(f"{spec.name} expects its args as a JSON object")
    unknown = [key for key in args if spec.arg(key) is None]
    if unknown:
        allowed = ", ".join(a.name for a in spec.args) or "none"
        raise ToolCallError(f"{spec.name} got an unexpected argument {unknown[0]!r} (its arguments: {allowed})")
    checked = {}
    for arg in spec.args:
        missing = arg.name not in args or (args[arg.name] is None and not strict)
        if missing:
            if arg.required:
                raise ToolCallError(f"{spec.name} needs the argument {arg.name!r}")
            if not strict:
                checked[arg.name] = arg.default
            continue
        checked[arg.name] = _checked_value(spec, arg, args[arg.name], strict)
    return checked


def _checked_value(spec: ToolSpec, arg: ToolArg, value: Any, strict: bool) -> Any:  # Any: JSON
    if arg.type == "string":
        if not isinstance(value, str):
            raise ToolCallError(f"{spec.name}: {arg.name} must be a string")
        if "\x00" in value:
            raise ToolCallError(f"{spec.name}: {arg.name} contains a NUL character")
        return value
    number = _as_integer(value, strict)
    clamped = number
    if clamped is not None and arg.minimum is not None:
        clamped = max(arg.minimum, clamped)
    if clamped is not None and arg.maximum is not None:
        clamped = min(arg.maximum, clamped)
    if clamped is None or (strict and clamped != number):  # strict: out of range is an error
        allowed = ""
        if arg.minimum is not None and arg.maximum is not None:
            allowed = f" from {arg.minimum} to {arg.maximum}"
        raise ToolCallError(f"{spec.name}: {arg.name} must be an integer{allowed}")
    return clamped


def _as_integer(value: Any, strict: bool) -> int | None:  # Any: model-JSON
    """An int (strict: only that), an integral float or a plain ASCII decimal string, with any
    value past MAX_INTEGER_DIGITS digits as +-10**MAX_INTEGER_DIGITS; anything else (bools,
    "²", "+-5", "1e3", 2.5) is None."""
    bound = 10**MAX_INTEGER_DIGITS
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return max(-bound, min(bound, value))
    if strict:
        return None
    if isinstance(value, float) and math.isfinite(value) and value.is_integer():
        return max(-bound, min(bound, int(value)))
    if isinstance(value, str):
        match = _INTEGER_TEXT.fullmatch(value.strip(" \t"))
        if match:
            sign, digits = match.groups()
            number = int(digits) if len(digits) <= MAX_INTEGER_DIGITS else bound
            return -number if sign == "-" else number
    return None
