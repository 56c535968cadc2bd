"""Secrets never reach a log: the records of the loggers fsmchat drives (litellm's, the OpenAI
SDK's, httpx's, httpcore's and fsmchat's own) are masked by the same rule (``fsmchat.common.masking.redact``,
names by ``is_secret``) that masks errors, ``Agent`` reprs and configs.

litellm's DEBUG request log (``litellm._turn_on_debug()``, ``litellm.set_verbose = True`` or
``logging.basicConfig(level=logging.DEBUG)``) prints the request body, ``extra_headers``
included, as a dict repr and a curl command; the OpenAI SDK logs its request options. A
``logging.Filter`` on a logger sees only the records that logger creates (not its children's, not
propagated ones), so ``install()`` puts ``SecretLogFilter`` on each of these loggers and on every
existing child, and wraps the log record factory so the messages and exceptions of children
created later are masked too (their ``extra=`` fields are set after the factory runs, so only the
filter, on the installed loggers, masks those). Masking happens before any handler runs, so every
handler (litellm's own, the root logger's, a test's ``caplog``) sees the masked text.
"""
from __future__ import annotations

import logging
import threading
from typing import Callable

from ..common.masking import MASK, is_secret, redact

__all__ = ["LOGGERS", "MASK", "SecretLogFilter", "covered", "install", "is_secret", "mask_log_text", "mask_record"]

LOGGERS = ("LiteLLM", "LiteLLM Proxy", "LiteLLM Router", "httpx", "httpcore", "openai", "fsmchat")
_DONE = "_fsmchat_masked"


def mask_log_text(text: str) -> str:
    """``text`` masked by fsmchat's one redaction rule (``fsmchat.common.masking.redact``): known secret
    values (agents' credentials and headers, credential-named environment variables), the value
    of every secret-named entry in the shapes logs carry (dict reprs and JSON, header tuples,
    ``name=value``, ``Name: value`` header lines), then API keys and bearer tokens anywhere."""
    return redact(text)


class SecretLogFilter(logging.Filter):
    """Masks a record in place (message, arguments, exception text, secret-named ``extra`` fields)
    and lets it through. Attach it to any logger or handler; ``install()`` does so for fsmchat's."""

    def filter(self, record: logging.LogRecord) -> bool:
        mask_record(record)
        return True


def mask_record(record: logging.LogRecord) -> logging.LogRecord:
    """Mask ``record`` in place: its message (formatted once, arguments dropped), exception and
    stack text, and its ``extra`` fields (secret-named ones become ``***``, texts are masked)."""
    if not getattr(record, _DONE, False):
        try:
            message = record.getMessage()
        except Exception:  # a malformed format string: keep the raw parts, masked
            message = f"{record.msg} {record.args}"
        record.msg, record.args = mask_log_text(message), None
        if record.exc_info and not record.exc_text:
            record.exc_text = logging.Formatter().formatException(record.exc_info)
        if record.exc_text:
            record.exc_text = mask_log_text(record.exc_text)
        if record.stack_info:
            record.stack_info = mask_log_text(record.stack_info)
        setattr(record, _DONE, True)
    for key, value in list(vars(record).items()):  # extra={...} fields are set after the record is made
        if key in _PLAIN or key == _DONE:
            continue
        if is_secret(key) and value:
            setattr(record, key, MASK)
        elif isinstance(value, str):
            setattr(record, key, mask_log_text(value))
    return record


_PLAIN = frozenset(vars(logging.LogRecord("x", 0, "", 0, "", None, None)))  # LogRecord's own fields
_FILTER = SecretLogFilter()
_install_lock = threading.Lock()


def covered(name: str) -> bool:
    """Whether a logger of this name is one fsmchat masks (one of ``LOGGERS`` or a child)."""
    return any(name == p or name.startswith(p + ".") for p in LOGGERS)


def _factory(inner: Callable[..., logging.LogRecord]) -> Callable[..., logging.LogRecord]:
    def make(*args: object, **kwargs: object) -> logging.LogRecord:
        record = inner(*args, **kwargs)
        return mask_record(record) if covered(record.name) else record
    setattr(make, "fsmchat_masking", True)  # marks the factory installed (install() looks for it)
    return make


def install() -> None:
    """Mask every record of ``LOGGERS`` and their children (idempotent; fsmchat calls it when it
    first imports litellm)."""
    with _install_lock:
        names = [n for n in list(logging.root.manager.loggerDict) if covered(n)]
        for name in dict.fromkeys([*LOGGERS, *names]):
            logger = logging.getLogger(name)
            if _FILTER not in logger.filters:
                logger.addFilter(_FILTER)
        current = logging.getLogRecordFactory()
        if not getattr(current, "fsmchat_masking", False):
            logging.setLogRecordFactory(_factory(current))
