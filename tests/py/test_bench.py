# `wushkv bench --url`: the load generator against the live daemon. Its counts must agree with what
# the server itself counted (the Prometheus counters moved by exactly the bench's requests and
# tokens), in both the streaming and the non-streaming form; every vLLM figure must follow from the
# per-request lists of --json FILE by vLLM's definitions; the open loop must space its arrivals; a
# server without wushkv's KV metrics (a stand-in here) gives n/a, not a failure; a URL where nothing
# listens is a clear failure.
import json
import math
import statistics
import subprocess
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from conftest import BIN, free_port, metric, wait_idle


def run_bench(*args, timeout=300):
    p = subprocess.run([BIN, "bench", *args], capture_output=True, text=True, timeout=timeout)
    return p.returncode, p.stdout, p.stderr


def pct(xs, p):
    """numpy.percentile's default (linear) method."""
    xs = sorted(xs)
    pos = p / 100 * (len(xs) - 1)
    lo = math.floor(pos)
    if lo + 1 >= len(xs):
        return xs[-1]
    return xs[lo] + (pos - lo) * (xs[lo + 1] - xs[lo])


def close(a, b, rel=1e-9, abs_=1e-9):
    return math.isclose(a, b, rel_tol=rel, abs_tol=abs_)


# Every key --json writes for a measured server (vLLM's result keys, ours, the per-request lists).
SUMMARY_KEYS = {
    "url", "model", "duration", "completed", "failed", "first_error", "total_input_tokens", "total_output_tokens",
    "request_throughput", "request_goodput", "output_throughput", "total_token_throughput",
    "max_output_tokens_per_s", "max_concurrent_requests", "requests_without_usage",
    "kv_cache_bytes_per_request_p50", "kv_cache_bytes_per_request_p99", "kv_cache_bytes_per_request_max",
    "kv_pool_peak_bytes", "kv_pool_peak_fp16_equivalent_bytes", "kv_pool_capacity_bytes", "num_preemptions",
    "metrics_samples", "input_lens", "output_lens", "ttfts", "itls", "latencies", "start_times", "arrival_times",
    "kv_cache_bytes", "errors",
} | {f"{s}_{m}_ms" for s in ("mean", "median", "std", "p99") for m in ("ttft", "tpot", "itl", "e2el")}
SETTINGS_KEYS = {"endpoint", "stream", "mode", "clients", "request_rate", "burstiness", "max_concurrency", "seed",
                 "requests", "prompt_tokens_target", "max_tokens", "sampling", "percentiles", "goodput_slo_ms"}


def check_vllm_definitions(j, stream=True):
    """The summary figures against the per-request lists, by vllm bench serve's definitions."""
    n = j["requests"]
    assert j["completed"] + j["failed"] == n
    ok = [i for i in range(n) if j["errors"][i] == ""]
    assert len(ok) == j["completed"]
    assert j["total_input_tokens"] == sum(j["input_lens"])
    assert j["total_output_tokens"] == sum(j["output_lens"])
    d = j["duration"]
    assert close(j["request_throughput"], j["completed"] / d)
    assert close(j["output_throughput"], j["total_output_tokens"] / d)
    assert close(j["total_token_throughput"], (j["total_input_tokens"] + j["total_output_tokens"]) / d)
    lat = [j["latencies"][i] * 1e3 for i in ok]
    assert close(j["mean_e2el_ms"], statistics.fmean(lat), rel=1e-6)
    assert close(j["median_e2el_ms"], statistics.median(lat), rel=1e-6)
    assert close(j["std_e2el_ms"], statistics.pstdev(lat), rel=1e-6, abs_=1e-6)  # numpy's np.std: population
    assert close(j["p99_e2el_ms"], pct(lat, 99), rel=1e-6)
    assert j["median_e2el_ms"] <= j["p99_e2el_ms"] <= max(lat) + 1e-6
    assert 1 <= j["max_concurrent_requests"] <= n
    if not stream:
        for m in ("ttft", "tpot", "itl"):
            assert j[f"mean_{m}_ms"] is None and j[f"p99_{m}_ms"] is None
        return
    ttft = [j["ttfts"][i] * 1e3 for i in ok]
    itl = [g * 1e3 for i in ok for g in j["itls"][i]]
    # TPOT excludes the first token: (E2EL - TTFT) / (output tokens - 1), requests with 2+ tokens
    tpot = [(j["latencies"][i] - j["ttfts"][i]) * 1e3 / (j["output_lens"][i] - 1) for i in ok
            if j["output_lens"][i] > 1]
    for name, xs in (("ttft", ttft), ("itl", itl), ("tpot", tpot)):
        assert close(j[f"mean_{name}_ms"], statistics.fmean(xs), rel=1e-6), name
        assert close(j[f"median_{name}_ms"], statistics.median(xs), rel=1e-6), name
        assert close(j[f"std_{name}_ms"], statistics.pstdev(xs), rel=1e-6, abs_=1e-6), name
        assert close(j[f"p99_{name}_ms"], pct(xs, 99), rel=1e-6), name
        assert min(xs) - 1e-6 <= j[f"median_{name}_ms"] <= j[f"p99_{name}_ms"] <= max(xs) + 1e-6
    for i in ok:  # ITL: one gap per chunk after the first; E2EL ends at the last chunk
        assert j["ttfts"][i] + sum(j["itls"][i]) == pytest.approx(j["latencies"][i], abs=1e-6)
    assert j["max_output_tokens_per_s"] >= 1


