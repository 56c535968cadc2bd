"""Layer 10: who speaks. ``Agent`` (a model reached through litellm), plain callables, and the
request a participant is given on its turn."""
from __future__ import annotations

import asyncio
import contextlib
import math
import os
import threading
import unicodedata
from dataclasses import dataclass, field, replace
from typing import Any, AsyncIterator, Awaitable, Callable, Literal, Sequence

from pydantic import AliasChoices, BaseModel, ConfigDict, Field, PrivateAttr, ValidationError, field_validator, \
    model_validator

from .deadline import call_within
from ..errors import ConfigError, ModelCallError, fatal_error, invalid_config
from ..common.masking import register_secrets, secret_values
from ..models import SEED_ROLE, Bid, Message, Transcript, TranscriptView, shorten
from . import context as contexts, llm, wire
from .agent_options import AGENT_KEYWORDS, check_litellm_options, mask_secrets as mask_secrets, name_problem
from .handoff import Handoff, as_handoffs
from .images import image_part
from .log_secrets import is_secret
from .respond import RESPOND_TOOL, RESPOND_TOOL_CHOICE, BidOutcome, bid_from_arguments, parse_bid, \
    respond_response_format, silent
from .speaker import Speaker as Speaker  # the protocol every participant meets (imported from here too)
from .tool_loop import ToolLoop, direct_loop
from .tools import DEFAULT_MAX_PARALLEL_TOOLS, DEFAULT_MAX_TOOL_ROUNDS, Tool, ToolError, as_tool_entry, has_tools, \
    is_schema_dict



