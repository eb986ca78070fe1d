"""Service settings: one frozen Struct, built from the environment only when asked."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Literal

import msgspec
import platformdirs

EmbedProvider = Literal["local", "openai", "hash"]
ContextProfile = Literal["unified", "facts_first"]
TextSearchConfig = Literal["english", "simple"]
# How the local model runs (docs/performance.md, "Query embedding"); `torch` is the reference,
# `auto` is `onnx` when the optional extra is installed, else `torch`.
LocalBackend = Literal["auto", "torch", "torch-int8", "onnx", "onnx-int8"]


class SettingsError(ValueError):
    """A configuration value is missing or malformed; raised at start-up."""


class Settings(msgspec.Struct, frozen=True, kw_only=True):
    database_url: str | None = None
    data_dir: Path = Path(platformdirs.user_data_dir("haki"))
    embed_provider: EmbedProvider = "local"
    embed_model: str | None = None
    embed_base_url: str | None = None
    embed_api_key: str | None = None
    embed_timeout_seconds: float = 10.0
    embed_batch_size: int = 64
    recall_max_distance: float = 0.0
    # The default rules of POST /v1/context (spec/context-profiles.md); a call may name another.
    context_profile: ContextProfile = "unified"
    # The text search configuration of the unified profile's text side: `english` matches stems
    # ("painted" finds "painting"), `simple` the words as written (docs/quality.md).
    text_search_config: TextSearchConfig = "english"
    volatile_stale_after_seconds: int = 7 * 24 * 3600
    pool_min_size: int = 1
    pool_max_size: int = 10
    statement_timeout_ms: int = 5000
    connect_timeout_seconds: float = 5.0
    torch_threads: int = 0
    max_body_bytes: int = 16 * 1024 * 1024
    metrics_token: str | None = None
    pool_acquire_timeout_seconds: float = 5.0
    # 0 behind pgBouncer < 1.21 in transaction mode: a prepared statement lives on one server
    # connection, and the next transaction may run on another (docs/scaling.md).
    db_statement_cache_size: int = 100
    idempotency_ttl_seconds: int = 24 * 3600
    rate_limit_per_minute: int = 600
    # The embedding layer (issue 13: speed; issue 12 defect 4: fairness). Defaults measured in
    # docs/performance.md ("Query embedding", "Fair embedding") and docs/reliability.md.
    embed_backend: LocalBackend = "auto"
    embed_query_max_batch: int = 8
    embed_write_timeout_seconds: float = 120.0
    embed_chars_per_minute: int = 2_000_000
    embed_concurrency: int = 4
    # POST /v1/extract (issue 16): an OpenAI-compatible chat endpoint; unset, the route is a 503.
    extract_base_url: str | None = None
    extract_model: str | None = None
    extract_api_key: str | None = None
    extract_timeout_seconds: float = 60.0

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> Settings:
        env = os.environ if env is None else env
        raw: dict[str, object] = {}

        def put(name: str, field: str, conv: type = str) -> None:
            value = env.get(name)
            if value is None or value == "":
                return
            try:
                raw[field] = conv(value)
            except ValueError as exc:
                raise SettingsError(f"{name}={value!r}: {exc}") from exc

        put("HAKI_DATABASE_URL", "database_url")
        put("HAKI_DATA_DIR", "data_dir", Path)
        put("HAKI_EMBED_PROVIDER", "embed_provider")
        put("HAKI_EMBED_MODEL", "embed_model")
        put("HAKI_EMBED_BASE_URL", "embed_base_url")
        put("HAKI_EMBED_API_KEY", "embed_api_key")
        put("HAKI_EMBED_TIMEOUT_SECONDS", "embed_timeout_seconds", float)
        put("HAKI_EMBED_BATCH_SIZE", "embed_batch_size", int)
        put("HAKI_RECALL_MAX_DISTANCE", "recall_max_distance", float)
        put("HAKI_CONTEXT_PROFILE", "context_profile")
        put("HAKI_TEXT_SEARCH_CONFIG", "text_search_config")
        put("HAKI_VOLATILE_STALE_AFTER_SECONDS", "volatile_stale_after_seconds", int)
        put("HAKI_POOL_MIN_SIZE", "pool_min_size", int)
        put("HAKI_POOL_MAX_SIZE", "pool_max_size", int)
        put("HAKI_STATEMENT_TIMEOUT_MS", "statement_timeout_ms", int)
        put("HAKI_CONNECT_TIMEOUT_SECONDS", "connect_timeout_seconds", float)
        put("HAKI_TORCH_THREADS", "torch_threads", int)
        put("HAKI_MAX_BODY_BYTES", "max_body_bytes", int)
        put("HAKI_METRICS_TOKEN", "metrics_token")
        put("HAKI_POOL_ACQUIRE_TIMEOUT_SECONDS", "pool_acquire_timeout_seconds", float)
        put("HAKI_DB_STATEMENT_CACHE_SIZE", "db_statement_cache_size", int)
        put("HAKI_IDEMPOTENCY_TTL_SECONDS", "idempotency_ttl_seconds", int)
        put("HAKI_RATE_LIMIT_PER_MINUTE", "rate_limit_per_minute", int)
        put("HAKI_EMBED_BACKEND", "embed_backend")
        put("HAKI_EMBED_QUERY_MAX_BATCH", "embed_query_max_batch", int)
        put("HAKI_EMBED_WRITE_TIMEOUT_SECONDS", "embed_write_timeout_seconds", float)
        put("HAKI_EMBED_CHARS_PER_MINUTE", "embed_chars_per_minute", int)
        put("HAKI_EMBED_CONCURRENCY", "embed_concurrency", int)
        put("HAKI_EXTRACT_BASE_URL", "extract_base_url")
        put("HAKI_EXTRACT_MODEL", "extract_model")
        put("HAKI_EXTRACT_API_KEY", "extract_api_key")
        put("HAKI_EXTRACT_TIMEOUT_SECONDS", "extract_timeout_seconds", float)
        try:
            settings = msgspec.convert(raw, cls)
        except msgspec.ValidationError as exc:
            raise SettingsError(str(exc)) from exc
        settings.check()
        return settings

    def check(self) -> None:
        if self.embed_provider == "openai" and not self.embed_base_url:
            raise SettingsError("HAKI_EMBED_PROVIDER=openai needs HAKI_EMBED_BASE_URL")
        if self.recall_max_distance < 0 or self.recall_max_distance > 2:
            raise SettingsError("HAKI_RECALL_MAX_DISTANCE must be within [0, 2] (cosine distance)")
        if self.pool_min_size < 0 or self.pool_max_size < max(1, self.pool_min_size):
            raise SettingsError("HAKI_POOL_MAX_SIZE must be >= max(1, HAKI_POOL_MIN_SIZE)")
        if self.volatile_stale_after_seconds <= 0:
            raise SettingsError("HAKI_VOLATILE_STALE_AFTER_SECONDS must be positive")
        if self.db_statement_cache_size < 0:
            raise SettingsError("HAKI_DB_STATEMENT_CACHE_SIZE must be >= 0 (0 turns the cache off)")
        if self.idempotency_ttl_seconds <= 0:
            raise SettingsError("HAKI_IDEMPOTENCY_TTL_SECONDS must be positive")
        if self.rate_limit_per_minute < 0:
            raise SettingsError("HAKI_RATE_LIMIT_PER_MINUTE must be >= 0 (0 turns the limit off)")
        if self.embed_query_max_batch < 1:
            raise SettingsError("HAKI_EMBED_QUERY_MAX_BATCH must be >= 1")
        if self.embed_write_timeout_seconds <= 0:
            raise SettingsError("HAKI_EMBED_WRITE_TIMEOUT_SECONDS must be positive")
        if self.embed_chars_per_minute < 0:
            raise SettingsError("HAKI_EMBED_CHARS_PER_MINUTE must be >= 0 (0 turns the limit off)")
        if self.embed_concurrency < 1:
            raise SettingsError("HAKI_EMBED_CONCURRENCY must be >= 1")
        if self.extract_timeout_seconds <= 0:
            raise SettingsError("HAKI_EXTRACT_TIMEOUT_SECONDS must be positive")
