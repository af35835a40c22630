"""A stand-in for the Hugging Face Hub on loopback: the three endpoints huggingface_hub's downloads use.

``snapshot_download`` asks ``/api/models/ID/revision/REV`` for the commit a revision points to, lists the
commit's files at ``/api/models/ID/tree/COMMIT``, and fetches each file from ``/ID/resolve/COMMIT/FILE``
(HEAD for its size and ETag, then GET, with a Range header when it resumes). Errors carry the
``X-Error-Code`` header that huggingface_hub turns into its exceptions. Every request that reaches it, an API
call (``model_info``, ``list_repo_files`` ...) or a file's HEAD or GET, served or not, is logged in ``requests``.
Serve it with ``plm.serve.BackgroundServer(hub.app())`` and point ``HF_ENDPOINT`` at it.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route
from starlette.types import ASGIApp, Receive, Scope, Send


@dataclass
class Repository:
    """A model repository: its commits (each a set of files) and the branches that point to them."""

    commits: dict[str, dict[str, bytes]] = field(default_factory=dict)
    branches: dict[str, str] = field(default_factory=dict)

    def commit(self, revision: str) -> str | None:
        """The commit ``revision`` (a branch or a commit) names, or None."""
        return self.branches.get(revision, revision if revision in self.commits else None)


@dataclass(frozen=True)
class Fetch:
    """One request for a file: its method, path and Range header."""

    method: str
    filename: str
    range: str | None


class RequestLog:
    """ASGI middleware that appends ``METHOD /path`` of every HTTP request to ``log``, before any route answers."""

    def __init__(self, app: ASGIApp, log: list[str]) -> None:
        self.app, self.log = app, log

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            self.log.append(f"{scope['method']} {scope['path']}")
        await self.app(scope, receive, send)


class StandInHub:
    """Repositories served as the Hub serves them, a log of every request and of the file downloads, and files to
    cut short once."""

    def __init__(self) -> None:
        self.repositories: dict[str, Repository] = {}
        self.requests: list[str] = []  # every request, API calls and HEADs included: "GET /api/models/..."
        self.fetches: list[Fetch] = []  # the GETs of files
        self.cut_once: set[str] = set()  # files whose first GET stops halfway, as a dropped connection does

    def publish(self, repo_id: str, folder: Path, branch: str = "main") -> str:
        """Commit every file of ``folder`` to ``repo_id`` on ``branch``; returns the commit's 40-hex id."""
        files = {path.relative_to(folder).as_posix(): path.read_bytes()
                 for path in sorted(folder.rglob("*")) if path.is_file()}
        digest = hashlib.sha1(repo_id.encode())
        for name, content in files.items():
            digest.update(name.encode() + hashlib.sha256(content).digest())
        commit = digest.hexdigest()
        repository = self.repositories.setdefault(repo_id, Repository())
        repository.commits[commit] = files
        repository.branches[branch] = commit
        return commit

    def app(self) -> Starlette:
        """The Starlette app that serves the repositories."""
        return Starlette(routes=[
            Route("/api/models/{repo_id:path}/revision/{revision}", self.repository_info),
            Route("/api/models/{repo_id:path}/tree/{revision}", self.tree),
            Route("/{repo_id:path}/resolve/{revision}/{filename:path}", self.resolve, methods=["GET", "HEAD"]),
        ], middleware=[Middleware(RequestLog, log=self.requests)])

    def files(self, request: Request) -> tuple[str, dict[str, bytes]] | Response:
        """The commit and files the request's repository and revision name, or the Hub's 404 for them."""
        repository = self.repositories.get(request.path_params["repo_id"])
        if repository is None:
            return error(404, "RepoNotFound", "Repository not found")
        commit = repository.commit(request.path_params["revision"])
        if commit is None:
            return error(404, "RevisionNotFound", "Invalid rev id")
        return commit, repository.commits[commit]

    async def repository_info(self, request: Request) -> Response:
        found = self.files(request)
        if isinstance(found, Response):
            return found
        commit, files = found
        return JSONResponse({"id": request.path_params["repo_id"], "sha": commit,
                             "siblings": [{"rfilename": name} for name in files]})

    async def tree(self, request: Request) -> Response:
        found = self.files(request)
        if isinstance(found, Response):
            return found
        _, files = found
        return JSONResponse([{"type": "file", "path": name, "size": len(content), "oid": etag(content)}
                             for name, content in files.items()])

    async def resolve(self, request: Request) -> Response:
        found = self.files(request)
        if isinstance(found, Response):
            return found
        commit, files = found
        filename = request.path_params["filename"]
        if filename not in files:
            return error(404, "EntryNotFound", f"{filename} does not exist on this revision")
        content = files[filename]
        headers = {"X-Repo-Commit": commit, "ETag": f'"{etag(content)}"', "Accept-Ranges": "bytes"}
        if request.method == "HEAD":
            return Response(headers={**headers, "Content-Length": str(len(content))})
        requested = request.headers.get("range")
        self.fetches.append(Fetch(request.method, filename, requested))
        if filename in self.cut_once:
            self.cut_once.discard(filename)
            return StreamingResponse(cut_short(content), headers={**headers, "Content-Length": str(len(content))})
        if requested is None:
            return Response(content, headers=headers)
        start = int(requested.removeprefix("bytes=").split("-")[0])
        return Response(content[start:], status_code=206,
                        headers={**headers, "Content-Range": f"bytes {start}-{len(content) - 1}/{len(content)}"})


def cut_short(content: bytes) -> Iterator[bytes]:
    """The first half of ``content``, then a dropped connection (the response promised all of it)."""
    yield content[: len(content) // 2]
    raise ConnectionResetError("the stand-in Hub drops this download halfway")


def etag(content: bytes) -> str:
    """The Hub's ETag of a file: its sha256, as for files kept in LFS."""
    return hashlib.sha256(content).hexdigest()


def error(status: int, code: str, message: str) -> Response:
    """An error the way the Hub answers it: huggingface_hub reads the X-Error-Code header."""
    return JSONResponse({"error": message}, status_code=status, headers={"X-Error-Code": code})