@pytest.mark.parametrize("mode", ["--stream", "--no-stream"])
def test_bench_load_counts_match_server(server, mode, tmp_path):
    wait_idle(server)
    before = {m: metric(server, m) for m in ("request_success_total", "generation_tokens_total",
                                             "prompt_tokens_total")}
    out_file = tmp_path / "bench.json"
    rc, out, err = run_bench("--url", server.url, "--clients", "2", "--requests", "4", "--max-tokens", "8",
                             "--prompt-tokens", "16", mode, "--json", str(out_file), "--scrape-interval", "0.05")
    assert rc == 0, err
    j = json.loads(out_file.read_text())
    after = {m: metric(server, m) for m in before}
    assert "Serving Benchmark Result" in out  # --json FILE keeps the table on stdout

    assert SETTINGS_KEYS | SUMMARY_KEYS <= set(j), (SETTINGS_KEYS | SUMMARY_KEYS) - set(j)
    assert j["url"] == server.url and j["model"]
    assert j["stream"] == (mode == "--stream") and j["mode"] == "closed" and j["clients"] == 2
    assert j["completed"] == 4 and j["failed"] == 0 and j["first_error"] is None
    assert j["requests_without_usage"] == 0
    # Every request answered, with up to max_tokens tokens each, as the server counted them.
    assert after["request_success_total"] - before["request_success_total"] == 4
    assert 0 < j["total_output_tokens"] <= 4 * 8
    assert j["total_output_tokens"] == after["generation_tokens_total"] - before["generation_tokens_total"]
    assert j["total_input_tokens"] == after["prompt_tokens_total"] - before["prompt_tokens_total"]
    # ~16 prompt tokens each: 15 words and BOS.
    assert 4 * 12 <= j["total_input_tokens"] <= 4 * 20
    assert j["request_goodput"] is None  # no --goodput
    check_vllm_definitions(j, stream=mode == "--stream")

    # The KV figures: per request from usage.kv_cache, the pool from /metrics.
    kv = j["kv_cache_bytes"]
    assert all(isinstance(b, int) and b > 0 for b in kv)
    assert j["kv_cache_bytes_per_request_p50"] == pct(kv, 50)
    assert j["kv_cache_bytes_per_request_p99"] == pytest.approx(pct(kv, 99))
    assert j["kv_cache_bytes_per_request_max"] == max(kv)
    assert j["metrics_samples"] >= 2
    assert 0 < j["kv_pool_peak_bytes"] <= min(sum(kv), j["kv_pool_capacity_bytes"])
    assert j["kv_pool_capacity_bytes"] == metric(server, "kv_cache_capacity_bytes")
    # The f16 cache holds the same bytes per token in whole 16-token blocks: never less than f16.
    assert 0 < j["kv_pool_peak_fp16_equivalent_bytes"] <= j["kv_pool_peak_bytes"]
    assert j["num_preemptions"] == 0
    wait_idle(server)


