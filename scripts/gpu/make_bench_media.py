#!/usr/bin/env python3
"""Writes the media of the multimodal prefill benchmark with the standard library alone: a mono
16-bit WAV of --seconds (a chirp plus noise, 16 kHz) and an RGB PNG of --width x --height (a
colour gradient with noise), so that every run decodes the same files.

    python3 make_bench_media.py --out DIR [--seconds 10] [--width 640] [--height 480]
"""
import argparse
import math
import os
import random
import struct
import wave
import zlib


def write_wav(path, seconds, rate=16000):
    rng = random.Random(0)
    frames = bytearray()
    for i in range(int(seconds * rate)):
        t = i / rate
        v = 0.3 * math.sin(2 * math.pi * (200 + 300 * t) * t) + 0.05 * (rng.random() * 2 - 1)
        frames += struct.pack("<h", int(max(-1.0, min(1.0, v)) * 32767))
    with wave.open(path, "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(rate)
        w.writeframes(bytes(frames))


def write_png(path, width, height):
    rng = random.Random(1)
    rows = bytearray()
    for y in range(height):
        rows.append(0)  # filter: none
        for x in range(width):
            n = rng.randrange(32)
            rows += bytes(((x * 255 // width + n) % 256, (y * 255 // height + n) % 256, (x + y + n) % 256))

    def chunk(kind, data):
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)

    with open(path, "wb") as f:
        f.write(b"\x89PNG\r\n\x1a\n")
        f.write(chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)))
        f.write(chunk(b"IDAT", zlib.compress(bytes(rows), 6)))
        f.write(chunk(b"IEND", b""))


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--out", required=True)
    p.add_argument("--seconds", type=float, default=10.0)
    p.add_argument("--width", type=int, default=640)
    p.add_argument("--height", type=int, default=480)
    a = p.parse_args()
    os.makedirs(a.out, exist_ok=True)
    write_wav(os.path.join(a.out, "audio.wav"), a.seconds)
    write_png(os.path.join(a.out, "image.png"), a.width, a.height)


if __name__ == "__main__":
    main()
