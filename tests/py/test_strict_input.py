# What the second adversarial run (docs/reliability.md) found lenient, held to the specs: HTTP/1.1
# framing (RFC 9112: header names are tokens, no folded values, exactly one Host, only the chunked
# transfer coding, 501 for an unknown method, 100 Continue only where a client waits for it), JSON
# bodies (RFC 8259: no raw control characters in strings, no leading zeros, no key named twice),
# and request fields (a model name with a NUL in it, logit_bias keys, tool_choice, chat messages).
# Each case is answered with the right status and the server goes on serving.
import json
import socket
import time
from concurrent.futures import ThreadPoolExecutor

import pytest
import requests

from test_bad_input import assert_error, post, raw, still_serving

GOOD = b'{"prompt":"Hi"}'


def raw_split(server, data, cut, pause=0.03):
    """Sends data in two writes, cut bytes then the rest, a pause between (two reads on the
    server, unless it was slow to read the first); returns the answer up to the close."""
    s = socket.create_connection(("127.0.0.1", server.port), timeout=10)
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    out = b""
    try:
        s.sendall(data[:cut])
        time.sleep(pause)
        s.sendall(data[cut:])
        while chunk := s.recv(65536):
            out += chunk
    except (ConnectionResetError, BrokenPipeError):
        pass
    finally:
        s.close()
    return out


def tokenize_with_headers(server, headers, body=GOOD, version=b"HTTP/1.1"):
    return raw(server, b"POST /tokenize " + version + b"\r\n" + headers +
               b"Content-Length: " + str(len(body)).encode() + b"\r\nConnection: close\r\n\r\n" + body)


@pytest.mark.parametrize("headers,status", [
    (b"Host: x\r\nX-A : b\r\n", 400),                 # a space before the colon
    (b"Host: x\r\n: v\r\n", 400),                      # an empty name
    (b"Host: x\r\nX-A: b\r\n c\r\n", 400),             # obs-fold
    (b"", 400),                                        # HTTP/1.1 without Host
    (b"Host: x\r\nHost: y\r\n", 400),                  # two Hosts
    # Host = uri-host [":" port] (RFC 9112 3.2, RFC 3986 3.2.2)
    (b"Host: x:abc\r\n", 400), (b"Host: a b\r\n", 400), (b"Host: user@x\r\n", 400), (b"Host: x/y\r\n", 400),
    (b"Host: [::1\r\n", 400), (b"Host: x:80:80\r\n", 400),
    (b"Host: \r\n", 200), (b"Host: [::1]:8080\r\n", 200), (b"Host: [fe80::1%25eth0]\r\n", 200),
    (b"Host: 127.0.0.1:8080\r\n", 200), (b"Host: ex%41mple.com\r\n", 200), (b"Host: localhost.:\r\n", 200),
    (b"Host: my-svc.ns.svc.cluster.local:8080\r\n", 200),
])
def test_header_framing(server, headers, status):
    out = tokenize_with_headers(server, headers)
    assert out.startswith(f"HTTP/1.1 {status} ".encode()), out
    answer = json.loads(out.split(b"\r\n\r\n", 1)[1])
    assert answer["tokens"] if status == 200 else answer["error"]["message"], answer
    still_serving(server)


def test_only_the_chunked_transfer_coding(server):
    # "gzip, chunked" read as plain chunked would hand the handler compressed bytes: 501 (RFC 9112 6.1).
    out = raw(server, b"POST /tokenize HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: gzip, chunked\r\n"
                      b"Connection: close\r\n\r\nf\r\n" + GOOD + b"\r\n0\r\n\r\n")
    assert out.startswith(b"HTTP/1.1 501 "), out
    out = raw(server, b"POST /tokenize HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n"
                      b"Connection: close\r\n\r\nf\r\n" + GOOD + b"\r\n0\r\n\r\n")
    assert out.startswith(b"HTTP/1.1 200 "), out