class Agent(BaseModel):
    """A participant backed by a model that litellm reaches (OpenAI, Anthropic, Ollama, ...).

    Any extra keyword (``api_base``, ``api_key``, ``temperature``, ``max_tokens``, ...) is passed
    to ``litellm.acompletion`` unchanged. Reference spellings are accepted: ``agent_name``,
    ``model_name``, ``instructions``/``prompt``, ``tools_list_dictionary``. swarms' ``max_loops=1``,
    ``persistent_memory=False`` and ``output_type="final"`` are accepted, as what an fsmchat agent
    does anyway (one completion per turn, no memory of its own between runs, its reply passed on);
    any other value is refused, saying what does it here. With no ``model`` (and no ``FSMCHAT_MODEL``) the
    agent uses the built-in offline model. Reprs and logs never show secrets. ``stream=True``
    streams every reply over the wire (assembled whole; a run with a token sink streams replies
    anyway and shows their deltas: ``pattern.stream(task, tokens=True)``).

    Args:
        name: The agent's name (also ``name=`` or ``agent_name=``): one line, unique in a roster;
            its messages' role.
        **data: The fields below, and litellm options passed through.

    Attributes:
        name: The agent's name.
        system_prompt: The system message of every request (aliases ``instructions``, ``prompt``).
        model: A litellm model name such as ``"gpt-4o-mini"``; None for ``FSMCHAT_MODEL`` or the
            offline model (alias ``model_name``).
        tools: What the agent may call while it speaks (alias ``tools_list_dictionary``): plain
            functions (sync or async), ``Tool(fn, ...)``, tool sources (an MCP server) and
            JSON-schema dicts (offered to the model; calling one ends the run: it has no function).
        max_tool_rounds: Model calls with tool calls one turn may take (default 5) before the model
            must answer without tools; a turn makes at most ``1 + max_tool_rounds`` calls.
        max_parallel_tools: How many tool calls of one reply run at once (results in call order).
        on_tool_error: ``"return"``: a failing call (bad arguments, unknown tool, a raising tool)
            goes back to the model as the call's result, with an event; ``"stop"``: it ends the run
            with a ``ToolError``.
        share_tool_results: Other agents see this agent's tool calls and results under its reply
            (by default they see the final reply only).
        tool_mode: How bids go on the wire: ``"native"`` (a forced tool call) or ``"json"`` (a JSON
            schema response format); None picks per model. A JSON-mode bid cannot call tools, so a
            GroupChat refuses a bidder with tools in JSON mode (``ToolError``) before any model call.
        timeout: Seconds per request (None: no limit).
        num_retries: Retries of a transient failure, with backoff.
        max_retry_wait_s: The longest wait before a retry (default 60 s): a provider asking for a
            longer one (``Retry-After``) is not retried, the call fails at once saying so.
        transport: How requests travel: ``"auto"`` (straight over HTTP for an OpenAI-compatible
            endpoint, ``openai/<name>`` or ``hosted_vllm/<name>`` with an ``api_base``; litellm
            otherwise), ``"fast"`` (straight over HTTP, or a ``ConfigError``), ``"litellm"``.
        max_loops: swarms' spelling: 1 (or None); more turns are the pattern's ``max_loops``.
        persistent_memory: swarms' spelling: False (or None); a run's memory is its checkpoint.
        output_type: swarms' spelling: ``"final"`` (or None); the pattern formats the output.
        context: What of the conversation its calls carry: ``"full"``, ``LastMessages(n)`` or
            ``Summarize(agent=..., keep_last=k, at=0.8)`` (``fsmchat.speakers.context``); None
            (the default) follows the pattern's policy, else ``"full"``.
        max_input_tokens: Its model's input limit in tokens (default: litellm's model map);
            each prompt is counted against it before it is sent.
        handoffs: Who it may give the floor to (``fsmchat.speakers.handoff``): agents, people,
            names or ``Handoff(target, description=..., input_filter=fn)``; each is offered as a
            ``transfer_to_<name>`` tool, and a call of one ends its turn (``Handoffs`` runs them).

    Raises:
        ConfigError: A field is invalid (the message names it and says what is allowed).

    Examples:
        >>> from fsmchat import Agent
        >>> critic = Agent(agent_name="Critic", model_name="gpt-4o-mini", instructions="You find flaws.",
        ...                api_key="sk-secret-123456", temperature=0.2)
        >>> critic
        Agent(name='Critic', system_prompt='You find flaws.', model='gpt-4o-mini', api_key='***', temperature=0.2)
        >>> sorted(critic.litellm_kwargs)
        ['api_key', 'temperature']

        Without a model it answers offline:

        >>> import asyncio
        >>> from fsmchat import Message, Turn
        >>> offline = Agent("Critic", system_prompt="You care about reliable releases.")
        >>> turn = Turn("Critic", [Message(role="User", content="Should we ship on Friday?")], "One sentence.")
        >>> asyncio.run(offline.reply(turn))
        'Because I care about reliable releases, I read the evidence on Friday as a case for a careful, staged approach to the issue at hand. That is where I would start.'
    """

    model_config = ConfigDict(extra="allow", populate_by_name=True, arbitrary_types_allowed=True)

    name: str = Field(validation_alias=AliasChoices("name", "agent_name"))
    system_prompt: str = Field("", validation_alias=AliasChoices("system_prompt", "instructions", "prompt"))
    model: str | None = Field(None, validation_alias=AliasChoices("model", "model_name"))
    tools: list[Any] = Field(default_factory=list, validation_alias=AliasChoices("tools", "tools_list_dictionary"))
    max_tool_rounds: int = Field(DEFAULT_MAX_TOOL_ROUNDS, ge=0)
    max_parallel_tools: int = Field(DEFAULT_MAX_PARALLEL_TOOLS, ge=1)
    on_tool_error: Literal["return", "stop"] = "return"
    share_tool_results: bool = False
    tool_mode: Literal["native", "json"] | None = None
    timeout: float | None = llm.DEFAULT_TIMEOUT
    num_retries: int = Field(llm.DEFAULT_RETRIES, ge=0)
    max_retry_wait_s: float = Field(llm.DEFAULT_MAX_RETRY_WAIT, ge=0, allow_inf_nan=False, strict=True)
    transport: str = "auto"
    max_loops: int | None = None
    persistent_memory: bool | None = None
    output_type: str | None = None
    context: Any = None
    max_input_tokens: int | None = Field(None, ge=1, strict=True)
    handoffs: list[Handoff] = Field(default_factory=list)
    _held_tools: ToolLoop | None = PrivateAttr(default=None)  # tools_open(): the tool sources held open

    def __init__(self, name: str | None = None, /, **data: Any):
        if name is not None:
            data["name"] = name
        try:
            super().__init__(**data)
        except ValidationError as exc:
            raise invalid_config("Agent", exc) from None

    @field_validator("name")
    @classmethod
    def _name(cls, v: str) -> str:
        if not isinstance(v, str) or not v.strip():
            raise ValueError("an agent needs a non-empty name")
        problem = name_problem(v)
        if problem:
            raise ValueError(f"name={v!r} is invalid: {problem}")
        return v

    @field_validator("tools", mode="before")
    @classmethod
    def _tools(cls, v: Any) -> list[Any]:
        if v is None:
            return []
        if not isinstance(v, (list, tuple)):
            v = [v]
        try:
            out = [as_tool_entry(t) for t in v]
        except TypeError as exc:  # pydantic reports ValueErrors: the message says what is allowed
            raise ValueError(str(exc)) from None
        names = [t.name if isinstance(t, Tool) else (t.get("function") or t).get("name") if isinstance(t, dict)
                 else None for t in out]
        seen = [n for n in names if n is not None]
        dup = next((n for n in seen if seen.count(n) > 1), None)
        if dup is not None:
            raise ValueError(f"tools: two tools are named {dup!r}; a model calls a tool by its name, so names must "
                             "be unique (Tool(fn, name=...) renames one)")
        return out

    @field_validator("handoffs", mode="before")
    @classmethod
    def _handoff_items(cls, v: Any) -> list[Handoff]:
        try:
            return [h if isinstance(h, Handoff) else Handoff(h) for h in
                    (v if isinstance(v, (list, tuple)) else [] if v is None else [v])]
        except (TypeError, ValueError) as exc:
            raise ValueError(str(exc)) from None

    @model_validator(mode="after")
    def _handoffs(self) -> "Agent":
        if self.handoffs:  # none: nothing to check (and no assignment through pydantic)
            self.handoffs = as_handoffs(self.handoffs, self.name)
        return self

    @field_validator("context")
    @classmethod
    def _context(cls, v: Any) -> Any:
        return contexts.check_context(v, "Agent")

    @field_validator("max_loops")
    @classmethod
    def _max_loops(cls, v: int | None) -> int | None:
        if v is not None and v != 1:
            raise ValueError(f"max_loops={v!r} is invalid on an Agent: an agent answers once per turn (1, or leave "
                             "it out); for more turns give the pattern max_loops (GroupChat(max_loops=...), "
                             "RoundRobinSwarm(max_loops=...)) or repeat a step (loop, repeat)")
        return v

    @field_validator("persistent_memory")
    @classmethod
    def _persistent_memory(cls, v: bool | None) -> bool | None:
        if v:
            raise ValueError("persistent_memory=True is invalid: an agent keeps no memory of its own between runs "
                             "(False, or leave it out); a run's memory is its transcript, kept across processes by "
                             "checkpoint= (resume, fork)")
        return v

    @field_validator("output_type")
    @classmethod
    def _output_type(cls, v: str | None) -> str | None:
        if v is not None and v != "final":
            raise ValueError(f"output_type={v!r} is invalid on an Agent: an agent passes on its reply only "
                             "('final', or leave it out); the pattern's output_type formats the run's output "
                             "(GroupChat(output_type='list'))")
        return v

    @field_validator("model")
    @classmethod
    def _model(cls, v: str | None) -> str | None:
        if v is not None and not v.strip():
            raise ValueError(f"model={v!r} is invalid: a litellm model name such as 'gpt-4o-mini', or None for "
                             "FSMCHAT_MODEL / the offline model")
        return v

    @field_validator("timeout")
    @classmethod
    def _timeout(cls, v: float | None) -> float | None:
        if v is not None and not (isinstance(v, (int, float)) and math.isfinite(v) and v > 0):
            raise ValueError(f"timeout={v!r} is invalid: seconds per request, a finite number > 0 (or None)")
        return v

    @model_validator(mode="after")
    def _litellm_options(self) -> "Agent":
        check_litellm_options(self.model_extra or {})
        register_secrets(secret_values(self.model_extra or {}))  # masked in every error, log and store from now on
        return self

    @model_validator(mode="after")
    def _transport(self) -> "Agent":
        wire.check_transport("Agent", self.transport, llm.resolve_model(self.model), self.model_extra or {})
        return self

    def __repr_args__(self) -> Any:
        """Reprs, logs and tracebacks never show secrets (api keys, tokens, passwords); they stay
        short: options left at their defaults are omitted and long texts (prompts) are cut."""
        fields = type(self).model_fields
        for k, v in super().__repr_args__():
            if k in fields and k != "name" and not fields[k].is_required() and v == fields[k].get_default(
                    call_default_factory=True):
                continue
            v = "***" if k is not None and is_secret(k) and v else mask_secrets(v)
            yield (k, shorten(v, 80) if isinstance(v, str) else v)

    @property
    def litellm_kwargs(self) -> dict[str, Any]:
        """The extra keywords passed to ``litellm.acompletion`` (``api_key``, ``temperature``, ...).

        An agent without an endpoint of its own takes ``FSMCHAT_API_BASE`` (``fsmchat run --api-base``)
        as its ``api_base``. An agent with an endpoint and no ``api_key`` is given a placeholder key
        (``llm.NO_KEY``) when its provider's client refuses to send a request without one and none is
        in the environment: a local OpenAI-compatible server needs no key."""
        kwargs = dict(self.model_extra or {})
        if not (kwargs.get("api_base") or kwargs.get("base_url")) and os.environ.get(llm.API_BASE_ENV) \
                and not llm.own_provider(self.model):
            kwargs["api_base"] = os.environ[llm.API_BASE_ENV]
        if (kwargs.get("api_base") or kwargs.get("base_url")) and not kwargs.get("api_key") \
                and llm.client_demands_key(self.model):
            kwargs["api_key"] = llm.NO_KEY
        return kwargs

    @property
    def resolved_tool_mode(self) -> str:
        """How bids go on the wire: ``tool_mode`` if set, else a forced ``respond`` tool call for
        every model, except models litellm knows lack function calling and providers that refused
        tools earlier in this process (then JSON-schema ``response_format``)."""
        if self.tool_mode is not None:
            return self.tool_mode
        return llm.tool_mode_for(self.model)

    def equipped(self) -> "Agent":
        """A copy carrying ``RESPOND_TOOL`` (no-op if it already does)."""
        if self.carries_respond():
            return self
        return self.model_copy(update={"tools": [*self.tools, RESPOND_TOOL]})

    def carries_respond(self) -> bool:
        """Whether the agent's tools include ``RESPOND_TOOL``."""
        return any(is_schema_dict(t, "respond") for t in self.tools)

    def tool_specs(self) -> list[dict[str, Any]]:
        """The tools a bid sends as the wire has them: each ``Tool``'s spec and each schema dict
        (tool sources are listed per run, by the run's ``ToolLoop``)."""
        return [t.spec() if isinstance(t, Tool) else t for t in self.tools if isinstance(t, (Tool, dict))]

    async def tool_message(self, turn: "Turn", exchange: list[dict[str, Any]], specs: list[dict[str, Any]], *,
                           final: bool, bid: bool = False) -> Any:
        """One model call of a turn with tools: the turn's messages, then ``exchange`` (the tool
        rounds so far: assistant ``tool_calls`` and ``tool`` results), offering ``specs``.

        A reply may call tools (``tool_choice="auto"``; ``"none"`` once ``final``); a bid must call
        a tool or ``respond`` (``"required"``; ``respond`` forced once ``final``).
        """
        messages = self.prompt(turn, exchange)
        request: dict[str, Any] = {}
        if bid:  # its respond call's message streams (with a token sink)
            request = {"tools": [*specs, RESPOND_TOOL],
                       "tool_choice": RESPOND_TOOL_CHOICE if final or not specs else "required", "bid": "native"}
        elif specs:
            request = {"tools": specs, "tool_choice": "none" if final else "auto"}
        if not bid:  # a reply with neither text nor a tool call is a failed attempt; its text streams
            request["check"], request["tokens"] = self.require_reply_text, True
        response = await self._call(messages, turn.stats, **request)
        choices = getattr(response, "choices", None) or []
        if not choices:
            raise llm_empty(self.name)
        return choices[0].message

    async def choose(self, turn: "Turn", spec: dict[str, Any]) -> Any:
        """One model call that must call the tool ``spec`` (a selector's pick: ``tool_choice`` names
        it); its message. The call is every call's (``_call``: the prompt counted, limits, retries)."""
        choice = {"type": "function", "function": {"name": spec["function"]["name"]}}
        response = await self._call(self.prompt(turn), turn.stats, tools=[spec], tool_choice=choice)
        choices = getattr(response, "choices", None) or []
        if not choices:
            raise llm_empty(self.name)
        return choices[0].message

    def prompt(self, turn: "Turn", extra: Sequence[dict[str, Any]] = ()) -> list[dict[str, Any]]:
        """The chat messages of this agent's call for ``turn`` (then ``extra``, the turn's tool
        rounds): the conversation as its context policy shows it (``fsmchat.speakers.context.fit``)."""
        return contexts.fit(self, turn, extra)

    def _call(self, messages: list[dict[str, Any]], stats: llm.CallStats | None, **request: Any) -> Awaitable[Any]:
        """The model call with this agent's settings (``llm.acomplete``), for the caller to await.
        The request as it goes out (messages, tools, tool choice) is counted against the model's
        input limit first (``context.check_prompt``: ``ContextTooLong`` when over it, nothing sent)."""
        contexts.check_prompt(self, messages, stats, request.get("tools"), request.get("tool_choice"))
        return llm.acomplete(self.model, messages, agent=self.name, kwargs=self.litellm_kwargs, timeout=self.timeout,
                             num_retries=self.num_retries, stats=stats, max_retry_wait=self.max_retry_wait_s,
                             transport=self.transport, **request)

    async def reply_message(self, turn: "Turn", **request: Any) -> Any:
        """Ask the model for this turn's reply and return its message (content and tool calls).

        Args:
            turn: The conversation as this agent sees it and the instruction.
            **request: Extra litellm fields for this request, such as ``tools``/``tool_choice``.

        Raises:
            ModelCallError: The call failed after the retries, or the response has no choices.
        """
        response = await self._call(self.prompt(turn), turn.stats, tokens=True, **request)
        choices = getattr(response, "choices", None) or []
        if not choices:
            raise llm_empty(self.name)
        return choices[0].message

    async def reply(self, turn: "Turn") -> str:
        """Ask the model for this turn's reply and return its text (stripped).

        Args:
            turn: The conversation as this agent sees it and the instruction.

        An agent with tools it can run takes its tool rounds here, in place (a pattern draws them
        as states instead: see ``fsmchat.speakers.tools``); tools given as JSON schemas only are
        offered, and a call of one raises ``ToolError`` (it has no function). A tool source (an MCP
        server) serves every reply of a run: a hub's (its handlers' replies), else the event loop's
        (started on first use, stopped as the loop ends, as ``asyncio.run`` does), or the one
        ``tools_open()`` holds.

        Raises:
            ModelCallError: The call failed after the retries (a reply with no text counts as a
                failed attempt: ``require_reply_text``).
            ToolError: The model called a tool that has no function.
        """
        if not self.tools and not self.handoffs:  # a plain reply: the model's text
            return ((await self.reply_message(turn, check=self.require_reply_text)).content or "").strip()
        if has_tools(self) or self.handoffs:
            return await (self._held_tools or await direct_loop()).speak(self, turn)
        specs = [t for t in self.tool_specs() if not is_schema_dict(t, "respond")]
        if not specs:
            return ((await self.reply_message(turn, check=self.require_reply_text)).content or "").strip()
        message = await self.reply_message(turn, tools=specs, check=self.require_reply_text)
        for call in getattr(message, "tool_calls", None) or []:
            fn = getattr(call, "function", None)
            name = str(getattr(fn, "name", "") or "")
            raise ToolError(f"agent {self.name!r} called tool {name!r}, which has no function: it was given as a "
                            "JSON schema only, so fsmchat cannot run it; pass the function (Agent(tools=[fn]))",
                            agent=self.name, tool=name, arguments=getattr(fn, "arguments", None))
        return (message.content or "").strip()

    def require_reply_text(self, response: Any) -> None:
        """Refuse a reply with no text (``llm.NoReplyText``, retried, then a ``ModelCallError``):
        ``content`` null with no tool calls, or only tool calls while the agent has no tools. A
        blank string is a reply (an empty turn is posted, as swarms, PraisonAI and AG2 post it). A
        reply without choices is left to ``reply_message`` (its own error)."""
        choices = getattr(response, "choices", None) or []
        if not choices:
            return
        message = choices[0].message
        content = getattr(message, "content", None)
        if content is not None and content.strip():
            return
        calls = getattr(message, "tool_calls", None) or []
        if calls and (self.tools or self.handoffs):
            return  # the agent's own tools (or a handoff) were called: the speaking path handles them
        if not calls and content is not None:
            return
        names = [getattr(getattr(c, "function", None), "name", None) for c in calls]
        raise llm.NoReplyText("the reply has no text: " + (
            f"only tool call(s) {names}, and the agent has no tools" if calls else
            f"content is {getattr(message, 'content', None)!r} and there is no tool call"))

    @contextlib.asynccontextmanager
    async def tools_open(self) -> AsyncIterator["Agent"]:
        """Hold the agent's tool sources (MCP servers) open across direct ``reply`` calls.

        Outside a run, the direct ``agent.reply(turn)`` calls of an event loop share each tool
        source, started by the first and stopped as the loop ends. Inside ``async with
        agent.tools_open():`` every source is started once, on entry (a source that cannot start
        fails there, before any model call), every reply uses it, and it is stopped on exit.
        Patterns, flows and hubs need none of this: they start each source once per run (per hub)
        and stop it when the run ends.

        Examples:
            >>> import asyncio
            >>> from fsmchat import Agent
            >>> def clock() -> str:
            ...     "The time."
            ...     return "noon"
            >>> async def main():
            ...     agent = Agent("a", tools=[clock])
            ...     async with agent.tools_open() as held:
            ...         return held is agent
            >>> asyncio.run(main())
            True
        """
        if self._held_tools is not None:  # nested: the outer block holds them
            yield self
            return
        loop = ToolLoop()
        self._held_tools = loop
        try:
            await loop.tools_of(self)
            yield self
        finally:
            self._held_tools = None
            await loop.close()

    async def bid(self, turn: "Turn") -> BidOutcome:
        """Ask the model for a bid with a forced ``respond`` call and return it parsed.

        With a token sink (``stream(task, tokens=True)``, ``execute(on_token=...)``) the call
        streams and the sink gets the bid's message as it arrives (``BidDelta``); the bid is parsed
        from the whole response all the same.

        A malformed answer, or a transient fault that outlived the retries, is a silent bid with
        its reason; a request error no retry can fix and a run limit propagate (they end the run).
        A provider refusing tools switches the model to JSON mode (remembered for the process) and
        the bid is asked again that way.

        Args:
            turn: The conversation as this agent sees it and the instruction (``kind="bid"``).
        """
        messages = self.prompt(turn)
        note = None
        try:
            if not self.carries_respond():
                extra = {"tools": self.tool_specs()} if self.tool_specs() else {}
                response = await self._call(messages, turn.stats, **extra)
                outcome = parse_bid(response, "native")
                return silent("agent does not carry the respond tool (auto_equip=False): " + outcome.reason) \
                    if outcome.valid else outcome
            if self.resolved_tool_mode == "native":
                try:
                    response = await self._call(messages, turn.stats, tools=self.tool_specs(),
                                                tool_choice=RESPOND_TOOL_CHOICE, bid="native")
                    return parse_bid(response, "native")
                except ModelCallError as exc:
                    if self.tool_mode is not None or not llm.refused_tools(exc.cause):
                        raise
                    llm.refuse_tools(self.model)
                    note = {"event": "tool_mode_fallback", "agent": self.name, "model": exc.model,
                            "reason": exc.provider_message[:300]}
            response = await self._call(messages, turn.stats, response_format=respond_response_format(), bid="json")
            outcome = parse_bid(response, "json")
            return replace(outcome, note=note) if note else outcome
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            if fatal_error(exc) is not None:
                raise
            return replace(silent(f"model call failed: {exc}"), error=exc, note=note)


