"""Helpers for state-transition tests of fsmchat graphs and of users' own workflows.

- ``ScriptedModel``: a litellm custom provider scripted per agent (replies, bids, malformed tool
  calls, errors, delays) that records every request, so tests exercise the real litellm path.
  It fails loudly, naming the agent and call number, when a script runs out.
- ``assert_trace_is_path``, ``assert_path``, ``assert_stop``, ``assert_calls``.
- ``answer(pattern, task, answers=[...])``: run and answer every interrupt (people in the loop).
"""
from __future__ import annotations

import asyncio
import collections
import difflib
import fnmatch
import hashlib
import itertools
import json
import os
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, AsyncIterator, Callable, Iterator, Literal, NamedTuple, Sequence

from pydantic import Field

from .config import MODEL_KINDS, MODEL_SOURCES, ConfigReader, ConfigSpec, callable_ref, jsonable, opt_ref
from .errors import FsmchatError
from .graph.state_graph import StateGraph, branch_graph
from .models import Bid, RunResult, split_branch
from .speakers import modelmap
from .speakers.agent import Agent
from .speakers.chunks import completion, stream_chunks
from .speakers.handoff import tool_name_for
from .speakers.llm import INTERCEPTOR, own_provider, register_own
from .speakers.selector import SELECT_TOOL
from .speakers.wire import TRANSPORT_OPTIONS, body_of, parse, price_of, with_cost
from .store.checkpoint import Checkpointer, MemoryCheckpointer
from .trust import Trust

SCRIPTED_PROVIDER = "fsmchat-scripted"


class ScriptExhausted(FsmchatError, AssertionError):
    """A scripted agent was called more often than its script allows.

    A broken test double, never a run's outcome: the run's result is attached and the error is
    raised even by ``execute``, so a test that only checks the path cannot pass.

    Examples:
        >>> from fsmchat import RoundRobinSwarm
        >>> from fsmchat.testing import ScriptedModel
        >>> model = ScriptedModel({"critic": ["Looks good."]})
        >>> RoundRobinSwarm(agents=[model.agent("critic")], max_loops=2).run("Review the draft.")
        Traceback (most recent call last):
        ...
        fsmchat.testing.ScriptExhausted: ScriptedModel: agent 'critic' made call #2 but its script has only 1 item(s); ...
    """

    fsmchat_fatal = True


@dataclass(frozen=True)
class ToolCall:
    """A raw tool call: ``arguments`` is sent as is (a dict is JSON-encoded; a str is not).

    Script a malformed bid with it (a ``Bid`` is the well-formed ``respond`` call).

    Attributes:
        name: The tool's name.
        arguments: Its arguments: a dict (sent as JSON) or a raw string.
        id: The call's id (a tool result answers it). A list of calls is one reply calling them all.

    Examples:
        >>> from fsmchat import Bid, GroupChat
        >>> from fsmchat.testing import ScriptedModel, ToolCall
        >>> model = ScriptedModel({"Pro": [ToolCall("respond", "{not json")], "Con": [Bid(0.8, "Regulate now.")]})
        >>> result = GroupChat(agents=[model.agent("Pro"), model.agent("Con")], max_loops=2).execute("Regulate AI?")
        >>> [m.role for m in result.transcript], [(e["event"], e["agent"]) for e in result.events]
        (['User', 'Con'], [('invalid_bid', 'Pro')])
    """

    name: str
    arguments: Any
    id: str = "call_1"


def Pick(speaker: str, id: str = "call_pick") -> ToolCall:  # noqa: N802 - a script item, spelled like the others
    """A selector's pick: its forced ``select_speaker`` call naming ``speaker``.

    Examples:
        >>> from fsmchat.testing import Pick
        >>> Pick("coder")
        ToolCall(name='select_speaker', arguments={'speaker': 'coder'}, id='call_pick')
    """
    return ToolCall(SELECT_TOOL, {"speaker": speaker}, id)


def Transfer(target: str, message: str = "", id: str = "call_handoff") -> ToolCall:  # noqa: N802 - a script item
    """A handoff: the ``transfer_to_<target>`` call, with an optional ``message`` for the receiver.

    Examples:
        >>> from fsmchat.testing import Transfer
        >>> Transfer("billing", "double charge")
        ToolCall(name='transfer_to_billing', arguments={'message': 'double charge'}, id='call_handoff')
    """
    return ToolCall(tool_name_for(target), {"message": message} if message else {}, id)


@dataclass(frozen=True)
class Fail:
    """A provider error with an HTTP status (429, 500, 503, 400, 401, 408 = timeout).

    Transient ones (429, 5xx, 408) are retried per the agent's ``num_retries``; the others end
    the run with ``stop_reason="error"``.

    Attributes:
        status: The HTTP status.
        message: The provider's message.
        retry_after: The ``Retry-After`` header's seconds, if any.

    Examples:
        >>> from fsmchat import RoundRobinSwarm
        >>> from fsmchat.testing import Fail, ScriptedModel
        >>> model = ScriptedModel({"critic": [Fail(503), "Looks good."]})
        >>> swarm = RoundRobinSwarm(agents=[model.agent("critic", num_retries=1)])
        >>> swarm.run("Review the draft."), model.calls("critic")
        ('Looks good.', 2)
    """

    status: int = 500
    message: str = "scripted failure"
    retry_after: float | None = None


