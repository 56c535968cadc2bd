"""GroupChat's recency window, with scripts where the window changes who speaks: a mutation that
ignores ``recency_window`` (or always uses 1) fails these plain tests."""
import pytest

from fsmchat import Bid, GroupChat


def scripted(name, bids):
    calls = iter(bids)

    def agent(turn):
        score, msg = next(calls)
        return Bid(score, msg)
    agent.__name__ = name
    return agent


def chat(window):
    # turn 1: a wins; turn 2: b wins; turn 3: a 0.9 vs c 0.7 -- a is penalized only if the
    # window still covers its turn-1 post (window >= 2): 0.9 - 0.3 = 0.6 < 0.7, so c speaks
    a = scripted("a", [(0.9, "a1"), (0.1, ""), (0.9, "a3")])
    b = scripted("b", [(0.1, ""), (0.9, "b2"), (0.1, "")])
    c = scripted("c", [(0.1, ""), (0.1, ""), (0.7, "c3")])
    return GroupChat(agents=[a, b, c], max_loops=4, recency_window=window)


@pytest.mark.parametrize("window, third", [(1, "a3"), (2, "c3"), (3, "c3")])
def test_window_decides_the_third_speaker(window, third):
    r = chat(window).execute("topic")
    assert [m.content for m in r.transcript] == ["topic", "a1", "b2", third]
    assert r.stop_reason == "max_loops"
    assert r.path.count("bid") == 3 and r.calls == 0  # callables make no model calls


def test_window_zero_is_refused_before_any_call():
    """recency_window counts the last posters penalized; 0 would silently mean 1, so it is refused."""
    with pytest.raises(ValueError, match=r"GroupChat: recency_window=0 is invalid: an int >= 1 \(how many of the "
                                         r"latest speakers the penalty applies to; swarms treats 0 as 1\)"):
        chat(0)
