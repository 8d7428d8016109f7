#!/usr/bin/env bash
# CLI contract test: exit codes and messages of wushkv's argument handling.
#   test_cli.sh path/to/wushkv
#     every case fails (or answers) before a model is opened: needs neither a model nor a Vulkan
#     device (meson suite unit);
#   test_cli.sh path/to/wushkv --tiny-model path/to/write_tiny_model
#     the KV flags on a tiny random-weight model: what reaches the engine, seen in --json (needs a
#     Vulkan device; meson suite vulkan).
set -u
exe=${1:?usage: test_cli.sh path/to/wushkv [--tiny-model path/to/write_tiny_model]}
writer=
if [[ ${2:-} == --tiny-model ]]; then
    writer=${3:?--tiny-model needs the path of write_tiny_model}
fi
pass=0
fail=0
out=
rc=0

# run ARGS...: wushkv ARGS with stdout+stderr in $out and the exit status in $rc. The timeout
# keeps a serve that wrongly accepted its flags from hanging the test; it is long because the
# first run of a KV format compiles its specialised shaders in lavapipe (LLVM), about 2-3 minutes
# on a 2-core machine with a cold Mesa shader cache (then cached across runs).
run() {
    out=$(timeout 400 "$exe" "$@" 2>&1 </dev/null)
    rc=$?
}

ok() { pass=$((pass + 1)); }
ko() { # what was wanted, then the command
    fail=$((fail + 1))
    local want=$1
    shift
    printf 'FAIL: wushkv %s\n  want %s\n  got rc=%s: %s\n' "$*" "$want" "$rc" "$out"
}

# expect RC PATTERN -- ARGS...: runs wushkv ARGS, wants exit status RC and PATTERN (grep -E) in
# stdout+stderr.
expect() {
    local want_rc=$1 pattern=$2
    shift 3
    run "$@"
    if [[ $rc -eq $want_rc ]] && grep -qE -- "$pattern" <<<"$out"; then ok; else ko "rc=$want_rc and /$pattern/" "$@"; fi
}

# expect_only RC LINE -- ARGS...: as expect, but the whole output must be LINE: a flag refused
# before anything is loaded or listened on.
expect_only() {
    local want_rc=$1 line=$2
    shift 3
    run "$@"
    if [[ $rc -eq $want_rc && $out == "$line" ]]; then ok; else ko "rc=$want_rc and only '$line'" "$@"; fi
}

