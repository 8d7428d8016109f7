# OpenAI's Responses API (POST /v1/responses) through the official `openai` package: the answer is
# the chat completion of the same messages (instructions as the system message, the input items as
# the turns), streams arrive as OpenAI's typed events in order and add up to the final response,
# the SDK's stream helper reads them, and what a stateless text-only server cannot do is refused
# with the field named. Raw SSE framing is checked with requests (event names, no [DONE]).
import json

import openai
import pytest
import requests

from conftest import wait_idle

MESSAGES = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Name a colour."}]


def chat_text(client, model_id, messages, **kw):
    r = client.chat.completions.create(model=model_id, messages=messages, temperature=0, **kw)
    return r.choices[0].message.content, r


def test_response_is_the_chat_answer(client, model_id):
    want, chat = chat_text(client, model_id, MESSAGES, max_tokens=8)
    # instructions + a string input, and the same as message items with content parts
    a = client.responses.create(model=model_id, instructions="Be brief.", input="Name a colour.",
                                max_output_tokens=8, temperature=0)
    b = client.responses.create(model=model_id, temperature=0, max_output_tokens=8, input=[
        {"role": "system", "content": "Be brief."},
        {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "Name a colour."}]}])
    for r in (a, b):
        assert r.object == "response" and r.id.startswith("resp_") and r.model == model_id
        assert r.output_text == want
        assert r.status == "incomplete" and r.incomplete_details.reason == "max_output_tokens"
        [item] = r.output
        assert item.type == "message" and item.role == "assistant" and item.id.startswith("msg_")
        assert [p.type for p in item.content] == ["output_text"]
        assert r.usage.input_tokens == chat.usage.prompt_tokens and r.usage.output_tokens == 8
        assert r.usage.total_tokens == r.usage.input_tokens + 8
        assert r.usage.output_tokens_details.reasoning_tokens == 0
        assert r.usage.model_extra["kv_cache"]["blocks"] > 0
        assert r.max_output_tokens == 8 and r.temperature == 0 and r.store is False
    assert a.instructions == "Be brief." and b.instructions is None


def test_assistant_turns_and_stop(client, model_id):
    history = [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello!"},
               {"role": "user", "content": "Name a colour."}]
    want, _ = chat_text(client, model_id, history, max_tokens=24, stop=["\n"])
    items = [{"role": "user", "content": "Hi"},
             {"role": "assistant", "content": [{"type": "output_text", "text": "Hello!"}]},
             {"role": "user", "content": "Name a colour."}]
    r = client.responses.create(model=model_id, input=items, max_output_tokens=24, temperature=0,
                                extra_body={"stop": ["\n"]})
    assert r.output_text == want
    assert r.status == "completed" and r.incomplete_details is None and r.output[0].status == "completed"


def test_stream_events(client, model_id):
    whole = client.responses.create(model=model_id, input="Name a colour.", max_output_tokens=12, temperature=0)
    events = list(client.responses.create(model=model_id, input="Name a colour.", max_output_tokens=12,
                                          temperature=0, stream=True))
    types = [e.type for e in events]
    deltas = types.count("response.output_text.delta")
    assert types == (["response.created", "response.in_progress", "response.output_item.added",
                      "response.content_part.added"] + ["response.output_text.delta"] * deltas +
                     ["response.output_text.done", "response.content_part.done", "response.output_item.done",
                      "response.incomplete"])
    assert [e.sequence_number for e in events] == list(range(len(events)))
    assert events[0].response.status == "in_progress" and events[0].response.output == []
    text = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    assert text == whole.output_text
    assert events[-4].text == text and events[-3].part.text == text and events[-2].item.content[0].text == text
    final = events[-1].response
    assert final.output_text == text and final.status == "incomplete"
    assert final.usage.output_tokens == 12 and final.id == events[0].response.id
    item_ids = {e.item_id for e in events if hasattr(e, "item_id")}
    assert item_ids == {final.output[0].id}


def test_stream_helper_final_response(client, model_id):
    want, _ = chat_text(client, model_id, [{"role": "user", "content": "Name a colour."}], max_tokens=30, stop=["\n"])
    with client.responses.stream(model=model_id, input="Name a colour.", max_output_tokens=30, temperature=0,
                                 extra_body={"stop": ["\n"]}) as stream:
        deltas = [e.delta for e in stream if e.type == "response.output_text.delta"]
        final = stream.get_final_response()
    assert final.status == "completed" and final.output_text == want == "".join(deltas)


