"""The connection to the Hub: one HfApi per endpoint, request headers, and error translation.

Every call passes the endpoint and the token explicitly (see env.py): huggingface_hub would
otherwise use the values it read at import, and could send a token we were not asked to send.
"""

from __future__ import annotations

import contextlib
import ipaddress
import re
import socket
import threading
from collections.abc import Iterator
from urllib.parse import urlsplit

import httpx2
from huggingface_hub import HfApi
from huggingface_hub.errors import (
    DisabledRepoError,
    GatedRepoError,
    HfHubHTTPError,
    OfflineModeIsEnabled,
    RemoteEntryNotFoundError,
    RepositoryNotFoundError,
    RevisionNotFoundError,
)
from huggingface_hub.utils._headers import build_hf_headers
from huggingface_hub.utils._http import get_session, hf_raise_for_status, hf_request_event_hook, set_client_factory

from vrampilot import __version__
from vrampilot.hub.auth import resolve_token
from vrampilot.hub.env import hub_endpoint, hub_offline
from vrampilot.hub.errors import (
    AccessDeniedError,
    FileNotInRepoError,
    HubError,
    HubUnreachableError,
    InvalidTokenError,
    RepoNotFoundError,
)

# huggingface_hub's shared client waits forever by default; a Hub that stops answering must turn
# into a message, not a frozen worker. Reads get a generous limit because CDNs pause under load.
CONNECT_TIMEOUT_S = 10.0
READ_TIMEOUT_S = 60.0
_client_lock = threading.Lock()
_client_configured = False
_transfer_client: httpx2.Client | None = None


def _client_factory() -> httpx2.Client:
    return httpx2.Client(
        event_hooks={"request": [hf_request_event_hook]},
        follow_redirects=True,
        timeout=httpx2.Timeout(READ_TIMEOUT_S, connect=CONNECT_TIMEOUT_S),
    )


def session() -> httpx2.Client:
    """huggingface_hub's shared HTTP client, configured once with timeouts."""
    global _client_configured
    if not _client_configured:
        with _client_lock:
            if not _client_configured:
                set_client_factory(_client_factory)
                _client_configured = True
    return get_session()


def transfer_client() -> httpx2.Client:
    """Our own client for byte ranges and downloads.

    Separate from huggingface_hub's shared client because its retry helper closes that client on a
    connection error, which would cut a download running in another thread.
    """
    global _transfer_client
    with _client_lock:
        if _transfer_client is None:
            _transfer_client = _client_factory()
        return _transfer_client


def hub_api() -> HfApi:
    session()
    return HfApi(endpoint=hub_endpoint(), library_name="vrampilot", library_version=__version__)


def token_arg(token: str | None) -> str | bool:
    """What to pass as huggingface_hub's `token=`: ours, or False (never its implicit lookup)."""
    return token if token else False


def default_token() -> str | None:
    return resolve_token()


def request_headers(token: str | None) -> dict[str, str]:
    headers = build_hf_headers(token=token_arg(token), library_name="vrampilot", library_version=__version__)
    headers["Accept-Encoding"] = "identity"  # byte ranges and sizes must refer to the stored file
    return headers


def raise_for_status(response: httpx2.Response) -> None:
    """huggingface_hub's status check (it knows the Hub's X-Error-Code headers)."""
    hf_raise_for_status(response)


def _status(exc: BaseException) -> int | None:
    response = getattr(exc, "response", None)
    return getattr(response, "status_code", None)


def access_message(repo_id: str, status: int | None, signed_in: bool) -> str:
    url = f"{hub_endpoint()}/{repo_id}"
    if not signed_in:
        return (
            f"{repo_id} is gated or private: accept its conditions at {url} with your Hugging Face account, "
            "then sign in with a token (Sign in… in the Hub tab, or `vrampilot hub login`)"
        )
    return (
        f"your token has no access to {repo_id} (HTTP {status or 403}): accept its conditions at {url}, "
        "or sign in with a token that may read gated repositories"
    )


