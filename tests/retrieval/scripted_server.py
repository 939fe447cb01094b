"""A Search-R1-shaped retrieval server on 127.0.0.1 that answers with scripted statuses (the
client's and the ledger's tests)."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class ScriptedServer:
    """A Search-R1-shaped server answering with the statuses given, then 200s.

    Each query q gets one hit: id q, contents '"q"\\ntext of q', score 1.0.
    """

    def __init__(self, statuses=()):
        self.statuses = list(statuses)
        self.requests: list[dict] = []
        script = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                script.requests.append({"path": self.path, **body})
                status = script.statuses.pop(0) if script.statuses else 200
                reply = (
                    {"detail": "scripted failure"}
                    if status != 200
                    else {
                        "result": [
                            [{"document": {"id": q, "contents": f'"{q}"\ntext of {q}'}, "score": 1.0}]
                            for q in body["queries"]
                        ]
                    }
                )
                data = json.dumps(reply).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args):
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self.thread = threading.Thread(target=self.httpd.serve_forever, args=(0.05,), daemon=True)

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.httpd.shutdown()
        self.httpd.server_close()
