"""The built-in offline model: an in-process provider (no litellm) that simulates participants.

It is a simulation for demos and tests, not a language model. Replies are assembled from
templates, the agent's system prompt (its role) and the latest messages; bids score how relevant
the latest message is to the agent's role, lower when the agent just spoke and as the
conversation grows, so a demo shows the floor moving and ends on a lull or on ``max_loops``.
Everything is deterministic for a given seed and conversation.

A reply's topics are noun phrases the conversation uses as nouns (``_nouns``: "AI regulation",
"the draft", never the verb of "develop a plan"), never who speaks (a speaker's name or its parts, a
name a brief gives, the role a speaker says it is: "I am a strategist") nor what a brief or an
instruction's lead tells it to do (``_material``: "Party Union, please share your perspective on:
..."); it is worded for the room (``_others``: "you" to one other, the speaker's name and "the
others" with several, neither when it cannot tell); and ``_reply`` honours a system prompt's
"say WORD when satisfied" from the agent's second reply on (``AGREE_AFTER``), and a summarizer's
role with a summary. ``OfflineModel._compose`` reads
the messages, writes the text, then answers as a reply, a bid tool call or a JSON bid.
"""
from __future__ import annotations

import asyncio
import hashlib
import json
import math
import os
import random
import re
import time
from typing import AsyncIterator, Mapping, Sequence

from .chunks import completion, list_or_empty as _seq, object_or_empty as _obj, offered_tools, stream_chunks, \
    stream_pieces  # noqa: F401 - stream_pieces: word by word
from .wire import WireResponse

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

# A reply is up to three sentences: an opener answering the latest speaker, a body saying where the
# agent stands (its role as "I <role>"), and a closer. {k1}/{k2} are noun phrases ("the regulation",
# "AI development", "Rust") and only ever objects, so no verb has to agree with them; {you}/{your} is
# the latest speaker as addressed: "you"/"your" with one other in the room, else their name.
_OPENERS = [
    "I take {your} point about {k1}.",
    "I hear {you} on {k1}, but I see it differently.",
    "To answer {you} directly: {k1} should count, but not on its own.",
    "On {k1}, I part ways with {you}.",
]
_BODIES = [
    "As I {role}, I would start from {k1} and treat {k2} as the test of it.",
    "Since I {role}, my question is what getting {k1} wrong would cost us in {k2}.",
    "Because I {role}, I read the evidence on {k1} as a case for a careful, staged approach to {k2}.",
    "Given that I {role}, I think {k1} and {k2} have to be judged together.",
    "Since I {role}, I want {k1} weighed against {k2} before we commit.",
]
_CLOSERS = {  # by how many others are in the room: none known, one, several
    "none": ["", " That is where I would start.", " The open question is who bears the risk.",
             " Let's keep it concrete."],
    "one": ["", " Tell me where you disagree.", " I would like you to challenge that.",
            " What would change your mind?", " The open question is who bears the risk."],
    "many": ["", " I would like the others to challenge that.", " Who sees it differently?",
             " The open question is who bears the risk.", " Let's keep it concrete."],
}
_AGREE = "My concerns about {k1} have been answered, and I can accept {k2} as it stands."
_SUMMARY = "To sum up, {speakers} weighed {k1} against {k2}; the open question is who bears the risk."
# words that start a role a sentence can continue with "I ...": "You argue for cats" -> "I argue for cats"
_VERBS = set("""argue weigh critique revise summarize summarise love like plan build review ask answer represent
mediate negotiate judge prosecute defend mentor teach learn write analyze analyse evaluate moderate champion
advocate oppose support question interview facilitate lead chair propose present speak explain test check
design research study compare explore protect push challenge favor favour prefer believe care focus bring
help guide coach assess examine investigate draft edit improve simplify translate report track sell buy
represent play act work serve manage run own hate fear trust doubt want need value""".split())
# verbs a task or a message uses as verbs ("Analyze the market", "we should develop"): a topic only when
# the text itself uses it as a noun ("the plan", "a review")
_BASE_VERBS = _VERBS | set("""develop prioritize prioritise decide create reduce increase choose ship launch adopt
invest hire move switch use ban allow regulate fund raise replace expand grow cut keep stop start finish go
solve fix implement deploy migrate rewrite adopt approve reject accept agree disagree discuss consider describe
outline propose suggest recommend determine identify define measure estimate predict ensure avoid win lose
become make take give tell show think know seem leave mean begin happen provide include continue understand
allow remember appear expect remain require find focus seek weigh open respond move settle close join""".split())
# adjectives and comparatives that a determiner may precede but that are never the topic themselves
_ADJECTIVES = set("""better worse best worst faster slower bigger smaller cheaper safer easier harder greater higher
lower larger stronger weaker longer shorter newer older good great high low large small strong weak long short
new old right wrong real true false full whole main major minor key only other same different important possible
likely certain clear open free public private remote local global social human final early late next last first
second third renewable unchecked balanced careful concrete practical ethical critical total overall common current
several many much more most less least certain various entire relevant significant recent urgent efficient
sufficient independent consistent present absent empty two three four five six seven eight nine ten
twelve twenty hundred thousand million""".split())  # numbers too: "the three rules" is about the rules
_DETERMINERS = set("the a an this that these those our their its your my his her some any each every no".split())
_PREPOSITIONS = set("of for about on with in against from over between into toward towards around behind".split())
_AUX = set("is are was were has have had should would will can could must may might does do".split())
_NOT_SUBJECT_OF = set("to will would should can could must may might we you they i let let's please not don't "
                      "never also".split())  # a word after these is a verb ("to develop", "we ship")