@dataclass(frozen=True)
class Delay:
    """Wait ``seconds`` (on the event loop), then answer with ``then``.

    Attributes:
        seconds: How long the answer takes.
        then: The answer (any script item).

    Examples:
        >>> from fsmchat import RoundRobinSwarm
        >>> from fsmchat.testing import Delay, ScriptedModel
        >>> model = ScriptedModel({"critic": [Delay(0.5, "Too late.")]})
        >>> RoundRobinSwarm(agents=[model.agent("critic")]).with_limits(deadline_s=0.05).execute("Review.").stop_reason
        'deadline'
    """

    seconds: float
    then: Any = ""


@dataclass(frozen=True)
class Empty:
    """A response with an empty ``choices`` list.

    Examples:
        >>> from fsmchat import RoundRobinSwarm
        >>> from fsmchat.testing import Empty, ScriptedModel
        >>> model = ScriptedModel({"critic": [Empty()]})
        >>> result = RoundRobinSwarm(agents=[model.agent("critic")]).execute("Review the draft.")
        >>> result.stop_reason, str(result.error)
        ('error', "model call for agent 'critic' failed after 1 attempt(s): ValueError: response has no choices")
    """


@dataclass
class Request:
    """One recorded model request (``ScriptedModel.requests``), what a function model answers from.

    Attributes:
        agent: The agent that asked.
        n: This agent's call number, 1-based.
        model: The model id.
        messages: The chat messages sent (only the last ``keep_messages`` requests keep them).
        tools: The tools offered, if any.
        tool_choice: The tool choice, if any.
        response_format: The response format, if any.
        params: The other request parameters.
        prompt: The text of the last message (the turn's instruction), kept when messages are dropped.

    Examples:
        >>> from fsmchat import RoundRobinSwarm
        >>> from fsmchat.testing import ScriptedModel
        >>> model = ScriptedModel({"Analyst": ["Data first."], "Strategist": ["Then the plan."]})
        >>> _ = RoundRobinSwarm(agents=[model.agent("Analyst"), model.agent("Strategist")]).run("Plan the launch.")
        >>> req = model.requests_of("Strategist")[0]
        >>> req.agent, req.n, [m["role"] for m in req.messages], req.prompt[:40]
        ('Strategist', 1, ['user', 'user', 'user'], 'You are Strategist, agent 2 of 2 in loop')
    """

    agent: str
    n: int  # 1-based call number of this agent
    model: str
    messages: Sequence[dict[str, Any]]  # a DroppedMessages once old (see keep_messages)
    tools: list[dict[str, Any]] | None
    tool_choice: Any
    response_format: Any
    params: dict[str, Any] = field(default_factory=dict)

    prompt: str = ""  # the text of the last message (the turn's instruction), kept when messages are dropped

    def __post_init__(self) -> None:
        if not self.prompt and self.messages:
            c = self.messages[-1]["content"]
            self.prompt = c if isinstance(c, str) else " ".join(p.get("text", "") for p in c if isinstance(p, dict))


class DroppedMessages(Sequence[Any]):
    """What an old request holds instead of its whole message list (its length only); any read
    says how to keep them all."""

    __slots__ = ("n", "keep")

    def __init__(self, n: int, keep: int):
        self.n, self.keep = n, keep

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: Any) -> Any:
        raise LookupError(f"this request's {self.n} messages were dropped: a ScriptedModel keeps the whole "
                          f"message lists of its last {self.keep} requests only (each holds the conversation "
                          "so far, so keeping all grows with the square of its length); pass "
                          "ScriptedModel(..., keep_messages=None) to keep every one")

    def __repr__(self) -> str:
        return f"<{self.n} messages dropped>"


def _error(item: Fail, model: str) -> Exception:
    import litellm

    kw = {"message": item.message, "llm_provider": SCRIPTED_PROVIDER, "model": model}
    cls = {429: litellm.RateLimitError, 500: litellm.InternalServerError, 503: litellm.ServiceUnavailableError,
           400: litellm.BadRequestError, 401: litellm.AuthenticationError, 408: litellm.Timeout,
           404: litellm.NotFoundError}.get(item.status, litellm.InternalServerError)
    exc: Exception = cls(**kw)
    if item.retry_after is not None:  # where litellm's retry logic reads a provider's Retry-After
        setattr(exc, "litellm_response_headers", {"retry-after": str(item.retry_after)})
    return exc


def _response(item: Any) -> Any:
    usage = {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15}
    if isinstance(item, Empty):
        return with_cost(parse({"model": "", "choices": [], "usage": usage}, "", None), 0.0)
    if isinstance(item, (Bid, ToolCall)):
        item = [item]
    if isinstance(item, list) and item and all(isinstance(x, (Bid, ToolCall)) for x in item):  # one reply, its calls
        calls = []
        for x in item:
            name, args = ("respond", {"score": x.score, "message": x.message}) if isinstance(x, Bid) \
                else (x.name, x.arguments)
            raw = args if isinstance(args, str) else json.dumps(args)
            calls.append({"id": x.id if isinstance(x, ToolCall) else "call_1", "type": "function",
                          "function": {"name": name, "arguments": raw}})
        return completion({"role": "assistant", "content": None, "tool_calls": calls}, "tool_calls", usage, "")
    return completion({"role": "assistant", "content": str(item)}, "stop", usage, "")  # no model name, as before