# ---- the KV flags on a tiny model: what reaches the engine ----------------------------------
if [[ -n $writer ]]; then
    tmp=$(mktemp -d)
    trap 'rm -rf "$tmp"' EXIT
    model=$tmp/tiny.gguf text=$tmp/text.txt wush=$tmp/tiny.wush
    if ! "$writer" "$model" gemma3 7; then
        echo "FAIL: $writer $model"
        exit 1
    fi
    for i in $(seq 300); do printf 'the quick brown fox %d jumps over the lazy dog. ' "$i"; done >"$text"
    expect 0 'fingerprint' -- calibrate -m "$model" -f "$text" -o "$wush" --tokens 256 --chunk 64
    # Too few tokens for the blocks' moments: refused, nothing written.
    printf 'the quick brown fox' >"$tmp/short.txt"
    expect 1 'too few to fit transforms of blocks of 32 \(their moments need at least 128 tokens' -- \
        calibrate -m "$model" -f "$tmp/short.txt" -o "$tmp/short.wush"
    if [[ ! -e $tmp/short.wush ]]; then ok; else out="$tmp/short.wush exists" ko "no sidecar written" calibrate -f short.txt; fi

    # --json names the format the engine was given; bits_per_element is the engine's own.
    ppl=(perplexity -m "$model" -f "$text" --ctx 32 --chunks 2 --json)
    nowin=(--kv-sink 0 --kv-recent 0) # the default's f16 windows off
    expect 0 '"kv":"f16","bits_per_element":16,' -- "${ppl[@]}" --kv f16
    # --wush: the wush transform; a named format or transform still counts.
    expect 0 '"kv":"int2 quest G32 wush","bits_per_element":2.5,' -- "${ppl[@]}" --wush "$wush" "${nowin[@]}"
    expect 0 '"kv":"f16 wush","bits_per_element":16,' -- "${ppl[@]}" --wush "$wush" --kv f16
    expect 0 '"kv":"int4 quest G32 wush","bits_per_element":4.5,' -- "${ppl[@]}" --kv int4 --wush "$wush" "${nowin[@]}"
    expect 0 '"kv":"int2 quest G32 hadamard","bits_per_element":2.5,' -- "${ppl[@]}" --wush "$wush" --kv-transform hadamard "${nowin[@]}"
    expect 0 '"kv":"int3 absmax G16","bits_per_element":4,' -- "${ppl[@]}" --kv int3 --kv-quant absmax --kv-group 16 --kv-transform none "${nowin[@]}"
    expect 0 '"kv":"int2 quest G32 wush","bits_per_element":2.5,' -- generate -m "$model" -p "the fox" -n 2 --json --wush "$wush" "${nowin[@]}"
    expect 0 'KV int2 quest G32 wush' -- generate -m "$model" -p "the fox" -n 2 --wush "$wush"
    # a grammar holds a random-weight model's output, and the run ends when nothing may follow
    expect 0 '"text":"ab[0-9][0-9]","prompt_tokens"' -- generate -m "$model" -p "the fox" -n 30 --json --temp 1 --grammar 'root ::= "ab" [0-9]{2}'

    # The default format (int2 QuEST + WUSH in groups of 128, which the tiny model's head_dim of 64
    # halves to 64; sliding layers int4; f16 windows) with no --wush: the sidecar is
    # calibrated into the cache directory on the first run (from the built-in text; 512 tokens here
    # to keep the test short), reused on the next without calibrating, and a corrupt or another
    # model's file is refused with a message and replaced. Evidence: the log lines and the file.
    export WUSHKV_CACHE_DIR=$tmp/cache WUSHKV_CALIB_TOKENS=512
    expect 0 'no WUSH-KV sidecar for this model in .*/cache: calibrating' -- "${ppl[@]}"
    if grep -q '"kv":"int2 quest G64 clip1.2 wush sink16 recent104 swa:int4 keys:int3@5 swa:sink0:recent32"' <<<"$out"; then ok; else ko 'the default format in --json' "${ppl[@]}"; fi
    cached=("$tmp"/cache/*.g64.t512.wush)
    if [[ ${#cached[@]} -eq 1 && -s ${cached[0]} && -z $(find "$tmp/cache" -name '*.tmp') ]]; then ok
    else ko "one cached sidecar *.g64.t512.wush and no temporary file" "ls $tmp/cache: $(ls "$tmp/cache")"; fi
    stamp=$(stat -c %y "${cached[0]}")
    expect 0 "WUSH-KV sidecar ${cached[0]} \(cached\)" -- "${ppl[@]}"
    if ! grep -q calibrat <<<"$out" && [[ $(stat -c %y "${cached[0]}") == "$stamp" ]]; then ok
    else ko "the second run reuses the file (no calibration, same mtime)" "${ppl[@]}"; fi
    expect 0 "WUSH-KV sidecar ${cached[0]} \(cached\)" -- generate -m "$model" -p "the fox" -n 2
    # A context of one block: the default's two pools (sliding layers int4) fit it; the window
    # check once counted every layer group's block against the first pool, which holds only the
    # full-attention groups ("cannot hold 1 f16 window slots").
    expect 0 '"kv":"int2 quest G64 clip1.2 wush sink16 recent104 swa:int4 keys:int3@5 swa:sink0:recent32"' -- perplexity -m "$model" -f "$text" --ctx 16 --chunks 1 --json
    # --layer-error takes the same default, its group fitted to the model's head_dim 64 (it once
    # kept 128: "block size 128: must be a power of two dividing head_dim 64").
    expect 0 'int2 quest g64 wush .*clip 1\.2.*relative MSE' -- perplexity -m "$model" -f "$text" --ctx 16 --chunks 1 --layer-error
    # A list entry naming another quantizer drops the default's QuEST clip instead of being refused.
    expect 0 'int2 absmax g64 wush .*relative MSE' -- perplexity -m "$model" -f "$text" --ctx 16 --chunks 1 --layer-error-formats int2:absmax
    # Wide keys: the default widened the keys of the full-attention layer (5, the only one), as the
    # sidecar's predicted key error ranks it; named layers replace the choice, a layer the model
    # lacks or a sliding layer with a format of its own is refused, none turns them off.
    expect 0 '"kv":"int2 quest G64 clip1.2 wush sink16 recent104 swa:int4 keys:int4@5 swa:sink0:recent32"' -- "${ppl[@]}" --kv-wide-keys 5:int4
    expect 0 '"kv":"int2 quest G64 clip1.2 wush sink16 recent104 swa:int4 swa:sink0:recent32"' -- "${ppl[@]}" --kv-wide-keys none
    expect 1 'wide keys in layer 9: the model has 6 layers' -- "${ppl[@]}" --kv-wide-keys 9
    expect 1 'wide keys in layer 0: the sliding-window layers have a KV format of their own' -- "${ppl[@]}" --kv-wide-keys 0
    expect 2 'expected none or layer indices' -- "${ppl[@]}" --kv-wide-keys 5:int2
    printf 'not a sidecar' >"${cached[0]}"
    expect 0 "refusing the cached WUSH-KV sidecar ${cached[0]}: .*calibrating a new one" -- "${ppl[@]}"
    expect 0 "WUSH-KV sidecar ${cached[0]} \(cached\)" -- "${ppl[@]}"
    "$writer" "$tmp/other.gguf" gemma3 8 >/dev/null
    expect 0 'fingerprint' -- calibrate -m "$tmp/other.gguf" -f "$text" -o "$tmp/other.wush" --tokens 128 --chunk 64
    cp "$tmp/other.wush" "${cached[0]}"
    expect 0 "refusing the cached WUSH-KV sidecar ${cached[0]}: .*calibrating a new one" -- "${ppl[@]}"
    expect 0 "WUSH-KV sidecar ${cached[0]} \(cached\)" -- "${ppl[@]}"
    # --kv f16 and --wush FILE never look in the cache; a cache that cannot be made is a clear error.
    WUSHKV_CACHE_DIR=/proc/wushkv-none expect 0 '"kv":"f16",' -- "${ppl[@]}" --kv f16
    WUSHKV_CACHE_DIR=/proc/wushkv-none expect 0 '"kv":"int2 quest G32 wush sink16 recent104 swa:sink0:recent32"' -- "${ppl[@]}" --wush "$wush"
    WUSHKV_CACHE_DIR=/proc/wushkv-none expect 1 'cannot create the cache directory /proc/wushkv-none' -- "${ppl[@]}"
    # (WUSHKV_CACHE_DIR stays $tmp/cache: nothing below may calibrate into the user's cache)

    # --kv-rho-k/-v reach the percentile quantizer: the documented defaults (0.96, 0.92) change
    # nothing, other values change the perplexity.
    ppl_of() { # ARGS...: the ppl of perplexity --json ARGS in $val ("" on failure)
        run "$@"
        val=$(sed -n 's/^{"ppl":\([^,]*\),.*/\1/p' <<<"$out")
        [[ $rc -eq 0 && -n $val ]] || ko "rc=0 and a ppl" "$@"
    }
    pq=("${ppl[@]}" --wush "$wush" --kv-quant percentile "${nowin[@]}")
    ppl_of "${pq[@]}" && base=$val
    ppl_of "${pq[@]}" --kv-rho-k 0.96 --kv-rho-v 0.92
    if [[ $val == "$base" ]] && grep -q '"kv":"int2 percentile G32 rho_k0.96 rho_v0.92 wush"' <<<"$out"; then ok
    else ko "ppl $base (the defaults) and rho_k0.96 rho_v0.92 in kv" "${pq[@]}" --kv-rho-k 0.96 --kv-rho-v 0.92; fi
    ppl_of "${pq[@]}" --kv-rho-k 0.5
    if [[ -n $val && $val != "$base" ]] && grep -q '"kv":"int2 percentile G32 rho_k0.5 wush"' <<<"$out"; then ok
    else ko "a ppl other than $base and rho_k0.5 in kv" "${pq[@]}" --kv-rho-k 0.5; fi
    rho_k_val=$val
    ppl_of "${pq[@]}" --kv-rho-v 0.5
    if [[ -n $val && $val != "$base" && $val != "$rho_k_val" ]] && grep -q '"kv":"int2 percentile G32 rho_v0.5 wush"' <<<"$out"; then ok
    else ko "a ppl other than $base and $rho_k_val, and rho_v0.5 in kv" "${pq[@]}" --kv-rho-v 0.5; fi

    # --kv-clip reaches the QuEST encoder: 1 is the plain step (the same ppl, named by nothing),
    # another value changes the ppl and is named.
    pl=("${ppl[@]}" --wush "$wush" "${nowin[@]}")
    ppl_of "${pl[@]}" && base=$val
    ppl_of "${pl[@]}" --kv-clip 1
    if [[ $val == "$base" ]] && grep -q '"kv":"int2 quest G32 wush",' <<<"$out"; then ok
    else ko "ppl $base (clip 1 is the plain step) and no clip in kv" "${pl[@]}" --kv-clip 1; fi
    ppl_of "${pl[@]}" --kv-clip 1.5
    if [[ -n $val && $val != "$base" ]] && grep -q '"kv":"int2 quest G32 clip1.5 wush",' <<<"$out"; then ok
    else ko "a ppl other than $base and clip1.5 in kv" "${pl[@]}" --kv-clip 1.5; fi

    # --kv-sink/--kv-recent reach the engine: it keeps the f16 windows, --json names them and counts
    # them in bits_per_element (more than the 2.5 of int2 G32 alone).
    run "${ppl[@]}" --wush "$wush" --kv-sink 4 --kv-recent 8
    if [[ $rc -eq 0 ]] && grep -q '"kv":"int2 quest G32 wush sink4 recent8"' <<<"$out" &&
        python3 -c 'import json,sys; j=json.loads(sys.argv[1].splitlines()[-1]); sys.exit(0 if j["bits_per_element"] > 2.5 else 1)' "$out"; then ok
    else ko 'rc=0 with "sink4 recent8" in kv and bits_per_element > 2.5' "${ppl[@]}" --kv-sink 4 --kv-recent 8; fi

    # --kv-swa reaches the engine: the sliding layers (5 of the tiny Gemma's 6) in int4 cost more
    # bits and hold more bytes than all int2; --kv-swa equal to --kv is the plain format; a model
    # without sliding layers says it has no effect.
    run "${ppl[@]}" --wush "$wush" "${nowin[@]}" --kv-swa int4
    if [[ $rc -eq 0 ]] && grep -q '"kv":"int2 quest G32 wush swa:int4"' <<<"$out" &&
        python3 -c 'import json,sys; j=json.loads(sys.argv[1].splitlines()[-1]); sys.exit(0 if j["bits_per_element"] > 2.5 and j["seq_bytes_32768"] > j["seq_bytes_2048"] > 0 else 1)' "$out"; then ok
    else ko 'rc=0 with "swa:int4" in kv, bits_per_element > 2.5 and seq_bytes_*' "${ppl[@]}" --wush "$wush" "${nowin[@]}" --kv-swa int4; fi
    ppl_of "${ppl[@]}" --wush "$wush" "${nowin[@]}" && base=$val
    ppl_of "${ppl[@]}" --wush "$wush" "${nowin[@]}" --kv-swa int2
    if [[ $val == "$base" ]] && grep -q '"kv":"int2 quest G32 wush",' <<<"$out"; then ok
    else ko "ppl $base (plain int2) and no swa in kv" "${ppl[@]}" --wush "$wush" "${nowin[@]}" --kv-swa int2; fi
    # --kv-swa-sink/--kv-swa-recent reach the engine: the sliding layers' windows of 0 keep the
    # global layer's 4 + 8 rows only, so fewer bits and bytes than 4 + 8 in every layer, a
    # different ppl, and the kv string names them; equal to --kv-sink/--kv-recent it is the plain
    # format.
    ppl_of "${ppl[@]}" --wush "$wush" --kv-sink 4 --kv-recent 8 && base=$val
    bpe_all=$(python3 -c 'import json,sys; print(json.loads(sys.argv[1].splitlines()[-1])["bits_per_element"])' "$out")
    ppl_of "${ppl[@]}" --wush "$wush" --kv-sink 4 --kv-recent 8 --kv-swa-sink 0 --kv-swa-recent 0
    if [[ -n $val && $val != "$base" ]] && grep -q '"kv":"int2 quest G32 wush sink4 recent8 swa:sink0:recent0"' <<<"$out" &&
        python3 -c 'import json,sys; j=json.loads(sys.argv[1].splitlines()[-1]); sys.exit(0 if 2.5 < j["bits_per_element"] < float(sys.argv[2]) else 1)' "$out" "$bpe_all"; then ok
    else ko "a ppl other than $base, swa:sink0:recent0 in kv, 2.5 < bits_per_element < $bpe_all" "${ppl[@]}" --wush "$wush" --kv-sink 4 --kv-recent 8 --kv-swa-sink 0 --kv-swa-recent 0; fi
    ppl_of "${ppl[@]}" --wush "$wush" --kv-sink 4 --kv-recent 8 --kv-swa-sink 4 --kv-swa-recent 8
    if [[ $val == "$base" ]] && grep -q '"kv":"int2 quest G32 wush sink4 recent8",' <<<"$out"; then ok
    else ko "ppl $base (every layer 4 + 8)" "${ppl[@]}" --wush "$wush" --kv-sink 4 --kv-recent 8 --kv-swa-sink 4 --kv-swa-recent 8; fi
    llama=$tmp/llama.gguf
    if "$writer" "$llama" llama 7; then
        expect 0 'no sliding-window layers: their KV format \(int3\) has no effect' -- generate -m "$llama" -p "the fox" -n 2 --kv int2 --kv-swa int3
        expect 0 'no sliding-window layers: their f16 windows \(sink 0 recent 2\) have no effect' -- generate -m "$llama" -p "the fox" -n 2 --kv int2 --kv-swa-sink 0 --kv-swa-recent 2
        # The default's per-class part was not asked for: on this model it says nothing (its
        # group, 64 here, gets a sidecar of its own in the cache).
        run generate -m "$llama" -p "the fox" -n 2
        if [[ $rc -eq 0 ]] && grep -Eq 'KV int2 quest G64 clip1.2 wush sink16 recent104 swa:int4 keys:int3@[0-9]+ swa:sink0:recent32' <<<"$out" &&
            ! grep -q 'no effect' <<<"$out"; then ok
        else ko 'rc=0, the default format, no "no effect" line' generate -m "$llama" -p "the fox" -n 2; fi
    else ko "$writer $llama llama 7" ""; fi

    echo "$pass passed, $fail failed"
    [[ $fail -eq 0 ]]
    exit