# someone named by what they practise ("the analyst should weigh the evidence", "economists"): a speaker
# or a role, never a topic
_PERSON = re.compile(r"^\w{3,}(?:ist|lyst)s?$")
# endings that make a word a noun whatever precedes it
_NOUN_END = re.compile(r"(?:tion|sion|ment|ness|ity|ance|ence|ship|ism|ists?|ogy|ergy|ure|ery|ics|dom|hood)s?$")
# a keyword should be a noun: verbs, adjectives and adverbs by their endings read badly in the templates
_NOT_NOUN = re.compile(r"(?:ize|ise|ized|ised|izing|ising|ed|ing|ly|able|ible|ful|ous|ive|less|ic|al|wards?)$")
# "say AGREED when satisfied", "reply DONE once finished", "end with 'OK' if you agree": the signal word
_SIGNAL = re.compile(r"\b(?i:say|reply|respond with|answer|write|output|end with|finish with)\s+"
                     r"[\"']?([A-Z][A-Z_]{2,})[\"']?\s+(?:when|once|if|as soon as)\b")
AGREE_AFTER = 1  # an agent told to give a signal gives it on its reply after this many of its own replies


RECENT = 8  # the latest messages a reply or bid reads (besides the system prompt and the task)
_FALLBACKS = ["the issue at hand", "the trade-offs"]  # when the conversation offers fewer than two nouns
_TEMPLATE_WORDS: set[str] = set()
# the words of the patterns' own briefs ("a one-on-one debate", "your latest argument"): never a topic
_FRAME = set("debate debates argument arguments discussion panel experts expert moderator chat conversation "
             "participant participants floor score replies member members tool string".split())
# a word may hold digits, hyphens and underscores ("120-person", "Research_Team", "Philosopher1"): such a
# token is never a noun itself (a number compound is an adjective, an identifier is a name)
_TOKEN = re.compile(r"\d+(?:[.,]\d+)*%?(?![\w\-])|[A-Za-z0-9][A-Za-z0-9_\-']*|[.,;:!?()\"\n]")
_NUMBER_WORDS = set("one two three four five six seven eight nine ten eleven twelve twenty thirty forty fifty "
                    "hundred thousand million".split())
# a name as written in a prompt: with an underscore or a digit, or capitals inside ("Research_Team",
# "Philosopher1", "TechOptimist"); its parts name the same speaker ("Team", "Philosopher")
_IDENT = re.compile(r"\b[A-Za-z][A-Za-z0-9]*(?:_[A-Za-z0-9]+)+\b|\b[A-Za-z]+[0-9]+\b|\b[A-Z][a-z]+[A-Z][A-Za-z]*\b")
# set phrases whose noun is no topic ("3x faster than the state of the art", "the night in question"), and a
# case's name ("The State v. Doe": the parties, not a subject)
_IDIOM = re.compile(r"\b(?:the )?state of the art\b|\bin question\b|\bon track\b|\bat (?:hand|stake)\b|"
                    r"\b(?:[Tt]he )?[A-Z][a-z]+ vs?\. [A-Z][a-z]+\b")


def _name_parts(name: str) -> set[str]:
    """A speaker's name and its parts, lower case: "Defense_Attorney" -> defense_attorney, defense, attorney;
    "Philosopher1" -> philosopher; "TechOptimist" -> tech, optimist."""
    parts = re.split(r"[_\-.\s\d]+|(?<=[a-z])(?=[A-Z])", name)
    return {p.lower() for p in [name, *parts] if p}


def _singular(w: str) -> str:
    return w[:-1] if len(w) > 4 and w.endswith("s") and not w.endswith("ss") else w


def _is_adjective(w: str) -> bool:
    """An adjective before a noun: a listed one, a number ("64 cores") or a number compound ("120-person");
    not a share or a decimal ("a 0.5% sales tax": it measures the tax, not the sales)."""
    return (w in _ADJECTIVES or w in _NUMBER_WORDS or w.isdigit()
            or bool(re.fullmatch(rf"(?:\d+|{'|'.join(_NUMBER_WORDS)})-[a-z]+", w)))


def _words(text: str) -> list[str]:
    out = []
    for w in re.findall(r"[a-zA-Z][a-zA-Z\-']{3,}", text.lower()):
        w = re.sub(r"'s?$", "", w).strip("-'")  # "techcritic's" -> "techcritic"
        if len(w) > 3 and w not in _STOP:
            out.append(w)
    return out


def _template_words() -> set[str]:
    if not _TEMPLATE_WORDS:
        for t in [*_OPENERS, *_BODIES, *(c for cs in _CLOSERS.values() for c in cs), _AGREE, _SUMMARY, *_FALLBACKS]:
            _TEMPLATE_WORDS.update(re.findall(r"[a-z][a-z\-']{3,}", t.lower()))
    return _TEMPLATE_WORDS


