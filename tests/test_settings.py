"""Settings come from `HAKI_<FIELD>` for every field, generically; the README documents each one."""

from __future__ import annotations

import re
from pathlib import Path

import msgspec
import pytest

from service.db.pools import _pool_options, server_settings
from service.memory.writes import write_timeout_ms
from service.settings import SETTING_BOUNDS, Settings, SettingsError, env_name
from service.structs import FactIn

README = Path(__file__).resolve().parents[1] / "README.md"


def _text_for(value: object) -> tuple[str, object]:
    """A text for the variable, and the value it must give (different from the default)."""
    if isinstance(value, bool):
        return "true", True
    if isinstance(value, int):
        return "7", 7
    if isinstance(value, float):
        return "0.25", 0.25
    if isinstance(value, Path):
        return "/tmp/haki-settings-test", Path("/tmp/haki-settings-test")
    return "", None


def test_every_field_is_read_from_its_variable() -> None:
    defaults = Settings()
    for field in msgspec.structs.fields(Settings):
        default = getattr(defaults, field.name)
        text, expected = _text_for(default)
        if not text:
            continue  # strings and literals: checked below with a value the field accepts
        env = {env_name(field.name): text}
        if field.name in ("pool_min_size",):
            env["HAKI_POOL_MAX_SIZE"] = "10"
        if field.name == "recall_max_distance":
            env[env_name(field.name)], expected = "0.5", 0.5
        low = SETTING_BOUNDS.get(field.name, (0, None, ""))[0]
        if isinstance(expected, int | float) and expected < low:  # a floor above the test's value
            expected = type(default)(low * 3)
            env[env_name(field.name)] = str(expected)
        got = getattr(Settings.from_env(env), field.name)
        assert got == expected, field.name


def test_strings_and_choices_are_read() -> None:
    env = {
        "HAKI_DATABASE_URL": "postgresql://x@h/db",
        "HAKI_CONTEXT_PROFILE": "facts_first",
        "HAKI_EMBED_BACKEND": "torch",
        "HAKI_METRICS_TOKEN": "t0k",
        "HAKI_EMBED_WRITE_LANE": "shared",
        "HAKI_EMBED_QUERY_PRECISION": "fp32",
    }
    s = Settings.from_env(env)
    got = (s.database_url, s.context_profile, s.embed_backend, s.metrics_token, s.embed_write_lane)
    assert (*got, s.embed_query_precision) == (
        "postgresql://x@h/db",
        "facts_first",
        "torch",
        "t0k",
        "shared",
        "fp32",
    )


def test_empty_or_unset_keeps_the_default() -> None:
    assert Settings.from_env({"HAKI_POOL_MAX_SIZE": ""}) == Settings.from_env({}) == Settings()


@pytest.mark.parametrize(
    ("env", "named"),
    [
        ({"HAKI_POOL_MAX_SIZE": "many"}, "HAKI_POOL_MAX_SIZE='many'"),
        ({"HAKI_EMBED_BACKEND": "gpu"}, "HAKI_EMBED_BACKEND='gpu'"),
        ({"HAKI_EMBED_WRITE_LANE": "two"}, "HAKI_EMBED_WRITE_LANE='two'"),
        ({"HAKI_EMBED_QUERY_PRECISION": "int4"}, "HAKI_EMBED_QUERY_PRECISION='int4'"),
        ({"HAKI_EMBED_TIMEOUT_SECONDS": "soon"}, "HAKI_EMBED_TIMEOUT_SECONDS='soon'"),
    ],
)
def test_a_bad_value_names_its_variable(env: dict[str, str], named: str) -> None:
    with pytest.raises(SettingsError, match=re.escape(named)):
        Settings.from_env(env)


def test_readme_documents_every_variable() -> None:
    text = README.read_text(encoding="utf-8")
    missing = [env_name(f.name) for f in msgspec.structs.fields(Settings) if env_name(f.name) not in text]
    assert missing == [], f"README's settings table lacks {missing}"


@pytest.mark.parametrize("field", sorted(SETTING_BOUNDS))
def test_each_bound_is_enforced_and_named(field: str) -> None:
    low, high, _ = SETTING_BOUNDS[field]
    kind = type(getattr(Settings(), field))
    below = kind(low - 1) if kind is int else low - 0.5
    with pytest.raises(SettingsError, match=env_name(field)):
        Settings.from_env({env_name(field): str(below)})
    if high is not None:
        with pytest.raises(SettingsError, match=env_name(field)):
            Settings.from_env({env_name(field): str(kind(high + 1))})


@pytest.mark.parametrize(
    ("variable", "refused", "highest"),
    [
        # A fact's own bound: its export could not be imported back, and past ~9.2e12 s every
        # volatile write was a 500 (make_interval overflowed).
        ("HAKI_VOLATILE_STALE_AFTER_SECONDS", "3153600001", "3153600000"),
        # now() + the TTL overflowed past ~9.2e12 s: every keyed write was a 500.
        ("HAKI_IDEMPOTENCY_TTL_SECONDS", "10000000000000", "3153600000"),
        # The purge's LIMIT is a bigint: past it, every purge failed, for ever.
        ("HAKI_TRACE_PURGE_BATCH", str(2**63), str(2**63 - 1)),
        # An integer column: past it, every attempt's record failed and the delivery ran again.
        ("HAKI_WEBHOOK_MAX_ATTEMPTS", str(2**31), str(2**31 - 1)),
        # Doubled past float8, every failed attempt's record failed.
        ("HAKI_WEBHOOK_RETRY_BASE_SECONDS", "1e300", "3600"),
        ("HAKI_POOL_MAX_SIZE", str(2**40), str(2**18 - 1)),
        ("HAKI_TORCH_THREADS", str(2**31), "1024"),
        # Past its events' claim (migration 0047), a slow batch was embedded by a second process.
        ("HAKI_EMBED_WRITE_TIMEOUT_SECONDS", "241", "240"),
    ],
)
def test_a_value_that_fails_at_run_time_is_refused_at_start(
    variable: str, refused: str, highest: str
) -> None:
    with pytest.raises(SettingsError, match=f"{variable} must be within"):
        Settings.from_env({variable: refused})
    assert Settings.from_env({variable: highest}) is not None


