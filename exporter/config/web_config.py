"""Prometheus exporter-toolkit's web config file, mapped onto ``web.tls`` and ``web.basic_auth``.

Operators of Prometheus exporters already hold such a file (``--web.config.file``):
``tls_server_config`` (cert_file, key_file, client_ca_file, client_auth_type,
min_version), ``basic_auth_users`` and ``http_server_config`` (``http2``: this
server speaks HTTP/1.1, which every client falls back to, so either value is
honoured). Keys this daemon cannot honour are errors naming the key (a typo with
the key it most likely meant), never silently dropped; relative paths are relative
to the file, as exporter-toolkit reads them.
"""

from __future__ import annotations

import os
from typing import Any

import yaml

from exporter.suggest import closest, hint

# exporter-toolkit key -> this daemon's web.tls key.
TLS_KEYS = {
    "cert_file": "cert_file",
    "key_file": "key_file",
    "client_ca_file": "client_ca_file",
    "client_auth_type": "client_auth_type",
    "min_version": "min_version",
}
PATH_KEYS = frozenset({"cert_file", "key_file", "client_ca_file"})
MIN_VERSIONS = {"TLS12": "TLS1.2", "TLS13": "TLS1.3"}
# exporter-toolkit's keys: top level, and under http_server_config.
TOP_KEYS = ("tls_server_config", "basic_auth_users", "http_server_config")
HTTP_KEYS = ("http2", "headers")


def _unknown(name: str, key: object, known: tuple[str, ...]) -> str:
    """``name: not supported``, with the toolkit key a typo most likely meant."""
    suggestion = closest(str(key), known)
    if suggestion:
        return f"{name}: not an exporter-toolkit key{hint(repr(suggestion))}"
    return f"{name}: not supported by accel-exporter"


def read_web_config(path: str) -> tuple[dict[str, Any], list[str]]:
    """``{"tls": {...}, "basic_auth": {...}}`` in this daemon's keys, and the problems found."""
    where = f"web.config_file {path}"
    try:
        with open(path, encoding="utf-8") as fh:
            data = yaml.safe_load(fh)
    except OSError:
        return {}, []  # web.config_file's own check (a file key) says why, once
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        at = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
        return {}, [f"{where}: invalid YAML{at}: {getattr(exc, 'problem', None) or exc}"]
    if data is None:
        return {}, []
    if not isinstance(data, dict):
        return {}, [f"{where}: must be a mapping"]
    base = os.path.dirname(os.path.abspath(path))
    out: dict[str, Any] = {}
    problems: list[str] = []
    for key, value in data.items():
        if key == "tls_server_config":
            tls, more = _tls(value, base, where)
            problems += more
            if tls:
                out["tls"] = tls
        elif key == "basic_auth_users":
            if value is not None and not isinstance(value, dict):
                problems.append(
                    f"{where}: basic_auth_users must be a mapping of user to bcrypt hash"
                )
            elif value:
                out["basic_auth"] = {"users": {str(k): v for k, v in value.items()}}
        elif key == "http_server_config":
            problems += _http(value, where)
        else:
            problems.append(_unknown(f"{where}: {key}", key, TOP_KEYS))
    return out, problems


def _tls(value: Any, base: str, where: str) -> tuple[dict[str, Any], list[str]]:
    if value is None:
        return {}, []
    if not isinstance(value, dict):
        return {}, [f"{where}: tls_server_config must be a mapping"]
    tls: dict[str, Any] = {}
    problems = []
    for key, item in value.items():
        name = f"{where}: tls_server_config.{key}"
        if key not in TLS_KEYS:
            problems.append(_unknown(name, key, tuple(TLS_KEYS)))
        elif key in PATH_KEYS and isinstance(item, str) and item:
            tls[TLS_KEYS[key]] = os.path.join(base, item)
        elif key == "min_version":
            if item not in MIN_VERSIONS:
                problems.append(f"{name}: must be TLS12 or TLS13, not {item!r}")
            else:
                tls["min_version"] = MIN_VERSIONS[item]
        else:
            tls[TLS_KEYS[key]] = item
    return tls, problems


def _http(value: Any, where: str) -> list[str]:
    """``http_server_config``: ``http2`` either way (HTTP/1.1 here); headers are not set."""
    if value is None:
        return []
    if not isinstance(value, dict):
        return [f"{where}: http_server_config must be a mapping"]
    problems = []
    for key, item in value.items():
        name = f"{where}: http_server_config.{key}"
        if key == "http2":
            if not isinstance(item, bool):
                problems.append(f"{name}: must be true or false, not {item!r}")
        elif key == "headers":
            problems.append(f"{name}: not supported by accel-exporter (it sets no extra headers)")
        else:
            problems.append(_unknown(name, key, HTTP_KEYS))
    return problems


def merge_web_config(data: dict[str, Any], origins: dict[tuple[str, ...], str]) -> list[str]:
    """Fold ``web.config_file`` (exporter-toolkit format) into ``web``; the problems found."""
    web = data.get("web")
    path = web.get("config_file") if isinstance(web, dict) else None
    if not isinstance(path, str) or not path:
        return []
    assert isinstance(web, dict)
    mapped, problems = read_web_config(path)
    origin = origins.get(("web", "config_file"), "")
    for section, values in mapped.items():
        if web.get(section):
            problems.append(f"web.{section}: set both here and in web.config_file {path}; keep one")
            continue
        web[section] = values
        for key in values:
            origins[("web", section, key)] = f"web.config_file {path} (from {origin})"
    return problems
