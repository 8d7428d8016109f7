#!/usr/bin/env python3
"""Soak test of `wushkv serve` (issue 14; results in docs/reliability.md, "Soak").

    python3 scripts/soak.py [--bin build/wushkv | --url URL] [--minutes 10] [--clients 16]
                            [--disconnect 0.10] [--invalid 0.05] [--sample 5] [--seed 1]
                            [--json FILE] [-- SERVE FLAGS...]

Runs CLIENTS client threads for MINUTES against a server (started from --bin on a free port with
the SERVE FLAGS, or an already running one at --url). Each client sends, one after another,
completions and chat completions with random prompt lengths (1 .. 300 words), random max_tokens
(1 .. 64), random sampling, streamed or not; a DISCONNECT share of them hang up at a random phase
(mid-headers, mid-body, queued or prefilling, mid-stream); an INVALID share are bad requests from a
catalogue (broken JSON, trailing garbage, NUL bytes, invalid UTF-8, out-of-range parameters, an
HTTP/2.0 request line, a wrong content type, an unknown route) that must get a 4xx. Every SAMPLE
seconds it records the server's RSS (when it started the server; also by kind of mapping, from
/proc/PID/smaps) and the pool's KV bytes and blocks, running and waiting sequences from /metrics;
--json FILE keeps the samples and every request's end (time, kind, status, prompt size), to line
up an RSS step with what happened then.

It fails (exit 1) when: a valid request that was not hung up gets no complete answer (within 30
minutes: answers take long on a loaded CPU) or a 5xx (429/503 with Retry-After are counted as backpressure, not failures); an invalid
request gets anything but a 4xx; the pool holds KV blocks once the load has stopped and the server
is idle; the RSS after warm-up (the first fifth of the run) grows by more than 5 % + 64 MiB; or the
server stalls (no prompt or generated token for 2 minutes while sequences run), exits, or exits
non-zero after SIGTERM. Needs only Python's standard library. Set
ASAN_OPTIONS for a sanitizer build; the default here is
detect_leaks=1:quarantine_size_mb=0:thread_local_quarantine_size_kb=0, because any quarantine
pins memory the RSS criterion would count: lavapipe's shader code allocates tiny page-aligned
blocks on every dispatch (docs/reliability.md, "Running the daemon under the sanitizers")."""
import argparse
import http.client
import json
import os
import random
import signal
import socket
import statistics
import subprocess
import sys
import threading
import time
import urllib.parse

WORDS = ("the of and to in a is that for it as was with be by on not he this are or his from at which "
         "but have an they you were her she there one all we their has been if more when will would who "
         "so no city river history music school water light winter garden story king ship market north "
         "engine season letter forest island bridge voice paper window mountain village").split()


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def rss_mib(pid):
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return None


def rss_by_mapping(pid):
    """Resident MiB by kind of mapping (/proc/PID/smaps): 'heap' ([heap], brk), 'anon' (anonymous
    mmaps: ASan's allocator and large mallocs live there), 'file' (libraries, the model file, the
    Mesa shader cache), 'other' ([stack], vdso ...). To see which kind grows when RSS steps."""
    kinds = {"heap": 0, "anon": 0, "file": 0, "other": 0}
    kind = "other"
    try:
        with open(f"/proc/{pid}/smaps") as f:
            for line in f:
                head = line.split(None, 1)[0]
                if "-" in head and not head.endswith(":"):
                    parts = line.split()
                    name = parts[5] if len(parts) > 5 else ""
                    kind = "heap" if name == "[heap]" else "anon" if name == "" else \
                        "file" if name.startswith("/") else "other"
                elif head == "Rss:":
                    kinds[kind] += int(line.split()[1])
    except OSError:
        return None
    return {k: round(v / 1024, 1) for k, v in kinds.items()}


def metrics(host, port):
    """The wushkv: gauges the soak samples, summed over label sets; None when /metrics fails."""
    want = ("kv_cache_used_bytes", "kv_cache_used_blocks", "num_requests_running", "num_requests_waiting",
            "generation_tokens_total", "prompt_tokens_total")
    try:
        c = http.client.HTTPConnection(host, port, timeout=10)
        c.request("GET", "/metrics")
        text = c.getresponse().read().decode()
        c.close()
    except (OSError, http.client.HTTPException):
        return None
    out = {k: 0.0 for k in want}
    for line in text.splitlines():
        for k in want:
            if line.startswith((f"wushkv:{k} ", f"wushkv:{k}{{")):
                out[k] += float(line.rsplit(" ", 1)[1])
    return out


