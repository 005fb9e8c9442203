"""The live preview (issue 31 item 3): a real HTTP server on 127.0.0.1 read with urllib
and raw sockets (page, results, single frame, the multipart MJPEG stream, the client
bound, a clean close), and the whole chain in headless Chromium: ``dvsdk-run`` serving a
detector's annotated frame, the page screenshotted, the box's colour found where the box
is."""

from __future__ import annotations

import io
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import urllib.error
import urllib.request

import numpy as np
import pytest
from PIL import Image

import dvsdk
from dvsdk.apps.preview import BOUNDARY, PreviewServer, parse_address
from dvsdk.apps.sources import Frame
from dvsdk.errors import SinkError

from .apps_media import fixed_box_detector
from .conftest import ROOT


def _get(url: str, timeout: float = 10.0) -> tuple[int, str, bytes]:
    try:
        with urllib.request.urlopen(url, timeout=timeout) as r:
            return r.status, r.headers["Content-Type"], r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.headers["Content-Type"], e.read()


def _frame(seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 256, (24, 32, 3), dtype=np.uint8)


class _Result:
    def to_json(self):
        return {"kind": "detect", "detections": [{"box": [1.0, 2.0, 3.0, 4.0], "score": 0.5,
                                                  "class": 0, "label": "a"}]}


def _read_part(sock_file) -> bytes:
    """One part of the multipart stream: its headers, then Content-Length bytes."""
    headers = {}
    while True:
        line = sock_file.readline()
        assert line, "the stream ended"
        line = line.strip()
        if line == b"" and headers:
            break                           # the blank line after the part's headers
        if line == b"" or line == b"--" + BOUNDARY.encode():
            continue                        # the CRLF after a body, the boundary
        k, _, v = line.decode().partition(":")
        headers[k.strip().lower()] = v.strip()
    assert headers["content-type"] == "image/jpeg"
    return sock_file.read(int(headers["content-length"]))


def test_address_parsing():
    assert parse_address("8080") == ("127.0.0.1", 8080)
    assert parse_address("0.0.0.0:81") == ("0.0.0.0", 81)
    assert parse_address("[::1]:0") == ("::1", 0)
    for bad in ("http://x", "70000", "a:b", ""):
        with pytest.raises(SinkError, match=r"\[ADDR:\]PORT"):
            parse_address(bad)


def test_page_results_frame_and_stream():
    srv = PreviewServer("127.0.0.1", 0)
    try:
        assert re.fullmatch(r"http://127\.0\.0\.1:\d+/", srv.url)
        status, ctype, body = _get(srv.url)
        assert status == 200 and ctype.startswith("text/html")
        assert b'<img id="v" src="/stream.mjpg"' in body and b"/results.json" in body
        assert json.loads(_get(srv.url + "results.json")[2]) == {"record": None, "frames": 0}
        assert _get(srv.url + "frame.jpg")[0] == 503
        assert _get(srv.url + "nope")[0] == 404

        rgb, drawn = _frame(1), _frame(2)
        srv.publish(Frame(3, rgb, 0.25, "clip.mp4#3"), _Result(), drawn)
        status, ctype, body = _get(srv.url + "results.json")
        assert json.loads(body) == {"record": {"frame": 3, "time": 0.25, "source": "clip.mp4#3",
                                               "kind": "detect", "detections": [
                                                   {"box": [1.0, 2.0, 3.0, 4.0], "score": 0.5,
                                                    "class": 0, "label": "a"}]}, "frames": 1}
        jpg = np.asarray(Image.open(io.BytesIO(_get(srv.url + "frame.jpg")[2])))
        assert jpg.shape == drawn.shape   # the annotated frame, JPEG: close, not exact
        assert np.abs(jpg.astype(int) - drawn).mean() < np.abs(jpg.astype(int) - rgb).mean()

        host, port = srv.server.server_address[:2]
        with socket.create_connection((host, port), timeout=10) as s:
            s.sendall(b"GET /stream.mjpg HTTP/1.1\r\nHost: x\r\n\r\n")
            f = s.makefile("rb")
            assert f.readline().startswith(b"HTTP/1.0 200")
            head = b""
            while (line := f.readline()) not in (b"\r\n", b""):
                head += line
            assert f"multipart/x-mixed-replace; boundary={BOUNDARY}".encode() in head
            first = _read_part(f)
            assert Image.open(io.BytesIO(first)).size == (32, 24)
            srv.publish(Frame(4, rgb, 0.5, "clip.mp4#4"), None, None)
            # the next part is the new frame (or, on a slow host, the first again after a
            # quiet second, then the new one)
            parts = [_read_part(f) for _ in range(2)]
            assert parts[0] != first or parts[1] != first
    finally:
        srv.close()
    assert not srv.thread.is_alive()
    with pytest.raises(OSError):
        socket.create_connection(srv.server.server_address[:2], timeout=2).close()