def llm_empty(agent: str) -> Exception:
    return ModelCallError(agent, ValueError("response has no choices"), 1)


@dataclass
class Turn:
    """What a participant is given on its turn: its name, the conversation, the instruction.

    Callables receive this object; agents turn it into chat messages (``request_messages``).

    Attributes:
        agent: The participant's name.
        transcript: The shared conversation so far (read-only).
        instruction: What this turn asks (the pattern's prompt for it).
        kind: ``"reply"``, or ``"bid"`` when a GroupChat asks for a ``Bid``.
        stats: The run's call statistics and limits, or None outside a run.
        variables: A flow's variables.
        history: A private memory replacing the shared conversation, or None.
        images: Images attached to this call.

    Examples:
        >>> from fsmchat import Message, Turn
        >>> rows = [Message(role="User", content="Ship it?"), Message(role="Critic", content="Not yet.")]
        >>> turn = Turn("Dev", rows, "Answer the critic.")
        >>> turn.last.content
        'Not yet.'
        >>> turn.request_messages("You write the code.")
        [{'role': 'system', 'content': 'You write the code.'}, {'role': 'user', 'content': 'Ship it?'}, {'role': 'user', 'content': 'Critic: Not yet.'}, {'role': 'user', 'content': 'Answer the critic.'}]
    """

    agent: str
    transcript: Sequence[Message]
    instruction: str
    kind: Literal["reply", "bid"] = "reply"
    stats: llm.CallStats | None = None
    variables: dict[str, Any] = field(default_factory=dict)
    history: list[dict[str, Any]] | None = None  # a private memory replacing the shared view
    images: list[str] = field(default_factory=list)

    @property
    def last(self) -> Message | None:
        """The latest message, or None in an empty conversation."""
        return self.transcript[-1] if self.transcript else None

    def request_messages(self, system_prompt: str) -> list[dict[str, Any]]:
        """Return the chat messages of this turn's request (new dicts: yours to change).

        The system prompt (if any), the conversation as ``conversation_view`` shows it (or the
        private ``history``), then the instruction as a user message.

        Args:
            system_prompt: The participant's system prompt.
        """
        return [dict(m) for m in self.request_rows(system_prompt)]

    def request_rows(self, system_prompt: str) -> list[dict[str, Any]]:
        """``request_messages(system_prompt)`` as fsmchat's own request reads it: the conversation's
        rows are ``shared_view``'s, shared with the later requests of the transcript (read, never
        change them).

        Args:
            system_prompt: The participant's system prompt.
        """
        msgs: list[dict[str, Any]] = []
        if system_prompt.strip():
            msgs.append({"role": "system", "content": system_prompt})
        msgs.extend(self.history if self.history is not None else shared_view(self.agent, self.transcript))
        msgs.append({"role": "user", "content": user_content(self.instruction, self.images)})
        return msgs


