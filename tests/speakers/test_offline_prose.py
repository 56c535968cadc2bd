"""The offline model's replies read like prose: 200+ replies over varied tasks, roles and rooms (a
debate of two, a discussion, group chats of two and four, a round robin of three), and every
reply of every example's offline run (`fsmchat run examples/X.py`), are checked against known-bad
shapes; the examples' topics (what fills a template's slots) also against the topic shapes found
in those runs. An agent told to "say AGREED when satisfied" agrees on its second reply, so the
README's `until=` discussion stops after its fourth turn."""
from __future__ import annotations

import ast
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from fsmchat import Agent, AgentFlow, Discussion, GroupChat, OneOnOneDebate, RoundRobinSwarm
from fsmchat.speakers import offline

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
    # issue 40, the demo's round robin (examples/round_robin.py): a role name taken as a topic
    (r"\bin the strategist\b|\ba (?:careful, )?staged approach to the implementer\b", "a role name as a topic"),
    # examples/long_conversation.py, "You look for the risks.": "I care most about look for the risks"
    (r"\bcare most about \w+ (?:for|the|a|an|to|on|at|with|into)\b", "a role that is a verb phrase made an object"),
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


def test_a_role_a_prompt_names_without_you_are_is_never_a_topic():
    """examples/hub_tools.py: a prompt that names the speaker's role bare ("The organiser. One short
    sentence.") once gave "a careful, staged approach to the organiser"."""
    roster = [Agent("alice", system_prompt="The organiser. One short sentence."),
              Agent("bob", system_prompt="The planner: check the numbers, then answer in one sentence."),
              Agent("carol", system_prompt="The skeptic who doubts every plan. One short sentence.")]
    texts = [m.content for task in TASKS for m in RoundRobinSwarm(agents=roster, max_loops=2).execute(task).transcript[1:]]
    assert len(texts) == 6 * len(TASKS)
    for text in texts:
        stripped = re.sub(r"\bI am the (?:organiser|planner|skeptic)\b", "", text)
        assert not re.search(r"\b(?:the|a|an) (?:organiser|planner|skeptic)\b", stripped, re.I), text


# ---- every example, run offline as `fsmchat run examples/X.py --no-input` ----
ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = sorted(p for p in (ROOT / "examples").glob("*.py") if not p.name.startswith("_"))
RUNNER = """
import contextlib, io, json, sys
from fsmchat.cli import main
out = {}
for path in json.loads(sys.argv[1]):
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf), contextlib.redirect_stderr(io.StringIO()):
        main(["run", path, "--no-input"])
    out[path] = buf.getvalue()
print(json.dumps(out))
"""
LINE = re.compile(r"^\[?([\w\-.]{1,40})\]?: (.+)$")
ARTICLES = {"the", "a", "an"}
NUMBERS = "one|two|three|four|five|six|seven|eight|nine|ten|twelve|twenty|hundred|\\d+"


def _slot_patterns() -> list[re.Pattern[str]]:
    """A regex per template of the offline model, its topic slots ({k1}, {k2}) as groups."""
    fill = {"k1": r"(?P<k1>[^,;?]+?)", "k2": r"(?P<k2>[^,;?]+?)", "role": r".+?", "you": r"[\w\-.]+",
            "your": r"[\w\-.']+", "speakers": r".+?"}
    out = []
    for t in [*offline._OPENERS, *offline._BODIES, offline._AGREE, offline._SUMMARY]:
        parts = re.split(r"\{(\w+)\}", t)
        out.append(re.compile("".join(re.escape(p) if i % 2 == 0 else fill[p] for i, p in enumerate(parts))))
    return out


SLOTS = _slot_patterns()
OPENERS = SLOTS[:len(offline._OPENERS)]


def topics(text: str) -> list[str]:
    return [m.group(k) for r in SLOTS for m in r.finditer(text) for k in ("k1", "k2") if k in r.groupindex]


def name_parts(name: str) -> set[str]:
    """"Defense_Attorney" -> defense_attorney, defense, attorney; "Philosopher1" -> philosopher."""
    return {p.lower() for p in [name, *re.split(r"[_\-.\d]+|(?<=[a-z])(?=[A-Z])", name)] if p}


def words(topic: str) -> list[str]:
    return [w for w in re.findall(r"[\w\-'%.]+", topic) if w.lower() not in ARTICLES]


def singular(w: str) -> str:
    return w[:-1] if len(w) > 4 and w.endswith("s") and not w.endswith("ss") else w


