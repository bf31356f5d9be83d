"""The `server:` section: where and how the scheduler serves its endpoints (kube-scheduler's secure serving).

Plain HTTP serves /decisions (pod names, scores, costs of every namespace) to anyone who can connect, so it is
refused on anything but a loopback address unless `allowInsecureNonLoopback` says so explicitly."""

from __future__ import annotations

import ipaddress
from typing import Any

from metrics_sched.config.errors import ConfigError
from metrics_sched.config.model import ServerConfig
from metrics_sched.config.reader import (
    check_keys,
    field_name,
    mapping,
    read_bool,
    read_duration,
    read_int,
    read_str,
    sequence,
)
from metrics_sched.config.schema import keys

WHERE = "server"
MAX_CACHE_TTL = 600.0  # a revoked token or RoleBinding must stop working within minutes, not hours


def is_loopback(address: str) -> bool:
    if address == "localhost":
        return True
    try:
        return ipaddress.ip_address(address).is_loopback
    except ValueError:
        return False


def _paths(server: Any) -> tuple[str, ...]:
    key = "authorizationAlwaysAllowPaths"
    if server.get(key) is None:  # absent or null: upstream's default; [] means none
        return ServerConfig.always_allow_paths
    out: list[str] = []
    for i, value in enumerate(sequence(server[key], field_name(WHERE, key))):
        where = field_name(field_name(WHERE, key), i)
        if not isinstance(value, str) or not value.startswith("/"):
            raise ConfigError(where, f"must be a path starting with '/', got {value!r}")
        if "*" in value[:-1]:
            raise ConfigError(where, f"'*' is allowed only at the end (a prefix), got {value!r}")
        out.append(value)
    return tuple(out)


def _ttl(server: Any, key: str, default: float) -> float:
    return read_duration(server, key, WHERE, default, positive=False, maximum=MAX_CACHE_TTL)


def parse_server(data: Any) -> ServerConfig:
    server = mapping(data, WHERE, optional=True)
    check_keys(server, keys(WHERE), WHERE)
    d = ServerConfig
    config = ServerConfig(
        bind_address=read_str(server, "bindAddress", WHERE, d.bind_address, non_empty=True),
        port=read_int(server, "port", WHERE, d.port, minimum=1, maximum=65535),
        insecure=read_bool(server, "insecure", WHERE, d.insecure),
        allow_insecure_non_loopback=read_bool(server, "allowInsecureNonLoopback", WHERE,
                                              d.allow_insecure_non_loopback),
        tls_cert_file=read_str(server, "tlsCertFile", WHERE, d.tls_cert_file),
        tls_private_key_file=read_str(server, "tlsPrivateKeyFile", WHERE, d.tls_private_key_file),
        cert_dir=read_str(server, "certDir", WHERE, d.cert_dir),
        always_allow_paths=_paths(server),
        token_cache_ttl=_ttl(server, "authenticationTokenCacheTTL", d.token_cache_ttl),
        authorized_cache_ttl=_ttl(server, "authorizationCacheAuthorizedTTL", d.authorized_cache_ttl),
        unauthorized_cache_ttl=_ttl(server, "authorizationCacheUnauthorizedTTL", d.unauthorized_cache_ttl),
    )
    if bool(config.tls_cert_file) != bool(config.tls_private_key_file):
        missing = "tlsPrivateKeyFile" if config.tls_cert_file else "tlsCertFile"
        raise ConfigError(field_name(WHERE, missing), "tlsCertFile and tlsPrivateKeyFile go together")
    if config.insecure:
        for key in ("tlsCertFile", "tlsPrivateKeyFile", "certDir", "authorizationAlwaysAllowPaths"):
            if server.get(key):
                raise ConfigError(field_name(WHERE, key), "has no effect with insecure: true (plain HTTP, no "
                                                          "authentication); remove one or the other")
        if not is_loopback(config.bind_address) and not config.allow_insecure_non_loopback:
            raise ConfigError(field_name(WHERE, "bindAddress"),
                              f"insecure: true serves plain HTTP without authentication, so only on a loopback "
                              f"address (127.0.0.1, ::1, localhost), got {config.bind_address!r}; set "
                              f"allowInsecureNonLoopback: true to force it")
    elif config.allow_insecure_non_loopback:
        raise ConfigError(field_name(WHERE, "allowInsecureNonLoopback"), "only means something with insecure: true")
    return config
