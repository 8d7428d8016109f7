# Bounded resources: the open-connection cap (--max-connections: the oldest idle keep-alive
# connection is reaped to make room, else 503 + Retry-After and close, /health still answered,
# counted in /metrics; the flag fits RLIMIT_NOFILE), and the per-request limits of the catalogue in
# docs/reliability.md that test_bad_input.py does not cover (request target, header count, stop
# strings, logit_bias).
import gc
import json
import os
import re
import resource
import socket
import subprocess
import time

import pytest

from conftest import BIN, MODEL, Server, free_port

CAP = 4


def connect(srv):
    return socket.create_connection(("127.0.0.1", srv.port), timeout=10)


def read_response(s):
    """(head, body) of one response with a Content-Length, or (b'', b'') when the server closed."""
    buf = b""
    while b"\r\n\r\n" not in buf:
        chunk = s.recv(65536)
        if not chunk:
            return buf, b""
        buf += chunk
    head, body = buf.split(b"\r\n\r\n", 1)
    head += b"\r\n"  # every header line ends with CRLF
    m = re.search(rb"(?i)\r\ncontent-length: *(\d+)", head)
    n = int(m.group(1)) if m else 0
    while len(body) < n:
        chunk = s.recv(65536)
        if not chunk:
            break
        body += chunk
    return head, body


def closed_by_server(s, timeout=5.0):
    s.settimeout(timeout)
    try:
        return s.recv(1) == b""
    except ConnectionResetError:
        return True
    except socket.timeout:
        return False


def request(srv, path, close=True, sock=None):
    """One GET on a raw connection (a new one unless sock); returns (head, body)."""
    s = sock or connect(srv)
    s.sendall(f"GET {path} HTTP/1.1\r\nHost: x\r\n{'Connection: close' if close else ''}\r\n\r\n".encode())
    out = read_response(s)
    if not sock:
        s.close()
    return out


def metric_raw(srv, name):
    """A metric read on a connection of its own that the server closes after the answer, so the
    read itself leaves no idle connection behind (which the cap would reap)."""
    head, body = request(srv, "/metrics")
    assert head.startswith(b"HTTP/1.1 200"), head
    for line in body.decode().splitlines():
        if line.startswith("wushkv:" + name + "{"):
            return float(line.rsplit(" ", 1)[1])
    raise AssertionError(f"metric {name} missing")


