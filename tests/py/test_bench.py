# `wushkv bench --url`: the load generator against the live daemon. Its counts must agree with what
# the server itself counted (the Prometheus counters moved by exactly the bench's requests and
# tokens), in both the streaming and the non-streaming form; a URL where nothing listens is a
# clear failure.
import json
import subprocess

import pytest

from conftest import BIN, free_port, metric, wait_idle


def run_bench(*args, timeout=300):
    p = subprocess.run([BIN, "bench", *args], capture_output=True, text=True, timeout=timeout)
    return p.returncode, p.stdout, p.stderr


@pytest.mark.parametrize("mode", ["--stream", "--no-stream"])
def test_bench_load_counts_match_server(server, mode):
    wait_idle(server)
    before = {m: metric(server, m) for m in ("request_success_total", "generation_tokens_total",
                                             "prompt_tokens_total")}
    rc, out, err = run_bench("--url", server.url, "--clients", "2", "--requests", "4", "--max-tokens", "8",
                             "--prompt-tokens", "16", mode, "--json")
    assert rc == 0, err
    j = json.loads(out)
    after = {m: metric(server, m) for m in before}

    assert j["url"] == server.url and j["model"]
    assert j["stream"] == (mode == "--stream")
    assert j["requests_ok"] == 4 and j["requests_failed"] == 0 and j["first_error"] is None
    assert j["requests_without_usage"] == 0
    # Every request answered, with up to max_tokens tokens each, as the server counted them.
    assert after["request_success_total"] - before["request_success_total"] == 4
    assert 0 < j["completion_tokens"] <= 4 * 8
    assert j["completion_tokens"] == after["generation_tokens_total"] - before["generation_tokens_total"]
    assert j["prompt_tokens"] == after["prompt_tokens_total"] - before["prompt_tokens_total"]
    # ~16 prompt tokens each: 15 words and BOS.
    assert 4 * 12 <= j["prompt_tokens"] <= 4 * 20
    assert j["wall_s"] > 0 and j["requests_per_s"] > 0 and j["output_tokens_per_s"] > 0
    assert j["total_tokens_per_s"] > j["output_tokens_per_s"]
    e2e = j["e2e_ms"]
    assert 0 < e2e["p50"] <= e2e["p95"] <= e2e["p99"] <= j["wall_s"] * 1000 + 1
    if mode == "--stream":
        assert 0 < j["ttft_ms"]["p50"] <= j["ttft_ms"]["p99"] <= e2e["p99"]
        assert j["itl_ms"]["p50"] > 0
    else:
        assert j["ttft_ms"] is None and j["itl_ms"] is None
    wait_idle(server)


def test_bench_load_text_report_chat(server):
    rc, out, err = run_bench("--url", server.url + "/v1", "--clients", "1", "--requests", "1", "--max-tokens", "4",
                             "--prompt-tokens", "8", "--chat")
    assert rc == 0, err
    assert f"server: {server.url}/v1 (model '" in out
    assert "/v1/chat/completions, stream, 1 clients, 1 requests" in out
    rows = {line.split("|")[1].strip(): line.split("|")[2].strip() for line in out.splitlines()
            if line.startswith("| ") and not line.startswith("| metric")}
    assert rows["requests ok"] == "1" and rows["requests failed"] == "0"
    assert 1 <= int(rows["completion tokens"]) <= 4
    wait_idle(server)


def test_bench_load_nothing_listening():
    url = f"http://127.0.0.1:{free_port()}"
    rc, out, err = run_bench("--url", url, "--requests", "2", "--json", timeout=60)
    assert rc == 1
    assert f"cannot reach {url}" in err and "Connection refused" in err
    j = json.loads(out)
    assert j["url"] == url and "Connection refused" in j["error"] and "requests_ok" not in j


def test_bench_load_failed_requests_reported(server):
    # A prompt longer than the server's context (--ctx 512): every request gets 400; the first error
    # is reported and the exit status is 1.
    rc, out, err = run_bench("--url", server.url, "--clients", "2", "--requests", "2", "--max-tokens", "4",
                             "--prompt-tokens", "600", "--json")
    assert rc == 1
    j = json.loads(out)
    assert j["requests_ok"] == 0 and j["requests_failed"] == 2
    assert "HTTP 400" in j["first_error"] and "context" in j["first_error"]
    assert "2 of 2 requests" in err
