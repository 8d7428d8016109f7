#!/usr/bin/env python3
# Our chat rendering against a peer's, on the same GGUF: for a set of conversations (plain, white
# space around the words, a system prompt, several turns, Unicode, control-token text typed in a
# message), the prompt `wushkv serve` builds (its /tokenize messages form, read back through
# /detokenize) against the one llama-server builds (/apply-template), and the token ids of both
# (llama-server's /tokenize of its prompt). With --jinja the reference prompt is instead the
# model's own Jinja template (llama-server's /props) rendered by the Python jinja2 package as
# Hugging Face transformers renders it, so as vLLM does. Prints a line per conversation and exits
# 1 on any difference but the expected one: control-token text typed by a user stays text here (a
# user cannot forge a turn, docs/reliability.md), where llama-server's /tokenize parses it.
#
#   wushkv serve --port 8080 &
#   llama-server -m MODEL.gguf --port 8081 --no-jinja --chat-template gemma &
#   python3 scripts/chat_peer_check.py http://127.0.0.1:8080 http://127.0.0.1:8081 [--jinja]
#
# (--no-jinja: llama-server then renders with its own code for the named format, or for the one it
# recognises in the GGUF's template when --chat-template is left out; with Jinja on,
# --chat-template takes the template text itself.) scripts/chat_peer_formats.sh runs this for
# every chat format on small models carrying real vocabularies and templates.
import datetime
import sys

import requests


def user(t):
    return {"role": "user", "content": t}


CONVERSATIONS = {
    "plain": [user("Name a colour.")],
    "padded": [user("\n  Name a colour. \n")],
    "system": [{"role": "system", "content": "Be brief."}, user("Name a colour.")],
    "padded system": [{"role": "system", "content": " Be brief.\n\n"}, user("Hi\t")],
    "multi-turn": [user("Hi"), {"role": "assistant", "content": "Hello! How can I help?"}, user("Name a colour.")],
    "multi-turn padded": [user("Hi "), {"role": "assistant", "content": " Hello!\n"}, user("\tName a colour.\n")],
    "system, multi-turn": [{"role": "system", "content": "Be brief."}, user("Hi"),
                           {"role": "assistant", "content": "Hello!"}, user("Name a colour.")],
    "newlines inside": [user("line one\n\nline two\n")],
    "unicode": [user("Caf\u00e9 \u2014 \u6771\u4eac \U0001F600 ")],
    "typed control text": [user("Hi <start_of_turn>model <|eot_id|><|im_end|>[INST]</s>\n")],
}
# Where the ids may differ: the typed control text is text here, a control token there.
TEXT_ONLY = {"typed control text"}
# vLLM's chat_template_kwargs, sent with one conversation: Qwen 3's enable_thinking (an empty think
# block opens the reply); templates that do not read it render as without.
KWARGS = {"no thinking": ([user("Name a colour.")], {"enable_thinking": False})}


def jinja_renderer(peer):
    """The model's template (llama-server's /props) as transformers renders it: its globals
    raise_exception and strftime_now, the vocabulary's BOS and EOS text, the reply opened."""
    import jinja2
    import jinja2.sandbox
    props = requests.get(peer + "/props", timeout=60).json()

    def raise_exception(message):
        raise jinja2.exceptions.TemplateError(message)

    env = jinja2.sandbox.ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                                    extensions=["jinja2.ext.loopcontrols"])
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = lambda fmt: datetime.datetime.now().strftime(fmt)
    template = env.from_string(props["chat_template"])
    bos, eos = props.get("bos_token", ""), props.get("eos_token", "")
    return lambda messages, kwargs: template.render(messages=messages, bos_token=bos, eos_token=eos,
                                                    add_generation_prompt=True, **kwargs)


def main(ours, peer, jinja):
    differences = 0
    render = jinja_renderer(peer) if jinja else None
    cases = [(name, messages, {}) for name, messages in CONVERSATIONS.items()]
    if render:  # llama-server's own renderings take no template variables
        cases += [(name, messages, kwargs) for name, (messages, kwargs) in KWARGS.items()]
    for name, messages, kwargs in cases:
        body = {"messages": messages, **({"chat_template_kwargs": kwargs} if kwargs else {})}
        response = requests.post(ours + "/tokenize", json=body, timeout=60)
        if response.status_code != 200:
            differences += 1
            print(f"{name:20s} refused here: {response.text}  <-")
            continue
        if render:
            try:
                theirs = render(messages, kwargs)
            except Exception as e:  # the template refuses this conversation (Mistral's: roles must alternate)
                print(f"{name:20s} the template refuses it ({e}); here: HTTP {response.status_code}")
                continue
        else:
            theirs = requests.post(peer + "/apply-template", json={"messages": messages}, timeout=60).json()["prompt"]
        tokens = response.json()["tokens"]
        # llama-server's rendering leaves the BOS to its tokenizer; a Jinja template writes it
        bos = requests.post(ours + "/detokenize", json={"tokens": tokens[:1]}, timeout=60).json()["prompt"]
        text = requests.post(ours + "/detokenize", json={"tokens": tokens if theirs.startswith(bos) else tokens[1:]},
                             timeout=60).json()["prompt"]
        their_tokens = requests.post(peer + "/tokenize", json={"content": theirs, "add_special": not render,
                                                               "parse_special": True}, timeout=60).json()["tokens"]
        # The ids decide (the vocabulary is the same, and our tokenizer is checked against
        # llama.cpp's); the text is compared where the ids may differ, and shown. A SentencePiece
        # vocabulary adds a prefix space when tokenizing, which /detokenize gives back (llama-server's
        # too): " [INST]" here for "[INST]" there, also after the BOS.
        same_tokens = tokens == their_tokens
        same_text = text == theirs or (text.startswith(" ") and text[1:] == theirs) or \
            (text.startswith(bos + " ") and bos + text[len(bos) + 1:] == theirs)
        ok = same_tokens or (name in TEXT_ONLY and same_text)
        differences += not ok
        print(f"{name:20s} prompt {'same' if same_text else 'DIFFERS'}, tokens "
              f"{'same' if same_tokens else 'differ'} ({len(tokens)} here, {len(their_tokens)} there)"
              + ("" if ok else "  <-"))
        if not same_text:
            print("    here: ", repr(text))
            print("    there:", repr(theirs))
    print(f"{differences} unexpected difference(s)")
    return 1 if differences else 0


if __name__ == "__main__":
    args = [a for a in sys.argv[1:] if a != "--jinja"]
    if len(args) != 2:
        sys.exit("usage: chat_peer_check.py WUSHKV_URL LLAMA_SERVER_URL [--jinja]")
    sys.exit(main(args[0].rstrip("/"), args[1].rstrip("/"), "--jinja" in sys.argv[1:]))
