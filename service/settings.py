"""Service settings: one frozen Struct, built from the environment only when asked."""

from __future__ import annotations

import math
import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Literal
from urllib.parse import urlsplit

import msgspec
import platformdirs

from service.constants import EMBED_WRITE_TIMEOUT_MAX_SECONDS, MAX_SPAN_DAYS, MAX_SPAN_SECONDS
from service.redaction import redacted_database_url

EmbedProvider = Literal["local", "openai", "hash"]
ContextProfile = Literal["unified", "facts_first"]
TextSearchConfig = Literal["english", "simple"]
# How the local model runs (docs/performance.md, "Query embedding"); `torch` is the reference,
# `auto` is `onnx` when the optional extra is installed, else `torch`.
LocalBackend = Literal["auto", "torch", "torch-int8", "onnx", "onnx-int8"]
# Where the local model embeds writes: `own`, a model thread of their own beside the queries'
# (ONNX backends), or `shared`, the queries' one thread, queries first (docs/performance.md,
# "A lane for writes").
WriteLane = Literal["own", "shared"]
# How the `onnx` backend embeds a context call's query: `fp32`, the stored vectors' graph, or
# `int8`, that graph with int8 weights (a scale per channel), for queries only; the stored vectors
# stay fp32 (docs/performance.md, "Queries in int8").
QueryPrecision = Literal["fp32", "int8"]


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
    # The default rules of POST /v1/context (docs/spec/context-profiles.md); a call may name another.
    context_profile: ContextProfile = "unified"
    # The text search configuration of the unified profile's text side: `english` matches stems
    # ("painted" finds "painting"), `simple` the words as written (docs/quality.md).
    text_search_config: TextSearchConfig = "english"
    volatile_stale_after_seconds: int = 7 * 24 * 3600
    pool_min_size: int = 1
    pool_max_size: int = 10
    statement_timeout_ms: int = 5000
    # A batch write's statements get this much more an item (service/memory/writes.py).
    write_timeout_per_item_ms: int = 20
    connect_timeout_seconds: float = 5.0
    torch_threads: int = 0
    max_body_bytes: int = 16 * 1024 * 1024
    # How long `haki serve` drains its requests after SIGTERM before it closes the rest and stops:
    # within the 30 s an orchestrator waits by default before it kills (Kubernetes, systemd 90 s).
    shutdown_timeout_seconds: int = 20
    metrics_token: str | None = None
    pool_acquire_timeout_seconds: float = 5.0
    # 0 behind pgBouncer < 1.21 in transaction mode: a prepared statement lives on one server
    # connection, and the next transaction may run on another (docs/scaling.md).
    db_statement_cache_size: int = 100
    idempotency_ttl_seconds: int = 24 * 3600
    rate_limit_per_minute: int = 600
    # The embedding layer (speed and fairness). Defaults measured in
    # docs/performance.md ("Query embedding", "Fair embedding") and docs/reliability.md.
    embed_backend: LocalBackend = "auto"
    embed_query_max_batch: int = 8
    embed_write_max_wait_ms: float = 100.0
    embed_write_lane: WriteLane = "own"
    embed_query_precision: QueryPrecision = "int8"
    embed_write_timeout_seconds: float = 120.0
    embed_chars_per_minute: int = 2_000_000
    embed_concurrency: int = 4
    # POST /v1/extract: an OpenAI-compatible chat endpoint; unset, the route is a 503.
    extract_base_url: str | None = None
    extract_model: str | None = None
    extract_api_key: str | None = None
    extract_timeout_seconds: float = 60.0
    # Trace retention: context calls older than this many days are purged with their
    # decisions by a background task, a bounded batch at a time; 0 keeps them for ever.
    trace_retention_days: int = 30
    trace_purge_interval_seconds: float = 300.0
    trace_purge_batch: int = 200
    # The statement timeout of one subject erasure (DELETE /v1/subjects/{id}), its transaction only.
    erasure_timeout_ms: int = 120_000
    # Events' vectors in context (docs/spec/context-profiles.md, rule 8): made by a background
    # task of the serving process; false leaves them unmade, and `unified` ranks episodes by their
    # own vectors alone.
    event_context: bool = True
    # With event_context: POST /v1/events makes its own events' vectors before it answers, so the
    # next call ranks them by both; false leaves them to the background task too.
    event_context_inline: bool = True
    # Read replicas: unset, one pool as before.
    database_read_url: str | None = None
    read_max_lag_ms: int = 1000
    read_check_interval_ms: int = 200
    # Webhooks (docs/webhooks.md): hosts (names or IP literals, comma-separated) a subscription
    # may reach although they resolve to a private, loopback or link-local address.
    webhook_allowed_hosts: str | None = None
    webhook_timeout_seconds: float = 5.0
    webhook_max_attempts: int = 12
    webhook_retry_base_seconds: float = 2.0
    webhook_poll_interval_seconds: float = 1.0

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> Settings:
        """Every field `x` is read from `HAKI_X`; an unset or empty variable keeps the default. The
        field's type converts and checks the text, and an error names the variable."""
        env = os.environ if env is None else env
        raw: dict[str, str] = {}
        for field in msgspec.structs.fields(cls):
            value = env.get(env_name(field.name))
            if value is not None and value != "":
                raw[field.name] = value
        try:
            settings = msgspec.convert(raw, cls, strict=False, dec_hook=_from_text)
        except msgspec.ValidationError as exc:
            raise SettingsError(_name_the_variable(str(exc), raw)) from exc
        settings.check()
        return settings

    def database_where(self) -> str:
        """Which database the settings name, as `doctor` and the CLI print it: the URL without its
        passwords, or the embedded server's data directory."""
        url = self.database_url
        return redacted_database_url(url) if url else f"embedded, in {self.data_dir}"

    def check(self) -> None:
        """The rules between fields, and the bounds of each (SETTING_BOUNDS)."""
        if self.embed_provider == "openai" and not self.embed_base_url:
            raise SettingsError("HAKI_EMBED_PROVIDER=openai needs HAKI_EMBED_BASE_URL")
        if self.pool_max_size < max(1, self.pool_min_size):
            raise SettingsError("HAKI_POOL_MAX_SIZE must be >= max(1, HAKI_POOL_MIN_SIZE)")
        for field, (low, high, why) in SETTING_BOUNDS.items():
            value = getattr(self, field)
            # NaN compares false with every bound: it is refused by name.
            if math.isnan(value) or value < low or (high is not None and value > high):
                raise SettingsError(f"{env_name(field)} must be {why}")
        for url_field, key_field in KEYED_URLS:
            url, key = getattr(self, url_field), getattr(self, key_field)
            try:
                parts = urlsplit(url or "")
            except ValueError as exc:  # a malformed [host]
                raise SettingsError(f"{env_name(url_field)} is not a URL: {exc}") from exc
            if key and (parts.username or parts.password):
                # httpx turns a URL's userinfo into Basic auth, which replaces the key's bearer header.
                raise SettingsError(
                    f"{env_name(url_field)} holds credentials (user@ or user:password@) and "
                    f"{env_name(key_field)} is set: only one of them can be sent; drop one"
                )
        for field in HEADER_SECRETS:
            secret = getattr(self, field)
            if secret is not None and not VISIBLE_ASCII.fullmatch(secret):
                # The value is a secret: the error names the variable, never what it holds.
                raise SettingsError(
                    f"{env_name(field)} must be visible ASCII characters: it is a bearer token"
                )


