#!/usr/bin/env python3
"""Build step: embeds a file's bytes in a C source as `const char NAME[]` and `const size_t
NAME_len`, so the daemon serves it from the binary (the dashboard page). Usage: embed_file.py IN OUT NAME"""
import sys

src, dst, name = sys.argv[1:4]
data = open(src, "rb").read()
with open(dst, "w") as f:
    f.write(f"/* Generated from {src.split('/')[-1]} by embed_file.py; do not edit. */\n#include <stddef.h>\n")
    f.write(f"const char {name}[] = {{\n")
    for i in range(0, len(data), 16):
        f.write("    " + ", ".join(str(b) for b in data[i:i + 16]) + ",\n")
    f.write("    0};\n")
    f.write(f"const size_t {name}_len = {len(data)};\n")
