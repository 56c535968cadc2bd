"""The offline model writes demos that show the idea: grammatical, in-character replies that never
repeat an agent's own instructions, and a GroupChat where everyone takes the floor."""
import re

import pytest

from fsmchat import Agent, AgentFlow, Discussion, GroupChat
from fsmchat.speakers.offline import _keywords, _latest_turn, _role_phrase

README_AGENTS = [("TechOptimist", "You argue for the benefits of AI in society."),
                 ("TechCritic", "You argue against unchecked AI advancement."),
                 ("Realist", "You weigh both sides and seek a balanced view.")]
README_TASK = "Should we prioritize AI development or AI regulation?"


def readme_chat():
    return GroupChat(agents=[Agent(n, system_prompt=p) for n, p in README_AGENTS], max_loops=8, threshold=0.5,
                     recency_penalty=0.3)


def readme_flow():
    critic = Agent(name="critic", instructions="Critique the draft rigorously")
    author = Agent(name="author", instructions="Revise the draft; say AGREED when satisfied")
    summarizer = Agent(name="summarizer", instructions="Summarize this debate:\n{{discussion_transcript}}")
    return AgentFlow(agents=[critic, author, summarizer], steps=[
        Discussion([critic, author], rounds=3, until=lambda ctx: "AGREED" in (ctx.previous_result or "")),
        summarizer])


@pytest.mark.parametrize("prompt, phrase", [
    ("You argue for the benefits of AI in society.", "argue for the benefits of AI in society"),
    ("Revise the draft; say AGREED when satisfied", "revise the draft"),
    ("Critique it, and say DONE when finished", "critique it"),
    ("Summarize this debate:\n{{discussion_transcript}}", "summarize this debate"),
    ("You are a careful judge. You never rush.", "am a careful judge"),
    ("You're the skeptic", "am the skeptic"),
    ("Cats.", "care most about cats"),
    ("You guard the city budget.", "guard the city budget"),  # a verb by what follows it
    ("You preside impartially and rule on the law.", "preside impartially and rule on the law"),
    ("Reply DONE once finished", "bring my own perspective"),  # a directive is no role
    ("", "bring my own perspective"),
])
def test_the_role_is_the_first_clause_without_directives(prompt, phrase):
    assert _role_phrase(prompt) == phrase


def test_keywords_are_nouns_and_names_are_speakers():
    assert _keywords("Should we prioritize AI development or AI regulation?", 3) == ["development", "regulation"]
    assert _keywords("Renewable energy is the only path forward, unchecked and growing.", 3) == ["energy", "path"]
    assert _latest_turn("Draft: Renewable energy", is_task=True) == ("", "Draft: Renewable energy")
    assert _latest_turn("TechCritic: I disagree", is_task=False) == ("TechCritic", "I disagree")
    assert _latest_turn("[bob]: fine", is_task=False) == ("bob", "fine")
    prompt = "Topic\n\nDiscussion so far:\ncritic: too long\nauthor: shorter now\n\nYou are critic. Respond."
    assert _latest_turn(prompt, is_task=True) == ("author", "shorter now")


def test_every_agent_of_the_readme_group_chat_takes_the_floor_within_8_messages():
    res = readme_chat().execute(README_TASK)
    speakers = [m.role for m in res.transcript[1:9]]
    assert set(speakers) == {"TechOptimist", "TechCritic", "Realist"}, speakers
    assert res.ok and res.stop_reason in ("lull", "max_loops")
    again = readme_chat().execute(README_TASK)
    assert [m.content for m in again.transcript] == [m.content for m in res.transcript]  # deterministic


def test_the_readme_discussion_stops_when_the_author_agrees_on_its_second_reply():
    res = readme_flow().execute("Draft: Renewable energy is the only path forward.")
    assert res.ok and res.path.count("discussion.turn") == 4  # of 6: until saw "AGREED" after turn 4
    assert [s["name"] for s in res.output["steps"]][-1] == "summarizer"
    assert [m.role for m in res.transcript if "AGREED" in m.content] == ["author"]
    assert not any("say AGREED" in m.content for m in res.transcript)  # its own instruction is never echoed


BAD = [
    (r"\bI (?:cats|dogs|the)\b", "a role that is not a verb phrase"),
    (r"\b(\w+)'s I\b", "a name where a noun belongs"),
    (r"\bthe (?:techoptimist|techcritic|realist|critic|author|summarizer|draft:)\b", "a speaker as a topic"),
    (r"\bthe (?:prioritize|unchecked|renewable|explain|forward)\b", "a verb, adjective or adverb as a topic"),
    (r"\{|\}", "an unfilled template slot"),
    (r"  ", "a double space"),
    (r"say AGREED|when satisfied", "its own instruction"),
    (r"\bthe the\b", "a doubled article"),
]


def test_offline_replies_read_as_sentences():
    texts = [m.content for m in readme_chat().execute(README_TASK).transcript[1:]]
    texts += [m.content for m in readme_flow().execute("Draft: Renewable energy is the only path forward.").transcript]
    assert len(texts) >= 12
    for t in texts:
        assert t[0].isupper() and t.rstrip()[-1] in ".!?", t
        for pattern, what in BAD:
            assert re.search(pattern, t, flags=re.I) is None, f"{what}: {t!r}"


def test_an_offline_call_reads_the_same_messages_at_10_and_at_2000():
    # decided by which messages are read, not by time or a count of traced lines (that count moved
    # with the reply's wording and with the interpreter: 914 locally, 1,487 in CI)
    from fsmchat.speakers.offline import OfflineModel

    def read(n):
        seen = set()

        class Message(dict):
            def __getitem__(self, key):
                seen.add(self.index)
                return super().__getitem__(key)

            def get(self, key, default=None):
                seen.add(self.index)
                return super().get(key, default)

        raw = [{"role": "system", "content": "You argue for cats."}, {"role": "user", "content": "pets?"}]
        raw += [{"role": "user", "content": f"bob{i % 3}: dogs are loyal friends number {i}"} for i in range(n)]
        raw.append({"role": "user", "content": "Your turn."})
        msgs = []
        for i, m in enumerate(raw):
            msgs.append(Message(m))
            msgs[-1].index = i
        out = OfflineModel()._compose(msgs, {}, {"metadata": {"fsmchat_agent": "cat"}})
        assert out.choices[0].message.content
        return seen

    # the system prompt, the task, the latest 8 turns and the prompt: 11 messages either way
    assert read(10) == {0, 1, 4, 5, 6, 7, 8, 9, 10, 11, 12}
    assert read(2000) == {0, 1, 1994, 1995, 1996, 1997, 1998, 1999, 2000, 2001, 2002}
