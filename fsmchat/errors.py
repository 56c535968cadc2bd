"""Exceptions fsmchat raises, and the way a failed run's result travels on an exception."""
from __future__ import annotations

import functools
import json
import os
import re
import threading
from typing import Any, Iterable, Mapping, TypeVar, cast

_T = TypeVar("_T")


class FsmchatError(Exception):
    """Base class of fsmchat's own errors: catch it to handle any of them.

    Each also derives from the built-in exception it is a kind of (``ValueError``,
    ``RuntimeError``, ``TypeError``, ...), so code that catches those keeps working.

    Examples:
        >>> from fsmchat import FsmchatError, StateGraph
        >>> try:
        ...     StateGraph("empty").validate()
        ... except FsmchatError as exc:
        ...     print(type(exc).__name__, isinstance(exc, ValueError))
        GraphError True
    """


class GraphError(FsmchatError, ValueError):
    """A state graph is malformed; the message names the state(s) at fault and how to fix it.

    Raised by ``StateGraph`` as it is built and by ``StateGraph.validate``, before anything runs.

    Examples:
        >>> from fsmchat import GraphError, StateGraph
        >>> try:
        ...     StateGraph("g").state("a").edge("a", "b").validate()
        ... except GraphError as exc:
        ...     print(exc)
        graph 'g': transition 'a' -> 'b' (next) names the undeclared state 'b'; declared states: a
    """


class RenderError(FsmchatError, RuntimeError):
    """A graph could not be rendered: an unknown file suffix, or Graphviz's ``dot`` is missing.

    DOT and Mermaid text never need Graphviz; SVG, PNG and PDF do.

    Examples:
        >>> from fsmchat import RenderError, StateGraph
        >>> g = StateGraph("g").state("a").final("b").edge("a", "b")
        >>> try:
        ...     g.render("g.txt")
        ... except RenderError as exc:
        ...     print(exc)
        cannot render to 'g.txt': unknown suffix '.txt'; use .svg, .png, .pdf, .dot, .gv or .mmd
    """


class NoTransitionError(FsmchatError, RuntimeError):
    """No outgoing transition of the current state could be taken at run time.

    Raised when every guard of a state was false (a graph without a fallback edge), or when an
    event-driven run is given an event its state has no transition for.

    Examples:
        >>> from fsmchat import GraphRun, NoTransitionError, StateGraph
        >>> door = StateGraph("door").state("closed").final("open").edge("closed", "open", label="push")
        >>> try:
        ...     GraphRun(door).fire("pull")
        ... except NoTransitionError as exc:
        ...     print(exc)
        graph 'door': state 'closed' has no 'pull' transition; it accepts 'push'
    """


class ConfigError(FsmchatError, ValueError):
    """A bad configuration or input, refused before any model call.

    The message names the owner, the field and its value, and what is allowed.

    Examples:
        >>> from fsmchat import Agent
        >>> Agent("critic", temperature="hot")
        Traceback (most recent call last):
        ...
        fsmchat.errors.ConfigError: Agent: temperature='hot' is invalid: a finite number >= 0 (0..2 for most providers)
    """


class ConfigTypeError(FsmchatError, TypeError):
    """A value of the wrong type, refused before any model call (same message style as ``ConfigError``).

    Examples:
        >>> from fsmchat import RoundRobinSwarm
        >>> def analyst(turn):
        ...     return "Data first."
        >>> RoundRobinSwarm(agents=[analyst], max_loop=2)
        Traceback (most recent call last):
        ...
        fsmchat.errors.ConfigTypeError: RoundRobinSwarm() got an unexpected keyword argument 'max_loop'; did you mean max_loops? ...
    """


class CheckpointStoreError(FsmchatError, RuntimeError):
    """A checkpoint store could not be opened or read; the message names the store and what to do.

    Examples:
        >>> import sqlite3
        >>> from fsmchat import SqliteCheckpointer
        >>> sqlite3.connect("notes.db").execute("CREATE TABLE notes (body TEXT)").connection.close()
        >>> SqliteCheckpointer("notes.db")
        Traceback (most recent call last):
        ...
        fsmchat.errors.CheckpointStoreError: checkpoint store notes.db: not an fsmchat checkpoint database ...
    """


