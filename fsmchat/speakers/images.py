"""Image content parts (OpenAI style) for agents given an ``img``: URL, data URL or local path."""
from __future__ import annotations

import base64
import mimetypes
from pathlib import Path


def image_part(img: str) -> dict[str, object]:
    if img.startswith(("http://", "https://", "data:")):
        url = img
    else:
        p = Path(img)
        if not p.is_file():
            raise ValueError(f"img={img!r} is neither a URL, a data URL nor an existing file")
        mime = mimetypes.guess_type(p.name)[0] or "image/png"
        url = f"data:{mime};base64,{base64.b64encode(p.read_bytes()).decode()}"
    return {"type": "image_url", "image_url": {"url": url}}
