"""The typed JSON readers of ``fsmchat.checks``: each returns the value it reads or names where it is wrong."""
import pytest

from fsmchat.checks import (as_list, as_object, get_bool, get_float, get_int, get_list, get_object, get_opt_str,
                            get_str)
from fsmchat.errors import JsonShapeError


def test_readers_return_what_they_read():
    row = {"s": "x", "n": 3, "f": 2, "b": False, "o": {"k": 1}, "l": [1], "none": None}
    assert get_str(row, "s", "row") == "x"
    assert get_opt_str(row, "none", "row") is None and get_opt_str(row, "missing", "row") is None
    assert get_int(row, "n", "row") == 3 and get_int(row, "missing", "row", 7) == 7
    assert get_float(row, "f", "row") == 2.0 and type(get_float(row, "f", "row")) is float
    assert get_bool(row, "b", "row") is False and get_bool(row, "none", "row", True) is True
    assert get_object(row, "o", "row") == {"k": 1} and get_list(row, "l", "row") == [1]
    assert as_object(row, "row") is row and as_list(row["l"], "row.l") is row["l"]


@pytest.mark.parametrize("read, message", [
    (lambda: get_str({"s": 1}, "s", "row 2"), "row 2.s: expected a string, got int"),
    (lambda: get_str({}, "s", "row"), "row.s: expected a string, got null"),
    (lambda: get_opt_str({"s": ["sk-secret"]}, "s", "row"), "row.s: expected a string or null, got list"),
    (lambda: get_int({"n": True}, "n", "usage"), "usage.n: expected an integer, got bool"),
    (lambda: get_int({"n": 1.5}, "n", "usage", 0), "usage.n: expected an integer, got float"),
    (lambda: get_float({"c": "1"}, "c", "usage"), "usage.c: expected a number, got str"),
    (lambda: get_bool({"b": 0}, "b", "row"), "row.b: expected a boolean, got int"),
    (lambda: get_object({"o": []}, "o", "body"), "body.o: expected an object, got list"),
    (lambda: get_list({}, "l", "body"), "body.l: expected an array, got null"),
    (lambda: as_object("sk-secret", "payload"), "payload: expected an object, got str"),
])
def test_a_misfit_names_where_and_what_never_the_value(read, message):
    with pytest.raises(JsonShapeError) as caught:
        read()
    assert str(caught.value) == message
    assert isinstance(caught.value, TypeError)


def test_optional_parts_read_as_empty_when_absent_and_refuse_a_misfit():
    from fsmchat.checks import as_opt_list, as_opt_object

    assert as_opt_object(None, "state.x") == {} and as_opt_list(None, "state.x") == []
    with pytest.raises(JsonShapeError, match=r"^state.x: expected an object, got list$"):
        as_opt_object([], "state.x")
    with pytest.raises(JsonShapeError, match=r"^state.x: expected an array, got str$"):
        as_opt_list("ab", "state.x")


def test_a_tool_loop_restored_from_a_damaged_checkpoint_says_where_instead_of_forgetting_its_calls():
    """A tool loop's stored exchanges are what keeps a resume from repeating a committed call: a part
    of the wrong shape is an error naming it, never read as "no calls"."""
    from fsmchat.speakers.tool_loop import ToolLoop

    loop = ToolLoop()
    loop.restore({"exchanges": None, "offered": {}, "digests": {}, "last": {}})  # absent parts: an older checkpoint
    assert loop.exchanges == {}
    with pytest.raises(JsonShapeError, match=r"^tool loop exchanges: expected an object, got list$"):
        ToolLoop().restore({"exchanges": [["alice", {}]]})
    with pytest.raises(JsonShapeError, match=r"^exchange.calls: expected an array, got str$"):
        ToolLoop().restore({"exchanges": {"alice": {"speaker": "alice", "calls": "c1"}}})


@pytest.mark.parametrize("state, message", [
    ({"exchanges": {"alice": None}}, "tool loop exchange: expected an object, got null"),
    ({"exchanges": {"alice": {"speaker": "alice", "calls": ["c1"]}}}, "exchange.calls: expected an object, got str"),
    ({"exchanges": {"alice": {"speaker": "alice", "messages": [["assistant"]]}}},
     "exchange.messages: expected an object, got list"),
    ({"exchanges": {"alice": {"speaker": "alice", "rounds": "3"}}}, "exchange.rounds: expected an integer, got str"),
    ({"exchanges": {"alice": {"rounds": 1}}}, "exchange.speaker: expected a string, got null"),
    ({"last": {"alice": [None]}}, "tool loop last: expected an object, got null"),
])
def test_no_damaged_part_of_a_stored_tool_exchange_is_dropped_or_defaulted(state, message):
    """A call dropped on resume would run again, a round count reset would allow more rounds than the bound."""
    from fsmchat.speakers.tool_loop import ToolLoop

    with pytest.raises(JsonShapeError) as caught:
        ToolLoop().restore(state)
    assert str(caught.value) == message


def test_scripted_people_restored_from_a_damaged_checkpoint_say_where():
    from fsmchat.speakers.human import People

    people = People.__new__(People)
    people.used = {}
    people.restore({"used": {"bob": 2}})
    assert people.used == {"bob": 2}
    with pytest.raises(JsonShapeError, match=r"^people.used.bob: expected an integer, got str$"):
        people.restore({"used": {"bob": "2"}})
    with pytest.raises(JsonShapeError, match=r"^people: expected an object, got list$"):
        people.restore({"used": []})