class MCPServerError(FsmchatError, RuntimeError):
    """An MCP server could not start, stopped, or dropped its connection; the message names it.

    A server's own error results are not this (the tool failed, the server runs on); this is the
    server gone: a command that is not found, a process that exits, a connection that closes.

    Args:
        server: The server's name.
        what: What went wrong, as a phrase after the name ("exited during the call to tool 'add'").
        stderr: The tail of the server's stderr ("" when there is none), quoted in the message.
        command: The command that started it, if any.
        url: Its URL, if it is a streamable HTTP server.

    Examples:
        >>> from fsmchat.errors import MCPServerError
        >>> print(MCPServerError("files", "closed the connection during the call to tool 'read'",
        ...                      "Traceback ...\\nMemoryError", command=["python", "files.py"]))
        MCP server 'files' (command ['python', 'files.py']) closed the connection during the call to tool 'read'; its stderr ends with:
        Traceback ...
        MemoryError
    """

    def __init__(self, server: str, what: str, stderr: str = "", *, command: list[str] | None = None,
                 url: str | None = None):
        self.server, self.what, self.stderr, self.command, self.url = server, what, stderr, command, url
        where = f" (command {command!r})" if command else f" ({url})" if url and url != server else ""
        tail = f"; its stderr ends with:\n{stderr}" if stderr else ""
        super().__init__(f"MCP server {server!r}{where} {what}{tail}")


def bad_value(owner: str, field: str, value: Any, allowed: str, type_error: bool = False) -> FsmchatError:
    """The one message style for a refused value: ``"{owner}: {field}={value!r} is invalid: {allowed}"``."""
    shown = repr(value)
    if len(shown) > 80:
        shown = shown[:77] + "..."
    return (ConfigTypeError if type_error else ConfigError)(f"{owner}: {field}={shown} is invalid: {allowed}")


def invalid_config(owner: str, exc: Any) -> FsmchatError:
    """A pydantic ``ValidationError`` as one ``ConfigError`` in the style above (no pydantic URL):
    ``"Limits: max_model_calls=0 is invalid: input should be greater than or equal to 1"``. When
    the first error is an fsmchat error a validator raised, that error is returned as it is: it
    already says everything (``"GroupChat requires at least 2 agents."``)."""
    errors = exc.errors()
    raised = (errors[0].get("ctx") or {}).get("error") if errors else None
    if isinstance(raised, FsmchatError):
        return raised
    parts = []
    for err in errors:
        where = ".".join(str(x) for x in err["loc"]) or "config"
        msg = str(err["msg"])
        if err["type"] == "value_error":
            parts.append(msg.removeprefix("Value error, "))
        elif err["type"] == "extra_forbidden":
            parts.append(f"unknown option {where!r}")
        else:
            parts.append(f"{where}={err.get('input')!r} is invalid: {msg[:1].lower()}{msg[1:]}")
    return ConfigError(f"{owner}: " + "; ".join(parts))


# ---- model call errors: which ones no retry can fix ----
# litellm maps every provider's errors to these classes (by name, so this module never imports litellm).
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


# ---- secrets: one redaction rule for every channel ----
# A secret is (a) the value of anything an agent sends as a credential or a header (``api_key``,
# every ``extra_headers`` value, ``Authorization``, ``aws_secret_access_key``, ``vertex_credentials``
# ...), registered when the agent is made and again when its call fails; (b) the value of every
# credential-named environment variable (``OPENAI_API_KEY``, ``ANTHROPIC_API_KEY``, ``HF_TOKEN``...);
# (c) anything shaped like one (``Bearer ...``, ``sk-...``, ``name='value'`` under a secret name).
# ``redact`` applies the rule to a text; every channel that shows or stores an error calls it (error
# messages, the exception chain, log records, checkpointed stop events, the CLI, the viewer's
# JSON and reports, Ray payloads). Values shorter than ``MIN_SECRET_CHARS`` are masked only where
# a name or a shape shows them: masking every "true" or "eu" would garble the text.
MASK = "***"
MIN_SECRET_CHARS = 8
HEADER_OPTIONS = ("extra_headers", "headers", "default_headers")  # every value sent in these is a secret
_SECRET_PARTS = {"key", "apikey", "token", "secret", "password", "passwd", "authorization", "auth", "credential",
                 "credentials", "cookie", "bearer"}
_TOKEN_COUNT = re.compile(r"^(max|min|budget|num|total|prompt|completion|reasoning)(_[a-z]+)*_tokens$")
_SCHEME = re.compile(r"^(?:bearer|basic|token|apikey|key)\s+(\S+)$", re.I)
_SHAPES = re.compile(r"(?i)(bearer\s+)(?!\*\*\*)[^\s'\",]+|\b((?:sk|pk|rk|gsk|xai|hf)[-_][A-Za-z0-9_\-]{6,})"
                     r"|\b(AIza[0-9A-Za-z_\-]{10,})")
