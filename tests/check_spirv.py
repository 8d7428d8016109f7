#!/usr/bin/env python3
"""Checks every SPIR-V module the build makes: spirv-val --target-env vulkan1.3 on each (when
spirv-val is given), and, since Debian 12's spirv-val (2023.1) does not yet flag it, that no module
reads a texel buffer through a sampled image: an OpTypeSampledImage of an image of Dim Buffer is
what newer validators (the layer under Mesa 25) warn about, and what SPIR-V 1.6 forbids. Shaders
read uniform texel buffers as textureBuffer with samplerless texelFetch
(GL_EXT_samplerless_texture_functions) instead.

usage: check_spirv.py [--spirv-val PATH] MODULE.spv...   Prints each fault; exits 1 on any."""
import struct
import subprocess
import sys

OP_TYPE_IMAGE, OP_TYPE_SAMPLED_IMAGE, DIM_BUFFER, MAGIC = 25, 27, 5, 0x07230203


def sampled_buffer_images(words):
    """The result ids of OpTypeSampledImage whose image type has Dim Buffer."""
    dims, bad = {}, []
    i = 5  # after the header
    while i < len(words):
        count, op = words[i] >> 16, words[i] & 0xFFFF
        if count == 0:
            raise ValueError(f"word {i}: instruction of length 0")
        if op == OP_TYPE_IMAGE:  # result id, sampled type, Dim, ...
            dims[words[i + 1]] = words[i + 3]
        elif op == OP_TYPE_SAMPLED_IMAGE and dims.get(words[i + 2]) == DIM_BUFFER:
            bad.append(words[i + 1])
        i += count
    return bad


def main(argv):
    spirv_val, files = None, []
    it = iter(argv)
    for a in it:
        if a == "--spirv-val":
            spirv_val = next(it)
        else:
            files.append(a)
    if not files:
        print(__doc__.strip().splitlines()[-1], file=sys.stderr)
        return 2
    faults = 0
    for f in files:
        data = open(f, "rb").read()
        if len(data) % 4 or len(data) < 20 or struct.unpack_from("<I", data)[0] != MAGIC:
            print(f"{f}: not a little-endian SPIR-V module", file=sys.stderr)
            faults += 1
            continue
        words = struct.unpack(f"<{len(data) // 4}I", data)
        for rid in sampled_buffer_images(words):
            print(f"{f}: OpTypeSampledImage %{rid} has an image of Dim Buffer "
                  "(read the texel buffer as textureBuffer/utextureBuffer with samplerless texelFetch)",
                  file=sys.stderr)
            faults += 1
        if spirv_val:
            r = subprocess.run([spirv_val, "--target-env", "vulkan1.3", f], capture_output=True, text=True)
            if r.returncode != 0 or r.stdout.strip() or r.stderr.strip():
                print(f"{f}: spirv-val: {(r.stdout + r.stderr).strip()}", file=sys.stderr)
                faults += 1
    print(f"check_spirv: {len(files)} modules, {faults} faults" + ("" if spirv_val else " (no spirv-val)"))
    return 1 if faults else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
