"""Configuration: defaults < TOML file < DREAMCYCLE_* environment < command line, with
errors that name the setting and where the bad value came from."""

from __future__ import annotations

import inspect
from pathlib import Path

import pytest

from dreamcycle.daemon import defaults
from dreamcycle.daemon.config import ConfigError, default_peer_id, load_config
from dreamcycle.pulses.ranking import RankingWeights
from dreamcycle.pulses.sweep import SweepMix, plan_sweep
from dreamcycle.store.embedder import Embedder
from dreamcycle.store.index import HnswIndex, open_or_rebuild


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