# every name is_secret accepts, and every shape of _SHAPES, contains one of these
_NAME_WORDS = ("key", "token", "secret", "passw", "auth", "credential", "cookie", "bearer")
_SHAPE_WORDS = ("bearer", "sk-", "sk_", "pk-", "pk_", "rk-", "rk_", "xai-", "xai_", "hf-", "hf_", "aiza")  # gsk_: sk_
# 'name': 'value'  "name": "value"  'name'='value'  (b'name', b'value')
_QUOTED = re.compile(r"""(?P<q>['"])(?P<name>[^'"\n]{1,80})(?P=q)(?P<sep>\s*[:=,]\s*)(?P<b>b?)(?P<vq>['"])"""
                     r"""(?P<value>(?:\\.|(?!(?P=vq))[^\\\n])*)(?P=vq)""")
# name='value'  name=value  (keyword arguments, query strings, environment variables)
_KEYWORD = re.compile(r"""(?<![\w'"-])(?P<name>[A-Za-z_][\w-]{0,79})(?P<sep>=)(?:(?P<vq>['"])"""
                      r"""(?P<qvalue>(?:\\.|(?!(?P=vq))[^\\\n])*)(?P=vq)|(?P<value>[^\s'",)}&]+))""")
# Name: value  (header lines, curl's -H 'Name: value')
_HEADER = re.compile(r"""(?<![\w-])(?P<name>[A-Za-z][\w-]{0,79})(?P<sep>:[ \t]*)(?P<value>[^'"\s,}][^'"\n,}]*)""")
_registry_lock = threading.Lock()
_registered: tuple[str, ...] = ()  # the values agents registered (replaced whole, so readers need no lock)


@functools.lru_cache(maxsize=4096)  # the same few names (dict keys, headers, variables) are asked again and again
def is_secret(name: str) -> bool:
    """Whether a keyword names a secret: ``api_key``, ``x-api-key``, ``access_token``,
    ``Authorization``, ``OPENAI_API_KEY``... but not counts such as ``max_tokens``.

    Examples:
        >>> from fsmchat.errors import is_secret
        >>> [is_secret(n) for n in ("api_key", "X-Token", "aws_secret_access_key", "vertex_credentials", "max_tokens")]
        [True, True, True, True, False]
    """
    lowered = re.sub(r"([a-z0-9])([A-Z])", r"\1_\2", name).lower()  # accessToken -> access_token
    parts = re.split(r"[_\-\s.]+", lowered)
    if any(p in _SECRET_PARTS for p in parts) or lowered.endswith(("apikey", "api_key", "secret")):
        return True
    return "tokens" in parts and not _TOKEN_COUNT.match(lowered)  # api_tokens yes; max_tokens no


def secret_values(options: Mapping[str, Any]) -> list[str]:
    """The secret values among an agent's options: every string under a secret-named key (at any
    depth), every header value (``extra_headers``, ``headers``, ``default_headers``), and the token
    of a ``"Bearer <token>"``-style value on its own. A JSON text under a secret name (a service
    account's ``vertex_credentials``) also gives its secret-named fields.

    Examples:
        >>> from fsmchat.errors import secret_values
        >>> secret_values({"api_key": "k-123", "temperature": 0.2, "extra_headers": {"X-Region": "eu-west-1"},
        ...                "extra_body": {"auth_token": "t-456"}})
        ['k-123', 'eu-west-1', 't-456']
    """
    out: list[str] = []

    def leaves(value: Any) -> None:
        if isinstance(value, str):
            out.append(value)
            scheme = _SCHEME.match(value.strip())
            if scheme:
                out.append(scheme.group(1))
            if value.lstrip().startswith("{"):
                try:
                    parsed = json.loads(value)
                except ValueError:
                    return
                if isinstance(parsed, dict):
                    walk(parsed, False)
        elif isinstance(value, Mapping):
            for v in value.values():
                leaves(v)
        elif isinstance(value, (list, tuple)):
            for v in value:
                leaves(v)

    def walk(value: Any, headers: bool) -> None:
        if isinstance(value, Mapping):
            for k, v in value.items():
                if headers or (isinstance(k, str) and is_secret(k)):
                    leaves(v)
                else:
                    walk(v, isinstance(k, str) and k in HEADER_OPTIONS)
        elif isinstance(value, (list, tuple)):
            for v in value:
                walk(v, headers)

    walk(options, False)
    return list(dict.fromkeys(out))


