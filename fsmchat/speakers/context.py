"""Layer 10, speakers: context policies: how much of the conversation a model call carries, and the count
of its tokens against the model's input limit.

Before each model call of an ``Agent`` the speaking block builds the prompt (``fit``): the
conversation as the agent's policy shows it, counted with the model's tokenizer against the
model's input limit (``Agent(max_input_tokens=N)``, else ``max_input_tokens`` of litellm's model
map; a model with neither is not counted). The policy is the agent's ``context``, else the
pattern's (``GroupChat(context=...)``), else ``"full"``:

- ``"full"`` (the default): the whole conversation; a prompt over the limit is refused before the
  call (``ContextTooLong``) and the run ends with ``ok`` False and the transcript so far.
- ``LastMessages(n)``: the task and the last ``n`` messages.
- ``Summarize(agent=..., keep_last=k, at=0.8)``: when the conversation would pass the fraction
  ``at`` of the limit, a drawn ``compact_<state>`` state asks ``agent`` (one model call) to
  summarise the older messages (``fsmchat.speakers.compaction``); the agents then see the task, the
  summary and the messages since (at least the last ``k``).

Tokens are counted with litellm's ``token_counter``, offline: with the model's own tokenizer where
litellm ships it (Anthropic's and DeepSeek's), and otherwise estimated with tiktoken's
``cl100k_base``, which litellm ships too. That estimate is exact for GPT-4 and GPT-3.5 models and
close for the rest (``o200k_base`` models such as GPT-4o, Llama, Mistral, Gemini), whose
tokenizers tiktoken or Hugging Face would download: nothing is fetched. Give ``at`` (or the
limit) some room for the difference. Each counted call is a ``prompt_tokens`` event of the run (agent,
tokens, limit, policy).
"""
from __future__ import annotations

import contextvars
from dataclasses import dataclass, replace
from typing import Any, Literal, Sequence, Union

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from ..errors import ConfigError, ContextTooLong, invalid_config
from ..models import Message
from .llm import get_litellm, resolve_model

BUNDLED_TOKENIZERS = frozenset({"anthropic", "deepseek"})
"""litellm's tokenizer kinds that ship with it: used as they are; every other model is estimated
with tiktoken's ``cl100k_base``, which also ships with litellm (no tokenizer is ever downloaded)."""

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

    def __init__(self, n: Any = None, /, **data: Any):
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

    def __init__(self, **data: Any):
        try:
            super().__init__(**data)
        except ValidationError as exc:
            raise invalid_config("Summarize", exc) from None

    @field_validator("agent")
    @classmethod
    def _agent(cls, v: Any) -> Any:
        if not (hasattr(v, "model") and hasattr(v, "system_prompt") and callable(getattr(v, "reply", None))):
            raise ValueError(f"agent={v!r} is invalid: the Agent that writes the summary (an Agent, whose one "
                             "model call per compaction is counted in max_calls() and the budgets)")
        return v

    def __repr__(self) -> str:
        return f"Summarize(agent={getattr(self.agent, 'name', self.agent)!r}, keep_last={self.keep_last}, at={self.at})"


ContextPolicy = Union[Literal["full"], LastMessages, Summarize]


def check_context(value: Any, owner: str, name: str = "context") -> ContextPolicy | None:
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
    if value is None or value == "full" or isinstance(value, (LastMessages, Summarize)):
        return value  # type: ignore[no-any-return]  # value is one of the union's members, checked above
    raise ConfigError(f"{owner}: {name}={value!r} ({type(value).__name__}) is invalid: a context policy is {POLICIES}")


def policy_of(speaker: Any, pattern: ContextPolicy | None) -> ContextPolicy:
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


def count_tokens(model: str, messages: Sequence[dict[str, Any]]) -> int:
    """The tokens of ``messages`` for ``model``: litellm's ``token_counter`` with the model's
    tokenizer where litellm ships it, else the ``cl100k_base`` estimate (never a download)."""
    lm = get_litellm()
    kind_of = getattr(getattr(lm, "utils", None), "huggingface_tokenizer_kind", None)
    kind = kind_of(model) if callable(kind_of) else None
    return int(lm.token_counter(model=model if kind in BUNDLED_TOKENIZERS else "", messages=list(messages)))