fi

expect 0 '^wushkv [0-9]+\.[0-9]+' -- --version
expect 0 'usage: wushkv <command>' -- --help
expect 0 'perplexity' -- help
expect 2 'usage: wushkv <command>' --
expect 2 "unknown command 'nope'" -- nope

expect 2 "^wushkv serve: --port: expected an integer in \\[0, 65535\\], got 'abc'" -- serve --port abc

# bench: help lists every flag of both modes; bad values, mixed modes and bad URLs are refused
# before any model is opened or any server contacted. (tests/test_bench.sh runs it on a model.)
for flag in -m -p -n -r -d --n-depth --ctx --batch-tokens --device --kv --kv-quant --kv-group --kv-mem --kv-transform \
    --wush --vs-kv --peer --peer-kv --validation --url --clients --requests --prompt-tokens --max-tokens --stream --no-stream \
    --chat --api-key --timeout --peer-url --json -v --request-rate --burstiness --max-concurrency --seed \
    --goodput --metric-percentiles --scrape-interval; do
    expect 0 "(^|[ ,])$flag[ ,]" -- bench --help
done
expect 2 "^wushkv bench: -p: expected an integer in \[0, [0-9]+\], got 'abc'" -- bench -p abc
expect 2 "^wushkv bench: -n: expected an integer in \[0, [0-9]+\], got '-1'" -- bench -n -1
expect 2 "^wushkv bench: -r: expected an integer in \[1, 1000\], got '0'" -- bench -r 0
expect 2 "^wushkv bench: --batch-tokens: expected an integer" -- bench --batch-tokens 0
expect 2 "^wushkv bench: -p and -n are both 0: nothing to measure" -- bench -p 0 -n 0
expect 2 "^wushkv bench: --ctx 16 is smaller than max\(-d\) \+ max\(-p, -n\) = 32" -- bench -p 32 -n 8 --ctx 16
expect 2 "^wushkv bench: --ctx 100 is smaller than max\(-d\) \+ max\(-p, -n\) = 132" -- bench -p 32 -n 8 -d 0,100 --ctx 100
# -d as llama-bench's: N or FIRST-LAST[+STEP|*MULT], comma-separated; a range that does not grow,
# a sign, a trailing comma or a value past 2^20 is refused.
for d in abc -1 "" 1, ,1 "0-8*2" "8-4+0" "1-9*1" 1048577 "1-2x" "4-"; do
    expect 2 "^wushkv bench: -d: expected depths 0\.\.1048576 as N or FIRST-LAST\[\+STEP\|\*MULT\]" -- bench -d "$d"