def register_secrets(values: Iterable[Any]) -> None:
    """Remember ``values`` as secrets of this process: ``redact`` masks them wherever they appear.
    Agents register their credential and header values when they are made; texts shorter than
    ``MIN_SECRET_CHARS`` are ignored (a name or shape still masks them)."""
    global _registered
    fresh = [v for v in values if isinstance(v, str) and len(v.strip()) >= MIN_SECRET_CHARS and v != MASK
             and v not in _registered]
    if fresh:
        with _registry_lock:
            _registered = tuple(dict.fromkeys([*_registered, *fresh]))


def known_secrets() -> list[str]:
    """Every secret value ``redact`` masks now, longest first: the registered ones and the values
    of the credential-named environment variables (read afresh: the environment may change)."""
    found = dict.fromkeys(_registered)
    for name, value in list(os.environ.items()):
        if is_secret(name) and len(value.strip()) >= MIN_SECRET_CHARS:
            found[value] = None
    return sorted(found, key=len, reverse=True)


def _quoted(m: re.Match[str]) -> str:
    if not is_secret(m.group("name")) or not m.group("value") or m.group("value") == MASK:
        return m.group(0)
    q, vq = m.group("q"), m.group("vq")
    return f"{q}{m.group('name')}{q}{m.group('sep')}{m.group('b')}{vq}{MASK}{vq}"


def _keyword(m: re.Match[str]) -> str:
    value = m.group("qvalue") or m.group("value")
    if not is_secret(m.group("name")) or not value or value == MASK:
        return m.group(0)
    vq = m.group("vq") or ""
    return f"{m.group('name')}={vq}{MASK}{vq}"


_HEADER_WORDS = {"authorization", "proxy-authorization", "cookie", "set-cookie"}  # values with spaces


def _header(m: re.Match[str]) -> str:
    # a header's name: hyphenated, one capitalised word or a known one, never prose ("credentials:")
    # nor an exception's type ("MissingCredentials: ..."); its value one token, except for the
    # headers whose values have spaces ("Basic abc", "a=b; c=d"): "Key: the main point" is prose
    name, value = m.group("name"), m.group("value").strip()
    known = name.lower() in _HEADER_WORDS
    header_like = known or "-" in name or (name[0].isupper() and name[1:].islower())
    if not header_like or not is_secret(name) or value == MASK or (" " in value and not known):
        return m.group(0)
    return f"{m.group('name')}{m.group('sep')}{MASK}"


def redact(text: str, *secrets: Any) -> str:
    """``text`` with every secret masked as ``***``: the known values (``known_secrets``, and
    ``secrets`` given here), then the value of every secret-named entry in the shapes errors and
    logs carry (dict reprs and JSON, header tuples, ``name=value``, ``Name: value``), then API keys
    and bearer tokens anywhere.

    Examples:
        >>> from fsmchat.errors import redact
        >>> redact('denied: {"x-token": "tok-1", "model": "m"} key=abc Authorization: Bearer xyz')
        'denied: {"x-token": "***", "model": "m"} key=*** Authorization: ***'
    """
    given = [s for s in secrets if isinstance(s, str) and len(s) >= 4 and s != MASK]
    return _redact(text, sorted(given, key=len, reverse=True) + known_secrets())


def _redact(text: str, values: list[str]) -> str:
    if not isinstance(text, str) or not text:
        return text
    for s in values:
        if s in text:
            text = text.replace(s, MASK)
    low = text.lower()
    shaped = any(w in low for w in _SHAPE_WORDS)
    if not shaped and not any(w in low for w in _NAME_WORDS):  # no secret name, no key shape: nothing below matches
        return text
    if "'" in text or '"' in text:
        text = _QUOTED.sub(_quoted, text)
    if "=" in text:
        text = _KEYWORD.sub(_keyword, text)
    if ":" in text:
        text = _HEADER.sub(_header, text)
    if shaped:
        text = _SHAPES.sub(lambda m: (m.group(1) + MASK) if m.group(1) else MASK, text)
    return text


