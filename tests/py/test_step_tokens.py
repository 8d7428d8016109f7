# serve's step budget: without --batch-tokens, a CPU device's steps carry at most 128 tokens (a
# burst of prompts then gets its first tokens sooner at about the same throughput:
# docs/benchmarks-serving.md), any other device's 512; --batch-tokens, when given, is the budget
# everywhere. Read from the ready line and from /metrics' histogram of the tokens a step carries.
import re

import requests

from conftest import Server, metric

PROMPT = "The quick brown fox jumps over the lazy dog. " * 30  # about 300 tokens


def ready_steps(srv):
    m = re.search(r"ready: .* on (.*?), context .* steps of at most (\d+) tokens", srv.log())
    assert m, srv.log()
    return m.group(1), int(m.group(2))


def steps_above_200(srv):
    return metric(srv, "iteration_tokens_total_count") - metric(srv, "iteration_tokens_total_bucket", 'le="200"')


def complete(srv):
    r = requests.post(srv.url + "/v1/completions", json={"prompt": PROMPT, "max_tokens": 2, "temperature": 0},
                      timeout=300)
    assert r.status_code == 200, r.text
    assert r.json()["usage"]["prompt_tokens"] > 250


def test_default_step_budget_by_device(server):
    device, steps = ready_steps(server)
    cpu = "llvmpipe" in device
    assert steps == (128 if cpu else 512), device
    before = steps_above_200(server)
    complete(server)
    # A 300-token prompt in steps of 128 never makes a step of more than 200 tokens; in one of 512 it does.
    assert steps_above_200(server) - before == (0 if cpu else 1)


def test_batch_tokens_given_wins():
    s = Server("--kv", "f16", "--ctx", "512", "--max-batch", "1", "--batch-tokens", "512")
    try:
        assert ready_steps(s)[1] == 512
        complete(s)
        assert steps_above_200(s) == 1
    finally:
        assert s.stop() == 0
