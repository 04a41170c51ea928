"""Configuration: defaults < TOML file < DREAMCYCLE_* environment < command line, with
errors that name the setting and where the bad value came from."""

from __future__ import annotations

import inspect
import os
import re
import subprocess
from pathlib import Path

import pytest

from dreamcycle.daemon import defaults
from dreamcycle.daemon.config import ConfigError, default_peer_id, load_config
from dreamcycle.pulses.ranking import RankingWeights
from dreamcycle.pulses.sweep import SweepMix, plan_sweep
from dreamcycle.store.embedder import Embedder
from dreamcycle.store.index import HnswIndex, open_or_rebuild
from tests.daemon_helpers import BASE_SETTINGS, CLI_TIMEOUT_S, DREAMCYCLE


def write_toml(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "dreamcycle.toml"
    path.write_text(text, encoding="utf-8")
    return path


def test_defaults_load_without_file_or_environment() -> None:
    config = load_config(None, environ={})
    assert config.peer.id == default_peer_id()
    assert config.cycle.interval_s == defaults.CYCLE_INTERVAL_S
    assert config.sweep.percentile == defaults.SWEEP_PERCENTILE
    assert config.sweep.min_population == defaults.SWEEP_MIN_POPULATION
    assert config.zeitgeist.backend == "dir"
    assert config.pulses.k == defaults.PULSE_K
    assert config.metrics.address() == ("127.0.0.1", 9464)
    assert config.database_path == Path(defaults.DATA_DIR).expanduser() / defaults.DATABASE_FILE
    assert config.zeitgeist_dir == config.data_dir / defaults.ZEITGEIST_DIR


def test_the_libraries_defaults_are_the_configs() -> None:
    """A library called without the config's values behaves as the default config: each
    default is written once, in the library that uses it."""
    config = load_config(None, environ={})
    assert RankingWeights() == config.recall.weights()
    assert SweepMix() == config.sweep.mix()
    sweep_defaults = inspect.signature(plan_sweep).parameters
    assert sweep_defaults["percentile"].default == config.sweep.percentile
    assert sweep_defaults["min_population"].default == config.sweep.min_population
    embedder_defaults = inspect.signature(Embedder).parameters
    assert embedder_defaults["model_name"].default == config.embedding.model
    assert embedder_defaults["batch_size"].default == config.embedding.batch_size
    for build in (HnswIndex.create, open_or_rebuild):
        index_defaults = inspect.signature(build).parameters
        assert index_defaults["m"].default == config.index.m
        assert index_defaults["ef_construction"].default == config.index.ef_construction
        assert index_defaults["ef"].default == config.index.ef


def test_toml_overrides_defaults(tmp_path: Path) -> None:
    path = write_toml(
        tmp_path,
        """
        [peer]
        id = "alpha"
        data_dir = "/srv/dreamcycle"

        [cycle]
        interval_s = 5

        [sweep]
        enabled = false
        percentile = 40.0

        [zeitgeist]
        backend = "s3"
        [zeitgeist.s3]
        bucket = "memories"
        endpoint_url = "http://127.0.0.1:8333"
        """,
    )
    config = load_config(path, environ={})
    assert config.peer.id == "alpha"
    assert config.database_path == Path("/srv/dreamcycle") / defaults.DATABASE_FILE
    assert config.cycle.interval_s == 5.0
    assert isinstance(config.cycle.interval_s, float)
    assert config.sweep.enabled is False
    assert config.sweep.percentile == 40.0
    assert config.zeitgeist.backend == "s3"
    assert config.zeitgeist.s3.bucket == "memories"
    assert config.zeitgeist.s3.region == defaults.S3_REGION  # untouched keys keep defaults


def test_config_file_named_by_environment_is_read(tmp_path: Path) -> None:
    path = write_toml(tmp_path, "[cycle]\ninterval_s = 9\n")
    config = load_config(None, environ={defaults.CONFIG_ENV: str(path)})
    assert config.cycle.interval_s == 9.0


def test_environment_beats_toml_and_command_line_beats_environment(tmp_path: Path) -> None:
    path = write_toml(tmp_path, '[cycle]\ninterval_s = 5\n[peer]\nid = "from_file"\n')
    env = {
        "DREAMCYCLE_CYCLE_INTERVAL_S": "7.5",
        "DREAMCYCLE_PEER_ID": "from_env",
        "DREAMCYCLE_SWEEP_ENABLED": "false",
        "DREAMCYCLE_ZEITGEIST_S3_BUCKET": "nested",
        "DREAMCYCLE_METRICS_LISTEN": "",
    }
    config = load_config(path, environ=env)
    assert config.cycle.interval_s == 7.5
    assert config.peer.id == "from_env"
    assert config.sweep.enabled is False
    assert config.zeitgeist.s3.bucket == "nested"
    assert config.metrics.address() is None

    config = load_config(
        path, environ=env, overrides={"peer.id": "from_flag", "cycle.interval_s": None}
    )
    assert config.peer.id == "from_flag"
    assert config.cycle.interval_s == 7.5  # an unset flag (None) leaves the environment's value


def test_the_signing_tables_earlier_name_is_read_with_a_warning(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = write_toml(tmp_path, '[keys]\nmode = "permissive"\nkey_file = "old.key"\n')
    config = load_config(path, environ={"DREAMCYCLE_KEYS_KEYRING_FILE": "old.json"})
    assert config.signing.mode == "permissive"
    assert config.key_path.name == "old.key"
    assert config.keyring_path.name == "old.json"
    warned = [record.getMessage() for record in caplog.records]
    assert any("[keys] is now [signing]" in line for line in warned)
    assert any("DREAMCYCLE_KEYS_KEYRING_FILE is now DREAMCYCLE_SIGNING_KEYRING_FILE" in line
               for line in warned)  # fmt: skip


def test_the_signing_table_under_both_names_is_refused(tmp_path: Path) -> None:
    path = write_toml(tmp_path, '[keys]\nmode = "permissive"\n[signing]\nmode = "strict"\n')
    with pytest.raises(ConfigError, match=r"\[keys\] and \[signing\] are the same table"):
        load_config(path, environ={})
    both = {"DREAMCYCLE_KEYS_MODE": "permissive", "DREAMCYCLE_SIGNING_MODE": "strict"}
    with pytest.raises(ConfigError, match="DREAMCYCLE_KEYS_MODE and DREAMCYCLE_SIGNING_MODE"):
        load_config(None, environ=both)


def test_a_key_half_life_of_zero_means_keys_do_not_fade() -> None:
    assert load_config(None, environ={}).learning.key_half_life_s == 0.0
    for refused in ("-1", "inf"):
        with pytest.raises(ConfigError, match=r"learning\.key_half_life_s must be finite"):
            load_config(None, environ={"DREAMCYCLE_LEARNING_KEY_HALF_LIFE_S": refused})


def test_unrelated_environment_is_ignored() -> None:
    config = load_config(None, environ={"PATH": "/usr/bin", "DREAMCYCLEX": "1"})
    assert config == load_config(None, environ={})


@pytest.mark.parametrize(
    ("toml", "named"),
    [
        ("[cycle]\nintervall_s = 5\n", "cycle.intervall_s"),
        ("[cycles]\ninterval_s = 5\n", "cycles"),
        ("[zeitgeist.s3]\nbukket = 'x'\n", "zeitgeist.s3.bukket"),
    ],
)
def test_unknown_key_in_toml_is_named_with_its_file(tmp_path: Path, toml: str, named: str) -> None:
    path = write_toml(tmp_path, toml)
    with pytest.raises(ConfigError) as caught:
        load_config(path, environ={})
    message = str(caught.value)
    assert f"unknown key {named!r}" in message
    assert str(path) in message


@pytest.mark.parametrize(
    ("toml", "key"),
    [
        ('[cycle]\ninterval_s = "fast"\n', "cycle.interval_s"),
        ("[cycle]\ninterval_s = true\n", "cycle.interval_s"),
        ("[cycle]\nmax_segments = 2.5\n", "cycle.max_segments"),
        ('[sweep]\nenabled = "maybe"\n', "sweep.enabled"),
        ("[peer]\nid = 7\n", "peer.id"),
        ("cycle = 3\n", "cycle"),
    ],
)
def test_wrong_type_in_toml_is_named_with_its_file(tmp_path: Path, toml: str, key: str) -> None:
    path = write_toml(tmp_path, toml)
    with pytest.raises(ConfigError) as caught:
        load_config(path, environ={})
    assert key in str(caught.value)
    assert str(path) in str(caught.value)


@pytest.mark.parametrize(
    ("variable", "value", "key"),
    [
        ("DREAMCYCLE_CYCLE_INTERVAL_S", "soon", "cycle.interval_s"),
        ("DREAMCYCLE_SWEEP_ENABLED", "perhaps", "sweep.enabled"),
        ("DREAMCYCLE_INDEX_M", "16.5", "index.m"),
        ("DREAMCYCLE_PULSES_SIGMA", "nan", "pulses.sigma"),
    ],
)
def test_wrong_type_in_environment_names_the_variable(variable: str, value: str, key: str) -> None:
    with pytest.raises(ConfigError) as caught:
        load_config(None, environ={variable: value})
    assert key in str(caught.value)
    assert f"environment variable {variable}" in str(caught.value)


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("sweep.percentile", 100),
        ("sweep.percentile", 0),
        ("sweep.min_population", -1),
        ("cycle.interval_s", 0),
        ("cycle.max_segments", -3),
        ("recall.salience_bound", 1.5),
        ("embedding.threads", -1),
        ("zeitgeist.window_s", -60),
        ("cycle.give_way_s", -0.01),
        ("cycle.give_way_s", 2),
    ],
)
def test_out_of_range_value_names_key_and_source(tmp_path: Path, key: str, value: float) -> None:
    section, name = key.split(".")
    path = write_toml(tmp_path, f"[{section}]\n{name} = {value}\n")
    with pytest.raises(ConfigError) as caught:
        load_config(path, environ={})
    assert key in str(caught.value)
    assert str(path) in str(caught.value)

    variable = f"DREAMCYCLE_{section.upper()}_{name.upper()}"
    with pytest.raises(ConfigError) as caught:
        load_config(None, environ={variable: str(value)})
    assert key in str(caught.value)
    assert variable in str(caught.value)


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("zeitgeist.backend", "ftp"),
        ("pulses.update_rule", "dfs"),
        ("log.format", "xml"),
        ("metrics.listen", "localhost"),
        ("peer.id", "has space"),
    ],
)
def test_invalid_choice_names_the_key(key: str, value: str) -> None:
    variable = "DREAMCYCLE_" + key.replace(".", "_").upper()
    with pytest.raises(ConfigError) as caught:
        load_config(None, environ={variable: value})
    assert key in str(caught.value)


