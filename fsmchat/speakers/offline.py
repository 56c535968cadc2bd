"""The built-in offline model: a litellm custom provider that simulates participants.

It is a simulation for demos and tests, not a language model. Replies are assembled from
templates, the agent's system prompt (its role) and the latest messages; bids score how relevant
the latest message is to the agent's role, lower when the agent just spoke and as the
conversation grows, so a demo shows the floor moving and ends on a lull or on ``max_loops``.
Everything is deterministic for a given seed and conversation.
"""
from __future__ import annotations

import asyncio
import hashlib
import json
import os
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
towards without within among across because since while
explain describe discuss consider decide refine please learn make take give tell show keep think know seem
become leave mean begin believe happen provide include continue understand allow remember appear expect
remain suggest require prioritize topic""".split())

_OPENERS = [
    "Building on {prev}'s point about {k1}, ",
    "I hear {prev}, but on {k1} I see it differently: ",
    "Let me add an angle on {k1}: ",
    "Picking up the thread on {k1}, ",
    "To answer {prev} directly, ",
    "One thing we have not weighed yet is {k2}: ",
]
# every body reads with {k1}/{k2} as a singular or plural noun and {role} as "I <role>"
_BODIES = [
    "as I {role}, I think the question of {k1} comes first when we look at {k2}.",
    "my view, since I {role}, is that {k1} and {k2} have to be judged together.",
    "since I {role}, I read the evidence on {k1} as pointing to a careful, staged approach to {k2}.",
    "given that I {role}, I would put {k1} first and treat {k2} as the test of it.",
    "because I {role}, I'd ask what getting {k1} wrong would cost us in {k2}.",
]
_CLOSERS = [
    "", " That is where I would start.", " I would like the others to challenge that.",
    " The open question is who bears the risk.", " Let's keep it concrete.",
]
# words that start a role a sentence can continue with "I ...": "You argue for cats" -> "I argue for cats"
_VERBS = set("""argue weigh critique revise summarize summarise love like plan build review ask answer represent
mediate negotiate judge prosecute defend mentor teach learn write analyze analyse evaluate moderate champion
advocate oppose support question interview facilitate lead chair propose present speak explain test check
design research study compare explore protect push challenge favor favour prefer believe care focus bring
help guide coach assess examine investigate draft edit improve simplify translate report track sell buy
represent play act work serve manage run own hate fear trust doubt want need value""".split())
# a keyword should be a noun: verbs, adjectives and adverbs by their endings read badly in the templates
_NOT_NOUN = re.compile(r"(?:ize|ise|ized|ised|izing|ising|ed|ing|ly|able|ible|ful|ous|ive|less|ic|al|wards?)$")


RECENT = 8  # the latest messages a reply or bid reads (besides the system prompt and the task)
_FALLBACKS = ["the question", "the trade-offs"]  # when the conversation offers fewer than two nouns
_TEMPLATE_WORDS: set[str] = set()


def _words(text: str) -> list[str]:
    out = []
    for w in re.findall(r"[a-zA-Z][a-zA-Z\-']{3,}", text.lower()):
        w = re.sub(r"'s?$", "", w).strip("-'")  # "techcritic's" -> "techcritic"
        if len(w) > 3 and w not in _STOP:
            out.append(w)
    return out


def _template_words() -> set[str]:
    if not _TEMPLATE_WORDS:
        for t in _OPENERS + _BODIES + _CLOSERS + _FALLBACKS:
            _TEMPLATE_WORDS.update(re.findall(r"[a-z][a-z\-']{3,}", t.lower()))
    return _TEMPLATE_WORDS


def _keywords(text: str, n: int = 3) -> list[str]:
    """The ``n`` most frequent nouns of ``text`` (first seen first on ties)."""
    seen: dict[str, int] = {}
    for w in _words(text):
        if not _NOT_NOUN.search(w):
            seen[w] = seen.get(w, 0) + 1
    order = list(seen)
    return [w for w, _ in sorted(seen.items(), key=lambda kv: (-kv[1], order.index(kv[0])))][:n]


def _role_phrase(system_prompt: str) -> str:
    """What the agent does, to be said as "I <phrase>": the first clause of its instructions, without
    any directive about what to say or how to answer ("say AGREED when satisfied" is never repeated)."""
    first = re.split(r"(?<=[.!?])\s|[;:\n]| - ", system_prompt.strip(), maxsplit=1)[0].rstrip(".!?, ")
    first = re.split(r",?\s+(?:and|then)\s+(?:say|reply|respond|answer|write|output|end)\b|,\s*(?:say|reply)\b",
                     first, maxsplit=1, flags=re.I)[0].strip()
    first = re.sub(r"^(you are|you're|you)\s+", "", first, flags=re.I)
    if not first or "{{" in first:
        return "bring my own perspective"
    lead = first.split()[0].lower()
    if lead in ("am", "a", "an", "the") or re.match(r"^(a|an|the)\s", first, flags=re.I):
        return ("am " if lead != "am" else "") + first[0].lower() + first[1:]
    if lead in _VERBS or re.search(r"(?:ize|ise|ate)$", lead):
        return first[0].lower() + first[1:]
    return "care most about " + first[0].lower() + first[1:]


_ROLE_CLAUSE = re.compile(r"\b(?:as|since|because|given that) I [^,.:]*[,.:]", re.I)  # "as I <role>," in a reply
_SPEAKER = re.compile(r"^\[?([\w\-.]{1,40})\]?: ")  # "name: ..." (a conversation) or "[name]: ..." (a channel)
_SPEAKER_LINE = re.compile(_SPEAKER.pattern, re.M)


def _latest_turn(text: str, is_task: bool) -> tuple[str, str]:
    """(who spoke, what they said) of the latest turn in ``text``: the last ``name: ...`` line of a
    "... so far:" block (a Discussion turn's prompt), else a message written as ``name: ...`` (how
    the shared conversation shows other speakers); the task itself names no speaker ("Draft: ...")."""
    head, sep, rest = text.partition("so far:\n")
    if sep:
        found = [m for ln in rest.split("\n\n", 1)[0].splitlines() if (m := _SPEAKER.match(ln))]
        if found:
            return found[-1].group(1), found[-1].string[found[-1].end():]
    m = None if is_task else _SPEAKER.match(text)
    return (m.group(1), text[m.end():]) if m else ("", text)


def _proper_nouns(text: str) -> dict[str, str]:
    """Words written capitalized inside a sentence ("learn Rust"), by their lower-case form."""
    return {w.lower(): w for w in re.findall(r"(?<=[a-z,;] )([A-Z][a-z][a-zA-Z\-]{2,})", text)}


def _text(content: Any) -> str:
    if isinstance(content, list):
        return " ".join(p.get("text", "") for p in content if isinstance(p, dict))
    return content or ""


# ---- tools: the offline model calls a tool when what it is asked for is what the tool offers ----
_TOOL_NOISE = set("""tool tools return returns value values given call calls function result results string number
integer text name names list data input output item items based using used uses""".split())
_EXPRESSION = re.compile(r"\(?-?\d+(?:\.\d+)?(?:\s*[-+*/x×]\s*\(?-?\d+(?:\.\d+)?\)?)+")
_NUMBER = re.compile(r"-?\d+(?:\.\d+)?")


def _offered(tool: dict[str, Any]) -> tuple[str, set[str]]:
    """A tool's name and the words of its name and description (what it offers)."""
    fn = tool.get("function") or {}
    name = str(fn.get("name") or "")
    words = {w for w in _words(" ".join(re.split(r"[_\-]", name)) + " " + str(fn.get("description") or ""))
             if w not in _TOOL_NOISE}
    return name, words


