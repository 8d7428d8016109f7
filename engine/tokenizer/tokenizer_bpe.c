/* GPT-2 byte-level BPE as llama.cpp does it (llm_tokenizer_bpe_session, unicode.cpp): merges with
 * ranks, the byte-to-unicode mapping, and hand-written pre-tokenizers for the "default", gpt-2,
 * llama3, qwen2 and starcoder regex families. */
#include "tokenizer/tokenizer_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Unicode categories. llama.cpp classifies code points with a generated table (unicode-data.cpp);
 * rather than approximate (and disagree on e.g. CJK punctuation or combining marks) we keep the
 * same data, reduced to what the pre-tokenizers ask: letter (1), number (2), punctuation (3) or
 * anything else (0). Each entry is (first code point << 2 | class) of a run that lasts until the
 * next entry; U+110000 and above are "other". Generated from llama.cpp's unicode_ranges_flags
 * (flag LETTER -> 1, NUMBER -> 2, PUNCTUATION -> 3), adjacent runs of one class merged. */
static const uint32_t k_ucat_runs[1789] = {
    0x0, 0x87, 0x90, 0x97, 0xac, 0xb3, 0xc2, 0xeb, 0xf0, 0xff, 0x105, 0x16f,
    0x178, 0x17f, 0x180, 0x185, 0x1ef, 0x1f0, 0x1f7, 0x1f8, 0x287, 0x288, 0x29f, 0x2a0,
    0x2a9, 0x2af, 0x2b0, 0x2ca, 0x2d0, 0x2d5, 0x2db, 0x2e0, 0x2e6, 0x2e9, 0x2ef, 0x2f2,
    0x2ff, 0x301, 0x35c, 0x361, 0x3dc, 0x3e1, 0xb08, 0xb19, 0xb48, 0xb81, 0xb94, 0xbb1,
    0xbb4, 0xbb9, 0xbbc, 0xdc1, 0xdd4, 0xdd9, 0xde0, 0xde9, 0xdfb, 0xdfd, 0xe00, 0xe19,
    0xe1f, 0xe21, 0xe2c, 0xe31, 0xe34, 0xe39, 0xe88, 0xe8d, 0xfd8, 0xfdd, 0x1208, 0x1229,
    0x14c0, 0x14c5, 0x155c, 0x1565, 0x156b, 0x1581, 0x1627, 0x162c, 0x16fb, 0x16fc, 0x1703, 0x1704,
    0x170f, 0x1710, 0x171b, 0x171c, 0x1741, 0x17ac, 0x17bd, 0x17cf, 0x17d4, 0x1827, 0x182c, 0x1833,
    0x1838, 0x186f, 0x1870, 0x1877, 0x1881, 0x192c, 0x1982, 0x19ab, 0x19b9, 0x19c0, 0x19c5, 0x1b53,
    0x1b55, 0x1b58, 0x1b95, 0x1b9c, 0x1bb9, 0x1bc2, 0x1be9, 0x1bf4, 0x1bfd, 0x1c03, 0x1c38, 0x1c41,
    0x1c44, 0x1c49, 0x1cc0, 0x1d35, 0x1e98, 0x1ec5, 0x1ec8, 0x1f02, 0x1f29, 0x1fac, 0x1fd1, 0x1fd8,
    0x1fdf, 0x1fe9, 0x1fec, 0x2001, 0x2058, 0x2069, 0x206c, 0x2091, 0x2094, 0x20a1, 0x20a4, 0x20c3,
    0x20fc, 0x2101, 0x2164, 0x217b, 0x217c, 0x2181, 0x21ac, 0x21c1, 0x2220, 0x2225, 0x223c, 0x2281,
    0x2328, 0x2411, 0x24e8, 0x24f5, 0x24f8, 0x2541, 0x2544, 0x2561, 0x2588, 0x2593, 0x259a, 0x25c3,
    0x25c5, 0x2604, 0x2615, 0x2634, 0x263d, 0x2644, 0x264d, 0x26a4, 0x26a9, 0x26c4, 0x26c9, 0x26cc,
    0x26d9, 0x26e8, 0x26f5, 0x26f8, 0x2739, 0x273c, 0x2771, 0x2778, 0x277d, 0x2788, 0x279a, 0x27c1,
    0x27c8, 0x27d2, 0x27e8, 0x27f1, 0x27f7, 0x27f8, 0x2815, 0x282c, 0x283d, 0x2844, 0x284d, 0x28a4,
    0x28a9, 0x28c4, 0x28c9, 0x28d0, 0x28d5, 0x28dc, 0x28e1, 0x28e8, 0x2965, 0x2974, 0x2979, 0x297c,
    0x299a, 0x29c0, 0x29c9, 0x29d4, 0x29db, 0x29dc, 0x2a15, 0x2a38, 0x2a3d, 0x2a48, 0x2a4d, 0x2aa4,
    0x2aa9, 0x2ac4, 0x2ac9, 0x2ad0, 0x2ad5, 0x2ae8, 0x2af5, 0x2af8, 0x2b41, 0x2b44, 0x2b81, 0x2b88,
    0x2b9a, 0x2bc3, 0x2bc4, 0x2be5, 0x2be8, 0x2c15, 0x2c34, 0x2c3d, 0x2c44, 0x2c4d, 0x2ca4, 0x2ca9,
    0x2cc4, 0x2cc9, 0x2cd0, 0x2cd5, 0x2ce8, 0x2cf5, 0x2cf8, 0x2d71, 0x2d78, 0x2d7d, 0x2d88, 0x2d9a,
    0x2dc0, 0x2dc5, 0x2dca, 0x2de0, 0x2e0d, 0x2e10, 0x2e15, 0x2e2c, 0x2e39, 0x2e44, 0x2e49, 0x2e58,
    0x2e65, 0x2e6c, 0x2e71, 0x2e74, 0x2e79, 0x2e80, 0x2e8d, 0x2e94, 0x2ea1, 0x2eac, 0x2eb9, 0x2ee8,
    0x2f41, 0x2f44, 0x2f9a, 0x2fcc, 0x3015, 0x3034, 0x3039, 0x3044, 0x3049, 0x30a4, 0x30a9, 0x30e8,
    0x30f5, 0x30f8, 0x3161, 0x316c, 0x3175, 0x3178, 0x3181, 0x3188, 0x319a, 0x31c0, 0x31df, 0x31e2,
    0x31fc, 0x3201, 0x3204, 0x3213, 0x3215, 0x3234, 0x3239, 0x3244, 0x3249, 0x32a4, 0x32a9, 0x32d0,
    0x32d5, 0x32e8, 0x32f5, 0x32f8, 0x3375, 0x337c, 0x3381, 0x3388, 0x339a, 0x33c0, 0x33c5, 0x33cc,
    0x3411, 0x3434, 0x3439, 0x3444, 0x3449, 0x34ec, 0x34f5, 0x34f8, 0x3539, 0x353c, 0x3551, 0x355c,
    0x3562, 0x357d, 0x3588, 0x359a, 0x35e4, 0x35e9, 0x3600, 0x3615, 0x365c, 0x3669, 0x36c8, 0x36cd,
    0x36f0, 0x36f5, 0x36f8, 0x3701, 0x371c, 0x379a, 0x37c0, 0x37d3, 0x37d4, 0x3805, 0x38c4, 0x38c9,
    0x38d0, 0x3901, 0x391c, 0x393f, 0x3942, 0x396b, 0x3970, 0x3a05, 0x3a0c, 0x3a11, 0x3a14, 0x3a19,
    0x3a2c, 0x3a31, 0x3a90, 0x3a95, 0x3a98, 0x3a9d, 0x3ac4, 0x3ac9, 0x3ad0, 0x3af5, 0x3af8, 0x3b01,
    0x3b14, 0x3b19, 0x3b1c, 0x3b42, 0x3b68, 0x3b71, 0x3b80, 0x3c01, 0x3c04, 0x3c13, 0x3c4c, 0x3c53,
    0x3c54, 0x3c82, 0x3cd0, 0x3ceb, 0x3cf8, 0x3d01, 0x3d20, 0x3d25, 0x3db4, 0x3e17, 0x3e18, 0x3e21,
    0x3e34, 0x3f43, 0x3f54, 0x3f67, 0x3f6c, 0x4001, 0x40ac, 0x40fd, 0x4102, 0x412b, 0x4141, 0x4158,
    0x4169, 0x4178, 0x4185, 0x4188, 0x4195, 0x419c, 0x41b9, 0x41c4, 0x41d5, 0x4208, 0x4239, 0x423c,
    0x4242, 0x4268, 0x4281, 0x4318, 0x431d, 0x4320, 0x4335, 0x4338, 0x4341, 0x43ef, 0x43f1, 0x4924,
    0x4929, 0x4938, 0x4941, 0x495c, 0x4961, 0x4964, 0x4969, 0x4978, 0x4981, 0x4a24, 0x4a29, 0x4a38,
    0x4a41, 0x4ac4, 0x4ac9, 0x4ad8, 0x4ae1, 0x4afc, 0x4b01, 0x4b04, 0x4b09, 0x4b18, 0x4b21, 0x4b5c,
    0x4b61, 0x4c44, 0x4c49, 0x4c58, 0x4c61, 0x4d6c, 0x4d83, 0x4da6, 0x4df4, 0x4e01, 0x4e40, 0x4e81,
    0x4fd8, 0x4fe1, 0x4ff8, 0x5003, 0x5005, 0x59b4, 0x59bb, 0x59bd, 0x5a00, 0x5a05, 0x5a6f, 0x5a74,
    0x5a81, 0x5baf, 0x5bba, 0x5bc5, 0x5be4, 0x5c01, 0x5c48, 0x5c7d, 0x5cc8, 0x5cd7, 0x5cdc, 0x5d01,
    0x5d48, 0x5d81, 0x5db4, 0x5db9, 0x5dc4, 0x5e01, 0x5ed0, 0x5f53, 0x5f5d, 0x5f63, 0x5f6c, 0x5f71,
    0x5f74, 0x5f82, 0x5fa8, 0x5fc2, 0x5fe8, 0x6003, 0x602c, 0x6042, 0x6068, 0x6081, 0x61e4, 0x6201,
    0x6214, 0x621d, 0x62a4, 0x62a9, 0x62ac, 0x62c1, 0x63d8, 0x6401, 0x647c, 0x6513, 0x651a, 0x6541,
    0x65b8, 0x65c1, 0x65d4, 0x6601, 0x66b0, 0x66c1, 0x6728, 0x6742, 0x676c, 0x6801, 0x685c, 0x687b,
    0x6881, 0x6954, 0x6a02, 0x6a28, 0x6a42, 0x6a68, 0x6a83, 0x6a9d, 0x6aa3, 0x6ab8, 0x6c15, 0x6cd0,
    0x6d15, 0x6d34, 0x6d42, 0x6d6b, 0x6d84, 0x6df7, 0x6dfc, 0x6e0d, 0x6e84, 0x6eb9, 0x6ec2, 0x6ee9,
    0x6f98, 0x6ff3, 0x7001, 0x7090, 0x70ef, 0x7102, 0x7128, 0x7135, 0x7142, 0x7169, 0x71fb, 0x7201,
    0x7224, 0x7241, 0x72ec, 0x72f5, 0x7303, 0x7320, 0x734f, 0x7350, 0x73a5, 0x73b4, 0x73b9, 0x73d0,
    0x73d5, 0x73dc, 0x73e9, 0x73ec, 0x7401, 0x7700, 0x7801, 0x7c58, 0x7c61, 0x7c78, 0x7c81, 0x7d18,
    0x7d21, 0x7d38, 0x7d41, 0x7d60, 0x7d65, 0x7d68, 0x7d6d, 0x7d70, 0x7d75, 0x7d78, 0x7d7d, 0x7df8,
    0x7e01, 0x7ed4, 0x7ed9, 0x7ef4, 0x7ef9, 0x7efc, 0x7f09, 0x7f14, 0x7f19, 0x7f34, 0x7f41, 0x7f50,
    0x7f59, 0x7f70, 0x7f81, 0x7fb4, 0x7fc9, 0x7fd4, 0x7fd9, 0x7ff4, 0x8043, 0x80a0, 0x80c3, 0x8110,
    0x8117, 0x8148, 0x814f, 0x817c, 0x81c2, 0x81c5, 0x81c8, 0x81d2, 0x81e8, 0x81f7, 0x81fd, 0x8202,
    0x8228, 0x8237, 0x823c, 0x8241, 0x8274, 0x8409, 0x840c, 0x841d, 0x8420, 0x8429, 0x8450, 0x8455,
    0x8458, 0x8465, 0x8478, 0x8491, 0x8494, 0x8499, 0x849c, 0x84a1, 0x84a4, 0x84a9, 0x84b8, 0x84bd,
    0x84e8, 0x84f1, 0x8500, 0x8515, 0x8528, 0x8539, 0x853c, 0x8542, 0x860d, 0x8616, 0x8628, 0x8c23,
    0x8c30, 0x8ca7, 0x8cac, 0x9182, 0x9270, 0x93aa, 0x9400, 0x9da3, 0x9dda, 0x9e50, 0x9f17, 0x9f1c,
    0x9f9b, 0x9fc0, 0xa60f, 0xa664, 0xa763, 0xa770, 0xa7f3, 0xa7f8, 0xb001, 0xb394, 0xb3ad, 0xb3bc,
    0xb3c9, 0xb3d0, 0xb3e7, 0xb3f6, 0xb3fb, 0xb401, 0xb498, 0xb49d, 0xb4a0, 0xb4b5, 0xb4b8, 0xb4c1,
    0xb5a0, 0xb5bd, 0xb5c3, 0xb5c4, 0xb601, 0xb65c, 0xb681, 0xb69c, 0xb6a1, 0xb6bc, 0xb6c1, 0xb6dc,
    0xb6e1, 0xb6fc, 0xb701, 0xb71c, 0xb721, 0xb73c, 0xb741, 0xb75c, 0xb761, 0xb77c, 0xb803, 0xb8bd,
    0xb8c3, 0xb940, 0xb94b, 0xb978, 0xc007, 0xc010, 0xc015, 0xc01e, 0xc023, 0xc048, 0xc053, 0xc080,
    0xc086, 0xc0a8, 0xc0c3, 0xc0c5, 0xc0d8, 0xc0e2, 0xc0ed, 0xc0f7, 0xc0f8, 0xc105, 0xc25c, 0xc275,
    0xc283, 0xc285, 0xc3ef, 0xc3f1, 0xc400, 0xc415, 0xc4c0, 0xc4c5, 0xc63c, 0xc64a, 0xc658, 0xc681,
    0xc700, 0xc7c1, 0xc800, 0xc882, 0xc8a8, 0xc922, 0xc940, 0xc946, 0xc980, 0xca02, 0xca28, 0xcac6,
    0xcb00, 0xd001, 0x13700, 0x13801, 0x29234, 0x29341, 0x293fb, 0x29401, 0x29837, 0x29841, 0x29882, 0x298a9,
    0x298b0, 0x29901, 0x299bc, 0x299cf, 0x299d0, 0x299fb, 0x299fd, 0x29a78, 0x29a81, 0x29b9a, 0x29bc0, 0x29bcb,
    0x29be0, 0x29c5d, 0x29c80, 0x29c89, 0x29e24, 0x29e2d, 0x29f2c, 0x29f41, 0x29f48, 0x29f4d, 0x29f50, 0x29f55,
    0x29f68, 0x29fc9, 0x2a008, 0x2a00d, 0x2a018, 0x2a01d, 0x2a02c, 0x2a031, 0x2a08c, 0x2a0c2, 0x2a0d8, 0x2a101,
    0x2a1d3, 0x2a1e0, 0x2a209, 0x2a2d0, 0x2a33b, 0x2a342, 0x2a368, 0x2a3c9, 0x2a3e3, 0x2a3ed, 0x2a3f3, 0x2a3f5,
    0x2a3fc, 0x2a402, 0x2a429, 0x2a498, 0x2a4bb, 0x2a4c1, 0x2a51c, 0x2a57f, 0x2a581, 0x2a5f4, 0x2a611, 0x2a6cc,
    0x2a707, 0x2a738, 0x2a73d, 0x2a742, 0x2a768, 0x2a77b, 0x2a781, 0x2a794, 0x2a799, 0x2a7c2, 0x2a7e9, 0x2a7fc,
    0x2a801, 0x2a8a4, 0x2a901, 0x2a90c, 0x2a911, 0x2a930, 0x2a942, 0x2a968, 0x2a973, 0x2a981, 0x2a9dc, 0x2a9e9,
    0x2a9ec, 0x2a9f9, 0x2aac0, 0x2aac5, 0x2aac8, 0x2aad5, 0x2aadc, 0x2aae5, 0x2aaf8, 0x2ab01, 0x2ab04, 0x2ab09,
    0x2ab0c, 0x2ab6d, 0x2ab7b, 0x2ab81, 0x2abac, 0x2abc3, 0x2abc9, 0x2abd4, 0x2ac05, 0x2ac1c, 0x2ac25, 0x2ac3c,
    0x2ac45, 0x2ac5c, 0x2ac81, 0x2ac9c, 0x2aca1, 0x2acbc, 0x2acc1, 0x2ad6c, 0x2ad71, 0x2ada8, 0x2adc1, 0x2af8c,
    0x2afaf, 0x2afb0, 0x2afc2, 0x2afe8, 0x2b001, 0x35e90, 0x35ec1, 0x35f1c, 0x35f2d, 0x35ff0, 0x3e401, 0x3e9b8,
    0x3e9c1, 0x3eb68, 0x3ec01, 0x3ec1c, 0x3ec4d, 0x3ec60, 0x3ec75, 0x3ec78, 0x3ec7d, 0x3eca4, 0x3eca9, 0x3ecdc,
    0x3ece1, 0x3ecf4, 0x3ecf9, 0x3ecfc, 0x3ed01, 0x3ed08, 0x3ed0d, 0x3ed14, 0x3ed19, 0x3eec8, 0x3ef4d, 0x3f4fb,
    0x3f500, 0x3f541, 0x3f640, 0x3f649, 0x3f720, 0x3f7c1, 0x3f7f0, 0x3f843, 0x3f868, 0x3f8c3, 0x3f94c, 0x3f953,
    0x3f988, 0x3f98f, 0x3f990, 0x3f9a3, 0x3f9a4, 0x3f9ab, 0x3f9b0, 0x3f9c1, 0x3f9d4, 0x3f9d9, 0x3fbf4, 0x3fc07,
    0x3fc10, 0x3fc17, 0x3fc2c, 0x3fc33, 0x3fc42, 0x3fc6b, 0x3fc70, 0x3fc7f, 0x3fc85, 0x3fcef, 0x3fcf8, 0x3fcff,
    0x3fd00, 0x3fd05, 0x3fd6f, 0x3fd70, 0x3fd77, 0x3fd78, 0x3fd7f, 0x3fd99, 0x3fefc, 0x3ff09, 0x3ff20, 0x3ff29,
    0x3ff40, 0x3ff49, 0x3ff60, 0x3ff69, 0x3ff74, 0x40001, 0x40030, 0x40035, 0x4009c, 0x400a1, 0x400ec, 0x400f1,
    0x400f8, 0x400fd, 0x40138, 0x40141, 0x40178, 0x40201, 0x403ec, 0x40403, 0x4040c, 0x4041e, 0x404d0, 0x40502,
    0x405e4, 0x4062a, 0x40630, 0x40a01, 0x40a74, 0x40a81, 0x40b44, 0x40b86, 0x40bf0, 0x40c01, 0x40c82, 0x40c90,
    0x40cb5, 0x40d06, 0x40d09, 0x40d2a, 0x40d2c, 0x40d41, 0x40dd8, 0x40e01, 0x40e78, 0x40e7f, 0x40e81, 0x40f10,
    0x40f21, 0x40f43, 0x40f46, 0x40f58, 0x41001, 0x41278, 0x41282, 0x412a8, 0x412c1, 0x41350, 0x41361, 0x413f0,
    0x41401, 0x414a0, 0x414c1, 0x41590, 0x415bf, 0x415c1, 0x415ec, 0x415f1, 0x4162c, 0x41631, 0x4164c, 0x41651,
    0x41658, 0x4165d, 0x41688, 0x4168d, 0x416c8, 0x416cd, 0x416e8, 0x416ed, 0x416f4, 0x41801, 0x41cdc, 0x41d01,
    0x41d58, 0x41d81, 0x41da0, 0x41e01, 0x41e18, 0x41e1d, 0x41ec4, 0x41ec9, 0x41eec, 0x42001, 0x42018, 0x42021,
    0x42024, 0x42029, 0x420d8, 0x420dd, 0x420e4, 0x420f1, 0x420f4, 0x420fd, 0x42158, 0x4215f, 0x42162, 0x42181,
    0x421dc, 0x421e6, 0x42201, 0x4227c, 0x4229e, 0x422c0, 0x42381, 0x423cc, 0x423d1, 0x423d8, 0x423ee, 0x42401,
    0x4245a, 0x42470, 0x4247f, 0x42481, 0x424e8, 0x424ff, 0x42500, 0x42601, 0x426e0, 0x426f2, 0x426f9, 0x42702,
    0x42740, 0x4274a, 0x42801, 0x42804, 0x42841, 0x42850, 0x42855, 0x42860, 0x42865, 0x428d8, 0x42902, 0x42924,
    0x42943, 0x42964, 0x42981, 0x429f6, 0x429ff, 0x42a01, 0x42a76, 0x42a80, 0x42b01, 0x42b20, 0x42b25, 0x42b94,
    0x42bae, 0x42bc3, 0x42bdc, 0x42c01, 0x42cd8, 0x42ce7, 0x42d01, 0x42d58, 0x42d62, 0x42d81, 0x42dcc, 0x42de2,
    0x42e01, 0x42e48, 0x42e67, 0x42e74, 0x42ea6, 0x42ec0, 0x43001, 0x43124, 0x43201, 0x432cc, 0x43301, 0x433cc,
    0x433ea, 0x43401, 0x43490, 0x434c2, 0x434e8, 0x43982, 0x439fc, 0x43a01, 0x43aa8, 0x43ab7, 0x43ab8, 0x43ac1,
    0x43ac8, 0x43c01, 0x43c76, 0x43c9d, 0x43ca0, 0x43cc1, 0x43d18, 0x43d46, 0x43d57, 0x43d68, 0x43dc1, 0x43e08,
    0x43e1b, 0x43e28, 0x43ec1, 0x43f16, 0x43f30, 0x43f81, 0x43fdc, 0x4400d, 0x440e0, 0x4411f, 0x44138, 0x4414a,
    0x441c0, 0x441c5, 0x441cc, 0x441d5, 0x441d8, 0x4420d, 0x442c0, 0x442ef, 0x442f4, 0x442fb, 0x44308, 0x44341,
    0x443a4, 0x443c2, 0x443e8, 0x4440d, 0x4449c, 0x444da, 0x44503, 0x44511, 0x44514, 0x4451d, 0x44520, 0x44541,
    0x445cc, 0x445d3, 0x445d9, 0x445dc, 0x4460d, 0x446cc, 0x44705, 0x44717, 0x44724, 0x44737, 0x44738, 0x44742,
    0x44769, 0x4476f, 0x44771, 0x44777, 0x44780, 0x44786, 0x447d4, 0x44801, 0x44848, 0x4484d, 0x448b0, 0x448e3,
    0x448f8, 0x448fd, 0x44904, 0x44a01, 0x44a1c, 0x44a21, 0x44a24, 0x44a29, 0x44a38, 0x44a3d, 0x44a78, 0x44a7d,
    0x44aa7, 0x44aa8, 0x44ac1, 0x44b7c, 0x44bc2, 0x44be8, 0x44c15, 0x44c34, 0x44c3d, 0x44c44, 0x44c4d, 0x44ca4,
    0x44ca9, 0x44cc4, 0x44cc9, 0x44cd0, 0x44cd5, 0x44ce8, 0x44cf5, 0x44cf8, 0x44d41, 0x44d44, 0x44d75, 0x44d88,
    0x45001, 0x450d4, 0x4511d, 0x4512f, 0x45142, 0x4516b, 0x45170, 0x45177, 0x45178, 0x4517d, 0x45188, 0x45201,
    0x452c0, 0x45311, 0x4531b, 0x4531d, 0x45320, 0x45342, 0x45368, 0x45601, 0x456bc, 0x45707, 0x45761, 0x45770,
    0x45801, 0x458c0, 0x45907, 0x45911, 0x45914, 0x45942, 0x45968, 0x45983, 0x459b4, 0x45a01, 0x45aac, 0x45ae1,
    0x45ae7, 0x45ae8, 0x45b02, 0x45b28, 0x45c01, 0x45c6c, 0x45cc2, 0x45cf3, 0x45cfc, 0x45d01, 0x45d1c, 0x46001,
    0x460b0, 0x460ef, 0x460f0, 0x46281, 0x46382, 0x463cc, 0x463fd, 0x4641c, 0x46425, 0x46428, 0x46431, 0x46450,
    0x46455, 0x4645c, 0x46461, 0x464c0, 0x464fd, 0x46500, 0x46505, 0x46508, 0x46513, 0x4651c, 0x46542, 0x46568,
    0x46681, 0x466a0, 0x466a9, 0x46744, 0x46785, 0x4678b, 0x4678d, 0x46790, 0x46801, 0x46804, 0x4682d, 0x468cc,
    0x468e9, 0x468ec, 0x468ff, 0x4691c, 0x46941, 0x46944, 0x46971, 0x46a28, 0x46a6b, 0x46a75, 0x46a7b, 0x46a8c,
    0x46ac1, 0x46be4, 0x46c03, 0x46c28, 0x47001, 0x47024, 0x47029, 0x470bc, 0x47101, 0x47107, 0x47118, 0x47142,
    0x471b4, 0x471c3, 0x471c9, 0x47240, 0x47401, 0x4741c, 0x47421, 0x47428, 0x4742d, 0x474c4, 0x47519, 0x4751c,
    0x47542, 0x47568, 0x47581, 0x47598, 0x4759d, 0x475a4, 0x475a9, 0x47628, 0x47661, 0x47664, 0x47682, 0x476a8,
    0x47b81, 0x47bcc, 0x47bdf, 0x47be4, 0x47c09, 0x47c0c, 0x47c11, 0x47c44, 0x47c49, 0x47cd0, 0x47d0f, 0x47d42,
    0x47d68, 0x47ec1, 0x47ec4, 0x47f02, 0x47f54, 0x47fff, 0x48001, 0x48e68, 0x49002, 0x491bc, 0x491c3, 0x491d4,
    0x49201, 0x49510, 0x4be41, 0x4bfc7, 0x4bfcc, 0x4c001, 0x4d0c0, 0x4d105, 0x4d11c, 0x51001, 0x5191c, 0x5a001,
    0x5a8e4, 0x5a901, 0x5a97c, 0x5a982, 0x5a9a8, 0x5a9bb, 0x5a9c1, 0x5aafc, 0x5ab02, 0x5ab28, 0x5ab41, 0x5abb8,
    0x5abd7, 0x5abd8, 0x5ac01, 0x5acc0, 0x5acdf, 0x5acf0, 0x5ad01, 0x5ad13, 0x5ad14, 0x5ad42, 0x5ad68, 0x5ad6e,
    0x5ad88, 0x5ad8d, 0x5ade0, 0x5adf5, 0x5ae40, 0x5b901, 0x5ba02, 0x5ba5f, 0x5ba6c, 0x5bc01, 0x5bd2c, 0x5bd41,
    0x5bd44, 0x5be4d, 0x5be80, 0x5bf81, 0x5bf8b, 0x5bf8d, 0x5bf90, 0x5c001, 0x61fe0, 0x62001, 0x63358, 0x63401,
    0x63424, 0x6bfc1, 0x6bfd0, 0x6bfd5, 0x6bff0, 0x6bff5, 0x6bffc, 0x6c001, 0x6c48c, 0x6c4c9, 0x6c4cc, 0x6c541,
    0x6c54c, 0x6c555, 0x6c558, 0x6c591, 0x6c5a0, 0x6c5c1, 0x6cbf0, 0x6f001, 0x6f1ac, 0x6f1c1, 0x6f1f4, 0x6f201,
    0x6f224, 0x6f241, 0x6f268, 0x6f27f, 0x6f280, 0x74b02, 0x74b50, 0x74b82, 0x74bd0, 0x74d82, 0x74de4, 0x75001,
    0x75154, 0x75159, 0x75274, 0x75279, 0x75280, 0x75289, 0x7528c, 0x75295, 0x7529c, 0x752a5, 0x752b4, 0x752b9,
    0x752e8, 0x752ed, 0x752f0, 0x752f5, 0x75310, 0x75315, 0x75418, 0x7541d, 0x7542c, 0x75435, 0x75454, 0x75459,
    0x75474, 0x75479, 0x754e8, 0x754ed, 0x754fc, 0x75501, 0x75514, 0x75519, 0x7551c, 0x75529, 0x75544, 0x75549,
    0x75a98, 0x75aa1, 0x75b04, 0x75b09, 0x75b6c, 0x75b71, 0x75bec, 0x75bf1, 0x75c54, 0x75c59, 0x75cd4, 0x75cd9,
    0x75d3c, 0x75d41, 0x75dbc, 0x75dc1, 0x75e24, 0x75e29, 0x75ea4, 0x75ea9, 0x75f0c, 0x75f11, 0x75f30, 0x75f3a,
    0x76000, 0x76a1f, 0x76a30, 0x77c01, 0x77c7c, 0x77c95, 0x77cac, 0x780c1, 0x781b8, 0x78401, 0x784b4, 0x784dd,
    0x784f8, 0x78502, 0x78528, 0x78539, 0x7853c, 0x78a41, 0x78ab8, 0x78b01, 0x78bb0, 0x78bc2, 0x78be8, 0x79341,
    0x793b0, 0x793c2, 0x793e8, 0x79f81, 0x79f9c, 0x79fa1, 0x79fb0, 0x79fb5, 0x79fbc, 0x79fc1, 0x79ffc, 0x7a001,
    0x7a314, 0x7a31e, 0x7a340, 0x7a401, 0x7a510, 0x7a52d, 0x7a530, 0x7a542, 0x7a568, 0x7a57b, 0x7a580, 0x7b1c6,
    0x7b2b0, 0x7b2b6, 0x7b2c0, 0x7b2c6, 0x7b2d4, 0x7b406, 0x7b4b8, 0x7b4be, 0x7b4f8, 0x7b801, 0x7b810, 0x7b815,
    0x7b880, 0x7b885, 0x7b88c, 0x7b891, 0x7b894, 0x7b89d, 0x7b8a0, 0x7b8a5, 0x7b8cc, 0x7b8d1, 0x7b8e0, 0x7b8e5,
    0x7b8e8, 0x7b8ed, 0x7b8f0, 0x7b909, 0x7b90c, 0x7b91d, 0x7b920, 0x7b925, 0x7b928, 0x7b92d, 0x7b930, 0x7b935,
    0x7b940, 0x7b945, 0x7b94c, 0x7b951, 0x7b954, 0x7b95d, 0x7b960, 0x7b965, 0x7b968, 0x7b96d, 0x7b970, 0x7b975,
    0x7b978, 0x7b97d, 0x7b980, 0x7b985, 0x7b98c, 0x7b991, 0x7b994, 0x7b99d, 0x7b9ac, 0x7b9b1, 0x7b9cc, 0x7b9d1,
    0x7b9e0, 0x7b9e5, 0x7b9f4, 0x7b9f9, 0x7b9fc, 0x7ba01, 0x7ba28, 0x7ba2d, 0x7ba70, 0x7ba85, 0x7ba90, 0x7ba95,
    0x7baa8, 0x7baad, 0x7baf0, 0x7c402, 0x7c434, 0x7efc2, 0x7efe8, 0x80001, 0xa9b80, 0xa9c01, 0xadce8, 0xadd01,
    0xae078, 0xae081, 0xb3a88, 0xb3ac1, 0xbaf84, 0xbafc1, 0xbb978, 0xbe001, 0xbe878, 0xc0001, 0xc4d2c, 0xc4d41,
    0xc8ec0,
};