def input_limit(speaker: Any) -> tuple[int, str] | None:
    """(the input limit of ``speaker``'s model, where it comes from), or None when unknown:
    ``Agent(max_input_tokens=N)``, else ``max_input_tokens`` of litellm's model map."""
    declared = getattr(speaker, "max_input_tokens", None)
    if declared is not None:
        return int(declared), f"Agent(max_input_tokens={declared})"
    if not hasattr(speaker, "model"):
        return None
    model = resolve_model(speaker.model)
    table = get_litellm().model_cost
    info = table.get(model) or (table.get(model.split("/", 1)[1]) if "/" in model else None)
    n = info.get("max_input_tokens") if isinstance(info, dict) else None
    if isinstance(n, int) and not isinstance(n, bool) and n > 0:
        return n, f"max_input_tokens of {model!r} in litellm's model map"
    return None


def fit(speaker: Any, turn: Any, extra: Sequence[dict[str, Any]] = ()) -> list[dict[str, Any]]:
    """The chat messages of ``speaker``'s call for ``turn`` (then ``extra``, a turn's tool rounds):
    the conversation as its policy shows it, counted against its model's input limit.

    Raises:
        ContextTooLong: The prompt has more tokens than the limit (nothing was sent).
    """
    state = ACTIVE.get()
    policy = policy_of(speaker, state.policy if state is not None else None)
    if turn.history is None and policy != "full":
        rows = view(turn.transcript, policy, state.summary if state is not None else None)
        if rows is not turn.transcript:
            turn = replace(turn, transcript=rows)
    messages: list[dict[str, Any]] = turn.request_messages(speaker.system_prompt)
    messages += extra
    limit = input_limit(speaker)
    if limit is None:
        return messages
    tokens = count_tokens(resolve_model(speaker.model), messages)
    events = getattr(turn.stats, "events", None)
    if events is not None:
        events.append({"event": "prompt_tokens", "agent": speaker.name, "tokens": tokens, "limit": limit[0],
                       "policy": policy_name(policy)})
    if tokens > limit[0]:
        raise ContextTooLong(speaker.name, tokens, limit[0], limit[1], resolve_model(speaker.model))
    return messages


def policy_name(policy: ContextPolicy) -> str:
    """``"full"``, ``"last_messages"`` or ``"summarize"``."""
    return "last_messages" if isinstance(policy, LastMessages) else "summarize" if isinstance(policy, Summarize) \
        else "full"


def counted_usage(usage: dict[str, Any], events: Sequence[Any]) -> dict[str, Any]:
    """``usage`` with the prompt tokens counted before the calls (``prompt_tokens`` events):
    ``counted_prompt_tokens`` (their sum) and ``max_prompt_tokens`` (the largest prompt), written
    only when a call was counted (a run that counted nothing keeps its usage as it was).

    Examples:
        >>> from fsmchat.speakers.context import counted_usage
        >>> counted_usage({"prompt_tokens": 140}, [{"event": "prompt_tokens", "agent": "a", "tokens": 90},
        ...                                        {"event": "prompt_tokens", "agent": "b", "tokens": 60}])
        {'prompt_tokens': 140, 'counted_prompt_tokens': 150, 'max_prompt_tokens': 90}
        >>> counted_usage({"prompt_tokens": 140}, [])
        {'prompt_tokens': 140}
    """
    counted = [int(e["tokens"]) for e in events if isinstance(e, dict) and e.get("event") == "prompt_tokens"]
    if not counted:
        return usage
    return {**usage, "counted_prompt_tokens": sum(counted), "max_prompt_tokens": max(counted)}


def token_summary(events: Sequence[Any]) -> dict[str, Any]:
    """What a run's ``prompt_tokens`` and ``compacted`` events add up to (the viewer's usage
    shows it): calls counted, the largest and the latest prompt, the limit, the compactions;
    empty when no call was counted.

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
    return {"prompt_tokens": {"calls": len(counted), "max": max(int(e["tokens"]) for e in counted),
                              "last": int(counted[-1]["tokens"]), "limit": counted[-1].get("limit"),
                              "compactions": sum(1 for e in events if isinstance(e, dict)
                                                 and e.get("event") == "compacted")}}