def written_as_a_name(word: str, task: str) -> bool:
    """The task writes ``word`` capitalised mid-sentence, not after an article ("learn Rust", not "The State")."""
    for m in re.finditer(rf"\b{re.escape(word)}\b", task):
        before = task[:m.start()].rstrip()
        if before and before[-1] not in ".!?:" and before.split()[-1].lower() not in ARTICLES | {"our", "their"}:
            return True
    return False


class Run:
    """One example's offline run: its replies (speaker, text), its task, the speakers' names and what
    the speakers say they are ("I am a data analyst" -> data, analyst)."""

    def __init__(self, path: Path, out: str):
        self.name = path.stem
        consts = {t.id: n.value for n in ast.parse(path.read_text()).body if isinstance(n, ast.Assign)
                  for t in n.targets if isinstance(t, ast.Name)}
        task = consts.get("TASK") or consts.get("TOPIC")
        self.task = ast.literal_eval(task) if task is not None else ""
        self.opened_by_user = False
        self.replies: list[tuple[str, str]] = []
        for line in out.splitlines():
            m = LINE.match(line)
            if not m or line.startswith(("-- ", "  ")):
                continue
            if m.group(1) == "User":
                self.opened_by_user = self.opened_by_user or not self.replies
                continue
            self.replies.append((m.group(1), m.group(2).split(" My tools say: ")[0]))  # the tools' words are theirs
        self.speakers = {who.lower() for who, _ in self.replies}
        self.names = {p for who, _ in self.replies for p in name_parts(who)}
        self.source = path.read_text()
        # the task and what the speakers say of themselves ("since I saw the events of the night in question,")
        self.said_of_itself = self.task + " " + " ".join(
            m.group() for _, t in self.replies for m in re.finditer(r"\b(?:As|Since|Because|Given that) I [^,]*,", t))
        # "Since I am an experienced, impartial workplace mediator, I want ...": every word up to "who",
        # "with", ... or the clause's end (not a possessive: "I am the paper's author")
        self.roles = {w.lower() for _, t in self.replies
                      for m in re.finditer(r"\bI am (?:a|an|the) (.+?)(?= who | with | focused | that | about | to "
                                           r"|, I )", t)
                      for w in re.findall(r"[A-Za-z][A-Za-z\-]*(?:'s)?", m.group(1))
                      if not w.endswith("'s") and w not in ("and", "or")}


SET_PHRASES = {"state": "state of the art", "question": "in question", "track": "on track", "stake": "at stake"}


def _name_or_role(words_, run, pool):
    return [w for w in words_ if w.lower() in pool or singular(w.lower()) in pool]


# topic shapes found in the examples' offline runs: (predicate(topic, run) -> bad, what, where it was seen)
TOPIC_BAD = [
    (lambda t, r: _name_or_role(words(t), r, r.speakers),
     "a speaker's name as a topic",
     "interview_series 'weighed against Candidate'; mentorship_session 'the next session and Mentee'; "
     "group_chat_summarizer 'the small team against Economist'; trial_simulation 'the witness'; "
     "selector_research 'against the analyst' (the agent analyst, in the task 'the analyst should weigh')"),
    (lambda t, r: _name_or_role(words(t), r, r.names - r.speakers),
     "a part of a speaker's name as a topic",
     "one_on_one_debate 'the intelligence and Philosopher' (Philosopher1/2); trial_simulation 'weighed against "
     "Attorney' (Defense_Attorney); mediation_session 'the session and Team' (Research_Team)"),
    (lambda t, r: _name_or_role(words(t), r, r.roles),
     "a role a speaker says it is, as a topic",
     "discussion_channel 'a careful, staged approach to the optimist', 'the developer and the realist'; "
     "mentorship_session 'the senior engineer'; interview_series 'treat the backend as the test of it'; "
     "round_robin 'in the strategist', 'to the implementer'"),
    (lambda t, r: [w for w in words(t) if w[0].isupper() and sum(c.isupper() for c in w) == 1
                   and not written_as_a_name(w, r.task)],
     "a capitalised word the task does not write as a name",
     "mediation_session, negotiation_session 'treat Party as the test of it' (a title: 'Party 1', 'Party Union'); "
     "trial_simulation 'On State, I part ways with you' ('The State v. Doe')"),
    (lambda t, r: [w for w in words(t) if re.search(rf"\w-{re.escape(w)}\b", r.task)
                   and not re.search(rf"(?<![\w-]){re.escape(w)}\b", r.task)],
     "a word cut out of a compound", "tools 'the person team' ('our 120-person team')"),
    (lambda t, r: re.match(rf"(?:{NUMBERS})\b", t), "a count without its article",
     "mediation_session 'weighed against two teams' ('Two teams both claim ...')"),
    (lambda t, r: re.match(rf"the (?:{NUMBERS}) (\w+)$", t)
     and re.search(rf"\b{t.split()[-1]} of\b", r.task + " ".join(x for _, x in r.replies)),
     "a measure as a topic", "interview_series 'weighed against the ten years' ('ten years of experience')"),
    (lambda t, r: re.search(r"\d[.,]\d|%", t), "a share or a decimal as a modifier",
     "council_meeting 'the 5 sales', 'the 0.5% sales' ('a 0.5% sales tax')"),
    (lambda t, r: re.match(r"(?:\d+|[a-z]+)-[a-z]+ \w+$", t), "a compound modifier without its article",
     "negotiation_session 'from two-year wage' ('a new two-year wage agreement')"),
    (lambda t, r: any(t == f"the {noun}" and phrase in r.said_of_itself
                      and not re.search(rf"\b(?:the|a) {noun}\b(?!{phrase.split(noun)[1]})", r.said_of_itself)
                      for noun, phrase in SET_PHRASES.items()), "a word of a set phrase",
     "peer_review_process 'treat the state as the test of it' ('the state of the art'); "
     "trial_simulation 'the night in question'"),
    (lambda t, r: re.fullmatch(r"the (?:sessions?|negotiation|statement|examination|guidance|perspectives?|work|"
                               r"questions|answers|progress|feedback|verdict|testimony|votes|discussions)", t),
     "an instruction's words as a topic",
     "mediation_session 'the session' ('Session 1: ...'), 'the perspectives' ('Based on these perspectives'); "
     "negotiation_session 'the negotiation' ('Negotiation Round 1: ...'); trial_simulation 'the statement' "
     "('Give opening statement for: ...'), 'the examination' ('Redirect examination: ...'); peer_review_process "
     "'the work' ('please review this work: ...'); mentorship_session 'the guidance', 'the progress', "
     "'the questions'; interview_series 'the answers' ('follow up on the answers'); council_meeting "
     "'the votes' ('Lead the discussion and the votes')"),
    (lambda t, r: re.fullmatch(r"the (?:empty|other|needs)", t), "an adjective or a verb as a topic",
     "long_conversation 'the empty' ('an empty string'); mediation_session 'the needs' ('a team that needs GPUs')"),
]