def _argument(name: str, schema: dict[str, Any], text: str, matched: list[str]) -> Any:
    """A value for parameter ``name`` read from ``text`` by its schema: the first allowed value, a
    number, a sentence (a summary or message), an arithmetic expression, a capitalized name (a
    topic or query takes the word of ``text`` that asked for the tool, ``matched``), else the
    first keyword."""
    if schema.get("enum"):
        return schema["enum"][0]
    kind = schema.get("type")
    about = f"{name} {schema.get('description') or ''}".lower()
    if kind in ("integer", "number"):
        found = _NUMBER.search(text)
        value = float(found.group()) if found else 1.0
        return int(value) if kind == "integer" else value
    if kind == "boolean":
        return True
    if kind in (None, "string"):
        if any(w in about for w in ("summary", "text", "message", "note", "content", "body")):
            return re.split(r"(?<=[.!?])\s", text.strip().splitlines()[0] if text.strip() else "", maxsplit=1)[0][:160]
        if any(w in about for w in ("expression", "formula", "arithmetic", "calculat")):
            found = _EXPRESSION.search(text)
            if found:
                return found.group().replace("×", "*").replace(" x ", " * ").strip()
        proper = [w for w in re.findall(r"(?<=[a-z,;] )([A-Z][a-zA-Z\-]{2,})", text)]
        topical = any(w in about for w in ("topic", "query", "subject", "keyword", "search", "term"))
        if proper and not topical:  # a city, a person, a product: a name the text gives
            return proper[0]
        if matched:  # what to look up: the word that asked for the tool
            return matched[0]
        if proper:
            return proper[0]
        keys = _keywords(text, 1)
        return keys[0] if keys else text[:60]
    return None


