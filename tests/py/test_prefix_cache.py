# Automatic prefix caching under `wushkv serve`: a multi-turn chat through the `openai` client, each
# turn resending the whole history, at temperature 0, against two servers in int2 + WUSH without
# f16 windows (a format with caching on): one with the cache (the default), one with
# --no-prefix-cache. usage.prompt_tokens_details.cached_tokens grows turn by turn on the first and
# is 0 on the second, the outputs are the same but for near ties, /metrics counts queries and hits in tokens as vLLM
# does, and when idle the blocks sequences hold return to 0 while the cached ones stay.
# With f16 windows (the default format) caching parks ended sequences whole and the next turn
# adopts them: the same chat against the default format with and without the cache, and a pool
# so small that parked sequences must give way to new work.
import concurrent.futures

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


def chat(server, history, **kw):
    client = openai.OpenAI(base_url=server.url + "/v1", api_key="unused", max_retries=0, timeout=300)
    model = client.models.list().data[0].id
    return client.chat.completions.create(model=model, messages=history, max_tokens=MAX_TOKENS, temperature=0,
                                          logprobs=True, top_logprobs=2, **kw)


def conversation(server, answers=None):
    """The chat turn by turn; returns the responses. With answers (another server's), those are the
    assistant turns sent back, so both servers see the same prompts."""
    history, out = [], []
    for turn, text in enumerate(TURNS):
        history.append({"role": "user", "content": text})
        r = chat(server, history)
        out.append(r)
        history.append({"role": "assistant", "content": answers[turn] if answers else r.choices[0].message.content})
    return out, history


# Two greedy answers to one prompt whose KV came by different paths (cached blocks written by
# earlier steps, or the prompt computed again in one chunk) differ by float rounding, which
# can turn a near tie: the same tokens up to where both sides' choices are each other's runner-up
# within TIE nats, and the same tokens throughout when no such tie comes.
TIE = 0.1


def tokens_of(r):
    return r.choices[0].logprobs.content


def assert_same_but_ties(a, b, what):
    for x, y in zip(a, b):
        if x.token == y.token:
            continue
        for u, v in ((x, y), (y, x)):
            alt = {t.token: t.logprob for t in u.top_logprobs}
            assert v.token in alt and u.logprob - alt[v.token] < TIE, (what, x, y)
        return
    assert [t.token for t in a] == [t.token for t in b], what


def test_multi_turn_chat(servers):
    cached, plain = servers
    assert "prefix cache on (blocks)" in cached.log() and "prefix cache off" in plain.log()
    on, history = conversation(cached)
    off, _ = conversation(plain, [r.choices[0].message.content for r in on])
    seen = 0
    for turn, (a, b) in enumerate(zip(on, off)):
        # The same answer, whether the history came from the cache or was computed again.
        assert_same_but_ties(tokens_of(a), tokens_of(b), f"turn {turn}")
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
                                                 temperature=0, stream=True, stream_options={"include_usage": True},
                                                 logprobs=True, top_logprobs=2))
    streamed = [t for c in chunks if c.choices and c.choices[0].logprobs for t in c.choices[0].logprobs.content]
    assert_same_but_ties(streamed, tokens_of(on[-1]), "the last turn again")
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
    assert_same_but_ties(tokens_of(again), tokens_of(on[-1]), "after the reset")
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


# The default format (int2 + WUSH, sink 4 + recent 64), one sequence at a time. A turn that adopts
# the previous one prefills its new tokens in a chunk after tokens the uncached server prefilled in
# one chunk with them (the answer's were decoded one by one), so the two may differ in float
# rounding (docs/api.md, "Prefix caching"; the engine test checks bit-exactness in equal steps):
# the answers agree but for near ties (assert_same_but_ties).
DEFAULT = ("--ctx", "1024", "--max-batch", "1")


@pytest.fixture(scope="module")
def default_servers():
    started = [Server(*DEFAULT, ready_timeout=1800)]
    try:
        started.append(Server(*DEFAULT, "--no-prefix-cache"))
    except BaseException:
        started[0].stop()
        raise
    yield started
    for s in started:
        rc = s.stop()
        assert rc == 0, f"server exit status {rc} after SIGTERM:\n{s.log()}"


