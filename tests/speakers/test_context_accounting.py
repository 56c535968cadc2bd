"""Context accounting: a prompt is counted once, as it is sent (its messages, the tools and the tool
choice it offers), and that one count is the ``prompt_tokens`` event, the figure of a refusal and
what ``usage`` adds up. Checked at the local OpenAI-compatible server (tests/support/openai_server.py on
127.0.0.1), which counts what it received; and ``context=`` on every pattern that sends a
conversation, asserted on the messages a scripted model received."""
import pytest

from support.openai_server import OpenAIServer, per_agent, respond, text

from fsmchat import Agent, ExpertPanelDiscussion, GroupChat, OneOnOneDebate, RoundRobinSwarm, from_config
from fsmchat.config import to_config
from fsmchat.errors import ConfigError, ContextTooLong
from fsmchat.speakers import llm
from fsmchat.speakers.context import LastMessages, Summarize
from fsmchat.testing import ScriptedModel

HANG_GUARD = 600  # seconds before a hung server is stopped (never a verdict)
ALPHA, BETA = " ".join(["alpha"] * 20), " ".join(["beta"] * 20)


def received_tokens(body):
    """The tokens of a request as the server received it, counted here with litellm's tokenizer
    (cl100k_base, as for every model whose tokenizer litellm does not ship)."""
    return llm.get_litellm().token_counter(model="", messages=body["messages"], tools=body.get("tools"),
                                           tool_choice=body.get("tool_choice"))


def msg(role, content):
    return {"role": role, "content": content}


def test_no_prompt_over_the_limit_reaches_the_server_and_the_refusal_is_what_usage_reports():
    bids = {"a": [respond(0.9, f"a{i} {ALPHA}") for i in range(0, 20, 2)],
            "b": [respond(0.8, f"b{i} {BETA}") for i in range(1, 20, 2)]}
    with OpenAIServer(per_agent(bids), max_lifetime=HANG_GUARD) as srv:
        agents = [Agent(n, model="openai/test-model", api_base=srv.api_base, api_key="sk-test", num_retries=0,
                        max_input_tokens=293) for n in ("a", "b")]
        r = GroupChat(agents=agents, max_loops=8, context="full").execute("Discuss.")
        srv.assert_clean()
    # three rounds of two bids were sent; the fourth round's bids (294 and 296 tokens) were not
    # (a's and b's bids of a round arrive in either order)
    assert [received_tokens(body) for body in srv.requests_for("a")] == [193, 240, 268]
    assert [received_tokens(body) for body in srv.requests_for("b")] == [193, 242, 268]
    assert len(srv.requests) == 6 and max(received_tokens(body) for body in srv.requests) <= 293
    assert all(body["tools"][0]["function"]["name"] == "respond" for body in srv.requests)  # the tools counted
    counted = [(e["agent"], e["tokens"], e.get("refused", False)) for e in r.events if e["event"] == "prompt_tokens"]
    assert counted == [("a", 193, False), ("b", 193, False), ("a", 240, False), ("b", 242, False),
                       ("a", 268, False), ("b", 268, False), ("a", 294, True), ("b", 296, True)]
    assert not r.ok and isinstance(r.error, ContextTooLong)
    assert (r.error.agent, r.error.tokens, r.error.limit) == ("a", 294, 293)
    assert "the prompt has 294 tokens, over the input limit of 293 tokens (Agent(max_input_tokens=293))" \
        in str(r.error)
    # usage: the prompts sent (their sum, the largest: never over the limit) and the refusal's figure
    assert r.usage["counted_prompt_tokens"] == 1404 and r.usage["max_prompt_tokens"] == 268
    assert r.usage["refused_prompt_tokens"] == 294