def test_bench_load_sampling_and_ignore_eos(server, tmp_path):
    """--temperature, --top-p, --top-k, --min-p go into every request and the report; with
    --ignore-eos every request generates exactly --max-tokens tokens (the server masks the
    end-of-generation tokens), which the server's own counter confirms."""
    wait_idle(server)
    before = metric(server, "generation_tokens_total")
    out_file = tmp_path / "bench.json"
    rc, out, err = run_bench("--url", server.url, "--clients", "2", "--requests", "4", "--max-tokens", "6",
                             "--prompt-tokens", "16", "--temperature", "1.3", "--top-p", "0.9", "--top-k", "-1",
                             "--min-p", "0", "--ignore-eos", "--json", str(out_file))
    assert rc == 0, err
    assert "max_tokens 6, temperature 1.3, top_p 0.9, top_k -1, min_p 0, ignore_eos" in out
    j = json.loads(out_file.read_text())
    assert j["sampling"] == {"temperature": pytest.approx(1.3), "top_p": pytest.approx(0.9), "top_k": -1, "min_p": 0,
                             "ignore_eos": True}
    assert j["completed"] == 4 and j["total_output_tokens"] == 4 * 6
    assert metric(server, "generation_tokens_total") - before == 4 * 6
    rc, out, err = run_bench("--url", server.url, "--requests", "1", "--temperature", "2.5")
    assert rc != 0 and "--temperature" in err
    wait_idle(server)


def test_bench_load_goodput(server):
    wait_idle(server)
    # --goodput takes vLLM's KEY:MS list; an SLO nothing meets, then one everything meets.
    rc, out, err = run_bench("--url", server.url, "--clients", "2", "--requests", "3", "--max-tokens", "4",
                             "--prompt-tokens", "8", "--goodput", "ttft:0.001", "e2el:1000000", "--json")
    assert rc == 0, err
    j = json.loads(out)
    assert j["goodput_slo_ms"] == {"ttft": 0.001, "e2el": 1000000}
    assert j["request_goodput"] == 0
    rc, out, err = run_bench("--url", server.url, "--clients", "2", "--requests", "3", "--max-tokens", "4",
                             "--prompt-tokens", "8", "--goodput", "ttft:1e7,tpot:1e7", "e2el:1e7", "--json",
                             "--metric-percentiles", "50,90,99.9")
    assert rc == 0, err
    j = json.loads(out)
    assert j["request_goodput"] == pytest.approx(j["request_throughput"]) and j["completed"] == 3
    # the good requests, recounted from the lists by vLLM's rule (TPOT 0 for a 1-token answer)
    good = 0
    for i in range(3):
        tpot = ((j["latencies"][i] - j["ttfts"][i]) / (j["output_lens"][i] - 1) if j["output_lens"][i] > 1 else 0)
        good += j["ttfts"][i] * 1e3 <= 1e7 and tpot * 1e3 <= 1e7 and j["latencies"][i] * 1e3 <= 1e7
    assert j["request_goodput"] == pytest.approx(good / j["duration"])
    assert j["request_goodput"] <= j["request_throughput"]
    assert j["percentiles"] == [50, 90, 99.9]
    assert j["p50_ttft_ms"] <= j["p90_ttft_ms"] <= j["p99.9_ttft_ms"]
    assert j["p50_ttft_ms"] == pytest.approx(j["median_ttft_ms"])
    wait_idle(server)