class _Provider:
    """The one in-process provider of scripted models (``fsmchat.speakers.llm.register_own``);
    dispatches to ScriptedModel instances by model id."""

    # Strong references: an agent names its model only by string, so the model must outlive any
    # temporary. Ids are unique, so instances never see each other's requests; close() drops one.
    _instances: "dict[str, ScriptedModel]" = {}
    _installed = False

    @classmethod
    def install(cls) -> None:
        if not cls._installed:
            register_own(SCRIPTED_PROVIDER, cls)
            cls._installed = True

    @classmethod
    async def acompletion(cls, model: str, messages: list[dict[str, Any]], params: dict[str, Any],
                          meta: dict[str, Any]) -> Any:
        model_id = model.split("/", 1)[1] if "/" in model else model
        inst = cls._instances.get(model_id)
        if inst is None:
            raise ScriptExhausted(f"no ScriptedModel is alive for model {model_id!r}")
        sent = {k: v for k, v in params.items() if k not in TRANSPORT_OPTIONS}
        return await inst._answer(model_id, messages, sent, {"metadata": meta})

    @classmethod
    async def astream(cls, model: str, messages: list[dict[str, Any]], params: dict[str, Any],
                      meta: dict[str, Any]) -> AsyncIterator[dict[str, Any]]:
        """The scripted reply streamed as the offline model streams one (word by word)."""
        whole = await cls.acompletion(model, messages, params, meta)
        for chunk in stream_chunks(whole):
            yield chunk


_ids = itertools.count(1)


KEEP_MESSAGES = 256  # requests that keep their whole message list (the rest keep agent, n, prompt, params)