def test_default_format_parks_and_adopts(default_servers):
    cached, plain = default_servers
    assert "prefix cache on (parking, " in cached.log() and "prefix cache off" in plain.log()
    assert "prefix caching is off" not in cached.log()
    on, history = conversation(cached)
    off, _ = conversation(plain, [r.choices[0].message.content for r in on])
    for turn, (a, b) in enumerate(zip(on, off)):
        assert_same_but_ties(tokens_of(a), tokens_of(b), f"turn {turn}")
        assert a.usage.prompt_tokens == b.usage.prompt_tokens
        assert b.usage.prompt_tokens_details.cached_tokens == 0
        got = a.usage.prompt_tokens_details.cached_tokens
        assert got <= a.usage.prompt_tokens - 1, (turn, got, a.usage)
        if turn == 0:
            assert got == 0
        else:
            # The previous turn's whole sequence: its prompt, and its answer as far as it was fed
            # (every token, or all but the last when it stopped at max_tokens).
            prev = on[turn - 1].usage
            assert got >= prev.prompt_tokens + prev.completion_tokens - 1, (turn, got, prev)
    assert metric(cached, "prefix_cache_queries_total") == sum(r.usage.prompt_tokens for r in on)
    assert metric(cached, "prefix_cache_hits_total") == sum(r.usage.prompt_tokens_details.cached_tokens for r in on)
    assert metric(plain, "prefix_cache_queries_total") == 0
    # Idle: nothing in use; the last turn's parked sequence counts as cached (its blocks and its
    # window slot), nothing without the cache.
    wait_idle(cached)
    wait_idle(plain)
    assert metric(cached, "kv_cache_cached_blocks") > 0
    assert metric(cached, "kv_cache_cached_bytes") > 0
    assert metric(plain, "kv_cache_cached_blocks") == 0
    assert metric(plain, "kv_cache_used_bytes") == 0
    # The reset drops parked sequences: nothing cached, nothing held, the next turn is cold.
    r = requests.post(cached.url + "/reset_prefix_cache", timeout=60)
    assert r.status_code == 200 and r.json() == {}, r.text
    assert metric(cached, "kv_cache_cached_blocks") == 0
    assert metric(cached, "kv_cache_cached_bytes") == 0
    assert metric(cached, "kv_cache_used_blocks") == 0
    assert metric(cached, "kv_cache_used_bytes") == 0
    again = chat(cached, history[:-1])
    assert again.usage.prompt_tokens_details.cached_tokens == 0
    assert_same_but_ties(tokens_of(again), tokens_of(on[-1]), "after the reset")
    wait_idle(cached)


def test_tiny_pool_evicts_parked():
    # Two sequences, and a pool of 3 MiB: the two window slots (1.2 MiB each) and 56 blocks of
    # 9 KiB, room for one ~100-token prompt (6 blocks in each of 6 layer groups) at a time. Each finished request parks; every
    # new one needs the parked ones' blocks (or their slot) and must get them.
    s = Server("--ctx", "256", "--max-batch", "2", "--batch-tokens", "64", "--kv-mem", "3MiB")
    try:
        assert "prefix cache on (parking, " in s.log()
        words = ["alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf", "hotel"]

        def ask(i):
            prompt = " ".join(words[(i + k) % len(words)] + str(i) for k in range(30))
            r = requests.post(s.url + "/v1/completions", timeout=600,
                              json={"prompt": prompt, "max_tokens": 4, "temperature": 0})
            return r.status_code, r.json()

        for i in range(3):
            code, body = ask(i)
            assert code == 200, body
        with concurrent.futures.ThreadPoolExecutor(4) as ex:
            results = list(ex.map(ask, range(3, 7)))
        for code, body in results:
            assert code == 200, body
            assert body["choices"][0]["finish_reason"] in ("length", "stop")
        wait_idle(s)
        assert metric(s, "kv_cache_cached_blocks") > 0
        requests.post(s.url + "/reset_prefix_cache", timeout=60)
        assert metric(s, "kv_cache_cached_blocks") == 0
    finally:
        rc = s.stop()
    assert rc == 0, f"server exit status {rc} after SIGTERM:\n{s.log()}"


