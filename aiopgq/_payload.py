"""The payload: call arguments bound by name, encoded to JSON and back, with clear errors."""

from __future__ import annotations

import inspect
import json
import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from ._enqueue_options import OPTION_NAMES
from ._errors import shown

# Enqueue options share Task.enqueue's call with the task's own arguments, so a task
# cannot have a parameter of these names.
ENQUEUE_OPTIONS = OPTION_NAMES

_encoder = json.JSONEncoder(ensure_ascii=False, allow_nan=False, separators=(",", ":"))
# A NUL character encoded by JSON: \u0000 not preceded by an escaping backslash.
_JSON_NUL = re.compile(r"(?<!\\)(?:\\\\)*\\u0000")


def _has_nul(text: str) -> bool:
    # The substring test first: the usual text has no "\u0000" at all, and the regex
    # (an escaped backslash is not an escape) costs far more than a substring test.
    return "\\u0000" in text and _JSON_NUL.search(text) is not None


def check_signature(
    fn: Callable[..., Any], name: str, *, context: str | None = None
) -> inspect.Signature:
    """The signature of a task function as a payload binds it, rejecting parameters a
    payload cannot carry; `context`, the parameter the worker fills with the JobContext,
    is left out (enqueue neither asks for it nor accepts it)."""
    signature = inspect.signature(fn)
    if context is not None:
        kept = [p for p in signature.parameters.values() if p.name != context]
        signature = signature.replace(parameters=kept)
    for param in signature.parameters.values():
        if param.kind in (param.POSITIONAL_ONLY, param.VAR_POSITIONAL):
            raise TypeError(
                f"task {name}: parameter {param.name!r} is positional-only or *args; "
                "job payloads carry arguments by name, so make it a regular parameter"
            )
        if param.name in ENQUEUE_OPTIONS:
            raise TypeError(
                f"task {name}: parameter {param.name!r} clashes with the enqueue option of "
                f"that name ({', '.join(sorted(ENQUEUE_OPTIONS))}); rename the parameter"
            )
    return signature


def bind_arguments(
    signature: inspect.Signature, name: str, args: tuple[Any, ...], kwargs: Mapping[str, Any]
) -> dict[str, Any]:
    """The call's arguments by name; TypeError naming a missing or unknown one."""
    try:
        bound = signature.bind(*args, **kwargs)
    except TypeError as exc:
        raise TypeError(f"task {name}: {exc}") from None
    arguments = dict(bound.arguments)
    for param in signature.parameters.values():
        if param.kind is param.VAR_KEYWORD and param.name in arguments:
            arguments.update(arguments.pop(param.name))
    return arguments


class KeywordCheck:
    """Checks a dict of keyword arguments against a task's parameters with set operations.

    The same verdicts (and messages) as `Signature.bind(**kwargs)`, several times
    faster: it runs once per job on the worker and once per payload in enqueue_many.
    Made from a signature (`of`), or from the names a worker registered for the task.
    """

    def __init__(
        self, name: str, accepted: Sequence[str], required: Sequence[str], any_keyword: bool
    ) -> None:
        self._name = name
        self.accepted = tuple(accepted)  # in the signature's order
        self.required = tuple(required)
        self.any_keyword = any_keyword
        # Every name it accepts: a payload of exactly these keys passes as it is (the
        # worker tests that first: one comparison, not a call per job).
        self.names = frozenset(accepted)

    @classmethod
    def of(cls, signature: inspect.Signature, name: str) -> KeywordCheck:
        named = [
            p
            for p in signature.parameters.values()
            if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)
        ]
        return cls(
            name,
            [p.name for p in named],
            [p.name for p in named if p.default is p.empty],
            any(p.kind is p.VAR_KEYWORD for p in signature.parameters.values()),
        )

    def __call__(self, arguments: Mapping[str, Any]) -> None:
        for required in self.required:
            if required not in arguments:
                raise TypeError(
                    f"task {self._name}: missing a required argument: {shown(required)}"
                )
        if not self.any_keyword:
            for key in arguments:
                if key not in self.names:
                    raise TypeError(
                        f"task {self._name}: got an unexpected keyword argument {shown(key)}"
                    )