class ScriptedModel:
    """A scripted model reached through litellm. Give each agent ``model=scripted.model``.

    It is a litellm custom provider, so tests exercise the real litellm path; it records every
    request and fails loudly (``ScriptExhausted``), naming the agent and call number, when a
    script runs out.

    Args:
        scripts: Each agent's answers in order, by agent name: ``Bid(score, message)``, a ``str``
            reply, ``ToolCall(name, raw_args)``, ``Fail(status)``, ``Delay(s, then)``,
            ``Empty()``, or a callable ``(Request) -> item``.
        fn: Answers for agents without a script (a function model): ``fn(Request) -> item``.
        name: The prefix of its model id.
        id: Its model id (by default ``name`` and a counter); a Ray worker rebuilds it under the same.
        keep_messages: How many recent requests keep their whole message list (None: all).
        max_input_tokens: The model's input limit in tokens, entered in litellm's model map (a
            small window makes context policies testable: ``fsmchat.speakers.context``).

    Examples:
        >>> from fsmchat import RoundRobinSwarm
        >>> from fsmchat.testing import ScriptedModel
        >>> model = ScriptedModel({"Analyst": ["Data first."], "Strategist": ["Then the plan."]})
        >>> swarm = RoundRobinSwarm(agents=[model.agent("Analyst"), model.agent("Strategist")])
        >>> swarm.run("Plan the launch.")
        'Then the plan.'
        >>> model.calls(), model.calls("Analyst"), model.model
        (2, 1, 'fsmchat-scripted/scripted-...')
    """

    def __init__(self, scripts: dict[str, Sequence[Any]] | None = None,
                 fn: Callable[[Request], Any] | None = None, name: str = "scripted", *, id: str | None = None,
                 keep_messages: int | None = KEEP_MESSAGES, max_input_tokens: int | None = None):
        _Provider.install()
        self.id = id or f"{name}-{next(_ids)}"
        self.model = f"{SCRIPTED_PROVIDER}/{self.id}"
        self.scripts = {k: list(v) for k, v in (scripts or {}).items()}
        self.fn = fn
        self.requests: list[Request] = []
        if keep_messages is not None and (isinstance(keep_messages, bool) or not isinstance(keep_messages, int)
                                          or keep_messages < 1):
            raise ValueError(f"ScriptedModel keep_messages={keep_messages!r}: expected None (keep all) or a "
                             "positive int (how many recent requests keep their whole message list)")
        self.keep_messages = keep_messages
        self._lock = threading.Lock()
        self._counts: dict[str, int] = {}  # calls per agent: O(1) per request, not a scan of every request
        _Provider._instances[self.id] = self
        if max_input_tokens is not None:
            if isinstance(max_input_tokens, bool) or not isinstance(max_input_tokens, int) or max_input_tokens < 1:
                raise ValueError(f"ScriptedModel max_input_tokens={max_input_tokens!r}: expected None or a positive "
                                 "int (the model's input limit in tokens)")
            modelmap.register(self.model, {"max_input_tokens": max_input_tokens, "mode": "chat",
                                           "input_cost_per_token": 0.0, "output_cost_per_token": 0.0})
        self.max_input_tokens = max_input_tokens

    def to_config(self) -> ScriptedModelSpec:
        """This model as data (``ScriptedModelSpec``): scripts, and ``fn`` by import path, so a Ray
        worker can rebuild it under the same id (agents name it by that id)."""
        return scripted_model_spec(self)

    @staticmethod
    def from_config(spec: Any, *, allow: Any = (), trusted: bool = False) -> "ScriptedModel":
        """Rebuild (or find, in this process) the model ``to_config`` described; its functions
        load under ``allow``/``trusted`` as in ``fsmchat.from_config``."""
        return build_scripted_model(spec if isinstance(spec, ScriptedModelSpec)
                                    else ScriptedModelSpec.model_validate(spec), allow=allow, trusted=trusted)

    def close(self) -> None:
        """Unregister this model (its agents' calls then fail loudly)."""
        _Provider._instances.pop(self.id, None)

    def __enter__(self) -> "ScriptedModel":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def agent(self, name: str, system_prompt: str = "", **kw: Any) -> Any:
        """An ``Agent`` on this model (``num_retries=0`` unless given); other keywords are ``Agent``'s."""
        kw.setdefault("num_retries", 0)
        return Agent(name, system_prompt=system_prompt, model=self.model, **kw)

    def calls(self, agent: str | None = None) -> int:
        """The requests ``agent`` made (every agent's when None), retries included."""
        return sum(1 for r in self.requests if agent is None or r.agent == agent)

    def requests_of(self, agent: str) -> list[Request]:
        """``agent``'s recorded requests, in order."""
        return [r for r in self.requests if r.agent == agent]

    async def _answer(self, model: str, messages: list[dict[str, Any]], params: dict[str, Any],
                      litellm_params: dict[str, Any]) -> Any:
        agent = str((litellm_params.get("metadata") or {}).get("fsmchat_agent", "?"))
        with self._lock:
            if sum(self._counts.values()) != len(self.requests):  # the list was changed from outside: recount
                self._counts = dict(collections.Counter(r.agent for r in self.requests))
            n = self._counts[agent] = self._counts.get(agent, 0) + 1
            req = Request(agent, n, model, messages, params.get("tools"), params.get("tool_choice"),
                          params.get("response_format"),
                          {k: v for k, v in params.items() if k not in ("tools", "tool_choice", "response_format")})
            self.requests.append(req)
            keep = self.keep_messages
            if keep is not None and len(self.requests) > keep:
                old = self.requests[-keep - 1]
                if not isinstance(old.messages, DroppedMessages):
                    old.messages = DroppedMessages(len(old.messages), keep)
        # a request is in flight once recorded: let the run's other concurrent requests (the other
        # bidders of a round) be sent too before this one is answered, as over a network
        await asyncio.sleep(0)
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
    """Every step of the run's trace follows a declared transition of ``graph`` (flattened).

    The steps of each branch run (``fork|n.state``) follow a transition of that branch's graph. A
    fork entered again (a ``parallel`` in a loop) reuses its branch ids: each visit's branch run
    starts at the branch's initial state after the previous one reached its final state.

    Args:
        graph: The graph the run ran (``pattern.graph``).
        run: The run's result.

    Raises:
        AssertionError: A step that is not a transition of the graph, saying which.

    Examples:
        >>> from fsmchat import RoundRobinSwarm
        >>> from fsmchat.testing import assert_trace_is_path
        >>> def writer(turn):
        ...     return "Draft: we launch in May."
        >>> swarm = RoundRobinSwarm(agents=[writer], max_loops=2)
        >>> assert_trace_is_path(swarm.graph, swarm.execute("Announce the launch."))
    """
    trace = run.trace
    assert trace, "the run has an empty trace"
    runs: dict[str, list[Any]] = {}
    for ev in trace:
        runs.setdefault(split_branch(ev.state)[0], []).append(ev)
    assert "" in runs, "the trace has no step of the top-level run"
    for branch, events in runs.items():
        flat = graph.flatten() if not branch else branch_graph(graph, branch)
        where = f"{graph.name!r}" + (f" branch {branch!r}" if branch else "")
        prefix = branch + "." if branch else ""
        edges = {(prefix + t.source, prefix + t.dest, t.label) for t in flat.transitions}
        assert events[0].state == prefix + flat.initial, (
            f"{where}: trace starts at {events[0].state!r}, the graph's initial state is {prefix + flat.initial!r}")
        for prev, ev in zip(events, events[1:]):
            if branch and prev.dest is None and ev.state == prefix + flat.initial:
                continue  # the fork's next visit: a new run of this branch
            assert prev.dest == ev.state, f"{where}: trace jumps: step {prev.step} went to {prev.dest!r} but " \
                                          f"step {ev.step} is in {ev.state!r}"
        for ev in events:
            assert ev.state[len(prefix):] in flat.states, f"trace visits {ev.state!r}, which is not a state of {where}"
            if ev.dest is not None:
                assert (ev.state, ev.dest, ev.trigger) in edges, (
                    f"step {ev.step}: {ev.state!r} -[{ev.trigger}]-> {ev.dest!r} is not a transition of {where}")
    assert [e.state for e in runs[""]] == list(run.path), "trace states differ from run.path"


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
    """The run's path equals ``expected``; entries may be globs, ``"*"`` or ``"state+"``.

    ``"*"`` alone matches any run of states (also none), ``"state+"`` one or more of that state.

    Args:
        run: The run's result (or a path).
        expected: The states, in order.

    Raises:
        AssertionError: The paths differ; both are shown side by side.

    Examples:
        >>> from fsmchat import RoundRobinSwarm
        >>> from fsmchat.testing import assert_path
        >>> def writer(turn):
        ...     return "Draft: we launch in May."
        >>> result = RoundRobinSwarm(agents=[writer], max_loops=3).execute("Announce the launch.")
        >>> assert_path(result, ["seed", "writer+", "stop"])
        >>> assert_path(result, ["seed", "stop"])
        Traceback (most recent call last):
        ...
        AssertionError: path mismatch
        expected: ['seed', 'stop']
        actual:   ['seed', 'writer', 'writer', 'writer', 'stop']
        ...
    """
    actual = _path_of(run)
    if not _match(list(expected), actual):
        diff = "\n".join(difflib.unified_diff(list(expected), actual, "expected", "actual", lineterm=""))
        raise AssertionError(f"path mismatch\nexpected: {list(expected)}\nactual:   {actual}\n{diff}")


def assert_stop(run: RunResult, reason: str) -> None:
    """The run stopped for ``reason`` (its error shown when it did not).

    Args:
        run: The run's result.
        reason: The expected stop reason (``"max_loops"``, ``"lull"``, ``"rounds"``...).

    Raises:
        AssertionError: Another stop reason.

    Examples:
        >>> from fsmchat import RoundRobinSwarm
        >>> from fsmchat.testing import assert_stop
        >>> def writer(turn):
        ...     return "Draft: we launch in May."
        >>> result = RoundRobinSwarm(agents=[writer]).execute("Announce the launch.")
        >>> assert_stop(result, "max_loops")
        >>> assert_stop(result, "lull")
        Traceback (most recent call last):
        ...
        AssertionError: stop reason 'max_loops', expected 'lull'...
    """
    assert run.stop_reason == reason, f"stop reason {run.stop_reason!r}, expected {reason!r}" + (
        f" (error: {run.error!r})" if run.error else "")


