#!/usr/bin/env python3
# lm-evaluation-harness against a running `wushkv serve`: its WikiText task (word and byte
# perplexity of whole documents, scored in rolling windows) on the local WikiText-2 test file, through
# its `local-completions` model (echo + logprobs, as for any OpenAI-compatible server) and its
# remote tokenizer (the server's /tokenizer_info, /tokenize and /detokenize). A check with a real
# client, not a test: it needs lm-eval installed (pip install "lm-eval[api]"), no network.
#
#   WIKITEXT=/path/wiki.test.raw python3 scripts/lm_eval_wikitext.py http://127.0.0.1:8080 [--docs 4] [--max-length 1024]
#
# The documents are the file's split at its top-level headings (" = Title = "), as the
# EleutherAI/wikitext_document_level set lm-eval's own task reads; the first --docs of them are scored.
import argparse
import json
import os
import re
import sys
import tempfile

import requests

TASK = """task: wushkv_wikitext
dataset_path: json
dataset_kwargs:
  data_files:
    test: {docs}
output_type: loglikelihood_rolling
test_split: test
doc_to_text: ""
doc_to_target: !function preprocess.wikitext_detokenizer
process_results: !function preprocess.process_results
metric_list:
  - metric: word_perplexity
  - metric: byte_perplexity
  - metric: bits_per_byte
metadata:
  version: 1.0
"""
# lm-eval's own WikiText detokenizer and per-document counts.
PREPROCESS = "from lm_eval.tasks.wikitext.preprocess_wikitext import process_results, wikitext_detokenizer  # noqa\n"


def documents(path):
    docs, cur = [], []
    with open(path, encoding="utf-8") as f:
        for line in f:
            if re.match(r"^ = [^=].* = $", line.rstrip("\n")) and cur:
                docs.append("".join(cur))
                cur = []
            cur.append(line)
    if cur:
        docs.append("".join(cur))
    return [d for d in docs if d.strip()]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("url")
    ap.add_argument("--docs", type=int, default=4)
    ap.add_argument("--max-length", type=int, default=1024, help="lm-eval's window (the server's --ctx must exceed it)")
    args = ap.parse_args()
    wikitext = os.environ.get("WIKITEXT")
    if not wikitext or not os.path.isfile(wikitext):
        sys.exit("lm_eval_wikitext.py: set WIKITEXT to the WikiText-2 raw test file (wiki.test.raw, not shipped)")
    import lm_eval
    from lm_eval.tasks import TaskManager

    model = requests.get(args.url + "/v1/models", timeout=30).json()["data"][0]["id"]
    with tempfile.TemporaryDirectory() as tmp:
        docs = os.path.join(tmp, "docs.jsonl")
        with open(docs, "w", encoding="utf-8") as f:
            for d in documents(wikitext)[: args.docs]:
                f.write(json.dumps({"page": d}) + "\n")
        with open(os.path.join(tmp, "wushkv_wikitext.yaml"), "w") as f:
            f.write(TASK.format(docs=docs))
        with open(os.path.join(tmp, "preprocess.py"), "w") as f:
            f.write(PREPROCESS)
        out = lm_eval.simple_evaluate(
            model="local-completions",
            model_args=f"model={model},base_url={args.url}/v1/completions,tokenizer_backend=remote,"
                       f"tokenized_requests=True,max_length={args.max_length},num_concurrent=1,max_retries=1",
            tasks=["wushkv_wikitext"], task_manager=TaskManager(include_path=tmp))
    r = out["results"]["wushkv_wikitext"]
    print(json.dumps({k: v for k, v in r.items() if not k.endswith("_stderr,none")}, indent=1))


if __name__ == "__main__":
    main()