def test_logprobs(client, model_id):
    r = client.responses.create(model=model_id, input="Hi", max_output_tokens=3, temperature=0,
                                include=["message.output_text.logprobs"], top_logprobs=2)
    chat = client.chat.completions.create(model=model_id, messages=[{"role": "user", "content": "Hi"}], max_tokens=3,
                                          temperature=0, logprobs=True, top_logprobs=2)
    lp = r.output[0].content[0].logprobs
    want = chat.choices[0].logprobs.content
    assert [x.token for x in lp] == [x.token for x in want] and len(lp) == 3
    for got, w in zip(lp, want):
        assert got.logprob == pytest.approx(w.logprob, abs=1e-4) and len(got.top_logprobs) == 2
    assert r.top_logprobs == 2
    plain = client.responses.create(model=model_id, input="Hi", max_output_tokens=2, temperature=0)
    assert plain.output[0].content[0].logprobs == []


def test_raw_sse_framing(server, model_id):
    body = {"model": model_id, "input": "Hi", "max_output_tokens": 2, "temperature": 0, "stream": True}
    r = requests.post(server.url + "/v1/responses", json=body, stream=True, timeout=60)
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
    raw = r.content.decode()
    assert "[DONE]" not in raw and raw.endswith("\n\n")
    for block in raw.strip("\n").split("\n\n"):
        event, data = block.split("\n")
        assert event.startswith("event: ") and data.startswith("data: ")
        assert json.loads(data[6:])["type"] == event[7:]


@pytest.mark.parametrize("fields, param", [
    ({"previous_response_id": "resp_1"}, "previous_response_id"),
    ({"conversation": "conv_1"}, "conversation"),
    ({"background": True}, "background"),
    ({"truncation": "auto"}, "truncation"),
    ({"text": {"format": {"type": "xml"}}}, "text.format"),
    ({"tools": [{"type": "web_search"}]}, "tools"),  # function tools only (tests/py/test_tool_calls.py)
    ({"tools": [{"type": "function", "function": {"name": "f"}}]}, "tools"),  # chat's shape has no name here
    ({"tool_choice": "required"}, "tool_choice"),
    ({"tools": [{"type": "function", "name": "f"}], "tool_choice": {"type": "web_search"}}, "tool_choice"),
    ({"include": ["reasoning.encrypted_content"]}, "include"),
    ({"input": [{"type": "function_call_output", "call_id": "c"}]}, "input"),
    ({"input": [{"type": "function_call", "call_id": "c", "name": "f", "arguments": {}}]}, "input"),
    ({"input": [{"role": "user", "content": [{"type": "input_image", "image_url": "http://x/y.png"}]}]}, "input"),
    ({"input": [{"role": "tool", "content": "x"}]}, "input"),
    ({"input": []}, "input"),
    ({"input": 3}, "input"),
    ({"instructions": ["x"]}, "instructions"),
    ({"max_output_tokens": 0}, "max_output_tokens"),
    ({"max_output_tokens": 1.5}, "max_output_tokens"),
    ({"max_output_tokens": 100000}, "max_output_tokens"),
    ({"temperature": 3}, "temperature"),
    ({"model": "no-such-model"}, "model"),
])
def test_refused_with_the_field_named(server, model_id, fields, param):
    body = {"model": model_id, "input": "Hi", "max_output_tokens": 2}
    body.update(fields)
    r = requests.post(server.url + "/v1/responses", json=body, timeout=30)
    assert r.status_code in (400, 404), r.text
    assert r.json()["error"]["param"] == param, r.text


def test_missing_input_and_too_long_input(server, model_id):
    r = requests.post(server.url + "/v1/responses", json={"model": model_id}, timeout=30)
    assert r.status_code == 400 and r.json()["error"]["param"] == "input"
    r = requests.post(server.url + "/v1/responses", json={"model": model_id, "input": "word " * 600}, timeout=60)
    assert r.status_code == 400 and r.json()["error"]["code"] == "context_length_exceeded", r.text
    assert r.json()["error"]["param"] == "input"


def test_nul_bytes_are_text(client, model_id):
    a = client.responses.create(model=model_id, instructions="s\u0000t", input="a\u0000b", max_output_tokens=2,
                                temperature=0, metadata={"k": "v\u0000w"})
    b, _ = chat_text(client, model_id, [{"role": "system", "content": "s\u0000t"},
                                        {"role": "user", "content": "a\u0000b"}], max_tokens=2)
    assert a.output_text == b
    assert a.instructions == "s\u0000t" and a.metadata == {"k": "v\u0000w"}  # echoed whole


def test_retrieve_says_nothing_is_stored(server, client, model_id):
    r = client.responses.create(model=model_id, input="Hi", max_output_tokens=1)
    with pytest.raises(openai.NotFoundError) as e:
        client.responses.retrieve(r.id)
    assert "not stored" in str(e.value)
    got = requests.post(server.url + "/v1/responses/" + r.id, json={}, timeout=10)
    assert got.status_code == 405 and got.headers["allow"] == "GET, HEAD"


def test_nothing_held_after(server):
    wait_idle(server)


def test_sdk_error_type(client, model_id):
    with pytest.raises(openai.BadRequestError) as e:
        client.responses.create(model=model_id, input="Hi", previous_response_id="resp_1")
    assert "stores no responses" in str(e.value)