def test_a_reply_offering_tools_is_counted_with_its_tools_as_sent():
    def clock() -> str:
        """The time of day."""
        return "noon"

    with OpenAIServer([text("It is noon.")], max_lifetime=HANG_GUARD) as srv:
        agent = Agent("a", model="openai/test-model", api_base=srv.api_base, api_key="sk-test", num_retries=0,
                      max_input_tokens=1000, tools=[clock])
        r = RoundRobinSwarm(agents=[agent], max_loops=1).execute("What time is it?")
        srv.assert_clean()
    assert r.ok, r.error
    (body,) = srv.requests
    assert [t["function"]["name"] for t in body["tools"]] == ["clock"] and body["tool_choice"] == "auto"
    assert received_tokens(body) == 128  # 99 of them the messages, 29 the clock tool and the tool choice
    assert [e["tokens"] for e in r.events if e["event"] == "prompt_tokens"] == [128]
    assert r.usage["max_prompt_tokens"] == r.usage["counted_prompt_tokens"] == 128
    assert "refused_prompt_tokens" not in r.usage


# ---- context= on every pattern that sends a conversation ----
def test_round_robin_swarm_takes_a_context_policy():
    m = ScriptedModel({"a": ["a1"], "b": ["b1"], "c": ["c1"]})
    swarm = RoundRobinSwarm(agents=[m.agent("a"), m.agent("b"), m.agent("c")], context=LastMessages(1))
    assert swarm.context == LastMessages(1)
    assert from_config(to_config(swarm).model_dump()).context == LastMessages(1)  # it travels in configs
    r = swarm.execute("Plan the launch.")
    assert r.ok and [x.content for x in r.transcript] == ["Plan the launch.", "a1", "b1", "c1"]
    assert m.requests_of("b")[0].messages[:-1] == [msg("user", "Plan the launch."), msg("user", "a: a1")]
    # c sees the task and the last message only (a's is left out)
    assert m.requests_of("c")[0].messages[:-1] == [msg("user", "Plan the launch."), msg("user", "b: b1")]
    assert m.requests_of("c")[0].messages[-1]["content"].startswith("You are c")
    own = ScriptedModel({"a": ["a1"], "b": ["b1"], "c": ["c1"]})  # an agent's own policy takes precedence
    RoundRobinSwarm(agents=[own.agent("a"), own.agent("b"), own.agent("c", context="full")],
                    context=LastMessages(1)).execute("Plan the launch.")
    assert own.requests_of("c")[0].messages[:-1] == [msg("user", "Plan the launch."), msg("user", "a: a1"),
                                                    msg("user", "b: b1")]


def test_round_robin_swarm_summarizes_under_its_context_policy():
    words = " ".join(["word"] * 30)
    m = ScriptedModel({"a": [f"a{i} {words}" for i in range(3)], "b": [f"b{i} {words}" for i in range(3)],
                       "scribe": ["S1: a and b spoke."]}, max_input_tokens=400)
    swarm = RoundRobinSwarm(agents=[m.agent("a"), m.agent("b")], max_loops=3,
                            context=Summarize(agent=m.agent("scribe"), keep_last=1, at=0.4))
    assert list(swarm.graph.states) == ["seed", "a", "b", "stop", "compact_a", "compact_b"]
    assert swarm.max_calls() == 12  # 6 turns, and at most one compaction before each
    r = swarm.execute("Plan the launch.")
    assert r.ok and m.calls("scribe") == 1 and r.path.count("compact_b") == 1
    assert r.path == ["seed", "a", "b", "a", "b", "a", "b", "compact_b", "b", "stop"]
    assert m.requests_of("b")[2].messages[:-1] == [msg("user", "Plan the launch."),
                                                   msg("user", "Summary: S1: a and b spoke."),
                                                   msg("user", f"a: a2 {words}")]
    assert [e["tokens"] for e in r.events if e["event"] == "prompt_tokens"] == [91, 123, 159, 197, 233, 203, 143]


def test_round_robin_swarm_checks_its_policy_as_group_chat_does():
    with pytest.raises(ConfigError, match=r"RoundRobinSwarm: context='last' \(str\) is invalid: a context policy is "
                                          r"\"full\""):
        RoundRobinSwarm(agents=[Agent("a")], context="last")
    m = ScriptedModel({"a": ["a1"]})  # no window declared: Summarize has nothing to compact at
    swarm = RoundRobinSwarm(agents=[m.agent("a")], context=Summarize(agent=m.agent("s")))
    with pytest.raises(ConfigError, match=r"RoundRobinSwarm: agent 'a' follows Summarize, .* give the agent one"):
        swarm.execute("Plan.")
    assert m.calls() == 0


