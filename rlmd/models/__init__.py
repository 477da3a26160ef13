"""Model providers behind one async interface, and the registry that names them.

``rlmd.config.load(project).registry().get(name)`` returns a :class:`Model`; ``await model.complete(messages)``
returns a :class:`Completion` with text, tokens, latency and USD cost. Providers: ``openai``
(and any OpenAI-compatible server), ``anthropic``, ``local`` (GGUF via llama-cpp-python) and
``scripted`` (deterministic replay for tests and reproducible runs).
"""

from rlmd.models.base import Completion, Model, ModelError, ModelNotAvailable, ModelSpec
from rlmd.models.registry import Registry
from rlmd.models.tokens import count_tokens

__all__ = [
    "Completion",
    "Model",
    "ModelError",
    "ModelNotAvailable",
    "ModelSpec",
    "Registry",
    "count_tokens",
]