def user_content(text: str, images: Sequence[str]) -> Any:
    if not images:
        return text
    return [{"type": "text", "text": text}, *(image_part(i) for i in images)]


def conversation_view(agent: str, transcript: Sequence[Message]) -> list[dict[str, Any]]:
    """Return the shared conversation as ``agent`` sees it, as chat messages.

    Its own rows are ``assistant`` messages, the task is a plain ``user`` message, everyone else's
    rows are ``user`` messages ``"Name: text"`` (followed by the speaker's tool calls and results
    when it shares them: ``Agent(share_tool_results=True)``); system rows are dropped. Each row is
    a new dict, yours to change (fsmchat's own requests read ``shared_view``'s, built once per
    message and reader).

    Args:
        agent: The name of the participant who reads it.
        transcript: The conversation.

    Examples:
        >>> from fsmchat import Message
        >>> from fsmchat.speakers import conversation_view
        >>> rows = [Message(role="User", content="Ship it?"), Message(role="Critic", content="Not yet."),
        ...         Message(role="Dev", content="Why?")]
        >>> conversation_view("Critic", rows)
        [{'role': 'user', 'content': 'Ship it?'}, {'role': 'assistant', 'content': 'Not yet.'}, {'role': 'user', 'content': 'Dev: Why?'}]
    """
    return [dict(r) for r in shared_view(agent, transcript)]


