"""What can go wrong between the user and the Hub, as messages written for that user."""

from __future__ import annotations

from pathlib import Path

from vrampilot.errors import UserError


class HubError(UserError):
    """Base of every hub failure the user can act on."""


class HubUnreachableError(HubError):
    """No answer from the Hub (offline, firewall, server down): retrying later is the remedy."""


class RepoNotFoundError(HubError):
    pass


class FileNotInRepoError(HubError):
    pass


class AccessDeniedError(HubError):
    """A gated or private repository refused us (HTTP 401/403)."""

    def __init__(self, message: str, *, repo_id: str, signed_in: bool, status: int) -> None:
        super().__init__(message)
        self.repo_id = repo_id
        self.signed_in = signed_in
        self.status = status


class NotEnoughSpaceError(HubError):
    def __init__(self, message: str, *, needed_bytes: int, free_bytes: int) -> None:
        super().__init__(message)
        self.needed_bytes = needed_bytes
        self.free_bytes = free_bytes


class DownloadInterruptedError(HubError):
    """The transfer stopped part-way; the bytes received are kept and the next try resumes."""

    def __init__(self, message: str, *, have_bytes: int) -> None:
        super().__init__(message)
        self.have_bytes = have_bytes


class ChecksumMismatchError(HubError):
    """The received file is not the one the Hub describes; it was moved aside, never offered."""

    def __init__(self, message: str, *, quarantine_path: Path, expected_sha256: str, actual_sha256: str) -> None:
        super().__init__(message)
        self.quarantine_path = quarantine_path
        self.expected_sha256 = expected_sha256
        self.actual_sha256 = actual_sha256


class InvalidTokenError(HubError):
    pass