@pytest.mark.parametrize(
    "variable",
    ["DREAMCYCLE_CYCLE_INTERVALL_S", "DREAMCYCLE_NOSECTION_KEY", "DREAMCYCLE_ZEITGEIST_S3"],
)
def test_environment_variable_naming_no_setting_is_refused(variable: str) -> None:
    with pytest.raises(ConfigError) as caught:
        load_config(None, environ={variable: "1"})
    assert variable in str(caught.value)
    assert "does not name a setting" in str(caught.value)


def test_s3_backend_without_bucket_is_refused(tmp_path: Path) -> None:
    path = write_toml(tmp_path, '[zeitgeist]\nbackend = "s3"\n')
    with pytest.raises(ConfigError, match=r"zeitgeist\.s3\.bucket must be set"):
        load_config(path, environ={})
    config = load_config(path, environ={"DREAMCYCLE_ZEITGEIST_S3_BUCKET": "memories"})
    assert config.zeitgeist.s3.bucket == "memories"


def test_redis_backend_needs_a_redis_url() -> None:
    env = {"DREAMCYCLE_ZEITGEIST_BACKEND": "redis", "DREAMCYCLE_ZEITGEIST_REDIS_URL": "http://x"}
    with pytest.raises(ConfigError, match=r"zeitgeist\.redis\.url"):
        load_config(None, environ=env)