def _nouns(text: str) -> dict[str, tuple[int, str]]:
    """The nouns of ``text``: lower-case head -> (times used as a noun, the phrase to say it with).

    A word counts as a noun only where the text itself uses it as one: after a determiner ("the
    plan", "our only path"), a preposition ("benefits of AI") or a possessive, before a verb
    ("energy is"), or by a noun's ending ("regulation", "development"); never after "to", a modal
    or a pronoun ("to develop", "we ship"), at the start of a sentence (an imperative: "Analyze the
    market"), or when it is an adjective or an adverb. The phrase is "the <noun>", the noun with an
    acronym before it ("AI regulation"), or a name as written ("Rust")."""
    toks = _TOKEN.findall(_IDIOM.sub(" ", text))
    votes: dict[str, int] = {}
    phrase: dict[str, str] = {}
    carried: dict[str, tuple[str, str]] = {}  # a noun -> (the modifier said before it, the word before that)
    for i, tok in enumerate(toks):
        w = re.sub(r"'s?$", "", tok.lower()).strip("-'")
        if (len(w) <= 3 or not w.isalpha() or w in _STOP or _singular(w) in _STOP or w in _ADJECTIVES
                or _PERSON.search(w) or w in _DETERMINERS
                or w in _AUX or (_NOT_NOUN.search(w) and not _NOUN_END.search(w))):
            continue
        before = toks[i - 1] if i else "."
        before_l = before.lower()
        after = toks[i + 1].lower() if i + 1 < len(toks) else "."
        two_back = toks[i - 2].lower() if i > 1 else "."
        opening = before in ".!?:;\n\"(" or i == 0
        if (before_l.isdigit() or before_l in _NUMBER_WORDS) and after == "of":
            continue  # "ten years of experience": a measure; the noun is what follows "of"
        # "the State", "our Board": capitalised after a determiner, a common noun (said "the state")
        proper = tok[0].isupper() and not opening and not tok.isupper() and before_l not in _DETERMINERS
        vote = 1 if w in carried else 0
        relative = before_l in ("that", "which", "who") and _is_content(toks[i - 2] if i > 1 else ".")
        if (before_l in _NOT_SUBJECT_OF or (opening and not _NOUN_END.search(w))
                or (relative and w.endswith("s") and not _NOUN_END.search(w))):  # "a team that needs GPUs"
            vote = -1
        elif (before_l in _DETERMINERS or before_l in _PREPOSITIONS or before.endswith("'s") or proper
              or _NOUN_END.search(w) or (_is_adjective(before_l) and two_back in _DETERMINERS)
              or ((_is_adjective(before_l) or before_l in _STOP) and after in _AUX)
              or (after in _AUX and w not in _BASE_VERBS)):
            vote = 1
        if _is_adjective(before_l):
            vote = max(vote, 1)  # "remote work", "the careful review": an adjective makes a noun of it
        elif w in _BASE_VERBS and not (before_l in _DETERMINERS or before.endswith("'s")):
            vote = -1  # a verb unless the text puts a determiner before it
        nxt = toks[i + 1] if i + 1 < len(toks) else "."
        then = toks[i + 2].lower() if i + 2 < len(toks) else "."
        if (vote > 0 and _is_content(nxt) and not _NOUN_END.search(w) and w not in phrase
                and (then not in _DETERMINERS | _PREPOSITIONS | {"to"}  # "replies goes to": a verb
                     or _NOUN_END.search(nxt.lower()) or not nxt.endswith("s"))):  # "wage agreement for"
            carried[nxt.lower()] = (w, before_l)  # "backend services": a modifier, the next word is the noun
            continue
        votes[w] = votes.get(w, 0) + vote
        if vote > 0 and w not in phrase:
            mod, det = carried.get(w) or ((before_l, two_back) if _is_adjective(before_l) else ("", ""))
            if mod and (mod.isdigit() or mod in _NUMBER_WORDS):
                det = "the"  # "two teams" -> "the two teams": a number is said with its article
            if proper:
                phrase[w] = tok
            elif before.isupper() and before.isalpha() and 2 <= len(before) <= 5 and not opening:
                phrase[w] = f"{before} {w}"  # "AI regulation"
            elif mod:
                phrase[w] = f"the {mod} {w}" if det in _DETERMINERS or _is_adjective(det) else f"{mod} {w}"
            else:
                phrase[w] = f"the {w}"
    return {w: (n, phrase[w]) for w, n in votes.items() if n > 0 and w in phrase}


def _is_content(tok: str) -> bool:
    w = tok.lower()
    return (tok.isalpha() and len(w) > 3 and w not in _STOP and w not in _AUX and w not in _DETERMINERS
            and w not in _PREPOSITIONS and w not in _ADJECTIVES and w not in _BASE_VERBS
            and not (_NOT_NOUN.search(w) and not _NOUN_END.search(w)))


def _keywords(text: str, n: int = 3) -> list[str]:
    """The ``n`` nouns ``text`` uses most as nouns (first seen first on ties)."""
    found = _nouns(text)
    order = list(found)
    return sorted(found, key=lambda w: (-found[w][0], order.index(w)))[:n]