def redact_data(value: _T, keep: Iterable[str] = ()) -> _T:
    """``value`` (JSON-like data) with every text redacted and every secret-named entry's value
    replaced by ``***``; other values are kept as they are, and so are the entries named in ``keep``
    (at any depth; a drawing's SVG, say).

    Examples:
        >>> from fsmchat.errors import redact_data
        >>> redact_data({"error": "denied for api_key=k-1", "headers": {"X-Token": "t-2"}, "n": 3})
        {'error': 'denied for api_key=***', 'headers': {'X-Token': '***'}, 'n': 3}
    """
    known, kept = known_secrets(), frozenset(keep)

    def walk(v: Any) -> Any:
        if isinstance(v, str):
            return _redact(v, known)
        if isinstance(v, Mapping):
            return {k: v2 if k in kept else MASK if isinstance(k, str) and is_secret(k) and isinstance(v2, str) and v2
                    else walk(v2) for k, v2 in v.items()}
        if isinstance(v, list):
            return [walk(x) for x in v]
        if isinstance(v, tuple):
            return tuple(walk(x) for x in v)
        return v

    return cast(_T, walk(value))


def exception_chain(exc: BaseException | None) -> list[BaseException]:
    """``exc`` and every exception it carries, outermost first: ``__cause__``, ``__context__``,
    a wrapper's ``cause`` / ``original_exception``, an exception group's members."""
    out: list[BaseException] = []
    seen: set[int] = set()
    todo: list[Any] = [exc]
    while todo:
        e = todo.pop()
        if not isinstance(e, BaseException) or id(e) in seen:
            continue
        seen.add(id(e))
        out.append(e)
        todo += [*reversed(getattr(e, "exceptions", None) or ()), getattr(e, "original_exception", None),
                 getattr(e, "cause", None), e.__context__, e.__cause__]
    return out


def redact_chain(exc: BaseException) -> BaseException:
    """Mask secrets in ``exc`` and in every exception it carries (``exception_chain``), in place:
    their arguments, their text attributes (litellm's ``message``, an OpenAI error's ``body``) and
    notes, so ``str``, ``repr``, ``traceback.format_exception`` and ``logging.exception`` show
    ``***`` for each. Returns ``exc``."""
    for e in exception_chain(exc):
        try:
            e.args = tuple(redact_data(a) for a in e.args)
        except (AttributeError, TypeError):
            pass
        if isinstance(e, OSError):
            for attr in ("strerror", "filename", "filename2"):
                if isinstance(getattr(e, attr, None), str):
                    setattr(e, attr, redact(getattr(e, attr)))
        for name, value in list(getattr(e, "__dict__", {}).items()):
            if isinstance(value, (str, dict, list, tuple)):
                try:
                    setattr(e, name, redact_data(value))
                except (AttributeError, TypeError):  # a read-only property
                    pass
    return exc


_PREFIXES = re.compile(r"^(?:litellm\.[\w.]+:\s*|[A-Z]\w*(?:Error|Exception|Timeout):\s*|\w+Exception\s+-\s*)")


def plain_message(text: str) -> str:
    """A provider's message without the library prefixes litellm stacks on it
    (``litellm.AuthenticationError: AuthenticationError: OpenAIException - ``), on one line.

    Examples:
        >>> from fsmchat.errors import plain_message
        >>> plain_message("litellm.AuthenticationError: AuthenticationError: OpenAIException - Incorrect API key")
        'Incorrect API key'
    """
    text = " ".join(str(text).split())
    while True:
        stripped = _PREFIXES.sub("", text, count=1)
        if stripped == text:
            return text
        text = stripped


_HINTS = {"authentication": "the provider refused the credentials; check the API key",
          "permission": "the credentials lack permission for this model",
          "not_found": "the provider does not know this model (or the api_base is wrong)",
          "bad_request": "the provider refused the request",
          "context_window": "the conversation is longer than the model's context window",
          "unsupported_params": "the provider does not accept one of the request's parameters",
          "missing_credentials": "no API key was found for this provider"}


REASON_CHARS = 500  # of a provider's message in a ModelCallError's one line