def offline_tool_calls(messages: list[dict[str, Any]], optional_params: dict[str, Any]) -> list[dict[str, Any]]:
    """The tool calls the offline model makes for this request (``[]``: none), deterministically.

    It calls every offered tool whose name or description shares a word with what it is asked (its
    latest instruction, and the task; the same first five letters: "calculate" asks for
    "calculator", "studies" for "study"), once per turn (not after tool results came back), never when
    ``tool_choice`` is ``"none"`` or forces ``respond``; arguments are read from that text by the
    tool's schema (``_argument``)."""
    tools = [t for t in optional_params.get("tools") or [] if (t.get("function") or {}).get("name") != "respond"]
    choice = optional_params.get("tool_choice")
    if not tools or choice == "none" or isinstance(choice, dict):
        return []
    if messages and messages[-1].get("role") == "tool":  # once per turn: the results are in
        return []
    users = [_text(m.get("content")) for m in messages if m.get("role") == "user"]
    asked_text = "\n".join(dict.fromkeys([*users[-1:], *users[:1]]))
    asked = _words(asked_text)
    calls = []
    for tool in tools:
        name, words = _offered(tool)
        stems = {w[:5] for w in words}
        matched = [w for w in asked if w[:5] in stems]
        if not matched:
            continue
        params = (tool.get("function") or {}).get("parameters") or {}
        props = params.get("properties") or {}
        required = params.get("required") or list(props)
        args = {k: _argument(k, props.get(k) or {}, asked_text, matched) for k in required}
        digest = hashlib.sha1(json.dumps([name, args, len(messages)], sort_keys=True).encode()).hexdigest()[:12]
        calls.append({"id": f"call_{digest}", "type": "function",
                      "function": {"name": name, "arguments": json.dumps({k: v for k, v in args.items()
                                                                          if v is not None})}})
    return calls


