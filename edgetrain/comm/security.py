"""CURVE keys of a run: the security setting, generating key pairs, and loading them safely.

A run's keys directory holds two CURVE key pairs in ZeroMQ's certificate format:
``server.key``/``server.key_secret`` (every socket that binds: the coordinator and each worker's
gossip inbox) and ``client.key``/``client.key_secret`` (every socket that connects). A binding
socket accepts only clients that prove they hold the client secret key; everything on the wire
is encrypted. The directory is 0700 and its files 0600.
"""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass
from pathlib import Path

import zmq
import zmq.auth

from edgetrain.errors import EdgetrainError
from edgetrain.rundir import atomic_write_text

MODES = ("none", "curve")
KEY_FILES = ("server.key", "server.key_secret", "client.key", "client.key_secret")


class SecurityError(EdgetrainError):
    """A security setting or keys directory that cannot be used."""


@dataclass(frozen=True)
class SecurityConfig:
    """The recipe's ``[run] security`` mode and the keys directory it uses."""

    mode: str = "none"
    keys_dir: Path | None = None

    def __post_init__(self) -> None:
        if self.mode not in MODES:
            raise SecurityError(
                f"unknown security mode {self.mode!r}", 'use security = "none" or "curve"'
            )
        if self.mode == "curve" and self.keys_dir is None:
            raise SecurityError('security = "curve" needs a keys directory', "set [run] keys")

    @property
    def enabled(self) -> bool:
        return self.mode == "curve"


@dataclass(frozen=True)
class CurveKeys:
    """A run's two key pairs, Z85-encoded as ZeroMQ's socket options take them."""

    server_public: bytes
    server_secret: bytes
    client_public: bytes
    client_secret: bytes


def security_config(mode: str, keys: str | Path | None, base_dir: Path | None) -> SecurityConfig:
    """Build the config from the recipe's two fields; a relative ``keys`` is under ``base_dir``."""
    if mode != "curve":
        return SecurityConfig(mode)
    path = Path(keys if keys is not None else "keys").expanduser()
    if not path.is_absolute() and base_dir is not None:
        path = base_dir / path
    return SecurityConfig(mode, path)


def _fix(keys_dir: Path) -> str:
    return f"run `edgetrain keys generate {keys_dir}` and copy the directory to every host"


def _read_pair(keys_dir: Path, name: str) -> tuple[bytes, bytes]:
    secret_file = keys_dir / f"{name}.key_secret"
    try:
        public, secret = zmq.auth.load_certificate(secret_file)
    except (OSError, ValueError) as exc:
        raise SecurityError(
            f"cannot read CURVE key {secret_file} ({exc})", _fix(keys_dir)
        ) from None
    if secret is None or len(public) != 40 or len(secret) != 40:
        raise SecurityError(f"CURVE key file {secret_file} is malformed", _fix(keys_dir))
    if zmq.curve_public(secret) != public:
        raise SecurityError(f"public and secret key in {secret_file} differ", _fix(keys_dir))
    return public, secret


def load_keys(config: SecurityConfig) -> CurveKeys | None:
    """The run's keys, or None when security is off; raises :class:`SecurityError` if unusable."""
    if not config.enabled or config.keys_dir is None:
        return None
    keys_dir = config.keys_dir
    if not keys_dir.is_dir():
        raise SecurityError(f'security = "curve" but keys directory {keys_dir} does not exist',
                            _fix(keys_dir))  # fmt: skip
    server = _read_pair(keys_dir, "server")
    client = _read_pair(keys_dir, "client")
    return CurveKeys(server[0], server[1], client[0], client[1])


def _certificate(public: bytes, secret: bytes | None) -> str:
    lines = [
        "#   ****  edgetrain CURVE key: keep the *.key_secret files private (mode 0600)  ****",
        "metadata",
        "curve",
        f'    public-key = "{public.decode("ascii")}"',
    ]
    if secret is not None:
        lines.append(f'    secret-key = "{secret.decode("ascii")}"')
    return "\n".join(lines) + "\n"


def generate_keys(keys_dir: Path, force: bool = False) -> list[Path]:
    """Write fresh server and client key pairs into ``keys_dir`` (0700, files 0600)."""
    existing = [keys_dir / f for f in KEY_FILES if (keys_dir / f).exists()]
    if existing and not force:
        raise SecurityError(
            f"{existing[0]} already exists", "pass --force to replace the keys of this directory"
        )
    keys_dir.mkdir(parents=True, exist_ok=True)
    os.chmod(keys_dir, stat.S_IRWXU)
    written: list[Path] = []
    for name in ("server", "client"):
        public, secret = zmq.curve_keypair()
        for suffix, text in ((".key", _certificate(public, None)),
                             (".key_secret", _certificate(public, secret))):  # fmt: skip
            path = keys_dir / f"{name}{suffix}"
            atomic_write_text(path, text)
            os.chmod(path, stat.S_IRUSR | stat.S_IWUSR)
            written.append(path)
    return written