def assert_calls(model: ScriptedModel, n: int, agent: str | None = None) -> None:
    """The scripted model got ``n`` requests (from ``agent``, or from every agent when None).

    Args:
        model: The scripted model.
        n: The expected number of requests, retries included.
        agent: Count only this agent's.

    Raises:
        AssertionError: Another count.

    Examples:
        >>> from fsmchat import RoundRobinSwarm
        >>> from fsmchat.testing import ScriptedModel, assert_calls
        >>> model = ScriptedModel({"critic": ["Looks good.", "Ship it."]})
        >>> _ = RoundRobinSwarm(agents=[model.agent("critic")], max_loops=2).run("Review the draft.")
        >>> assert_calls(model, 2, "critic")
        >>> assert_calls(model, 1)
        Traceback (most recent call last):
        ...
        AssertionError: all agents made 2 model call(s), expected 1...
    """
    got = model.calls(agent)
    who = f"agent {agent!r}" if agent else "all agents"
    assert got == n, f"{who} made {got} model call(s), expected {n}"


# ---- people in the loop ----
class AnswerScriptError(FsmchatError, AssertionError):
    """The answers given to ``answer()`` do not fit the run: it waited with none left, or some were left over.

    Examples:
        >>> from fsmchat import Human, RoundRobinSwarm
        >>> from fsmchat.testing import answer
        >>> def writer(turn):
        ...     return "Draft: we launch in May."
        >>> swarm = RoundRobinSwarm(agents=[writer, Human("editor")])
        >>> answer(swarm, "Announce the launch.", ["Approved: ship it.", "And again."])
        Traceback (most recent call last):
        ...
        fsmchat.testing.AnswerScriptError: the run ended (max_loops) after 1 interrupt(s); 1 scripted answer(s) were not used: ['And again.']
    """


class Answered(NamedTuple):
    """What ``answer()`` returns: the final result and every request the run stopped at, in order.

    Attributes:
        result: The run's final result.
        asked: What the run waited for at each stop (``Pending``), in order.

    Examples:
        >>> from fsmchat import Human, RoundRobinSwarm
        >>> from fsmchat.testing import answer
        >>> def writer(turn):
        ...     return "Draft: we launch in May."
        >>> result, asked = answer(RoundRobinSwarm(agents=[writer, Human("editor")]), "Announce the launch.",
        ...                        ["Approved: ship it."])
        >>> result.stop_reason, [p.person for p in asked]
        ('max_loops', ['editor'])
    """

    result: RunResult
    asked: list[Any]


def answer(pattern: Any, task: str, answers: Sequence[Any] | Callable[[Any], Any], *,
           checkpoint: Checkpointer | None = None, run_id: str | None = None) -> Answered:
    """Run ``pattern`` on ``task`` and answer each interrupt, resuming until the run ends.

    The run stops for real at each interrupt (checkpointed) and goes on through
    ``pattern.resume(run_id, checkpoint, input=...)``, exactly as a person's later answer would.

    Args:
        pattern: The pattern or flow to run.
        task: Its task.
        answers: The inputs in order (``Approve()``, ``Edit(...)``, ``Reject(...)``, ``Say(...)``
            or a str), or a function ``(pending) -> input``.
        checkpoint: Where the run is checkpointed (a ``MemoryCheckpointer`` by default).
        run_id: The run's id (a new one by default).

    Returns:
        The final result and the ``Pending`` requests seen (an ``Answered``).

    Raises:
        AnswerScriptError: The run waits with no answer left, or a list of answers is not used up.

    Examples:
        >>> from fsmchat import Human, RoundRobinSwarm
        >>> from fsmchat.testing import answer
        >>> def writer(turn):
        ...     return "Draft: we launch in May."
        >>> swarm = RoundRobinSwarm(agents=[writer, Human("editor")])
        >>> out = answer(swarm, "Announce the launch.", ["Approved: ship it."])
        >>> out.result.stop_reason, [m.role for m in out.result.transcript], len(out.asked)
        ('max_loops', ['User', 'writer', 'editor'], 1)
    """
    cp = checkpoint if checkpoint is not None else MemoryCheckpointer()
    reply = answers if callable(answers) else None
    script = [] if callable(answers) else list(answers)
    result = pattern.execute(task, checkpoint=cp, run_id=run_id)
    asked: list[Any] = []
    while result.waiting:
        asked.append(result.pending)
        if reply is not None:
            given = reply(result.pending)
        elif len(asked) <= len(script):
            given = script[len(asked) - 1]
        else:
            raise AnswerScriptError(f"the run waits for a person ({result.pending}) but all {len(script)} "
                                    "scripted answer(s) are used; add answers")
        result = pattern.resume(result.run_id, cp, input=given)
    if reply is None and len(asked) < len(script):
        raise AnswerScriptError(f"the run ended ({result.stop_reason}) after {len(asked)} interrupt(s); "
                                f"{len(script) - len(asked)} scripted answer(s) were not used: {script[len(asked):]!r}")
    return Answered(result, asked)