done
expect 2 "^wushkv bench: -d: more than 64 depths in '0-100'" -- bench -d 0-100
expect 2 "^wushkv bench: max\(-d\) \+ max\(-p, -n\) = 1049088 is over the longest context" -- bench -d 1048576 -p 512
expect 2 "^wushkv bench: --peer-kv: expected f16, q8_0 or q4_0, got 'q2_k'" -- bench --peer /x --peer-kv q2_k
expect 2 "^wushkv bench: --peer-kv needs --peer" -- bench --peer-kv q4_0
expect 2 "^wushkv bench: -d is an engine-mode flag" -- bench --url http://127.0.0.1:1 -d 0
expect 2 "^wushkv bench: --kv: expected f16, int2, int3 or int4, got 'int5'" -- bench --kv int5
expect 2 "^wushkv bench: --peer: missing value" -- bench --peer
expect 2 "^wushkv bench: unknown option '--bogus'" -- bench --bogus
expect 2 "^wushkv bench: unexpected argument 'extra'" -- bench extra
expect 2 "^wushkv bench: --clients is a load-mode flag; it needs --url" -- bench --clients 4
expect 2 "^wushkv bench: --peer-url is a load-mode flag; it needs --url" -- bench --peer-url http://127.0.0.1:1
expect 2 "^wushkv bench: -p is an engine-mode flag; it cannot be used with --url" -- bench --url http://127.0.0.1:1 -p 8
expect 2 "^wushkv bench: --kv is an engine-mode flag" -- bench --url http://127.0.0.1:1 --kv int2
expect 2 "^wushkv bench: --clients: expected an integer in \[1, 1024\], got '0'" -- bench --url http://127.0.0.1:1 --clients 0
expect 2 "^wushkv bench: --requests: expected an integer" -- bench --url http://127.0.0.1:1 --requests x
expect 2 "^wushkv bench: --max-tokens: expected an integer" -- bench --url http://127.0.0.1:1 --max-tokens 0
expect 2 "^wushkv bench: --stream takes no value" -- bench --url http://127.0.0.1:1 --stream=no
expect 2 "^wushkv bench: --url: expected http://HOST\[:PORT\]\[/PATH\], got 'localhost:8080'" -- bench --url localhost:8080
expect 2 "^wushkv bench: --url: https is not supported" -- bench --url https://127.0.0.1:1
expect 2 "^wushkv bench: --url: bad port in 'http://127.0.0.1:99999'" -- bench --url http://127.0.0.1:99999
expect 2 "^wushkv bench: --peer-url: no host in 'http://:8080'" -- bench --url http://127.0.0.1:1 --peer-url http://:8080
expect 2 "^wushkv bench: --request-rate: expected a number > 0 or inf, got 'fast'" -- bench --url http://127.0.0.1:1 --request-rate fast
expect 2 "^wushkv bench: --request-rate: expected a number > 0 or inf, got '0'" -- bench --url http://127.0.0.1:1 --request-rate 0
expect 2 "^wushkv bench: --clients is the closed loop; with --request-rate use --max-concurrency" -- bench --url http://127.0.0.1:1 --request-rate 2 --clients 4
expect 2 "^wushkv bench: --max-concurrency needs --request-rate" -- bench --url http://127.0.0.1:1 --max-concurrency 4
expect 2 "^wushkv bench: --burstiness needs --request-rate" -- bench --url http://127.0.0.1:1 --burstiness 0.5
expect 2 "^wushkv bench: --goodput: expected KEY:MS with KEY ttft, tpot or e2el and MS > 0, got 'ttfb:100'" -- bench --url http://127.0.0.1:1 --goodput ttfb:100
expect 2 "^wushkv bench: --goodput: expected KEY:MS .*, got 'tpot:-1'" -- bench --url http://127.0.0.1:1 --goodput ttft:100 tpot:-1
expect 2 "^wushkv bench: --metric-percentiles: expected up to 8 numbers in \[0, 100\] separated by commas, got '50,101'" -- bench --url http://127.0.0.1:1 --metric-percentiles 50,101
expect 2 "^wushkv bench: --json FILE needs --url" -- bench --json out.json
expect 2 "^wushkv bench: --request-rate is a load-mode flag; it needs --url" -- bench --request-rate 1
# Nothing listens on port 1: a clear runtime failure, not a hang or a report of zeros.
expect 1 "^wushkv bench: cannot reach http://127.0.0.1:1: connect to 127.0.0.1:1: Connection refused" -- bench --url http://127.0.0.1:1

