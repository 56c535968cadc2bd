"""Layer 10: what an ``Agent`` accepts: its keywords and litellm's completion options (checked
without importing litellm), URLs, speaker names, and an agent's options with their secrets
masked. ``Agent``'s validators call these before any model call."""
from __future__ import annotations

import difflib
import math
import re
import unicodedata
from urllib.parse import urlsplit

from ..common.masking import HEADER_OPTIONS
from .log_secrets import is_secret


def check_litellm_options(extra: dict[str, object]) -> None:
    """Refuse, before any call, an ``Agent`` keyword that is neither fsmchat's nor a litellm
    completion option (a typo such as ``sytem_prompt``), and ill-typed common options."""
    for key, value in extra.items():
        if key not in LITELLM_OPTIONS and not key.startswith(LITELLM_PREFIXES) and not is_secret(key):
            close = difflib.get_close_matches(key, [*AGENT_KEYWORDS, *LITELLM_OPTIONS], n=1, cutoff=0.75)
            hint = f" (did you mean {close[0]}?)" if close else ""
            raise ValueError(f"{key}={value!r} is invalid: unknown keyword{hint}; an Agent takes fsmchat's "
                             f"options ({', '.join(AGENT_KEYWORDS)}) and litellm completion options "
                             "(temperature, max_tokens, api_base, ...); pass provider-specific fields in "
                             "extra_body={...}")
    for key in ("temperature", "top_p", "presence_penalty", "frequency_penalty"):
        v = extra.get(key)
        if v is not None and (isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v)
                              or (key != "presence_penalty" and key != "frequency_penalty" and v < 0)):
            raise ValueError(f"{key}={v!r} is invalid: a finite number" +
                             (" >= 0 (0..2 for most providers)" if key == "temperature" else ""))
    for key in ("max_tokens", "max_completion_tokens", "n", "seed"):
        v = extra.get(key)
        if v is not None and (isinstance(v, bool) or not isinstance(v, int) or (key != "seed" and v < 1)):
            raise ValueError(f"{key}={v!r} is invalid: an int" + (" >= 1" if key != "seed" else ""))
    for key in ("metadata", "extra_body", "extra_headers", "headers"):
        v = extra.get(key)
        if v is not None and not isinstance(v, dict):
            raise ValueError(f"{key}={v!r} is invalid: a dict")
    for key in ("api_base", "base_url"):
        v = extra.get(key)
        if v is not None and not is_http_url(v):
            raise ValueError(f"{key}={v!r} is invalid: an http(s) URL such as 'http://127.0.0.1:8000/v1' or "
                             "'https://api.example.com/v1' (or None for the provider's own)")


_SPACE = re.compile(r"\s")  # what str.isspace() is true of


def is_http_url(value: object) -> bool:
    """Whether ``value`` is an ``http://`` or ``https://`` URL with a host, and no spaces."""
    if not isinstance(value, str) or _SPACE.search(value):
        return False
    try:
        parts = urlsplit(value)
        return parts.scheme in ("http", "https") and bool(parts.hostname) and (parts.port or 0) >= 0
    except ValueError:  # a malformed port or IPv6 address
        return False


# control (Cc), format (Cf: zero-width spaces and joiners, bidi overrides and isolates, the BOM),
# line/paragraph separators, surrogates and private-use characters: invisible or reordering in a label
_HIDDEN = ("Cc", "Cf", "Zl", "Zp", "Cs", "Co")


MAX_NAME_CHARS = 64  # OpenAI's limit on a message's name, and long enough for any role


def name_problem(name: str) -> str | None:
    """Why ``name`` cannot be a speaker's name, or None: a name is one line of visible text, as it
    is the role of the speaker's messages and its label in diagrams and reports: at most
    ``MAX_NAME_CHARS`` characters, and none of ``/``, ``:``, ``|`` (they separate run ids, branch
    lanes and qualified state names, which a speaker's name becomes part of)."""
    if len(name) > MAX_NAME_CHARS:
        return f"a name has at most {MAX_NAME_CHARS} characters; it has {len(name):,}"
    separators = [c for c in "/:|" if c in name]
    if separators:
        return (f"a name holds none of '/', ':' and '|' (they separate run ids, branch lanes and state names); "
                f"it holds {' and '.join(map(repr, separators))}")
    if name.isascii() and name.isprintable():  # no ASCII character it allows is hidden (only Cc are)
        return None
    for c in name:
        if unicodedata.category(c) in _HIDDEN:
            return (f"a name is one line of visible text; it holds {c!r} (U+{ord(c):04X}, "
                    f"{unicodedata.name(c, 'a control character').lower()}), which is invisible or reorders text "
                    "(no newlines, control, zero-width or bidi characters); it is the role of the agent's messages")
    return None


AGENT_KEYWORDS = ("name", "agent_name", "system_prompt", "instructions", "prompt", "model", "model_name", "tools",
                  "tools_list_dictionary", "tool_mode", "timeout", "num_retries", "max_retry_wait_s", "transport",
                  "max_loops", "persistent_memory", "output_type", "max_tool_rounds", "max_parallel_tools",
                  "on_tool_error", "share_tool_results")
# litellm.completion's own parameters and the common provider options it forwards (checked
# without importing litellm, which costs seconds); provider families go by prefix.
LITELLM_OPTIONS = frozenset("""
api_key api_base base_url api_version organization deployment_id custom_llm_provider model_list
temperature top_p top_k min_p n stop max_tokens max_completion_tokens presence_penalty frequency_penalty
repetition_penalty logit_bias logprobs top_logprobs seed user response_format tools tool_choice
parallel_tool_calls functions function_call stream stream_options modalities audio prediction
reasoning_effort thinking verbosity service_tier store safety_identifier prompt_cache_key
prompt_cache_retention web_search_options include_server_side_tool_invocations
enable_json_schema_validation metadata headers extra_headers extra_body extra_query default_headers
mock_response caching cache ttl tags drop_params allowed_openai_params additional_drop_params
input_cost_per_token output_cost_per_token region_name ssl_verify client request_timeout
keep_alive format num_ctx num_predict mirostat mirostat_eta mirostat_tau tfs_z repeat_penalty
repeat_last_n num_gpu num_thread typical_p do_sample best_of truncate return_full_text
decoder_input_details details watermark safe_prompt random_seed safety_settings system
cache_control stop_sequences anthropic_version max_input_tokens fallbacks context_window_fallback_dict
""".split())
LITELLM_PREFIXES = ("aws_", "vertex_", "azure_", "watsonx_", "bedrock_", "litellm_", "extra_", "input_cost_",
                    "output_cost_", "anthropic_", "openai_", "ollama_", "hf_", "huggingface_", "gemini_",
                    "google_", "x_", "X-", "x-")


def mask_secrets(value: object) -> object:
    """``value`` with every secret-named entry of nested dicts, and every header value
    (``extra_headers``, ``headers``, ``default_headers``), replaced by ``***``."""
    if isinstance(value, dict):
        return {k: "***" if isinstance(k, str) and is_secret(k) and v else
                {h: "***" if hv else hv for h, hv in v.items()} if k in HEADER_OPTIONS and isinstance(v, dict) else
                mask_secrets(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(mask_secrets(v) for v in value)
    return value