class Tally:
    def __init__(self):
        self.lock = threading.Lock()
        self.counts = {}
        self.failures = []
        self.latencies = []
        self.events = []  # (seconds since the load started, what ended then): to line up with RSS steps
        self.start = time.time()

    def event(self, what):
        with self.lock:
            self.events.append((round(time.time() - self.start, 1), what))

    def add(self, key, failure=None, latency=None):
        with self.lock:
            self.counts[key] = self.counts.get(key, 0) + 1
            if failure and len(self.failures) < 50:
                self.failures.append(failure)
            if latency is not None:
                self.latencies.append(latency)


def prompt_text(rng, n_words):
    return " ".join(rng.choice(WORDS) for _ in range(n_words))


def valid_body(rng, model):
    chat = rng.random() < 0.5
    stream = rng.random() < 0.6
    body = {"model": model, "max_tokens": rng.randint(1, 64), "stream": stream,
            "temperature": rng.choice([0, 0.3, 0.8, 1.0])}
    if rng.random() < 0.3:
        body["top_p"] = rng.choice([0.5, 0.9, 1.0])
    if stream and rng.random() < 0.5:
        body["stream_options"] = {"include_usage": True}
    text = prompt_text(rng, rng.randint(1, 300))
    if chat:
        body["messages"] = [{"role": "user", "content": text}]
        return "/v1/chat/completions", body
    body["prompt"] = text
    return "/v1/completions", body


# Bad requests: (name, raw request bytes builder). Each must get a 4xx (or 505 for a version).
def invalid_requests(model):
    def post(path, payload, ctype="application/json"):
        return (f"POST {path} HTTP/1.1\r\nHost: x\r\nContent-Type: {ctype}\r\n"
                f"Content-Length: {len(payload)}\r\nConnection: close\r\n\r\n").encode() + payload

    m = json.dumps(model)
    return [
        ("broken-json", post("/v1/completions", b'{"prompt": "a", "max_tokens": ')),
        ("trailing-garbage", post("/v1/completions", b'{"prompt": "a", "max_tokens": 2} xyz')),
        ("nul-in-key", post("/v1/completions", b'{"pro\x00mpt": "a"}')),
        ("invalid-utf8", post("/v1/chat/completions",
                              b'{"model": ' + m.encode() + b', "messages": [{"role": "user", "content": "\xff\xfe"}]}')),
        ("temperature-out-of-range", post("/v1/completions", json.dumps(
            {"model": model, "prompt": "a", "temperature": 7}).encode())),
        ("max-tokens-negative", post("/v1/completions", json.dumps(
            {"model": model, "prompt": "a", "max_tokens": -1}).encode())),
        ("n-huge", post("/v1/completions", json.dumps({"model": model, "prompt": "a", "n": 100000}).encode())),
        ("messages-empty", post("/v1/chat/completions", json.dumps({"model": model, "messages": []}).encode())),
        ("wrong-content-type", post("/v1/completions", b'{"prompt": "a"}', "text/plain")),
        ("unknown-model", post("/v1/completions", json.dumps({"model": "no-such-model", "prompt": "a"}).encode())),
        ("unknown-route", b"GET /v1/nothing HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"),
        ("http2-request-line", b"GET /health HTTP/2.0\r\nHost: x\r\n\r\n"),
        ("bad-request-line", b"BREW /coffee\r\n\r\n"),
        ("prompt-too-long", post("/v1/completions", json.dumps(
            {"model": model, "prompt": "word " * 300000, "max_tokens": 1}).encode())),
    ]


# A request's answer may take long on a loaded CPU (queued behind --max-batch sequences, then its
# own prefill and decode); a stall is caught globally instead (no token for STALL_S while busy).
REQUEST_TIMEOUT_S = 1800
STALL_S = 120


def raw_exchange(host, port, data, timeout=REQUEST_TIMEOUT_S):
    """Sends raw bytes; returns the status code of the answer (None if none came)."""
    with socket.create_connection((host, port), timeout=timeout) as s:
        s.sendall(data)
        buf = b""
        while b"\r\n" not in buf:
            chunk = s.recv(4096)
            if not chunk:
                break
            buf += chunk
    try:
        return int(buf.split(b" ", 2)[1])
    except (IndexError, ValueError):
        return None


def hang_up(rng, host, port, path, body):
    """Sends (part of) a valid request, then closes the socket at a random phase."""
    payload = json.dumps(body).encode()
    head = (f"POST {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(payload)}\r\n\r\n").encode()
    phase = rng.choice(["headers", "body", "queued", "stream"])
    with socket.create_connection((host, port), timeout=REQUEST_TIMEOUT_S) as s:
        if phase == "headers":
            s.sendall(head[: rng.randint(1, len(head) - 1)])
        elif phase == "body":
            s.sendall(head + payload[: rng.randint(0, len(payload) - 1)])
        elif phase == "queued":
            s.sendall(head + payload)
            time.sleep(rng.uniform(0, 0.5))
        else:
            s.sendall(head + payload)
            got = 0
            want = rng.randint(1, 4000)
            while got < want:
                chunk = s.recv(512)
                if not chunk:
                    break
                got += len(chunk)
        time.sleep(rng.uniform(0, 0.2))
    return phase


