"""Layer 10, speakers: the tokens of a chat request, counted as litellm's ``token_counter`` counts
them, without importing litellm.

fsmchat counts each request before it is sent (``fsmchat.speakers.context.check_prompt``). For every
model whose tokenizer litellm does not ship, litellm's count is tiktoken's ``cl100k_base`` applied
to the request by one rule (``litellm.token_counter(model="", ...)``, litellm's
``litellm_core_utils/token_counter.py``). That rule is written out here, so a count costs the
tokenizer's work and not litellm's import (seconds):

- every message: 3 tokens, the tokens of each of its text values (``role``, ``content``,
  ``tool_call_id``...; a ``name`` one more), and the ``arguments`` of each of its tool calls. A
  content given as a list of parts counts its text parts and its images: 85 for an image by URL
  or of ``detail="low"``; an inline (``data:``) PNG, GIF, JPEG or WebP by its size, 85 plus 170 per
  512-pixel tile once it is fitted within 2000 x 768 pixels (nothing is fetched);
- the reply's primer: 3;
- the tools offered: their functions written as TypeScript-like declarations
  (``namespace functions { type add = (_: {a: number, ...}) => any; }``), plus 9, less 4 when a
  system message is present;
- the tool choice: ``"none"`` 1, a named function 7 plus its name.

Each text is encoded in chunks of 1,024 characters, and one of over 4,000,000 characters is
extrapolated from 16 evenly spaced samples of it, as litellm does. A request outside the rule
(documents, files, audio, an image of ``detail="high"``, which litellm downloads to measure, a
tool not in the OpenAI ``{"type": "function", "function": ...}`` form, a malformed part), or one
counted while litellm's own tuning of the count is set in the environment (``LITELLM_KNOBS``),
is not counted here (``count_request`` returns None) and the caller asks litellm.

The encoding is read once from the file litellm ships (its ``litellm_core_utils/tokenizers``
folder, found without importing litellm; ``CUSTOM_TIKTOKEN_CACHE_DIR`` names another, as for
litellm): nothing is downloaded. Models whose tokenizer litellm ships (Anthropic's, DeepSeek's:
``tokenizer_kind``) are counted by litellm with that tokenizer.
"""
from __future__ import annotations

import base64
import importlib.util
import os
import re
import struct
import threading
from functools import lru_cache
from typing import TYPE_CHECKING, Iterable, Mapping, Sequence

from ..errors import FsmchatError
from . import modelmap

if TYPE_CHECKING:
    import tiktoken

BUNDLED_TOKENIZERS = frozenset({"anthropic", "deepseek"})
"""litellm's tokenizer kinds that ship with it: litellm counts those models with them; every other
model is counted with tiktoken's ``cl100k_base``, which also ships with litellm (no tokenizer is
ever downloaded)."""

ENCODING = "cl100k_base"
"""The tiktoken encoding litellm counts with for every model whose tokenizer it does not ship."""

BUNDLED_FOLDER = os.path.join("litellm_core_utils", "tokenizers")
"""Where in litellm's package its tokenizer files are (``cl100k_base``'s among them)."""

LITELLM_KNOBS = ("TIKTOKEN_ENCODE_CHUNK_SIZE_CHARS", "TOKEN_COUNTER_MAX_EXACT_CHARS", "MAX_IMAGE_URL_DOWNLOAD_SIZE_MB",
                 "MAX_SHORT_SIDE_FOR_IMAGE_HIGH_RES", "MAX_LONG_SIDE_FOR_IMAGE_HIGH_RES", "MAX_TILE_WIDTH",
                 "MAX_TILE_HEIGHT")
"""litellm's environment settings of its count (chunk size, extrapolation, image sizes): with any
of them set, litellm counts (with them)."""