# generate: help lists every flag; bad values are refused with the flag named.
expect 0 '--top-p' -- generate --help
expect 0 '--min-p' -- help generate
for flag in -m -p -n --temp --top-k --top-p --min-p --seed --ctx --device --json --no-bos --validation -v \
    --grammar --grammar-file -j --json-schema --json-schema-file \
    --kv --kv-quant --kv-group --kv-mem --kv-transform --wush --kv-sink --kv-recent --kv-clip --kv-rho-k --kv-rho-v --kv-swa; do
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
# structured output: one of the four, and a bad grammar or schema is refused before a model loads
expect 2 "--grammar, --grammar-file, --json-schema and --json-schema-file: give one" -- generate -p hi --grammar 'root ::= "a"' -j '{}'
expect 1 "the grammar: grammar line 1 column 10: rule 'foo' is used but never defined" -- generate -p hi --grammar 'root ::= foo'
expect 1 "the JSON Schema: not JSON" -- generate -p hi -j '{"type":'
expect 1 'the JSON Schema: /multipleOf: "multipleOf"' -- generate -p hi -j '{"type":"integer","multipleOf":3}'
expect 1 "cannot open /nonexistent.gbnf" -- generate -p hi --grammar-file /nonexistent.gbnf

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
for flag in -m -f --ctx --chunks --batch --json --device --validation -v \
    --kv --kv-quant --kv-group --kv-mem --kv-transform --wush --kv-sink --kv-recent --kv-clip --kv-rho-k --kv-rho-v --kv-swa; do
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
expect 2 "format 'int2:quest:none:4:8:1:2:3': expected" -- perplexity -f x --layer-error-formats int2:quest:none:4:8:1:2:3
expect 1 "cannot open /nonexistent/x" -- perplexity -f /nonexistent/x --layer-error-formats int2::wush # the cache's sidecar
expect 2 "--layer-error takes no value" -- perplexity -f x --layer-error=int2
expect 2 "--threads: expected an integer" -- perplexity -f x --layer-error --threads 0


