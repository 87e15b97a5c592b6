"""The OpenAPI-validated GitHub fake served over real HTTP on 127.0.0.1, for the bot run as a separate process
(an installed ``attune github handle``, a workflow step under ``act``).

Every request goes through the same ``FakeGitHub._handle`` as the in-process ``responses`` mode, so every request
and response is still checked against GitHub's description. Requests are served one at a time (the fake is not
thread-safe); ``https://api.github.com`` in answers is rewritten to this server's address.
"""

from __future__ import annotations

import threading
from http.server import BaseHTTPRequestHandler, HTTPServer
from types import SimpleNamespace
from typing import Any

API = "https://api.github.com"


class FakeGitHubServer:
    def __init__(self, fake: Any, host: str = "127.0.0.1", port: int = 0) -> None:
        self.fake = fake
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def _serve(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else b""
                request = SimpleNamespace(method=self.command, url=API + self.path, body=body or None,
                                          headers={k: v for k, v in self.headers.items()})
                status, headers, text = outer.fake._handle(request)
                data = text.replace(API, outer.url).encode()
                self.send_response(status)
                for key, value in headers.items():
                    self.send_header(key, value.replace(API, outer.url))
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = _serve

            def log_message(self, *args: Any) -> None:  # the fake records every call itself
                pass

        self.httpd = HTTPServer((host, port), Handler)
        self.url = f"http://{host}:{self.httpd.server_address[1]}"
        self._thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    def start(self) -> FakeGitHubServer:
        self._thread.start()
        return self

    def stop(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
        self._thread.join(timeout=5)
