"""Helpers for state-transition tests of fsmchat graphs and of users' own workflows.

- ``ScriptedModel``: a litellm custom provider scripted per agent (replies, bids, malformed tool
  calls, errors, delays) that records every request, so tests exercise the real litellm path.
  It fails loudly, naming the agent and call number, when a script runs out.
- ``assert_trace_is_path``, ``assert_path``, ``assert_stop``, ``assert_calls``.
"""
from __future__ import annotations

import asyncio
import fnmatch
import itertools
import json
import threading
import weakref
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

from .graph.state_graph import StateGraph
from .models import Bid, RunResult

SCRIPTED_PROVIDER = "fsmchat-scripted"


class ScriptExhausted(AssertionError):
    """A scripted agent was called more often than its script allows."""

    fsmchat_fatal = True


@dataclass(frozen=True)
class ToolCall:
    """A raw tool call: ``arguments`` is sent as is (a dict is JSON-encoded; a str is not)."""

    name: str
    arguments: Any


@dataclass(frozen=True)
class Fail:
    """A provider error with an HTTP status (429, 500, 503, 400, 401, 408 = timeout)."""

    status: int = 500
    message: str = "scripted failure"
    retry_after: float | None = None


@dataclass(frozen=True)
class Delay:
    """Wait ``seconds`` (on the event loop), then answer with ``then``."""

    seconds: float
    then: Any = ""


@dataclass(frozen=True)
class Empty:
    """A response with an empty ``choices`` list."""


@dataclass
class Request:
    """One recorded model request."""

    agent: str
    n: int  # 1-based call number of this agent
    model: str
    messages: list[dict[str, Any]]
    tools: list[dict[str, Any]] | None
    tool_choice: Any
    response_format: Any
    params: dict[str, Any] = field(default_factory=dict)

    @property
    def prompt(self) -> str:
        """The text of the last message (the turn's instruction)."""
        c = self.messages[-1]["content"]
        return c if isinstance(c, str) else " ".join(p.get("text", "") for p in c if isinstance(p, dict))


def _error(item: Fail, model: str) -> Exception:
    import litellm

    kw = {"message": item.message, "llm_provider": SCRIPTED_PROVIDER, "model": model}
    cls = {429: litellm.RateLimitError, 500: litellm.InternalServerError, 503: litellm.ServiceUnavailableError,
           400: litellm.BadRequestError, 401: litellm.AuthenticationError, 408: litellm.Timeout,
           404: litellm.NotFoundError}.get(item.status, litellm.InternalServerError)
    exc = cls(**kw)
    if item.retry_after is not None:
        exc.litellm_response_headers = {"retry-after": str(item.retry_after)}  # type: ignore[attr-defined]
    return exc


def _response(item: Any) -> Any:
    from litellm import ModelResponse

    usage = {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15}
    if isinstance(item, Empty):
        return ModelResponse(choices=[], usage=usage)
    if isinstance(item, (Bid, ToolCall)):
        name, args = ("respond", {"score": item.score, "message": item.message}) if isinstance(item, Bid) \
            else (item.name, item.arguments)
        raw = args if isinstance(args, str) else json.dumps(args)
        msg = {"role": "assistant", "content": None,
               "tool_calls": [{"id": "call_1", "type": "function", "function": {"name": name, "arguments": raw}}]}
        return ModelResponse(choices=[{"message": msg, "finish_reason": "tool_calls"}], usage=usage)
    return ModelResponse(choices=[{"message": {"role": "assistant", "content": str(item)}, "finish_reason": "stop"}],
                         usage=usage)


class _Provider:
    """The one registered litellm provider; dispatches to ScriptedModel instances by model id."""

    _instances: "weakref.WeakValueDictionary[str, ScriptedModel]" = weakref.WeakValueDictionary()
    _handler: Any = None

    @classmethod
    def install(cls) -> None:
        if cls._handler is not None:
            return
        from .speakers.llm import get_litellm, register_provider

        CustomLLM = get_litellm().CustomLLM

        class Handler(CustomLLM):
            async def acompletion(self, model, messages, api_base, custom_prompt_dict, model_response,
                                  print_verbose, encoding, api_key, logging_obj, optional_params,
                                  acompletion=None, litellm_params=None, logger_fn=None, headers={},
                                  timeout=None, client=None):  # noqa: B006 (litellm's signature)
                inst = cls._instances.get(model)
                if inst is None:
                    raise ScriptExhausted(f"no ScriptedModel is alive for model {model!r}")
                return await inst._answer(model, messages, optional_params, litellm_params or {})

        cls._handler = Handler()
        register_provider(SCRIPTED_PROVIDER, cls._handler)


_ids = itertools.count(1)


