# The paged, quantized KV pool under `wushkv serve`: --kv flags, usage.kv_cache in int4, the pool
# gauges, and preemption by recompute when concurrent requests outgrow the pool.
#
# The numbers, for the default model (Gemma 3 270M: 18 layers, 1 KV head of 256 dimensions) with
# --kv int4 (QuEST, G32: 4 bits + one f16 scale per 32 elements = 4.5 bits per element):
#   18 layers x 2 (K, V) x 256 x 4.5 / 8 = 5184 bytes per token, 82944 bytes per 16-token block;
#   --kv-mem 810KiB = 829440 bytes = 10 blocks (160 tokens).
# Each prompt below is 37..39 tokens (3 blocks) and asks for 16 tokens, so it grows to ~55 tokens
# (4 blocks). Three prompts are admitted together (9 blocks claimed, the fourth waits: 12 > 10);
# once their sequences pass 48 tokens they need 12 blocks, so the newest is preempted, recomputed
# later, and must still produce exactly what it produces alone. (Smaller than the ~100-token
# prompts one would like, to keep this file well under a minute on lavapipe.)
import concurrent.futures as cf
import os
import subprocess

import pytest
import requests

from conftest import BIN, LONG_PROMPTS, MODEL, PLAIN, Server, free_port, metric, wait_idle

PROMPTS = LONG_PROMPTS
MAX_TOKENS = 16


@pytest.fixture(scope="module")
def kv_server():
    s = Server("--kv", "int4", *PLAIN, "--kv-mem", "810KiB", "--ctx", "256", "--max-batch", "4")
    yield s
    rc = s.stop()
    assert rc == 0, f"server exit status {rc} after SIGTERM:\n{s.log()}"


def complete(server, prompt):
    r = requests.post(server.url + "/v1/completions",
                      json={"prompt": prompt, "max_tokens": MAX_TOKENS, "temperature": 0}, timeout=300)
    assert r.status_code == 200, r.text
    return r.json()


def test_pool_gauges(kv_server):
    assert metric(kv_server, "kv_cache_used_bytes") == 0
    cap = metric(kv_server, "kv_cache_capacity_bytes")
    blocks = metric(kv_server, "kv_cache_total_blocks")
    assert 0 < cap <= 810 * 1024 and blocks >= 1
    assert "KV int4 quest G32" in kv_server.log()


def test_preemption_keeps_outputs(kv_server):
    alone = [complete(kv_server, p) for p in PROMPTS]
    for r in alone:
        kv = r["usage"]["kv_cache"]
        assert kv["bits_per_element"] == 4.5
        assert 0 < kv["bytes"] < kv["fp16_bytes"]
        tokens = r["usage"]["prompt_tokens"] + r["usage"]["completion_tokens"] - 1  # the last is never fed
        assert kv["blocks"] == (tokens + 15) // 16
        # whole 16-token blocks at 4.5 bits per element; fp16_bytes: 16 bits for each token held
        fp16_per_token = kv["fp16_bytes"] // tokens
        assert kv["fp16_bytes"] == tokens * fp16_per_token
        assert kv["bytes"] == kv["blocks"] * 16 * fp16_per_token * 4.5 / 16
    wait_idle(kv_server, held="kv_cache_used_bytes")
    preempted = metric(kv_server, "num_preemptions_total")

    with cf.ThreadPoolExecutor(len(PROMPTS)) as ex:
        together = list(ex.map(lambda p: complete(kv_server, p), PROMPTS))
    for p, a, t in zip(PROMPTS, alone, together):
        assert t["choices"][0]["text"] == a["choices"][0]["text"], f"{p!r}: alone vs with preemption"
        assert t["choices"][0]["finish_reason"] == a["choices"][0]["finish_reason"]
        assert t["usage"]["kv_cache"] == a["usage"]["kv_cache"]
    # The pool cannot hold all four at their full length: someone was preempted and recomputed.
    assert metric(kv_server, "num_preemptions_total") > preempted, kv_server.log()
    assert "preempting sequence" in kv_server.log()
    wait_idle(kv_server, held="kv_cache_used_bytes")
    assert metric(kv_server, "kv_cache_used_blocks") == 0