CHUNK_CHARS = 1024  # litellm's TIKTOKEN_ENCODE_CHUNK_SIZE_CHARS
MAX_EXACT_CHARS = 4_000_000  # litellm's TOKEN_COUNTER_MAX_EXACT_CHARS: longer texts are extrapolated
SAMPLES = 16  # litellm's EXTRAPOLATION_SAMPLES
TOKENS_PER_MESSAGE, TOKENS_PER_NAME, REPLY_PRIMER = 3, 1, 3
TOOLS_OVERHEAD, SYSTEM_TOOLS_DISCOUNT = 9, 4
IMAGE_BASE, IMAGE_TILE = 85, 170  # litellm's calculate_img_tokens: base tokens, and twice that per tile
SHORT_SIDE, LONG_SIDE, TILE = 768, 2000, 512  # litellm's MAX_SHORT/LONG_SIDE_FOR_IMAGE_HIGH_RES, MAX_TILE_*
MAX_IMAGE_BYTES = int(50.0 * 1024 * 1024)  # litellm's MAX_IMAGE_URL_DOWNLOAD_SIZE_MB
DEFAULT_IMAGE_SIZE = (300, 300)  # litellm's DEFAULT_IMAGE_WIDTH/HEIGHT, for an image whose size it cannot read
CACHED_CHARS = 4096  # texts up to this long keep their count (a conversation is counted again every turn)
TEXT_FIELDS = {"text": "text", "thinking": "thinking", "redacted_thinking": "thinking", "compaction": "content"}
DEEPSEEK = re.compile(r"deepseek[-_.](?:chat[-_.])?v[34]|(?:^|/)deepseek-(?:chat|reasoner|flash)(?::free)?$",
                      re.IGNORECASE)  # litellm's _DEEPSEEK_TOKENIZER_MODEL

_lock = threading.Lock()
_encoding: tiktoken.Encoding | None = None


class Uncounted(FsmchatError):
    """A request (or a part of one) outside the rule written here: litellm counts it.

    Examples:
        >>> from fsmchat.speakers.tokens import Uncounted, function_definitions
        >>> try:
        ...     function_definitions([{"function_declarations": [{"name": "add"}]}])
        ... except Uncounted as exc:
        ...     print(exc)
        a tool not in the OpenAI form
    """


def tokenizer_kind(model: str, listed: bool = True) -> str | None:
    """The Hugging Face tokenizer litellm picks for ``model`` (``"cohere"``, ``"anthropic"``,
    ``"deepseek"``, ``"llama2"``, ``"llama3"``), or None for tiktoken: litellm's
    ``huggingface_tokenizer_kind``, decided without importing litellm. Only the kinds of
    ``BUNDLED_TOKENIZERS`` are used as they are; litellm counts every other model with
    ``cl100k_base`` (fsmchat never lets it download a tokenizer).

    Args:
        model: The litellm model string (``claude-sonnet-4-5``, ``deepseek/deepseek-chat``...).
        listed: Whether ``model`` may be in litellm's model map (False for fsmchat's own providers,
            whose models never are: the map is then not read).

    Examples:
        >>> from fsmchat.speakers.tokens import tokenizer_kind
        >>> tokenizer_kind("claude-sonnet-4-5"), tokenizer_kind("deepseek/deepseek-chat")
        ('anthropic', 'deepseek')
        >>> tokenizer_kind("gpt-4o-mini"), tokenizer_kind("claude-3-5-sonnet-20240620"), tokenizer_kind("llama-3-8b")
        (None, None, 'llama3')
    """
    provider = None
    if listed:
        entry = modelmap.model_map().get(model)
        provider = entry.get("litellm_provider") if isinstance(entry, dict) else None
    if provider == "cohere" and "command-r" in model:
        return "cohere"
    if provider == "anthropic" and "claude-3" not in model:
        return "anthropic"
    if DEEPSEEK.search(model):
        return "deepseek"
    lower = model.lower()
    if "llama-2" in lower or "replicate" in lower:
        return "llama2"
    if "llama-3" in lower:
        return "llama3"
    return None


def tokenizer_folder() -> str | None:
    """The folder of the tokenizer files litellm ships, found without importing litellm (None when
    litellm is not installed).

    Examples:
        >>> from fsmchat.speakers.tokens import tokenizer_folder
        >>> sorted(os.listdir(tokenizer_folder()))[:1]
        ['9b5ad71b2ce5302211f9c61530b329a4922fc6a4']
    """
    spec = importlib.util.find_spec("litellm")  # a top-level name: found, not imported
    for location in (spec.submodule_search_locations or []) if spec is not None else []:
        folder = os.path.join(location, BUNDLED_FOLDER)
        if os.path.isdir(folder):
            return folder
    return None