def encode_payload(arguments: Mapping[str, Any], name: str, max_bytes: int) -> str:
    """JSON text of the arguments; TypeError/ValueError naming the argument at fault."""
    try:
        text = _encoder.encode(arguments)
    except (TypeError, ValueError) as exc:
        raise _argument_error(arguments, name) or TypeError(f"task {name}: {exc}") from None
    if _has_nul(text):
        bad = next(k for k, v in arguments.items() if _has_nul(_encoder.encode(v)))
        raise ValueError(
            f"task {name}: argument {shown(bad)} contains a NUL character (\\x00), which "
            "PostgreSQL cannot store in JSON; strip it or send the data base64-encoded"
        )
    if len(text) > max_bytes:
        raise ValueError(
            f"task {name}: payload is {len(text)} bytes, over the {max_bytes}-byte limit; "
            "store large data elsewhere and pass a reference, or raise max_payload_bytes"
        )
    return text


def encode_payloads(payloads: list[dict[str, Any]], name: str, max_bytes: int) -> str:
    """One JSON array of many payloads; the checks and errors of encode_payload, with the
    item's index first ("item 3: task x: argument 'b' cannot be stored as JSON ...")."""
    try:
        text = _encoder.encode(payloads)
    except (TypeError, ValueError):
        text = ""  # find the payload and argument at fault below
    if not text or len(text) > max_bytes or _has_nul(text):
        _encode_naming_the_item(payloads, name, max_bytes)  # raises, or they pass one by one
    return text


def _encode_naming_the_item(payloads: list[dict[str, Any]], name: str, max_bytes: int) -> list[str]:
    """Each payload's JSON text, one encoder call each: the slow path that names the item
    (by its index) and the argument at fault."""
    texts = []
    for index, payload in enumerate(payloads):
        try:
            texts.append(encode_payload(payload, name, max_bytes))
        except (TypeError, ValueError) as exc:
            raise type(exc)(f"item {index}: {exc}") from None
    return texts


# The NUL string encoded, between two array elements. No payload holds a NUL (checked
# above: PostgreSQL refuses it in JSON) and a JSON string's own quotes are escaped,
# so in an array of payloads with "\x00" between them this occurs only there.
_NUL_SEPARATOR = ',"\\u0000",'


def encode_each_payload(payloads: list[dict[str, Any]], name: str, max_bytes: int) -> list[str]:
    """Each payload's JSON text, with the checks and errors of encode_payloads, from one
    encoder call (a call per payload costs more than the split): the payloads are encoded as
    one array with a NUL string between them, and split there."""
    joined: list[Any] = ["\x00"] * (2 * len(payloads) - 1)
    joined[0::2] = payloads
    try:
        text = _encoder.encode(joined)
    except (TypeError, ValueError):
        text = ""  # find the payload and argument at fault below
    texts: list[str] = []
    if text and text.count("\\u0000") == len(payloads) - 1:  # no payload holds one
        texts = text[1:-1].split(_NUL_SEPARATOR)
    if len(texts) != len(payloads) or (
        len(text) > max_bytes and any(len(t) > max_bytes for t in texts)
    ):
        return _encode_naming_the_item(payloads, name, max_bytes)
    return texts


def _argument_error(arguments: Mapping[str, Any], name: str) -> TypeError | None:
    for key, value in arguments.items():
        try:
            _encoder.encode(value)
        except (TypeError, ValueError) as exc:
            return TypeError(
                f"task {name}: argument {shown(key)} cannot be stored as JSON "
                f"({type(value).__name__}: {exc}); pass JSON types (str, int, float, "
                "bool, None, list, dict) and convert the rest, e.g. str(uuid)"
            )
    return None


# json.loads' own checks and regular expressions cost more than its C scanner does;
# a payload is jsonb output, one JSON value with nothing around it, so the scanner does.
# (typeshed does not declare the decoder's scan_once: the C scanner, made per decoder)
scan_json: Callable[[str, int], tuple[Any, int]] = json.JSONDecoder().scan_once  # type: ignore[attr-defined]


def decode_payload(text: str) -> Any:
    """The JSON value of `text`: ValueError when it is not one (as json.loads), and when
    it nests deeper than Python's decoder can follow (jsonb accepts far deeper)."""
    try:
        try:
            value, end = scan_json(text, 0)
        except StopIteration:  # no value where one starts
            end = -1
        if end != len(text):
            return json.loads(text)  # raises the error json.loads gives (or decodes the rest)
    except RecursionError:
        raise ValueError(
            "the JSON value nests arrays or objects deeper than Python's JSON decoder can follow"
        ) from None
    return value


def encode_result(value: Any) -> str | None:
    """JSON text of a handler's return value (None stays SQL NULL)."""
    if value is None:
        return None
    return _encoder.encode(value)
