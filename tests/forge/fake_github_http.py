"""The OpenAPI-validated GitHub fake served over real HTTP on 127.0.0.1, for the bot run as a separate process
(an installed ``attune github handle``, a workflow step under ``act``).

Every request goes through the same ``FakeGitHub._handle`` as the in-process ``responses`` mode, so every request
and response is still checked against GitHub's description. Requests are served one at a time (the fake is not
thread-safe); ``https://api.github.com`` in answers is rewritten to this server's address.

Outside the REST API, ``/__standin__/<route>?...`` serves the local stand-ins of the workflows' actions
(tests/github/act/standin.py) what a real runner gets from elsewhere: ``tree?ref=R`` the repository's files at a
branch or sha (git's protocol, for the checkout stand-in) and ``app-token?app_id=N`` an App installation token.
They are not GitHub operations, so they are not held to its description; every other path is.
"""

from __future__ import annotations

import json
import threading
import urllib.parse
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, HTTPServer
from types import SimpleNamespace
from typing import Any

API = "https://api.github.com"
STANDIN = "/__standin__/"
APP_TOKEN = "ghs_standinInstallationToken0000000000"


class FakeGitHubServer:
    def __init__(self, fake: Any, host: str = "127.0.0.1", port: int = 0) -> None:
        self.fake = fake
        self.standin_calls: list[tuple[str, dict[str, str]]] = []
        self.routes: dict[str, Callable[[dict[str, str]], Any]] = {"tree": self._tree, "app-token": self._app_token}
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def _serve(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else b""
                if self.path.startswith(STANDIN):
                    self._standin()
                    return
                request = SimpleNamespace(
                    method=self.command,
                    url=API + self.path,
                    body=body or None,
                    headers={k: v for k, v in self.headers.items()},
                )
                status, headers, text = outer.fake._handle(request)
                data = text.replace(API, outer.url).encode()
                self.send_response(status)
                for key, value in headers.items():
                    self.send_header(key, value.replace(API, outer.url))
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def _standin(self) -> None:
                url = urllib.parse.urlsplit(self.path)
                route, query = (
                    url.path.removeprefix(STANDIN),
                    dict(urllib.parse.parse_qsl(url.query, keep_blank_values=True)),
                )
                outer.standin_calls.append((route, query))
                try:
                    status, answer = 200, outer.routes[route](query)
                except Exception as exc:  # noqa: BLE001 (answered to the stand-in, which fails the step)
                    status, answer = 404, {"message": f"{type(exc).__name__}: {exc}"}
                data = json.dumps(answer).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = _serve

            def log_message(self, *args: Any) -> None:  # the fake records every call itself
                pass

        self.httpd = HTTPServer((host, port), Handler)
        self.url = f"http://{host}:{self.httpd.server_address[1]}"
        self._thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    def _tree(self, query: dict[str, str]) -> dict[str, Any]:
        """The files of a branch or commit (default: the default branch), as ``git clone`` + checkout would give them."""
        sha = self.fake._resolve(query.get("ref") or self.fake.default_branch)
        return {"sha": sha, "files": self.fake.commits[sha].tree}

    def _app_token(self, query: dict[str, str]) -> dict[str, Any]:
        """An installation token of the App the fake's actor is (``<slug>[bot]``)."""
        if not self.fake.actor.endswith("[bot]"):
            raise ValueError(f"the fake's actor {self.fake.actor} is not an App's bot user")
        return {
            "token": APP_TOKEN,
            "app_slug": self.fake.actor.removesuffix("[bot]"),
            "installation_id": 1,
            "app_id": query.get("app_id"),
        }

    def start(self) -> FakeGitHubServer:
        self._thread.start()
        return self

    def stop(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
        self._thread.join(timeout=5)