def test_bench_load_open_loop_spaces_arrivals(server):
    wait_idle(server)
    # Poisson arrivals at 4/s: 6 requests due over exactly 1.5 s (vLLM scales the drawn sum), each
    # sent when due, not all at once; the seed fixes the times.
    args = ["--url", server.url, "--request-rate", "4", "--seed", "5", "--requests", "6", "--max-tokens", "2",
            "--prompt-tokens", "8", "--json"]
    rc, out, err = run_bench(*args)
    assert rc == 0, err
    j = json.loads(out)
    assert j["mode"] == "open" and j["request_rate"] == 4 and j["burstiness"] == 1 and j["clients"] is None
    arr, st = j["arrival_times"], j["start_times"]
    assert arr == sorted(arr) and arr[0] > 0 and arr[-1] == pytest.approx(1.5)
    assert all(s >= a - 1e-3 for a, s in zip(arr, st))   # nothing sent before it is due
    assert st[-1] - st[0] >= (arr[-1] - arr[0]) - 0.05   # spaced as drawn
    assert j["completed"] == 6
    check_vllm_definitions(j)
    wait_idle(server)
    rc, out, err = run_bench(*args)
    assert rc == 0, err
    assert json.loads(out)["arrival_times"] == arr  # same seed, same times
    wait_idle(server)

    # inf: all due at once; --max-concurrency 1 lets one run at a time.
    rc, out, err = run_bench("--url", server.url, "--request-rate", "inf", "--max-concurrency", "1",
                             "--requests", "3", "--max-tokens", "2", "--prompt-tokens", "8", "--json")
    assert rc == 0, err
    j = json.loads(out)
    assert j["request_rate"] == "inf" and j["max_concurrency"] == 1
    assert j["arrival_times"] == [0, 0, 0]
    assert j["max_concurrent_requests"] == 1
    st = j["start_times"]
    for i in range(2):  # each starts after the previous one's last chunk
        assert st[i + 1] >= st[i] + j["latencies"][i] - 1e-3
    wait_idle(server)


def test_bench_load_text_report_chat(server):
    rc, out, err = run_bench("--url", server.url + "/v1", "--clients", "1", "--requests", "1", "--max-tokens", "4",
                             "--prompt-tokens", "8", "--chat")
    assert rc == 0, err
    assert f"server: {server.url}/v1 (model '" in out
    assert "/v1/chat/completions, stream, 1 clients, 1 requests" in out
    rows = {line.split("|")[1].strip(): line.split("|")[2].strip() for line in out.splitlines()
            if line.startswith("| ") and not line.startswith("| metric")}
    assert rows["Successful requests"] == "1" and rows["Failed requests"] == "0"
    assert 1 <= int(rows["Total generated tokens"]) <= 4
    for name in ("Mean TTFT (ms)", "Median TPOT (ms)", "P99 ITL (ms)", "Std E2EL (ms)", "KV bytes per request, p50",
                 "KV pool peak bytes"):
        assert float(rows[name]) >= 0, name
    wait_idle(server)


class FakeOpenAI(BaseHTTPRequestHandler):
    """A stand-in OpenAI server without wushkv's KV figures: no /metrics, no usage.kv_cache. Each
    completion streams 3 text chunks 50 ms apart after 100 ms, a finish chunk, then the usage."""

    def log_message(self, *args):
        pass

    def send_json(self, code, obj):
        body = json.dumps(obj).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self):
        if self.path == "/v1/models":
            self.send_json(200, {"object": "list", "data": [{"id": "fake", "object": "model"}]})
        else:
            self.send_json(404, {"error": {"message": "not found"}})

    bodies = []  # every request's JSON body, in arrival order

    def do_POST(self):
        FakeOpenAI.bodies.append(json.loads(self.rfile.read(int(self.headers["Content-Length"]))))
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Connection", "close")
        self.end_headers()

        def event(obj):
            self.wfile.write(b"data: " + json.dumps(obj).encode() + b"\n\n")
            self.wfile.flush()

        time.sleep(0.1)
        for k in range(3):
            if k:
                time.sleep(0.05)
            event({"choices": [{"index": 0, "text": f" w{k}", "finish_reason": None}]})
        event({"choices": [{"index": 0, "text": "", "finish_reason": "length"}]})
        event({"choices": [], "usage": {"prompt_tokens": 7, "completion_tokens": 3, "total_tokens": 10}})
        self.wfile.write(b"data: [DONE]\n\n")