class ScriptedModel:
    """A scripted model reached through litellm. Give each agent ``model=scripted.model``.

    ``scripts`` maps an agent name to its answers in order: ``Bid(score, message)``, a ``str``
    reply, ``ToolCall(name, raw_args)``, ``Fail(status)``, ``Delay(s, then)``, ``Empty()``, or a
    callable ``(Request) -> item``. ``fn`` answers for agents without a script (a function model).
    """

    def __init__(self, scripts: dict[str, Sequence[Any]] | None = None,
                 fn: Callable[[Request], Any] | None = None, name: str = "scripted"):
        _Provider.install()
        self.id = f"{name}-{next(_ids)}"
        self.model = f"{SCRIPTED_PROVIDER}/{self.id}"
        self.scripts = {k: list(v) for k, v in (scripts or {}).items()}
        self.fn = fn
        self.requests: list[Request] = []
        self._lock = threading.Lock()
        _Provider._instances[self.id] = self

    def agent(self, name: str, system_prompt: str = "", **kw: Any) -> Any:
        from .speakers.agent import Agent

        kw.setdefault("num_retries", 0)
        return Agent(name, system_prompt=system_prompt, model=self.model, **kw)

    def calls(self, agent: str | None = None) -> int:
        return sum(1 for r in self.requests if agent is None or r.agent == agent)

    def requests_of(self, agent: str) -> list[Request]:
        return [r for r in self.requests if r.agent == agent]

    async def _answer(self, model: str, messages: list[dict[str, Any]], params: dict[str, Any],
                      litellm_params: dict[str, Any]) -> Any:
        agent = str((litellm_params.get("metadata") or {}).get("fsmchat_agent", "?"))
        with self._lock:
            n = self.calls(agent) + 1
            req = Request(agent, n, model, messages, params.get("tools"), params.get("tool_choice"),
                          params.get("response_format"),
                          {k: v for k, v in params.items() if k not in ("tools", "tool_choice", "response_format")})
            self.requests.append(req)
        if agent in self.scripts:
            script = self.scripts[agent]
            if n > len(script):
                raise ScriptExhausted(f"ScriptedModel: agent {agent!r} made call #{n} but its script has only "
                                      f"{len(script)} item(s); add answers or lower the run's limits")
            item = script[n - 1]
        elif self.fn is not None:
            item = self.fn(req)
        else:
            raise ScriptExhausted(f"ScriptedModel: agent {agent!r} has no script (scripted agents: "
                                  f"{sorted(self.scripts)}) and no fn= fallback")
        while True:
            if callable(item) and not isinstance(item, (Bid, ToolCall, Fail, Delay, Empty, str)):
                item = item(req)
                continue
            if isinstance(item, Delay):
                await asyncio.sleep(item.seconds)
                item = item.then
                continue
            break
        if isinstance(item, Fail):
            raise _error(item, model)
        return _response(item)


# ---- assertions ----
def _path_of(run: Any) -> list[str]:
    return list(getattr(run, "path", run))


def assert_trace_is_path(graph: StateGraph, run: RunResult) -> None:
    """Every step of the run's trace follows a declared transition of ``graph`` (flattened)."""
    flat = graph.flatten()
    edges = {(t.source, t.dest, t.label) for t in flat.transitions}
    trace = run.trace
    assert trace, "the run has an empty trace"
    assert trace[0].state == flat.initial, f"trace starts at {trace[0].state!r}, graph's initial is {flat.initial!r}"
    for prev, ev in zip(trace, trace[1:]):
        assert prev.dest == ev.state, f"trace jumps: step {prev.step} went to {prev.dest!r} but step {ev.step} " \
                                      f"is in {ev.state!r}"
    for ev in trace:
        assert ev.state in flat.states, f"trace visits {ev.state!r}, which is not a state of {graph.name!r}"
        if ev.dest is not None:
            assert (ev.state, ev.dest, ev.trigger) in edges, (
                f"step {ev.step}: {ev.state!r} -[{ev.trigger}]-> {ev.dest!r} is not a transition of "
                f"{graph.name!r}")
    assert [e.state for e in trace] == list(run.path), "trace states differ from run.path"


def _match(pattern: Sequence[str], path: Sequence[str]) -> bool:
    """Glob match per state; ``"*"`` alone matches any run of states (also none), ``"x+"``
    one or more of x."""
    if not pattern:
        return not path
    head, rest = pattern[0], pattern[1:]
    if head == "*":
        return any(_match(rest, path[i:]) for i in range(len(path) + 1))
    if head.endswith("+") and len(head) > 1:
        i = 0
        while i < len(path) and fnmatch.fnmatchcase(path[i], head[:-1]):
            i += 1
            if _match(rest, path[i:]):
                return True
        return False
    return bool(path) and fnmatch.fnmatchcase(path[0], head) and _match(rest, path[1:])


def assert_path(run: Any, expected: Sequence[str]) -> None:
    """The run's path equals ``expected``; entries may be globs, ``"*"`` (any run of states)
    or ``"state+"`` (one or more). Fails with both paths side by side."""
    actual = _path_of(run)
    if not _match(list(expected), actual):
        import difflib

        diff = "\n".join(difflib.unified_diff(list(expected), actual, "expected", "actual", lineterm=""))
        raise AssertionError(f"path mismatch\nexpected: {list(expected)}\nactual:   {actual}\n{diff}")


def assert_stop(run: RunResult, reason: str) -> None:
    assert run.stop_reason == reason, f"stop reason {run.stop_reason!r}, expected {reason!r}" + (
        f" (error: {run.error!r})" if run.error else "")


def assert_calls(model: ScriptedModel, n: int, agent: str | None = None) -> None:
    got = model.calls(agent)
    who = f"agent {agent!r}" if agent else "all agents"
    assert got == n, f"{who} made {got} model call(s), expected {n}"