def test_shared_prefix_counted_once():
    # Admission counts a block two running requests share once. A pool of 20 blocks of one layer
    # group (--ctx 512 = the sliding window: the layers form one group), int2 without windows
    # (the blocks form). A's prompt is 11-12 blocks and it answers 64 tokens (17 blocks at most);
    # B's prompt is A's plus a few words. Counting B's prompt whole beside A (12 + 12) does not
    # fit 20, so B would wait for A to end; counted as the pool holds it (A's blocks once, B's
    # own tail), B is admitted while A still streams and ends first.
    block = 18 * 2 * 16 * 80  # 18 layers x K,V x 16 tokens x (256 2-bit codes + 8 f16 scales) bytes
    s = Server("--kv", "int2", "--kv-sink", "0", "--kv-recent", "0", "--ctx", "512", "--max-batch", "2",
               "--kv-mem", str(20 * block))
    try:
        assert metric(s, "kv_cache_total_blocks") == 20
        words = ("The river ran north past the mill, the orchard and the old stone bridge, "
                 "where the ferryman waited for travellers every morning. ").split()
        text = ""
        i = 0
        while True:
            cand = text + words[i % len(words)] + " "
            n = len(requests.post(s.url + "/tokenize", json={"prompt": cand}, timeout=60).json()["tokens"])
            if n > 180:
                break
            text, i = cand, i + 1
        # No end of text for A (<eos> 1, <end_of_turn> 106): it streams all 64 tokens.
        a_body = {"prompt": text, "max_tokens": 64, "temperature": 0, "stream": True,
                  "logit_bias": {"1": -100, "106": -100}}
        b_body = {"prompt": text + "and then the boat", "max_tokens": 1, "temperature": 0}
        order = []
        with requests.post(s.url + "/v1/completions", json=a_body, stream=True, timeout=600) as ra:
            lines = ra.iter_lines()
            for line in lines:  # A's first token: its prompt is in the pool, its blocks named
                if line.startswith(b"data: "):
                    break
            with concurrent.futures.ThreadPoolExecutor(1) as ex:
                fb = ex.submit(lambda: requests.post(s.url + "/v1/completions", json=b_body, timeout=600).json())
                for line in lines:
                    if fb.done() and "b" not in order:
                        order.append("b")
                    if line == b"data: [DONE]":
                        order.append("a")
                        break
                b = fb.result()
                if "b" not in order:
                    order.append("b")
        assert b["usage"]["prompt_tokens_details"]["cached_tokens"] >= 160, b["usage"]
        assert order == ["b", "a"], (order, s.log()[-2000:])
        wait_idle(s)
    finally:
        rc = s.stop()
    assert rc == 0, f"server exit status {rc} after SIGTERM:\n{s.log()}"


# Two conversations that share a long system prompt, on the default format (f16 windows): the
# second cannot adopt the first's parked sequence (they part right after the system prompt, long
# before its end, whose ring rows are gone), but the server asked for a window snapshot where the
# system messages end (design 3), so it takes the first's blocks up to there.
SYSTEM = ("You are a careful assistant for a library of old maps. Answer in one short sentence, name the "
          "map's region and century when you know them, never invent a catalogue number, and say so "
          "plainly when the collection has no map of a place. The collection holds maps of Europe, the "
          "Mediterranean coasts, the Baltic ports and the river valleys of France from the fifteenth to "
          "the nineteenth century.")
QUESTIONS = ["Do you have a map of the harbour of Genoa?", "Which century are the Baltic maps from?"]


def test_shared_system_prompt_hits_a_snapshot(default_servers):
    cached, plain = default_servers
    requests.post(cached.url + "/reset_prefix_cache", timeout=60)
    n_system = len(requests.post(cached.url + "/tokenize", json={"prompt": SYSTEM}, timeout=60).json()["tokens"])
    assert n_system >= 64, n_system
    on = [chat(cached, [{"role": "system", "content": SYSTEM}, {"role": "user", "content": q}]) for q in QUESTIONS]
    off = [chat(plain, [{"role": "system", "content": SYSTEM}, {"role": "user", "content": q}]) for q in QUESTIONS]
    for a, b in zip(on, off):
        assert_same_but_ties(tokens_of(a), tokens_of(b), a.choices[0].message.content)
        assert a.usage.prompt_tokens == b.usage.prompt_tokens
        assert b.usage.prompt_tokens_details.cached_tokens == 0
    assert on[0].usage.prompt_tokens_details.cached_tokens == 0
    got = on[1].usage.prompt_tokens_details.cached_tokens
    # Whole blocks up to the system prompt's end (the template's few tokens before it included).
    assert got > 0 and got % BLOCK == 0 and got >= n_system // BLOCK * BLOCK - BLOCK, (got, n_system)
    assert got <= n_system + 8, (got, n_system)
    assert metric(cached, "prefix_cache_hits_total") >= got
    wait_idle(cached)
    assert metric(cached, "kv_cache_used_blocks") == 0
    assert metric(cached, "kv_cache_cached_blocks") > 0
    r = requests.post(cached.url + "/reset_prefix_cache", timeout=60)
    assert r.status_code == 200 and r.json() == {}, r.text
    assert metric(cached, "kv_cache_cached_blocks") == 0
    assert metric(cached, "kv_cache_cached_bytes") == 0
    assert metric(cached, "kv_cache_used_blocks") == 0