def shared_view(agent: str, transcript: Sequence[Message]) -> list[dict[str, Any]]:
    """``conversation_view(agent, transcript)`` whose rows, from a ``Transcript`` or its view, are
    built once per message and reader and shared by every later request (the list is new each
    time; the rows are read, never changed): a request's cost does not grow with what it has shown."""
    if not isinstance(transcript, (Transcript, TranscriptView)):
        return [r for r in (view_row(agent, m) for m in transcript) if r is not None]
    shown = transcript.memo.get(("conversation_view", agent))
    if not isinstance(shown, _Shown):
        shown = transcript.memo[("conversation_view", agent)] = _Shown()
    n = len(transcript)
    with shown.lock:  # a sync speaker left running in its thread past a deadline may read it too
        for i in range(len(shown.ends), n):
            row = view_row(agent, transcript[i])
            if row is not None:
                shown.rows.append(row)
            shown.ends.append(len(shown.rows))
        return shown.rows[:shown.ends[n - 1]] if n else []


class _Shown:
    """One reader's conversation view of a transcript as built so far (a transcript's ``memo``): the
    rows, and for each message how many rows the messages up to it made."""

    __slots__ = ("rows", "ends", "lock")

    def __init__(self) -> None:
        self.rows: list[dict[str, Any]] = []
        self.ends: list[int] = []
        self.lock = threading.Lock()

    def __reduce__(self) -> tuple[type[_Shown], tuple[()]]:
        return _Shown, ()  # a copied or pickled transcript builds its view again (a cache: empty is right)


