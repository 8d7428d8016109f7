# The official `openai` package against the daemon: completions, chat, streams with usage, models,
# stop strings, logprobs, seeds, tokenize/detokenize.
import requests

PROMPT = "The capital of France is"


def test_health_and_models(server, client, model_id):
    assert requests.get(server.url + "/health", timeout=5).json() == {"status": "ok"}
    models = client.models.list()
    assert [m.id for m in models.data] == [model_id]
    assert client.models.retrieve(model_id).id == model_id


def kv_ok(usage, tokens_held):
    kv = usage.model_extra["kv_cache"]
    assert kv["bits_per_element"] == 16
    assert kv["blocks"] == (tokens_held + 15) // 16
    # The f16 cache is paged too: whole 16-token blocks (at --ctx 512 one layer group: the sliding
    # window spans the context) of 18 layers x K, V x 256 dims x 2 bytes per token.
    assert kv["fp16_bytes"] == tokens_held * 18 * 2 * 256 * 2
    assert kv["bytes"] == kv["blocks"] * 16 * 18 * 2 * 256 * 2


def test_completion(client, model_id):
    r = client.completions.create(model=model_id, prompt=PROMPT, max_tokens=8, temperature=0)
    c = r.choices[0]
    assert r.object == "text_completion" and c.text and c.finish_reason == "length"
    assert r.usage.completion_tokens == 8
    assert r.usage.total_tokens == r.usage.prompt_tokens + 8
    # The last sampled token is never fed back: the sequence holds prompt + 7.
    kv_ok(r.usage, r.usage.prompt_tokens + 7)


def test_completion_token_prompt_equals_text_prompt(server, client, model_id):
    toks = requests.post(server.url + "/tokenize", json={"prompt": PROMPT}, timeout=30).json()["tokens"]
    a = client.completions.create(model=model_id, prompt=PROMPT, max_tokens=4, temperature=0)
    b = client.completions.create(model=model_id, prompt=toks, max_tokens=4, temperature=0)
    assert a.choices[0].text == b.choices[0].text
    assert a.usage.prompt_tokens == b.usage.prompt_tokens == len(toks)


def test_chat(client, model_id):
    r = client.chat.completions.create(model=model_id, messages=[
        {"role": "system", "content": "You are terse."},
        {"role": "user", "content": [{"type": "text", "text": "Say hello."}]},
    ], max_tokens=6, temperature=0)
    c = r.choices[0]
    assert r.object == "chat.completion"
    assert c.message.role == "assistant" and isinstance(c.message.content, str)
    assert c.finish_reason in ("stop", "length")
    assert r.usage.completion_tokens <= 6


def test_chat_stream_with_usage(client, model_id):
    msgs = [{"role": "user", "content": "Count: one, two,"}]
    whole = client.chat.completions.create(model=model_id, messages=msgs, max_tokens=6, temperature=0)
    chunks = list(client.chat.completions.create(model=model_id, messages=msgs, max_tokens=6, temperature=0,
                                                 stream=True, stream_options={"include_usage": True}))
    assert chunks[0].choices[0].delta.role == "assistant"
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == whole.choices[0].message.content
    finals = [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason]
    assert finals == [whole.choices[0].finish_reason]
    last = chunks[-1]
    assert last.choices == [] and last.usage.completion_tokens == whole.usage.completion_tokens
    assert last.usage.model_extra["kv_cache"] == whole.usage.model_extra["kv_cache"]
    assert all(c.usage is None for c in chunks[:-1])


def test_completion_stream(client, model_id):
    whole = client.completions.create(model=model_id, prompt=PROMPT, max_tokens=6, temperature=0)
    chunks = list(client.completions.create(model=model_id, prompt=PROMPT, max_tokens=6, temperature=0, stream=True))
    assert "".join(c.choices[0].text for c in chunks) == whole.choices[0].text
    assert chunks[-1].choices[0].finish_reason == "length"


def test_stop_string(client, model_id):
    whole = client.completions.create(model=model_id, prompt=PROMPT, max_tokens=8, temperature=0).choices[0].text
    words = whole.split()
    assert len(words) >= 3, whole
    stop = " " + words[2]
    cut = whole[:whole.index(stop)]
    r = client.completions.create(model=model_id, prompt=PROMPT, max_tokens=8, temperature=0, stop=[stop, "zzzz"])
    assert r.choices[0].text == cut and r.choices[0].finish_reason == "stop"
    s = list(client.completions.create(model=model_id, prompt=PROMPT, max_tokens=8, temperature=0, stop=stop,
                                       stream=True))
    assert "".join(c.choices[0].text for c in s) == cut


def test_logprobs(client, model_id):
    r = client.chat.completions.create(model=model_id, messages=[{"role": "user", "content": "Hi"}], max_tokens=3,
                                       temperature=0, logprobs=True, top_logprobs=3)
    content = r.choices[0].logprobs.content
    assert len(content) == r.usage.completion_tokens
    for t in content:
        assert len(t.top_logprobs) == 3 and t.logprob <= 0
        # Greedy: the chosen token is the most likely one.
        assert abs(t.top_logprobs[0].logprob - t.logprob) < 1e-5
    c = client.completions.create(model=model_id, prompt=PROMPT, max_tokens=3, temperature=0, logprobs=2)
    lp = c.choices[0].logprobs
    assert len(lp.tokens) == len(lp.token_logprobs) == len(lp.top_logprobs) == 3
    assert "".join(lp.tokens) == c.choices[0].text