def encoding() -> tiktoken.Encoding:
    """tiktoken's ``cl100k_base``, loaded once, the way litellm loads it: from the file litellm ships
    (``TIKTOKEN_CACHE_DIR`` pointed at its folder while the encoding loads), never downloaded.

    Raises:
        Uncounted: litellm is not installed (so neither is its copy of the encoding).

    Examples:
        >>> from fsmchat.speakers.tokens import encoding
        >>> encoding().name, len(encoding().encode_ordinary("hello world"))
        ('cl100k_base', 2)
    """
    global _encoding
    if _encoding is None:
        with _lock:
            if _encoding is None:
                _encoding = _load_encoding()
    return _encoding


def _load_encoding() -> tiktoken.Encoding:
    folder = os.environ.get("CUSTOM_TIKTOKEN_CACHE_DIR") or tokenizer_folder()
    if folder is None:
        raise Uncounted("litellm is not installed: no copy of cl100k_base")
    try:
        import tiktoken
    except ModuleNotFoundError as exc:  # it comes with litellm
        raise Uncounted("tiktoken is not installed") from exc
    before = os.environ.get("TIKTOKEN_CACHE_DIR")
    os.environ["TIKTOKEN_CACHE_DIR"] = folder
    try:
        return tiktoken.get_encoding(ENCODING)
    finally:
        if before is None:
            os.environ.pop("TIKTOKEN_CACHE_DIR", None)
        else:
            os.environ["TIKTOKEN_CACHE_DIR"] = before


