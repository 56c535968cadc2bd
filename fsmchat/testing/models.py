"""Scripted models: a model per test, scripted per agent (replies, bids, tool calls, errors, delays), as data too.

``ScriptedModel`` and ``FunctionModel`` answer in process through fsmchat's own speaking path and
record every request; ``Pick``/``Transfer`` are a selector's and a handoff's script items; their
config form (``ScriptedModelSpec``) is registered with ``fsmchat.config.MODEL_KINDS``.
"""
from __future__ import annotations

import asyncio
import collections
import itertools
import json
import threading
from dataclasses import dataclass, field
from typing import Any, AsyncIterator, Callable, Iterator, Literal, NoReturn, Sequence

from pydantic import Field

from ..config.convert import MODEL_KINDS, MODEL_SOURCES, ConfigReader, ConfigSpec
from ..config.values import callable_ref, jsonable, opt_ref
from ..errors import FsmchatError
from ..models import Bid
from ..speakers import modelmap
from ..speakers.agent import Agent
from ..speakers.chunks import completion, stream_chunks
from ..speakers.handoff import tool_name_for
from ..speakers.providers import register_own
from ..speakers.selector import SELECT_TOOL
from ..speakers.wire import TRANSPORT_OPTIONS, parse, with_cost
from ..trust import Trust


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
        fsmchat.testing.models.ScriptExhausted: ScriptedModel: agent 'critic' made call #2 but its script has only 1 item(s); ...
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
    arguments: object
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
    then: object = ""


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
    tool_choice: object
    response_format: object
    params: dict[str, object] = field(default_factory=dict)

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

    def __getitem__(self, i: object) -> NoReturn:
        raise LookupError(f"this request's {self.n} messages were dropped: a ScriptedModel keeps the whole "
                          f"message lists of its last {self.keep} requests only (each holds the conversation "
                          "so far, so keeping all grows with the square of its length); pass "
                          "ScriptedModel(..., keep_messages=None) to keep every one")

    def __repr__(self) -> str:
        return f"<{self.n} messages dropped>"


def fail_error(item: Fail, model: str) -> Exception:
    """The exception a scripted ``Fail`` raises: litellm's class for its status, as a provider's error would be.

    Args:
        item: The script item.
        model: The model id the request named.

    Returns:
        The exception (``litellm.RateLimitError`` for 429, ...), not raised.

    Examples:
        >>> type(fail_error(Fail(429), "fsmchat-scripted/m")).__name__
        'RateLimitError'
    """
    import litellm

    kw = {"message": item.message, "llm_provider": SCRIPTED_PROVIDER, "model": model}
    cls = {429: litellm.RateLimitError, 500: litellm.InternalServerError, 503: litellm.ServiceUnavailableError,
           400: litellm.BadRequestError, 401: litellm.AuthenticationError, 408: litellm.Timeout,
           404: litellm.NotFoundError}.get(item.status, litellm.InternalServerError)
    exc: Exception = cls(**kw)
    if item.retry_after is not None:  # where litellm's retry logic reads a provider's Retry-After
        setattr(exc, "litellm_response_headers", {"retry-after": str(item.retry_after)})
    return exc


def _response(item: object) -> object:
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
    async def acompletion(cls, model: str, messages: list[dict[str, object]], params: dict[str, object],
                          meta: dict[str, object]) -> object:
        model_id = model.split("/", 1)[1] if "/" in model else model
        inst = cls._instances.get(model_id)
        if inst is None:
            raise ScriptExhausted(f"no ScriptedModel is alive for model {model_id!r}")
        sent = {k: v for k, v in params.items() if k not in TRANSPORT_OPTIONS}
        return await inst._answer(model_id, messages, sent, {"metadata": meta})

    @classmethod
    async def astream(cls, model: str, messages: list[dict[str, object]], params: dict[str, object],
                      meta: dict[str, object]) -> AsyncIterator[dict[str, object]]:
        """The scripted reply streamed as the offline model streams one (word by word)."""
        whole = await cls.acompletion(model, messages, params, meta)
        for chunk in stream_chunks(whole):
            yield chunk


_ids = itertools.count(1)


KEEP_MESSAGES = 256  # requests that keep their whole message list (the rest keep agent, n, prompt, params)


class ScriptedModel:
    """A scripted model, answered in process. Give each agent ``model=scripted.model``.

    It answers through fsmchat's own speaking path (the fast path's request, streaming, tool-call
    and usage shapes; through litellm, as a custom provider, when litellm callbacks are
    registered or ``transport="litellm"``), so litellm is not imported; it records every
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

    def __init__(self, scripts: dict[str, Sequence[object]] | None = None,
                 fn: Callable[[Request], object] | None = None, name: str = "scripted", *, id: str | None = None,
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
    def from_config(spec: object, *, allow: object = (), trusted: bool = False) -> "ScriptedModel":
        """Rebuild (or find, in this process) the model ``to_config`` described; its functions
        load under ``allow``/``trusted`` as in ``fsmchat.from_config``."""
        return build_scripted_model(spec if isinstance(spec, ScriptedModelSpec)
                                    else ScriptedModelSpec.model_validate(spec), allow=allow, trusted=trusted)

    def close(self) -> None:
        """Unregister this model (its agents' calls then fail loudly)."""
        _Provider._instances.pop(self.id, None)

    def __enter__(self) -> "ScriptedModel":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def agent(self, name: str, system_prompt: str = "", **kw: object) -> object:
        """An ``Agent`` on this model (``num_retries=0`` unless given); other keywords are ``Agent``'s."""
        kw.setdefault("num_retries", 0)
        return Agent(name, system_prompt=system_prompt, model=self.model, **kw)

    def calls(self, agent: str | None = None) -> int:
        """The requests ``agent`` made (every agent's when None), retries included."""
        return sum(1 for r in self.requests if agent is None or r.agent == agent)

    def requests_of(self, agent: str) -> list[Request]:
        """``agent``'s recorded requests, in order."""
        return [r for r in self.requests if r.agent == agent]

    async def _answer(self, model: str, messages: list[dict[str, object]], params: dict[str, object],
                      litellm_params: dict[str, object]) -> object:
        meta = litellm_params.get("metadata")
        agent = str(meta.get("fsmchat_agent", "?")) if isinstance(meta, dict) else "?"
        with self._lock:
            if sum(self._counts.values()) != len(self.requests):  # the list was changed from outside: recount
                self._counts = dict(collections.Counter(r.agent for r in self.requests))
            n = self._counts[agent] = self._counts.get(agent, 0) + 1
            tools = params.get("tools")  # the request's tool definitions (a list), if any
            req = Request(agent, n, model, [dict(m) for m in messages],  # the test's own copy: rows are shared
                          tools if isinstance(tools, list) else None,
                          params.get("tool_choice"), params.get("response_format"),
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
            raise fail_error(item, model)
        return _response(item)




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

    def __init__(self, fn: Callable[[Request], object], name: str = "function", *, id: str | None = None,
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
    arguments: object = None
    status: int | None = None
    retry_after: float | None = None
    seconds: float | None = None
    then: "ScriptItemSpec | None" = None
    ref: str | None = None

    @classmethod
    def of(cls, x: object, what: str) -> ScriptItemSpec:
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

    def build(self, r: ConfigReader, what: str) -> object:
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
        scripts: dict[str, Sequence[object]] = {agent: [x.build(r, f"{what} script of {agent!r}") for x in items]
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


def build_scripted_model(spec: ScriptedModelSpec, *, allow: object = (), trusted: bool = False) -> ScriptedModel:
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


