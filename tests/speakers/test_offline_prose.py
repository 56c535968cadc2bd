"""The offline model's replies read like prose: 200+ replies over varied tasks, roles and rooms (a
debate of two, a discussion, group chats of two and four, a round robin of three) are checked
against known-bad shapes, and an agent told to "say AGREED when satisfied" agrees on its second
reply, so the README's `until=` discussion stops after its fourth turn."""
from __future__ import annotations

import re

import pytest

from fsmchat import Agent, AgentFlow, Discussion, GroupChat, OneOnOneDebate, RoundRobinSwarm

TASKS = [
    "Should we prioritize AI development or AI regulation?",
    "Analyze the market and develop a plan for our launch.",
    "Is remote work better than working in the office?",
    "Draft: Renewable energy is the only path forward.",
    "We should ship the rewrite on Friday; the team is tired.",
    "Should I learn Rust or Go for backend services?",
    "Decide whether the city should ban cars from the old town.",
    "Explain how to reduce the cost of our cloud infrastructure.",
    "Review the proposal to hire two engineers before the audit.",
    "Should schools teach programming to every student?",
    "Draft the three rules our team should follow when shipping AI features.",
]
ROLES = [
    ("Optimist", "You argue for the benefits of change and new technology."),
    ("Skeptic", "You argue against hasty decisions and hidden costs."),
    ("Realist", "You weigh both sides and seek a balanced view."),
    ("Auditor", "You are a careful auditor. You check every number."),
    ("Teacher", "You care about students and their learning."),
    ("Engineer", "You build reliable systems and dislike risky launches."),
]
# every verb the tasks use as a verb: never a topic ("the analyze", "the develop")
TASK_VERBS = ("prioritize analyze develop ship learn decide ban explain reduce review hire teach follow "
              "should").split()


def agents(k, offset):
    return [Agent(n, system_prompt=p) for n, p in (ROLES * 2)[offset:offset + k]]


def replies():
    """(text, how many others were in the room: None when the speaker could not know, e.g. the
    opening turn of a discussion), over every task and five rooms."""
    out = []
    for i, task in enumerate(TASKS):
        a, b = agents(2, i % 6)
        for m in OneOnOneDebate(agents=[a, b], max_loops=3).execute(task).transcript:
            if m.role in (a.name, b.name):
                out.append((m.content, 1))
        flow = AgentFlow(steps=[Discussion(agents(2, (i + 2) % 6), rounds=3)])
        for k, m in enumerate(flow.execute(task).transcript):
            out.append((m.content, None if k == 0 else 1))
        for room in (2, 4):
            chat = GroupChat(agents=agents(room, (i + 1) % 6), max_loops=6)
            out += [(m.content, room - 1) for m in chat.execute(task).transcript[1:]]
        rr = RoundRobinSwarm(agents=agents(3, (i + 3) % 6), max_loops=2)
        out += [(m.content, 2) for m in rr.execute(task).transcript[1:]]
    return out


NAMES = "|".join(n for n, _ in ROLES)
BAD = [
    (rf"\bthe (?:{'|'.join(TASK_VERBS)})\b", "the <verb>"),
    (r"\bthe \w+ing\b", "the <verb>ing"),
    (r"\b(\w+) \1\b", "a doubled word"),
    # an adjective left where the noun belongs: "the better as the test of it", "about the remote."
    (r"\bthe (?:better|worse|remote|renewable|unchecked|hasty|careful|old|every|one-on-one|only|two|three|four)"
     r"(?:[,.;:]| (?:as|and|against|first|wrong|weighed|should|have|before|is|are)\b)", "the <adjective>"),
    (rf"\bthe (?:{NAMES.lower()}|debate|argument|replies|draft:)\b", "a speaker or the pattern's brief as a topic"),
    (r"\bthe [A-Z]", "an article before a name"),
    (r"\bI (?:the|a|an|cats|students)\b", "a role that is not a verb phrase"),
    (r"[{}]", "an unfilled template slot"),
    (r"  ", "a double space"),
    (r"\bAGREED\b|\b(?:say|reply) [A-Z]{3,}", "a signal no one asked for, or its instruction echoed"),
    (r"\b(?:is|are) (?:is|are)\b", "a doubled verb"),
]


@pytest.fixture(scope="module")
def generated():
    return replies()


def test_two_hundred_replies_have_none_of_the_known_bad_shapes(generated):
    assert len(generated) >= 200, len(generated)  # XX
    for text, others in generated:
        assert text[0].isupper() and text[-1] in ".!?", text
        for pattern, what in BAD:
            assert re.search(pattern, text) is None, f"{what}: {text!r}"
        if others == 1:  # one other in the room is "you", never "the others" or the group
            assert not re.search(r"\bothers\b|\bthe group\b|\bwho sees\b", text, re.I), f"others with one other: {text!r}"
        if others is not None and others >= 2:  # several: each is named, none is "you"
            assert not re.search(r"\byou\b|\byour\b", text, re.I), f"'you' with {others} others: {text!r}"


def test_the_replies_vary_and_are_deterministic(generated):
    assert len({t for t, _ in generated}) >= 150  # not one sentence repeated
    assert replies() == generated  # the same input gives the same text


def agreeing_flow(rounds=3):
    critic = Agent(name="critic", instructions="Critique the draft rigorously")
    author = Agent(name="author", instructions="Revise the draft; say AGREED when satisfied")
    return AgentFlow(agents=[critic, author], steps=[
        Discussion([critic, author], rounds=rounds, until=lambda ctx: "AGREED" in (ctx.previous_result or ""))])


def test_say_agreed_when_satisfied_agrees_on_the_agents_second_reply():
    res = agreeing_flow().execute("Draft: Renewable energy is the only path forward.")
    said = [(m.role, "AGREED" in m.content) for m in res.transcript]
    # the author speaks on turns 2 and 4: it raises its concerns first, then agrees, and until stops the discussion
    assert said == [("critic", False), ("author", False), ("critic", False), ("author", True)]
    assert res.path.count("discussion.turn") == 4
    assert res.transcript[-1].content.endswith(" AGREED.")


def test_a_signal_is_given_only_when_the_prompt_asks_for_it():
    res = AgentFlow(steps=[Discussion([Agent("a", instructions="Reply DONE once finished"),
                                       Agent("b", instructions="Critique the plan")], rounds=3)]).execute("A plan.")
    assert [m.role for m in res.transcript if "DONE" in m.content] == ["a", "a"]  # its 2nd and 3rd replies
    assert not any("DONE" in m.content for m in res.transcript if m.role == "b")
    assert not any(re.search(r"reply DONE|once finished", m.content, re.I) for m in res.transcript)  # never echoed


def test_a_speakers_role_name_is_never_a_topic():
    """The demo's round robin: agents named after the role their prompt gives ("You are a
    strategist") once said "what getting the information wrong would cost us in the strategist" and
    "the information and the implementer have to be judged together"."""
    roster = [Agent("Analyst", system_prompt="You are a data analyst. Analyze information critically."),
              Agent("Strategist", system_prompt="You are a strategist. Think about long-term implications."),
              Agent("Implementer", system_prompt="You are an implementer. Focus on practical execution.")]
    texts = [m.content for task in TASKS for m in RoundRobinSwarm(agents=roster, max_loops=2).execute(task).transcript[1:]]
    assert len(texts) == 6 * len(TASKS)
    for text in texts:
        stripped = re.sub(r"\bI am (?:a|an) (?:data )?(?:analyst|strategist|implementer)\b", "", text)
        assert not re.search(r"\b(?:the|a|an) (?:data )?(?:analyst|strategist|implementer)\b", stripped, re.I), text