def count_text(text: str) -> int:
    """The tokens of ``text`` as litellm counts a text of a request: ``cl100k_base`` over chunks of
    1,024 characters (special tokens read as plain text), and over 4,000,000 characters the count
    of 16 evenly spaced samples scaled to the whole.

    Args:
        text: Any text.

    Raises:
        Uncounted: litellm is not installed (so neither is its copy of the encoding).

    Examples:
        >>> from fsmchat.speakers.tokens import count_text
        >>> count_text("Hello there, how are you today?"), count_text("")
        (8, 0)
    """
    if len(text) <= CACHED_CHARS:
        return _cached_count(text)
    if len(text) <= MAX_EXACT_CHARS:
        return _chunked_count(text)
    count = min(SAMPLES, MAX_EXACT_CHARS)
    sample_chars = MAX_EXACT_CHARS // count
    last_start = len(text) - sample_chars
    samples = [text[start:start + sample_chars]
               for start in (last_start * i // max(count - 1, 1) for i in range(count))]
    return round(sum(_chunked_count(s) for s in samples) * len(text) / sum(len(s) for s in samples))


@lru_cache(maxsize=4096)
def _cached_count(text: str) -> int:
    return _chunked_count(text)


def _chunked_count(text: str) -> int:
    enc = encoding()
    return sum(len(enc.encode_ordinary(text[start:start + CHUNK_CHARS])) for start in range(0, len(text), CHUNK_CHARS))


def count_request(messages: Sequence[object], tools: Sequence[object] | None = None,
                  tool_choice: object = None) -> int | None:
    """The tokens of a chat request (as sent: no message value None) as ``litellm.token_counter``
    counts them for a model without a tokenizer of litellm's own (the rule of the module's
    docstring), or None for a request outside that rule (litellm counts it then).

    Args:
        messages: The chat messages (dicts: ``role``, ``content``, ``name``, ``tool_calls``...).
        tools: The tools offered (OpenAI form), or None.
        tool_choice: The tool choice sent, or None.

    Examples:
        >>> from fsmchat.speakers.tokens import count_request
        >>> count_request([{"role": "user", "content": "Hello there, how are you today?"}])
        15
        >>> add = {"type": "function", "function": {"name": "add", "description": "Add two integers.",
        ...        "parameters": {"type": "object", "properties": {"a": {"type": "integer"}},
        ...                       "required": ["a"]}}}
        >>> count_request([{"role": "user", "content": "Add 2 and 3"}], tools=[add], tool_choice="auto")
        48
        >>> count_request([{"role": "user", "content": [{"type": "file", "file": {"file_id": "f1"}}]}]) is None
        True
    """
    if any(knob in os.environ for knob in LITELLM_KNOBS):
        return None
    try:
        total = sum(_message_tokens(m) for m in messages) + REPLY_PRIMER
        if tools:
            system = any(isinstance(m, dict) and m.get("role") == "system" for m in messages)
            total += count_text(function_definitions(tools)) + TOOLS_OVERHEAD - (SYSTEM_TOOLS_DISCOUNT if system else 0)
        return total + _tool_choice_tokens(tool_choice)
    except Uncounted:
        return None


def _message_tokens(message: object) -> int:
    if not isinstance(message, dict):
        raise Uncounted("a message that is not a dict")
    total = TOKENS_PER_MESSAGE
    for key, value in message.items():
        if value is None:
            continue
        if key in ("tool_calls", "function_call"):
            total += _call_arguments_tokens(key, value)
        elif isinstance(value, str):
            total += count_text(value) + (TOKENS_PER_NAME if key == "name" else 0)
        elif key == "content" and isinstance(value, list):
            total += _parts_tokens(value)
        elif key == "provider_specific_fields" or (key == "search_results" and isinstance(value, list)):
            raise Uncounted(key)
        # any other value (a number, a dict, a list under another key) is not counted
    return total


def _call_arguments_tokens(key: str, value: object) -> int:
    """The ``arguments`` of a message's tool calls (or legacy ``function_call``): only they count."""
    if key == "function_call":
        if not isinstance(value, Mapping):
            raise Uncounted(key)
        return count_text(str(value.get("arguments", "")))
    if not isinstance(value, list):
        raise Uncounted(key)
    total = 0
    for call in value:
        function = call.get("function") if isinstance(call, dict) else None
        if not isinstance(function, Mapping):
            raise Uncounted("a tool call without a function")
        total += count_text(str(function.get("arguments", "")))
    return total


def _parts_tokens(parts: list[object]) -> int:
    total = 0
    for part in parts:
        if isinstance(part, str):
            total += count_text(part)
            continue
        if not isinstance(part, Mapping) or not isinstance(kind := part.get("type"), str):
            raise Uncounted("a content part without a type")
        if kind in TEXT_FIELDS:
            text = str(part.get(TEXT_FIELDS[kind]) or "")
            total += count_text(text) if text else 0
        elif kind == "image_url":
            total += _image_tokens(part.get("image_url"))
        else:
            raise Uncounted(f"a {kind} part")
    return total


def _image_tokens(image: object) -> int:
    """An ``image_url`` part: 85 for ``detail="low"`` or an image by URL, else its tiles."""
    if isinstance(image, Mapping):
        detail, url = image.get("detail", "auto"), image.get("url")
        if detail not in ("low", "auto") or not url or not isinstance(url, str):
            raise Uncounted("an image of detail high (litellm downloads it), or a malformed one")
        if detail == "low":
            return IMAGE_BASE
    elif isinstance(image, str) and image.strip():
        url = image
    else:
        raise Uncounted("a malformed image part")
    size = inline_image_size(url)
    if size is None:
        return IMAGE_BASE
    width, height = fitted(*size)
    tiles = -(-width // TILE) * -(-height // TILE)
    return IMAGE_BASE + IMAGE_TILE * tiles


def inline_image_size(url: str) -> tuple[int, int] | None:
    """(width, height) of an inline ``data:image/...;base64,`` PNG, GIF, JPEG or WebP of at most
    50 MB, read from its bytes; None for anything else (a URL is never fetched).

    Args:
        url: An image part's URL.

    Examples:
        >>> from fsmchat.speakers.tokens import inline_image_size
        >>> import base64, struct
        >>> png = b"\\x89PNG\\r\\n\\x1a\\n" + b"\\0\\0\\0\\rIHDR" + struct.pack(">LL", 1024, 640)
        >>> inline_image_size("data:image/png;base64," + base64.b64encode(png).decode())
        (1024, 640)
        >>> inline_image_size("https://example.com/cat.png") is None
        True
    """
    if not url.startswith("data:image/"):
        return None
    max_encoded = 4 * ((MAX_IMAGE_BYTES + 2) // 3)
    if len(url) > max_encoded + 128:
        return None
    header, comma, encoded = url.partition(",")
    if not comma or len(header) > 128 or not header.endswith(";base64") or len(encoded) > max_encoded:
        return None
    try:
        data = base64.b64decode(encoded, validate=True)
        if len(data) > MAX_IMAGE_BYTES or image_type(data) not in ("png", "gif", "jpeg", "webp"):
            return None
        width, height = image_size(data)
    except (ValueError, TypeError, struct.error):
        return None
    return (width, height) if width > 0 and height > 0 else None


def image_type(data: bytes) -> str | None:
    """The image format of ``data`` from its first bytes (``png``, ``gif``, ``jpeg``, ``heic``,
    ``webp``), or None.

    Args:
        data: The image's bytes (the first 16 suffice).

    Examples:
        >>> from fsmchat.speakers.tokens import image_type
        >>> image_type(b"GIF89a...."), image_type(b"\\xff\\xd8\\xff\\xe0"), image_type(b"text")
        ('gif', 'jpeg', None)
    """
    if data[:8] == b"\x89PNG\r\n\x1a\n":
        return "png"
    if data[:4] == b"GIF8" and data[5:6] == b"a":
        return "gif"
    if data[:3] == b"\xff\xd8\xff":
        return "jpeg"
    if data[4:8] == b"ftyp":
        return "heic"
    if data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        return "webp"
    return None


def image_size(data: bytes) -> tuple[int, int]:
    """(width, height) of a PNG, GIF, JPEG or WebP image from its header; 300 x 300 for a format
    (or a WebP chunk) this does not read.

    Args:
        data: The image's bytes.

    Raises:
        struct.error: The header is cut short.
        TypeError: A JPEG ends before its size.

    Examples:
        >>> from fsmchat.speakers.tokens import image_size
        >>> import struct
        >>> image_size(b"GIF89a" + struct.pack("<HH", 40, 30))
        (40, 30)
    """
    kind = image_type(data)
    if kind == "png":
        width, height = struct.unpack(">LL", data[16:24])
        return int(width), int(height)
    if kind == "gif":
        width, height = struct.unpack("<HH", data[6:10])
        return int(width), int(height)
    if kind == "jpeg":
        return _jpeg_size(data)
    if kind == "webp":
        chunk = data[12:16]
        if chunk == b"VP8X":
            return (int(struct.unpack("<I", data[24:27] + b"\x00")[0]) + 1,
                    int(struct.unpack("<I", data[27:30] + b"\x00")[0]) + 1)
        if chunk == b"VP8 ":
            return (int(struct.unpack("<H", data[26:28])[0]) & 0x3FFF,
                    int(struct.unpack("<H", data[28:30])[0]) & 0x3FFF)
        if chunk == b"VP8L":
            bits = int(struct.unpack("<I", data[21:25])[0])
            return (bits & 0x3FFF) + 1, ((bits >> 14) & 0x3FFF) + 1
    return DEFAULT_IMAGE_SIZE


def _jpeg_size(data: bytes) -> tuple[int, int]:
    """The size in a JPEG's first start-of-frame marker (C0-CF, not C4, C8 or CC), walking the
    segments as litellm does (``ord`` of the empty byte past the end raises TypeError). A walk that
    would never end (a segment length pointing back) raises ValueError, where litellm's hangs."""
    at, size, marker, steps = 0, 2, 0, 0
    while not 0xC0 <= marker <= 0xCF or marker in (0xC4, 0xC8, 0xCC):
        steps += 1
        if steps > len(data):
            raise ValueError("a JPEG whose segments loop")
        at = max(at + size, 0)  # a seek back past the start stops at the start
        byte = data[at:at + 1]
        at += 1
        while ord(byte) == 0xFF:
            byte = data[at:at + 1]
            at += 1
        marker = ord(byte)
        size = int(struct.unpack(">H", data[at:at + 2])[0]) - 2
        at += 2
    height, width = struct.unpack(">HH", data[at + 1:at + 5])
    return int(width), int(height)


def fitted(width: int, height: int) -> tuple[int, int]:
    """An image's size as counted in high detail: a side over 768 pixels brings the short side to
    768 (the long one kept in proportion, at most 2000).

    Args:
        width: The image's width in pixels.
        height: Its height.

    Examples:
        >>> from fsmchat.speakers.tokens import fitted
        >>> fitted(1024, 640), fitted(500, 300)
        ((1228, 768), (500, 300))
    """
    if width <= SHORT_SIDE and height <= SHORT_SIDE:
        return width, height
    ratio = max(width, height) / min(width, height)
    if width <= height:
        fit_w, fit_h = SHORT_SIDE, int(SHORT_SIDE * ratio)
        if fit_h > LONG_SIDE:
            fit_h = LONG_SIDE
            fit_w = int(fit_h / ratio)
    else:
        fit_w, fit_h = int(SHORT_SIDE * ratio), SHORT_SIDE
        if fit_w > LONG_SIDE:
            fit_w = LONG_SIDE
            fit_h = int(fit_w / ratio)
    return fit_w, fit_h


def function_definitions(tools: Sequence[object]) -> str:
    """The tools offered, written as litellm writes them to count them (after OpenAI's rendering):
    ``namespace functions {``, one TypeScript-like ``type name = (_: {...}) => any;`` per function
    (its description and each parameter's as ``//`` comments; an optional parameter ``?``), then
    ``} // namespace functions``.

    Args:
        tools: The tools, in the OpenAI form (``{"type": "function", "function": {...}}``; any
            entry that is not a mapping is left out, as litellm leaves it out).

    Raises:
        Uncounted: A tool in another form (Gemini's ``function_declarations``, Anthropic's
            ``input_schema``...).

    Examples:
        >>> from fsmchat.speakers.tokens import function_definitions
        >>> print(function_definitions([{"type": "function", "function": {"name": "add",
        ...     "description": "Add two integers.", "parameters": {"type": "object",
        ...     "properties": {"a": {"type": "integer"}, "b": {"type": "integer", "description": "the other"}},
        ...     "required": ["a"]}}}]))
        namespace functions {
        <BLANKLINE>
        // Add two integers.
        type add = (_: {
        a: number,
        // the other
        b?: number,
        }) => any;
        <BLANKLINE>
        } // namespace functions
    """
    lines = ["namespace functions {", ""]
    for tool in tools:
        if not isinstance(tool, Mapping):
            continue
        function = tool.get("function")
        if not isinstance(function, Mapping):
            raise Uncounted("a tool not in the OpenAI form")
        lines += _function_lines(function)
    lines.append("} // namespace functions")
    return "\n".join(lines)


def _function_lines(function: Mapping[str, object]) -> Iterable[str]:
    name = function.get("name")
    if not name:
        return []
    description = function.get("description")
    comment = [f"// {description}"] if description else []
    parameters = function.get("parameters") or {}
    parameters = parameters if isinstance(parameters, Mapping) else {}
    properties = parameters.get("properties")
    if isinstance(properties, Mapping) and properties:
        return [*comment, f"type {name} = (_: {{", _object_lines(parameters, 0), "}) => any;", ""]
    return [*comment, f"type {name} = () => any;", ""]


def _object_lines(parameters: Mapping[str, object], indent: int) -> str:
    properties = parameters.get("properties")
    if not isinstance(properties, Mapping) or not properties:
        return ""
    required = parameters.get("required")
    required = tuple(required) if isinstance(required, list) else ()
    lines = []
    for key, schema in properties.items():
        description = schema.get("description") if isinstance(schema, Mapping) else None
        if description:
            lines.append(f"// {description}")
        optional = "" if required and key in required else "?"
        lines.append(f"{key}{optional}: {_type_text(schema, indent)},")
    return "\n".join(" " * max(0, indent) + line for line in lines)


def _type_text(schema: object, indent: int) -> str:
    if not isinstance(schema, Mapping):
        return "any"
    kind, enum = schema.get("type"), schema.get("enum")
    if kind == "string":
        return " | ".join(f'"{item}"' for item in enum) if isinstance(enum, list) else "string"
    if kind == "array":
        return f"{_type_text(schema.get('items'), indent)}[]"
    if kind == "object":
        return f"{{\n{_object_lines(schema, indent + 2)}\n}}"
    if kind in ["integer", "number"]:
        return " | ".join(f'"{item}"' for item in enum) if isinstance(enum, list) else "number"
    if kind == "boolean":
        return "boolean"
    if kind == "null":
        return "null"
    return "any"


def _tool_choice_tokens(tool_choice: object) -> int:
    match tool_choice:
        case "none":
            return 1
        case {"function": {"name": str() as name}}:
            return 7 + count_text(name)
        case {"type": "none"}:
            return 1
        case {"name": str() as name}:
            return 7 + count_text(name)
        case _:
            return 0
