"""Google's OAuth side, emulated: a service-account key, the JWT-bearer token grant, access tokens."""

from __future__ import annotations

import base64
import json
import secrets
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

# The emulator's one dependency beyond the provider's: behind the "emulator" extra, so that a user's Airflow
# gets only what the provider needs at run time.
EXTRA_NEEDED = (
    "The Slurm Job API emulator needs the provider's 'emulator' extra: "
    "pip install 'airflow-provider-slurmapi[emulator]' (it adds cryptography, which signs its tokens)."
)
try:
    from cryptography.exceptions import InvalidSignature
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import padding, rsa
except ImportError as err:  # pragma: no cover - exercised by tests/emulator/test_emu_plugin.py in a subprocess
    raise ImportError(EXTRA_NEEDED) from err

JWT_BEARER_GRANT = "urn:ietf:params:oauth:grant-type:jwt-bearer"
CLOCK_SKEW = 60  # seconds Google tolerates between the signer's clock and its own
MAX_ASSERTION_LIFETIME = 3600
# google-auth always signs for Google's own token endpoint, whatever token_uri the key file names.
GOOGLE_TOKEN_AUDIENCES = frozenset(
    {"https://oauth2.googleapis.com/token", "https://www.googleapis.com/oauth2/v4/token"}
)


class GrantError(Exception):
    """A token request Google would refuse: ``error`` is the OAuth error code."""

    def __init__(self, error: str, description: str) -> None:
        super().__init__(description)
        self.error = error
        self.description = description


@dataclass(frozen=True)
class AccessToken:
    """An issued access token and who it speaks for."""

    principal: str
    expires_at: float
    scopes: tuple[str, ...]


@dataclass(frozen=True)
class ServiceAccountKey:
    """A service account the emulator issued a key for."""

    email: str
    key_id: str
    private_key: rsa.RSAPrivateKey

    def keyfile_dict(self, project: str, token_uri: str) -> dict[str, Any]:
        pem = self.private_key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        ).decode("ascii")
        return {
            "type": "service_account",
            "project_id": project,
            "private_key_id": self.key_id,
            "private_key": pem,
            "client_email": self.email,
            "client_id": str(int.from_bytes(self.key_id.encode()[:8], "big")),
            "auth_uri": "https://accounts.google.com/o/oauth2/auth",
            "token_uri": token_uri,
            "auth_provider_x509_cert_url": "https://www.googleapis.com/oauth2/v1/certs",
            "client_x509_cert_url": "",
            "universe_domain": "googleapis.com",
        }


def new_service_account(email: str) -> ServiceAccountKey:
    """A fresh 2048-bit RSA key for ``email``."""
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    return ServiceAccountKey(email=email, key_id=secrets.token_hex(20), private_key=key)


def write_keyfile(path: Path, keyfile: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(keyfile, indent=2) + "\n", encoding="utf-8")
    path.chmod(0o600)


def _b64decode(segment: str) -> bytes:
    return base64.urlsafe_b64decode(segment + "=" * (-len(segment) % 4))


class TokenAuthority:
    """Verifies JWT assertions, issues and checks access tokens; thread-safe."""

    def __init__(self, token_uri: str, token_lifetime: int) -> None:
        self.token_uri = token_uri
        self.token_lifetime = token_lifetime
        self._keys: dict[str, ServiceAccountKey] = {}
        self._tokens: dict[str, AccessToken] = {}
        self._lock = threading.Lock()
        self.token_requests = 0

    def add_key(self, key: ServiceAccountKey) -> None:
        with self._lock:
            self._keys[key.key_id] = key

    def grant(self, grant_type: str, assertion: str) -> tuple[str, int]:
        """The JWT-bearer grant: returns ``(access_token, expires_in)`` or raises ``GrantError``."""
        with self._lock:
            self.token_requests += 1
        if grant_type != JWT_BEARER_GRANT:
            raise GrantError("unsupported_grant_type", f"Invalid grant_type: {grant_type!r}")
        claims = self._verify(assertion)
        scopes = tuple(str(claims.get("scope", "")).split())
        if not scopes:
            raise GrantError("invalid_scope", "Empty or missing scope not allowed.")
        return self.issue(str(claims["iss"]), scopes, self.token_lifetime), self.token_lifetime

    def _verify(self, assertion: str) -> dict[str, Any]:
        try:
            header_b64, payload_b64, signature_b64 = assertion.split(".")
            header = json.loads(_b64decode(header_b64))
            claims = json.loads(_b64decode(payload_b64))
            signature = _b64decode(signature_b64)
        except ValueError as exc:
            raise GrantError("invalid_grant", "Invalid JWT: Token must be a short-lived token") from exc
        if not isinstance(header, dict) or not isinstance(claims, dict) or header.get("alg") != "RS256":
            raise GrantError("invalid_grant", "Invalid JWT: unsupported algorithm, RS256 expected")
        with self._lock:
            key = self._keys.get(str(header.get("kid", "")))
            candidates = [key] if key is not None else list(self._keys.values())
        signed = f"{header_b64}.{payload_b64}".encode("ascii")
        signer = next((k for k in candidates if _signature_ok(k, signed, signature)), None)
        if signer is None:
            raise GrantError("invalid_grant", "Invalid JWT Signature.")
        if claims.get("iss") != signer.email:
            raise GrantError("invalid_grant", "Invalid JWT: iss does not match the signing key's account")
        if claims.get("aud") != self.token_uri and claims.get("aud") not in GOOGLE_TOKEN_AUDIENCES:
            raise GrantError("invalid_grant", f"Invalid JWT: aud must be {self.token_uri}")
        now = time.time()
        try:
            exp, iat = float(claims["exp"]), float(claims.get("iat", now))
        except (KeyError, TypeError, ValueError) as exc:
            raise GrantError("invalid_grant", "Invalid JWT: exp claim missing or malformed") from exc
        if exp < now - CLOCK_SKEW or iat > now + CLOCK_SKEW or exp - iat > MAX_ASSERTION_LIFETIME:
            raise GrantError(
                "invalid_grant",
                "Invalid JWT: Token must be a short-lived token (60 minutes) and in a "
                "reasonable timeframe. Check your iat and exp values in the JWT claim.",
            )
        return claims

    def issue(self, principal: str, scopes: tuple[str, ...], lifetime: float) -> str:
        token = "ya29.emu-" + secrets.token_urlsafe(32)
        with self._lock:
            self._tokens[token] = AccessToken(principal, time.time() + lifetime, scopes)
        return token

    def check(self, authorization: str | None) -> AccessToken | None:
        """The token behind an ``Authorization`` header, or ``None`` if missing, unknown or expired."""
        if not authorization or not authorization.startswith("Bearer "):
            return None
        token = authorization[len("Bearer ") :].strip()
        with self._lock:
            info = self._tokens.get(token)
            if info is None:
                return None
            if info.expires_at <= time.time():
                del self._tokens[token]
                return None
            return info

    def expire_all(self) -> None:
        with self._lock:
            self._tokens.clear()


def _signature_ok(key: ServiceAccountKey, signed: bytes, signature: bytes) -> bool:
    try:
        key.private_key.public_key().verify(signature, signed, padding.PKCS1v15(), hashes.SHA256())
    except InvalidSignature:
        return False
    return True
