"""fsmchat's own token count (``fsmchat.speakers.tokens``) is litellm's: for every request below,
``count_request`` gives the number ``litellm.token_counter(model="", ...)`` gives (this test imports
litellm to ask it; fsmchat's count never does), a few of them written out too, so a change on either
side shows. A request outside the rule written there is counted by litellm, and so are the models
whose tokenizer litellm ships (Anthropic's, DeepSeek's)."""
import base64
import json
import struct
import sys

import pytest

from fsmchat.speakers import tokens
from fsmchat.speakers.context import count_tokens
from fsmchat.speakers.llm import get_litellm
from fsmchat.speakers.modelmap import model_map


@pytest.fixture(scope="module")
def lm():
    return get_litellm()


def litellm_count(lm, messages, tools=None, tool_choice=None, model=""):
    return lm.token_counter(model=model, messages=messages, tools=tools, tool_choice=tool_choice)


def user(content, **more):
    return {"role": "user", "content": content, **more}


def data_url(mime, raw):
    return f"data:{mime};base64,{base64.b64encode(raw).decode()}"


def png(width, height):
    return b"\x89PNG\r\n\x1a\n" + b"\x00\x00\x00\rIHDR" + struct.pack(">LL", width, height) + b"\x08\x02\x00\x00\x00"


def gif(width, height):
    return b"GIF89a" + struct.pack("<HH", width, height) + b"\x00" * 8


def jpeg(width, height):
    app0 = b"\xff\xe0" + struct.pack(">H", 16) + b"JFIF\x00\x01\x01\x00\x00\x01\x00\x01\x00\x00"
    sof0 = b"\xff\xc0" + struct.pack(">H", 17) + b"\x08" + struct.pack(">HH", height, width) + b"\x03" + b"\x00" * 9
    return b"\xff\xd8" + app0 + sof0 + b"\xff\xd9"


def webp(width, height):
    vp8x = b"VP8X" + struct.pack("<I", 10) + b"\x00\x00\x00\x00" + struct.pack("<I", width - 1)[:3] \
        + struct.pack("<I", height - 1)[:3]
    return b"RIFF" + struct.pack("<I", 4 + len(vp8x)) + b"WEBP" + vp8x