def test_preemption_keeps_prompt_scores(kv_server):
    # Scored prompts (echo with logprobs: every prompt row's logits) under the same pressure: the
    # preempted sequence's prompt was scored before it gave its blocks up, or is scored again from
    # what the prefix cache may give it; either way each request's entries equal its own alone.
    def scored(p):
        r = requests.post(kv_server.url + "/v1/completions",
                          json={"prompt": p, "max_tokens": MAX_TOKENS, "temperature": 0, "echo": True, "logprobs": 2},
                          timeout=300)
        assert r.status_code == 200, r.text
        return r.json()["choices"][0]

    alone = [scored(p) for p in PROMPTS]
    wait_idle(kv_server, held="kv_cache_used_bytes")
    preempted = metric(kv_server, "num_preemptions_total")
    with cf.ThreadPoolExecutor(len(PROMPTS)) as ex:
        together = list(ex.map(scored, PROMPTS))
    assert metric(kv_server, "num_preemptions_total") > preempted, kv_server.log()
    for p, a, t in zip(PROMPTS, alone, together):
        assert t["text"] == a["text"] and t["text"].startswith(p)
        la, lt = a["logprobs"], t["logprobs"]
        assert lt["tokens"] == la["tokens"] and lt["text_offset"] == la["text_offset"]
        assert lt["token_logprobs"][0] is None and None not in lt["token_logprobs"][1:]
        # The prompt's entries (its prefill, in either run); the reply's are the decode path's alone
        # and the prefill's after a recompute, whose int4 codes may round otherwise (docs/api.md).
        n = len(requests.post(kv_server.url + "/tokenize", json={"prompt": p}, timeout=60).json()["tokens"])
        assert max(abs(x - y) for x, y in zip(la["token_logprobs"][1:n], lt["token_logprobs"][1:n])) < 2e-2
    wait_idle(kv_server, held="kv_cache_used_bytes")


def test_prompt_longer_than_pool_400(kv_server):
    # 10 blocks hold 160 tokens; the context (256) would take this prompt, the pool never can.
    prompt = "one two three four five six seven eight nine ten " * 20
    r = requests.post(kv_server.url + "/v1/completions", json={"prompt": prompt, "max_tokens": 4}, timeout=60)
    assert r.status_code == 400, r.text
    err = r.json()["error"]
    assert err["code"] == "kv_cache_exceeded" and "KV pool" in err["message"] and err["param"] == "prompt"
    wait_idle(kv_server, held="kv_cache_used_bytes")


def run_serve(*args, timeout=120):
    if not os.path.exists(BIN):
        pytest.skip(f"{BIN} is not built")
    model = ["-m", MODEL] if MODEL else []
    return subprocess.run([BIN, "serve", "--port", str(free_port()), *model, *args], capture_output=True, text=True,
                          timeout=timeout)


@pytest.mark.parametrize("args, named", [
    (["--kv", "int5"], "--kv"),
    (["--kv", "q4"], "--kv"),
    (["--kv"], "--kv"),
    (["--kv", "int4", "--kv-quant", "nf4"], "--kv-quant"),
    (["--kv", "int4", "--kv-group", "48"], "--kv-group"),
    (["--kv", "int4", "--kv-group", "512"], "--kv-group"),
    (["--kv", "int4", "--kv-mem", "2XB"], "--kv-mem"),
    (["--kv", "int4", "--kv-mem", "-1"], "--kv-mem"),
    (["--kv", "f16", "--kv-quant", "absmax"], "--kv-quant"),
    (["--kv-rho-k", "2"], "--kv-rho-k"),
    (["--kv", "int2", "--kv-quant", "percentile", "--kv-rho-v", "0"], "--kv-rho-v"),
    (["--kv", "int2", "--kv-rho-k", "0.9"], "--kv-rho-k"),              # quest has no quantile
    (["--kv", "int2", "--kv-sink", "-1"], "--kv-sink"),
    (["--kv", "f16", "--kv-recent", "64"], "--kv-recent"),               # f16 has no windows
    (["--kv", "f16", "--kv-mem", "2XB"], "--kv-mem"),                  # f16 has a pool too
])
def test_bad_kv_flags_exit_2(args, named):
    p = run_serve(*args)
    assert p.returncode == 2, p.stderr
    assert named + ":" in p.stderr or named + " " in p.stderr, p.stderr
    assert "listening" not in p.stderr  # refused before anything starts


def test_engine_refuses_kv_format_exit_1():
    # A pool smaller than one block: the flags parse, the engine refuses with its own reason.
    p = run_serve("--kv", "int2", *PLAIN, "--kv-mem", "1KiB", "--ctx", "64", "--max-batch", "1")
    assert p.returncode == 1, p.stderr
    assert "KV pool of 1024 bytes" in p.stderr, p.stderr


