"""google-auth credentials turned into access tokens: cached per credential, refreshed ahead of expiry.

One :class:`TokenSource` per distinct credential per process (see :func:`token_source`), so every hook,
client and trigger in a worker or triggerer shares one token and at most one refresh is in flight. The
async path refreshes in a worker thread, never on the event loop.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from typing import Any

from airflow_provider_slurmapi.api.errors import SlurmAuthError, SlurmJobSpecError

CLOUD_PLATFORM_SCOPE = "https://www.googleapis.com/auth/cloud-platform"
# Refresh this long before the token expires, so no call goes out with a token about to lapse.
REFRESH_MARGIN = timedelta(minutes=5)


@dataclass(frozen=True)
class AuthConfig:
    """Where credentials come from. With neither ``key_path`` nor ``keyfile_dict``: Application Default
    Credentials. ``impersonation_chain``: service accounts to impersonate, the last one being used."""

    key_path: str | None = None
    keyfile_dict: Mapping[str, Any] | None = field(default=None, repr=False)
    impersonation_chain: tuple[str, ...] = ()
    scopes: tuple[str, ...] = (CLOUD_PLATFORM_SCOPE,)
    quota_project_id: str | None = None
    iam_endpoint: str | None = None

    def __post_init__(self) -> None:
        if self.key_path and self.keyfile_dict:
            raise SlurmJobSpecError(
                "key_path", "and keyfile_dict are both set", "Set only one of them in the connection."
            )
        if self.keyfile_dict is not None and not isinstance(self.keyfile_dict, Mapping):
            raise SlurmJobSpecError(
                "keyfile_dict", "is not a JSON object", "Paste the service-account key file's JSON."
            )
        if not self.scopes or not all(isinstance(s, str) and s for s in self.scopes):
            raise SlurmJobSpecError("scopes", f"{self.scopes!r} is empty or invalid", "Leave it unset.")

    def cache_key(self) -> str:
        """Identifies the credential without holding key material in the clear."""
        key = json.dumps(dict(self.keyfile_dict), sort_keys=True) if self.keyfile_dict else ""
        parts = [
            self.key_path or "",
            hashlib.sha256(key.encode()).hexdigest() if key else "",
            ",".join(self.impersonation_chain),
            ",".join(self.scopes),
            self.quota_project_id or "",
            self.iam_endpoint or "",
        ]
        return "|".join(parts)


def build_credentials(config: AuthConfig) -> Any:
    """google-auth credentials for ``config`` (loads files; call off the event loop)."""
    import google.auth
    from google.auth import exceptions as gexc
    from google.auth import impersonated_credentials
    from google.oauth2 import service_account

    scopes = list(config.scopes)
    try:
        if config.key_path:
            credentials = service_account.Credentials.from_service_account_file(config.key_path, scopes=scopes)
        elif config.keyfile_dict:
            credentials = service_account.Credentials.from_service_account_info(
                dict(config.keyfile_dict), scopes=scopes
            )
        else:
            credentials, _ = google.auth.default(scopes=scopes)
    except FileNotFoundError:
        raise SlurmAuthError(
            f"key_path: no service-account key file at {config.key_path!r}. Fix the path in the connection, "
            "or remove it to use Application Default Credentials."
        ) from None
    except (ValueError, KeyError) as err:
        raise SlurmAuthError(
            f"The service-account key is not valid ({type(err).__name__}: {_safe(err)}). Use the JSON key "
            "file downloaded from the Google Cloud console."
        ) from None
    except gexc.DefaultCredentialsError:
        raise SlurmAuthError(
            "No Google credentials found: run `gcloud auth application-default login`, or set key_path "
            "or keyfile_dict in the slurmapi connection."
        ) from None
    if config.impersonation_chain:
        *delegates, target = config.impersonation_chain
        override = None
        if config.iam_endpoint:
            override = f"{config.iam_endpoint}/v1/projects/-/serviceAccounts/{target}:generateAccessToken"
        credentials = impersonated_credentials.Credentials(
            source_credentials=credentials,
            target_principal=target,
            target_scopes=scopes,
            delegates=delegates or None,
            iam_endpoint_override=override,
        )
    if config.quota_project_id and hasattr(credentials, "with_quota_project"):
        credentials = credentials.with_quota_project(config.quota_project_id)
    return credentials


def _safe(err: BaseException) -> str:
    """An exception's text with anything token- or key-like cut out."""
    text = str(err)
    for marker in ("access_token", "assertion", "PRIVATE KEY", "Bearer ", "ya29."):
        if marker in text:
            return "details withheld: the reply contained credential material"
    return text[:300]


