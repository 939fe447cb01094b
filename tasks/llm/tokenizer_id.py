"""The tokenizer fingerprint recorded with every call's token ids (docs/tokens.md).

Token ids mean something only with the vocabulary that made them and the chat template that
rendered the prompt; ``llm_calls.tokenizer_fingerprint`` names both, so a trainer can refuse ids
from another tokenizer instead of training on the wrong tokens. It is computed once per engine
(a few milliseconds for a 49k-token vocabulary) from the vocabulary, the added and special
tokens and the chat template.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any


def tokenizer_fingerprint(tokenizer: Any) -> str:
    """``<class>/<sha256 prefix>`` of a Hugging Face tokenizer's vocabulary and chat template."""
    vocab = tokenizer.get_vocab() if hasattr(tokenizer, "get_vocab") else {}
    payload = {
        "vocab": sorted(vocab.items(), key=lambda item: item[1]),
        "special": sorted(str(t) for t in getattr(tokenizer, "all_special_tokens", [])),
        "chat_template": getattr(tokenizer, "chat_template", None),
    }
    digest = hashlib.sha256(json.dumps(payload, ensure_ascii=False, default=str).encode()).hexdigest()
    return f"{type(tokenizer).__name__}/{digest[:16]}"