def test_missing_and_malformed_files_are_named(tmp_path: Path) -> None:
    missing = tmp_path / "absent.toml"
    with pytest.raises(ConfigError, match="does not exist") as caught:
        load_config(missing, environ={})
    assert str(missing) in str(caught.value)

    broken = write_toml(tmp_path, "[cycle\ninterval_s = 5\n")
    with pytest.raises(ConfigError, match="not valid TOML") as caught:
        load_config(broken, environ={})
    assert str(broken) in str(caught.value)


def test_recall_top_k_is_bounded(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"recall\.top_k must be <= 100"):
        load_config(write_toml(tmp_path, "[recall]\ntop_k = 101\n"), environ={})


@pytest.mark.parametrize(
    ("variable", "value", "message"),
    [
        ("DREAMCYCLE_DOWNSCALE_MIN_STEP_S", "-1", r"downscale\.min_step_s must be finite and >= 0"),
        (
            "DREAMCYCLE_DOWNSCALE_MIN_STEP_S",
            "inf",
            r"downscale\.min_step_s must be finite and >= 0",
        ),
        ("DREAMCYCLE_DOWNSCALE_MAX_CHUNKS_PER_CYCLE", "0", r"downscale\.max_chunks_per_cycle"),
    ],
)
def test_downscale_cadence_out_of_range_is_named(variable: str, value: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        load_config(None, environ={variable: value})


def test_recall_exact_filter_scale_must_not_be_negative() -> None:
    with pytest.raises(ConfigError, match=r"recall\.exact_filter_scale must be >= 0, got -1"):
        load_config(None, environ={"DREAMCYCLE_RECALL_EXACT_FILTER_SCALE": "-1"})
    assert load_config(None, environ={"DREAMCYCLE_RECALL_EXACT_FILTER_SCALE": "0"})


# ---- magnitudes: finite, and within what the code they reach can hold ----------------------

TOO_MANY = "100000000000000000000"


@pytest.mark.parametrize(
    ("variable", "value", "problem"),
    [
        ("DREAMCYCLE_RECALL_CANDIDATES", TOO_MANY, "recall.candidates must be at most 2147483647"),
        ("DREAMCYCLE_ZEITGEIST_WINDOW_S", "1e308", "zeitgeist.window_s must be at most"),
        ("DREAMCYCLE_ZEITGEIST_LIVENESS_TIMEOUT_S", "inf", "zeitgeist.liveness_timeout_s must be a finite"),
        ("DREAMCYCLE_CYCLE_MAX_EMBED", TOO_MANY, "cycle.max_embed must be at most"),
        ("DREAMCYCLE_DOWNSCALE_MAX_CHUNKS_PER_CYCLE", TOO_MANY, "downscale.max_chunks_per_cycle must be at most"),
        ("DREAMCYCLE_AUDIT_RETENTION_S", "1e308", "audit.retention_s must be at most"),
        ("DREAMCYCLE_SWEEP_COLD_RETENTION_S", "inf", "sweep.cold_retention_s must be a finite"),
        ("DREAMCYCLE_CLOCK_MAX_STEP_S", "1e308", "clock.max_step_s must be at most"),
        ("DREAMCYCLE_EMBEDDING_BATCH_SIZE", TOO_MANY, "embedding.batch_size must be at most"),
        ("DREAMCYCLE_EMBEDDING_THREADS", TOO_MANY, "embedding.threads must be at most 1024 threads"),
        ("DREAMCYCLE_API_WORKERS", "1025", "api.workers must be at most 1024 threads"),
        ("DREAMCYCLE_CYCLE_INTERVAL_S", "inf", "cycle.interval_s must be a finite"),
        ("DREAMCYCLE_SWEEP_GRACE_S", "inf", "sweep.grace_s must be a finite"),
        ("DREAMCYCLE_INDEX_SAVE_INTERVAL_S", "4e9", "index.save_interval_s must be at most"),
        ("DREAMCYCLE_ZEITGEIST_MAX_SNAPSHOT_BYTES", TOO_MANY, "zeitgeist.max_snapshot_bytes must be at most 1099511627776 bytes"),
        ("DREAMCYCLE_INDEX_EF", TOO_MANY, "index.ef must be at most"),
        ("DREAMCYCLE_INDEX_M", "1" + "0" * 400, "index.m must be at most"),
    ],
)  # fmt: skip
def test_numbers_beyond_what_can_be_used_are_refused_naming_the_key(
    variable: str, value: str, problem: str
) -> None:
    with pytest.raises(ConfigError) as caught:
        load_config(None, environ={variable: value})
    assert problem in str(caught.value)
    assert f"environment variable {variable}" in str(caught.value)


def test_the_largest_values_allowed_load(tmp_path: Path) -> None:
    century = defaults.CONFIG_MAX_SECONDS
    path = write_toml(
        tmp_path,
        f"""
        [audit]
        retention_s = {century}
        [clock]
        max_step_s = {century}
        [recall]
        candidates = {defaults.CONFIG_MAX_COUNT}
        [embedding]
        threads = {defaults.CONFIG_MAX_THREADS}
        [zeitgeist]
        max_snapshot_expanded_bytes = {defaults.CONFIG_MAX_BYTES}
        """,
    )
    config = load_config(path, environ={})
    assert config.clock.max_step_s == century
    assert config.recall.candidates == defaults.CONFIG_MAX_COUNT
    with pytest.raises(ConfigError, match=rf"{re.escape(str(path))}: audit\.retention_s must be"):
        load_config(write_toml(tmp_path, f"[audit]\nretention_s = {century * 2}\n"), environ={})
    with pytest.raises(ConfigError, match=rf"{re.escape(str(path))}: clock\.max_step_s must be"):
        load_config(write_toml(tmp_path, "[clock]\nmax_step_s = inf\n"), environ={})


# ---- the zeitgeist's addresses --------------------------------------------------------------


@pytest.mark.parametrize(
    "url",
    ["notaurl", "ftp://minio:9000", "http://", "http://minio:port", "http://minio:99999",
     "http://under_score:9000", "http://[::1"],
)  # fmt: skip
def test_an_s3_endpoint_that_is_not_an_http_url_is_refused(url: str) -> None:
    env = {
        "DREAMCYCLE_ZEITGEIST_BACKEND": "s3",
        "DREAMCYCLE_ZEITGEIST_S3_BUCKET": "b",
        "DREAMCYCLE_ZEITGEIST_S3_ENDPOINT_URL": url,
    }
    with pytest.raises(ConfigError) as caught:
        load_config(None, environ=env)
    assert "environment variable DREAMCYCLE_ZEITGEIST_S3_ENDPOINT_URL" in str(caught.value)
    assert "zeitgeist.s3.endpoint_url" in str(caught.value)


@pytest.mark.parametrize(
    "url", ["http://127.0.0.1:8333", "https://s3.eu-west-1.amazonaws.com", "http://[::1]:9000", ""]
)
def test_usable_s3_endpoints_load(url: str) -> None:
    env = {
        "DREAMCYCLE_ZEITGEIST_BACKEND": "s3",
        "DREAMCYCLE_ZEITGEIST_S3_BUCKET": "b",
        "DREAMCYCLE_ZEITGEIST_S3_ENDPOINT_URL": url,
    }
    assert load_config(None, environ=env).zeitgeist.s3.endpoint_url == url


@pytest.mark.parametrize(
    "url", ["redis://:abc", "redis://host:70000/0", "unix://", "redis://h/0?socket_timeout=soon"]
)
def test_a_redis_url_redis_cannot_use_is_refused(url: str) -> None:
    env = {"DREAMCYCLE_ZEITGEIST_BACKEND": "redis", "DREAMCYCLE_ZEITGEIST_REDIS_URL": url}
    with pytest.raises(ConfigError, match=r"zeitgeist\.redis\.url") as caught:
        load_config(None, environ=env)
    assert "environment variable DREAMCYCLE_ZEITGEIST_REDIS_URL" in str(caught.value)


@pytest.mark.parametrize(
    "url", ["redis://127.0.0.1:6379/0", "rediss://:secret@host:6380/1", "unix:///run/redis.sock"]
)
def test_usable_redis_urls_load(url: str) -> None:
    env = {"DREAMCYCLE_ZEITGEIST_BACKEND": "redis", "DREAMCYCLE_ZEITGEIST_REDIS_URL": url}
    assert load_config(None, environ=env).zeitgeist.redis.url == url


# ---- the data directory ------------------------------------------------------------------------


@pytest.mark.parametrize("value", ["", "   "])
def test_an_empty_data_dir_is_refused(value: str) -> None:
    with pytest.raises(ConfigError, match=r"DREAMCYCLE_PEER_DATA_DIR: peer\.data_dir .* is empty"):
        load_config(None, environ={"DREAMCYCLE_PEER_DATA_DIR": value})
    with pytest.raises(ConfigError, match=r"command line: peer\.data_dir .* is empty"):
        load_config(None, environ={}, overrides={"peer.data_dir": value})


# ---- the same, as a user meets them ---------------------------------------------------------


def _dreamcycle(cwd: Path, env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("DREAMCYCLE_")}
    return subprocess.run(
        [DREAMCYCLE, *args], cwd=cwd, env={**clean, **BASE_SETTINGS, **env},
        capture_output=True, text=True, timeout=CLI_TIMEOUT_S, check=False,
    )  # fmt: skip


@pytest.mark.parametrize(
    ("env", "args", "key"),
    [
        (
            {"DREAMCYCLE_CLOCK_MAX_STEP_S": "1e308"},
            ("ingest", "--no-embed", "notes.txt"),
            "clock.max_step_s",
        ),
        (
            {
                "DREAMCYCLE_ZEITGEIST_BACKEND": "s3",
                "DREAMCYCLE_ZEITGEIST_S3_BUCKET": "b",
                "DREAMCYCLE_ZEITGEIST_S3_ENDPOINT_URL": "notaurl",
            },
            ("run", "--once"),
            "zeitgeist.s3.endpoint_url",
        ),
        ({"DREAMCYCLE_PEER_DATA_DIR": ""}, ("ingest", "--no-embed", "notes.txt"), "peer.data_dir"),
        ({}, ("ingest", "--no-embed", "--data-dir", "", "notes.txt"), "peer.data_dir"),
    ],
)
def test_the_cli_refuses_a_bad_setting_with_exit_2_naming_it_and_writes_nothing(
    tmp_path: Path, env: dict[str, str], args: tuple[str, ...], key: str
) -> None:
    (tmp_path / "notes.txt").write_text("A paragraph worth keeping.\n", encoding="utf-8")
    result = _dreamcycle(tmp_path, env, *args, "--peer-id", "p")
    assert result.returncode == 2, result
    assert result.stderr.startswith("error: ") and key in result.stderr, result.stderr
    assert "Traceback" not in result.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["notes.txt"]


def test_the_api_is_served_on_its_socket_by_default_and_tcp_only_when_asked(
    tmp_path: Path,
) -> None:
    from dreamcycle.daemon.api.http import binds

    served = load_config(None, environ={}, overrides={"peer.data_dir": str(tmp_path)})
    assert served.api.enabled and served.api.port == 0 and not served.api.access_log
    assert binds(served) == [f"unix:{tmp_path / defaults.API_UNIX_SOCKET}"]
    tcp = load_config(None, environ={"DREAMCYCLE_API_PORT": "9465"})
    assert f"{defaults.API_HOST}:9465" in binds(tcp)
    off = load_config(None, environ={"DREAMCYCLE_API_ENABLED": "false"})
    assert not off.api.enabled
    # With no address left to serve on, the API served by default is off...
    nowhere = write_toml(tmp_path, '[api]\nunix_socket = ""\nport = 0\n')
    assert not load_config(nowhere, environ={}).api.enabled
    # ...and asked for in so many words, refused.
    with pytest.raises(ConfigError, match="nothing to listen on"):
        load_config(nowhere, environ={"DREAMCYCLE_API_ENABLED": "true"})