class FunctionModel(ScriptedModel):
    """A scripted model whose every answer is computed from the request: ``fn(Request) -> item``.

    Args:
        fn: ``fn(Request) -> item``: a ``str`` reply, a ``Bid``, a ``ToolCall``, a ``Fail``...
        name: The prefix of its model id.
        id: Its model id (by default ``name`` and a counter).
        keep_messages: How many recent requests keep their whole message list (None: all).
        max_input_tokens: The model's input limit in tokens, entered in litellm's model map (a
            small window makes context policies testable: ``fsmchat.speakers.context``).

    Examples:
        >>> from fsmchat import RoundRobinSwarm
        >>> from fsmchat.testing import FunctionModel
        >>> def echo(request):
        ...     return f"{request.agent} heard: {request.messages[-2]['content']}"
        >>> model = FunctionModel(echo)
        >>> RoundRobinSwarm(agents=[model.agent("echo")]).run("Hello there.")
        'echo heard: Hello there.'
    """

    def __init__(self, fn: Callable[[Request], Any], name: str = "function", *, id: str | None = None,
                 keep_messages: int | None = KEEP_MESSAGES, max_input_tokens: int | None = None):
        super().__init__(None, fn=fn, name=name, id=id, keep_messages=keep_messages,
                         max_input_tokens=max_input_tokens)


# ---- scripted models as data: the kit registers their config form (fsmchat.config.MODEL_KINDS) ----
class ScriptItemSpec(ConfigSpec):
    """One scripted answer: text, bid, tool_call, fail, delay (then another item), empty, callable."""

    kind: Literal["text", "bid", "tool_call", "fail", "delay", "empty", "callable"]
    text: str | None = None
    score: float | None = None
    message: str | None = None
    name: str | None = None
    arguments: Any = None
    status: int | None = None
    retry_after: float | None = None
    seconds: float | None = None
    then: "ScriptItemSpec | None" = None
    ref: str | None = None

    @classmethod
    def of(cls, x: Any, what: str) -> ScriptItemSpec:
        """The config form of a script item (a callable travels by import path)."""
        if isinstance(x, str):
            return cls(kind="text", text=x)
        if isinstance(x, Bid):
            return cls(kind="bid", score=x.score, message=x.message)
        if isinstance(x, ToolCall):
            return cls(kind="tool_call", name=x.name, arguments=jsonable(x.arguments, what))
        if isinstance(x, Fail):
            return cls(kind="fail", status=x.status, message=x.message, retry_after=x.retry_after)
        if isinstance(x, Delay):
            return cls(kind="delay", seconds=x.seconds, then=cls.of(x.then, what))
        if isinstance(x, Empty):
            return cls(kind="empty")
        if callable(x):
            return cls(kind="callable", ref=callable_ref(x, what))
        raise TypeError(f"{what}: a {type(x).__name__} item has no config form")

    def build(self, r: ConfigReader, what: str) -> Any:
        if self.kind == "text":
            return self.text or ""
        if self.kind == "bid":
            return Bid(self.score or 0.0, self.message or "")
        if self.kind == "tool_call":
            return ToolCall(self.name or "", self.arguments)
        if self.kind == "fail":
            return Fail(self.status or 500, self.message or "scripted failure", self.retry_after)
        if self.kind == "delay":
            return Delay(self.seconds or 0.0, self.then.build(r, what) if self.then is not None else "")
        if self.kind == "empty":
            return Empty()
        return r.trust.callable(self.ref or "", what)


@MODEL_KINDS.register
class ScriptedModelSpec(ConfigSpec):
    """A ``ScriptedModel`` (``kind="scripted"``) or ``FunctionModel`` (``kind="function"``), rebuilt
    under the same ``id`` so the agents' ``model`` strings resolve on the worker."""

    kind: Literal["scripted", "function"] = "function"
    id: str
    scripts: dict[str, list[ScriptItemSpec]] = Field(default_factory=dict)
    fn: str | None = None

    def references(self) -> Iterator[tuple[str, str]]:
        what = f"scripted model {self.id!r}"
        if self.fn:
            yield self.fn, f"{what} fn"
        for agent, items in self.scripts.items():
            for x in items:
                item: ScriptItemSpec | None = x
                while item is not None:
                    if item.ref:
                        yield item.ref, f"{what} script of {agent!r}"
                    item = item.then

    def build(self, r: ConfigReader) -> ScriptedModel:
        """The model under this id: the live instance when it is the same model, else a new one."""
        live = _Provider._instances.get(self.id)
        if live is not None and scripted_model_spec(live) == self:
            return live
        what = f"scripted model {self.id!r}"
        scripts: dict[str, Sequence[Any]] = {agent: [x.build(r, f"{what} script of {agent!r}") for x in items]
                                             for agent, items in self.scripts.items()}
        fn = r.fn(self.fn, f"{what} fn")
        if self.kind == "function" and fn is not None and not scripts:
            return FunctionModel(fn, id=self.id)
        return ScriptedModel(scripts, fn=fn, id=self.id)


def scripted_model_spec(model: ScriptedModel) -> ScriptedModelSpec:
    """The config form of a ``ScriptedModel``/``FunctionModel`` (its scripts and function as data)."""
    kind: Literal["scripted", "function"] = "function" if isinstance(model, FunctionModel) else "scripted"
    scripts = {agent: [ScriptItemSpec.of(x, f"ScriptedModel {model.id!r} script of {agent!r}") for x in items]
               for agent, items in model.scripts.items()}
    return ScriptedModelSpec(kind=kind, id=model.id, scripts=scripts,
                             fn=opt_ref(model.fn, f"{type(model).__name__} {model.id!r} fn"))


def build_scripted_model(spec: ScriptedModelSpec, *, allow: Any = (), trusted: bool = False) -> ScriptedModel:
    """A ``ScriptedModel``/``FunctionModel`` from its config form (references checked as in ``from_config``)."""
    trust = Trust.of(allow, trusted, owner="ScriptedModel.from_config")
    for ref, what in spec.references():
        trust.check(ref, what)
    return spec.build(ConfigReader(trust))


