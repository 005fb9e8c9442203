"""A live preview over HTTP: the annotated frames as MJPEG, and each frame's results.

The stdlib's ``ThreadingHTTPServer`` on a loopback address by default (``--serve PORT``
is ``127.0.0.1:PORT``; ``--serve 0.0.0.0:PORT`` shows it to the network, a choice the
user makes in words).  Four paths:

- ``/``: one small HTML page: the stream in an ``<img>``, and the latest results, which
  its script polls from ``/results.json`` twice a second;
- ``/stream.mjpg``: ``multipart/x-mixed-replace`` with one ``image/jpeg`` part a frame,
  the MJPEG-over-HTTP convention browsers play in an ``<img>`` (RFC 2046 §5.1 for the
  multipart framing; a part is sent when a new frame is published, and the latest again
  after a second without one: browsers show a part only once the next one starts, and a
  still picture, such as a clip's last frame, must show too);
- ``/frame.jpg``: the latest frame alone; ``/results.json``: its JSON-lines record
  (:func:`.sinks.record`) and the pipeline's running counts.

Bounded: at most ``max_clients`` requests at once (the others get 503), every socket has
a timeout, a frame is JPEG-encoded once however many watch it, and ``close()`` stops the
listener, wakes every stream so its thread returns, and joins them.
"""

from __future__ import annotations

import io
import json
import re
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import numpy as np

from ..errors import SinkError
from .sinks import _jsonable, record

BOUNDARY = "dvsdkframe"

PAGE = """<!doctype html>
<html><head><meta charset="utf-8"><title>dvsdk preview</title>
<style>body{margin:0;background:#222;color:#eee;font:14px monospace;display:flex;
align-items:flex-start}#v{display:block;max-width:75vw}#r{padding:8px;white-space:pre-wrap;margin:0}</style></head>
<body><img id="v" src="/stream.mjpg" alt="stream"><pre id="r">waiting for a frame</pre>
<script>
async function poll(){
  try{const r=await fetch('/results.json',{cache:'no-store'});
      if(r.ok){document.getElementById('r').textContent=JSON.stringify(await r.json(),null,1);}}
  catch(e){}
  setTimeout(poll,500);}
poll();
</script></body></html>
"""


def parse_address(text: str) -> tuple[str, int]:
    """``[ADDR:]PORT`` -> (address, port); the address defaults to 127.0.0.1; IPv6 in
    brackets (``[::1]:8080``); port 0 asks the system for a free one."""
    m = re.fullmatch(r"(?:(\[[0-9a-fA-F:.]+\]|[\w.-]*):)?(\d{1,5})", text.strip())
    if not m or int(m.group(2)) > 65535:
        raise SinkError("--serve takes [ADDR:]PORT", field="--serve", value=text,
                        limit="PORT 0..65535, e.g. 8080 or 0.0.0.0:8080")
    addr = (m.group(1) or "127.0.0.1").strip("[]") or "127.0.0.1"
    return addr, int(m.group(2))


def encode_jpeg(rgb: np.ndarray, quality: int = 80) -> bytes:
    from PIL import Image

    buf = io.BytesIO()
    Image.fromarray(rgb).save(buf, format="JPEG", quality=quality)
    return buf.getvalue()


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    block_on_close = True