def valid_exchange(host, port, path, body):
    """Returns (status, complete?, detail, Retry-After header or None)."""
    c = http.client.HTTPConnection(host, port, timeout=REQUEST_TIMEOUT_S)
    try:
        c.request("POST", path, json.dumps(body), {"Content-Type": "application/json"})
        r = c.getresponse()
        if r.status != 200:
            return r.status, False, f"{r.status} {r.read()[:200]!r}", r.getheader("Retry-After")
        if body.get("stream"):
            done = False
            while True:
                line = r.readline()
                if not line:
                    break
                if line.strip() == b"data: [DONE]":
                    done = True
            return 200, done, "" if done else "stream ended without [DONE]", None
        doc = json.loads(r.read())
        ok = bool(doc.get("choices")) and "usage" in doc
        return 200, ok, "" if ok else f"answer without choices/usage: {str(doc)[:200]}", None
    finally:
        c.close()


def client_loop(idx, args, host, port, model, deadline, tally):
    rng = random.Random(args.seed * 1000 + idx)
    bad = invalid_requests(model)
    while time.time() < deadline:
        r = rng.random()
        try:
            if r < args.invalid:
                name, data = rng.choice(bad)
                status = raw_exchange(host, port, data)
                tally.event(f"invalid {name} -> {status}")
                if status is not None and 400 <= status < 500 or status == 505:
                    tally.add("invalid: 4xx")
                else:
                    tally.add("invalid: FAIL", f"{name}: status {status}")
                continue
            path, body = valid_body(rng, model)
            if r < args.invalid + args.disconnect:
                phase = hang_up(rng, host, port, path, body)
                tally.add(f"hung up: {phase}")
                tally.event(f"hung up {phase} {path}")
                continue
            t0 = time.time()
            status, complete, detail, retry_after = valid_exchange(host, port, path, body)
            size = len(json.dumps(body.get("prompt", body.get("messages", ""))))
            tally.event(f"valid {path} {status} prompt_bytes={size} max_tokens={body.get('max_tokens')} "
                        f"stream={body.get('stream', False)}")
            if status == 200 and complete:
                tally.add("valid: answered", latency=time.time() - t0)
            elif status in (429, 503) and retry_after:
                tally.add(f"valid: {status} (backpressure)")
                time.sleep(1)
            else:
                tally.add("valid: FAIL", f"{path}: {detail}")
        except (OSError, http.client.HTTPException, ValueError) as e:
            tally.add("valid: FAIL" if r >= args.invalid else "invalid: FAIL", f"{type(e).__name__}: {e}")


