"""Layer 10, speakers: context policies: how much of the conversation a model call carries, and the count
of its tokens against the model's input limit.

Before each model call of an ``Agent`` the speaking block builds the prompt (``fit``): the
conversation as the agent's policy shows it. Just before the request goes out, the request as it
is sent (its messages, and the tools and tool choice it offers) is counted once with the model's
tokenizer (``count_tokens``) against the model's input limit (``check_prompt``;
``Agent(max_input_tokens=N)``, else ``max_input_tokens`` of litellm's model map; a model with
neither is not counted). That one count is the ``prompt_tokens`` event, the figure of a refusal and
what ``usage`` adds up (``counted_usage``). The policy is the agent's ``context``, else the
pattern's (``GroupChat(context=...)``, ``RoundRobinSwarm(context=...)``...), else ``"full"``:

- ``"full"`` (the default): the whole conversation; a prompt over the limit is refused before the
  call (``ContextTooLong``) and the run ends with ``ok`` False and the transcript so far.
- ``LastMessages(n)``: the task and the last ``n`` messages.
- ``Summarize(agent=..., keep_last=k, at=0.8)``: when the conversation would pass the fraction
  ``at`` of the limit, a drawn ``compact_<state>`` state asks ``agent`` (one model call) to
  summarise the older messages (``fsmchat.speakers.compaction``); the agents then see the task, the
  summary and the messages since (at least the last ``k``).

Tokens are counted as litellm's ``token_counter`` counts them, offline: with the model's own
tokenizer where litellm ships it (Anthropic's and DeepSeek's: litellm counts those, so it is
imported), and otherwise estimated with tiktoken's ``cl100k_base``, which litellm ships too, by
fsmchat's own copy of litellm's rule (``fsmchat.speakers.tokens``: the same number, without
importing litellm). That estimate is exact for GPT-4 and GPT-3.5 models and
close for the rest (``o200k_base`` models such as GPT-4o, Llama, Mistral, Gemini), whose
tokenizers tiktoken or Hugging Face would download: nothing is fetched. Give ``at`` (or the
limit) some room for the difference. Each counted request is a ``prompt_tokens`` event of the run (agent,
tokens, limit, policy; ``refused`` True on one over the limit, which was not sent).

Where a speaker answers from a private memory instead of the shared conversation (the debaters of
``OneOnOneDebate``, the panel of ``ExpertPanelDiscussion``), ``LastMessages(n)`` keeps the first
message of the memory (the briefing, or the first prompt) and its last ``n`` messages.
"""
from __future__ import annotations

import contextvars
import inspect
import sys
from dataclasses import dataclass, replace
from typing import Any, Awaitable, Callable, Literal, Sequence, TypeVar, Union

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from ..errors import ConfigError, ContextTooLong, invalid_config
from ..models import Message
from . import modelmap, tokens
from .providers import get_litellm, own_handler, resolve_model
from .speaker import Speaker
from .wire import sent_messages

SUMMARY_ROLE = "Summary"
"""The role of the summary row agents see in place of the messages it covers."""

POLICIES = ('"full" (the whole conversation; refused when over the input limit), LastMessages(n) (the task '
            "and the last n messages), Summarize(agent=..., keep_last=k, at=0.8) (older messages summarised by "
            "one model call), or None (the pattern's policy)")