def offline_tool_results(messages: list[dict[str, Any]]) -> str:
    """What the tools said this turn, as one sentence the reply ends with (``""``: no tool results)."""
    results: list[tuple[str, str]] = []
    names: dict[str, str] = {}
    for m in reversed(messages):
        if m.get("role") == "tool":
            results.append((str(m.get("tool_call_id")), _text(m.get("content"))))
        elif m.get("role") == "assistant" and m.get("tool_calls"):
            for c in m["tool_calls"]:
                names[c.get("id")] = (c.get("function") or {}).get("name", "tool")
        elif m.get("role") == "user":
            break
    if not results:
        return ""
    return " My tools say: " + "; ".join(f"{names.get(i, 'tool')} gave {r}" for i, r in reversed(results)) + "."


def before_tools(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The request without this turn's tool rounds (up to its last user message): what the reply is
    composed from."""
    end = len(messages)
    while end and messages[end - 1].get("role") in ("tool", "assistant") and \
            (messages[end - 1].get("role") == "tool" or messages[end - 1].get("tool_calls")):
        end -= 1
    return messages[:end] if end else messages


def with_tools(response: ModelResponse, messages: list[dict[str, Any]], optional_params: dict[str, Any]) -> Any:
    """``response`` (a composed reply or bid) as a turn with tools answers: tool calls when it is
    asked for what a tool offers, else the reply (the bid's message) ending with the tools' results."""
    calls = offline_tool_calls(messages, optional_params)
    if calls:
        return ModelResponse(model="offline", choices=[{"message": {"role": "assistant", "content": None,
                                                                    "tool_calls": calls},
                                                        "finish_reason": "tool_calls"}], usage=response.usage)
    said = offline_tool_results(messages)
    if said:
        message = response.choices[0].message
        if message.tool_calls:
            fn = message.tool_calls[0].function
            args = json.loads(fn.arguments)
            if args.get("message"):
                args["message"] += said
            fn.arguments = json.dumps(args)
        elif message.content:
            message.content += said
    return response


class OfflineModel(CustomLLM):  # type: ignore[misc]  # litellm is read as Any ([tool.mypy])
    """litellm provider ``fsmchat-offline``: deterministic simulated participants."""

    def __init__(self, delay: float | None = None):
        super().__init__()
        self._delay = delay

    @property
    def delay(self) -> float:
        """Simulated latency in seconds (``FSMCHAT_OFFLINE_DELAY``, default 0)."""
        if self._delay is not None:
            return self._delay

        try:
            return max(0.0, float(os.environ.get("FSMCHAT_OFFLINE_DELAY", "0") or 0))
        except ValueError:
            return 0.0

    def _compose(self, messages: list[dict[str, Any]], optional_params: dict[str, Any],
                 litellm_params: dict[str, Any] | None) -> ModelResponse:
        meta = (litellm_params or {}).get("metadata") or {}
        agent = str(meta.get("fsmchat_agent", "agent"))
        seed = optional_params.get("seed", meta.get("fsmchat_seed", 0))
        # only the system prompt, the task and the latest RECENT messages are read, so a call costs the
        # same at message 10 and at message 10,000 (the conversation is not scanned or hashed whole)
        start = 1 if messages and messages[0].get("role") == "system" else 0
        system = _text(messages[0].get("content")) if start else ""
        n_convo = len(messages) - start - 1  # the conversation before the prompt
        convo = messages[start:start + min(n_convo, 1)] + messages[max(start + 1, len(messages) - 1 - RECENT):-1]
        digest = hashlib.sha256(json.dumps([seed, agent, system, n_convo, convo, messages[-1]], sort_keys=True,
                                           default=str).encode()).digest()
        rng = random.Random(digest)
        # the latest thing said to this agent: the last turn of the conversation, unless that is its
        # own reply (private-memory patterns: debates, panels), then the prompt it was just given
        own_last = not convo or convo[-1].get("role") == "assistant"
        last = _text(messages[-1].get("content")) if own_last else _text(convo[-1]["content"])
        prev, last_text = _latest_turn(last, is_task=not convo or (not own_last and n_convo == 1))
        task = next((_text(m["content"]) for m in convo if m.get("role") == "user"), last_text)
        texts = [_text(m.get("content")) for m in convo] + [last]
        names = {part for t in texts for w in _SPEAKER_LINE.findall(t)
                 for part in re.split(r"[_\-.]", w.lower()) + [w.lower()]}
        role = _role_phrase(system)
        # its own role's words are not news to it (the rest of a system prompt may hold the material)
        noise = (_template_words() | names | set(_words(role))
                 | {part for n in (prev, agent) for part in re.split(r"[_\-.]", n.lower()) + [n.lower()]})
        said = _ROLE_CLAUSE.sub(" ", last_text)  # what the speaker said, not who it said it was
        keys = [k for k in _keywords(said, 6) + _keywords(_ROLE_CLAUSE.sub(" ", task), 4) if k not in noise]
        keys = list(dict.fromkeys(keys)) + [k for k in _FALLBACKS if k not in keys]
        proper = _proper_nouns(said + "\n" + task)
        k1, k2 = (proper.get(k) or (k if k.startswith("the ") else "the " + k) for k in keys[:2])
        opener = rng.choice(_OPENERS) if prev else ""
        text = (opener + rng.choice(_BODIES)).format(prev=prev or "the group", k1=k1, k2=k2, role=role)
        text = text[0].upper() + text[1:] + rng.choice(_CLOSERS)

        tools = optional_params.get("tools") or []
        wants_bid = (any((t.get("function") or {}).get("name") == "respond" for t in tools)
                     or "response_format" in optional_params)
        usage = {"prompt_tokens": len(json.dumps(messages, default=str)) // 4,  # ~4 characters a token
                 "completion_tokens": len(text.split())}
        usage["total_tokens"] = usage["prompt_tokens"] + usage["completion_tokens"]
        if not wants_bid:
            return ModelResponse(model="offline", choices=[{"message": {"role": "assistant", "content": text},
                                                            "finish_reason": "stop"}], usage=usage)
        role_words = set(_words(system))
        overlap = len(role_words & set(_words(last_text))) / max(1, min(len(role_words), 6))
        spoke_last = bool(convo) and convo[-1].get("role") == "assistant"
        posts = max(0, n_convo - 1)  # everything said after the task
        score = 0.55 + 0.3 * min(1.0, overlap) + rng.uniform(-0.15, 0.25) - 0.02 * posts
        score -= 0.3 if spoke_last else 0.0
        if not any(m.get("role") == "assistant" for m in convo) and n_convo <= RECENT:
            score += 0.2  # early on, someone who has not spoken yet wants the floor
        score += 0.15 if not spoke_last and re.search(rf"\b{re.escape(agent)}\b", last_text) else 0.0  # addressed
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

    def completion(self, model: str, messages: list[dict[str, Any]], api_base: Any, custom_prompt_dict: Any,
                   model_response: Any, print_verbose: Any, encoding: Any, api_key: Any, logging_obj: Any,
                   optional_params: dict[str, Any], acompletion: Any = None, litellm_params: Any = None,
                   logger_fn: Any = None, headers: Any = {}, timeout: Any = None,
                   client: Any = None) -> Any:  # noqa: B006 (litellm's signature)
        if self.delay:
            time.sleep(self.delay)
        return with_tools(self._compose(before_tools(messages), optional_params, litellm_params), messages,
                          optional_params)

    async def acompletion(self, model: str, messages: list[dict[str, Any]], api_base: Any, custom_prompt_dict: Any,
                          model_response: Any, print_verbose: Any, encoding: Any, api_key: Any, logging_obj: Any,
                          optional_params: dict[str, Any], acompletion: Any = None, litellm_params: Any = None,
                          logger_fn: Any = None, headers: Any = {}, timeout: Any = None,
                          client: Any = None) -> Any:  # noqa: B006 (litellm's signature)
        if self.delay:
            await asyncio.sleep(self.delay)
        return with_tools(self._compose(before_tools(messages), optional_params, litellm_params), messages,
                          optional_params)
