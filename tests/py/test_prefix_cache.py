# Automatic prefix caching under `wushkv serve`: a multi-turn chat through the `openai` client, each
# turn resending the whole history, at temperature 0, against two servers in int2 + WUSH without
# f16 windows (a format with caching on): one with the cache (the default), one with
# --no-prefix-cache. usage.prompt_tokens_details.cached_tokens grows turn by turn on the first and
# is 0 on the second, the outputs are the same, /metrics counts queries and hits in tokens as vLLM
# does, and when idle the blocks sequences hold return to 0 while the cached ones stay.
# With f16 windows (the default format) caching is off, with a log line: checked at the end.
import openai
import pytest
import requests

from conftest import Server, metric, wait_idle

# int2 + WUSH (the default format) without its f16 windows.
FMT = ("--kv", "int2", "--kv-sink", "0", "--kv-recent", "0", "--ctx", "1024", "--max-batch", "2")
BLOCK = 16
TURNS = [
    "Here is a list of the planets of the solar system in order from the sun: Mercury, Venus, Earth, Mars, "
    "Jupiter, Saturn, Uranus and Neptune. Which planet is the largest?",
    "And which one is the closest to the sun?",
    "Name the planet we live on.",
    "How many planets are in the list?",
]
MAX_TOKENS = 12


@pytest.fixture(scope="module")
def servers():
    # One after the other: the first start calibrates the model's WUSH sidecar into the shared
    # cache (conftest's WUSHKV_CACHE_DIR) unless an earlier test did (about 2 minutes on an idle
    # 2-core machine, many more on a busy one), the second reuses it.
    started = [Server(*FMT, ready_timeout=1800)]
    try:
        started.append(Server(*FMT, "--no-prefix-cache"))
    except BaseException:
        started[0].stop()
        raise
    yield started
    for s in started:
        rc = s.stop()
        assert rc == 0, f"server exit status {rc} after SIGTERM:\n{s.log()}"


def chat(server, history):
    client = openai.OpenAI(base_url=server.url + "/v1", api_key="unused", max_retries=0, timeout=300)
    model = client.models.list().data[0].id
    return client.chat.completions.create(model=model, messages=history, max_tokens=MAX_TOKENS, temperature=0)


def conversation(server):
    """The chat turn by turn; returns the responses."""
    history, out = [], []
    for text in TURNS:
        history.append({"role": "user", "content": text})
        r = chat(server, history)
        out.append(r)
        history.append({"role": "assistant", "content": r.choices[0].message.content})
    return out, history


def test_multi_turn_chat(servers):
    cached, plain = servers
    assert "prefix cache on" in cached.log() and "prefix cache off" in plain.log()
    on, history = conversation(cached)
    off, _ = conversation(plain)
    seen = 0
    for turn, (a, b) in enumerate(zip(on, off)):
        # The same answer, whether the history came from the cache or was computed again.
        assert a.choices[0].message.content == b.choices[0].message.content, f"turn {turn}"
        assert a.usage.prompt_tokens == b.usage.prompt_tokens
        assert b.usage.prompt_tokens_details.cached_tokens == 0
        got = a.usage.prompt_tokens_details.cached_tokens
        # Whole blocks, never the last prompt token (its logits are sampled), and more every turn:
        # the history the client resends is the previous prompt plus the answer.
        assert got % BLOCK == 0 and got <= a.usage.prompt_tokens - 1, (turn, got, a.usage)
        if turn == 0:
            assert got == 0
        else:
            assert got > seen, (turn, got, seen)
            assert got >= on[turn - 1].usage.prompt_tokens // BLOCK * BLOCK - BLOCK, (turn, got)
        seen = got
    # vLLM's counters, in tokens: every new request's prompt queried, the cached part a hit.
    assert metric(cached, "prefix_cache_queries_total") == sum(r.usage.prompt_tokens for r in on)
    assert metric(cached, "prefix_cache_hits_total") == sum(r.usage.prompt_tokens_details.cached_tokens for r in on)
    assert metric(plain, "prefix_cache_queries_total") == 0
    # Idle: no block in use, the conversation's blocks kept by the cache (none without it).
    wait_idle(cached)
    wait_idle(plain)
    assert metric(cached, "kv_cache_cached_blocks") > 0
    assert metric(cached, "kv_cache_cached_bytes") > 0
    assert metric(plain, "kv_cache_cached_blocks") == 0

    # The same last turn again, streamed with usage: its whole prompt but the last token is cached
    # (the previous request computed it), and the answer does not change.
    client = openai.OpenAI(base_url=cached.url + "/v1", api_key="unused", max_retries=0, timeout=300)
    model = client.models.list().data[0].id
    chunks = list(client.chat.completions.create(model=model, messages=history[:-1], max_tokens=MAX_TOKENS,
                                                 temperature=0, stream=True, stream_options={"include_usage": True}))
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == on[-1].choices[0].message.content
    usage = chunks[-1].usage
    assert usage.prompt_tokens == on[-1].usage.prompt_tokens
    assert usage.prompt_tokens_details.cached_tokens == (usage.prompt_tokens - 1) // BLOCK * BLOCK
    wait_idle(cached)

    # vLLM's reset: the cached blocks go back to free, and the next lookup finds nothing.
    r = requests.post(cached.url + "/reset_prefix_cache", timeout=60)
    assert r.status_code == 200 and r.json() == {}, r.text
    assert metric(cached, "kv_cache_cached_blocks") == 0
    assert metric(cached, "kv_cache_used_blocks") == 0
    again = chat(cached, history[:-1])
    assert again.usage.prompt_tokens_details.cached_tokens == 0
    assert again.choices[0].message.content == on[-1].choices[0].message.content
    wait_idle(cached)


def test_completions_report_cached_tokens(servers):
    cached, _ = servers
    prompt = "The quick brown fox jumps over the lazy dog. " * 6
    body = {"prompt": prompt, "max_tokens": 4, "temperature": 0}
    first = requests.post(cached.url + "/v1/completions", json=body, timeout=300).json()
    again = requests.post(cached.url + "/v1/completions", json=body, timeout=300).json()
    n = first["usage"]["prompt_tokens"]
    assert first["usage"]["prompt_tokens_details"]["cached_tokens"] == 0
    assert again["usage"]["prompt_tokens_details"]["cached_tokens"] == (n - 1) // BLOCK * BLOCK
    assert again["choices"][0]["text"] == first["choices"][0]["text"]
    wait_idle(cached)


def test_windowed_format_has_caching_off():
    s = Server("--kv", "int2", "--kv-transform", "none", "--ctx", "256", "--max-batch", "1")
    try:
        assert "prefix caching is off: the KV format keeps f16 windows" in s.log()
        assert "prefix cache off" in s.log()
        body = {"prompt": "one two three four five six seven eight nine ten " * 4, "max_tokens": 2, "temperature": 0}
        for _ in range(2):
            r = requests.post(s.url + "/v1/completions", json=body, timeout=300).json()
            assert r["usage"]["prompt_tokens_details"]["cached_tokens"] == 0
        wait_idle(s)
        assert metric(s, "kv_cache_cached_blocks") == 0
    finally:
        rc = s.stop()
    assert rc == 0, f"server exit status {rc} after SIGTERM:\n{s.log()}"