def _live_model_spec(mid: str, agent: str) -> ScriptedModelSpec:
    """What ``to_config`` writes for an agent on scripted model ``mid`` (the model must still be open)."""
    inst = _Provider._instances.get(mid)
    if inst is None:
        raise TypeError(f"agent {agent!r} uses scripted model {SCRIPTED_PROVIDER + '/' + mid!r}, which is closed; "
                        "keep the ScriptedModel/FunctionModel open while converting to a config")
    return scripted_model_spec(inst)


MODEL_SOURCES[SCRIPTED_PROVIDER] = _live_model_spec


# ---- matchers for trace and id comparisons ----
class _Matcher:
    def __init__(self, name: str, test: Callable[[Any], bool]):
        self.name, self.test = name, test

    def __eq__(self, other: Any) -> bool:
        return self.test(other)

    def __ne__(self, other: Any) -> bool:
        return not self.test(other)

    def __repr__(self) -> str:
        return self.name

    __hash__ = None  # type: ignore[assignment]  # unhashable, as == here is a match, not equality


ANY = _Matcher("ANY", lambda x: True)
ANY_TIME = _Matcher("ANY_TIME", lambda x: isinstance(x, (int, float)) and not isinstance(x, bool) and x >= 0)
ANY_ID = _Matcher("ANY_ID", lambda x: isinstance(x, str) and bool(x) and " " not in x)


def assert_trace(run: RunResult, expected: Sequence[dict[str, Any]]) -> None:
    """Compare ``run.trace`` (as dicts) with ``expected``, step by step.

    Use ``ANY``, ``ANY_TIME``, ``ANY_ID`` (from ``fsmchat.testing``) for volatile fields, and leave
    out keys you do not care about.

    Args:
        run: The run's result.
        expected: One dict per trace event (``step``, ``state``, ``trigger``, ``dest``, ``t``,
            ``payload``), each with the keys to compare.

    Raises:
        AssertionError: The traces differ (or differ in length).

    Examples:
        >>> from fsmchat import RoundRobinSwarm
        >>> from fsmchat.testing import ANY_TIME, assert_trace
        >>> def writer(turn):
        ...     return "Draft: we launch in May."
        >>> result = RoundRobinSwarm(agents=[writer]).execute("Announce the launch.")
        >>> assert_trace(result, [{"state": "seed", "dest": "writer"},
        ...                       {"state": "writer", "trigger": "max_loops", "payload": "writer", "t": ANY_TIME},
        ...                       {"state": "stop", "dest": None}])
    """
    actual = [e.to_dict() for e in run.trace]
    trimmed = [{k: a[k] for k in e} for a, e in zip(actual, expected)]
    if len(actual) != len(expected) or trimmed != list(expected):
        raise AssertionError(f"trace mismatch\nexpected: {list(expected)}\nactual:   {actual}")


# ---- graph snapshots ----
UPDATE_GRAPHS = {"on": False}  # set by pytest --fsmchat-update-graphs (fsmchat.pytest_plugin)


def update_graphs_enabled() -> bool:
    return UPDATE_GRAPHS["on"] or os.environ.get("FSMCHAT_UPDATE_GRAPHS", "") not in ("", "0")


def assert_graph_matches(graph: Any, path: Any) -> None:
    """The graph's DOT equals the snapshot at ``path``; a missing snapshot is created.

    Rewrite the snapshots with ``pytest --fsmchat-update-graphs`` or ``FSMCHAT_UPDATE_GRAPHS=1``
    when a change is intended.

    Args:
        graph: A ``StateGraph`` or a pattern (its ``graph``).
        path: The snapshot file (``.dot``).

    Raises:
        AssertionError: The graph no longer matches; the diff is shown.

    Examples:
        >>> from fsmchat import RoundRobinSwarm
        >>> from fsmchat.testing import assert_graph_matches
        >>> def writer(turn):
        ...     return "Draft."
        >>> def editor(turn):
        ...     return "Approved."
        >>> assert_graph_matches(RoundRobinSwarm(agents=[writer, editor]), "graphs/review.dot")  # written
        >>> assert_graph_matches(RoundRobinSwarm(agents=[writer, editor]), "graphs/review.dot")  # compared
        >>> assert_graph_matches(RoundRobinSwarm(agents=[writer]), "graphs/review.dot")
        Traceback (most recent call last):
        ...
        AssertionError: graph 'round_robin' no longer matches graphs/review.dot; if the change is intended, rerun with --fsmchat-update-graphs
        ...
    """
    g = graph if isinstance(graph, StateGraph) else graph.graph
    p = Path(path)
    dot = g.to_dot()
    if update_graphs_enabled() or not p.exists():
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(dot)
        return
    old = p.read_text()
    if old != dot:
        diff = "\n".join(difflib.unified_diff(old.splitlines(), dot.splitlines(), str(p), "current graph",
                                              lineterm=""))
        raise AssertionError(f"graph {g.name!r} no longer matches {p}; if the change is intended, rerun with "
                             f"--fsmchat-update-graphs\n{diff}")


# ---- record and replay ----
class CassetteMiss(FsmchatError, AssertionError):
    """A replayed run sent a request the cassette does not hold.

    A broken test double, never a run's outcome (it is raised with the run's result attached).

    Examples:
        >>> from fsmchat import RoundRobinSwarm
        >>> from fsmchat.testing import ScriptedModel, cassette
        >>> model = ScriptedModel({"critic": ["Looks good."]})
        >>> swarm = RoundRobinSwarm(agents=[model.agent("critic")])
        >>> with cassette("review.json", mode="record"):
        ...     swarm.run("Review the draft.")
        'Looks good.'
        >>> with cassette("review.json", mode="replay"):
        ...     swarm.run("Review the other draft.")
        Traceback (most recent call last):
        ...
        fsmchat.testing.CassetteMiss: cassette review.json: no recorded response for agent 'critic''s request ...
    """

    fsmchat_fatal = True


