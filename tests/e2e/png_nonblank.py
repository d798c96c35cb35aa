#!/usr/bin/env python3
"""Decodes a PNG with the standard library only (zlib + the five scanline filters) and reports how much of it is not
white. Usage: png_nonblank.py FILE MIN_FRACTION  ->  exit 0 if the non-white fraction >= MIN_FRACTION, else 1.
Prints: width height nonwhite_fraction coloured_pixels."""
import struct
import sys
import zlib


def decode(path):
    data = open(path, "rb").read()
    if data[:8] != b"\x89PNG\r\n\x1a\n":
        raise ValueError(f"{path}: not a PNG")
    pos, idat, ihdr = 8, b"", None
    while pos < len(data):
        (n,) = struct.unpack(">I", data[pos:pos + 4])
        kind, body = data[pos + 4:pos + 8], data[pos + 8:pos + 8 + n]
        pos += 12 + n
        if kind == b"IHDR":
            ihdr = struct.unpack(">IIBBBBB", body)
        elif kind == b"IDAT":
            idat += body
        elif kind == b"IEND":
            break
    w, h, depth, ctype, _, _, interlace = ihdr
    if depth != 8 or ctype not in (2, 6) or interlace != 0:
        raise ValueError(f"{path}: unsupported PNG (depth {depth}, colour type {ctype}, interlace {interlace})")
    bpp = 3 if ctype == 2 else 4
    raw = zlib.decompress(idat)
    stride = w * bpp
    rows, prev = [], bytearray(stride)
    for y in range(h):
        f = raw[y * (stride + 1)]
        line = bytearray(raw[y * (stride + 1) + 1:(y + 1) * (stride + 1)])
        for i in range(stride):
            a = line[i - bpp] if i >= bpp else 0
            b = prev[i]
            c = prev[i - bpp] if i >= bpp else 0
            if f == 1:
                line[i] = (line[i] + a) & 255
            elif f == 2:
                line[i] = (line[i] + b) & 255
            elif f == 3:
                line[i] = (line[i] + (a + b) // 2) & 255
            elif f == 4:
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                pred = a if pa <= pb and pa <= pc else (b if pb <= pc else c)
                line[i] = (line[i] + pred) & 255
            elif f != 0:
                raise ValueError(f"{path}: bad filter {f} on row {y}")
        rows.append(line)
        prev = line
    return w, h, bpp, rows


def main():
    path, min_frac = sys.argv[1], float(sys.argv[2])
    w, h, bpp, rows = decode(path)
    nonwhite = coloured = 0
    for line in rows:
        for x in range(0, w * bpp, bpp):
            r, g, b = line[x], line[x + 1], line[x + 2]
            if min(r, g, b) < 235:
                nonwhite += 1
            if max(r, g, b) - min(r, g, b) > 60:
                coloured += 1
    frac = nonwhite / float(w * h)
    print(f"{w} {h} {frac:.4f} {coloured}")
    return 0 if frac >= min_frac else 1


if __name__ == "__main__":
    sys.exit(main())
