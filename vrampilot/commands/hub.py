"""`vrampilot hub search|files|download|library|login|logout`: the model hub from the command line."""

from __future__ import annotations

import argparse
import getpass
import json
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from vrampilot.commands.options import add_target_options, target_request_from_args
from vrampilot.errors import UserError
from vrampilot.gguf import GGUFError, load_model_spec
from vrampilot.hub.auth import current_token, forget_token, save_token
from vrampilot.hub.badge import DEFAULT_TARGET_CTX, Badge, badge_for_spec
from vrampilot.hub.client import validate_token
from vrampilot.hub.download import DownloadProgress, download_model
from vrampilot.hub.errors import HubError
from vrampilot.hub.files import RemoteModel, RepoFiles, list_repo_files
from vrampilot.hub.library import scan_library
from vrampilot.hub.remote import matching_remote_projector, remote_spec
from vrampilot.hub.search import SORT_KEYS, RepoSummary, search_models
from vrampilot.units import format_bytes, format_tokens

if TYPE_CHECKING:
    from vrampilot.planner.target import Target


def _count(text: str) -> int:
    """'7B' -> 7e9, '500M' -> 5e8, a plain number as is."""
    t = text.strip().upper()
    scale = {"K": 1e3, "M": 1e6, "B": 1e9, "T": 1e12}.get(t[-1:], 1)
    try:
        return int(float(t[:-1] if scale != 1 else t) * scale)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a parameter count: {text!r} (examples: 3B, 500M)") from None


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    hub = sub.add_parser("hub", help="search Hugging Face for GGUF models, judge and download them")
    hsub = hub.add_subparsers(dest="hub_command", metavar="ACTION", required=True)

    s = hsub.add_parser("search", help="find GGUF repositories")
    s.add_argument("query", help="words to search for, e.g. 'qwen2.5 7b instruct'")
    s.add_argument("--sort", choices=SORT_KEYS, default="downloads", help="order (default: downloads)")
    s.add_argument("--arch", metavar="NAME", help="only this architecture (llama, qwen2, gemma3, ...)")
    s.add_argument("--min-size", type=_count, metavar="N", help="at least N parameters, e.g. 3B")
    s.add_argument("--max-size", type=_count, metavar="N", help="at most N parameters, e.g. 9B")
    s.add_argument("--limit", type=int, default=20, metavar="N", help="results to show (default 20)")
    s.add_argument("--json", action="store_true", help="print one JSON object")
    s.set_defaults(handler=run_search)

    f = hsub.add_parser("files", help="list a repository's GGUF files with a fit badge for this machine")
    f.add_argument("repo", help="repository, e.g. bartowski/Qwen2.5-7B-Instruct-GGUF")
    f.add_argument("--revision", help="branch, tag or commit (default: main)")
    f.add_argument("--ctx", type=int, default=DEFAULT_TARGET_CTX, metavar="N", help="context to plan for")
    add_target_options(f)
    f.add_argument("--no-badges", action="store_true", help="list files only (no header reads)")
    f.add_argument("--json", action="store_true", help="print one JSON object")
    f.set_defaults(handler=run_files)

    d = hsub.add_parser("download", help="download a model into the Hugging Face cache (resumable, verified)")
    d.add_argument("repo", help="repository")
    d.add_argument("file", help="GGUF file in the repository (any part of a split model fetches all parts)")
    d.add_argument("--revision", help="branch, tag or commit (default: main)")
    d.add_argument(
        "--with-mmproj",
        action="store_true",
        help="also download the repository's vision projector (mmproj) that fits the model, into the same folder",
    )
    d.set_defaults(handler=run_download)

    lib = hsub.add_parser("library", help="GGUF models on this machine (HF cache, LM Studio, Ollama, folders)")
    lib.add_argument("--folder", action="append", type=Path, default=[], metavar="DIR", help="also scan DIR")
    lib.add_argument("--json", action="store_true", help="print one JSON object")
    lib.set_defaults(handler=run_library)

    li = hsub.add_parser("login", help="store a Hugging Face token (keyring, else the Hub's token file)")
    li.add_argument(
        "--token",
        help="the token (default: asked for, or read from standard input; other users "
        "of this machine can see a command line, so leave it out there)",
    )
    li.set_defaults(handler=run_login)

    lo = hsub.add_parser("logout", help="forget the stored Hugging Face token")
    lo.set_defaults(handler=run_logout)


# -- search ------------------------------------------------------------------------------------