def view_row(agent: str, m: Message) -> dict[str, Any] | None:
    """One message as ``agent`` reads it in ``conversation_view`` (None: a system row, not shown)."""
    if m.role == "system":
        return None
    if m.role == agent:
        return {"role": "assistant", "content": m.content}
    if m.role == SEED_ROLE:
        return {"role": "user", "content": m.content}
    if m.metadata and "share_tool_calls" in m.metadata:  # the speaker shares its tool calls
        return {"role": "user", "content": f"{m.role}: {m.content}\n" + shared_calls(m.role, m.metadata)}
    return {"role": "user", "content": f"{m.role}: {m.content}"}


def shared_calls(role: str, metadata: dict[str, Any]) -> str:
    """The tool calls of a reply whose speaker shares them, as others read them under it."""
    lines = []
    for c in metadata.get("tool_calls") or ():
        args = c.get("arguments")
        shown = ", ".join(f"{k}={v!r}" for k, v in args.items()) if isinstance(args, dict) else str(args)
        outcome = c.get("result") if c.get("status") == "done" else f"{c.get('status')}: {c.get('error') or c.get('result')}"
        lines.append(f"[{role} called {c.get('name')}({shown}) -> {outcome}]")
    return "\n".join(lines)


class CallableSpeaker:
    """Any callable as a participant: sync or async, ``fn(turn) -> str | Bid``.

    Patterns wrap plain functions in it (``as_speaker``), so a test or an offline script needs no
    model. The callable runs under the run's deadline.

    Args:
        fn: ``fn(turn)``, returning the reply text, or a ``Bid`` on a bid turn.
        name: The participant's name; by default the callable's ``name`` or ``__name__``.

    Examples:
        >>> import asyncio
        >>> from fsmchat import Bid, Message, Turn
        >>> from fsmchat.speakers import CallableSpeaker
        >>> def dev(turn):
        ...     return Bid(0.5, "Because.") if turn.kind == "bid" else "Because."
        >>> speaker = CallableSpeaker(dev)
        >>> turn = Turn("dev", [Message(role="User", content="Why?")], "Answer.")
        >>> speaker.name, asyncio.run(speaker.reply(turn))
        ('dev', 'Because.')
        >>> asyncio.run(speaker.bid(Turn("dev", turn.transcript, "Bid.", kind="bid"))).score
        0.5
    """

    def __init__(self, fn: Callable[..., Any], name: str | None = None):
        self.fn = fn
        self.name = name or getattr(fn, "name", None) or getattr(fn, "__name__", None) or type(fn).__name__

    async def _invoke(self, turn: Turn) -> Any:
        """``fn(turn)`` under the run's deadline: an async callable is cancelled and a sync one
        abandoned in its worker thread when ``deadline_s`` passes (``DeadlineExceeded``)."""
        deadline = turn.stats.deadline if turn.stats is not None else None
        return await call_within(self.fn, turn, deadline=deadline, what=f"speaker {self.name!r}")

    async def reply(self, turn: Turn) -> str:
        """Call the function and return its reply text (a ``Bid``'s message, stripped).

        Args:
            turn: The conversation and the instruction.
        """
        out = await self._invoke(turn)
        if isinstance(out, Bid):
            return out.message.strip()
        return "" if out is None else str(out).strip()

    async def bid(self, turn: Turn) -> BidOutcome:
        """Call the function and read its answer as a bid.

        A ``Bid``, a ``BidOutcome``, a ``{"score", "message"}`` dict or a ``(score, message)``
        pair; anything else is a silent bid saying what came back.

        Args:
            turn: The conversation and the instruction (``kind="bid"``).
        """
        out = await self._invoke(turn)
        if isinstance(out, Bid):
            return BidOutcome(out.score, out.message.strip())
        if isinstance(out, BidOutcome):
            return out
        if isinstance(out, dict):
            return bid_from_arguments(out)
        if isinstance(out, tuple) and len(out) == 2:
            return bid_from_arguments({"score": out[0], "message": out[1]})
        return silent(f"callable returned {type(out).__name__}, not a Bid")