def offline_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if k != "FSMCHAT_MODEL" and not k.endswith("_API_KEY") and not k.startswith("FSMCHAT_TASK")}
    env.update(LITELLM_LOCAL_MODEL_COST_MAP="True", PYTHONPATH=str(ROOT), COLUMNS="100", NO_COLOR="1")
    return env


@pytest.fixture(scope="module")
def example_runs(tmp_path_factory):
    r = subprocess.run([sys.executable, "-c", RUNNER, json.dumps([str(p) for p in EXAMPLES])], capture_output=True,
                       text=True, env=offline_env(), cwd=tmp_path_factory.mktemp("examples"), timeout=600)
    assert r.returncode == 0, r.stderr[-2000:]
    got = json.loads(r.stdout.strip().splitlines()[-1])
    return [Run(p, got[str(p)]) for p in EXAMPLES]


def test_the_topic_patterns_read_the_templates():
    assert topics("On the draft, I part ways with you. Since I revise it, I want the draft weighed against "
                  "the only path before we commit.") == ["the draft", "the draft", "the only path"]


def test_every_examples_offline_prose_has_none_of_the_known_bad_shapes(example_runs):
    assert len(example_runs) == len(EXAMPLES) >= 19
    assert sum(len(r.replies) for r in example_runs) >= 150
    assert sum(1 for r in example_runs for _, t in r.replies if topics(t)) >= 140  # the slots are read
    found = []
    for run in example_runs:
        for n, (who, text) in enumerate(run.replies):
            assert text[0].isupper() and text[-1] in ".!?", (run.name, who, text)
            # "Because I am the realist, ...": a speaker saying what it is (the names of BAD are roles of its own)
            plain = re.sub(r"\bI am (?:a|an|the) ", "I am ", text)
            for pattern, what in BAD:
                hit = re.search(pattern, plain)
                if hit and not (what.startswith("a signal") and re.search(rf"\b{hit.group()}\b", run.source)):
                    found.append((run.name, who, what, text))  # a signal the example asks for ("say AGREED") is due
            if n == 0 and not run.opened_by_user and who != "alice":  # the first message answers no one
                # trial_simulation: "Judge: On State, I part ways with you." ("Phase: OPENING." read as a speaker)
                found += [(run.name, who, "the opening message answers someone", text)
                          for r in OPENERS if r.match(text)]
            for topic in topics(text):
                found += [(run.name, who, f"{what}: {topic!r}", text) for bad, what, _ in TOPIC_BAD if bad(topic, run)]
    assert not found, "\n".join(map(repr, found[:20]))
