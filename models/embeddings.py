"""Embedders: text to vectors for memory search. Pluggable; none is configured by default.

An embedder has a `name`, a `dimension` and `embed(texts) -> list[list[float]]`. teamflow
ships one: `OpenAIEmbedder`, a client of any OpenAI-compatible embeddings endpoint
(`POST {base}/embeddings` with `{"model": ..., "input": [...]}`, answering
`{"data": [{"index": i, "embedding": [...]}, ...]}`): OpenAI, Ollama (`nomic-embed-text`,
the `001` seed's 768 dimensions, at `http://localhost:11434/v1`), vLLM, llama.cpp, LM Studio.

`configured_embedder()` reads the environment:

- `TEAMFLOW_EMBEDDINGS_URL`: the endpoint's base URL (ending in `/v1`); unset: no embedder,
  memory search is full text only.
- `TEAMFLOW_EMBEDDINGS_MODEL`: the model (default `nomic-embed-text`).
- `TEAMFLOW_EMBEDDINGS_KEY`: a bearer token, if the endpoint wants one.

The dimension comes from the embedder: the first vector it returns fixes it, and every later
vector (and every vector a caller stores with a memory) must have it. Uses only the standard
library (`urllib`), so `models` gains no dependency.
"""

from __future__ import annotations

import json
import math
import urllib.error
import urllib.request
from typing import Protocol

from models.settings import get_settings

DEFAULT_MODEL = "nomic-embed-text"
MAX_DIMENSION = 8192
TIMEOUT_SECONDS = 30.0


class EmbeddingError(ValueError):
    """An embedder failed or answered something that is not a vector; one line."""


class Embedder(Protocol):
    """What memory search needs of an embedder."""

    name: str

    @property
    def dimension(self) -> int: ...

    def embed(self, texts: list[str]) -> list[list[float]]: ...


class OpenAIEmbedder:
    """A client of an OpenAI-compatible `POST /v1/embeddings` endpoint."""

    def __init__(
        self,
        base_url: str,
        model: str = DEFAULT_MODEL,
        *,
        api_key: str | None = None,
        timeout: float = TIMEOUT_SECONDS,
    ) -> None:
        if not base_url.startswith(("http://", "https://")):
            raise EmbeddingError(f"the embeddings URL must be http(s)://..., not {base_url!r}")
        self.url = base_url.rstrip("/") + "/embeddings"
        self.model = model
        self.name = f"{model} at {self.url}"
        self._key = api_key
        self._timeout = timeout
        self._dimension: int | None = None

    @property
    def dimension(self) -> int:
        """The length of this embedder's vectors (asks the endpoint once if not known yet)."""
        if self._dimension is None:
            self.embed(["dimension"])
        assert self._dimension is not None
        return self._dimension

    def embed(self, texts: list[str]) -> list[list[float]]:
        """One vector per text, in order; `EmbeddingError` (one line) if the endpoint fails."""
        if not texts:
            return []
        body = json.dumps({"model": self.model, "input": texts}).encode()
        headers = {"Content-Type": "application/json"}
        if self._key:
            headers["Authorization"] = f"Bearer {self._key}"
        request = urllib.request.Request(self.url, data=body, headers=headers, method="POST")
        try:
            with urllib.request.urlopen(request, timeout=self._timeout) as response:
                answer = json.loads(response.read())
        except urllib.error.HTTPError as exc:
            raise EmbeddingError(
                f"the embeddings endpoint {self.url} answered {exc.code}"
            ) from None
        except (urllib.error.URLError, OSError) as exc:
            reason = getattr(exc, "reason", exc)
            raise EmbeddingError(
                f"cannot reach the embeddings endpoint {self.url}: {reason}"
            ) from None
        except ValueError:
            raise EmbeddingError(f"the embeddings endpoint {self.url} sent no JSON") from None
        return self._vectors(answer, len(texts))

    def _vectors(self, answer: object, count: int) -> list[list[float]]:
        data = answer.get("data") if isinstance(answer, dict) else None
        if not isinstance(data, list) or len(data) != count:
            raise EmbeddingError(
                f"the embeddings endpoint {self.url} sent no data list of {count} embeddings"
            )
        ordered = sorted(data, key=lambda d: d.get("index", 0) if isinstance(d, dict) else 0)
        vectors = [check_vector(d.get("embedding") if isinstance(d, dict) else None)
                   for d in ordered]  # fmt: skip
        for vector in vectors:
            if self._dimension is None:
                self._dimension = len(vector)
            elif len(vector) != self._dimension:
                raise EmbeddingError(
                    f"the embeddings endpoint {self.url} sent a {len(vector)}-d vector after "
                    f"{self._dimension}-d ones"
                )
        return vectors


def check_vector(value: object) -> list[float]:
    """`value` as a vector: a non-empty list of finite numbers, at most `MAX_DIMENSION`."""
    if not isinstance(value, list) or not value:
        raise EmbeddingError("an embedding must be a non-empty list of numbers")
    if len(value) > MAX_DIMENSION:
        raise EmbeddingError(f"an embedding has {len(value)} numbers; at most {MAX_DIMENSION}")
    if not all(
        isinstance(x, int | float) and not isinstance(x, bool) and math.isfinite(x) for x in value
    ):
        raise EmbeddingError("an embedding must hold finite numbers only")
    return [float(x) for x in value]


_configured: dict[tuple[str, str, str | None], OpenAIEmbedder] = {}


def configured_embedder() -> Embedder | None:
    """The embedder the environment names (`TEAMFLOW_EMBEDDINGS_URL`, ...), or None."""
    settings = get_settings()
    if not settings.embeddings_url:
        return None
    key = (settings.embeddings_url, settings.embeddings_model, settings.embeddings_key)
    if key not in _configured:
        _configured[key] = OpenAIEmbedder(key[0], key[1], api_key=key[2])
    return _configured[key]