def test_seeded_sampling_repeats(client, model_id):
    kw = dict(model=model_id, prompt="Once upon a time", max_tokens=6, temperature=1.0, top_p=0.9, seed=1234)
    a = client.completions.create(**kw).choices[0].text
    b = client.completions.create(**kw).choices[0].text
    assert a == b


def test_penalties_and_bias_accepted(server, client, model_id):
    greedy = client.completions.create(model=model_id, prompt=PROMPT, max_tokens=2, temperature=0)
    # A strong negative bias on the greedy first token changes the first token.
    toks = requests.post(server.url + "/tokenize",
                         json={"prompt": greedy.choices[0].text, "add_special": False}, timeout=30).json()["tokens"]
    r = client.completions.create(model=model_id, prompt=PROMPT, max_tokens=2, temperature=0,
                                  logit_bias={str(toks[0]): -100}, presence_penalty=0.5, frequency_penalty=0.5,
                                  extra_body={"repetition_penalty": 1.1, "top_k": 40, "min_p": 0.05})
    assert r.choices[0].text != greedy.choices[0].text


def test_tokenize_detokenize(server):
    t = requests.post(server.url + "/tokenize", json={"prompt": "Hello world"}, timeout=30).json()
    assert t["count"] == len(t["tokens"]) and t["tokens"][0] == 2  # Gemma's <bos>
    d = requests.post(server.url + "/detokenize", json={"tokens": t["tokens"]}, timeout=30).json()
    # Control tokens come back as their text, as vLLM's and llama.cpp's give them; the text under
    # both their names.
    assert d["prompt"] == d["content"] == "<bos>Hello world", d


def test_non_ascii_text_is_valid_utf8(client, model_id):
    # Byte-fallback tokens split characters; the server releases whole characters only, so the
    # streamed deltas join to the same text as the whole response.
    prompt = "Emoji: 😀😀😀 日本の首都は"
    whole = client.completions.create(model=model_id, prompt=prompt, max_tokens=6, temperature=0)
    parts = [c.choices[0].text for c in client.completions.create(model=model_id, prompt=prompt, max_tokens=6,
                                                                   temperature=0, stream=True)]
    assert "".join(parts) == whole.choices[0].text
    "".join(parts).encode("utf-8")  # valid UTF-8 (no lone surrogates)


def test_batch_prompts_and_n(client, model_id):
    prompts = [PROMPT, "1, 2, 3,"]
    alone = [client.completions.create(model=model_id, prompt=p, max_tokens=4, temperature=0) for p in prompts]
    both = client.completions.create(model=model_id, prompt=prompts, max_tokens=4, temperature=0)
    assert [c.index for c in both.choices] == [0, 1]
    assert [c.text for c in both.choices] == [a.choices[0].text for a in alone]
    assert both.usage.prompt_tokens == sum(a.usage.prompt_tokens for a in alone)
    assert both.usage.completion_tokens == 8
    kv = both.usage.model_extra["kv_cache"]
    assert kv["bytes"] == sum(a.usage.model_extra["kv_cache"]["bytes"] for a in alone)
    # n=2 with a seed: choice 0 is the n=1 answer with that seed, choice 1 uses seed + 1.
    kw = dict(model=model_id, prompt="Once upon a time", max_tokens=5, temperature=1.0, seed=7)
    two = client.completions.create(n=2, **kw)
    assert two.choices[0].text == client.completions.create(**kw).choices[0].text
    assert two.choices[1].text == client.completions.create(**{**kw, "seed": 8}).choices[0].text
    assert two.usage.prompt_tokens == client.completions.create(**kw).usage.prompt_tokens  # the prompt once
    # Streamed chat with n=2: every chunk names its choice; each choice finishes once.
    chunks = list(client.chat.completions.create(model=model_id, messages=[{"role": "user", "content": "Hi"}],
                                                 max_tokens=3, n=2, seed=1, stream=True,
                                                 stream_options={"include_usage": True}))
    finishes = sorted(c.choices[0].index for c in chunks if c.choices and c.choices[0].finish_reason)
    assert finishes == [0, 1] and chunks[-1].usage.completion_tokens <= 6


def test_chat_role_delta_comes_with_the_first_token(server, model_id):
    # The opening delta (role) is sent with the first token, not when the request is accepted, so a
    # client's time to first chunk (vLLM's TTFT) includes the wait for a slot and the prefill.
    # Ordering, not speed: the server's 4 sequences are busy with long completions, so the chat
    # request is accepted at once but waits for a slot; before the fix its role delta went out at
    # acceptance, long before its first token.
    import json
    import threading
    import time
    busy = [threading.Thread(target=requests.post, args=(server.url + "/v1/completions",),
                             kwargs={"json": {"prompt": "Once upon a time", "max_tokens": 48, "temperature": 0},
                                     "timeout": 300}) for _ in range(4)]
    for t in busy:
        t.start()
    time.sleep(1.0)
    body = {"model": model_id, "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 2,
            "temperature": 0, "stream": True}
    t0 = time.monotonic()
    r = requests.post(server.url + "/v1/chat/completions", json=body, stream=True, timeout=300)
    assert r.status_code == 200
    arrivals = []
    for line in r.iter_lines():
        if line.startswith(b"data: {"):
            d = json.loads(line[6:])["choices"][0]["delta"]
            arrivals.append((time.monotonic() - t0, d))
    for t in busy:
        t.join()
    role_t, role = arrivals[0]
    assert role.get("role") == "assistant", arrivals
    content_t = next(t for t, d in arrivals if d.get("content"))
    assert content_t - role_t < role_t, (role_t, content_t)
