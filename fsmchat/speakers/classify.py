"""Layer 10, the model layer: which provider errors no retry can fix, and a provider's message as a
person reads it.

litellm maps every provider's errors to its own exception classes; they are recognised here by
name (so nothing here imports litellm). ``acomplete`` gives the kind it finds to the
``ModelCallError`` it raises (``kind=``), which makes that error ``fatal``.
"""
from __future__ import annotations

import re
from typing import Iterable

from ..errors import ModelCallError

_REQUEST_ERRORS = (("ContextWindowExceededError", "context_window"), ("UnsupportedParamsError", "unsupported_params"),
                   ("AuthenticationError", "authentication"), ("PermissionDeniedError", "permission"),
                   ("NotFoundError", "not_found"), ("UnprocessableEntityError", "bad_request"),
                   ("ContentPolicyViolationError", "bad_request"), ("InvalidRequestError", "bad_request"),
                   ("BadRequestError", "bad_request"))
_NO_KEY = re.compile(r"missing credentials|api[_ ]?key (is )?(must be set|not (set|found|provided))|"
                     r"no api[_ ]?key|(set|pass) (an )?`?\w*api_key|api_key client option must be set", re.I)


def request_error_kind(exc: BaseException | None) -> str | None:
    """What kind of request error ``exc`` is, if no retry can fix it: ``authentication``,
    ``permission``, ``not_found``, ``bad_request``, ``context_window``, ``unsupported_params``,
    ``missing_credentials``; None for transient faults (timeouts, 429, 5xx, dropped connections)
    and anything else."""
    if exc is None:
        return None
    names = [c.__name__ for c in type(exc).__mro__]
    if "MissingCredentials" in names or (_NO_KEY.search(str(exc)) and "Timeout" not in names):
        return "missing_credentials"  # litellm maps a missing OpenAI key to InternalServerError (500)
    for cls, kind in _REQUEST_ERRORS:
        if cls in names:
            return kind
    status = getattr(exc, "status_code", None)
    if status in (401, 403, 404) or (isinstance(status, int) and status in (400, 413, 422)):
        return {401: "authentication", 403: "permission", 404: "not_found"}.get(status, "bad_request")
    return None


_PREFIXES = re.compile(r"^(?:litellm\.[\w.]+:\s*|[A-Z]\w*(?:Error|Exception|Timeout):\s*|\w+Exception\s+-\s*)")


def plain_message(text: str) -> str:
    """A provider's message without the library prefixes litellm stacks on it
    (``litellm.AuthenticationError: AuthenticationError: OpenAIException - ``), on one line.

    Examples:
        >>> from fsmchat.speakers.classify import plain_message
        >>> plain_message("litellm.AuthenticationError: AuthenticationError: OpenAIException - Incorrect API key")
        'Incorrect API key'
    """
    text = " ".join(str(text).split())
    while True:
        stripped = _PREFIXES.sub("", text, count=1)
        if stripped == text:
            return text
        text = stripped


def grouped_failures(failures: Iterable[tuple[str, BaseException]]) -> list[str]:
    """One line per cause: the agents whose calls failed the same way named together.

    Examples:
        >>> from fsmchat.errors import ModelCallError
        >>> from fsmchat.speakers.classify import grouped_failures
        >>> down = [(n, ModelCallError(n, ConnectionError("refused"), 1, "m")) for n in ("a", "b")]
        >>> grouped_failures([*down, ("c", ValueError("bad reply"))])
        ["agents 'a', 'b' (model 'm'), 1 attempt(s) each: ConnectionError: refused", "agent 'c': ValueError: bad reply"]
    """
    groups: dict[str, list[tuple[str, BaseException]]] = {}
    for name, err in failures:
        why = err.reason + err.hint() if isinstance(err, ModelCallError) else f"{type(err).__name__}: {err}"
        groups.setdefault(why, []).append((name, err))
    lines = []
    for why, members in groups.items():
        names = ", ".join(repr(n) for n, _ in members)
        models = sorted({str(e.model) for _, e in members if isinstance(e, ModelCallError) and e.model})
        attempts = sorted({e.attempts for _, e in members if isinstance(e, ModelCallError)})
        on = f" (model{'s' if len(models) > 1 else ''} {', '.join(repr(m) for m in models)})" if models else ""
        tries = f", {attempts[0]} attempt(s){' each' if len(members) > 1 else ''}" if len(attempts) == 1 else ""
        lines.append(f"agent{'s' if len(members) > 1 else ''} {names}{on}{tries}: {why}")
    return lines