def _role_phrase(system_prompt: str) -> str:
    """What the agent does, to be said as "I <phrase>": the first clause of its instructions, without
    any directive about what to say or how to answer ("say AGREED when satisfied" is never repeated)."""
    first = re.split(r"(?<=[.!?])\s|[;:\n]| - ", system_prompt.strip(), maxsplit=1)[0].rstrip(".!?, ")
    first = re.split(r",?\s+(?:and|then)\s+(?:say|reply|respond|answer|write|output|end)\b|,\s*(?:say|reply)\b",
                     first, maxsplit=1, flags=re.I)[0].strip()
    told = re.match(r"(?i:you)\s+(?!are\b)[a-z]", first) is not None  # "You look for the risks": a verb follows "You"
    first = re.sub(r"^(you are|you're|you)\s+", "", first, flags=re.I)
    if not first or "{{" in first or re.match(r"(?:say|reply|respond|answer|write|output|end|finish)\b", first, re.I):
        return "bring my own perspective"
    lead = first.split()[0].lower()
    if lead in ("am", "a", "an", "the") or re.match(r"^(a|an|the)\s", first, flags=re.I):
        return ("am " if lead != "am" else "") + first[0].lower() + first[1:]
    then = (first.split()[1:2] or [""])[0].lower()
    if (told or lead in _BASE_VERBS or re.search(r"(?:ize|ise|ate)$", lead)
            or then in _DETERMINERS or then.endswith("ly")):  # "guard the budget", "preside impartially"
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


# how the patterns' prompts say who else is in the room
_ROOM_NAMES = re.compile(r"one-on-one debate against ([\w\-.]+)|in a group chat with ([^.\n]+)\.|"
                         r"Other participants: ([^.\n]+)\.|panel discussion with the experts ([^.\n]+)\.|"
                         r"on a panel moderated by ([\w\-.]+)|Other experts: ([^.\n]+)\.")
_ROOM_SIZE = re.compile(r"\b(?:agent|expert) \d+ of (\d+)\b")  # round robin, panel: N participants


# a pattern's brief, addressed to the speaker by name ("You are Mediator, a neutral mediator. ..."), and the
# lead of an instruction ("Reviewer Methods_Reviewer, please review this work: <the work>")
_BRIEF = re.compile(r"^You are (?!(?:a|an|the)\s)[A-Za-z]")
_LEAD = re.compile(r"^([^\n:.!?\[\]]{2,80}?):[ \t]+(?=\S)")
# who a speaker says it is ("since I am a data analyst,", "You are an experienced, impartial workplace mediator.")
_SELF = re.compile(r"\b(?:I am|I'm|you are|you're)\s+(?:a|an|the)\s+([^.;:!?\n]+)", re.I)
_SELF_END = re.compile(r"\s(?:who|that|which|with|for|of|in|on|at|about|to|focused|and|but|so)\s|,\s*(?:I|we)\s")


def _material(text: str, task: str = "") -> tuple[str, str]:
    """(what ``text`` gives to talk about, the words that only say what to do): a pattern's brief
    paragraph ("You are Candidate, interviewed by Interviewer. Answer in detail.") and the lead of an
    instruction before its colon ("Party Union, please share your perspective on: ...", "Session 1:
    ...") say what to do, not what about. A one-word lead is a speaker or a label ("Draft: ...") and
    stays, and so does the task's (``task``: its first line; "Plan a launch for a small team: scope, date")."""
    kept, frame = [], []
    for n, para in enumerate(text.split("\n\n")):
        if _BRIEF.match(para):
            frame.append(para)
            continue
        lead = _LEAD.match(para) if n == 0 and not (task and para.startswith(task)) else None
        if lead and 2 <= len(lead.group(1).split()) <= 10:
            frame.append(lead.group(1))
            para = para[lead.end():]
        kept.append(para)
    return "\n\n".join(kept), " ".join(frame)


def _self_nouns(text: str) -> set[str]:
    """The words a speaker says it is ("I am a data analyst" -> data, analyst; "You are a backend
    engineer with ten years of experience" -> backend, engineer): the phrase up to its first "who",
    "with", "focused", ... They name a speaker, never a topic ("the backend", "the analyst")."""
    out: set[str] = set()
    for m in _SELF.finditer(text):
        phrase = _SELF_END.split(" " + m.group(1) + " ", maxsplit=1)[0]
        out |= {w.lower() for w in re.findall(r"[A-Za-z][A-Za-z\-']*", phrase) if not w.endswith("'s")}
    return out


_ADDRESS: list[re.Pattern[str]] = []  # the openers as regexes, the addressed name a group (made once)


def _addressed(text: str) -> set[str]:
    """The names a reply of this model addresses ("I hear Economist on ...", "I take Manager's point"):
    speakers, even where no ``Name:`` line shows them (a summarizer reading bare replies)."""
    if not _ADDRESS:
        for t in _OPENERS:
            pat = re.escape(t).replace(re.escape("{your}"), r"(?P<your>[A-Z][\w\-.]*)'s")
            pat = pat.replace(re.escape("{you}"), r"(?P<you>[A-Z][\w\-.]*)").replace(re.escape("{k1}"), ".+?")
            _ADDRESS.append(re.compile(pat))
    return {m.group(m.lastgroup) for r in _ADDRESS for m in r.finditer(text) if m.lastgroup}


def speakers_of(spoken: list[str]) -> list[str]:
    """The speakers' names the texts show (``Name:`` lines)."""
    return list(dict.fromkeys(w for t in spoken for w in _SPEAKER_LINE.findall(t)))


def _others(agent: str, texts: list[str], spoken: list[str]) -> list[str]:
    """Who else is in the room, as far as the prompts tell: the names the patterns' briefs give in
    ``texts`` and every speaker of a ``name: ...`` line in ``spoken`` (the texts without the task's
    first line), without the agent itself and the user. A brief that gives only a count ("agent 2
    of 4") adds unnamed places."""
    names: dict[str, None] = {}
    size = 0
    for t in texts:
        for m in _ROOM_NAMES.finditer(t):
            for part in re.split(r",\s*|\s+and\s+", next(g for g in m.groups() if g is not None)):
                names[part.strip()] = None
        for m in _ROOM_SIZE.finditer(t):
            size = max(size, int(m.group(1)))
    for t in spoken:
        for w in _SPEAKER_LINE.findall(t):
            names[w] = None
    known = [n for n in names if n and n.lower() not in (agent.lower(), "user", "no one else", "(none)", "none")]
    return known + [""] * max(0, size - 1 - len(known))


