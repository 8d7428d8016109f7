#!/usr/bin/env bash
# CLI contract test: exit codes and messages of wushkv's argument handling. Every case here fails
# (or answers) before a model is opened, so it needs neither the model nor a Vulkan device.
# Usage: test_cli.sh path/to/wushkv
set -u
exe=${1:?usage: test_cli.sh path/to/wushkv}
pass=0
fail=0

# expect RC PATTERN -- ARGS...: runs wushkv ARGS, wants exit status RC and PATTERN (grep -E) in
# stdout+stderr.
expect() {
    local want_rc=$1 pattern=$2
    shift 3
    local out rc
    out=$("$exe" "$@" 2>&1 </dev/null)
    rc=$?
    if [[ $rc -eq $want_rc ]] && grep -qE -- "$pattern" <<<"$out"; then
        pass=$((pass + 1))
    else
        fail=$((fail + 1))
        printf 'FAIL: wushkv %s\n  want rc=%s and /%s/\n  got rc=%s: %s\n' "$*" "$want_rc" "$pattern" "$rc" "$out"
    fi
}

expect 0 '^wushkv [0-9]+\.[0-9]+' -- --version
expect 0 'usage: wushkv <command>' -- --help
expect 0 'perplexity' -- help
expect 2 'usage: wushkv <command>' --
expect 2 "unknown command 'nope'" -- nope

# Future commands say so and fail, rather than pretend.
expect 2 "^wushkv serve: --port: expected an integer in \\[0, 65535\\], got 'abc'" -- serve --port abc
expect 2 '^wushkv bench: not implemented yet' -- bench

# generate: help lists every flag; bad values are refused with the flag named.
expect 0 '--top-p' -- generate --help
expect 0 '--min-p' -- help generate
for flag in -m -p -n --temp --top-k --top-p --min-p --seed --ctx --device --json --no-bos --validation -v; do
    expect 0 "(^|[ ,])$flag[ ,]" -- generate --help
done
expect 2 "--temp: expected a number >= 0, got 'abc'" -- generate -p hi --temp abc
expect 2 "--temp: expected a number >= 0, got '-1'" -- generate -p hi --temp -1
expect 2 "--temp: expected a number >= 0, got 'nan'" -- generate -p hi --temp nan
expect 2 "--top-k: expected an integer >= 0, got '1.5'" -- generate -p hi --top-k 1.5
expect 2 "--top-p: expected a number in \[0, 1\], got '2'" -- generate -p hi --top-p 2
expect 2 "--min-p: expected a number in \[0, 1\], got '0.5x'" -- generate -p hi --min-p 0.5x
expect 2 "--seed: expected an integer .*got '-1'" -- generate -p hi --seed -1
expect 2 "-n: expected an integer in \[1, [0-9]+\], got '0'" -- generate -p hi -n 0
expect 2 "--ctx: expected an integer .*got '4k'" -- generate -p hi --ctx 4k
expect 2 "-n: missing value" -- generate -p hi -n
expect 2 "--json takes no value" -- generate -p hi --json=yes
expect 2 "unknown option '--bogus'" -- generate -p hi --bogus
expect 2 "unexpected argument 'extra'" -- generate -p hi extra
expect 2 "missing -p PROMPT" -- generate -n 5
expect 2 "--temp: expected a number >= 0, got 'x'" -- generate -p hi --temp=x

# calibrate: help lists every flag; bad values are refused with the flag named; no model needed.
for flag in -m -f -o --tokens --chunk --kv-group --v-moments --threads --device --validation -v; do
    expect 0 "(^|[ ,])$flag[ ,]" -- calibrate --help
done
expect 2 "missing -f TEXT" -- calibrate -o x.wush
expect 2 "missing -o FILE" -- calibrate -f x.txt
expect 2 "--kv-group: expected a power of two, got '24'" -- calibrate -f x -o y --kv-group 24
expect 2 "--v-moments: expected plain, mass or mass2, got 'x'" -- calibrate -f x -o y --v-moments x
expect 2 "--tokens: expected an integer" -- calibrate -f x -o y --tokens 0
expect 1 "cannot open /nonexistent/cal.txt" -- calibrate -m /nonexistent/model.gguf -f /nonexistent/cal.txt -o /tmp/x.wush

# perplexity
for flag in -m -f --ctx --chunks --batch --json --device --validation -v; do
    expect 0 "(^|[ ,])$flag[ ,]" -- perplexity --help
done
expect 2 "missing -f FILE" -- perplexity --ctx 512
expect 2 "--ctx: expected an integer in \[4, [0-9]+\], got '0'" -- perplexity -f x --ctx 0
expect 2 "--chunks: expected an integer >= 1, got 'all'" -- perplexity -f x --chunks all
expect 2 "--batch: expected an integer" -- perplexity -f x --batch 0
expect 1 "cannot open /nonexistent/wiki.raw" -- perplexity -m /nonexistent/model.gguf -f /nonexistent/wiki.raw
# perplexity --layer-error: the format list is checked before anything is opened
for flag in --layer-error --layer-error-formats --threads; do
    expect 0 "(^|[ ,])$flag[ ,]" -- perplexity --help
done
expect 2 "--layer-error-formats: format 'int5': expected FMT" -- perplexity -f x --layer-error-formats int2,int5
expect 2 "format 'int2:quest:none:4:x': expected" -- perplexity -f x --layer-error-formats int2:quest:none:4:x
expect 2 "format 'int2:quest:none:4:8:1': expected" -- perplexity -f x --layer-error-formats int2:quest:none:4:8:1
expect 2 "format 'int2::wush': the wush transform needs --wush FILE" -- perplexity -f x --layer-error-formats int2::wush
expect 2 "--layer-error takes no value" -- perplexity -f x --layer-error=int2
expect 2 "--threads: expected an integer" -- perplexity -f x --layer-error --threads 0

echo "$pass passed, $fail failed"
[[ $fail -eq 0 ]]
