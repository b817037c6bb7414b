#!/usr/bin/env python3
"""make_corpus.py: writes the IDX fuzzer's seed corpus (fuzz/corpus/idx/): small valid files and
one of each kind of damage the reader must reject. Deterministic (gzip mtime 0), so a
rerun reproduces the committed files. Inputs found by fuzzing later are added beside them by hand
(named crash-*, slow-* ...) and become ctest cases too.
  python3 fuzz/make_corpus.py [OUT_DIR]"""
import gzip
import os
import struct
import sys


def images(n, rows=28, cols=28, magic=0x803):
    return struct.pack(">IIII", magic, n, rows, cols) + bytes((i * 7 + i // (rows * cols)) % 256
                                                              for i in range(n * rows * cols))


def labels(n, magic=0x801):
    return struct.pack(">II", magic, n) + bytes((i * 3 + 1) % 10 for i in range(n))


def gz(b):
    return gzip.compress(b, compresslevel=6, mtime=0)


def with_isize(g, isize):  # the gzip trailer's last 4 bytes: uncompressed size mod 2^32
    return g[:-4] + struct.pack("<I", isize)


img, lbl = images(2), labels(10)
CORPUS = {
    "images_2.raw": img,
    "images_2.gz": gz(img),
    "images_2_three_members.gz": gz(img[:5]) + gz(img[5:900]) + gz(img[900:]),
    "labels_10.raw": lbl,
    "labels_10.gz": gz(lbl),
    "images_0.gz": gz(images(0)),
    "empty_content.gz": gz(b""),
    "images_trailer_isize_ffffffff.gz": with_isize(gz(img), 0xFFFFFFFF),
    "images_bad_crc.gz": gz(img)[:-8] + bytes([gz(img)[-8] ^ 1]) + gz(img)[-7:],
    "images_truncated.gz": gz(img)[: len(gz(img)) // 2],
    "images_trailing_garbage.gz": gz(img) + b"junk",
    "images_trailing_data.gz": gz(img + b"\0"),
    "images_header_intmax.raw": images(0)[:4] + struct.pack(">I", 0x7FFFFFFF) + images(0)[8:]
                                + bytes(20),
    "images_header_intmax.gz": gz(images(0)[:4] + struct.pack(">I", 0x7FFFFFFF) + images(0)[8:]),
    "images_count_over_intmax.raw": images(0)[:4] + struct.pack(">I", 0x80000000) + images(0)[8:],
    "images_wrong_dims.gz": gz(images(1, 32, 32)),
    "images_byteswapped_magic.raw": struct.pack("<I", 0x803) + img[4:],
    "images_short_header.raw": img[:10],
    "labels_out_of_range.raw": lbl[:8] + bytes([10]) + lbl[9:],
    "labels_truncated.raw": lbl[:-3],
    "labels_header_7f000000.gz": gz(struct.pack(">II", 0x801, 0x7F000000)),
    "not_idx.raw": b"hello\n",
}

out = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "corpus", "idx")
os.makedirs(out, exist_ok=True)
for name, data in sorted(CORPUS.items()):
    with open(os.path.join(out, name), "wb") as f:
        f.write(data)
print(f"make_corpus: {len(CORPUS)} files, {sum(map(len, CORPUS.values()))} bytes in {out}")