def _fmt_count(n: int | None) -> str:
    if n is None:
        return "?"
    for unit, size in (("B", 1e9), ("M", 1e6), ("K", 1e3)):
        if n >= size:
            return f"{n / size:.1f}{unit}".replace(".0", "")
    return str(n)


def run_search(args: argparse.Namespace) -> int:
    results = search_models(
        args.query,
        sort=args.sort,
        architecture=args.arch,
        min_params=args.min_size,
        max_params=args.max_size,
        limit=args.limit,
    )
    if args.json:
        print(json.dumps({"query": args.query, "sort": args.sort, "results": [r.to_dict() for r in results]}, indent=2))
        return 0
    if not results:
        print(f"no GGUF repositories match {args.query!r}")
        return 0
    print(_search_table(results))
    return 0


def _search_table(results: list[RepoSummary]) -> str:
    rows = [("REPOSITORY", "DOWNLOADS", "LIKES", "UPDATED", "PARAMS", "ARCH", "LICENCE")]
    for r in results:
        rows.append(
            (
                r.repo_id + (" (gated)" if r.gated else ""),
                _fmt_count(r.downloads),
                str(r.likes),
                r.last_modified.date().isoformat() if r.last_modified else "",
                _fmt_count(r.n_params),
                r.architecture or "",
                r.license or "",
            )
        )
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() for row in rows)


# -- files -------------------------------------------------------------------------------------


def _target(args: argparse.Namespace) -> Target:
    """What the badges judge for: the same options, request and resolver as `vrampilot plan`."""
    from vrampilot.planner.target import resolve_target
    from vrampilot.speed import detect_measured_machine

    found = detect_measured_machine()
    return resolve_target(target_request_from_args(args), found.machine, found.speed)


def model_badges(listing: RepoFiles, target: Any, n_ctx: int) -> dict[str, Badge | str]:
    """Badge per model (keyed by first file), or the reason there is none (gated, bad header)."""
    out: dict[str, Badge | str] = {}
    for m in listing.models:
        try:
            spec = remote_spec(listing.repo_id, m, revision=listing.commit)
            out[m.first.filename] = badge_for_spec(spec, target, n_ctx)
        except (HubError, GGUFError) as exc:
            out[m.first.filename] = str(exc)
    return out


def run_files(args: argparse.Namespace) -> int:
    listing = list_repo_files(args.repo, revision=args.revision)
    badges: dict[str, Badge | str] = {}
    target = None
    if not args.no_badges and listing.models:
        target = _target(args)
        badges = model_badges(listing, target, args.ctx)
    if args.json:
        print(json.dumps(_files_json(listing, badges, target, args.ctx), indent=2))
        return 0
    print(
        f"{listing.repo_id}"
        + (f" @ {listing.commit[:12]}" if listing.commit else "")
        + (" (gated)" if listing.gated else "")
    )
    if target is not None:
        print(f"badges for {target.description} at {format_tokens(args.ctx)} context")
    if not listing.models and not listing.mmproj:
        print("no GGUF files in this repository")
        return 0
    for quant, models in listing.by_quant():
        print(f"\n{quant}")
        for m in models:
            print("  " + _model_line(m, badges.get(m.first.filename)))
    if listing.mmproj:
        print("\nvision projectors (mmproj)")
        for m in listing.mmproj:
            print("  " + _model_line(m, None))
    return 0


def _model_line(m: RemoteModel, badge: Badge | str | None) -> str:
    name = m.first.filename + (f" ({len(m.files)} parts)" if m.is_split else "")
    if m.is_split and not m.complete:
        name += f" [only {len(m.files)} of {m.split_count} parts]"
    text = f"{name}  {format_bytes(m.total_bytes)}"
    if isinstance(badge, Badge):
        text += f"  {badge.text}"
    elif isinstance(badge, str):
        text += f"  (no badge: {badge})"
    return text


def _files_json(listing: RepoFiles, badges: dict[str, Badge | str], target: Any, n_ctx: int) -> dict[str, Any]:
    def one(m: RemoteModel) -> dict[str, Any]:
        d = m.to_dict()
        b = badges.get(m.first.filename)
        d["badge"] = b.to_dict() if isinstance(b, Badge) else None
        if isinstance(b, str):
            d["badge_error"] = b
        return d

    return {
        "repo_id": listing.repo_id,
        "commit": listing.commit,
        "gated": listing.gated,
        "target": target.description if target is not None else None,
        "n_ctx": n_ctx,
        "groups": [{"quant": q, "models": [one(m) for m in ms]} for q, ms in listing.by_quant()],
        "mmproj": [m.to_dict() for m in listing.mmproj],
    }


# -- download ----------------------------------------------------------------------------------