def _own_turns(agent: str, convo: list[dict[str, object]], last: str) -> int:
    """How many replies the agent has given that it can see: its own messages in the conversation
    (private memory) or its lines in a turn's "... so far:" block."""
    mine = sum(1 for m in convo if m.get("role") == "assistant")
    speakers: list[str] = _SPEAKER_LINE.findall(last.partition("so far:\n")[2])
    return max(mine, speakers.count(agent))


def _join(names: list[str]) -> str:
    return names[0] if len(names) == 1 else ", ".join(names[:-1]) + " and " + names[-1]


def _reply(rng: random.Random, *, role: str, k1: str, k2: str, prev: str, others: list[str], system: str,
           own_turns: int, speakers: list[str]) -> str:
    """The reply's text: an opener to the latest speaker, the agent's stand, a closer for the room;
    or the agreement its instructions ask for ("say AGREED when satisfied", after ``AGREE_AFTER``
    replies of its own), or a summary when its role is to summarize."""
    slots = {"k1": k1, "k2": k2, "role": role}
    signal = _SIGNAL.search(system)
    if signal and own_turns >= AGREE_AFTER:
        return _AGREE.format(**slots) + " " + signal.group(1) + "."
    if re.match(r"summari[sz]e|sum up", role):
        return _SUMMARY.format(speakers=_join(speakers) if speakers else "the discussion", **slots)
    one = len(others) == 1
    you, your = ("you", "your") if one else (prev, prev + "'s")
    opener = rng.choice(_OPENERS).format(you=you, your=your, **slots) + " " if prev else ""
    body = rng.choice(_BODIES).format(**slots)
    closer = rng.choice(_CLOSERS["one" if one else "many" if others else "none"])
    if re.search(r"\b(?:one|a single) sentence\b|\bconcise(?:ly)?\b|\bbrief(?:ly)?\b", system, re.I):
        return body  # "answer in one sentence", "be concise": the stand alone
    return opener + body + closer


def _text(content: object) -> str:
    if isinstance(content, list):
        return " ".join(p.get("text", "") for p in content if isinstance(p, dict))
    return str(content) if content else ""


# ---- tools: the offline model calls a tool when what it is asked for is what the tool offers ----
_TOOL_NOISE = set("""tool tools return returns value values given call calls function result results string number
integer text name names list data input output item items based using used uses""".split())
_EXPRESSION = re.compile(r"\(?-?\d+(?:\.\d+)?(?:\s*[-+*/x×]\s*\(?-?\d+(?:\.\d+)?\)?)+")
_NUMBER = re.compile(r"-?\d+(?:\.\d+)?")


_NAME_NOISE = set("get set run make do has is can the and for put use new add_".split())


def _offered(tool: Mapping[str, object]) -> tuple[str, set[str], set[str]]:
    """A tool's name, the words of its name, description and parameter names (what it offers),
    and its name's short parts ("add" of ``add``, "sum" of ``sum_up``), which are matched whole."""
    fn = _obj(tool.get("function"))
    name = str(fn.get("name") or "")
    params = " ".join(re.split(r"[_\-]", " ".join(_obj(_obj(fn.get("parameters")).get("properties")))))
    words = {w for w in _words(" ".join(re.split(r"[_\-]", name)) + " " + str(fn.get("description") or "") + " "
                                + params) if w not in _TOOL_NOISE}
    parts = {p for p in re.split(r"[_\-]|(?<=[a-z])(?=[A-Z])", name.lower()) if len(p) == 3 and p not in _NAME_NOISE}
    return name, words, parts


def _number(schema: Mapping[str, object], found: list[str]) -> int | float:
    """The first of ``found`` within the schema's ``minimum``/``maximum``, else 1 brought into them
    (a score from 0 to 1 is never an order number the text mentions)."""
    lo, hi = schema.get("minimum", -math.inf), schema.get("maximum", math.inf)
    low: float = lo if isinstance(lo, (int, float)) else -math.inf
    high: float = hi if isinstance(hi, (int, float)) else math.inf
    value = next((float(f) for f in found if low <= float(f) <= high), min(max(1.0, low), high))
    return int(value) if schema.get("type") == "integer" else value


def _argument(name: str, schema: Mapping[str, object], text: str, matched: list[str]) -> object:
    """A value for parameter ``name`` read from ``text`` by its schema: the first allowed value, a
    number, a sentence (a summary or message), an arithmetic expression, a capitalized name (a
    topic or query takes the word of ``text`` that asked for the tool, ``matched``), else the
    first keyword."""
    allowed = schema.get("enum")
    if allowed:
        return _seq(allowed)[0]
    kind = schema.get("type")
    about = f"{name} {schema.get('description') or ''}".lower()
    if kind in ("integer", "number"):
        return _number(schema, _NUMBER.findall(text))
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


HANDOFF_PREFIX = "transfer_to_"
_HANDOFF_NOISE = set("hand handoff transfer conversation ask questions".split())