class ModelCallError(FsmchatError, RuntimeError):
    """A model call failed after fsmchat's retries; it says which agent, which model and why.

    A run that meets one ends with ``stop_reason="error"`` and the transcript so far; ``run()``
    raises it with that result attached (``result_of``). The message is one line, without the
    prefixes litellm stacks on a provider's text; secrets never appear in it, nor in the provider's
    exception it carries (``cause``: masked in place, shown in no traceback of its own).

    Args:
        agent: The agent whose call failed.
        cause: The provider's (or litellm's) exception from the last attempt.
        attempts: Requests sent, retries included.
        model: The model asked.
        secrets: Values masked out of the provider's message (the agent's ``api_key``); every
            registered secret (``register_secrets``) is masked too.
        reason: What went wrong, as a person can act on it (the endpoint that could not be
            reached, the limit that passed and who set it); by default the cause's type and its
            plain message.

    Attributes:
        kind: Set when no retry can fix the error (``authentication``, ``not_found``,
            ``context_window``, ...), which makes it ``fatal``; else None.
        provider_message: The provider's message, secrets masked.
        reason: The part of the message after the agent and the attempts (shared by every agent
            that failed the same way).

    Examples:
        >>> from fsmchat import ModelCallError
        >>> exc = ModelCallError("critic", TimeoutError("no answer in 30 s"), 3, "gpt-4o-mini")
        >>> print(exc)
        model call for agent 'critic' (model 'gpt-4o-mini') failed after 3 attempt(s): TimeoutError: no answer in 30 s
        >>> exc.fatal
        False
    """

    def __init__(self, agent: str, cause: BaseException, attempts: int, model: str | None = None,
                 secrets: tuple[Any, ...] = (), reason: str | None = None):
        register_secrets(secrets)
        redact_chain(cause)
        self.agent = agent
        self.cause = cause
        self.attempts = attempts
        self.model = model
        self.kind = request_error_kind(cause)
        self.provider_message = redact(str(cause), *secrets)
        if reason is None:
            reason = f"{type(cause).__name__}: {plain_message(self.provider_message) or '(no message)'}"
        reason = redact(reason, *secrets)
        if len(reason) > REASON_CHARS:  # a provider that echoes the whole request: the rest is in provider_message
            reason = reason[:REASON_CHARS] + f"... ({len(reason) - REASON_CHARS} more characters in .provider_message)"
        self.reason = reason
        super().__init__(f"model call for {self.who()} failed after {attempts} attempt(s): {self.reason}"
                         f"{self.hint()}")

    def who(self) -> str:
        """``agent 'critic' (model 'gpt-4o-mini')``."""
        return f"agent {self.agent!r}" + (f" (model {self.model!r})" if self.model else "")

    def hint(self) -> str:
        """What to do about a request error no retry can fix (empty for a transient one)."""
        return f" [{self.kind}, not retried: {_HINTS[self.kind]}]" if self.kind in _HINTS else ""

    @property
    def fatal(self) -> bool:
        """No retry can fix it (authentication, permission, model not found, bad request, ...)."""
        return self.kind is not None


