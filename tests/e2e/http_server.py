#!/usr/bin/env python3
"""Small HTTP file server for tests/e2e/test_fetch.sh (standard library only, loopback only).

Serves files from --root. Supports single "Range: bytes=A-" / "bytes=A-B" requests (206 + Content-Range, 416 when
A is past the end). Path prefixes inject faults, each only on the FIRST request for that path:
  /drop/<file>        sends the headers of the full response and half of the body, then drops the connection
  /stall/<file>       sends half of the body, then stalls (the client's low-speed timeout must fire)
  /dropnorange/<file> drops like /drop on the first request, then ignores Range headers (always 200, full body)
Hostile servers (every request, not only the first):
  /badrange/<file>    drops like /drop on the first request; answers a later Range request with 206 and the body
                      from byte 0 under "Content-Range: bytes 0-..." (not where the client asked to resume)
  /badcr/<file>       drops like /drop on the first request; a later Range request gets 206 with a malformed
                      Content-Range ("bytes garbage")
  /longlen/<file>     says Content-Length 100 bytes SHORTER than the file, then sends the whole file
  /shortlen/<file>    says Content-Length 100 bytes LONGER than the file, sends the file, closes the connection
Servers that would fill a disk (every request):
  /endless/<file>     200 without Content-Length: the file, then zeros until the client hangs up (at most 30 s and
                      256 MiB, so the server always stops by itself)
  /huge/<file>        announces Content-Length 1 TiB, then sends the file and closes
Every request is appended to --log as one line: "<method> <path> range=<Range header or ->".
The chosen port (the kernel picks a free one) is written to --port-file once the server is listening.
"""
import argparse
import os
import re
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

FAULTS = ("drop", "stall", "dropnorange", "badrange", "badcr", "longlen", "shortlen", "endless", "huge")


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    seen = set()
    lock = threading.Lock()

    def log_message(self, fmt, *args):  # keep the test output quiet; requests go to --log instead
        pass

    def _record(self):
        with self.lock, open(self.server.log_path, "a") as f:
            f.write("%s %s range=%s\n" % (self.command, self.path, self.headers.get("Range", "-")))

    def do_GET(self):
        self._record()
        parts = self.path.lstrip("/").split("/", 1)
        fault = parts[0] if len(parts) == 2 and parts[0] in FAULTS else None
        name = parts[1] if fault else self.path.lstrip("/")
        with self.lock:
            first = self.path not in self.seen
            self.seen.add(self.path)
        path = os.path.join(self.server.root, os.path.basename(name))
        if not os.path.isfile(path):
            self.send_error(404)
            return
        with open(path, "rb") as f:
            data = f.read()
        size = len(data)
        start, end = 0, size - 1
        rng = self.headers.get("Range")
        honour_range = not (fault == "dropnorange" and not first)
        status = 200
        if rng and honour_range:
            m = re.fullmatch(r"bytes=(\d+)-(\d*)", rng.strip())
            if not m:
                self.send_error(400)
                return
            start = int(m.group(1))
            if m.group(2):
                end = min(int(m.group(2)), size - 1)
            if start >= size:
                self.send_response(416)
                self.send_header("Content-Range", "bytes */%d" % size)
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            status = 206
        if fault in ("endless", "huge"):
            self.send_response(200)
            self.send_header("Content-Type", "application/gzip")
            if fault == "huge":
                self.send_header("Content-Length", str(1 << 40))
            self.send_header("Connection", "close")
            self.end_headers()
            self.close_connection = True
            try:
                self.wfile.write(data)
                if fault == "endless":
                    chunk, sent, t0 = b"\0" * 65536, 0, time.time()
                    while sent < (256 << 20) and time.time() - t0 < 30:
                        self.wfile.write(chunk)
                        sent += len(chunk)
                self.wfile.flush()
            except OSError:
                pass  # the client hung up at its cap: what the test wants
            return
        body = data[start:end + 1]
        if fault in ("badrange", "badcr") and not first and status == 206:
            body = data  # the whole file again, whatever offset was asked for
        if fault in ("longlen", "shortlen"):
            declared = len(body) + (100 if fault == "shortlen" else -100)
            self.send_response(status)
            self.send_header("Content-Type", "application/gzip")
            self.send_header("Content-Length", str(declared))
            self.send_header("Accept-Ranges", "bytes")
            if status == 206:
                self.send_header("Content-Range", "bytes %d-%d/%d" % (start, end, size))
            self.end_headers()
            self.wfile.write(body)
            self.wfile.flush()
            self.close_connection = True
            try:
                self.connection.shutdown(2)
            except OSError:
                pass
            return
        self.send_response(status)
        self.send_header("Content-Type", "application/gzip")
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Accept-Ranges", "bytes" if honour_range else "none")
        if status == 206 and fault == "badrange" and not first:
            self.send_header("Content-Range", "bytes 0-%d/%d" % (size - 1, size))
        elif status == 206 and fault == "badcr" and not first:
            self.send_header("Content-Range", "bytes garbage")
        elif status == 206:
            self.send_header("Content-Range", "bytes %d-%d/%d" % (start, end, size))
        self.end_headers()
        if fault in ("drop", "stall", "dropnorange", "badrange", "badcr") and first:
            self.wfile.write(body[: len(body) // 2])
            self.wfile.flush()
            if fault == "stall":
                time.sleep(30)
            self.close_connection = True
            try:
                self.connection.shutdown(2)  # the client sees the body end early
            except OSError:
                pass
            return
        self.wfile.write(body)


class QuietServer(ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request, client_address):
        pass  # clients that hang up (the stall test) are expected, not worth a traceback


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--root", required=True)
    ap.add_argument("--port-file", required=True)
    ap.add_argument("--log", required=True)
    args = ap.parse_args()
    server = QuietServer(("127.0.0.1", 0), Handler)
    server.root = os.path.abspath(args.root)
    server.log_path = args.log
    tmp = args.port_file + ".tmp"
    with open(tmp, "w") as f:
        f.write("%d\n" % server.server_address[1])
    os.replace(tmp, args.port_file)  # the test never reads a half-written port
    server.serve_forever()


if __name__ == "__main__":
    main()
