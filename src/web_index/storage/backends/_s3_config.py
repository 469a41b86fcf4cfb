"""Where an S3 store's settings come from: the usual AWS environment
variables, else a profile of ``~/.aws`` (see docs/deploy.md); and the obstore client
made of them, with its timeouts and retries."""

from __future__ import annotations

import configparser
import os
from collections.abc import Mapping
from datetime import timedelta
from pathlib import Path
from typing import Any

from obstore.store import S3Store

__all__ = ["new_store", "store_config"]


def _profile_settings() -> dict[str, str]:
    """Credentials, region and endpoint of ``AWS_PROFILE`` (or ``default``) from ``~/.aws``."""
    profile = os.environ.get("AWS_PROFILE") or os.environ.get("AWS_DEFAULT_PROFILE") or "default"
    out: dict[str, str] = {}
    creds = Path(os.environ.get("AWS_SHARED_CREDENTIALS_FILE", "~/.aws/credentials")).expanduser()
    config = Path(os.environ.get("AWS_CONFIG_FILE", "~/.aws/config")).expanduser()
    for path, section in (
        (config, "default" if profile == "default" else f"profile {profile}"),
        (creds, profile),
    ):
        parser = configparser.ConfigParser()
        try:
            parser.read(path)
        except (OSError, configparser.Error):
            continue
        if parser.has_section(section):
            out.update(parser[section])
    keys = {
        "aws_access_key_id": "access_key_id",
        "aws_secret_access_key": "secret_access_key",
        "aws_session_token": "token",
        "region": "region",
        "endpoint_url": "endpoint",
    }
    return {keys[k]: v for k, v in out.items() if k in keys}


def store_config(bucket: str) -> dict[str, Any]:
    config: dict[str, Any] = {}
    env_has_keys = bool(os.environ.get("AWS_ACCESS_KEY_ID"))
    for key, value in _profile_settings().items():
        # Environment variables win over the profile, as in the AWS CLI.
        if key in ("access_key_id", "secret_access_key", "token") and env_has_keys:
            continue
        env = {"region": "AWS_REGION", "endpoint": "AWS_ENDPOINT_URL"}.get(key)
        if env and os.environ.get(env):
            continue
        config[key] = value
    endpoint = os.environ.get("AWS_ENDPOINT_URL_S3") or os.environ.get("AWS_ENDPOINT_URL")
    if endpoint:
        config["endpoint"] = endpoint
    if str(config.get("endpoint", "")).startswith("http://"):
        config["allow_http"] = True
    if not (os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION") or "region" in config):
        config["region"] = "us-east-1"
    return config


def new_store(
    bucket: str, prefix: str, settings: Mapping[str, Any], max_retries: int, retry_timeout_s: float
) -> S3Store:
    """The client of ``bucket`` under ``prefix``: transient failures (5xx, dropped connections,
    timeouts) retried with backoff from 50 ms doubling to 5 s, ``max_retries`` times within
    ``retry_timeout_s`` a request."""
    return S3Store(
        bucket,
        prefix=prefix or None,
        config=dict(settings),  # type: ignore[arg-type]
        client_options={"connect_timeout": timedelta(seconds=5), "timeout": timedelta(seconds=60)},
        retry_config={
            "max_retries": max_retries,
            "retry_timeout": timedelta(seconds=retry_timeout_s),
            "backoff": {
                "init_backoff": timedelta(milliseconds=50),
                "max_backoff": timedelta(seconds=5),
                "base": 2,
            },
        },
    )
