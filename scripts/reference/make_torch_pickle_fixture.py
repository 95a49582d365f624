#!/usr/bin/python3
"""torch.save-format files made without torch, for the C++ reader (src/model/torch_pickle.h).

torch.save writes a zip archive (entries stored, not compressed) holding <archive>/data.pkl, a
pickle of protocol 2 in which every tensor is a REDUCE of the global torch._utils._rebuild_tensor_v2
over (storage, storage_offset, size, stride, requires_grad, OrderedDict()) and every storage a
persistent id ('storage', torch.<Dtype>Storage, key, location, numel) whose bytes are the entry
<archive>/data/<key>. This script writes the same stream with Python's own pickler: stand-in modules
named torch and torch._utils make the globals picklable by name, and persistent_id() emits the
storage tuples. Values follow formulas the C++ test recomputes.

    /usr/bin/python3 scripts/reference/make_torch_pickle_fixture.py --out tests/data/torch_pickle

writes:
  spk_dict.pt       {"Chelsie": {"cond": f32 [1, 12], "ref_mel": f32 [1, 9, 20] (a transposed view at
                    storage offset 5), "bos_token": 151870},
                     "Ethan": {"cond": bf16 [12], "ref_mel": f32 [1, 9, 20], "bos_token": 151871,
                     "extras": [True, None, 0.5, -7, 2**40, "text", (1, 2)]}}
                    Chelsie's cond and Ethan's ref_mel share their storage with other views.
  bad_global.pt     a dict holding a reference to os.getcwd (a global the reader refuses)
  protocol4.pt      {"a": 1} pickled with protocol 4 (the reader accepts only 2)
"""
import argparse
import collections
import io
import os
import pickle
import struct
import sys
import types
import zipfile

import numpy as np


def install_fake_torch():
    torch = types.ModuleType("torch")
    utils = types.ModuleType("torch._utils")

    def _rebuild_tensor_v2(*args):
        raise RuntimeError("stand-in: never called")

    _rebuild_tensor_v2.__module__ = "torch._utils"
    _rebuild_tensor_v2.__qualname__ = "_rebuild_tensor_v2"
    utils._rebuild_tensor_v2 = _rebuild_tensor_v2
    torch._utils = utils
    for name in ("FloatStorage", "BFloat16Storage", "HalfStorage"):
        cls = type(name, (), {})
        cls.__module__ = "torch"
        setattr(torch, name, cls)
    sys.modules["torch"] = torch
    sys.modules["torch._utils"] = utils
    return torch


TORCH = install_fake_torch()


class Storage:
    def __init__(self, key, cls, data: bytes, numel):
        self.key, self.cls, self.data, self.numel = key, cls, data, numel


class Tensor:
    """Pickles as torch.Tensor.__reduce_ex__ does for a plain CPU tensor."""

    def __init__(self, storage, offset, size, stride):
        self.storage, self.offset, self.size, self.stride = storage, offset, tuple(size), tuple(stride)

    def __reduce_ex__(self, protocol):
        return (TORCH._utils._rebuild_tensor_v2,
                (self.storage, self.offset, self.size, self.stride, False, collections.OrderedDict()))


class TorchPickler(pickle.Pickler):
    def persistent_id(self, obj):
        if isinstance(obj, Storage):
            return ("storage", obj.cls, obj.key, "cpu", obj.numel)
        return None


def f32_storage(key, values):
    values = np.asarray(values, dtype="<f4")
    return Storage(key, TORCH.FloatStorage, values.tobytes(), values.size)


def bf16_storage(key, values):
    bits = (np.asarray(values, dtype="<f4").view("<u4") >> 16).astype("<u2")  # exact for these values
    return Storage(key, TORCH.BFloat16Storage, bits.tobytes(), bits.size)


def write_torch_zip(path, obj, storages, protocol=2):
    buf = io.BytesIO()
    TorchPickler(buf, protocol=protocol).dump(obj)
    archive = os.path.splitext(os.path.basename(path))[0]
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_STORED) as z:
        z.writestr(f"{archive}/data.pkl", buf.getvalue())
        z.writestr(f"{archive}/byteorder", "little")
        for s in storages:
            z.writestr(f"{archive}/data/{s.key}", s.data)
        z.writestr(f"{archive}/version", "3\n")
        z.writestr(f"{archive}/.data/serialization_id", "0123456789")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)

    # Chelsie: cond [1, 12] at offset 3 of a 20-element storage, value(i) = 0.25 i - 1.
    s0 = f32_storage("0", [0.25 * (i - 3) - 1.0 if i >= 3 else 99.0 for i in range(20)])
    chelsie_cond = Tensor(s0, 3, (1, 12), (12, 1))
    # Chelsie: ref_mel [1, 9, 20] viewing a [20, 9] storage transposed, from offset 5:
    # ref_mel[0, t, m] = storage[5 + m * 9 + t] = 0.01 (m * 9 + t) + 0.5.
    s1 = f32_storage("1", [99.0] * 5 + [0.01 * j + 0.5 for j in range(180)])
    chelsie_mel = Tensor(s1, 5, (1, 9, 20), (180, 1, 9))
    # Ethan: cond bf16 [12], value(i) = 0.125 i - 0.5 (exact in bfloat16).
    s2 = bf16_storage("2", [0.125 * i - 0.5 for i in range(12)])
    ethan_cond = Tensor(s2, 0, (12,), (1,))
    # Ethan: ref_mel [1, 9, 20] contiguous, value(t, m) = -0.02 (t * 20 + m); a second view of the
    # same storage sits in extras (memoized persistent ids).
    s3 = f32_storage("3", [-0.02 * j for j in range(180)])
    ethan_mel = Tensor(s3, 0, (1, 9, 20), (180, 20, 1))
    spk = {
        "Chelsie": {"cond": chelsie_cond, "ref_mel": chelsie_mel, "bos_token": 151870},
        "Ethan": {
            "cond": ethan_cond, "ref_mel": ethan_mel, "bos_token": 151871,
            "extras": [True, None, 0.5, -7, 2 ** 40, "text", (1, 2), Tensor(s3, 20, (20,), (1,))],
        },
    }
    write_torch_zip(os.path.join(args.out, "spk_dict.pt"), spk, [s0, s1, s2, s3])
    write_torch_zip(os.path.join(args.out, "bad_global.pt"), {"f": os.getcwd}, [])
    write_torch_zip(os.path.join(args.out, "protocol4.pt"), {"a": 1}, [], protocol=4)
    print(f"wrote {args.out}/spk_dict.pt, bad_global.pt, protocol4.pt")


if __name__ == "__main__":
    main()