def offline_handoff(messages: Sequence[Mapping[str, object]],
                    tools: Sequence[Mapping[str, object]]) -> dict[str, object] | None:
    """The handoff the offline model makes (``transfer_to_<name>``), or None: the first offered
    target whose name or description shares a word with the conversation (the task and the
    latest message, not the turn's own instruction, nor who wrote that message)."""
    said = [m for m in messages if m.get("role") != "system"]
    if len(said) < 2:
        return None
    latest = _text(said[-2].get("content")) if len(said) > 2 else ""
    latest = re.sub(r"^[^\n:]{1,64}:\s", "", latest)  # "Name: text": who said it is no topic
    asked = {w[:5] for w in _words(_text(said[0].get("content")) + " " + latest)}
    for tool in tools:
        fn = _obj(tool.get("function"))
        name = str(fn.get("name") or "")
        if not name.startswith(HANDOFF_PREFIX):
            continue
        offered = _words(name[len(HANDOFF_PREFIX):].replace("_", " ") + " " + str(fn.get("description") or ""))
        if any(w[:5] in asked for w in offered if w not in _HANDOFF_NOISE and w not in _TOOL_NOISE):
            digest = hashlib.sha1(json.dumps([name, len(messages)]).encode()).hexdigest()[:12]
            return {"id": f"call_{digest}", "type": "function", "function": {"name": name, "arguments": "{}"}}
    return None


def offline_tool_calls(messages: Sequence[Mapping[str, object]],
                       optional_params: Mapping[str, object]) -> list[dict[str, object]]:
    """The tool calls the offline model makes for this request (``[]``: none), deterministically.

    It calls every offered tool whose name, description or parameter names share a word with what
    it is asked (its latest instruction, and the task; the same first five letters: "calculate"
    asks for "calculator", "studies" for "study"; a three-letter part of the name whole: "Add 2 and
    3" asks for ``add``, from the task only), once per turn (not after tool results came back), never when
    ``tool_choice`` is ``"none"`` or forces ``respond``; arguments are read from that text by the
    tool's schema (``_argument``)."""
    offered = [t for t in offered_tools(optional_params) if _obj(t.get("function")).get("name") != "respond"]
    choice = optional_params.get("tool_choice")
    if not offered or choice == "none" or isinstance(choice, dict):
        return []
    if messages and messages[-1].get("role") == "tool":  # once per turn: the results are in
        return []
    tools = [t for t in offered if not str(_obj(t.get("function")).get("name") or "").startswith(HANDOFF_PREFIX)]
    users = [_text(m.get("content")) for m in messages if m.get("role") == "user"]
    asked_text = "\n".join(dict.fromkeys([*users[-1:], *users[:1]]))
    asked = _words(asked_text)
    # a three-letter name part counts whole, and only from the task: a pattern's own instruction
    # ("Add your own perspective") never asks for a tool named ``add``
    short = set(re.findall(r"[a-z]+", "\n".join(users[:1]).lower()))
    calls: list[dict[str, object]] = []
    for tool in tools:
        name, words, parts = _offered(tool)
        stems = {w[:5] for w in words}
        matched = [w for w in asked if w[:5] in stems] + sorted(parts & short)
        if not matched:
            continue
        params = _obj(_obj(tool.get("function")).get("parameters"))
        props = _obj(params.get("properties"))
        required = [str(k) for k in _seq(params["required"])] if "required" in params else list(props)  # optional: out
        args = {k: _argument(k, _obj(props.get(k)), asked_text, matched) for k in required}
        # the n-th number parameter takes the n-th number of the message that asked for the tool
        asking = next((u for u in dict.fromkeys([*users[:1], *users[-1:]])  # the task first
                       if any(re.search(rf"\b{re.escape(w)}\b", u.lower()) for w in matched)), asked_text)
        numbers = _NUMBER.findall(asking)
        numeric = [k for k in required if _obj(props.get(k)).get("type") in ("integer", "number")
                   and not _obj(props.get(k)).get("enum")]
        for k, found in zip(numeric, numbers):
            args[k] = _number(_obj(props[k]), [found])
        digest = hashlib.sha1(json.dumps([name, args, len(messages)], sort_keys=True).encode()).hexdigest()[:12]
        calls.append({"id": f"call_{digest}", "type": "function",
                      "function": {"name": name, "arguments": json.dumps({k: v for k, v in args.items()
                                                                          if v is not None})}})
    if not calls:  # nothing to do with its own tools: it may hand the conversation on
        handoff = offline_handoff(messages, offered)
        calls = [handoff] if handoff is not None else []
    return calls