# ---- the KV flags: one parser for serve, generate and perplexity ----------------------------
for flag in -m --host --port --ctx --max-batch --device -v \
    --kv --kv-quant --kv-group --kv-mem --kv-transform --wush --kv-sink --kv-recent --kv-clip --kv-rho-k --kv-rho-v --kv-swa \
    --temp --top-k --top-p --min-p --repeat-penalty --repeat-last-n; do
    expect 0 "(^|[ ,])$flag[ ,]" -- serve --help
done
# serve's sampling defaults: bad values refused before anything is loaded or listened on.
expect_only 2 "wushkv serve: --temp: expected a number in [0, 2], got '3'" -- serve --temp 3
expect_only 2 "wushkv serve: --top-p: expected a number in (0, 1], got '0'" -- serve --top-p 0
expect_only 2 "wushkv serve: --top-k: expected an integer >= 0, got '-1'" -- serve --top-k -1
expect_only 2 "wushkv serve: --min-p: expected a number in [0, 1], got 'x'" -- serve --min-p x
expect_only 2 "wushkv serve: --repeat-last-n: expected an integer in [-1, 1048576], got '-2'" -- serve --repeat-last-n -2
# The serve issue's case: refused before anything is loaded or listened on.
expect_only 2 "wushkv serve: --kv-rho-k: expected a number in (0, 1], got '2'" -- serve --kv-rho-k 2