def main():
    argv = sys.argv[1:]
    serve_flags = []
    if "--" in argv:
        i = argv.index("--")
        argv, serve_flags = argv[:i], argv[i + 1:]
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--bin", default="build/wushkv")
    ap.add_argument("--url")
    ap.add_argument("--minutes", type=float, default=10)
    ap.add_argument("--clients", type=int, default=16)
    ap.add_argument("--disconnect", type=float, default=0.10)
    ap.add_argument("--invalid", type=float, default=0.05)
    ap.add_argument("--sample", type=float, default=5)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--json")
    args = ap.parse_args(argv)

    proc = None
    if args.url:
        u = urllib.parse.urlsplit(args.url)
        host, port = u.hostname, u.port or 80
    else:
        host, port = "127.0.0.1", free_port()
        env = dict(os.environ)
        env.setdefault("ASAN_OPTIONS", "detect_leaks=1:quarantine_size_mb=0:thread_local_quarantine_size_kb=0")
        log = open(f"/tmp/wushkv-soak-{port}.log", "w")
        proc = subprocess.Popen([args.bin, "serve", "--port", str(port), *serve_flags], stdout=log,
                                stderr=subprocess.STDOUT, env=env)
        print(f"server: {args.bin} serve --port {port} {' '.join(serve_flags)} (log {log.name})", flush=True)
    t_ready = time.time()
    while True:
        if proc and proc.poll() is not None:
            sys.exit(f"server exited with {proc.returncode} before it was ready")
        try:
            c = http.client.HTTPConnection(host, port, timeout=5)
            c.request("GET", "/health")
            if c.getresponse().status == 200:
                break
        except (OSError, http.client.HTTPException):
            pass
        if time.time() - t_ready > 1800:
            sys.exit("server not ready after 30 minutes")
        time.sleep(1)
    c = http.client.HTTPConnection(host, port, timeout=10)
    c.request("GET", "/v1/models")
    model = json.loads(c.getresponse().read())["data"][0]["id"]
    print(f"ready after {time.time() - t_ready:.0f} s; model {model}; {args.clients} clients for "
          f"{args.minutes:g} min", flush=True)

    tally = Tally()
    start = tally.start = time.time()
    deadline = start + args.minutes * 60
    threads = [threading.Thread(target=client_loop, args=(i, args, host, port, model, deadline, tally), daemon=True)
               for i in range(args.clients)]
    for t in threads:
        t.start()
    samples = []
    progress = (None, time.time())  # (tokens so far, when that count last changed)
    while any(t.is_alive() for t in threads):
        m = metrics(host, port)
        if m:
            done = m["generation_tokens_total"] + m["prompt_tokens_total"]
            if done != progress[0]:
                progress = (done, time.time())
            elif m["num_requests_running"] > 0 and time.time() - progress[1] > STALL_S:
                tally.add("server: FAIL", f"stalled: no token for {STALL_S} s with sequences running")
                progress = (done, time.time())
        s = {"t": round(time.time() - start, 1), "rss_mib": rss_mib(proc.pid) if proc else None,
             "rss_by_mapping_mib": rss_by_mapping(proc.pid) if proc else None}
        if m:
            s.update(m)
        samples.append(s)
        if proc and proc.poll() is not None:
            tally.add("server: FAIL", f"server exited with {proc.returncode} during the run")
            break
        print(f"t={s['t']:7.1f}s rss={s['rss_mib'] or 0:8.0f} MiB kv_bytes={s.get('kv_cache_used_bytes', 0):12.0f} "
              f"blocks={s.get('kv_cache_used_blocks', 0):6.0f} running={s.get('num_requests_running', 0):3.0f} "
              f"waiting={s.get('num_requests_waiting', 0):3.0f} answered={tally.counts.get('valid: answered', 0)}",
              flush=True)
        time.sleep(args.sample)
    for t in threads:
        t.join(timeout=60)
        if t.is_alive():
            tally.add("client: FAIL", "a client thread was still busy after the sampling loop ended")

    # Idle: nothing running or waiting, then the pool must hold no block.
    end = None
    for _ in range(240):
        end = metrics(host, port)
        if end and end["num_requests_running"] == 0 and end["num_requests_waiting"] == 0 \
                and end["kv_cache_used_blocks"] == 0:
            break
        time.sleep(0.5)
    if not end or end["kv_cache_used_blocks"] != 0 or end["kv_cache_used_bytes"] != 0:
        tally.add("pool: FAIL", f"pool not empty when idle: {end}")

    rss = [(s["t"], s["rss_mib"]) for s in samples if s.get("rss_mib")]
    rss_report = {}
    if rss:
        warm = [v for t, v in rss if t >= args.minutes * 60 / 5]
        if len(warm) >= 2:
            base, peak, last = warm[0], max(warm), warm[-1]
            rss_report = {"after_warmup_mib": round(base), "peak_mib": round(peak), "end_mib": round(last),
                          "median_mib": round(statistics.median(warm))}
            if last > base * 1.05 + 64:
                tally.add("rss: FAIL", f"RSS grew from {base:.0f} MiB after warm-up to {last:.0f} MiB at the end")

    exit_status = None
    if proc:
        proc.send_signal(signal.SIGTERM)
        try:
            exit_status = proc.wait(timeout=120)
        except subprocess.TimeoutExpired:
            proc.kill()
            exit_status = "killed after 120 s"
        if exit_status != 0:
            tally.add("server: FAIL", f"exit status {exit_status} after SIGTERM")

    lat = sorted(tally.latencies)
    summary = {
        "minutes": args.minutes, "clients": args.clients, "disconnect": args.disconnect, "invalid": args.invalid,
        "serve_flags": serve_flags, "counts": dict(sorted(tally.counts.items())),
        "latency_s": {"p50": round(lat[len(lat) // 2], 2), "p99": round(lat[int(len(lat) * 0.99)], 2)} if lat else {},
        "max_kv_bytes": max((s.get("kv_cache_used_bytes", 0) for s in samples), default=0),
        "rss": rss_report, "end": end, "exit_status": exit_status, "failures": tally.failures,
        "samples": samples, "events": tally.events,
    }
    if args.json:
        with open(args.json, "w") as f:
            json.dump(summary, f, indent=1)
    print("\n" + "\n".join(f"{k:32s} {v}" for k, v in summary["counts"].items()))
    print(f"latency of answered requests: {summary['latency_s']}; peak pool bytes {summary['max_kv_bytes']:.0f}")
    print(f"RSS: {rss_report}; idle pool: {end}; exit status after SIGTERM: {exit_status}")
    failed = [k for k in tally.counts if "FAIL" in k]
    for f in tally.failures:
        print("FAIL", f)
    print("SOAK " + ("FAILED" if failed else "PASSED"))
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
