"""Layer 2: the exceptions fsmchat raises, and the way a failed run's result travels on an exception.

Only exception classes and the helpers that build or read them live here. Which provider errors
no retry can fix is decided by the model layer (``fsmchat.speakers.classify``); secret masking,
which every exception's message goes through, is ``fsmchat.common.masking``.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .common.masking import redact, redact_chain, register_secrets

if TYPE_CHECKING:
    from pydantic import ValidationError


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


class JsonShapeError(FsmchatError, TypeError):
    """JSON read back (a stored row, a wire body, a config) is not of the shape its reader needs.

    The message names where the value sits and the types allowed, never the value (it may hold a
    secret). A caller that owns the input wraps it in its own typed error.

    Examples:
        >>> from fsmchat.checks import get_str
        >>> from fsmchat.errors import JsonShapeError
        >>> try:
        ...     get_str({"role": 3}, "role", "message")
        ... except JsonShapeError as exc:
        ...     print(exc)
        message.role: expected a string, got int
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


def shown(value: object) -> str:
    """A refused value as a message shows it: its repr, at most 80 characters."""
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def bad_value(owner: str, field: str, value: object, allowed: str, type_error: bool = False) -> FsmchatError:
    """The one message style for a refused value: ``"{owner}: {field}={value!r} is invalid: {allowed}"``."""
    return (ConfigTypeError if type_error else ConfigError)(f"{owner}: {field}={shown(value)} is invalid: {allowed}")


# The pydantic error type of a value a field's own rule refused (``fsmchat.checks.Number``): its
# context holds what is allowed and whether the value's type is what is wrong (``ConfigTypeError``).
REFUSED = "fsmchat_refused"


def invalid_config(owner: str, exc: ValidationError) -> FsmchatError:
    """A pydantic ``ValidationError`` as one ``ConfigError`` in the style above (no pydantic URL):
    ``"Relay: rounds=0 is invalid: input should be greater than or equal to 1"``. When
    the first error is an fsmchat error a validator raised, that error is returned as it is: it
    already says everything (``"GroupChat requires at least 2 agents."``). A value a field's rule
    refused for its type (``REFUSED``) makes it a ``ConfigTypeError``."""
    errors = exc.errors()
    raised = (errors[0].get("ctx") or {}).get("error") if errors else None
    if isinstance(raised, FsmchatError):
        return raised
    parts, type_error = [], False
    for err in errors:
        where = ".".join(str(x) for x in err["loc"]) or "config"
        msg = str(err["msg"])
        if err["type"] == REFUSED:
            parts.append(f"{where}={shown(err.get('input'))} is invalid: {msg}")
            type_error = type_error or bool(err["ctx"]["type_error"])
        elif err["type"] == "value_error":
            parts.append(msg.removeprefix("Value error, "))
        elif err["type"] == "extra_forbidden":
            parts.append(f"unknown option {where!r}")
        elif err["type"] == "missing":
            parts.append(f"{where} is missing: it is required")
        else:
            parts.append(f"{where}={err.get('input')!r} is invalid: {msg[:1].lower()}{msg[1:]}")
    return (ConfigTypeError if type_error else ConfigError)(f"{owner}: " + "; ".join(parts))


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
            message on one line.
        kind: The kind of request error when no retry can fix it (the model layer classifies
            the provider's exception: ``fsmchat.speakers.classify.request_error_kind``); None for
            a transient fault.

    Attributes:
        kind: Set when no retry can fix the error (``authentication``, ``not_found``,
            ``context_window``, ...), which makes it ``fatal``; else None (the ``kind`` argument).
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
                 secrets: tuple[object, ...] = (), reason: str | None = None, kind: str | None = None):
        register_secrets(secrets)
        redact_chain(cause)
        self.agent = agent
        self.cause = cause
        self.attempts = attempts
        self.model = model
        self.kind = kind
        self.provider_message = redact(str(cause), *secrets)
        if reason is None:
            reason = f"{type(cause).__name__}: {' '.join(self.provider_message.split()) or '(no message)'}"
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


def attach_result(exc: BaseException, result: object) -> BaseException:
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