# The same cases and messages in each command. Every model and file here is missing, so a set of
# flags that is accepted ends in exit 1 (cannot open), a refused one in exit 2 and its message only.
nomodel=/nonexistent/model.gguf
for cmd in serve generate perplexity; do
    case $cmd in
    serve) base=(serve --port 0 -m "$nomodel") ;;
    generate) base=(generate -p hi -m "$nomodel") ;;
    perplexity) base=(perplexity -f /nonexistent/text.txt -m "$nomodel") ;;
    esac
    w="wushkv $cmd: "
    q=("${base[@]}" --kv int2)        # a quantized cache
    pc=("${q[@]}" --kv-quant percentile) # with the percentile quantizer

    # New flags, bad values.
    for v in -1 1.5 x 4k ''; do
        expect_only 2 "${w}--kv-sink: expected an integer >= 0, got '$v'" -- "${q[@]}" --kv-sink "$v"
        expect_only 2 "${w}--kv-recent: expected an integer >= 0, got '$v'" -- "${q[@]}" --kv-recent "$v"
    done
    expect_only 2 "${w}--kv-recent: expected an integer >= 0, got '-8'" -- "${q[@]}" --kv-recent=-8
    expect_only 2 "${w}--kv-sink: missing value" -- "${q[@]}" --kv-sink
    for v in 0 -0.5 1.01 2 nan inf abc 0.5x 1e-60 ''; do
        expect_only 2 "${w}--kv-rho-k: expected a number in (0, 1], got '$v'" -- "${pc[@]}" --kv-rho-k "$v"
        expect_only 2 "${w}--kv-rho-v: expected a number in (0, 1], got '$v'" -- "${pc[@]}" --kv-rho-v "$v"
    done
    expect_only 2 "${w}--kv-rho-v: missing value" -- "${pc[@]}" --kv-rho-v
    for v in 0 0.2 4.5 -1 nan inf abc 1.2x ''; do
        expect_only 2 "${w}--kv-clip: expected a number in [0.25, 4], got '$v'" -- "${q[@]}" --kv-clip "$v"
    done

    # Flags the chosen format does not take.
    f16="applies to a quantized KV cache (--kv int2, int3 or int4), not to f16"
    # (The default is quantized: --kv f16 opts out, and then these are refused.)
    expect_only 2 "${w}--kv-sink $f16" -- "${base[@]}" --kv-sink 4 --kv f16
    expect_only 2 "${w}--kv-swa $f16" -- "${base[@]}" --kv f16 --kv-swa int4
    expect_only 2 "${w}--kv-swa: expected int2, int3 or int4, got 'f16'" -- "${q[@]}" --kv-swa f16
    expect_only 2 "${w}--kv-recent $f16" -- "${base[@]}" --kv f16 --kv-recent 64
    expect_only 2 "${w}--kv-rho-k $f16" -- "${base[@]}" --kv f16 --kv-rho-k 0.9
    expect_only 2 "${w}--kv-quant $f16" -- "${base[@]}" --kv f16 --kv-quant absmax
    expect_only 2 "${w}--kv-group applies to a quantized KV cache (--kv int2, int3 or int4) or to --kv-transform hadamard, not to f16 alone" -- "${base[@]}" --kv f16 --kv-group 64
    expect_only 2 "${w}--kv-rho-k applies to the percentile quantizer (--kv-quant percentile), not to quest" -- "${q[@]}" --kv-rho-k 0.9
    expect_only 2 "${w}--kv-rho-v applies to the percentile quantizer (--kv-quant percentile), not to absmax" -- "${q[@]}" --kv-quant absmax --kv-rho-v 0.9
    expect_only 2 "${w}--kv-rho-k applies to the percentile quantizer (--kv-quant percentile), not to quest" -- "${base[@]}" --kv-rho-k 0.9
    expect_only 2 "${w}--kv-clip $f16" -- "${base[@]}" --kv f16 --kv-clip 1.2
    expect_only 2 "${w}--kv-clip applies to the quest quantizer, not to percentile" -- "${pc[@]}" --kv-clip 1.2
    expect_only 2 "${w}--kv-clip applies to the quest quantizer, not to absmax" -- "${base[@]}" --kv-clip 1.2 --kv-quant absmax

    # The older flags' bad values.
    expect_only 2 "${w}--kv: expected f16, int2, int3 or int4, got 'int5'" -- "${base[@]}" --kv int5
    expect_only 2 "${w}--kv-quant: expected quest, percentile or absmax, got 'nf4'" -- "${q[@]}" --kv-quant nf4
    expect_only 2 "${w}--kv-group: expected 16, 32, 64, 128 or 256, got '48'" -- "${q[@]}" --kv-group 48
    expect_only 2 "${w}--kv-group: expected 16, 32, 64, 128 or 256, got '512'" -- "${q[@]}" --kv-group 512
    expect_only 2 "${w}--kv-transform: expected none, hadamard or wush, got 'x'" -- "${q[@]}" --kv-transform x
    expect_only 2 "${w}--kv-mem: expected a size such as 4096, 256MiB or 2GiB, got '2XB'" -- "${q[@]}" --kv-mem 2XB

    # Accepted (exit 1: the model or text is missing). The default is int2, so the windows are
    # taken (the sidecar comes from the cache); with --kv f16 they are not. Every format takes --kv-mem.
    expect 1 "cannot open /nonexistent/" -- "${base[@]}" --kv-mem 1MiB --kv-sink 8 --kv-recent 16
    expect 1 "cannot open /nonexistent/" -- "${base[@]}" --kv-transform wush
    expect 1 "cannot open /nonexistent/" -- "${q[@]}" --kv-clip 1.5 --kv-quant quest
    expect 1 "cannot open /nonexistent/" -- "${base[@]}" --wush /nonexistent/x.wush --kv-mem 1MiB
    expect 1 "cannot open /nonexistent/" -- "${base[@]}" --kv f16 --kv-mem 1MiB
    expect 1 "cannot open /nonexistent/" -- "${base[@]}" --kv f16 --kv-transform hadamard --kv-group 64
    expect 1 "cannot open /nonexistent/" -- "${pc[@]}" --kv-group 16 --kv-rho-k 1 --kv-rho-v 0.5 --kv-sink 0 --kv-recent 64 --kv-mem 64MiB
done

echo "$pass passed, $fail failed"
[[ $fail -eq 0 ]]