def test_help_lists_kv_flags():
    p = run_serve("--help")
    assert p.returncode == 0
    for flag in ("--kv ", "--kv-quant", "--kv-group", "--kv-mem", "--kv-transform", "--wush", "--kv-sink",
                 "--kv-recent", "--kv-rho-k", "--kv-rho-v"):
        assert flag in p.stdout


# f16 windows under serve: --kv-recent covering the whole context reads nothing from the 2-bit codes,
# so greedy output equals the f16 server's; the window slot is counted in usage and freed with the
# sequence (the block gauges stay whole blocks).
def test_windows_cover_context_equal_f16(server):
    prompt = PROMPTS[0]
    ref = complete(server, prompt)["choices"][0]["text"]
    s = Server("--kv", "int2", "--kv-transform", "none", "--kv-sink", "4", "--kv-recent", "256", "--ctx", "256", "--max-batch", "1",
               "--kv-mem", "8MiB")
    try:
        assert "sink4 recent256" in s.log()
        r = complete(s, prompt)
        assert r["choices"][0]["text"] == ref
        kv = r["usage"]["kv_cache"]
        tokens = r["usage"]["prompt_tokens"] + r["usage"]["completion_tokens"] - 1
        assert kv["blocks"] == (tokens + 15) // 16
        block = 18 * 2 * 256 * 2.5 / 8 * 16          # int2 G32: 2.5 bits per element
        window = 260 * 18 * 2 * 256 * 2               # 4 + 256 f16 rows
        assert kv["bytes"] == kv["blocks"] * block + window
        assert kv["bits_per_element"] > 2.5
        wait_idle(s, held="kv_cache_used_bytes")
        assert metric(s, "kv_cache_used_blocks") == 0
        assert metric(s, "kv_cache_total_blocks") == (8 * 1024 * 1024 - window) // block  # one slot
    finally:
        rc = s.stop()
    assert rc == 0, f"server exit status {rc} after SIGTERM:\n{s.log()}"


# Gemma 3's sliding-window layers (window 512) give their old blocks back. With --ctx 1024 the 18
# layers form 6 groups of 3 (int2 G32: 7680 bytes a block), 5 of them sliding. A prompt of ~700
# tokens prefilled in 64-token steps: the full group holds ceil(tokens / 16) blocks; a sliding
# group never more than the window plus one step, ceil((512 + 64 + 14) / 16) = 37 blocks. So the
# request's peak lies strictly between the full group's share + 5 x 32 (the window alone) and the
# bound, well under the 6 x ceil(tokens / 16) a pool without release would hold; and everything
# is back in the pool afterwards. The f16 cache is the same pool with 16-bit blocks (49152 bytes).
@pytest.mark.parametrize("fmt,bits,mib", [(["--kv", "int2", *PLAIN], 2.5, 8), (["--kv", "f16"], 16, 16)])
def test_sliding_window_layers_release_blocks(fmt, bits, mib):
    s = Server(*fmt, "--ctx", "1024", "--max-batch", "1", "--batch-tokens", "64", "--kv-mem", f"{mib}MiB")
    try:
        prompt = " ".join(f"item{i}" for i in range(190))
        r = requests.post(s.url + "/v1/completions",
                          json={"prompt": prompt, "max_tokens": 4, "temperature": 0}, timeout=600)
        assert r.status_code == 200, r.text
        u = r.json()["usage"]
        assert u["prompt_tokens"] > 600, u
        tokens = u["prompt_tokens"] + u["completion_tokens"] - 1
        kv = u["kv_cache"]
        block = 3 * 2 * 256 * bits / 8 * 16  # one group of 3 layers, 16 tokens, `bits` bits per element
        full = (tokens + 15) // 16
        assert kv["blocks"] == full
        assert (full + 5 * 32) * block <= kv["bytes"] <= (full + 5 * 37) * block, (kv, tokens)
        assert kv["bytes"] < 6 * full * block
        wait_idle(s, held="kv_cache_used_bytes")
        assert metric(s, "kv_cache_used_blocks") == 0
        assert metric(s, "kv_cache_total_blocks") == mib * 1024 * 1024 // block
    finally:
        rc = s.stop()
    assert rc == 0, f"server exit status {rc} after SIGTERM:\n{s.log()}"