ADD = {"type": "function", "function": {"name": "add", "description": "Add two integers.", "parameters": {
    "type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}}, "required": ["a", "b"]}}}
SEARCH = {"type": "function", "function": {"name": "search", "description": "Search the notes.", "parameters": {
    "type": "object", "required": ["query"], "properties": {
        "query": {"type": "string", "description": "What to look for"},
        "mode": {"type": "string", "enum": ["exact", "fuzzy"]},
        "limit": {"type": "integer", "enum": [5, 10, 20]},
        "tags": {"type": "array", "items": {"type": "string"}},
        "filters": {"type": "object", "description": "Narrow it", "required": ["since"], "properties": {
            "since": {"type": "string"}, "deep": {"type": "object", "properties": {"flag": {"type": "boolean"}}}}},
        "nothing": {"type": "null"}, "either": {"type": ["string", "null"]}, "untyped": {},
        "ratio": {"type": "number"}}}}}
NO_PARAMETERS = {"type": "function", "function": {"name": "clock"}}
EMPTY_PROPERTIES = {"type": "function", "function": {"name": "ping", "description": "Ping.",
                                                     "parameters": {"type": "object", "properties": {}}}}
RESPOND = {"type": "function", "function": {"name": "respond", "description": "Bid for the floor and say it.",
                                            "parameters": {"type": "object", "properties": {
                                                "bid": {"type": "number", "description": "0 to 1"},
                                                "message": {"type": "string"}}, "required": ["bid", "message"]}}}
CALLS = {"role": "assistant", "content": None, "tool_calls": [
    {"id": "call_1", "type": "function", "function": {"name": "add", "arguments": json.dumps({"a": 2, "b": 3})}},
    {"id": "call_2", "type": "function", "function": {"name": "search", "arguments": '{"query": "täglich 日本"}'}}]}
UNICODE = ("Grüße aus Köln, naïve café; 日本語のテキスト; 한국어; العربية; עברית; emoji 👩‍👩‍👧‍👦🎉🇫🇷; "
           "combining e\u0301; zero\u200bwidth; math ∑∫√∞; special-looking <|endoftext|> and <|fim_prefix|>")
LONG = " ".join(f"Sentence {i}: the plan needs a clear audience, a short message and a list of risks." for i in range(400))

# name -> (messages, tools, tool_choice): the requests whose counts must equal litellm's
CASES = {
    "plain": ([user("Hello there, how are you today?")], None, None),
    "system and turns": ([{"role": "system", "content": "You are the analyst. Weigh evidence."},
                          user("Cats or dogs?"), {"role": "assistant", "content": "Cats, on balance."},
                          user("Why?")], None, None),
    "names": ([user("Topic: tabs or spaces?", name="moderator"),
               {"role": "assistant", "name": "alice", "content": "Spaces."},
               {"role": "user", "name": "bob", "content": "Tabs."}], None, None),
    "tool calls with arguments": ([user("Add 2 and 3, then search."), CALLS], None, None),
    "tool results": ([user("Add 2 and 3."), CALLS,
                      {"role": "tool", "tool_call_id": "call_1", "content": "5"},
                      {"role": "tool", "tool_call_id": "call_2", "name": "search", "content": "no notes found"}],
                     None, None),
    "arguments given as a dict": ([{"role": "assistant", "tool_calls": [
        {"id": "c", "type": "function", "function": {"name": "add", "arguments": {"a": 1, "b": 2}}}]}], None, None),
    "legacy function_call": ([{"role": "assistant", "function_call": {"name": "add", "arguments": '{"a": 1}'}}],
                             None, None),
    "tools offered": ([user("Add 2 and 3")], [ADD], None),
    "tools with tool_choice auto": ([user("Add 2 and 3")], [ADD], "auto"),
    "tools with tool_choice required": ([user("Add 2 and 3")], [ADD, SEARCH], "required"),
    "tools with tool_choice none": ([user("Add 2 and 3")], [ADD], "none"),
    "tools with a named tool_choice": ([user("Bid.")], [RESPOND], {"type": "function", "function": {"name": "respond"}}),
    "tools and a system message": ([{"role": "system", "content": "You add."}, user("Add 2 and 3")], [ADD], "auto"),
    "every parameter type": ([user("Find my notes on launch plans")], [SEARCH, NO_PARAMETERS, EMPTY_PROPERTIES], None),
    "a tool that is not a mapping is left out": ([user("x")], [ADD, "not a tool"], None),
    "empty content": ([user(""), {"role": "assistant", "content": ""}], None, None),
    "no messages": ([], None, None),
    "empty content list": ([user([])], None, None),
    "unicode": ([user(UNICODE)], None, None),
    "a lone surrogate": ([user("broken \ud83d half")], None, None),
    "a long message": ([{"role": "system", "content": "Summarise."}, user(LONG)], None, None),
    "one repeated character over chunks": ([user("=" * 5000), user("a" * 1024), user("b" * 1025)], None, None),
    "content as a list of text parts": ([user([{"type": "text", "text": "Describe these two notes."}, "a bare string part",
                                               {"type": "text", "text": ""}, {"type": "text", "text": UNICODE}])],
                                        None, None),
    "thinking parts": ([{"role": "assistant", "content": [{"type": "thinking", "thinking": "Weigh it first."},
                                                          {"type": "redacted_thinking", "thinking": "xyz"},
                                                          {"type": "text", "text": "Cats."}]}], None, None),
    "other keys": ([{"role": "assistant", "content": "Cats.", "reasoning_content": "Because they purr.",
                     "audio": {"id": "a1"}, "index": 3, "annotations": []}], None, None),
    "images by URL and low detail": ([user([{"type": "text", "text": "What is this?"},
                                            {"type": "image_url", "image_url": {"url": "https://example.com/cat.png"}},
                                            {"type": "image_url", "image_url": "https://example.com/dog.jpg"},
                                            {"type": "image_url", "image_url": {"url": data_url("image/png", png(4000, 3000)),
                                                                                "detail": "low"}}])], None, None),
    "inline images by size": ([user([{"type": "image_url", "image_url": {"url": data_url("image/png", png(1024, 640))}},
                                     {"type": "image_url", "image_url": {"url": data_url("image/png", png(600, 4000))}},
                                     {"type": "image_url", "image_url": {"url": data_url("image/gif", gif(40, 30))}},
                                     {"type": "image_url", "image_url": {"url": data_url("image/jpeg", jpeg(3000, 2000)),
                                                                         "detail": "auto"}},
                                     {"type": "image_url", "image_url": {"url": data_url("image/webp", webp(800, 800))}},
                                     {"type": "image_url", "image_url": {"url": data_url("image/png", b"not an image")}},
                                     {"type": "image_url", "image_url": {"url": "data:image/png;base64,@@@"}},
                                     {"type": "image_url", "image_url": {"url": data_url("image/heic",
                                                                                         b"\x00\x00\x00\x18ftypheic")}}])],
                              None, None),
    "a group chat bid": ([{"role": "system", "content": "You are the critic."}, user("Plan the launch."),
                          {"role": "user", "content": "Analyst: We should start with the audience."},
                          user("It is your turn to bid: call respond with your bid and message.")],
                         [RESPOND], {"type": "function", "function": {"name": "respond"}}),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_the_count_is_litellms(name, lm):
    messages, tools, tool_choice = CASES[name]
    assert tokens.count_request(messages, tools, tool_choice) == litellm_count(lm, messages, tools, tool_choice)


def test_the_tools_are_written_out_as_litellm_writes_them_to_count_them(lm):
    """The text, not only its count (``b?: number`` and ``b: number`` may count the same)."""
    from litellm.litellm_core_utils import token_counter as tc

    offered = [tools for _, tools, _ in CASES.values() if tools]
    assert len(offered) >= 8
    for tools in offered:
        assert tokens.function_definitions(tools) == tc._format_function_definitions(tools)


def test_a_few_counts_written_out():
    """The numbers themselves (litellm's as of its 1.110 release): a change in either count shows here."""
    written = {name: tokens.count_request(*CASES[name]) for name in
               ("plain", "names", "tool results", "tools with tool_choice auto", "tools with a named tool_choice",
                "tools and a system message", "every parameter type", "unicode", "a long message",
                "inline images by size")}
    assert written == {"plain": 15, "names": 32, "tool results": 60, "tools with tool_choice auto": 52,
                       "tools with a named tool_choice": 67, "tools and a system message": 55,
                       "every parameter type": 138, "unicode": 106, "a long message": 8045,
                       # 1105 + 765 + 255 + 1105 + 765 (85 + 170 per tile) + 3 x 85 (unreadable), the message's 3 + 1 + 3
                       "inline images by size": 4257}


def test_the_rules_constants_are_litellms(lm):
    from litellm import constants
    from litellm.litellm_core_utils import token_counter as tc

    assert tokens.CHUNK_CHARS == constants.TIKTOKEN_ENCODE_CHUNK_SIZE_CHARS
    assert tokens.MAX_EXACT_CHARS == constants.TOKEN_COUNTER_MAX_EXACT_CHARS and tokens.SAMPLES == tc.EXTRAPOLATION_SAMPLES
    assert (tokens.SHORT_SIDE, tokens.LONG_SIDE, tokens.TILE, tokens.TILE) == (
        constants.MAX_SHORT_SIDE_FOR_IMAGE_HIGH_RES, constants.MAX_LONG_SIDE_FOR_IMAGE_HIGH_RES,
        constants.MAX_TILE_WIDTH, constants.MAX_TILE_HEIGHT)
    assert tokens.MAX_IMAGE_BYTES == int(constants.MAX_IMAGE_URL_DOWNLOAD_SIZE_MB * 1024 * 1024)
    assert tokens.DEFAULT_IMAGE_SIZE == (constants.DEFAULT_IMAGE_WIDTH, constants.DEFAULT_IMAGE_HEIGHT)
    assert tokens.DEEPSEEK.pattern == lm.utils._DEEPSEEK_TOKENIZER_MODEL.pattern
    assert tc.openai_tokenizer_encoding("").name == tokens.encoding().name == "cl100k_base"


def test_a_text_past_the_exact_limit_is_extrapolated_as_litellm_does(lm, monkeypatch):
    """Over TOKEN_COUNTER_MAX_EXACT_CHARS (4,000,000 characters) both count 16 samples and scale; the
    limit is lowered on both sides here so the test encodes 20,000 characters, not 4 million."""
    from litellm.litellm_core_utils import token_counter as tc

    monkeypatch.setattr(tc._get_extrapolating_count_function, "__defaults__", (20_000,))
    monkeypatch.setattr(tokens, "MAX_EXACT_CHARS", 20_000)
    messages = [user(LONG + UNICODE * 300)]
    assert len(messages[0]["content"]) > 50_000
    assert tokens.count_request(messages) == litellm_count(lm, messages)
    monkeypatch.undo()
    assert tokens.count_request(messages) == litellm_count(lm, messages)  # under the real limit: exact on both


# name -> (messages, tools): requests outside the rule written in fsmchat (litellm counts them)
OUTSIDE = {
    "a file part": ([user([{"type": "file", "file": {"filename": "notes.txt", "file_data": "data:text/plain;base64,aGk="}}])],
                    None),
    "an Anthropic tool_use part": ([{"role": "assistant", "content": [
        {"type": "tool_use", "id": "t1", "name": "add", "input": {"a": 1, "b": 2}}]}], None),
    "an image of detail high": ([user([{"type": "image_url", "image_url": {"url": data_url("image/png", png(1024, 640)),
                                                                           "detail": "high"}}])], None),
    "a tool in Gemini's form": ([user("x")], [{"function_declarations": [{"name": "add", "parameters": {}}]}]),
    "a tool in Anthropic's form": ([user("x")], [{"name": "add", "input_schema": {"type": "object", "properties": {}}}]),
}


@pytest.mark.parametrize("name", sorted(OUTSIDE))
def test_a_request_outside_the_rule_is_counted_by_litellm(name, lm):
    messages, tools = OUTSIDE[name]
    assert tokens.count_request(messages, tools) is None
    assert count_tokens("gpt-4o-mini", messages, tools) == litellm_count(lm, messages, tools)


def test_a_part_litellm_refuses_is_refused_as_before():
    messages = [user([{"type": "input_audio", "input_audio": {"data": "aGk=", "format": "wav"}}])]
    assert tokens.count_request(messages) is None
    with pytest.raises(ValueError, match="Invalid content item type: input_audio"):
        count_tokens("gpt-4o-mini", messages)


def test_litellms_own_tuning_of_the_count_leaves_it_to_litellm(monkeypatch):
    messages = CASES["plain"][0]
    monkeypatch.setenv("TIKTOKEN_ENCODE_CHUNK_SIZE_CHARS", "512")
    assert tokens.count_request(messages) is None
    monkeypatch.delenv("TIKTOKEN_ENCODE_CHUNK_SIZE_CHARS")
    assert tokens.count_request(messages) == 15


def test_count_tokens_counts_the_request_as_sent_with_its_tools(lm):
    messages, tools, tool_choice = CASES["tools with a named tool_choice"]
    with_none = [{**m, "name": None} for m in messages]  # sent without the None values
    assert count_tokens("openai/test-model", with_none, tools, tool_choice) == \
        litellm_count(lm, messages, tools, tool_choice) == 67
    assert count_tokens("openai/test-model", messages, None, tool_choice) == litellm_count(lm, messages)  # no tools


def test_the_tokenizer_kind_is_litellms_for_every_model_of_its_map(lm):
    names = sorted(model_map()) + ["deepseek-chat", "deepseek/deepseek-reasoner", "openrouter/deepseek/deepseek-chat:free",
                                   "DeepSeek-V3", "replicate/meta/llama-2-70b", "groq/llama-3-70b", "command-r",
                                   "fsmchat-offline/default", "openai/test-model", ""]
    differ = [n for n in names if tokens.tokenizer_kind(n) != lm.utils.huggingface_tokenizer_kind(n)]
    assert differ == []
    kinds = {tokens.tokenizer_kind(n) for n in names}
    assert {"anthropic", "deepseek", None} <= kinds


@pytest.mark.parametrize("model", ["claude-sonnet-4-5", "deepseek/deepseek-chat"])
def test_models_with_a_tokenizer_litellm_ships_are_counted_by_litellm_with_it(model, lm):
    messages, tools, tool_choice = CASES["tools with a named tool_choice"]
    assert tokens.tokenizer_kind(model) in tokens.BUNDLED_TOKENIZERS
    assert count_tokens(model, messages, tools, tool_choice) == \
        litellm_count(lm, messages, tools, tool_choice, model=model)
    assert "litellm" in sys.modules


def test_litellms_switch_off_of_its_counter_is_kept(lm, monkeypatch):
    monkeypatch.setattr(lm, "disable_token_counter", True)
    assert count_tokens("gpt-4o-mini", CASES["plain"][0]) == 0 == litellm_count(lm, CASES["plain"][0])
