"""Small real HTTP servers on localhost that misbehave in one way each, for fault tests."""

from __future__ import annotations

import socket
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class CannedFault:
    """Answers every request with a fixed status and body (a 500, malformed JSON, JSON without logprobs,
    an internal service's secret), and records each request it got as "METHOD /path" in `requests`."""

    def __init__(self, status: int, body: bytes, content_type: str = "application/json"):
        # read at each request, so a test can change what the server answers between requests
        self.status, self.body, self.content_type = status, body, content_type
        self.requests: list[str] = []
        fault = self

        class Handler(BaseHTTPRequestHandler):
            def _answer(self):
                fault.requests.append(f"{self.command} {self.path}")
                self.rfile.read(int(self.headers.get("Content-Length", 0) or 0))
                self.send_response(fault.status)
                self.send_header("Content-Type", fault.content_type)
                self.send_header("Content-Length", str(len(fault.body)))
                self.end_headers()
                self.wfile.write(fault.body)

            do_GET = do_POST = _answer

            def log_message(self, *args):
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"

    def __enter__(self):
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc):
        self.httpd.shutdown()
        self.httpd.server_close()


class Silent:
    """Accepts connections and never answers: a server that hangs."""

    def __init__(self):
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}"
        self.held: list[socket.socket] = []
        self._stop = False

    def _accept(self):
        while not self._stop:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.held.append(conn)

    def __enter__(self):
        threading.Thread(target=self._accept, daemon=True).start()
        return self

    def __exit__(self, *exc):
        self._stop = True
        self.sock.close()
        for conn in self.held:
            conn.close()


def closed_port_url() -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return f"http://127.0.0.1:{port}"