class LastMessages(BaseModel):
    """Context policy: the task plus the last ``n`` messages.

    Args:
        n: How many of the latest messages a call carries after the task (at least 1).
        **data: ``n`` by name.

    Examples:
        >>> from fsmchat.speakers.context import LastMessages
        >>> LastMessages(6)
        LastMessages(n=6)
        >>> LastMessages(0)
        Traceback (most recent call last):
        ...
        fsmchat.errors.ConfigError: LastMessages: n=0 is invalid: input should be greater than or equal to 1
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    n: int = Field(ge=1, strict=True)

    def __init__(self, n: object = None, /, **data: object):
        if n is not None:
            data["n"] = n
        try:
            super().__init__(**data)
        except ValidationError as exc:
            raise invalid_config("LastMessages", exc) from None

    def __repr__(self) -> str:
        return f"LastMessages(n={self.n})"


class Summarize(BaseModel):
    """Context policy: older messages summarised by ``agent`` when the prompt nears the limit.

    When the conversation an agent would see passes ``at`` (a fraction) of its model's input
    limit, a drawn ``compact`` state asks ``agent`` for a summary of the messages before the last
    ``keep_last`` (and of the previous summary): one model call, counted in ``max_calls()`` and
    the budgets, checkpointed (a resume reuses it), a ``compacted`` event of the run. The agents
    then see the task, the summary and the messages since.

    Args:
        **data: The attributes below, by name.

    Attributes:
        agent: The ``Agent`` that writes the summary.
        keep_last: Messages kept word for word after a compaction (default 4).
        at: The fraction of the input limit that starts a compaction (default 0.8).

    Examples:
        >>> from fsmchat import Agent
        >>> from fsmchat.speakers.context import Summarize
        >>> Summarize(agent=Agent("scribe"), keep_last=6).at
        0.8
        >>> Summarize(agent=Agent("scribe"), at=1.5)
        Traceback (most recent call last):
        ...
        fsmchat.errors.ConfigError: Summarize: at=1.5 is invalid: input should be less than or equal to 1
    """

    model_config = ConfigDict(frozen=True, extra="forbid", arbitrary_types_allowed=True)

    agent: Any
    keep_last: int = Field(4, ge=0, strict=True)
    at: float = Field(0.8, gt=0.0, le=1.0, allow_inf_nan=False)

    def __init__(self, **data: object):
        try:
            super().__init__(**data)
        except ValidationError as exc:
            raise invalid_config("Summarize", exc) from None

    @field_validator("agent")
    @classmethod
    def _agent(cls, v: object) -> object:
        if not (hasattr(v, "model") and hasattr(v, "system_prompt") and callable(getattr(v, "reply", None))):
            raise ValueError(f"agent={v!r} is invalid: the Agent that writes the summary (an Agent, whose one "
                             "model call per compaction is counted in max_calls() and the budgets)")
        return v

    def __repr__(self) -> str:
        return f"Summarize(agent={getattr(self.agent, 'name', self.agent)!r}, keep_last={self.keep_last}, at={self.at})"


ContextPolicy = Union[Literal["full"], LastMessages, Summarize]


def check_context(value: object, owner: str, name: str = "context") -> ContextPolicy | None:
    """``value`` as a context policy (None: the pattern's), or a ``ConfigError`` saying what is allowed.

    Examples:
        >>> from fsmchat.speakers.context import check_context
        >>> check_context("full", "Agent")
        'full'
        >>> check_context(5, "Agent")
        Traceback (most recent call last):
        ...
        fsmchat.errors.ConfigError: Agent: context=5 (int) is invalid: a context policy is "full" (the whole conversation; refused when over the input limit), LastMessages(n) (the task and the last n messages), Summarize(agent=..., keep_last=k, at=0.8) (older messages summarised by one model call), or None (the pattern's policy)
    """
    if value is None or isinstance(value, (LastMessages, Summarize)):
        return value
    if value == "full":
        return "full"
    raise ConfigError(f"{owner}: {name}={value!r} ({type(value).__name__}) is invalid: a context policy is {POLICIES}")


def check_memory_context(value: object, owner: str) -> ContextPolicy | None:
    """``check_context`` for a pattern whose speakers answer from private memories
    (``OneOnOneDebate``, ``ExpertPanelDiscussion``): ``Summarize`` is refused (``memory_summarize``).

    Examples:
        >>> from fsmchat.speakers.context import LastMessages, check_memory_context
        >>> check_memory_context(LastMessages(4), "OneOnOneDebate")
        LastMessages(n=4)
    """
    policy = check_context(value, owner)
    if isinstance(policy, Summarize):
        raise memory_summarize(owner, f"context={policy!r}")
    return policy


def memory_summarize(owner: str, what: str) -> ConfigError:
    """The refusal of a ``Summarize`` policy where speakers answer from private memories."""
    return ConfigError(f"{owner}: {what} is invalid here: {owner}'s speakers answer from private memories (their own "
                       "prompts and replies), which a summary of the shared conversation does not shorten; give "
                       "context=LastMessages(n) (each memory's first message and its last n) or \"full\"")



C = TypeVar("C")  # a graph's context, passed on to its state's action


async def act_under(state: "ContextState", action: Callable[[C], object], ctx: C) -> object:
    """``action(ctx)`` (awaited if it returns an awaitable) with ``state`` as the active context
    state of the speaking it does (``ACTIVE``)."""
    token = ACTIVE.set(state)
    try:
        out = action(ctx)
        if inspect.isawaitable(out):
            out = await out
    finally:
        ACTIVE.reset(token)
    return out

def scoped(action: Callable[[C], object] | None, policy: ContextPolicy) -> Callable[[C], Awaitable[object]]:
    """``action`` (a speaking state's) with its calls following the pattern's ``policy``
    (``ACTIVE`` while it runs): what a pattern's ``context=LastMessages(n)`` does in each of its
    speaking states (``Summarize`` is drawn as a compaction: ``compaction.compacting_action``)."""

    async def speaking(ctx: C) -> object:
        assert action is not None, "a speaking state has an action"
        return await act_under(ContextState(policy=policy), action, ctx)

    speaking.__name__ = getattr(action, "__name__", "speak")
    speaking.__doc__ = getattr(action, "__doc__", None)
    return speaking


def policy_of(speaker: Speaker, pattern: ContextPolicy | None) -> ContextPolicy:
    """The policy ``speaker``'s calls follow: its own ``context``, else the pattern's, else ``"full"``."""
    own = getattr(speaker, "context", None)
    return own if own is not None else (pattern if pattern is not None else "full")


@dataclass
class Compaction:
    """A run's latest summary: the text and where the messages it covers end (``rows[1:upto]``)."""

    upto: int
    text: str
    by: str


@dataclass
class ContextState:
    """A speaking state's context for its calls: the pattern's policy and the run's summary."""

    policy: ContextPolicy | None = None
    summary: Compaction | None = None
    due: Summarize | None = None  # a compaction is to run before the state speaks


ACTIVE: contextvars.ContextVar[ContextState | None] = contextvars.ContextVar("fsmchat_context", default=None)
"""Set while a state with a compaction speaks: the policy and summary its calls read."""


def view(rows: Sequence[Message], policy: ContextPolicy, summary: Compaction | None = None) -> Sequence[Message]:
    """The rows a call carries under ``policy`` (``rows`` itself when nothing is left out).

    Examples:
        >>> from fsmchat import Message
        >>> from fsmchat.speakers.context import LastMessages, view
        >>> rows = [Message(role="User", content="task")] + [Message(role="a", content=str(i)) for i in range(5)]
        >>> [m.content for m in view(rows, LastMessages(2))]
        ['task', '3', '4']
    """
    if isinstance(policy, LastMessages):
        return rows if len(rows) <= policy.n + 1 else [rows[0], *rows[-policy.n:]]
    if isinstance(policy, Summarize) and summary is not None and rows:
        return [rows[0], summary_row(summary), *rows[summary.upto:]]
    return rows


def summary_row(summary: Compaction) -> Message:
    """The row agents read in place of the messages a summary covers."""
    return Message(role=SUMMARY_ROLE, content=summary.text)


def count_tokens(model: str, messages: Sequence[dict[str, object]], tools: Sequence[dict[str, object]] | None = None,
                 tool_choice: object = None) -> int:
    """The tokens of a request for ``model``: its ``messages`` as they are sent (``wire.sent_messages``)
    and the ``tools`` and ``tool_choice`` it offers, as litellm's ``token_counter`` counts them: with
    the model's tokenizer where litellm ships it (litellm counts those), else the ``cl100k_base``
    count of ``fsmchat.speakers.tokens``, without importing litellm (never a download).

    Examples:
        >>> from fsmchat.speakers.context import count_tokens
        >>> count_tokens("gpt-4o-mini", [{"role": "user", "content": "Hello there, how are you today?"}])
        15
    """
    sent, offered = sent_messages(list(messages)), list(tools) if tools else None
    choice = tool_choice if tools else None
    loaded = sys.modules.get("litellm")
    if loaded is not None and getattr(loaded, "disable_token_counter", False) is True:
        return 0  # litellm's switch: its count is 0 then
    bundled = tokens.tokenizer_kind(model, listed=own_handler(model) is None) in tokens.BUNDLED_TOKENIZERS
    if not bundled:
        counted = tokens.count_request(sent, offered, choice)
        if counted is not None:
            return counted
    return int(get_litellm().token_counter(model=model if bundled else "", messages=sent, tools=offered,
                                           tool_choice=choice))


def input_limit(speaker: Speaker) -> tuple[int, str] | None:
    """(the input limit of ``speaker``'s model, where it comes from), or None when unknown:
    ``Agent(max_input_tokens=N)``, else ``max_input_tokens`` of litellm's model map."""
    declared = getattr(speaker, "max_input_tokens", None)
    if declared is not None:
        return int(declared), f"Agent(max_input_tokens={declared})"
    if not hasattr(speaker, "model"):
        return None
    model = resolve_model(speaker.model)
    info = modelmap.info_of(model)  # litellm's map, read without importing litellm
    n = info.get("max_input_tokens") if isinstance(info, dict) else None
    if isinstance(n, int) and not isinstance(n, bool) and n > 0:
        return n, f"max_input_tokens of {model!r} in litellm's model map"
    return None


def active_policy(speaker: Speaker) -> ContextPolicy:
    """The policy ``speaker``'s call follows now: its own, else the speaking state's pattern's
    (``ACTIVE``), else ``"full"``."""
    state = ACTIVE.get()
    return policy_of(speaker, state.policy if state is not None else None)


def fit(speaker: Any, turn: Any, extra: Sequence[dict[str, Any]] = ()) -> list[dict[str, Any]]:
    """The chat messages of ``speaker``'s call for ``turn`` (then ``extra``, a turn's tool rounds):
    the conversation as its policy shows it (``LastMessages`` on a private memory keeps the
    memory's first message and its last n). Counting is ``check_prompt``'s, on the request as sent."""
    state = ACTIVE.get()
    policy = active_policy(speaker)
    if isinstance(policy, LastMessages) and turn.history is not None:
        history = turn.history
        if len(history) > policy.n + 1:
            turn = replace(turn, history=[history[0], *history[-policy.n:]])
    elif turn.history is None and policy != "full":
        rows = view(turn.transcript, policy, state.summary if state is not None else None)
        if rows is not turn.transcript:
            turn = replace(turn, transcript=rows)
    messages: list[dict[str, Any]] = turn.request_rows(speaker.system_prompt)  # shared rows: read only
    messages += extra
    return messages


def check_prompt(speaker: Speaker, messages: Sequence[dict[str, object]], stats: object,
                 tools: Sequence[dict[str, object]] | None = None, tool_choice: object = None) -> None:
    """Count the request ``speaker`` is about to send (``messages``, ``tools``, ``tool_choice``:
    what goes out) against its model's input limit, once: a ``prompt_tokens`` event of the run
    (``refused`` True when over the limit), and over the limit the refusal, with that same figure.

    Raises:
        ContextTooLong: The request has more tokens than the limit (nothing was sent).
    """
    limit = input_limit(speaker)
    if limit is None or not hasattr(speaker, "model"):
        return
    model = resolve_model(speaker.model)
    tokens = count_tokens(model, messages, tools, tool_choice)
    over = tokens > limit[0]
    events = getattr(stats, "events", None)
    if events is not None:
        event: dict[str, object] = {"event": "prompt_tokens", "agent": speaker.name, "tokens": tokens,
                                    "limit": limit[0], "policy": policy_name(active_policy(speaker))}
        if over:
            event["refused"] = True
        events.append(event)
    if over:
        raise ContextTooLong(speaker.name, tokens, limit[0], limit[1], model)


def policy_name(policy: ContextPolicy) -> str:
    """``"full"``, ``"last_messages"`` or ``"summarize"``."""
    return "last_messages" if isinstance(policy, LastMessages) else "summarize" if isinstance(policy, Summarize) \
        else "full"


def counted_usage(usage: dict[str, int], events: Sequence[object]) -> dict[str, int]:
    """``usage`` with the prompt tokens counted before the requests (``prompt_tokens`` events):
    ``counted_prompt_tokens`` (the sum of the prompts sent), ``max_prompt_tokens`` (the largest
    prompt sent, so never over the limit) and, when a prompt was refused, ``refused_prompt_tokens``
    (the run's first refusal: the figure its ``ContextTooLong`` names). Written only when a request
    was counted (a run that counted nothing keeps its usage as it was).

    Examples:
        >>> from fsmchat.speakers.context import counted_usage
        >>> counted_usage({"prompt_tokens": 140}, [{"event": "prompt_tokens", "agent": "a", "tokens": 90},
        ...                                        {"event": "prompt_tokens", "agent": "b", "tokens": 60}])
        {'prompt_tokens': 140, 'counted_prompt_tokens': 150, 'max_prompt_tokens': 90}
        >>> counted_usage({"prompt_tokens": 140}, [{"event": "prompt_tokens", "agent": "a", "tokens": 90},
        ...                                        {"event": "prompt_tokens", "agent": "b", "tokens": 105,
        ...                                         "refused": True}])
        {'prompt_tokens': 140, 'counted_prompt_tokens': 90, 'max_prompt_tokens': 90, 'refused_prompt_tokens': 105}
        >>> counted_usage({"prompt_tokens": 140}, [])
        {'prompt_tokens': 140}
    """
    counted = [e for e in events if isinstance(e, dict) and e.get("event") == "prompt_tokens"]
    if not counted:
        return usage
    sent = [int(e["tokens"]) for e in counted if not e.get("refused")]
    refused = [int(e["tokens"]) for e in counted if e.get("refused")]
    out = {**usage, "counted_prompt_tokens": sum(sent), "max_prompt_tokens": max(sent, default=0)}
    if refused:
        out["refused_prompt_tokens"] = refused[0]
    return out


def token_summary(events: Sequence[object]) -> dict[str, dict[str, object]]:
    """What a run's ``prompt_tokens`` and ``compacted`` events add up to (the viewer's usage
    shows it): prompts sent, the largest and the latest of them, the limit, the compactions, and
    the first refused prompt's tokens when one was refused; empty when nothing was counted.

    Examples:
        >>> from fsmchat.speakers.context import token_summary
        >>> token_summary([{"event": "prompt_tokens", "agent": "a", "tokens": 90, "limit": 200, "policy": "full"},
        ...                {"event": "compacted", "upto": 4},
        ...                {"event": "prompt_tokens", "agent": "b", "tokens": 60, "limit": 200, "policy": "full"}])
        {'prompt_tokens': {'calls': 2, 'max': 90, 'last': 60, 'limit': 200, 'compactions': 1}}
    """
    counted = [e for e in events if isinstance(e, dict) and e.get("event") == "prompt_tokens"]
    if not counted:
        return {}
    sent = [int(e["tokens"]) for e in counted if not e.get("refused")]
    refused = [int(e["tokens"]) for e in counted if e.get("refused")]
    summary: dict[str, object] = {"calls": len(sent), "max": max(sent, default=0), "last": sent[-1] if sent else None,
               "limit": counted[-1].get("limit"),
               "compactions": sum(1 for e in events if isinstance(e, dict) and e.get("event") == "compacted")}
    if refused:
        summary["refused"] = refused[0]
    return {"prompt_tokens": summary}