@pytest.fixture
def fake_server():
    httpd = ThreadingHTTPServer(("127.0.0.1", free_port()), FakeOpenAI)
    t = threading.Thread(target=httpd.serve_forever, daemon=True)
    t.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()


def test_bench_load_server_without_kv_metrics(fake_server):
    rc, out, err = run_bench("--url", fake_server, "--clients", "2", "--requests", "4", "--json", timeout=60)
    assert rc == 0, err
    j = json.loads(out)
    assert j["completed"] == 4 and j["total_output_tokens"] == 12 and j["total_input_tokens"] == 28
    for k in ("kv_cache_bytes_per_request_p50", "kv_cache_bytes_per_request_p99", "kv_pool_peak_bytes",
              "kv_pool_capacity_bytes", "num_preemptions"):
        assert j[k] is None, k
    assert j["kv_cache_bytes"] == [None] * 4 and j["metrics_samples"] == 0
    check_vllm_definitions(j)
    # The stand-in's pace, by vLLM's rules: TTFT ~100 ms; 3 gaps per request (2 of ~50 ms, and the
    # finish chunk right after the last text); TPOT = (E2EL - TTFT) / 2 ~ 50 ms.
    assert 90 <= j["median_ttft_ms"] < 1000
    assert all(len(g) == 3 for g in j["itls"])
    assert 45 <= j["median_tpot_ms"] < 500
    rc, out, err = run_bench("--url", fake_server, "--clients", "1", "--requests", "1", timeout=60)
    assert rc == 0, err
    rows = {line.split("|")[1].strip(): line.split("|")[2].strip() for line in out.splitlines()
            if line.startswith("| ")}
    assert rows["KV pool peak bytes"] == "n/a" and rows["KV bytes per request, p99"] == "n/a"
    assert rows["Successful requests"] == "1"


def test_bench_load_sends_the_sampling_flags(fake_server):
    """What each request carries: temperature 0 and nothing else by default; the flags as given."""
    FakeOpenAI.bodies.clear()
    rc, out, err = run_bench("--url", fake_server, "--clients", "1", "--requests", "1", timeout=60)
    assert rc == 0, err
    body = FakeOpenAI.bodies[-1]
    assert body["temperature"] == 0 and not {"top_p", "top_k", "min_p", "ignore_eos"} & set(body), body
    rc, out, err = run_bench("--url", fake_server, "--clients", "1", "--requests", "2", "--temperature", "0.7",
                             "--top-p", "0.95", "--top-k", "40", "--min-p", "0.05", "--ignore-eos", timeout=60)
    assert rc == 0, err
    assert len(FakeOpenAI.bodies) == 3
    for body in FakeOpenAI.bodies[1:]:
        assert body["temperature"] == pytest.approx(0.7) and body["top_p"] == pytest.approx(0.95)
        assert body["top_k"] == 40 and body["min_p"] == pytest.approx(0.05) and body["ignore_eos"] is True


def test_bench_load_nothing_listening():
    url = f"http://127.0.0.1:{free_port()}"
    rc, out, err = run_bench("--url", url, "--requests", "2", "--json", timeout=60)
    assert rc == 1
    assert f"cannot reach {url}" in err and "Connection refused" in err
    j = json.loads(out)
    assert j["url"] == url and "Connection refused" in j["error"] and "completed" not in j


def test_bench_load_failed_requests_reported(server):
    # A prompt longer than the server's context (--ctx 512): every request gets 400; the first error
    # is reported and the exit status is 1.
    rc, out, err = run_bench("--url", server.url, "--clients", "2", "--requests", "2", "--max-tokens", "4",
                             "--prompt-tokens", "600", "--json")
    assert rc == 1
    j = json.loads(out)
    assert j["completed"] == 0 and j["failed"] == 2
    assert "HTTP 400" in j["first_error"] and "context" in j["first_error"]
    assert j["errors"][0].startswith("HTTP 400") and j["request_throughput"] == 0
    assert "2 of 2 requests" in err