def test_clients_are_bounded():
    srv = PreviewServer(max_clients=1)
    try:
        srv.publish(Frame(0, _frame(), 0.0, "x"), None, None)
        host, port = srv.server.server_address[:2]
        with socket.create_connection((host, port), timeout=10) as s:
            s.sendall(b"GET /stream.mjpg HTTP/1.1\r\nHost: x\r\n\r\n")
            f = s.makefile("rb")
            while f.readline() not in (b"\r\n", b""):
                pass
            _read_part(f)
            # the stream holds the only slot: another request is turned away, not queued
            assert _get(srv.url)[0] == 503
    finally:
        srv.close()


def test_close_ends_open_streams():
    srv = PreviewServer()
    srv.publish(Frame(0, _frame(), 0.0, "x"), None, None)
    host, port = srv.server.server_address[:2]
    s = socket.create_connection((host, port), timeout=10)
    s.sendall(b"GET /stream.mjpg HTTP/1.1\r\nHost: x\r\n\r\n")
    f = s.makefile("rb")
    while f.readline() not in (b"\r\n", b""):
        pass
    _read_part(f)
    srv.close()                       # returns: the stream's thread saw the stop and ended
    assert not srv.thread.is_alive()
    rest = f.read()                   # EOF: the server closed the connection
    assert rest == b"" or rest.endswith(b"--" + BOUNDARY.encode() + b"\r\n")
    s.close()


def _chromium() -> str:
    exe = shutil.which("chromium") or shutil.which("chromium-browser")
    if exe is None:
        if os.environ.get("DVSDK_REQUIRE_CHROMIUM"):
            pytest.fail("chromium is not installed (.ci/run installs Debian's chromium)")
        pytest.skip("chromium is not installed (apt-get install chromium)")
    return exe


def test_preview_page_in_headless_chromium(tmp_path):
    """dvsdk-run serves a detector's annotated frame; Chromium shows it with its box."""
    chromium = _chromium()
    net = tmp_path / "box.bin"
    # every anchor says (cx 16, cy 16, w 16, h 12) of a 32 x 32 input, class 1 at 0.9
    dvsdk.compile(fixed_box_detector(), net, golden=False, task="detect", labels=["a", "b"])
    img = tmp_path / "grey.png"
    Image.fromarray(np.full((240, 320, 3), 40, np.uint8)).save(img)
    env = {**os.environ, "DVSDK_DEVICE": "sim://", "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen([sys.executable, "-m", "dvsdk.cli.run", str(net), str(img),
                             "--serve", "127.0.0.1:0", "--linger", "120"], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        url = None
        for line in proc.stderr:
            m = re.search(r"preview at (http://\S+)", line)
            url = url or (m and m.group(1))
            if "serving its last frame" in line:
                break
        assert url, proc.stderr.read()
        rec = json.loads(_get(url + "results.json")[2])["record"]
        # the stretch from 32 x 32 to 320 x 240: x by 10, y by 7.5
        assert rec["detections"] == [{"box": [80.0, 75.0, 240.0, 165.0],
                                      "score": pytest.approx(0.9, abs=1e-3), "class": 1,
                                      "label": "b"}]
        shot = tmp_path / "shot.png"
        r = subprocess.run([chromium, "--headless", "--no-sandbox", "--disable-gpu",
                            "--hide-scrollbars", f"--screenshot={shot}", "--window-size=800,600",
                            "--timeout=5000", url], capture_output=True, text=True, timeout=90)
        assert shot.exists(), r.stderr[-2000:]
    finally:
        proc.send_signal(signal.SIGINT)       # Ctrl-C ends the lingering preview cleanly
        out, err = proc.communicate(timeout=30)
    assert proc.returncode == 0, err
    px = np.asarray(Image.open(shot).convert("RGB")).astype(int)
    # the <img> sits at the page's top left at its own size: frame pixel (x, y) is there.
    # Class 1's colour (the palette's entry 2, 60 180 75) on the box's left and right
    # edges (2 px, from x = 80 and to x = 240); the grey frame inside and the page beyond
    green = np.array([60, 180, 75])
    for x in (80, 81, 239, 240):
        edge = px[90:160, x]
        assert np.abs(edge - green).max(axis=1).mean() < 60, (x, edge[:3])
    assert np.abs(px[100:140, 120:200] - 40).max() < 20          # inside: the grey frame
    assert np.abs(px[300:400, 100:200] - 34).max() < 10          # below: the page (#222)
    assert "frames in" in out                                     # the summary, at the end