enum { UC_OTHER = 0, UC_LETTER = 1, UC_NUMBER = 2, UC_PUNCT = 3 };

static int ucat(uint32_t cpt) {
    if (cpt >= 0x110000) return UC_OTHER;
    size_t lo = 0, hi = sizeof k_ucat_runs / sizeof k_ucat_runs[0]; /* last run starting <= cpt */
    while (hi - lo > 1) {
        size_t mid = (lo + hi) / 2;
        if ((k_ucat_runs[mid] >> 2) <= cpt) lo = mid;
        else hi = mid;
    }
    return (int)(k_ucat_runs[lo] & 3);
}

/* llama.cpp's unicode_set_whitespace (\s). */
static bool is_space(uint32_t c) {
    return (c >= 0x09 && c <= 0x0D) || c == 0x20 || c == 0x85 || c == 0xA0 || c == 0x1680 ||
           (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F ||
           c == 0x3000;
}

/* unicode_cpt_flags of a position: `in` is as_uint() != 0, false only outside the chunk. */
typedef struct { bool in, letter, number, space; } cflags;

#define OUT_OF_RANGE 0xFFFFFFFFu

typedef struct {
    const uint32_t *cpts;
    size_t ini, end;
} chunk_view;

static uint32_t get_cpt(const chunk_view *v, size_t p) {
    return p >= v->ini && p < v->end ? v->cpts[p] : OUT_OF_RANGE;
}

static cflags get_flags(const chunk_view *v, size_t p) {
    cflags f = {false, false, false, false};
    if (p < v->ini || p >= v->end) return f;
    uint32_t c = v->cpts[p];
    int k = ucat(c);
    f.in = true;
    f.letter = k == UC_LETTER;
    f.number = k == UC_NUMBER;
    f.space = is_space(c);
    return f;
}

/* Lists of word lengths in code points (llama.cpp's bpe_offsets). */
typedef struct { size_t *v; size_t n, cap; bool oom; } offs;

static void offs_push(offs *o, size_t len) {
    if (!len || o->oom) return;
    if (o->n == o->cap) {
        size_t cap = o->cap ? o->cap * 2 : 64;
        size_t *v = realloc(o->v, cap * sizeof *v);
        if (!v) { o->oom = true; return; }
        o->v = v; o->cap = cap;
    }
    o->v[o->n++] = len;
}

/* _add_token: emits [prev_end, end) and returns its length. */
typedef struct { offs *o; size_t prev_end; } emitter;
static size_t emit(emitter *e, size_t end) {
    size_t len = end - e->prev_end;
    offs_push(e->o, len);
    e->prev_end = end;
    return len;
}

static uint32_t lower_ascii(uint32_t c) { return c >= 'A' && c <= 'Z' ? c + 32 : c; }

/* 's|'t|'re|'ve|'m|'ll|'d (case-insensitive for llama3/qwen2): returns the match length or 0.
 * ASCII folding is enough: no other code point lowercases to one of these letters. */
static size_t contraction(const chunk_view *v, size_t pos, bool fold) {
    if (get_cpt(v, pos) != '\'' || pos + 1 >= v->end) return 0;
    uint32_t a = get_cpt(v, pos + 1);
    if (fold) a = lower_ascii(a);
    if (a == 's' || a == 't' || a == 'm' || a == 'd') return 2;
    if (pos + 2 < v->end) {
        uint32_t b = get_cpt(v, pos + 2);
        if (fold) b = lower_ascii(b);
        if ((a == 'r' && b == 'e') || (a == 'v' && b == 'e') || (a == 'l' && b == 'l')) return 3;
    }
    return 0;
}

/* \s+(?!\S) then \s+ : shared tail of all three custom splitters. Returns false if no whitespace. */
static bool split_spaces(const chunk_view *v, size_t *pos, emitter *e, bool newlines) {
    size_t nws = 0, last_rn = 0;
    while (get_flags(v, *pos + nws).space) {
        uint32_t c = get_cpt(v, *pos + nws);
        if (c == '\r' || c == '\n') last_rn = *pos + nws + 1;
        nws++;
    }
    if (newlines && last_rn > 0) { /* \s*[\r\n]+ */
        *pos = last_rn;
        emit(e, *pos);
        return true;
    }
    if (nws > 1 && get_cpt(v, *pos + nws) != OUT_OF_RANGE) {
        *pos += nws - 1;
        emit(e, *pos);
        return true;
    }
    if (nws > 0) {
        *pos += nws;
        emit(e, *pos);
        return true;
    }
    return false;
}

/* unicode_regex_split_custom_gpt2:
 * 's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+ */
static void split_gpt2(const chunk_view *v, offs *o) {
    emitter e = {o, v->ini};
    for (size_t pos = v->ini; pos < v->end;) {
        uint32_t cpt = get_cpt(v, pos);
        cflags f = get_flags(v, pos);
        size_t c = contraction(v, pos, false);
        if (c) { pos += emit(&e, pos + c); continue; }
        cflags f2 = cpt == ' ' ? get_flags(v, pos + 1) : f;
        if (f2.letter || f2.number) {
            bool letter = f2.letter;
            pos += cpt == ' ';
            while (letter ? f2.letter : f2.number) f2 = get_flags(v, ++pos);
            emit(&e, pos);
            continue;
        }
        if (!(f2.space || f2.letter || f2.number) && f2.in) {
            pos += cpt == ' ';
            while (!(f2.space || f2.letter || f2.number) && f2.in) f2 = get_flags(v, ++pos);
            emit(&e, pos);
            continue;
        }
        if (split_spaces(v, &pos, &e, false)) continue;
        emit(&e, ++pos);
    }
}

/* unicode_regex_split_custom_llama3 (digits = 3) and _qwen2 (digits = 1):
 * (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,digits}| ?[^\s\p{L}\p{N}]+[\r\n]*|
 * \s*[\r\n]+|\s+(?!\S)|\s+ */
static void split_llama3(const chunk_view *v, offs *o, size_t digits) {
    emitter e = {o, v->ini};
    for (size_t pos = v->ini; pos < v->end;) {
        uint32_t cpt = get_cpt(v, pos);
        cflags f = get_flags(v, pos);
        size_t c = contraction(v, pos, true);
        if (c) { pos += emit(&e, pos + c); continue; }
        if (!(cpt == '\r' || cpt == '\n' || f.number) && (f.letter || get_flags(v, pos + 1).letter)) {
            pos++;
            while (get_flags(v, pos).letter) pos++;
            emit(&e, pos);
            continue;
        }
        if (f.number) {
            size_t ini = pos;
            while (get_flags(v, pos).number) {
                if (++pos - ini >= digits) {
                    emit(&e, pos);
                    ini = pos;
                }
            }
            emit(&e, pos);
            continue;
        }
        cflags f2 = cpt == ' ' ? get_flags(v, pos + 1) : f;
        if (!(f2.space || f2.letter || f2.number) && f.in) {
            pos += cpt == ' ';
            while (!(f2.space || f2.letter || f2.number) && f2.in) f2 = get_flags(v, ++pos);
            uint32_t c2 = get_cpt(v, pos);
            while (c2 == '\r' || c2 == '\n') c2 = get_cpt(v, ++pos);
            emit(&e, pos);
            continue;
        }
        if (split_spaces(v, &pos, &e, true)) continue;
        emit(&e, ++pos);
    }
}

/* Passes that llama.cpp runs through std::regex on its "collapsed" text. Each reduces to cutting
 * a chunk at the edges of runs of one predicate (matches and the gaps between them both become
 * words). */
typedef enum { PRED_PUNCT_RUN, PRED_NUMBER_RUN, PRED_NUMBER_EACH, PRED_DIGIT3 } pred_kind;

/* [\p{P}\$\+<=>\^~\|] over collapsed text: every ASCII punctuation/symbol except '`', and
 * non-ASCII code points of category P. */
static bool is_punct_set(uint32_t c) {
    if (c < 128) return (c >= 0x21 && c <= 0x2F) || (c >= 0x3A && c <= 0x40) || (c >= 0x5B && c <= 0x5F) ||
                        (c >= 0x7B && c <= 0x7E);
    return !is_space(c) && ucat(c) == UC_PUNCT;
}

static bool is_num(uint32_t c) { return !is_space(c) && ucat(c) == UC_NUMBER; }
static bool is_digit(uint32_t c) { return c >= '0' && c <= '9'; }

static void split_pred(const chunk_view *v, offs *o, pred_kind k) {
    size_t start = v->ini;
    for (size_t p = v->ini; p < v->end;) {
        size_t mlen = 0; /* length of a regex match at p */
        const uint32_t *c = v->cpts;
        if (k == PRED_DIGIT3) {
            if (p + 3 <= v->end && is_digit(c[p]) && is_digit(c[p + 1]) && is_digit(c[p + 2])) mlen = 3;
        } else if (k == PRED_NUMBER_EACH) {
            mlen = is_num(c[p]);
        } else {
            bool (*in)(uint32_t) = k == PRED_PUNCT_RUN ? is_punct_set : is_num;
            while (p + mlen < v->end && in(c[p + mlen])) mlen++;
        }
        if (!mlen) { p++; continue; }
        offs_push(o, p - start);
        offs_push(o, mlen);
        p += mlen;
        start = p;
    }
    offs_push(o, v->end - start);
}

typedef enum { PASS_GPT2, PASS_LLAMA3, PASS_QWEN2, PASS_PUNCT, PASS_NUMRUN, PASS_NUMEACH, PASS_DIGIT3 } pass_kind;

/* The regex lists of llm_tokenizer_bpe for the pre-tokenizers we support. */
static int passes_for(wk_bpe_pre pre, pass_kind *p) {
    switch (pre) {
    case WK_PRE_GPT2: p[0] = PASS_GPT2; return 1;
    case WK_PRE_LLAMA3: p[0] = PASS_LLAMA3; return 1;
    case WK_PRE_QWEN2: p[0] = PASS_QWEN2; return 1;
    case WK_PRE_STARCODER: p[0] = PASS_NUMEACH; p[1] = PASS_GPT2; return 2;
    case WK_PRE_DEFAULT: break;
    }
    p[0] = PASS_PUNCT; p[1] = PASS_GPT2; p[2] = PASS_NUMRUN; p[3] = PASS_DIGIT3;
    return 4;
}

/* unicode_cpt_from_utf8 / unicode_cpts_from_utf8: invalid sequences become U+FFFD, one byte each.
 * (Code points above U+10FFFF, on which llama.cpp throws later, also become U+FFFD.) */
static size_t decode_utf8(const unsigned char *s, size_t n, uint32_t *out) {
    size_t k = 0;
    for (size_t i = 0; i < n;) {
        unsigned char c = s[i];
        uint32_t cp = 0xFFFD;
        size_t len = 1;
        if (!(c & 0x80)) cp = c;
        else if ((c & 0x40) && !(c & 0x20)) {
            if (i + 1 < n && (s[i + 1] & 0xC0) == 0x80) { cp = (uint32_t)(c & 0x1F) << 6 | (s[i + 1] & 0x3F); len = 2; }
        } else if ((c & 0x40) && !(c & 0x10)) {
            if (i + 2 < n && (s[i + 1] & 0xC0) == 0x80 && (s[i + 2] & 0xC0) == 0x80) {
                cp = (uint32_t)(c & 0x0F) << 12 | (uint32_t)(s[i + 1] & 0x3F) << 6 | (s[i + 2] & 0x3F);
                len = 3;
            }
        } else if ((c & 0x40) && !(c & 0x08)) {
            if (i + 3 < n && (s[i + 1] & 0xC0) == 0x80 && (s[i + 2] & 0xC0) == 0x80 && (s[i + 3] & 0xC0) == 0x80) {
                cp = (uint32_t)(c & 0x07) << 18 | (uint32_t)(s[i + 1] & 0x3F) << 12 | (uint32_t)(s[i + 2] & 0x3F) << 6 |
                     (s[i + 3] & 0x3F);
                len = 4;
                if (cp > 0x10FFFF) { cp = 0xFFFD; len = 1; }
            }
        }
        out[k++] = cp;
        i += len;
    }
    return k;
}

static size_t put_utf8(uint32_t cp, char *o) {
    if (cp < 0x80) { o[0] = (char)cp; return 1; }
    if (cp < 0x800) { o[0] = (char)(0xC0 | cp >> 6); o[1] = (char)(0x80 | (cp & 0x3F)); return 2; }
    if (cp < 0x10000) {
        o[0] = (char)(0xE0 | cp >> 12); o[1] = (char)(0x80 | (cp >> 6 & 0x3F)); o[2] = (char)(0x80 | (cp & 0x3F));
        return 3;
    }
    o[0] = (char)(0xF0 | cp >> 18); o[1] = (char)(0x80 | (cp >> 12 & 0x3F));
    o[2] = (char)(0x80 | (cp >> 6 & 0x3F)); o[3] = (char)(0x80 | (cp & 0x3F));
    return 4;
}

/* GPT-2 bytes_to_unicode: printable Latin-1 bytes map to themselves, the 68 others (0x00-0x20,
 * 0x7F-0xA0, 0xAD) to U+0100.. in byte order. */
static uint32_t byte_to_cpt(unsigned b) {
    if ((b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE) return b;
    if (b <= 0x20) return 256 + b;
    if (b <= 0xA0) return 256 + 33 + (b - 0x7F);
    return 256 + 67; /* 0xAD */
}

static int cpt_to_byte(uint32_t cp) {
    if ((cp >= 0x21 && cp <= 0x7E) || (cp >= 0xA1 && cp <= 0xAC) || (cp >= 0xAE && cp <= 0xFF)) return (int)cp;
    if (cp >= 256 && cp < 256 + 33) return (int)(cp - 256);
    if (cp >= 256 + 33 && cp < 256 + 67) return (int)(0x7F + cp - 256 - 33);
    if (cp == 256 + 67) return 0xAD;
    return -1;
}

/* ---- merges ---- */

static bool merge_eq(const wk_merge *m, const char *l, size_t ln, const char *r, size_t rn) {
    return m->len == ln + 1 + rn && m->split == ln && memcmp(m->text, l, ln) == 0 &&
           memcmp(m->text + ln + 1, r, rn) == 0;
}

static uint64_t hash_more(uint64_t h, const char *s, size_t n) {
    for (size_t i = 0; i < n; i++) h = (h ^ (unsigned char)s[i]) * 1099511628211ull;
    return h;
}

/* Rank of merging left+right, or -1 (find_bpe_rank). The key is the merge line "left right". */
static int find_rank(const wk_tokenizer *t, const char *l, size_t ln, const char *r, size_t rn) {
    uint64_t h = hash_more(hash_more(hash_more(1469598103934665603ull, l, ln), " ", 1), r, rn);
    for (uint32_t i = (uint32_t)h & t->merge_mask;; i = (i + 1) & t->merge_mask) {
        int32_t k = t->merge_map[i];
        if (k < 0) return -1;
        if (merge_eq(&t->merges[k], l, ln, r, rn)) return k;
    }
}

static const struct { const char *name; wk_bpe_pre pre; bool llama3_flags; } k_pre_names[] = {
    {"default", WK_PRE_DEFAULT, false},
    {"gpt2", WK_PRE_GPT2, false}, /* not a llama.cpp name; accepted as the obvious alias */
    {"gpt-2", WK_PRE_GPT2, false}, {"phi-2", WK_PRE_GPT2, false}, {"jina-es", WK_PRE_GPT2, false},
    {"jina-de", WK_PRE_GPT2, false}, {"gigachat", WK_PRE_GPT2, false}, {"jina-v2-es", WK_PRE_GPT2, false},
    {"jina-v2-de", WK_PRE_GPT2, false}, {"a.x-4.0", WK_PRE_GPT2, false}, {"mellum", WK_PRE_GPT2, false},
    {"modern-bert", WK_PRE_GPT2, false}, {"mpt", WK_PRE_GPT2, false}, {"olmo", WK_PRE_GPT2, false},
    {"jais", WK_PRE_GPT2, false}, {"trillion", WK_PRE_GPT2, false}, {"granite-docling", WK_PRE_GPT2, false},
    {"exaone4", WK_PRE_GPT2, false}, {"jina-v1-en", WK_PRE_GPT2, false}, {"jina-v2-code", WK_PRE_GPT2, false},
    {"roberta-bpe", WK_PRE_GPT2, false},
    {"llama3", WK_PRE_LLAMA3, true}, {"llama-v3", WK_PRE_LLAMA3, true}, {"llama-bpe", WK_PRE_LLAMA3, true},
    {"falcon3", WK_PRE_LLAMA3, true}, {"falcon-h1", WK_PRE_LLAMA3, true}, {"pixtral", WK_PRE_LLAMA3, true},
    {"midm-2.0", WK_PRE_LLAMA3, true}, {"lfm2", WK_PRE_LLAMA3, true}, {"jina-v5-nano", WK_PRE_LLAMA3, true},
    {"dbrx", WK_PRE_LLAMA3, false}, {"smaug-bpe", WK_PRE_LLAMA3, false},
    {"qwen2", WK_PRE_QWEN2, false}, {"deepseek-r1-qwen", WK_PRE_QWEN2, false}, {"kormo", WK_PRE_QWEN2, false},
    {"f2llmv2", WK_PRE_QWEN2, false}, {"stablelm2", WK_PRE_QWEN2, false}, {"megrez", WK_PRE_QWEN2, false},
    {"hunyuan", WK_PRE_QWEN2, false}, {"solar-open", WK_PRE_QWEN2, false}, {"grok-2", WK_PRE_QWEN2, false},
    {"starcoder", WK_PRE_STARCODER, false}, {"refact", WK_PRE_STARCODER, false},
    {"command-r", WK_PRE_STARCODER, false}, {"smollm", WK_PRE_STARCODER, false},
    {"codeshell", WK_PRE_STARCODER, false}, {"exaone", WK_PRE_STARCODER, false},
    {"minerva-7b", WK_PRE_STARCODER, false}, {"mellum2", WK_PRE_STARCODER, false},
};

bool wk_bpe_load(wk_tokenizer *t, const wk_gguf *g, char *err, size_t errlen) {
    char pre[64] = "default";
    if (wk_gguf_find(g, "tokenizer.ggml.pre") && !wk_gguf_get_str(g, "tokenizer.ggml.pre", pre, sizeof pre)) {
        snprintf(err, errlen, "invalid tokenizer.ggml.pre");
        return false;
    }
    size_t i, npre = sizeof k_pre_names / sizeof k_pre_names[0];
    for (i = 0; i < npre && strcmp(k_pre_names[i].name, pre) != 0; i++) {}
    if (i == npre) {
        snprintf(err, errlen, "unknown pre-tokenizer type '%s'", pre);
        return false;
    }
    t->pre = k_pre_names[i].pre;
    t->ignore_merges = k_pre_names[i].llama3_flags;
    if (k_pre_names[i].llama3_flags) t->add_bos = true;

    const wk_gguf_kv *kv = wk_gguf_find(g, "tokenizer.ggml.merges");
    if (!kv) { snprintf(err, errlen, "cannot find tokenizer.ggml.merges"); return false; }
    if (kv->type != WK_GGUF_ARRAY || kv->arr_type != WK_GGUF_STRING || !kv->arr_strs || kv->arr_count > INT32_MAX / 4) {
        snprintf(err, errlen, "tokenizer.ggml.merges is not a string array");
        return false;
    }
    int n = t->n_merges = (int)kv->arr_count;
    size_t total = 0;
    for (int k = 0; k < n; k++) total += kv->arr_strs[k].len;
    t->merges = malloc((n ? (size_t)n : 1) * sizeof *t->merges);
    t->merge_blob = malloc(total + 1);
    uint32_t cap = 16;
    while (cap < (uint64_t)n * 2) cap <<= 1;
    t->merge_mask = cap - 1;
    t->merge_map = malloc((size_t)cap * sizeof *t->merge_map);
    if (!t->merges || !t->merge_blob || !t->merge_map) { snprintf(err, errlen, "out of memory"); return false; }
    memset(t->merge_map, 0xff, (size_t)cap * sizeof *t->merge_map);
    char *p = t->merge_blob;
    for (int k = 0; k < n; k++) {
        wk_merge *m = &t->merges[k];
        m->text = p;
        m->len = (uint32_t)kv->arr_strs[k].len;
        if (m->len) memcpy(p, kv->arr_strs[k].ptr, m->len);
        p += m->len;
        /* word.find(' ', 1); without one llama.cpp stores ("", ""), which never matches */
        const char *sp = m->len > 1 ? memchr(m->text + 1, ' ', m->len - 1) : NULL;
        m->split = sp ? (uint32_t)(sp - m->text) : UINT32_MAX;
        uint32_t h = (uint32_t)wk_tok_hash(m->text, m->len) & t->merge_mask;
        for (;; h = (h + 1) & t->merge_mask) {
            int32_t o = t->merge_map[h];
            if (o < 0) { t->merge_map[h] = k; break; }
            if (t->merges[o].len == m->len && memcmp(t->merges[o].text, m->text, m->len) == 0) break; /* emplace: first wins */
        }
    }
    return true;
}

/* ---- encode ---- */

typedef struct { uint32_t off, n; int prev, next; } bpe_sym;
typedef struct { int rank, left, right; uint32_t size; } bpe_bigram;

/* Min-heap order: lower rank first, then the smaller left index (llm_bigram_bpe::comparator). */
static bool bpe_before(const bpe_bigram *a, const bpe_bigram *b) {
    return a->rank < b->rank || (a->rank == b->rank && a->left < b->left);
}

typedef struct {
    const wk_tokenizer *t;
    const char *w;
    bpe_sym *sym;
    bpe_bigram *heap;
    int nheap, capheap;
} bpe_word;

static bool bpe_add(bpe_word *s, int left, int right) {
    if (left == -1 || right == -1) return true;
    const bpe_sym *l = &s->sym[left], *r = &s->sym[right];
    int rank = find_rank(s->t, s->w + l->off, l->n, s->w + r->off, r->n);
    if (rank < 0) return true;
    if (s->nheap == s->capheap) {
        int cap = s->capheap ? s->capheap * 2 : 64;
        bpe_bigram *h = realloc(s->heap, (size_t)cap * sizeof *h);
        if (!h) return false;
        s->heap = h; s->capheap = cap;
    }
    bpe_bigram b = {rank, left, right, l->n + r->n};
    int i = s->nheap++;
    while (i > 0 && bpe_before(&b, &s->heap[(i - 1) / 2])) {
        s->heap[i] = s->heap[(i - 1) / 2];
        i = (i - 1) / 2;
    }
    s->heap[i] = b;
    return true;
}

static bpe_bigram bpe_pop(bpe_word *s) {
    bpe_bigram top = s->heap[0], last = s->heap[--s->nheap];
    int i = 0, n = s->nheap;
    for (;;) {
        int c = 2 * i + 1;
        if (c >= n) break;
        if (c + 1 < n && bpe_before(&s->heap[c + 1], &s->heap[c])) c++;
        if (!bpe_before(&s->heap[c], &last)) break;
        s->heap[i] = s->heap[c];
        i = c;
    }
    if (n) s->heap[i] = last;
    return top;
}

/* One byte-encoded pre-token: merge by rank, then emit (unknown pieces byte by byte). */
static bool bpe_merge_word(const wk_tokenizer *t, const char *w, size_t len, bpe_sym *sym, bpe_word *s, wk_tok_sink *sink) {
    int nsym = 0;
    s->w = w;
    s->sym = sym;
    s->nheap = 0;
    if (t->ignore_merges && wk_tok_lookup(t, w, len) >= 0) {
        sym[nsym++] = (bpe_sym){0, (uint32_t)len, -1, -1};
    } else {
        for (size_t off = 0; off < len;) {
            size_t n = wk_utf8_len((unsigned char)w[off]);
            if (n > len - off) n = len - off;
            sym[nsym] = (bpe_sym){(uint32_t)off, (uint32_t)n, nsym - 1, off + n == len ? -1 : nsym + 1};
            off += n;
            nsym++;
        }
    }
    for (int i = 1; i < nsym; i++)
        if (!bpe_add(s, i - 1, i)) return false;
    while (s->nheap) {
        bpe_bigram b = bpe_pop(s);
        bpe_sym *l = &sym[b.left], *r = &sym[b.right];
        /* llama.cpp compares texts; adjacent symbols are contiguous, so equal sizes mean equal texts */
        if (l->n == 0 || r->n == 0 || l->n + r->n != b.size) continue;
        l->n += r->n;
        r->n = 0;
        l->next = r->next;
        if (r->next >= 0) sym[r->next].prev = b.left;
        if (!bpe_add(s, l->prev, b.left) || !bpe_add(s, b.left, l->next)) return false;
    }
    for (int i = 0; i < nsym; i++) {
        if (!sym[i].n) continue;
        int32_t id = wk_tok_lookup(t, w + sym[i].off, sym[i].n);
        if (id >= 0) { wk_sink_push(sink, id); continue; }
        for (uint32_t j = 0; j < sym[i].n; j++) { /* raw byte as a one-char token, dropped if absent */
            int32_t b = wk_tok_lookup(t, w + sym[i].off + j, 1);
            if (b >= 0) wk_sink_push(sink, b);
        }
    }
    return true;
}

void wk_bpe_encode(const wk_tokenizer *t, const char *text, size_t len, wk_tok_sink *sink) {
    uint32_t *cpts = malloc((len ? len : 1) * sizeof *cpts);
    char *wbuf = malloc(8 * (len ? len : 1));     /* <= 4 UTF-8 bytes per code point, x2 byte-encoded */
    bpe_sym *sym = malloc(8 * (len ? len : 1) * sizeof *sym);
    offs cur = {0}, nxt = {0};
    bpe_word s = {.t = t};
    if (!cpts || !wbuf || !sym) goto oom;
    size_t n = decode_utf8((const unsigned char *)text, len, cpts);
    pass_kind passes[4];
    int np = passes_for(t->pre, passes);
    offs_push(&cur, n);
    for (int k = 0; k < np; k++) {
        nxt.n = 0;
        size_t start = 0;
        for (size_t c = 0; c < cur.n; c++) {
            chunk_view v = {cpts, start, start + cur.v[c]};
            switch (passes[k]) {
            case PASS_GPT2: split_gpt2(&v, &nxt); break;
            case PASS_LLAMA3: split_llama3(&v, &nxt, 3); break;
            case PASS_QWEN2: split_llama3(&v, &nxt, 1); break;
            case PASS_PUNCT: split_pred(&v, &nxt, PRED_PUNCT_RUN); break;
            case PASS_NUMRUN: split_pred(&v, &nxt, PRED_NUMBER_RUN); break;
            case PASS_NUMEACH: split_pred(&v, &nxt, PRED_NUMBER_EACH); break;
            case PASS_DIGIT3: split_pred(&v, &nxt, PRED_DIGIT3); break;
            }
            start += cur.v[c];
        }
        if (nxt.oom) goto oom;
        offs tmp = cur; cur = nxt; nxt = tmp;
    }
    size_t start = 0;
    for (size_t c = 0; c < cur.n && !sink->failed; c++) {
        size_t wl = 0;
        for (size_t i = start; i < start + cur.v[c]; i++) { /* UTF-8, then each byte through bytes_to_unicode */
            char u[4];
            size_t ul = put_utf8(cpts[i], u);
            for (size_t j = 0; j < ul; j++) wl += put_utf8(byte_to_cpt((unsigned char)u[j]), wbuf + wl);
        }
        if (!bpe_merge_word(t, wbuf, wl, sym, &s, sink)) goto oom;
        start += cur.v[c];
    }
    goto done;
oom:
    sink->failed = true;
done:
    free(cpts); free(wbuf); free(sym); free(cur.v); free(nxt.v); free(s.heap);
}

/* llama_decode_text: each code point back to its byte; one outside the map is spelled out the way
 * llama.cpp does ("[UNK_BYTE_0x..." + hex + the whole token text + "]"). */
int wk_bpe_decode_text(const char *text, size_t len, char *buf, int cap) {
    uint32_t *cpts = malloc((len ? len : 1) * sizeof *cpts);
    int n = 0;
    if (!cpts) return -1;
    size_t nc = decode_utf8((const unsigned char *)text, len, cpts);
    for (size_t i = 0; i < nc; i++) {
        int b = cpt_to_byte(cpts[i]);
        if (b >= 0) {
            if (n < cap) buf[n] = (char)b;
            n++;
            continue;
        }
        char u[4], tmp[40];
        size_t ul = put_utf8(cpts[i], u);
        int k = snprintf(tmp, sizeof tmp, "[UNK_BYTE_0x");
        for (size_t j = 0; j < ul; j++) k += snprintf(tmp + k, sizeof tmp - (size_t)k, "%02x", (unsigned char)u[j]);
        for (int j = 0; j < k; j++, n++)
            if (n < cap) buf[n] = tmp[j];
        for (size_t j = 0; j <= len; j++, n++)
            if (n < cap) buf[n] = j < len ? text[j] : ']';
    }
    free(cpts);
    return n;
}
