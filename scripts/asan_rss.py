#!/usr/bin/env python3
"""Resident memory of a `wushkv serve` across requests, to size ASan's quarantine for the daemon
under the sanitizers (docs/reliability.md, "Running the daemon under the sanitizers").

    python3 scripts/asan_rss.py BINARY [REQUESTS=12] [-- SERVE FLAGS...]

Starts BINARY serve on a free port with the caller's environment (set ASAN_OPTIONS there), sends
REQUESTS completions of 32 tokens one after another, and prints the server's VmRSS after the
model is ready and after every request, then its exit status after SIGTERM."""
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request


def rss_mib(pid):
    for line in open(f"/proc/{pid}/status"):
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def main():
    args = sys.argv[1:]
    extra = []
    if "--" in args:
        i = args.index("--")
        args, extra = args[:i], args[i + 1:]
    if not args:
        sys.exit(__doc__)
    binary, n = args[0], int(args[1]) if len(args) > 1 else 12
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    url = f"http://127.0.0.1:{port}"
    proc = subprocess.Popen([binary, "serve", "--port", str(port), *extra], stderr=subprocess.DEVNULL)
    try:
        for _ in range(1200):
            try:
                if urllib.request.urlopen(url + "/health", timeout=2).status == 200:
                    break
            except OSError:
                time.sleep(0.5)
        print(f"ASAN_OPTIONS={os.environ.get('ASAN_OPTIONS', '')!r}")
        print(f"ready: {rss_mib(proc.pid):.0f} MiB")
        body = json.dumps({"prompt": "The history of the city begins", "max_tokens": 32, "temperature": 0}).encode()
        for i in range(n):
            req = urllib.request.Request(url + "/v1/completions", body, {"Content-Type": "application/json"})
            urllib.request.urlopen(req, timeout=600).read()
            print(f"after request {i + 1}: {rss_mib(proc.pid):.0f} MiB", flush=True)
    finally:
        proc.send_signal(signal.SIGTERM)
        print(f"exit status after SIGTERM: {proc.wait(timeout=120)}")


if __name__ == "__main__":
    main()
