"""A request's view of the conversation is built once per message and reader: the client's per-request
work does not grow with the history it has already shown (the rows of a Transcript are append-only)."""
import fsmchat.speakers.agent as agent_mod
from fsmchat import Transcript
from fsmchat.speakers import Turn, conversation_view
from fsmchat.speakers.agent import shared_view


def counting(monkeypatch):
    calls = []
    real = agent_mod.view_row

    def row(reader, m):
        calls.append((reader, m.content))
        return real(reader, m)

    monkeypatch.setattr(agent_mod, "view_row", row)
    return calls


def test_each_message_is_shown_once_per_reader_across_requests(monkeypatch):
    calls = counting(monkeypatch)
    t = Transcript()
    t.post("User", "Plan a picnic.")
    t.post("Critic", "Too big.")
    t.post("system", "a note for the log")
    first = shared_view("Dev", t.view())
    assert first == [{"role": "user", "content": "Plan a picnic."}, {"role": "user", "content": "Critic: Too big."}]
    assert calls == [("Dev", "Plan a picnic."), ("Dev", "Too big."), ("Dev", "a note for the log")]

    t.post("Dev", "Then twelve.")
    second = shared_view("Dev", t.view())
    assert len(calls) == 4 and calls[-1] == ("Dev", "Then twelve.")  # only the new message was built
    assert second[-1] == {"role": "assistant", "content": "Then twelve."}
    assert second[0] is first[0] and second is not first  # rows shared, the list new
    public = conversation_view("Dev", t.view())
    assert public == second and public[0] is not second[0]  # the public view: new dicts, yours to change

    conversation_view("Critic", t.view())
    assert [c for c in calls if c[0] == "Critic"] == [("Critic", "Plan a picnic."), ("Critic", "Too big."),
                                                     ("Critic", "a note for the log"), ("Critic", "Then twelve.")]
    assert len(calls) == 8


def test_an_older_view_shows_only_its_messages_and_a_plain_list_is_built_each_time(monkeypatch):
    calls = counting(monkeypatch)
    t = Transcript()
    t.post("User", "Plan a picnic.")
    early = t.view()
    t.post("Critic", "Too big.")
    conversation_view("Dev", t.view())
    assert conversation_view("Dev", early) == [{"role": "user", "content": "Plan a picnic."}]
    assert conversation_view("Dev", t) == [{"role": "user", "content": "Plan a picnic."},
                                           {"role": "user", "content": "Critic: Too big."}]
    assert len(calls) == 2
    rows = t.messages
    conversation_view("Dev", rows)
    conversation_view("Dev", rows)
    assert len(calls) == 6  # a list is no transcript: built on each call


def test_a_request_or_a_speaker_changing_its_messages_leaves_the_next_request_intact():
    t = Transcript()
    t.post("User", "Plan a picnic.")
    t.post("Critic", "Too big.")
    turn = Turn(agent="Dev", transcript=t.view(), instruction="Your turn.")
    sent = turn.request_messages("Be brief.")
    sent.append({"role": "assistant", "content": None, "tool_calls": []})  # a tool round, as the tool loop adds
    sent.pop(0)
    sent[0]["content"] = "changed by a speaker"  # request_messages gives new dicts
    mine = conversation_view("Dev", t.view())
    mine[1]["content"] = "changed again"
    rows = Turn(agent="Dev", transcript=t.view(), instruction="x").request_rows("Be brief.")
    assert rows[1] == {"role": "user", "content": "Plan a picnic."} and rows[2]["content"] == "Critic: Too big."
    again = Turn(agent="Dev", transcript=t.view(), instruction="Again.").request_messages("Be brief.")
    assert again == [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Plan a picnic."},
                     {"role": "user", "content": "Critic: Too big."}, {"role": "user", "content": "Again."}]


def test_a_provider_changing_the_messages_in_place_leaves_the_next_request_intact():
    """litellm's prompt templates may change the messages they are given (merging consecutive user
    messages in place): the rows a request shares with the next one must not change with them
    (litellm's ``completion`` rebuilds each message before a provider sees it; this pins that)."""
    import litellm

    from fsmchat import Agent, RoundRobinSwarm
    from fsmchat.speakers import llm

    seen = []

    class Merging(litellm.CustomLLM):
        async def acompletion(self, *args, **kwargs):
            messages = kwargs["messages"]
            seen.append([dict(m) for m in messages])
            for m in messages:
                m["content"] = "merged away"  # what an in-place template does to the dicts it is given
            return litellm.ModelResponse(choices=[{"message": {"role": "assistant", "content": f"reply {len(seen)}"}}])

    llm.register_provider("merging-provider", Merging())
    agents = [Agent(n, model="merging-provider/m", num_retries=0) for n in ("alice", "bob")]
    result = RoundRobinSwarm(agents=agents, max_loops=2).execute("Plan a picnic.")
    assert result.ok, result.error
    assert len(seen) == 4
    assert [m["content"][:14] for m in seen[2]] == ["Plan a picnic.", "reply 1", "bob: reply 2", "You are alice,"]
    assert [m["content"][:14] for m in seen[3]] == ["Plan a picnic.", "alice: reply 1", "reply 2", "alice: reply 3",
                                                    "You are bob, a"]


def test_a_transcript_with_a_built_view_copies_and_pickles_and_its_copy_shows_the_same():
    import copy
    import pickle

    t = Transcript()
    t.post("User", "Plan a picnic.")
    t.post("Critic", "Too big.")
    first = conversation_view("Dev", t.view())
    for twin in (copy.deepcopy(t), pickle.loads(pickle.dumps(t))):
        twin.post("Dev", "Then twelve.")
        assert conversation_view("Dev", twin.view()) == first + [{"role": "assistant", "content": "Then twelve."}]
    assert conversation_view("Dev", t.view()) == first