class _StderrProgress:
    """One updating line on a terminal; a line every few seconds when stderr is a file or pipe."""

    def __init__(self) -> None:
        self.tty = sys.stderr.isatty()
        self.last = 0.0
        self.width = 0
        self.state: object = None
        self.resumed = 0

    def __call__(self, p: DownloadProgress) -> None:
        now = time.monotonic()
        final = p.state.value in ("done", "paused", "cancelled")
        changed = p.state != self.state or p.resumed_bytes != self.resumed
        self.state, self.resumed = p.state, p.resumed_bytes
        if not self.tty and not (final or changed) and now - self.last < 2.0:
            return
        self.last = now
        pct = f"{100 * p.fraction:5.1f}%"
        line = f"{pct} {p.describe()}"
        if p.resumed_bytes and p.state.value == "checking":
            line += f" (resuming: {format_bytes(p.resumed_bytes)} already here)"
        if self.tty:
            sys.stderr.write("\r" + line.ljust(self.width))
            self.width = len(line)
            if final:
                sys.stderr.write("\n")
        else:
            sys.stderr.write(line + "\n")
        sys.stderr.flush()


def run_download(args: argparse.Namespace) -> int:
    progress = _StderrProgress()
    try:
        result = download_model(args.repo, args.file, revision=args.revision, on_progress=progress)
        if args.with_mmproj and result.status == "done" and result.path is not None:
            code = _download_projector(args, result.path, progress)
            if code:
                return code
    except KeyboardInterrupt:
        if progress.tty:
            sys.stderr.write("\n")
        print("vrampilot: stopped; the bytes received are kept: run the same command to resume", file=sys.stderr)
        return 130
    if result.status != "done" or result.path is None:
        print(f"vrampilot: download {result.status}", file=sys.stderr)
        return 1
    print(
        f"verified sha256 and saved ({format_bytes(result.total_bytes)}, {format_bytes(result.fetched_bytes)} "
        "fetched now):",
        file=sys.stderr,
    )
    print(result.path)
    return 0


def _download_projector(args: argparse.Namespace, model_path: Path, progress: _StderrProgress) -> int:
    """After the model: the projector that fits it, from the same listing (so the same commit and
    the same snapshot folder, where `--mmproj auto` finds it)."""
    listing = list_repo_files(args.repo, revision=args.revision)
    if not listing.mmproj:
        print(f"vrampilot: {args.repo} has no vision projector (mmproj) files", file=sys.stderr)
        return 1
    match = matching_remote_projector(listing, load_model_spec(model_path))
    if match is None:
        names = ", ".join(m.first.filename for m in listing.mmproj)
        print(f"vrampilot: no projector in {args.repo} fits {model_path.name} (tried {names})", file=sys.stderr)
        return 1
    result = download_model(
        args.repo, match.first.filename, revision=listing.commit, on_progress=progress, listing=listing
    )
    if result.status != "done" or result.path is None:
        print(f"vrampilot: projector download {result.status}", file=sys.stderr)
        return 1
    print(f"vision projector verified and saved beside the model: {result.path}", file=sys.stderr)
    return 0


# -- library -----------------------------------------------------------------------------------


def run_library(args: argparse.Namespace) -> int:
    models = scan_library(args.folder)
    if args.json:
        print(json.dumps({"models": [m.to_dict() for m in models]}, indent=2))
        return 0
    if not models:
        print("no GGUF models found (HF cache, LM Studio, Ollama" + (", your folders" if args.folder else "") + ")")
        return 0
    for m in models:
        tag = "" if m.usable else f" [{m.status.value}: {m.problem}]"
        desc = " ".join(x for x in (m.architecture, m.quant) if x)
        print(f"{m.source.value:18}  {m.name}  {format_bytes(m.size_bytes)}  {desc}{tag}")
        print(f"{'':18}  {m.path}")
    return 0


# -- token -------------------------------------------------------------------------------------


def run_login(args: argparse.Namespace) -> int:
    token = args.token
    if not token:
        token = getpass.getpass("Hugging Face token: ") if sys.stdin.isatty() else sys.stdin.readline()
    token = (token or "").strip()
    if not token:
        raise UserError("no token given; create one at https://huggingface.co/settings/tokens")
    user = validate_token(token)
    where = save_token(token)
    print(f"signed in as {user}; token stored in {where}")
    return 0


def run_logout(args: argparse.Namespace) -> int:
    info = current_token()
    forget_token()
    if info is not None and info.source in ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN"):
        print(f"token forgotten, but {info.source} is still set in the environment")
    else:
        print("token forgotten")
    return 0