# Keys sent or received in an Authorization header, which holds ASCII only: another character
# failed every request that sent it (a 500), long after the start, or could never be sent.
HEADER_SECRETS = ("embed_api_key", "extract_api_key", "metrics_token")
KEYED_URLS = (("embed_base_url", "embed_api_key"), ("extract_base_url", "extract_api_key"))
VISIBLE_ASCII = re.compile(r"[\x21-\x7e]+")


def env_name(field: str) -> str:
    """The environment variable of a Settings field."""
    return f"HAKI_{field.upper()}"


def _from_text(kind: type, value: object) -> object:
    if kind is Path and isinstance(value, str):
        return Path(value)
    raise NotImplementedError(kind)


_AT_FIELD = re.compile(r"- at `\$\.(?P<field>\w+)`")


def _name_the_variable(message: str, raw: Mapping[str, str]) -> str:
    """msgspec's "Expected `int`, got `str` - at `$.pool_min_size`" as "HAKI_POOL_MIN_SIZE='x': ..."."""
    m = _AT_FIELD.search(message)
    if m is None:
        return message
    field = m.group("field")
    return f"{env_name(field)}={raw.get(field)!r}: {message[: m.start()].strip()}"


# PostgreSQL's integer and bigint: a setting bound to a statement's parameter fits its type, or
# every run of the statement failed (webhook attempts are an integer column, a LIMIT a bigint);
# an int4 GUC too, so the largest statement_timeout in ms.
PG_MAX_INT = 2**31 - 1
PG_MAX_BIGINT = 2**63 - 1
# PostgreSQL's most connections (MAX_BACKENDS): asyncpg makes a holder per place of the pool at
# start, so a larger pool never started.
PG_MAX_CONNECTIONS = 2**18 - 1
# The most threads an embedder's model runs on: torch refused more than an int32 at its load.
MAX_EMBED_THREADS = 1024