@pytest.mark.parametrize("split", [None, 1, 2])
def test_chunk_data_ends_with_crlf(server, split):
    # Any two bytes after a chunk's data were taken for its CRLF (llhttp 8.1): "XX" here, and the
    # pipelined GET after it was answered too. Checked also when a read ends inside the CRLF.
    bad = (b"POST /tokenize HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\nf\r\n" + GOOD +
           b"XX0\r\n\r\nGET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
    out = raw(server, bad) if split is None else raw_split(server, bad, bad.index(b"XX") + split - 1, pause=0.2)
    assert out.startswith(b"HTTP/1.1 400 ") and out.count(b"HTTP/1.1 ") == 1, out
    good = bad.replace(b"XX", b"\r\n")
    out = raw(server, good)
    assert out.count(b"HTTP/1.1 200 ") == 2, out


def test_http10_needs_no_host_and_unknown_methods_get_501(server):
    out = tokenize_with_headers(server, b"", version=b"HTTP/1.0")
    assert out.startswith(b"HTTP/1.1 200 "), out
    out = raw(server, b"FOO /health HTTP/1.1\r\nHost: x\r\n\r\n")
    assert out.startswith(b"HTTP/1.1 501 "), out
    out = raw(server, b"\x01\x02 /health HTTP/1.1\r\nHost: x\r\n\r\n")  # not a method at all
    assert out.startswith(b"HTTP/1.1 400 "), out


CLOSE = b"Connection: close\r\n"
SPLIT_CASES = [  # (request, the status it gets in one write)
    (b"POST /tokenize HTTP/1.1\r\nHost: x\r\nContent-Length: 15\r\n" + CLOSE + b"\r\n" + GOOD, 200),
    (b"POST /tokenize HTTP/1.1\r\nHost: x\r\nX-A: b\r\n c\r\nContent-Length: 15\r\n" + CLOSE + b"\r\n" + GOOD,
     400),  # obs-fold
    (b"POST /tokenize HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n" + CLOSE +
     b"\r\n5;ext=1\r\n" + GOOD[:5] + b"\r\na\r\n" + GOOD[5:] + b"\r\n0\r\n\r\n", 200),
    (b"POST /tokenize HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n" + CLOSE +
     b"\r\nf\r\n" + GOOD + b"XX0\r\n\r\n", 400),  # no CRLF after the chunk's data
    (b"BREW /tokenize HTTP/1.1\r\nHost: x\r\n" + CLOSE + b"\r\n", 501),  # a method we do not know
    (b"PO /tokenize HTTP/1.1\r\nHost: x\r\n" + CLOSE + b"\r\n", 501),  # one that begins a known one
    (b"\x01\x02 /tokenize HTTP/1.1\r\nHost: x\r\n" + CLOSE + b"\r\n", 400),  # garbage
]


@pytest.mark.parametrize("data,status", SPLIT_CASES)
def test_a_request_cut_anywhere_gets_the_answer_it_gets_whole(server, data, status):
    # Where a read ends must not change how a request is framed or judged: the parser sees it in
    # pieces (the folded value, the CRLF after a chunk and the method's token were each judged by
    # what one read held, once). Every cut, a connection each, sixteen at a time.
    assert raw(server, data).startswith(f"HTTP/1.1 {status} ".encode())
    with ThreadPoolExecutor(16) as pool:
        answers = list(pool.map(lambda cut: raw_split(server, data, cut), range(1, len(data))))
    wrong = [(cut, a[:40]) for cut, a in enumerate(answers, 1) if not a.startswith(f"HTTP/1.1 {status} ".encode())]
    assert not wrong, wrong
    still_serving(server)


def test_100_continue_only_where_a_body_is_awaited(server):
    # An HTTP/1.0 client does not know 100 (RFC 9110 10.1.1), and a request without a body has
    # nothing to wait for: both get their final answer alone.
    for req in (b"POST /tokenize HTTP/1.0\r\nExpect: 100-continue\r\nContent-Length: 15\r\n\r\n" + GOOD,
                b"GET /health HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\nConnection: close\r\n\r\n"):
        out = raw(server, req)
        assert out.startswith(b"HTTP/1.1 200 ") and b" 100 " not in out.split(b"\r\n", 1)[0], out
    out = raw(server, b"POST /tokenize HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\nContent-Length: 15\r\n"
                      b"Connection: close\r\n\r\n" + GOOD)
    assert out.startswith(b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 "), out


@pytest.mark.parametrize("line,status", [(b"POST /v1/nothing", 404), (b"PUT /v1/completions", 405)])
def test_100_continue_refused_from_the_head(server, line, status):
    # A request refused whatever its body gets its answer instead of 100 Continue, and the body it
    # announced is never read: the connection closes after the answer (RFC 9110 10.1.1). The client
    # here never sends the 1 MB: before this, it got 100 and the server waited for the body.
    s = socket.create_connection(("127.0.0.1", server.port), timeout=5)
    s.sendall(line + b" HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\nContent-Type: application/json\r\n"
              b"Content-Length: 1000000\r\n\r\n")
    out = b""
    try:
        while chunk := s.recv(65536):
            out += chunk
    except socket.timeout:
        pass
    s.close()
    assert out.startswith(f"HTTP/1.1 {status} ".encode()) and b"Connection: close" in out, out[:300]
    assert b" 100 " not in out, out[:300]
    still_serving(server)


@pytest.mark.parametrize("body,why", [
    (b'{"prompt":"Hi\x01"}', "control character"),
    (b'{"prompt":"Hi\nthere"}', "control character"),
    (b'{"prompt":"Hi","max_tokens":01}', "leading zero"),
    (b'{"prompt":"Hi","max_tokens":-}', "without digits"),
    (b'{"prompt":"Hi","max_tokens":1.}', "after its point"),
    (b'{"prompt":"Hi","max_tokens":1e}', "exponent"),
    (b'{"prompt":"H\\xi"}', "escape"),
    (b'{"prompt":"Hi\\u12"}', "four hex digits"),
    (b'{"prompt":"Hi",}', "string name"),
    (b'{"prompt" "Hi"}', "':'"),
    (b'["Hi",]', "not a JSON value"),
    (b'{"prompt":"Hi","max_tokens":1,"max_tokens":99}', "twice"),
    (b'{"messages":[{"role":"user","content":"a","content":"b"}],"prompt":"x"}', "twice"),
    # Escaped surrogates name a character only as a high-low pair (RFC 8259 8.2).
    (b'{"prompt":"a\\ud800b"}', "high surrogate"),
    (b'{"prompt":"a\\ud800"}', "high surrogate"),
    (b'{"prompt":"a\\udbff\\u0041"}', "high surrogate"),
    (b'{"prompt":"a\\ud800\\ud800"}', "high surrogate"),
    (b'{"prompt":"a\\udc00b"}', "low surrogate"),
    (b'{"\\udfff":1,"prompt":"a"}', "low surrogate"),
])
def test_json_grammar(server, body, why):
    e = assert_error(post(server, "/v1/completions", body), 400, None, "invalid_json")
    assert why in e["message"], e
    still_serving(server)


def test_deep_nesting_refused_without_a_crash(server):
    e = assert_error(post(server, "/v1/completions", b"[" * 100000), 400, None, "invalid_json")
    assert "deeply" in e["message"], e


def test_a_nul_makes_another_model_name(server, model_id):
    body = {"prompt": "Hi", "max_tokens": 1, "model": model_id + "\u0000junk"}
    assert_error(post(server, "/v1/completions", body), 404, "model", "model_not_found")
    assert post(server, "/v1/completions", {"prompt": "Hi", "max_tokens": 1, "model": model_id}).status_code == 200


@pytest.mark.parametrize("path,body,param", [
    ("/v1/completions", {"prompt": "x", "logit_bias": {" 5": 1}}, "logit_bias"),
    ("/v1/completions", {"prompt": "x", "logit_bias": {"+5": 1}}, "logit_bias"),
    ("/v1/completions", {"prompt": "x", "logit_bias": {"05": 1}}, "logit_bias"),
    ("/v1/completions", {"prompt": "x", "logit_bias": {"99999999999": 1}}, "logit_bias"),
    ("/v1/chat/completions", {"messages": [{"role": "user", "content": "x"}], "tool_choice": "required"},
     "tool_choice"),
    ("/v1/chat/completions", {"messages": [{"role": "user", "content": "x"}],
                              "tool_choice": {"type": "function", "function": {"name": "f"}}}, "tool_choice"),
    ("/v1/chat/completions", {"messages": [{"role": "user"}]}, "messages"),
    ("/v1/chat/completions", {"messages": [{"role": "system", "content": None}]}, "messages"),
    ("/v1/chat/completions", {"messages": [{"role": "user", "content": []}]}, "messages"),
    ("/v1/chat/completions", {"messages": [{"role": "user", "content": "x", "name": 5}]}, "messages"),
    ("/v1/chat/completions", {"messages": [{"role": "user\u0000", "content": "x"}]}, "messages"),
    # Constraints that are malformed, on both endpoints, in OpenAI's field and in vLLM's and llama.cpp's
    # (test_structured_output.py has the rest).
    ("/v1/completions", {"prompt": "x", "response_format": {"type": "json"}}, "response_format"),
    ("/v1/chat/completions", {"messages": [{"role": "user", "content": "x"}],
                              "response_format": {"type": "json_schema", "json_schema": "a"}}, "response_format"),
    ("/v1/completions", {"prompt": "x", "guided_json": 5}, "guided_json"),
    ("/v1/completions", {"prompt": "x", "guided_regex": "[0-9"}, "guided_regex"),
    ("/v1/chat/completions", {"messages": [{"role": "user", "content": "x"}], "guided_choice": "a"},
     "guided_choice"),
    ("/v1/completions", {"prompt": "x", "guided_grammar": "root ::= \"a"}, "guided_grammar"),
    ("/v1/completions", {"prompt": "x", "structured_outputs": {"regex": 1}}, "structured_outputs"),
    ("/v1/completions", {"prompt": "x", "grammar": "start ::= \"a\""}, "grammar"),
    ("/v1/chat/completions", {"messages": [{"role": "user", "content": "x"}], "json_schema": [1]},
     "json_schema"),
    # Function calling in its deprecated form (tools: test_tool_calls.py), output other than text, switches
    # whose non-default value cannot be honoured: refused, never dropped unseen.
    ("/v1/chat/completions", {"messages": [{"role": "user", "content": "x"}],
                              "functions": [{"name": "f", "parameters": {}}]}, "functions"),
    ("/v1/chat/completions", {"messages": [{"role": "user", "content": "x"}], "function_call": {"name": "f"}},
     "function_call"),
    ("/v1/chat/completions", {"messages": [{"role": "user", "content": "x"},
                                           {"role": "assistant", "content": "",
                                            "function_call": {"name": "f", "arguments": "{}"}}]}, "messages"),
    ("/v1/chat/completions", {"messages": [{"role": "user", "content": "x"}], "modalities": ["text", "audio"]},
     "modalities"),
    ("/v1/chat/completions", {"messages": [{"role": "user", "content": "x"}], "modalities": "text"}, "modalities"),
    ("/v1/chat/completions", {"messages": [{"role": "user", "content": "x"}],
                              "audio": {"voice": "alloy", "format": "wav"}}, "audio"),
    ("/v1/chat/completions", {"messages": [{"role": "user", "content": "x"}], "web_search_options": {}},
     "web_search_options"),
    # vLLM's template switches: a continued message must be the assistant's, and not with a reply opened too.
    ("/v1/chat/completions", {"messages": [{"role": "user", "content": "x"}], "continue_final_message": True,
                              "add_generation_prompt": False}, "continue_final_message"),
    ("/v1/chat/completions", {"messages": [{"role": "user", "content": "x"}, {"role": "assistant", "content": "T"}],
                              "continue_final_message": True, "add_generation_prompt": True}, "continue_final_message"),
    ("/v1/chat/completions", {"messages": [{"role": "user", "content": "x"}], "add_generation_prompt": 1},
     "add_generation_prompt"),
    ("/v1/chat/completions", {"messages": [{"role": "user", "content": "x"}], "echo": 1}, "echo"),
    ("/v1/completions", {"prompt": "x", "echo": True, "max_tokens": -1}, "max_tokens"),
    ("/v1/chat/completions", {"messages": [{"role": "user", "content": "x"}], "chat_template_kwargs": [1]},
     "chat_template_kwargs"),
])
def test_request_fields(server, path, body, param):
    assert_error(post(server, path, body), 400, param)


def test_fields_that_stay_accepted(server):
    for body in ({"messages": [{"role": "user", "content": "x"}], "tool_choice": "none", "max_tokens": 1},
                 {"messages": [{"role": "user", "content": "x"}], "tool_choice": "auto", "max_tokens": 1},
                 {"messages": [{"role": "user", "content": "x"}, {"role": "assistant", "content": None},
                               {"role": "user", "content": "y", "name": "bob"}], "max_tokens": 1},
                 # the defaults of the refused fields above, and empty lists, ask for nothing
                 {"messages": [{"role": "user", "content": "x"},
                               {"role": "assistant", "content": "a", "tool_calls": [], "function_call": None},
                               {"role": "user", "content": "y"}],
                  "functions": [], "function_call": "auto", "modalities": ["text"], "audio": None,
                  "add_generation_prompt": True, "continue_final_message": False, "echo": False,
                  "parallel_tool_calls": True, "max_tokens": 1},
                 # vLLM's template variables: the default model's template (its architecture's) reads none
                 {"messages": [{"role": "user", "content": "x"}], "max_tokens": 1,
                  "chat_template_kwargs": {"enable_thinking": False, "tone": "dry", "x": None}}):
        r = post(server, "/v1/chat/completions", body)
        assert r.status_code == 200, r.text
    r = post(server, "/v1/completions", {"prompt": "x", "logit_bias": {"0": 1, "5": -1}, "max_tokens": 1})
    assert r.status_code == 200, r.text
    for body in ({"prompt": "x", "max_tokens": 1, "response_format": {"type": "text"}, "guided_json": None,
                  "grammar": None},
                 # a surrogate pair is one character (U+1F600), wherever it stands
                 {"prompt": "x \U0001F600", "max_tokens": 1, "user": "\U0001F600"}):
        r = post(server, "/v1/completions", body)
        assert r.status_code == 200, r.text


def test_error_messages_stay_utf8_when_they_cut_a_quote(server):
    # The role is quoted cut at 40 bytes, inside a two-byte character: the message drops the half.
    r = post(server, "/v1/chat/completions", {"messages": [{"role": "a" + "\u00e9" * 30, "content": "x"}]})
    assert r.status_code == 400
    r.content.decode("utf-8")  # strict: raises on a cut character
    assert "a" + "\u00e9" * 19 + "'" in r.json()["error"]["message"]


def test_model_ids_are_percent_decoded(server, model_id):
    alias = requests.get(server.url + "/v1/models", timeout=10).json()["data"][0]
    name = json.loads(requests.get(server.url + "/v1/models/" + model_id, timeout=10).text)["id"]
    assert name == model_id and alias["id"] == model_id
    # The GGUF's general.name (the default model's), which requests may name too, has a space: %20 in a path.
    r = post(server, "/v1/completions", {"prompt": "Hi", "max_tokens": 1, "model": "Gemma 3 270m"})
    assert r.status_code == 200, r.text
    assert requests.get(server.url + "/v1/models/Gemma%203%20270m", timeout=10).status_code == 200
    r = requests.get(server.url + "/v1/models/%ff%fe", timeout=10)  # decodes to bytes that are no UTF-8
    assert r.status_code == 404
    r.content.decode("utf-8")
    assert requests.get(server.url + "/v1/models/%zz", timeout=10).status_code == 404


@pytest.mark.parametrize("field,value,code,words", [
    ("max_tokens", 1e300, "invalid_value", "too large"),
    ("max_tokens", 2.5, "invalid_type", "a fraction"),
    ("seed", 1e22, "invalid_value", "too large"),
    ("seed", 1.5, "invalid_type", "a fraction"),
])
def test_integer_fields_say_what_is_wrong(server, field, value, code, words):
    e = assert_error(post(server, "/v1/completions", {"prompt": "x", field: value}), 400, field, code)
    assert words in e["message"], e


def test_default_max_tokens_ends_with_the_context(server):
    # No max_tokens: completions' default of 16 is cut to the 12 tokens the 512-token context has
    # left, instead of a 400 naming a max_tokens the client never sent.
    r = post(server, "/v1/completions", {"prompt": [2] + [236743] * 499, "temperature": 0})
    assert r.status_code == 200, r.text
    assert r.json()["usage"]["completion_tokens"] <= 12
    e = assert_error(post(server, "/v1/completions", {"prompt": [2] + [236743] * 499, "max_tokens": 16}), 400,
                     "max_tokens", "context_length_exceeded")


def test_logprobs_asked_for_and_no_token_came_are_empty_not_null(server):
    # The end-of-turn token first (forced by logit_bias: it is never text): no token, and the
    # logprobs asked for are there, empty, as for any other length.
    r = post(server, "/v1/completions", {"prompt": "Hi", "max_tokens": 3, "logprobs": 1, "logit_bias": {"1": 100}})
    choice = r.json()["choices"][0]
    assert r.json()["usage"]["completion_tokens"] == 0, r.json()
    assert choice["logprobs"] == {"tokens": [], "token_logprobs": [], "top_logprobs": [], "text_offset": []}, choice
    r = post(server, "/v1/completions", {"prompt": "Hi", "max_tokens": 3, "logit_bias": {"1": 100}})
    assert r.json()["choices"][0]["logprobs"] is None  # not asked for


def test_tokenize_speaks_vllm_and_llama_cpp(server):
    # The text under vLLM's name (prompt), llama.cpp's (content) or ours (text): the same tokens.
    def tokens(body):
        r = post(server, "/tokenize", body)
        assert r.status_code == 200, r.text
        return r.json()["tokens"]
    plain = tokens({"prompt": "Hello world"})
    assert tokens({"content": "Hello world"}) == plain == tokens({"text": "Hello world"})
    # add_special (ours, llama.cpp's) and add_special_tokens (vLLM's) both drop the BOS token.
    assert tokens({"content": "Hello world", "add_special": False}) == plain[1:]
    assert tokens({"prompt": "Hello world", "add_special_tokens": False}) == plain[1:]
    assert_error(post(server, "/tokenize", {"prompt": "a", "content": "b"}), 400, "content")
    assert_error(post(server, "/tokenize", {"prompt": "a", "add_special": True, "add_special_tokens": True}), 400,
                 "add_special")
    # vLLM's chat form: the prompt a chat request with these messages gets, control-token text
    # typed in a message staying text.
    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi <start_of_turn>"}]
    chat = tokens({"messages": messages})
    r = post(server, "/v1/chat/completions", {"messages": messages, "max_tokens": 1})
    assert r.status_code == 200 and r.json()["usage"]["prompt_tokens"] == len(chat), r.text
    start_of_turn = tokens({"prompt": "<start_of_turn>", "add_special": False})
    assert len(start_of_turn) == 1 and chat.count(start_of_turn[0]) == 2, chat  # the template's two turns only
    assert_error(post(server, "/tokenize", {"messages": []}), 400, "messages")
    # /detokenize gives the chat prompt back whole, its control tokens as their text.
    r = post(server, "/detokenize", {"tokens": chat})
    assert r.status_code == 200, r.text
    text = r.json()["prompt"]
    assert text.startswith("<bos><start_of_turn>user\n") and text.endswith("<end_of_turn>\n<start_of_turn>model\n"), text
    assert text.count("<start_of_turn>") == 3 and "Hi <start_of_turn>" in text, text


def test_chat_prompt_endings(server):
    # vLLM's add_generation_prompt and continue_final_message, seen through /tokenize's chat form and
    # /detokenize (control tokens as their text), and honoured by a chat request.
    def rendered(body):
        r = post(server, "/tokenize", body)
        assert r.status_code == 200, r.text
        d = post(server, "/detokenize", {"tokens": r.json()["tokens"]})
        assert d.status_code == 200, d.text
        return r.json()["tokens"], d.json()["prompt"]
    conv = [{"role": "user", "content": "Name a colour."}, {"role": "assistant", "content": "The colour is"}]
    _, opened = rendered({"messages": conv})
    _, closed = rendered({"messages": conv, "add_generation_prompt": False})
    tokens, cont = rendered({"messages": conv, "continue_final_message": True})
    assert opened == "<bos><start_of_turn>user\nName a colour.<end_of_turn>\n<start_of_turn>model\nThe colour is" \
                     "<end_of_turn>\n<start_of_turn>model\n", opened
    assert closed == opened[:-len("<start_of_turn>model\n")], closed
    assert cont == closed[:-len("<end_of_turn>\n")], cont
    assert rendered({"messages": conv, "continue_final_message": True, "add_generation_prompt": False})[1] == cont
    # Gemma's template (and llama.cpp's rendering of it) trims each message's content, the folded
    # system text's too: white space around it makes no other prompt.
    padded = [{"role": "system", "content": " Be brief.\n"}, {"role": "user", "content": "\n Name a colour. \n"},
              {"role": "assistant", "content": "\tThe colour is \n"}]
    _, trimmed = rendered({"messages": padded})
    assert trimmed == opened.replace("user\nName", "user\nBe brief.\n\nName"), trimmed
    # A chat request continues the assistant's words: its prompt is that rendering.
    r = post(server, "/v1/chat/completions", {"messages": conv, "continue_final_message": True,
                                              "add_generation_prompt": False, "max_tokens": 2, "temperature": 0})
    assert r.status_code == 200 and r.json()["usage"]["prompt_tokens"] == len(tokens), r.text