@pytest.mark.parametrize(
    ("variable", "busy", "floor"),
    [
        # 1e-6 s ran 2,600 purge transactions a second on an idle service.
        ("HAKI_TRACE_PURGE_INTERVAL_SECONDS", "0.000001", "1"),
        ("HAKI_WEBHOOK_POLL_INTERVAL_SECONDS", "0.000001", "0.01"),
        ("HAKI_READ_CHECK_INTERVAL_MS", "1", "10"),
    ],
)
def test_a_poll_interval_has_a_floor_not_a_busy_loop(variable: str, busy: str, floor: str) -> None:
    with pytest.raises(SettingsError, match=f"{variable} must be >= {floor}"):
        Settings.from_env({variable: busy})
    assert Settings.from_env({variable: floor}) is not None


def test_the_stale_window_setting_has_the_bound_of_a_facts_own() -> None:
    """One bound: a fact written with the default must be one a request (or an import) may write."""
    highest = SETTING_BOUNDS["volatile_stale_after_seconds"][1]
    assert highest is not None
    fact = {"content": "x", "volatility": "volatile"}
    assert msgspec.convert({**fact, "stale_after_seconds": highest}, FactIn).stale_after_seconds == highest
    with pytest.raises(msgspec.ValidationError):
        msgspec.convert({**fact, "stale_after_seconds": int(highest) + 1}, FactIn)


def test_every_number_has_its_bounds() -> None:
    """A negative timeout or body limit started the server, then failed every request as if the
    database were down (or every body as too large)."""
    numbers = {f.name for f in msgspec.structs.fields(Settings) if f.type in (int, float)}
    assert numbers - set(SETTING_BOUNDS) == set()


def test_a_statement_timeout_of_0_is_no_limit_on_either_side() -> None:
    """Documented as "0 no limit": the server's statement_timeout, and the client's wait (it
    cancelled after 5 s)."""
    settings = Settings.from_env({"HAKI_STATEMENT_TIMEOUT_MS": "0"})
    assert server_settings(settings)["statement_timeout"] == "0"
    assert _pool_options(settings)["command_timeout"] is None


@pytest.mark.parametrize(
    "field", sorted(f for f in SETTING_BOUNDS if isinstance(getattr(Settings(), f), float))
)
def test_nan_is_refused_by_name(field: str) -> None:
    with pytest.raises(SettingsError, match=env_name(field)):
        Settings.from_env({env_name(field): "nan"})


@pytest.mark.parametrize("variable", ["HAKI_EXTRACT_API_KEY", "HAKI_EMBED_API_KEY", "HAKI_METRICS_TOKEN"])
@pytest.mark.parametrize("secret", ["sk-clé", "sk one", "sk-\t"])
def test_a_key_sent_in_a_header_is_visible_ascii_and_never_echoed(variable: str, secret: str) -> None:
    with pytest.raises(SettingsError, match=variable) as refused:
        Settings.from_env({variable: secret})
    assert secret not in str(refused.value)
    assert Settings.from_env({variable: "sk-ok_123"}) is not None


@pytest.mark.parametrize("kind", ["EMBED", "EXTRACT"])
def test_a_url_with_credentials_and_a_key_is_refused_naming_both(kind: str) -> None:
    url, key = f"HAKI_{kind}_BASE_URL", f"HAKI_{kind}_API_KEY"
    for userinfo in ("user:s3cret@", "token@"):
        with pytest.raises(SettingsError, match=f"{url} holds credentials .* {key} is set") as refused:
            Settings.from_env({url: f"https://{userinfo}models.example/v1", key: "sk-ok"})
        assert "s3cret" not in str(refused.value) and "sk-ok" not in str(refused.value)
    with pytest.raises(SettingsError, match=f"{url} is not a URL"):
        Settings.from_env({url: "http://[::1/v1"})
    # Either alone is fine: userinfo is then the endpoint's Basic auth.
    assert Settings.from_env({url: "https://user:pw@models.example/v1"}) is not None
    assert Settings.from_env({url: "https://models.example/v1", key: "sk-ok"}) is not None


def test_a_batch_write_gets_its_allowance_and_no_limit_stays_none() -> None:
    base = Settings.from_env({"HAKI_STATEMENT_TIMEOUT_MS": "5000", "HAKI_WRITE_TIMEOUT_PER_ITEM_MS": "20"})
    assert write_timeout_ms(base, 1000) == 25_000
    assert write_timeout_ms(base, 1) == 5_020
    unlimited = msgspec.structs.replace(base, statement_timeout_ms=0)
    assert write_timeout_ms(unlimited, 1000) == 0