def as_speaker(x: Any) -> Speaker:
    """Return ``x`` as a participant: agents stay agents, callables become ``CallableSpeaker``.

    Args:
        x: An ``Agent`` (or any object with ``name``, ``reply`` and ``bid``) or a callable.

    Raises:
        TypeError: ``x`` is neither.

    Examples:
        >>> from fsmchat.speakers import as_speaker
        >>> def dev(turn):
        ...     return "Because."
        >>> as_speaker(dev).name
        'dev'
        >>> as_speaker(3)
        Traceback (most recent call last):
        ...
        TypeError: a participant must be an fsmchat Agent or a callable (turn) -> str | Bid, got int
    """
    # fsmchat's own, and what has no ``reply`` (a plain function), skip the Protocol's structural check (tens of µs)
    if isinstance(x, (Agent, CallableSpeaker)) or (hasattr(x, "reply") and isinstance(x, Speaker)):
        return x
    if callable(x):
        return CallableSpeaker(x)
    raise TypeError(f"a participant must be an fsmchat Agent or a callable (turn) -> str | Bid, "
                    f"got {type(x).__name__}")


def check_roster(agents: Sequence[Any], what: str) -> list[Speaker]:
    """Return the participants wrapped (``as_speaker``), refusing names a transcript cannot tell apart.

    Args:
        agents: Agents and callables.
        what: Who asks (the pattern's name), for the error message.

    Raises:
        ValueError: Two participants share a name, or one is named ``"User"`` (the task's role).
        TypeError: A participant is neither an agent nor a callable.

    Examples:
        >>> from fsmchat import Agent
        >>> from fsmchat.speakers import check_roster
        >>> def dev(turn):
        ...     return "Because."
        >>> [s.name for s in check_roster([dev, Agent("Critic")], "GroupChat")]
        ['dev', 'Critic']
        >>> check_roster([dev, dev], "GroupChat")
        Traceback (most recent call last):
        ...
        fsmchat.errors.ConfigError: GroupChat: agent names must be unique; 'dev' appears more than once
    """
    speakers = [as_speaker(a) for a in agents]
    seen: dict[str, str] = {}  # the NFKC form of each name -> the name
    for s in speakers:
        problem = name_problem(s.name) if isinstance(s.name, str) else "a name is a string"
        if problem:
            raise ConfigError(f"{what}: agent name {s.name!r} is invalid: {problem}")
        if s.name in seen.values():
            raise ConfigError(f"{what}: agent names must be unique; {s.name!r} appears more than once")
        same = seen.get(unicodedata.normalize("NFKC", s.name))
        if same is not None:
            raise ConfigError(f"{what}: agent names must be unique; {s.name!r} and {same!r} are the same name once "
                              "Unicode-normalised (NFKC), so a transcript could not tell them apart")
        if s.name == SEED_ROLE:
            raise ConfigError(f"{what}: the name {SEED_ROLE!r} is reserved for the task message")
        seen[unicodedata.normalize("NFKC", s.name)] = s.name
    return speakers