def forced_tool_call(messages: Sequence[Mapping[str, object]],
                     optional_params: Mapping[str, object]) -> dict[str, object] | None:
    """The call of a tool the request forces (``tool_choice`` names it; ``respond`` is a bid, composed
    elsewhere), or None. A choice among allowed values (a selector's ``speaker`` enum) takes the
    value the latest message of the conversation mentions first (its speaker's own "Name:" aside),
    else the first allowed: the enum's order is the fallback (the next speaker in turn)."""
    choice = optional_params.get("tool_choice")
    name = _obj(choice.get("function")).get("name") if isinstance(choice, dict) else None
    if not name or name == "respond":
        return None
    tool = next((t for t in offered_tools(optional_params) if _obj(t.get("function")).get("name") == name), None)
    if tool is None:
        return None
    said = [m for m in messages if m.get("role") != "system"]
    latest = _text(said[-2 if len(said) > 1 else -1].get("content")) if said else ""
    latest = re.sub(r"^[^\n:]{1,64}:\s", "", latest)  # "Name: text" (another's message): who said it is no mention
    props = _obj(_obj(_obj(tool.get("function")).get("parameters")).get("properties"))
    args: dict[str, object] = {}
    for key, schema in props.items():
        allowed = schema.get("enum") if isinstance(schema, dict) else None
        if allowed:
            hits = [(m.start(), v) for v in allowed
                    for m in [re.search(rf"(?<![\w]){re.escape(str(v))}(?![\w])", latest, re.IGNORECASE)] if m]
            args[key] = min(hits)[1] if hits else allowed[0]
        else:
            value = _argument(key, schema if isinstance(schema, dict) else {}, latest, [])
            if value is not None:
                args[key] = value
    digest = hashlib.sha1(json.dumps([name, args, len(messages)], sort_keys=True).encode()).hexdigest()[:12]
    return {"id": f"call_{digest}", "type": "function", "function": {"name": name, "arguments": json.dumps(args)}}


def offline_tool_results(messages: Sequence[Mapping[str, object]]) -> str:
    """What the tools said this turn, as one sentence the reply ends with (``""``: no tool results)."""
    results: list[tuple[str, str]] = []
    names: dict[str, str] = {}
    for m in reversed(messages):
        if m.get("role") == "tool":
            results.append((str(m.get("tool_call_id")), _text(m.get("content"))))
        elif m.get("role") == "assistant" and m.get("tool_calls"):
            for c in map(_obj, _seq(m["tool_calls"])):
                names[str(c.get("id"))] = str(_obj(c.get("function")).get("name", "tool"))
        elif m.get("role") == "user":
            break
    if not results:
        return ""
    return " My tools say: " + "; ".join(f"{names.get(i, 'tool')} gave {r}" for i, r in reversed(results)) + "."


def before_tools(messages: list[dict[str, object]]) -> list[dict[str, object]]:
    """The request without this turn's tool rounds (up to its last user message): what the reply is
    composed from."""
    end = len(messages)
    while end and messages[end - 1].get("role") in ("tool", "assistant") and \
            (messages[end - 1].get("role") == "tool" or messages[end - 1].get("tool_calls")):
        end -= 1
    return messages[:end] if end else messages


def with_tools(response: WireResponse, messages: Sequence[Mapping[str, object]],
               optional_params: Mapping[str, object]) -> WireResponse:
    """``response`` (a composed reply or bid) as a turn with tools answers: tool calls when it is
    asked for what a tool offers, else the reply (the bid's message) ending with the tools' results;
    a forced tool (a selector's pick) is called."""
    forced = forced_tool_call(messages, optional_params)
    calls = [forced] if forced is not None else offline_tool_calls(messages, optional_params)
    if calls:
        u = response.usage
        usage = {"prompt_tokens": u.prompt_tokens, "completion_tokens": u.completion_tokens,
                 "total_tokens": u.total_tokens} if u is not None else None
        return completion({"role": "assistant", "content": None, "tool_calls": calls}, "tool_calls", usage)
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


def _seconds_env(name: str) -> float:
    try:
        return max(0.0, float(os.environ.get(name, "0") or 0))
    except ValueError:
        return 0.0