@contextlib.contextmanager
def hub_call(repo_id: str | None, *, token: str | None = None, filename: str | None = None) -> Iterator[None]:
    """Turn huggingface_hub and network exceptions into HubError subclasses with plain messages."""
    endpoint = hub_endpoint()
    what = f"{repo_id}/{filename}" if repo_id and filename else repo_id or endpoint
    if hub_offline():
        raise HubUnreachableError("offline mode is on (HF_HUB_OFFLINE=1): the Hub is not contacted")
    _check_resolvable(endpoint)
    try:
        yield
    except HubError:
        raise
    except OfflineModeIsEnabled:
        raise HubUnreachableError("offline mode is on (HF_HUB_OFFLINE=1): the Hub is not contacted") from None
    except GatedRepoError as exc:
        raise AccessDeniedError(
            access_message(repo_id or "", _status(exc), bool(token)),
            repo_id=repo_id or "",
            signed_in=bool(token),
            status=_status(exc) or 401,
        ) from None
    except RemoteEntryNotFoundError:
        raise FileNotInRepoError(f"{filename or 'this file'} is not in {repo_id} (or not at this revision)") from None
    except RevisionNotFoundError:
        raise RepoNotFoundError(f"{repo_id} has no such revision") from None
    except DisabledRepoError:
        raise RepoNotFoundError(f"{repo_id} has been disabled by the Hub") from None
    except RepositoryNotFoundError as exc:
        status = _status(exc)
        if status in (401, 403) and repo_id:
            raise AccessDeniedError(
                f"{repo_id} was not found, or it is private or gated: check the name; if it is gated, "
                + access_message(repo_id, status, bool(token)),
                repo_id=repo_id,
                signed_in=bool(token),
                status=status,
            ) from None
        raise RepoNotFoundError(f"{repo_id} was not found on {endpoint}; check the name (owner/name)") from None
    except HfHubHTTPError as exc:
        status = _status(exc)
        if status in (401, 403) and repo_id:
            raise AccessDeniedError(
                access_message(repo_id, status, bool(token)), repo_id=repo_id, signed_in=bool(token), status=status
            ) from None
        if status is not None and status >= 500:
            raise HubUnreachableError(
                f"the Hub at {endpoint} answered HTTP {status} for {what}; try again later"
            ) from None
        if status == 429:
            raise HubUnreachableError(
                f"the Hub at {endpoint} asks to slow down (HTTP 429); try again in a minute"
            ) from None
        raise HubError(f"the Hub at {endpoint} refused the request for {what} (HTTP {status})") from None
    except (httpx2.TransportError, ConnectionError, TimeoutError) as exc:
        raise HubUnreachableError(
            f"cannot reach the Hub at {endpoint}: {_why_unreachable(exc)}; check the network connection and try again"
        ) from None


def _check_resolvable(endpoint: str) -> None:
    """Fail at once when the Hub's name cannot be looked up (no network): huggingface_hub would
    retry the same failure five times with back-off, about 24 s, before saying so."""
    host = urlsplit(endpoint).hostname
    if not host or host in ("localhost",) or _is_ip(host):
        return
    try:
        socket.getaddrinfo(host, None)
    except socket.gaierror:
        raise HubUnreachableError(
            f"cannot reach the Hub at {endpoint}: the name {host} cannot be looked up (no network connection?)"
        ) from None


def _is_ip(host: str) -> bool:
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return False
    return True


def _why_unreachable(exc: BaseException) -> str:
    """A reason a person reads, without exception class names and errno brackets."""
    if isinstance(exc, (httpx2.TimeoutException, TimeoutError)):
        return "it did not answer in time"
    text = str(exc) or type(exc).__name__
    if "refused" in text.lower():
        return "the connection was refused"
    if "Name or service not known" in text or "nodename nor servname" in text or "getaddrinfo" in text:
        return "its name cannot be looked up (no network connection?)"
    return re.sub(r"\[Errno -?\d+\]\s*", "", text)


def validate_token(token: str) -> str:
    """The account name the Hub reports for `token`; raises InvalidTokenError or a network error."""
    with hub_call(None):
        try:
            info = hub_api().whoami(token=token.strip())
        except Exception as exc:
            status = getattr(getattr(exc, "response", None), "status_code", None)
            if status in (401, 403):
                raise InvalidTokenError(
                    f"the Hub at {hub_endpoint()} did not accept this token; create one at "
                    "https://huggingface.co/settings/tokens (read access is enough)"
                ) from None
            raise
    return str(info.get("name") or "unknown user")