# field -> (lowest, highest or None, the rule as the error says it). Every int and float setting
# has its bounds (tests/test_settings.py): one without them started, then failed each request.
SETTING_BOUNDS: dict[str, tuple[float, float | None, str]] = {
    "embed_timeout_seconds": (1e-9, None, "positive"),
    "embed_batch_size": (1, None, ">= 1"),
    "pool_max_size": (1, PG_MAX_CONNECTIONS, f"within [1, {PG_MAX_CONNECTIONS}]"),
    "statement_timeout_ms": (0, PG_MAX_INT, f"within [0, {PG_MAX_INT}] (0: no limit)"),
    "connect_timeout_seconds": (1e-9, None, "positive"),
    "torch_threads": (0, MAX_EMBED_THREADS, f"within [0, {MAX_EMBED_THREADS}] (0: torch's own choice)"),
    "max_body_bytes": (1, None, ">= 1"),
    "shutdown_timeout_seconds": (1, None, ">= 1"),
    "pool_acquire_timeout_seconds": (1e-9, None, "positive"),
    "recall_max_distance": (0, 2, "within [0, 2] (cosine distance)"),
    "pool_min_size": (0, None, ">= 0"),
    # The default of a fact's stale_after_seconds, with its bound: a longer one was refused when
    # its fact's export was imported back, and past ~9.2e12 s every volatile write was a 500.
    "volatile_stale_after_seconds": (1, MAX_SPAN_SECONDS, f"within [1, {MAX_SPAN_SECONDS}] (100 years)"),
    "db_statement_cache_size": (0, None, ">= 0 (0 turns the cache off)"),
    "idempotency_ttl_seconds": (1, MAX_SPAN_SECONDS, f"within [1, {MAX_SPAN_SECONDS}] (100 years)"),
    "rate_limit_per_minute": (0, None, ">= 0 (0 turns the limit off)"),
    "embed_query_max_batch": (1, None, ">= 1"),
    "embed_write_max_wait_ms": (0, None, ">= 0 (0: queries always go first)"),
    # A batch of events' vectors in context keeps its claim past its embedding (migration 0047).
    "embed_write_timeout_seconds": (
        1e-9,
        EMBED_WRITE_TIMEOUT_MAX_SECONDS,
        f"within (0, {EMBED_WRITE_TIMEOUT_MAX_SECONDS:g}]",
    ),
    "embed_chars_per_minute": (0, None, ">= 0 (0 turns the limit off)"),
    "embed_concurrency": (1, None, ">= 1"),
    "extract_timeout_seconds": (1e-9, None, "positive"),
    # 100 years at most: the purge's cut-off, now minus the days, must stay a timestamp.
    "trace_retention_days": (0, MAX_SPAN_DAYS, f"within [0, {MAX_SPAN_DAYS}] (0 keeps traces for ever)"),
    # A purge that finds nothing still costs a transaction a project: 1e-6 s ran 2,600 a second.
    "trace_purge_interval_seconds": (1, None, ">= 1"),
    # The LIMIT of the purge's statement, a bigint: past it, every purge failed.
    "trace_purge_batch": (1, PG_MAX_BIGINT, f"within [1, {PG_MAX_BIGINT}]"),
    "erasure_timeout_ms": (1, PG_MAX_INT, f"within [1, {PG_MAX_INT}]"),
    "write_timeout_per_item_ms": (0, None, ">= 0 (0: the statement timeout alone)"),
    "read_max_lag_ms": (0, None, ">= 0"),
    # Each check is a query of the standby: not a busy loop.
    "read_check_interval_ms": (10, None, ">= 10"),
    # Bounded: an attempt holds a place in flight, and its lease (the timeout and a margin) holds
    # back the subject's next events.
    "webhook_timeout_seconds": (1e-9, 30, "within (0, 30]"),
    "webhook_max_attempts": (1, PG_MAX_INT, f"within [1, {PG_MAX_INT}]"),
    # The delay is at most an hour; a larger base overflowed float8 once doubled, and every
    # failed attempt's record failed with it.
    "webhook_retry_base_seconds": (1e-9, 3600, "within (0, 3600]"),
    # An idle worker's poll is a query: not a busy loop.
    "webhook_poll_interval_seconds": (0.01, None, ">= 0.01"),
}