class OfflineModel:
    """The provider ``fsmchat-offline``: deterministic simulated participants, answered in this
    process (``fsmchat.speakers.llm.register_own``), with the response and chunk shapes of the
    fast path; litellm is never imported for it.

    Asked to stream (``stream=True``, or a run with a token sink), it composes the reply whole, as
    always, and then sends it word by word (``stream_pieces``), ``typing_delay`` seconds apart: a
    simulation of typing, so a demo shows replies being written. A tool call is sent in two
    argument pieces (the assembling of tool-call deltas is exercised); the usage comes with the
    last chunk."""

    def __init__(self, delay: float | None = None, typing_delay: float | None = None):
        self._delay = delay
        self._typing = typing_delay

    @property
    def delay(self) -> float:
        """Simulated latency in seconds (``FSMCHAT_OFFLINE_DELAY``, default 0)."""
        if self._delay is not None:
            return self._delay
        return _seconds_env("FSMCHAT_OFFLINE_DELAY")

    @property
    def typing_delay(self) -> float:
        """Simulated typing: seconds between two streamed words (``FSMCHAT_OFFLINE_TYPING``, default 0)."""
        if self._typing is not None:
            return self._typing
        return _seconds_env("FSMCHAT_OFFLINE_TYPING")

    def _compose(self, messages: list[dict[str, object]], optional_params: dict[str, object],
                 litellm_params: dict[str, object] | None) -> WireResponse:
        meta = _obj((litellm_params or {}).get("metadata"))
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
        # the prompt after its own reply is what it is told ("Phase: OPENING. Case: ..."), not a "name: ..." turn
        prev, last_text = _latest_turn(last, is_task=not convo or own_last or n_convo == 1)
        texts = [_text(m.get("content")) for m in convo] + [last]
        first = _text(messages[start].get("content")) if len(messages) > start else ""
        topic = first.split("\n", 1)[0]  # "Draft: ...": the task's first line names no speaker
        spoken = [t[len(topic):] if topic and t.startswith(topic) else t
                  for t in [system, *texts, _text(messages[-1].get("content"))]]
        names = {part for t in spoken for w in _SPEAKER_LINE.findall(t) for part in _name_parts(w)}
        role = _role_phrase(system)
        everything = [system, *texts, _text(messages[-1].get("content"))]
        frames = " ".join(_material(t, topic)[1] for t in everything)  # briefs and instructions: what to do
        others = _others(agent, everything, spoken)
        if (not prev and len(others) == 1 and others[0] and any(m.get("role") == "assistant" for m in convo)
                and re.search(rf"\b{re.escape(others[0])}\b", frames)):
            prev = others[0]  # private memory (a debate): the message after its own reply is the other's, when
            # a brief names that other ("a debate against Skeptic"), not when a label looks like a speaker ("Phase:")
        # who speaks is never a topic: the speakers, their names' parts, the names a prompt writes as
        # names ("Research_Team"), a brief capitalises ("interviewing Candidate", "Party 1") or a reply
        # addresses ("I hear Economist on ..."), and what a speaker says it is ("I am a strategist")
        named = {w for t in everything for w in [*_IDENT.findall(t), *_addressed(t)]}
        named |= set(re.findall(r"(?<=[\w,;:] )[A-Z][A-Za-z]+", frames))
        people = names | _self_nouns("\n".join(everything)) | {
            part for n in (prev, agent, *others, *speakers_of(spoken), *named) for part in _name_parts(n)}
        if role.startswith("am "):  # who it is ("The organiser.": "I am the organiser"), not what it argues
            people |= set(_words(_SELF_END.split(" " + role[3:] + " ", maxsplit=1)[0]))
        # its own role's words are not news to it (the rest of a system prompt may hold the material), nor
        # are the words of what it is told to do ("please share your perspective on: ...")
        noise = _template_words() | _FRAME | people | set(_words(role)) | set(_words(frames))
        said = _material(_ROLE_CLAUSE.sub(" ", last_text), topic)[0]  # what the speaker said, not who it said it was
        task = next((t for t in (_material(_ROLE_CLAUSE.sub(" ", _text(m["content"])), topic)[0] for m in convo
                                 if m.get("role") == "user") if t.strip()), said)
        found = {**_nouns(system), **_nouns(task), **_nouns(said)}

        def heard(k: str, known: set[str]) -> bool:  # "perspectives" is "perspective"
            return k in known or _singular(k) in known
        keys = [k for k in _keywords(said, 6) + _keywords(task, 4) if not heard(k, noise)]
        # its own subject: the words of its system prompt, its role's among them, but never a person
        keys += [k for k in _keywords(system, 4) if not heard(k, (noise - set(_words(role))) | people)]
        phrases = [found[k][1] for k in dict.fromkeys(keys)] + _FALLBACKS
        k1, k2 = phrases[0], next(p for p in phrases[1:] if p != phrases[0])
        if k1.lower() in role.lower():  # its own subject second: "since I argue for remote work, ... to remote work"
            k1, k2 = k2, k1
        speakers = list(dict.fromkeys(w for t in spoken for w in _SPEAKER_LINE.findall(t) if w != "User"))
        text = _reply(rng, role=role, k1=k1, k2=k2, prev=prev if prev != agent else "", others=others,
                      system=system, own_turns=_own_turns(agent, convo, last), speakers=speakers)

        tools = offered_tools(optional_params)
        wants_bid = (any(_obj(t.get("function")).get("name") == "respond" for t in tools)
                     or "response_format" in optional_params)
        usage = {"prompt_tokens": len(json.dumps(messages, default=str)) // 4,  # ~4 characters a token
                 "completion_tokens": len(text.split())}
        usage["total_tokens"] = usage["prompt_tokens"] + usage["completion_tokens"]
        if not wants_bid:
            return completion({"role": "assistant", "content": text}, "stop", usage)
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
            return completion({"role": "assistant", "content": args}, "stop", usage)
        call = {"id": "call_" + hashlib.sha1(digest).hexdigest()[:12], "type": "function",
                "function": {"name": "respond", "arguments": args}}
        return completion({"role": "assistant", "content": None, "tool_calls": [call]}, "tool_calls", usage)

    def answer(self, messages: list[dict[str, object]], params: dict[str, object], meta: dict[str, object]) -> WireResponse:
        """The whole reply to a request (``params``: its options, ``meta``: its metadata)."""
        whole: WireResponse = with_tools(self._compose(before_tools(messages), params, {"metadata": meta}), messages,
                                         params)
        return whole

    async def acompletion(self, model: str, messages: list[dict[str, object]], params: dict[str, object],
                          meta: dict[str, object]) -> WireResponse:
        if self.delay:
            await asyncio.sleep(self.delay)
        return self.answer(messages, params, meta)

    async def astream(self, model: str, messages: list[dict[str, object]], params: dict[str, object],
                      meta: dict[str, object]) -> AsyncIterator[dict[str, object]]:
        """The reply streamed word by word (``stream_chunks``), ``typing_delay`` seconds apart; a
        bid's ``respond`` arguments too."""
        if self.delay:
            await asyncio.sleep(self.delay)
        for n, chunk in enumerate(stream_chunks(self.answer(messages, params, meta))):
            choices = chunk["choices"] if n and self.typing_delay else None
            first = choices[0] if isinstance(choices, list) and choices else None
            delta = first.get("delta") if isinstance(first, dict) else None
            if isinstance(delta, dict) and (delta.get("content") or delta.get("tool_calls")):
                await asyncio.sleep(self.typing_delay)
            yield chunk
