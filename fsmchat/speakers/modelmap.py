"""litellm's model map (prices, context windows, capabilities) without importing litellm.

litellm ships its map as a JSON file beside its code; importing litellm to read it costs seconds,
reading the file ~30 ms. ``model_map()`` is litellm's own ``model_cost`` once litellm is imported (a
user's ``litellm.register_model`` entries included), else that file, read once. fsmchat's own
providers (the offline and scripted models) enter their models with ``register`` (a scripted
model's ``max_input_tokens``), which litellm never needs to know.
"""
from __future__ import annotations

import json
import os
import sys
import threading

MAP_FILE = "model_prices_and_context_window_backup.json"
_lock = threading.Lock()
_file_map: dict[str, object] | None = None
_own: dict[str, dict[str, object]] = {}  # models of fsmchat's own providers


def _read_file() -> dict[str, object]:
    global _file_map
    if _file_map is None:
        with _lock:
            if _file_map is None:
                # litellm's folder on sys.path, found without asking the import system for litellm
                folders = [os.path.join(entry or ".", "litellm") for entry in sys.path]
                found: dict[str, object] = {}
                for folder in folders:
                    path = os.path.join(folder, MAP_FILE)
                    if os.path.exists(path):
                        with open(path, encoding="utf-8") as f:
                            loaded = json.load(f)
                        found = loaded if isinstance(loaded, dict) else {}
                        break
                _file_map = found
    return _file_map


def model_map() -> dict[str, object]:
    """litellm's model map: ``litellm.model_cost`` once litellm is imported, else its JSON file."""
    lm = sys.modules.get("litellm")
    table = getattr(lm, "model_cost", None) if lm is not None else None
    return table if isinstance(table, dict) else _read_file()


def register(model: str, info: dict[str, object]) -> None:
    """Enter one of fsmchat's own providers' models (``max_input_tokens``, prices)."""
    _own[model] = dict(info)


def info_of(model: str) -> dict[str, object] | None:
    """What the map says of ``model`` (``provider/name`` or the bare name), or None."""
    if model in _own:
        return _own[model]
    table = model_map()
    found = table.get(model) or (table.get(model.split("/", 1)[1]) if "/" in model else None)
    return found if isinstance(found, dict) else None