def grouped_failures(failures: Iterable[tuple[str, BaseException]]) -> list[str]:
    """One line per cause: the agents whose calls failed the same way named together.

    Examples:
        >>> from fsmchat.errors import ModelCallError, grouped_failures
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


class MissingCredentials(ModelCallError):
    """Agents whose provider needs a key that is not set, found before the run's first request.

    Nothing was sent; the run ends with ``stop_reason="error"`` and this error naming every agent,
    model and environment variable to set (agents that need the same variables named together).

    Args:
        missing: ``(agent, model, [env vars])`` per agent.

    Examples:
        >>> from fsmchat.errors import MissingCredentials
        >>> exc = MissingCredentials([("critic", "gpt-4o-mini", ["OPENAI_API_KEY"])])
        >>> print(exc)
        missing credentials: agent 'critic' (model 'gpt-4o-mini') needs OPENAI_API_KEY. Set OPENAI_API_KEY in the
        environment, or pass api_key= (or api_base= for a local server) to the agent. No request was sent.
        >>> exc.kind, exc.fatal
        ('missing_credentials', True)
    """

    def __init__(self, missing: list[tuple[str, str, list[str]]]):
        self.missing = missing
        groups: dict[tuple[str, ...], list[tuple[str, str]]] = {}
        for a, m, v in missing:
            groups.setdefault(tuple(v), []).append((a, m))
        parts = []
        for needs, members in groups.items():
            models = list(dict.fromkeys(m for _, m in members))
            parts.append(f"agent{'s' if len(members) > 1 else ''} {', '.join(repr(a) for a, _ in members)} "
                         f"(model{'s' if len(models) > 1 else ''} {', '.join(repr(m) for m in models)}) "
                         f"need{'' if len(members) > 1 else 's'} {' or '.join(needs)}")
        lines = "; ".join(parts)
        env = sorted({v for _, _, vs in missing for v in vs})
        cause = RuntimeError(f"missing credentials: {lines}. Set {', '.join(env)} in the environment, or pass "
                             "api_key= (or api_base= for a local server) to the agent. No request was sent.")
        super().__init__(missing[0][0], cause, 0, missing[0][1])
        self.kind = "missing_credentials"
        self.reason = str(cause)
        self.args = (str(cause),)

    def hint(self) -> str:
        """Empty: the message already says what to set."""
        return ""

    def __str__(self) -> str:
        return str(self.args[0])


class ContextTooLong(ModelCallError):
    """A prompt longer than the model's input limit, refused before it was sent.

    Raised by the speaking block when an agent's prompt (counted with the model's tokenizer, or
    estimated: ``fsmchat.speakers.context.count_tokens``) has more tokens than the model's input
    limit and the agent's context policy does not shorten it (``context="full"``, the default).
    No retry can fix it: the run ends with ``ok`` False, ``stop_reason="error"`` and the
    transcript so far.

    Args:
        agent: Whose prompt it was.
        tokens: The prompt's tokens.
        limit: The model's input limit.
        source: Where the limit comes from (``Agent(max_input_tokens=N)`` or litellm's model map).
        model: The model the prompt was for.

    Examples:
        >>> from fsmchat.errors import ContextTooLong
        >>> exc = ContextTooLong("critic", 312, 200, "Agent(max_input_tokens=200)")
        >>> print(exc)
        agent 'critic': the prompt has 312 tokens, over the input limit of 200 tokens (Agent(max_input_tokens=200)); it was not sent. Keep the prompt within the window with a context policy on the agent or the pattern: context=LastMessages(n) (the task and the last n messages) or context=Summarize(agent=..., keep_last=k, at=0.8) (older messages summarised by one model call); context="full" (the default) sends the whole conversation
        >>> exc.kind, exc.fatal, exc.attempts
        ('context_too_long', True, 0)
    """

    def __init__(self, agent: str, tokens: int, limit: int, source: str = "", model: str | None = None):
        self.tokens, self.limit = tokens, limit
        text = (f"agent {agent!r}: the prompt has {tokens} tokens, over the input limit of {limit} tokens"
                f"{f' ({source})' if source else ''}; it was not sent. Keep the prompt within the window with a "
                "context policy on the agent or the pattern: context=LastMessages(n) (the task and the last n "
                "messages) or context=Summarize(agent=..., keep_last=k, at=0.8) (older messages summarised by one "
                "model call); context=\"full\" (the default) sends the whole conversation")
        super().__init__(agent, RuntimeError(text), 0, model)
        self.kind = "context_too_long"
        self.reason = text
        self.args = (text,)

    def hint(self) -> str:
        """Empty: the message already says what to do."""
        return ""

    def __str__(self) -> str:
        return str(self.args[0])


class LimitReached(FsmchatError):
    """A run limit cut an action short: the engine takes a drawn stop edge instead of failing.

    ``take_edge`` names the drawn stop edge the engine takes from the current state instead of
    ending the run with an error (see ``fsmchat.limits``).

    Examples:
        >>> from fsmchat.errors import BudgetExceeded, DeadlineExceeded, LimitReached
        >>> [(c.__name__, issubclass(c, LimitReached), c.take_edge) for c in (DeadlineExceeded, BudgetExceeded)]
        [('DeadlineExceeded', True, 'past_deadline'), ('BudgetExceeded', True, 'over_budget')]
    """

    take_edge = ""


class Interrupted(FsmchatError):
    """An action stops the run where it is, resumably: the run ends with ``stop_reason="interrupted"``.

    ``request`` is the payload of its last trace event. Resuming the run enters the same state
    again. Raised for people in the loop (``fsmchat.speakers.human``); the engine knows only that
    the run waits.

    Args:
        request: A JSON-able dict saying what the run waits for (its ``"prompt"`` is the message).

    Examples:
        >>> from fsmchat import StateGraph, run
        >>> from fsmchat.errors import Interrupted
        >>> def approve(ctx):
        ...     raise Interrupted({"prompt": "Approve the draft?"})
        >>> review = StateGraph("review").state("approve", approve).final("done").edge("approve", "done")
        >>> result = run(review, None)
        >>> result.stop_reason, result.path, result.trace[-1].payload
        ('interrupted', ['approve'], {'prompt': 'Approve the draft?'})
    """

    def __init__(self, request: dict[str, Any]):
        self.request = request
        super().__init__(f"the run waits for an answer: {request.get('prompt', '')}"[:300])


class DeadlineExceeded(LimitReached, TimeoutError):
    """The run's ``deadline_s`` passed while a model call, a callable speaker or a task ran.

    The engine takes the drawn ``past_deadline`` edge: the run ends with
    ``stop_reason="deadline"`` and the transcript so far.

    Examples:
        >>> import time
        >>> from fsmchat import RoundRobinSwarm
        >>> def slow(turn):
        ...     time.sleep(0.3)
        ...     return "Too late."
        >>> result = RoundRobinSwarm(agents=[slow]).with_limits(deadline_s=0.05).execute("Hurry.")
        >>> result.stop_reason, result.path
        ('deadline', ['seed', 'slow', 'past_deadline'])
    """

    take_edge = "past_deadline"


class BudgetExceeded(LimitReached, RuntimeError):
    """A request would cross ``max_model_calls`` (or another hard budget); it was not sent.

    The engine takes the drawn ``over_budget`` edge: the run ends with ``stop_reason="budget"``
    and the transcript so far.

    Examples:
        >>> from fsmchat import RoundRobinSwarm
        >>> from fsmchat.testing import ScriptedModel
        >>> model = ScriptedModel({"critic": ["Looks good."]})
        >>> swarm = RoundRobinSwarm(agents=[model.agent("critic")], max_loops=2).with_limits(max_model_calls=1)
        >>> result = swarm.execute("Review the draft.")
        >>> result.stop_reason, result.path, model.calls()
        ('budget', ['seed', 'critic', 'critic', 'over_budget'], 1)
    """

    take_edge = "over_budget"


def limit_reached(exc: BaseException | None) -> LimitReached | None:
    """The ``LimitReached`` anywhere in ``exc``'s chain (model call errors wrap it), or None."""
    seen: set[int] = set()
    while exc is not None and id(exc) not in seen:
        if isinstance(exc, LimitReached):
            return exc
        seen.add(id(exc))
        exc = getattr(exc, "cause", None) or exc.__cause__ or exc.__context__
    return None


def fatal_error(exc: BaseException | None) -> BaseException | None:
    """The exception in ``exc``'s chain that must end the run at once, or None: a ``LimitReached``
    (the engine takes its stop edge), a request error no retry can fix (a fatal
    ``ModelCallError``), or a broken test double (``fsmchat_fatal``, e.g. an exhausted script)."""
    seen: set[int] = set()
    todo = [exc]
    while todo:
        e = todo.pop()
        if e is None or id(e) in seen:
            continue
        seen.add(id(e))
        if isinstance(e, LimitReached) or getattr(e, "fsmchat_fatal", False) or \
                (isinstance(e, ModelCallError) and e.fatal):
            return e
        todo += [getattr(e, "cause", None), e.__cause__, e.__context__, getattr(e, "original_exception", None)]
    return None


_failed_runs: list[Any] | None = None  # collected while the CLI runs a script (``watch_failures``)


def watch_failures() -> list[Any]:
    """Start collecting the results of failed runs in this process (``fsmchat run`` does, so a
    script that ignores ``result.error`` still exits non-zero); returns the list that fills."""
    global _failed_runs
    _failed_runs = []
    return _failed_runs


def run_finished(result: Any) -> None:
    """Called by every pattern when a run ends. A failed run is remembered while watched
    (``watch_failures``); a broken test double (``fsmchat_fatal``: an exhausted ``ScriptedModel``,
    a cassette miss) is raised, with the result attached, because it is never a run's outcome:
    a test that only checks the path must not pass."""
    error = getattr(result, "error", None)
    if error is None:
        return
    if _failed_runs is not None:
        _failed_runs.append(result)
    if getattr(error, "fsmchat_fatal", False):
        raise attach_result(error, result)


def attach_result(exc: BaseException, result: Any) -> BaseException:
    """Hang a run's result (trace, transcript so far) on an exception before it propagates."""
    try:
        setattr(exc, "fsmchat_result", result)  # result_of() reads it back
    except (AttributeError, TypeError):  # exotic exceptions with __slots__
        pass
    return exc


def result_of(exc: BaseException) -> Any:
    """Return the ``RunResult`` an exception raised by a run carries, or None.

    ``Pattern.run`` re-raises a failed run's error, and a Ctrl-C or a cancellation ends a run
    with its transcript so far: that result travels on the exception.

    Args:
        exc: The exception a run raised.

    Returns:
        The run's result (path, trace, transcript so far), or None if ``exc`` carries none.

    Examples:
        >>> from fsmchat import RoundRobinSwarm, result_of
        >>> def critic(turn):
        ...     raise RuntimeError("the critic crashed")
        >>> try:
        ...     RoundRobinSwarm(agents=[critic]).run("Ship it?")
        ... except RuntimeError as exc:
        ...     result = result_of(exc)
        >>> result.stop_reason, [m.content for m in result.transcript]
        ('error', ['Ship it?'])
    """
    return getattr(exc, "fsmchat_result", None)