def test_one_on_one_debate_takes_a_context_policy_on_the_debaters_memories():
    m = ScriptedModel({"a": ["a-intro", "a1", "a2"], "b": ["b-intro", "b1", "b2"]})
    debate = OneOnOneDebate(max_loops=4, agents=[m.agent("a"), m.agent("b")], context=LastMessages(2))
    assert debate.context == LastMessages(2)
    r = debate.execute("Topic?")
    assert r.ok and [x.content for x in r.transcript] == ["a1", "b1", "a2", "b2"]
    intro = ("You are a, in a one-on-one debate against b. You will take turns: each message you receive is b's "
             "latest argument (the first one may be the debate topic), and each of your replies goes to b. Argue "
             "thoughtfully and concisely.")
    # a's third call: the first message of its memory (the introduction), its last two, then b's reply
    assert m.requests_of("a")[2].messages == [msg("user", intro), msg("user", "Topic?"), msg("assistant", "a1"),
                                              msg("user", "b1")]
    full = ScriptedModel({"a": ["a-intro", "a1", "a2"], "b": ["b-intro", "b1", "b2"]})
    OneOnOneDebate(max_loops=4, agents=[full.agent("a"), full.agent("b")]).execute("Topic?")
    assert full.requests_of("a")[2].messages == [msg("user", intro), msg("assistant", "a-intro"),
                                                 msg("user", "Topic?"), msg("assistant", "a1"), msg("user", "b1")]


def test_expert_panel_takes_a_context_policy_on_the_panelists_memories():
    m = ScriptedModel({"mod": ["mod-brief", "Round 1: Q?", "Follow-up?", "Round 2: Follow-up?", "Done."],
                       "e1": ["e1-brief", "e1-r1", "e1-r2"], "e2": ["e2-brief", "e2-r1", "e2-r2"]})
    panel = ExpertPanelDiscussion(max_rounds=2, agents=[m.agent("e1"), m.agent("e2")], moderator=m.agent("mod"),
                                  context=LastMessages(1))
    assert panel.context == LastMessages(1)
    r = panel.execute("Q?")
    assert r.ok and m.calls() == 11
    brief = ("You are e1, expert 1 of 2 on a panel moderated by mod. Other experts: e2. Each round, answer the "
             "moderator's question with your expert insight.")
    # e1's round-2 call: its briefing, its last message (its round-1 answer), then the round's question
    assert m.requests_of("e1")[2].messages == [msg("user", brief), msg("assistant", "e1-r1"),
                                               msg("user", "e1, please respond to mod:\n\nRound 2: Follow-up?")]


def debate(m, policy=None, **own):
    return OneOnOneDebate(max_loops=2, agents=[m.agent("a", **own), m.agent("b")], context=policy)


def panel(m, policy=None, **own):
    return ExpertPanelDiscussion(max_rounds=1, agents=[m.agent("a", **own), m.agent("b")], moderator=m.agent("mod"),
                                 context=policy)


@pytest.mark.parametrize("make, owner", [(debate, "OneOnOneDebate"), (panel, "ExpertPanelDiscussion")])
def test_summarize_is_refused_where_speakers_answer_from_private_memories(make, owner):
    m = ScriptedModel({"a": ["x"]}, max_input_tokens=400)
    policy = Summarize(agent=m.agent("s"))
    with pytest.raises(ConfigError, match=rf"{owner}: context=Summarize\(agent='s', keep_last=4, at=0.8\) is invalid "
                                          rf"here: {owner}'s speakers answer from private memories"):
        make(m, policy)
    pattern = make(m, context=policy)  # an agent's own Summarize: refused before any call
    with pytest.raises(ConfigError, match=rf"{owner}: agent 'a''s context=Summarize\(.*\) is invalid here: .*give "
                                          r"context=LastMessages\(n\)"):
        pattern.execute("Topic?")
    assert m.calls() == 0
