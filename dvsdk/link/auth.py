"""The dvlink shared secret and its challenge-response proofs (``firmware_spec/link.md`` §5).

The secret never crosses the link.  The agent's ``HELLO`` answer carries a
random challenge; the client answers with ``AUTH {proof, challenge}`` where
``proof = HMAC-SHA256(secret, client_label | agent challenge | client challenge
| nonce)``, and the agent proves itself with ``HMAC-SHA256(secret, agent_label
| client challenge | agent challenge)``.  Both sides read the secret from a file
(``--secret-file``, the URL option ``secret_file=``), else from
``$DVSDK_LINK_SECRET_FILE``, else ``$DVSDK_LINK_SECRET`` (the secret itself),
else from the user's config folder (``$XDG_CONFIG_HOME/dvsdk/link-secret``,
``~/.config`` by default), where the agent creates one on its first start.
"""

from __future__ import annotations

import base64
import hmac
import os
import secrets
import stat
from collections.abc import Mapping
from pathlib import Path
from typing import NamedTuple

from ..errors import InvalidArgument
from .protocol import AUTH

DIGEST = str(AUTH["digest"])
CHALLENGE_BYTES = int(AUTH["challenge_bytes"])
MIN_SECRET_BYTES = int(AUTH["min_secret_bytes"])
ENV_SECRET = str(AUTH["env_secret"])
ENV_SECRET_FILE = str(AUTH["env_secret_file"])
DEFAULT_FILE = str(AUTH["default_file"])
_CLIENT = str(AUTH["client_label"]).encode()
_AGENT = str(AUTH["agent_label"]).encode()


def _check(secret: bytes, where: str) -> bytes:
    if len(secret) < MIN_SECRET_BYTES:
        raise InvalidArgument(f"the link secret from {where} is too short", field="secret",
                              value=f"{len(secret)} bytes", limit=f">= {MIN_SECRET_BYTES} bytes",
                              hint="make one with: head -c 32 /dev/urandom | base64 > FILE")
    return secret


def read_secret_file(path: str) -> bytes:
    """The secret in ``path`` (``~`` expanded, surrounding whitespace stripped); the file
    must be private."""
    path = os.path.expanduser(path)
    try:
        st = os.stat(path)
        with open(path, "rb") as f:
            data = f.read(1 << 16)
    except OSError as exc:
        raise InvalidArgument(f"cannot read the link secret file: {exc.strerror}",
                              field="secret_file", value=path) from None
    if st.st_mode & (stat.S_IRWXG | stat.S_IRWXO):
        raise InvalidArgument("the link secret file is readable by others", field="secret_file",
                              value=path, limit="mode 0600", hint=f"chmod 600 {path}")
    return _check(data.strip(), path)


class Found(NamedTuple):
    """A secret and where it came from; ``explicit`` unless it is the config folder's."""

    secret: bytes | None
    where: str
    explicit: bool


def default_secret_path(env: Mapping[str, str] | None = None) -> Path:
    """``$XDG_CONFIG_HOME/dvsdk/link-secret`` (``~/.config`` when that is unset or not an
    absolute path, as the XDG base directory rules say)."""
    env = os.environ if env is None else env
    base = env.get("XDG_CONFIG_HOME", "")
    root = Path(base) if os.path.isabs(base) else Path(os.path.expanduser("~")) / ".config"
    return root / DEFAULT_FILE


def find_secret(path: str | None = None, env: Mapping[str, str] | None = None, *,
                default: bool = True) -> Found:
    """The shared secret: ``path``, else ``$DVSDK_LINK_SECRET_FILE``, else
    ``$DVSDK_LINK_SECRET``, else (``default``) the config folder's file if there is one."""
    env = os.environ if env is None else env
    if path:
        return Found(read_secret_file(path), os.path.expanduser(path), True)
    if env.get(ENV_SECRET_FILE):
        return Found(read_secret_file(env[ENV_SECRET_FILE]), env[ENV_SECRET_FILE], True)
    if env.get(ENV_SECRET):
        return Found(_check(env[ENV_SECRET].strip().encode(), f"${ENV_SECRET}"),
                     f"${ENV_SECRET}", True)
    where = default_secret_path(env)
    if default and where.exists():
        return Found(read_secret_file(str(where)), str(where), False)
    return Found(None, str(where), False)


def load_secret(path: str | None = None, env: Mapping[str, str] | None = None) -> bytes | None:
    """The shared secret as :func:`find_secret` finds it; None when there is none."""
    return find_secret(path, env).secret


def create_secret(path: Path) -> bytes:
    """A new random secret (32 bytes, base64) in ``path``, mode 0600 in a folder made 0700,
    unless a secret is there already (another agent made it first): then that one.  The
    file appears whole or not at all (written beside it, then linked, never replaced)."""
    try:
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.{os.getpid()}-{secrets.token_hex(4)}.tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0),
                     0o600)
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(base64.b64encode(secrets.token_bytes(32)) + b"\n")
                f.flush()
                os.fsync(f.fileno())
            try:
                os.link(tmp, path)
            except FileExistsError:
                pass
        finally:
            os.unlink(tmp)
    except OSError as exc:
        raise InvalidArgument(f"cannot create the link secret: {exc.strerror or exc}",
                              field="secret_file", value=str(path),
                              hint="give --secret-file PATH, or --insecure") from None
    return read_secret_file(str(path))


def challenge() -> bytes:
    """A fresh random challenge."""
    return secrets.token_bytes(CHALLENGE_BYTES)


def _mac(secret: bytes, *parts: bytes) -> bytes:
    return hmac.new(secret, b"".join(parts), DIGEST).digest()


def client_proof(secret: bytes, agent_challenge: bytes, client_challenge: bytes,
                 nonce: int) -> bytes:
    """What the client sends in AUTH."""
    return _mac(secret, _CLIENT, agent_challenge, client_challenge, nonce.to_bytes(8, "little"))


def agent_proof(secret: bytes, client_challenge: bytes, agent_challenge: bytes) -> bytes:
    """What the agent answers to a good AUTH."""
    return _mac(secret, _AGENT, client_challenge, agent_challenge)


def same(a: bytes, b: bytes) -> bool:
    """Constant-time comparison."""
    return hmac.compare_digest(bytes(a), bytes(b))

