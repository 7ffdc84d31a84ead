"""Hugging Face hub: search, repository files with fit badges, verified resumable downloads, and
the local library (HF cache, LM Studio, Ollama, user folders). Qt-free; the GUI calls it from workers.
"""

from vrampilot.hub.auth import current_token, forget_token, resolve_token, save_token
from vrampilot.hub.badge import DEFAULT_TARGET_CTX, Badge, badge_for_spec
from vrampilot.hub.client import validate_token
from vrampilot.hub.download import (
    DownloadControl,
    Downloader,
    DownloadProgress,
    DownloadResult,
    DownloadState,
    download_model,
)
from vrampilot.hub.errors import (
    AccessDeniedError,
    ChecksumMismatchError,
    DownloadInterruptedError,
    FileNotInRepoError,
    HubError,
    HubUnreachableError,
    InvalidTokenError,
    NotEnoughSpaceError,
    RepoNotFoundError,
)
from vrampilot.hub.files import RemoteFile, RemoteModel, RepoFiles, list_repo_files
from vrampilot.hub.library import LocalModel, LocalStatus, Source, scan_library
from vrampilot.hub.records import PendingDownload, list_pending
from vrampilot.hub.remote import fetch_remote_header, remote_spec
from vrampilot.hub.search import RepoSummary, search_models
from vrampilot.planner.fit import Fit

__all__ = [
    "DEFAULT_TARGET_CTX",
    "AccessDeniedError",
    "Badge",
    "ChecksumMismatchError",
    "DownloadControl",
    "DownloadInterruptedError",
    "DownloadProgress",
    "DownloadResult",
    "DownloadState",
    "Downloader",
    "FileNotInRepoError",
    "Fit",
    "HubError",
    "HubUnreachableError",
    "InvalidTokenError",
    "LocalModel",
    "LocalStatus",
    "NotEnoughSpaceError",
    "PendingDownload",
    "RemoteFile",
    "RemoteModel",
    "RepoFiles",
    "RepoNotFoundError",
    "RepoSummary",
    "Source",
    "badge_for_spec",
    "current_token",
    "download_model",
    "fetch_remote_header",
    "forget_token",
    "list_pending",
    "list_repo_files",
    "remote_spec",
    "resolve_token",
    "save_token",
    "scan_library",
    "search_models",
    "validate_token",
]