class TokenSource:
    """Hands out a valid access token, refreshing it ahead of expiry, one refresh at a time."""

    def __init__(self, config: AuthConfig) -> None:
        self.config = config
        self._credentials: Any = None
        self._lock = threading.Lock()
        self._session: Any = None
        self.refresh_count = 0

    def __repr__(self) -> str:
        return f"TokenSource(key_path={self.config.key_path!r}, refreshes={self.refresh_count})"

    def _fresh_token(self) -> str | None:
        creds = self._credentials
        if creds is None or not creds.token:
            return None
        expiry = creds.expiry
        if expiry is None:
            return str(creds.token)
        if expiry.tzinfo is None:
            expiry = expiry.replace(tzinfo=timezone.utc)
        if expiry - datetime.now(tz=timezone.utc) <= REFRESH_MARGIN:
            return None
        return str(creds.token)

    def token(self) -> str:
        """A valid token; blocks while refreshing (use :meth:`atoken` on an event loop)."""
        token = self._fresh_token()
        if token:
            return token
        with self._lock:
            token = self._fresh_token()
            if token:
                return token
            return self._refresh()

    def invalidate(self, token: str | None = None) -> None:
        """Forget the current token (after the API said UNAUTHENTICATED).

        Never waits for a refresh in flight, so it is safe on an event loop. With ``token`` (the one the
        API refused) only that token is forgotten: a caller whose old token was refused does not throw
        away the one another caller has just fetched.
        """
        creds = self._credentials
        if creds is not None and (token is None or creds.token == token):
            creds.token = None

    async def atoken(self) -> str:
        """A valid token without blocking the event loop: the refresh runs in a worker thread."""
        token = self._fresh_token()
        if token:
            return token
        return await asyncio.to_thread(self.token)

    def _refresh(self) -> str:
        import google.auth.transport.requests
        import requests
        from google.auth import exceptions as gexc

        if self._credentials is None:
            self._credentials = build_credentials(self.config)
        if self._session is None:
            self._session = requests.Session()
        try:
            self._credentials.refresh(google.auth.transport.requests.Request(self._session))
        except gexc.RefreshError as err:
            raise SlurmAuthError(
                f"Could not get a Google access token: {_safe(err)}. Check that the service account "
                "exists, its key is valid, and (with impersonation) that it holds "
                "roles/iam.serviceAccountTokenCreator on the target.",
                retryable=getattr(err, "retryable", False),
            ) from None
        except gexc.TransportError as err:
            raise SlurmAuthError(
                f"Could not reach Google's token endpoint: {_safe(err)}. It is retried.", retryable=True
            ) from None
        self.refresh_count += 1
        return str(self._credentials.token)


_SOURCES: dict[str, TokenSource] = {}
_SOURCES_LOCK = threading.Lock()


def token_source(config: AuthConfig) -> TokenSource:
    """The process-wide :class:`TokenSource` for ``config``."""
    key = config.cache_key()
    with _SOURCES_LOCK:
        source = _SOURCES.get(key)
        if source is None:
            source = _SOURCES[key] = TokenSource(config)
        return source


def parse_chain(value: Any) -> tuple[str, ...]:
    """An impersonation chain from a list or a comma-separated string."""
    if value in (None, "", []):
        return ()
    items: Sequence[Any] = value.split(",") if isinstance(value, str) else value
    if not isinstance(items, (list, tuple)):
        raise SlurmJobSpecError(
            "impersonation_chain", f"{value!r} is not a list", "Give service-account emails, comma separated."
        )
    chain = tuple(str(i).strip() for i in items if str(i).strip())
    for email in chain:
        if "@" not in email:
            raise SlurmJobSpecError(
                "impersonation_chain",
                f"{email!r} is not a service-account email",
                "Use NAME@PROJECT.iam.gserviceaccount.com.",
            )
    return chain
