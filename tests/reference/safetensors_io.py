"""Reader for Hugging Face model directories: config.json + safetensors (independent reference).

safetensors layout: u64 little-endian header size N | N bytes of JSON | byte buffer.
The JSON maps tensor name -> {"dtype", "shape", "data_offsets": [begin, end]} (offsets relative to
the byte buffer), plus an optional "__metadata__" entry. Shapes are already in PyTorch order.
A sharded model lists its files in model.safetensors.index.json ("weight_map": name -> file).
"""

import json
import os
import struct

import numpy as np

import gguf

DTYPE_SIZES = {"F32": 4, "F16": 2, "BF16": 2}


class SafetensorsFile:
    def __init__(self, path):
        self.path = str(path)
        with open(self.path, "rb") as f:
            head = f.read(8)
            if len(head) != 8:
                raise ValueError(f"{self.path}: too short to be a safetensors file")
            (n,) = struct.unpack("<Q", head)
            header_bytes = f.read(n)
        if len(header_bytes) != n:
            raise ValueError(f"{self.path}: truncated header")
        header = json.loads(header_bytes.decode("utf-8"))
        self.metadata = header.pop("__metadata__", {}) or {}
        self.data_start = 8 + n
        self.mm = np.memmap(self.path, dtype=np.uint8, mode="r")
        self.entries = header
        buffer_size = len(self.mm) - self.data_start
        for name, e in header.items():
            begin, end = e["data_offsets"]
            dtype = e["dtype"]
            if dtype in DTYPE_SIZES:
                want = int(np.prod(e["shape"], dtype=np.int64)) * DTYPE_SIZES[dtype]
                if end - begin != want:
                    raise ValueError(f"{self.path}: tensor {name}: {end - begin} bytes for shape "
                                     f"{e['shape']} of {dtype} (expected {want})")
            if not 0 <= begin <= end <= buffer_size:
                raise ValueError(f"{self.path}: tensor {name}: data_offsets out of range")

    def tensor(self, name):
        e = self.entries[name]
        dtype = e["dtype"]
        begin, end = e["data_offsets"]
        raw = np.ascontiguousarray(self.mm[self.data_start + begin:self.data_start + end])
        if dtype == "F32":
            a = raw.view("<f4").astype(np.float32)
        elif dtype == "F16":
            a = raw.view("<f2").astype(np.float32)
        elif dtype == "BF16":
            a = gguf.bf16_to_f32(raw.view("<u2"))
        else:
            raise ValueError(f"{self.path}: tensor {name}: dtype {dtype} unsupported "
                             f"(supported: F32, F16, BF16)")
        return a.reshape(e["shape"])


class HFModelDir:
    """config.json plus all tensors of model.safetensors or its shards."""

    def __init__(self, directory):
        self.directory = str(directory)
        config_path = os.path.join(self.directory, "config.json")
        if not os.path.isfile(config_path):
            raise ValueError(f"{self.directory}: no config.json")
        with open(config_path, encoding="utf-8") as f:
            self.config = json.load(f)
        index_path = os.path.join(self.directory, "model.safetensors.index.json")
        single_path = os.path.join(self.directory, "model.safetensors")
        self.files = {}
        self.where = {}                 # tensor name -> SafetensorsFile
        if os.path.isfile(index_path):
            with open(index_path, encoding="utf-8") as f:
                weight_map = json.load(f)["weight_map"]
            for name, file_name in weight_map.items():
                if file_name not in self.files:
                    self.files[file_name] = SafetensorsFile(os.path.join(self.directory, file_name))
                if name not in self.files[file_name].entries:
                    raise ValueError(f"index lists {name} in {file_name}, which lacks it")
                self.where[name] = self.files[file_name]
        elif os.path.isfile(single_path):
            st = SafetensorsFile(single_path)
            self.files["model.safetensors"] = st
            for name in st.entries:
                self.where[name] = st
        else:
            raise ValueError(f"{self.directory}: neither model.safetensors nor "
                             f"model.safetensors.index.json")

    def names(self):
        return list(self.where)

    def has(self, name):
        return name in self.where

    def tensor(self, name):
        if name not in self.where:
            raise KeyError(f"{self.directory}: no tensor named {name!r}")
        return self.where[name].tensor(name)

    def describe(self, name):
        e = self.where[name].entries[name]
        return f"{name} {e['dtype']} {e['shape']}"
