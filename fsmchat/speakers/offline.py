"""The built-in offline model: a litellm custom provider that simulates participants.

It is a simulation for demos and tests, not a language model. Replies are assembled from
templates, the agent's system prompt (its role) and the latest messages; bids score how relevant
the latest message is to the agent's role, lower when the agent just spoke and as the
conversation grows, so a demo shows the floor moving and ends on a lull or on ``max_loops``.
Everything is deterministic for a given seed and conversation.
"""
from __future__ import annotations

import hashlib
import json
import random
import re
import time
from typing import Any

from litellm import CustomLLM, ModelResponse

_STOP = set("""a an the and or but if of to in on for with as at by from is are was were be been being it its
this that these those you your yours we our us they their them i me my he she his her not no yes do does did
so than then there here what which who whom how why when where can could should would will shall may might must
about into over under more most less very just also such only own same too any each every all both few other
some argue argues weigh seek find focus focuses perspective view side sides role one short sentence answer
agent agents speaker speakers previous next loop round turn response reply respond transcript conversation
group groupchat participants participant opening close closing task original prior contribution concisely
directly review build address add named latest message messages want score decide against between toward
towards without within among across because since while""".split())

_OPENERS = [
    "Building on {prev}'s point about {k1}, ",
    "I hear {prev}, but on {k1} I see it differently: ",
    "Let me add an angle on {k1}: ",
    "Picking up the thread on {k1}, ",
    "To answer {prev} directly, ",
    "One thing we have not weighed yet is {k2}: ",
]
_BODIES = [
    "as I {role}, I think {k1} matters most when we look at {k2}.",
    "my view, since I {role}, is that {k1} and {k2} have to be judged together.",
    "since I {role}, I read the evidence on {k1} as pointing to a careful, staged approach to {k2}.",
    "given that I {role}, I would put {k1} first and treat {k2} as the test of it.",
    "because I {role}, I'd ask what {k2} costs us if we get {k1} wrong.",
]
_CLOSERS = [
    "", " That is where I would start.", " I would like the others to challenge that.",
    " The open question is who bears the risk.", " Let's keep it concrete.",
]


_TEMPLATE_WORDS: set[str] = set()


def _words(text: str) -> list[str]:
    return [w for w in re.findall(r"[a-zA-Z][a-zA-Z\-']{3,}", text.lower()) if w not in _STOP]


def _template_words() -> set[str]:
    if not _TEMPLATE_WORDS:
        for t in _OPENERS + _BODIES + _CLOSERS:
            _TEMPLATE_WORDS.update(re.findall(r"[a-z][a-z\-']{3,}", t.lower()))
    return _TEMPLATE_WORDS


def _keywords(text: str, n: int = 3) -> list[str]:
    seen: dict[str, int] = {}
    for w in _words(text):
        seen[w] = seen.get(w, 0) + 1
    return [w for w, _ in sorted(seen.items(), key=lambda kv: (-kv[1], list(seen).index(kv[0])))][:n]


def _role_phrase(system_prompt: str) -> str:
    first = re.split(r"(?<=[.!?])\s", system_prompt.strip(), maxsplit=1)[0].rstrip(".!? ")
    first = re.sub(r"^(you are|you're|you)\s+", "", first, flags=re.I)
    if not first:
        return "bring my own perspective"
    if re.match(r"^(a|an|the)\s", first, flags=re.I):
        return "am " + first[0].lower() + first[1:]
    return first[0].lower() + first[1:]


def _text(content: Any) -> str:
    if isinstance(content, list):
        return " ".join(p.get("text", "") for p in content if isinstance(p, dict))
    return content or ""