def wait_open(srv, n, timeout=10):
    """Waits until the server has n connections open besides the one asking."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        if metric_raw(srv, "http_connections") == n + 1:
            return
        time.sleep(0.05)
    raise AssertionError(f"connections open: {metric_raw(srv, 'http_connections') - 1}, expected {n}")


@pytest.fixture(scope="module")
def capped():
    s = Server("--kv", "f16", "--ctx", "256", "--max-batch", "2", "--max-connections", str(CAP),
               "--request-timeout", "30", "--idle-timeout", "4")
    yield s
    rc = s.stop()
    assert rc == 0, f"server exit status {rc} after SIGTERM:\n{s.log()}"


def test_over_the_cap_503_and_health_answered(capped):
    wait_open(capped, 0)
    rejected = metric_raw(capped, "http_connections_rejected_total")
    # CAP connections in the middle of a request: busy, so none can be reaped.
    busy = [connect(capped) for _ in range(CAP)]
    for s in busy:
        s.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n")
    time.sleep(0.5)  # (not read from /metrics: at the cap, that read would be refused too)
    s = connect(capped)
    head, body = request(capped, "/v1/models", close=False, sock=s)
    assert head.startswith(b"HTTP/1.1 503 "), head
    assert b"\r\nRetry-After: 1\r\n" in head and b"\r\nConnection: close\r\n" in head
    assert json.loads(body)["error"]["code"] == "too_many_connections"
    assert closed_by_server(s)
    s.close()
    # Probes still get through, and the connection is closed after the answer.
    s = connect(capped)
    head, body = request(capped, "/health", close=False, sock=s)
    assert head.startswith(b"HTTP/1.1 200 ") and json.loads(body) == {"status": "ok"}
    assert closed_by_server(s)
    s.close()
    # An over-limit connection that sends nothing is dropped after a short deadline (2 s).
    s = connect(capped)
    t0 = time.time()
    assert closed_by_server(s, timeout=8) and time.time() - t0 < 6
    s.close()
    # The busy connections were never touched: each finishes its request.
    for b in busy:
        b.sendall(b"\r\n")
        head, body = read_response(b)
        assert head.startswith(b"HTTP/1.1 200 "), head
        b.close()
    wait_open(capped, 0)
    assert metric_raw(capped, "http_connections_rejected_total") == rejected + 3


def test_oldest_idle_connection_reaped(capped):
    wait_open(capped, 0)
    reaped = metric_raw(capped, "http_connections_reaped_total")
    idle = []
    for _ in range(CAP):  # keep-alive connections, each idle after one answer (oldest first)
        s = connect(capped)
        assert request(capped, "/health", close=False, sock=s)[0].startswith(b"HTTP/1.1 200 ")
        idle.append(s)
        time.sleep(0.05)
    head, body = request(capped, "/v1/models")
    assert head.startswith(b"HTTP/1.1 200 "), head  # served: the oldest idle one made room
    assert closed_by_server(idle[0])
    for s in idle[1:]:  # the others are still open and serve their next request
        assert request(capped, "/health", close=False, sock=s)[0].startswith(b"HTTP/1.1 200 ")
    for s in idle:
        s.close()
    wait_open(capped, 0)
    assert metric_raw(capped, "http_connections_reaped_total") == reaped + 1


def test_idle_keep_alive_connection_closed(capped):
    s = connect(capped)
    assert request(capped, "/health", close=False, sock=s)[0].startswith(b"HTTP/1.1 200 ")
    t0 = time.time()
    assert closed_by_server(s, timeout=15)
    assert 3 < time.time() - t0 < 12  # --idle-timeout 4
    s.close()


def serve_until_listening(*args, nofile=None):
    """Starts serve with the given flags (and RLIMIT_NOFILE), returns (exit status or None, output
    up to the 'listening on' line); a server that got that far is killed."""
    model = ["-m", MODEL] if MODEL else []
    pre = (lambda: resource.setrlimit(resource.RLIMIT_NOFILE, nofile)) if nofile else None
    p = subprocess.Popen([BIN, "serve", "--port", str(free_port()), "--kv", "f16", *model, *args],
                         stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True, preexec_fn=pre)
    out = ""
    for line in p.stderr:
        out += line
        if "listening on" in line:
            p.kill()
            break
    p.wait(60)
    return (None if "listening on" in out else p.returncode), out


def test_max_connections_fits_rlimit_nofile():
    if not os.path.exists(BIN):
        pytest.skip(f"{BIN} is not built")
    rc, out = serve_until_listening("--max-connections", "0")
    assert rc == 2 and "--max-connections" in out
    # A cap the descriptors cannot hold is refused, naming the limit; the default shrinks to fit.
    rc, out = serve_until_listening("--max-connections", "1000", nofile=(200, 200))
    assert rc == 2 and "RLIMIT_NOFILE allows 200" in out and "at most 120" in out, out
    rc, out = serve_until_listening(nofile=(200, 200))
    assert rc is None and "at most 120 connections" in out, out
    # A soft limit below the need is raised up to the hard one.
    rc, out = serve_until_listening("--max-connections", "500", nofile=(200, 1024))
    assert rc is None and "at most 500 connections" in out, out
    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    default = 1024 if hard == resource.RLIM_INFINITY or hard >= 1024 + 64 else hard - 64
    rc, out = serve_until_listening()
    assert rc is None and f"at most {default} connections" in out, out


def test_connections_the_server_closes_are_freed(server):
    # Every connection the server closes after its answer (Connection: close, HTTP/1.0, a refused
    # request) must give its file descriptor back: they used to stay open for good, one per
    # request, until accept() ran out of descriptors.
    # The count is read with no request in flight, but the connection that asked wait_open() may
    # still hold its descriptor for a moment after the gauge dropped it (the close completes on the
    # next loop turn): so the baseline is the least count seen over half a second, and the end
    # count may take a few seconds to come back down to it. A real leak (one per request: 90
    # here) never does.
    # The session server may still hold a keep-alive connection of an earlier test's client (its
    # idle timeout is 60 s; CI saw one for over 10 s): so the connections open now, after the
    # collector closed what this process dropped, are the baseline, and the end may have fewer.
    def fd_count():
        return len(os.listdir(f"/proc/{server.proc.pid}/fd"))

    gc.collect()
    time.sleep(0.2)
    before = int(metric_raw(server, "http_connections")) - 1
    fds = fd_count()
    for _ in range(10):
        time.sleep(0.05)
        fds = min(fds, fd_count())
    for i in range(30):
        request(server, "/health")
        raw(server, b"GET /health HTTP/1.0\r\n\r\n")
        raw(server, b"\x00garbage\r\n\r\n")
    deadline = time.time() + 10
    while metric_raw(server, "http_connections") - 1 > before and time.time() < deadline:
        time.sleep(0.05)
    assert metric_raw(server, "http_connections") - 1 <= before
    deadline = time.time() + 5
    while fd_count() > fds and time.time() < deadline:
        time.sleep(0.05)
    assert fd_count() <= fds


# ---- per-request limits (the session server: --ctx 512, --max-body 1MiB) ----------------------------


def raw(server, data):
    s = socket.create_connection(("127.0.0.1", server.port), timeout=10)
    try:
        s.sendall(data)
        return read_response(s)
    finally:
        s.close()


def test_request_target_too_long_414(server):
    head, body = raw(server, b"GET /health?" + b"a" * 9000 + b" HTTP/1.1\r\nHost: x\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 414 "), head
    assert "8192" in json.loads(body)["error"]["message"]
    head, _ = raw(server, b"GET /health?" + b"a" * 8000 + b" HTTP/1.1\r\nHost: x\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200 "), head


def test_too_many_headers_431(server):
    many = b"".join(b"X-H%d: v\r\n" % i for i in range(65))
    head, body = raw(server, b"GET /health HTTP/1.1\r\nHost: x\r\n" + many + b"\r\n")
    assert head.startswith(b"HTTP/1.1 431 "), head
    assert "64 fields" in json.loads(body)["error"]["message"]
    head, _ = raw(server, b"GET /health HTTP/1.1\r\nHost: x\r\n" + b"".join(b"X-H%d: v\r\n" % i for i in range(63)) + b"\r\n")
    assert head.startswith(b"HTTP/1.1 200 "), head


def post_json(server, path, body):
    data = json.dumps(body).encode()
    return raw(server, f"POST {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                       f"Content-Length: {len(data)}\r\n\r\n".encode() + data)


def test_more_choices_than_the_server_holds_400(server):
    # --max-batch 4 + --max-queue 2: n = 8 can never be in flight at once (16 would be allowed).
    head, body = post_json(server, "/v1/completions", {"prompt": "Hi", "max_tokens": 1, "n": 8})
    assert head.startswith(b"HTTP/1.1 400 ") and json.loads(body)["error"]["param"] == "n", body


@pytest.mark.parametrize("field,value,ok", [
    ("stop", ["a"] * 9, False),              # at most 8 stop strings
    ("stop", ["a"] * 8, True),
    ("stop", ["x" * 257], False),            # each at most 256 bytes
    ("stop", ["x" * 256], True),
    ("logit_bias", {str(i): 0 for i in range(1025)}, False),  # at most 1024 entries
    ("logit_bias", {str(i): 0 for i in range(1024)}, True),
])
def test_request_field_limits(server, field, value, ok):
    head, body = post_json(server, "/v1/completions", {"prompt": "Hi", "max_tokens": 1, field: value})
    if ok:
        assert head.startswith(b"HTTP/1.1 200 "), body
    else:
        assert head.startswith(b"HTTP/1.1 400 "), head
        assert json.loads(body)["error"]["param"] == field
