"""A webhook on 127.0.0.1 that keeps what NOTIFY's ``json://`` URL sends it.

As Apprise 2.3.0's ``json://`` plugin (``apprise/plugins/custom_json.py``) sends it: a POST
whose JSON body holds ``version``, ``title``, ``message``, ``attachments`` and ``type``, with
HTTP basic authentication when the URL carries ``user:password@``; any 2xx answer counts as
delivered. Here every POST is kept (its path, its ``Authorization`` header, its JSON) and
answered 200; it simplifies in answering nothing else.
"""

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class Webhook:
    """``with Webhook() as hook:``; ``hook.url`` for NOTIFY, ``hook.messages`` what came."""

    def __init__(self, user: str = "", password: str = "") -> None:
        self.messages: list[dict] = []
        self.auth: list[str] = []
        keep = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *_: object) -> None:
                pass

            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                keep.auth.append(self.headers.get("Authorization", ""))
                keep.messages.append(json.loads(body or b"{}"))
                self.send_response(200)
                self.send_header("Content-Length", "0")
                self.end_headers()

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        port = self._server.server_address[1]
        login = f"{user}:{password}@" if user else ""
        self.url = f"json://{login}127.0.0.1:{port}/hook"

    def __enter__(self) -> "Webhook":
        threading.Thread(target=self._server.serve_forever, args=(0.05,), daemon=True).start()
        return self

    def __exit__(self, *_: object) -> None:
        self._server.shutdown()
        self._server.server_close()

    def titles(self) -> list[str]:
        return [m.get("title", "") for m in self.messages]