class OfflineModel(CustomLLM):
    """litellm provider ``fsmchat-offline``: deterministic simulated participants."""

    def __init__(self, delay: float | None = None):
        super().__init__()
        self._delay = delay

    @property
    def delay(self) -> float:
        """Simulated latency in seconds (``FSMCHAT_OFFLINE_DELAY``, default 0)."""
        if self._delay is not None:
            return self._delay
        import os

        try:
            return max(0.0, float(os.environ.get("FSMCHAT_OFFLINE_DELAY", "0") or 0))
        except ValueError:
            return 0.0

    def _compose(self, messages: list[dict[str, Any]], optional_params: dict[str, Any],
                 litellm_params: dict[str, Any] | None) -> ModelResponse:
        meta = (litellm_params or {}).get("metadata") or {}
        agent = str(meta.get("fsmchat_agent", "agent"))
        seed = optional_params.get("seed", meta.get("fsmchat_seed", 0))
        system = " ".join(_text(m.get("content")) for m in messages if m.get("role") == "system")
        convo = [m for m in messages if m.get("role") != "system"][:-1]
        digest = hashlib.sha256(json.dumps([seed, agent, system, messages], sort_keys=True, default=str)
                                .encode()).digest()
        rng = random.Random(digest)
        # the latest thing said to this agent: the last turn of the conversation, unless that is its
        # own reply (private-memory patterns: debates, panels), then the prompt it was just given
        own_last = not convo or convo[-1].get("role") == "assistant"
        last = _text(messages[-1].get("content")) if own_last else _text(convo[-1]["content"])
        prev, _, last_text = last.partition(": ") if re.match(r"^[\w\-. ]{1,40}: ", last) else ("", "", last)
        task = next((_text(m["content"]) for m in convo if m.get("role") == "user"), last_text)
        names = {w.lower() for m in convo for w in re.findall(r"^([\w\-.]{1,40}): ", _text(m.get("content")))}
        noise = _template_words() | names | set(_words(system)) | {prev.lower(), agent.lower()}
        keys = [k for k in _keywords(last_text, 6) + _keywords(task, 4) if k not in noise]
        keys = list(dict.fromkeys(keys)) or ["the question"]
        k1, k2 = keys[0], (keys[1] if len(keys) > 1 else "the trade-offs")
        role = _role_phrase(system)
        opener = rng.choice(_OPENERS) if prev else ""
        text = (opener + rng.choice(_BODIES)).format(prev=prev or "the group", k1=k1, k2=k2, role=role)
        text = text[0].upper() + text[1:] + rng.choice(_CLOSERS)

        tools = optional_params.get("tools") or []
        wants_bid = (any((t.get("function") or {}).get("name") == "respond" for t in tools)
                     or "response_format" in optional_params)
        usage = {"prompt_tokens": sum(len(_text(m.get("content")).split()) for m in messages),
                 "completion_tokens": len(text.split())}
        usage["total_tokens"] = usage["prompt_tokens"] + usage["completion_tokens"]
        if not wants_bid:
            return ModelResponse(model="offline", choices=[{"message": {"role": "assistant", "content": text},
                                                            "finish_reason": "stop"}], usage=usage)
        role_words = set(_words(system))
        overlap = len(role_words & set(_words(last_text))) / max(1, min(len(role_words), 6))
        spoke_last = bool(convo) and convo[-1].get("role") == "assistant"
        posts = sum(1 for m in convo if m.get("role") == "assistant" or re.match(r"^[\w\-. ]{1,40}: ",
                                                                                   _text(m.get("content"))))
        score = 0.55 + 0.3 * min(1.0, overlap) + rng.uniform(-0.15, 0.25) - 0.035 * posts
        score -= 0.3 if spoke_last else 0.0
        score = round(min(1.0, max(0.0, score)), 2)
        args = json.dumps({"score": score, "message": text if score >= 0.3 else ""})
        if "response_format" in optional_params and not tools:
            return ModelResponse(model="offline", choices=[{"message": {"role": "assistant", "content": args},
                                                            "finish_reason": "stop"}], usage=usage)
        call = {"id": "call_" + hashlib.sha1(digest).hexdigest()[:12], "type": "function",
                "function": {"name": "respond", "arguments": args}}
        return ModelResponse(model="offline", choices=[{"message": {"role": "assistant", "content": None,
                                                                    "tool_calls": [call]},
                                                        "finish_reason": "tool_calls"}], usage=usage)

    def completion(self, model, messages, api_base, custom_prompt_dict, model_response, print_verbose, encoding,
                   api_key, logging_obj, optional_params, acompletion=None, litellm_params=None, logger_fn=None,
                   headers={}, timeout=None, client=None):  # noqa: B006 (litellm's signature)
        if self.delay:
            time.sleep(self.delay)
        return self._compose(messages, optional_params, litellm_params)

    async def acompletion(self, model, messages, api_base, custom_prompt_dict, model_response, print_verbose,
                          encoding, api_key, logging_obj, optional_params, acompletion=None, litellm_params=None,
                          logger_fn=None, headers={}, timeout=None, client=None):  # noqa: B006
        if self.delay:
            import asyncio
            await asyncio.sleep(self.delay)
        return self._compose(messages, optional_params, litellm_params)