class PreviewServer:
    """Serve the page, the stream and the results on ``(address, port)``; ``url`` is where.
    A sink of the pipeline (``write``/``close``) or driven by :meth:`publish`."""

    needs_annotated = True

    def __init__(self, address: str = "127.0.0.1", port: int = 0, max_clients: int = 8,
                 timeout: float = 10.0) -> None:
        self.cond = threading.Condition()
        self.jpeg: bytes | None = None
        self.record: dict[str, Any] | None = None
        self.seq = 0
        self.stopping = False
        self.stats: dict[str, Any] = {}
        self.slots = threading.BoundedSemaphore(max_clients)
        preview = self

        class Handler(BaseHTTPRequestHandler):
            def setup(self) -> None:
                self.timeout = timeout   # every read and write on the socket
                super().setup()

            def log_message(self, *args: Any) -> None:
                pass                     # the pipeline prints its own summary

            def do_GET(self) -> None:
                if not preview.slots.acquire(blocking=False):
                    self.send_error(503, "too many clients")
                    return
                try:
                    preview._get(self)
                except (BrokenPipeError, ConnectionResetError, TimeoutError):
                    pass                 # the viewer went away
                finally:
                    preview.slots.release()

        try:
            self.server = _Server((address, port), Handler)
        except OSError as e:
            raise SinkError(f"cannot serve the preview: {e.strerror}", field="--serve",
                            value=f"{address}:{port}") from None
        host, port = self.server.server_address[:2]
        self.url = f"http://{'[' + host + ']' if ':' in host else host}:{port}/"
        self.thread = threading.Thread(target=self.server.serve_forever, name="preview",
                                       kwargs={"poll_interval": 0.1}, daemon=True)
        self.thread.start()

    # -- the pipeline's side ---------------------------------------------------------------
    def publish(self, frame: Any, result: Any, annotated: np.ndarray | None) -> None:
        """Make this frame (annotated if given) and its record the latest."""
        jpeg = encode_jpeg(annotated if annotated is not None else frame.rgb)
        rec = record(frame, result)
        with self.cond:
            self.jpeg, self.record, self.seq = jpeg, rec, self.seq + 1
            self.cond.notify_all()

    write = publish

    def progress(self, running: dict[str, Any]) -> None:
        """The pipeline's running counts (frames, dropped, FPS so far), for the page."""
        with self.cond:
            self.stats = {**self.stats, "running": running}

    def close(self, ok: bool = True) -> None:
        with self.cond:
            self.stopping = True
            self.cond.notify_all()
        self.server.shutdown()
        self.server.server_close()   # joins the request threads (block_on_close)
        self.thread.join()

    # -- the server's side ------------------------------------------------------------------
    def _get(self, h: BaseHTTPRequestHandler) -> None:
        path = h.path.split("?", 1)[0]
        if path in ("/", "/index.html"):
            self._send(h, PAGE.encode(), "text/html; charset=utf-8")
        elif path == "/results.json":
            with self.cond:
                body = {"record": self.record, "frames": self.seq, **self.stats}
            self._send(h, json.dumps(body, default=_jsonable).encode(), "application/json")
        elif path == "/frame.jpg":
            with self.cond:
                jpeg = self.jpeg
            if jpeg is None:
                h.send_error(503, "no frame yet")
            else:
                self._send(h, jpeg, "image/jpeg")
        elif path == "/stream.mjpg":
            self._stream(h)
        else:
            h.send_error(404)

    @staticmethod
    def _send(h: BaseHTTPRequestHandler, body: bytes, ctype: str) -> None:
        h.send_response(200)
        h.send_header("Content-Type", ctype)
        h.send_header("Content-Length", str(len(body)))
        h.send_header("Cache-Control", "no-store")
        h.end_headers()
        h.wfile.write(body)

    def _stream(self, h: BaseHTTPRequestHandler) -> None:
        h.send_response(200)
        h.send_header("Content-Type", f"multipart/x-mixed-replace; boundary={BOUNDARY}")
        h.send_header("Cache-Control", "no-store")
        h.send_header("Connection", "close")
        h.end_headers()
        h.wfile.write(f"--{BOUNDARY}\r\n".encode())
        seen = 0
        while True:
            with self.cond:
                self.cond.wait_for(lambda s=seen: self.stopping or (self.seq != s and self.jpeg),
                                   timeout=1.0)
                if self.stopping:
                    return
                if self.jpeg is None:
                    continue
                jpeg, seen = self.jpeg, self.seq  # or the same again after a quiet second
            # each part ends with the next boundary: a browser shows a part once it sees
            # the boundary that closes it, so the frame appears now, not with the next one
            h.wfile.write(f"Content-Type: image/jpeg\r\nContent-Length: {len(jpeg)}\r\n\r\n"
                          .encode() + jpeg + f"\r\n--{BOUNDARY}\r\n".encode())
            h.wfile.flush()