def request_key(model: str, messages: Any, params: dict[str, Any]) -> str:
    body = {"model": model, "messages": messages, **{k: params.get(k) for k in
                                                    ("tools", "tool_choice", "response_format")}}
    return hashlib.sha256(json.dumps(body, sort_keys=True, default=str).encode()).hexdigest()[:32]


class Cassette:
    """Records every model request/response of a run to JSON, or replays them offline.

    Use it as a context manager (``cassette(path)`` is the same). Only the model name, messages,
    tools, tool_choice and response_format are stored: never keys.

    Args:
        path: The cassette file (JSON).
        mode: ``"record"`` (call the real model, write the file), ``"replay"`` (never call out; a
            request not in the file raises ``CassetteMiss``), ``"auto"`` (replay when the file
            exists, else record).

    Raises:
        ValueError: Another mode.
        FileNotFoundError: Replay of a cassette that does not exist.

    Examples:
        >>> from fsmchat import RoundRobinSwarm
        >>> from fsmchat.testing import Cassette, ScriptedModel
        >>> model = ScriptedModel({"critic": ["Looks good."]})
        >>> swarm = RoundRobinSwarm(agents=[model.agent("critic")])
        >>> with Cassette("critic.json") as tape:  # no file yet: records
        ...     swarm.run("Review the draft."), tape.mode
        ('Looks good.', 'record')
        >>> with Cassette("critic.json") as tape:  # replays: the model is not called again
        ...     swarm.run("Review the draft."), tape.mode, tape.unused
        ('Looks good.', 'replay', 0)
        >>> model.calls()
        1
    """

    def __init__(self, path: Any, mode: str = "auto"):
        if mode not in ("auto", "record", "replay"):
            raise ValueError(f"cassette mode={mode!r}; choose from ['auto', 'record', 'replay']")
        self.path = Path(path)
        self.mode = "replay" if mode == "auto" and self.path.exists() else ("record" if mode == "auto" else mode)
        self.interactions: list[dict[str, Any]] = []
        self._pending: dict[str, list[dict[str, Any]]] = {}
        self._token: Any = None
        if self.mode == "replay":
            if not self.path.exists():
                raise FileNotFoundError(f"cassette {self.path} does not exist; record it first (mode='record')")
            data = json.loads(self.path.read_text())
            for item in data["interactions"]:
                self._pending.setdefault(item["key"], []).append(item)

    async def _send(self, acompletion: Any, agent: str, model: str, messages: Any, meta: dict[str, Any],
                    params: dict[str, Any]) -> Any:
        key = request_key(model, messages, params)
        if self.mode == "replay":
            queue = self._pending.get(key)
            if not queue:
                last = messages[-1].get("content") if messages else None
                raise CassetteMiss(f"cassette {self.path.name}: no recorded response for agent {agent!r}'s request "
                                   f"to {model} (key {key}); last message: {str(last)[:200]!r}. Re-record with "
                                   "mode='record' if the workflow changed on purpose.")
            item = queue.pop(0)
            if item.get("error"):
                raise _error(Fail(item["error"]["status"], item["error"]["message"]), model)
            response = parse(item["response"], model, price_of(None, model))
            return with_cost(response, 0.0) if own_provider(model) else response
        entry: dict[str, Any] = {"key": key, "agent": agent, "model": model, "request": {"messages": messages, **{
            k: params[k] for k in ("tools", "tool_choice", "response_format") if k in params}}}
        try:
            response = await acompletion(model=model, messages=messages, metadata=meta, **params)
        except Exception as exc:
            status = getattr(exc, "status_code", 500)
            entry["error"] = {"status": status if isinstance(status, int) else 500, "message": str(exc)[:500]}
            self.interactions.append(entry)
            raise
        entry["response"] = body_of(response)
        self.interactions.append(entry)
        return response

    def __enter__(self) -> "Cassette":
        self._token = INTERCEPTOR.set(self._send)
        return self

    def __exit__(self, *exc: Any) -> None:
        INTERCEPTOR.reset(self._token)
        if self.mode == "record":
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self.path.write_text(json.dumps({"version": 1, "interactions": self.interactions}, indent=1,
                                            sort_keys=True) + "\n")

    @property
    def unused(self) -> int:
        """Recorded interactions a replay did not consume."""
        return sum(len(v) for v in self._pending.values())


def cassette(path: Any, mode: str = "auto") -> Cassette:
    """Record a run's model calls once, then replay them: ``with cassette("tests/cassettes/x.json"): chat.run(task)``.

    Args:
        path: The cassette file (JSON).
        mode: ``"auto"``, ``"record"`` or ``"replay"`` (see ``Cassette``).

    Returns:
        The ``Cassette``, a context manager.

    Examples:
        >>> from fsmchat import RoundRobinSwarm
        >>> from fsmchat.testing import ScriptedModel, cassette
        >>> model = ScriptedModel({"critic": ["Looks good."]})
        >>> swarm = RoundRobinSwarm(agents=[model.agent("critic")])
        >>> for _ in range(2):  # the first run records, the second replays
        ...     with cassette("tests/cassettes/review.json"):
        ...         print(swarm.run("Review the draft."))
        Looks good.
        Looks good.
        >>> model.calls()
        1
    """
    return Cassette(path, mode)
