#!/usr/bin/python3
"""Independent numpy reference for pocket: logits, greedy generation, dequantization, info.

  reference.py logits   MODEL --ids 1,2,3 [--tokenizer tok512.bin] [--f64] -o out.npy
  reference.py generate MODEL --ids 1,2,3 -n N [--stop 1,2] [--tokenizer tok512.bin] [--f64]
  (logits and generate take --lora DIR[:SCALE], repeatable: PEFT adapters merged; lora.py)
  reference.py classify MODEL --ids 1,2,3 [--f64]      (JSON: the classification head's labels)
  reference.py dequant  MODEL TENSOR_NAME -o out.npy
  reference.py info     MODEL
  reference.py dflash   MODEL DRAFTER_DIR --ids 1,2,3 [--block-at N[,N..]] [--f64] -o out.npy
                        (a DFlash block drafter's logits [blocks * block_size, vocab]; dflash.py)

MODEL is a .gguf file, a .pocket package, a Hugging Face directory (config.json + safetensors) or a
llama2.c .bin. For a .pocket, dequant also accepts the parts of the fused tensors
(blk.N.attn_q/k/v.weight, blk.N.ffn_gate/up.weight).
"""

import argparse
import json
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import dflash  # noqa: E402
import gguf  # noqa: E402
import llama2c  # noqa: E402
import lora  # noqa: E402
import model as model_lib  # noqa: E402
import pocket_io  # noqa: E402
import safetensors_io  # noqa: E402


def parse_ids(text):
    try:
        return [int(t) for t in text.replace(" ", "").split(",") if t != ""]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a comma-separated list of integers: {text!r}")


def ids_from_args(args, model):
    if args.ids is not None:
        return args.ids
    if args.prompt is not None:
        if model.tokenizer is None:
            raise SystemExit("--prompt needs --tokenizer (llama2.c models only)")
        return model.tokenizer.encode(args.prompt, bos=True)
    raise SystemExit("give --ids (or --prompt with --tokenizer)")


def load_with_adapters(args):
    m = model_lib.load_model(args.model, args.tokenizer)
    for arg in args.lora or ():
        lora.merge(m, *lora.parse_arg(arg))
    return m


def cmd_logits(args):
    m = load_with_adapters(args)
    ids = ids_from_args(args, m)
    dtype = np.float64 if args.f64 else np.float32
    logits = m.forward(ids, dtype=dtype).astype(np.float32)       # [n_ids, vocab]
    np.save(args.output, logits)
    print(f"wrote {args.output}: logits {list(logits.shape)} float32 "
          f"(math in {np.dtype(dtype).name}); argmax per position: "
          f"{','.join(str(int(t)) for t in logits.argmax(axis=1))}", file=sys.stderr)


def cmd_dflash(args):
    m = model_lib.load_model(args.model)
    drafter = dflash.DFlashDrafter(args.drafter, m)
    ids = args.ids
    blocks = args.block_at if args.block_at is not None else [len(ids) - 1]
    for n in blocks:
        if not 0 <= n < len(ids):
            raise ValueError(f"--block-at {n}: needs ids[{n}] (there are {len(ids)} ids)")
    dtype = np.float64 if args.f64 else np.float32
    out = np.concatenate([drafter.block_logits(ids, n, dtype) for n in blocks]).astype(np.float32)
    np.save(args.output, out)
    B = drafter.block_size
    drafts = [",".join(str(int(t)) for t in out[i * B + 1:(i + 1) * B].argmax(axis=1))
              for i in range(len(blocks))]
    print(f"wrote {args.output}: logits {list(out.shape)} float32; drafts: {' | '.join(drafts)}",
          file=sys.stderr)


def cmd_trace(args):
    m = model_lib.load_model(args.model, args.tokenizer)
    ids = ids_from_args(args, m)
    out = {}
    m.final_hidden(ids, trace=lambda name, x: out.__setitem__(name, np.asarray(x, np.float32)))
    np.savez(args.output, **out)
    print(f"wrote {args.output}: {len(out)} intermediates", file=sys.stderr)


def cmd_generate(args):
    m = load_with_adapters(args)
    ids = ids_from_args(args, m)
    dtype = np.float64 if args.f64 else np.float32
    new = m.generate(ids, args.n, dtype=dtype, stop_ids=set(args.stop or ()))
    print(",".join(str(t) for t in new))
    if m.tokenizer is not None:
        seq = list(ids) + new
        first, rest = (seq[0], seq[1:]) if seq and seq[0] == llama2c.BOS_ID else (None, seq)
        text = b""
        prev = first
        for t in rest:
            text += m.tokenizer.printable(m.tokenizer.decode_piece(prev, t))
            prev = t
        sys.stderr.buffer.write(text + b"\n")
        sys.stderr.flush()


def cmd_classify(args):
    """The classification head times the final-norm hidden state of the last id, log-softmax over
    the labels (in float64): one JSON object, labels in the file's order (not ranked)."""
    m = model_lib.load_model(args.model, args.tokenizer)
    head = model_lib.load_classifier(args.model)
    if head is None:
        raise ValueError(f"{args.model}: no classification head")
    labels, w = head
    ids = ids_from_args(args, m)
    dtype = np.float64 if args.f64 else np.float32
    h = m.final_hidden(ids, dtype=dtype, last_only=True)[0].astype(np.float64)
    logits = w.astype(np.float64) @ h
    top = logits.max()
    logprobs = logits - (top + np.log(np.exp(logits - top).sum()))
    print(json.dumps({"labels": labels, "logits": logits.tolist(), "logprobs": logprobs.tolist(),
                      "probabilities": np.exp(logprobs).tolist()}))


def cmd_dequant(args):
    fmt = model_lib.detect_format(args.model)
    if fmt == "gguf":
        a = gguf.GGUFReader(args.model).tensor(args.tensor)
    elif fmt == "pocket":
        a = pocket_io.PocketFile(args.model).logical_tensor(args.tensor)
    elif fmt == "hf":
        a = safetensors_io.HFModelDir(args.model).tensor(args.tensor)
    else:
        arrays = llama2c.Llama2cCheckpoint(args.model).arrays
        if args.tensor not in arrays:
            raise SystemExit(f"no tensor {args.tensor!r}; llama2.c tensors: {', '.join(arrays)}")
        a = arrays[args.tensor]
    a = np.ascontiguousarray(a, dtype=np.float32)
    np.save(args.output, a)
    print(f"wrote {args.output}: {args.tensor} {list(a.shape)} float32", file=sys.stderr)


def cmd_info(args):
    fmt = model_lib.detect_format(args.model)
    print(f"format: {fmt}")
    if fmt == "gguf":
        r = gguf.GGUFReader(args.model)
        print(f"version: {r.version}  alignment: {r.alignment}  data offset: {r.data_offset}")
        print(f"metadata ({len(r.metadata)}):")
        for k, v in r.metadata.items():
            vtype, elem = r.metadata_types[k]
            tname = gguf.VALUE_TYPE_NAMES.get(vtype, str(vtype))
            if elem is not None:
                tname += f"[{gguf.VALUE_TYPE_NAMES.get(elem, elem)}]"
            print(f"  {k} ({tname}) = {gguf.describe_value(v)}")
        print(f"tensors ({len(r.tensors)}):")
        for t in r.tensors.values():
            print(f"  {t}")
    elif fmt == "pocket":
        info_pocket(args.model)
    elif fmt == "hf":
        d = safetensors_io.HFModelDir(args.model)
        print("config.json:")
        for k, v in d.config.items():
            print(f"  {k} = {v!r}")
        print(f"tensors ({len(d.names())}):")
        for name in d.names():
            print(f"  {d.describe(name)}")
    else:
        ck = llama2c.Llama2cCheckpoint(args.model)
        for k, v in ck.header_dict().items():
            print(f"  {k} = {v}")
        print("tensors:")
        for name, a in ck.arrays.items():
            print(f"  {name} F32 {list(a.shape)}")
    try:
        m = model_lib.load_model(args.model)
        print(f"model config: {m.config}")
    except (ValueError, KeyError) as e:
        print(f"model config: not loadable by the reference forward: {e}")


def info_pocket(path):
    pf = pocket_io.PocketFile(path)
    print(f"version: {pf.version_major}.{pf.version_minor}  file_bytes: {pf.file_bytes}  "
          f"flags: {pf.flags:#x}  header CRC-32C: ok")
    print(f"sections ({len(pf.sections)}):")
    for s in pf.sections.values():
        print(f"  {s}  crc {'ok' if pf.crc_ok(s.name) else 'MISMATCH'}")
    print("meta:")
    for k, v in pf.meta.items():
        print(f"  {k} = {v!r}")
    if pf.tokenizer is not None:
        t = pf.tokenizer
        print(f"tokenizer: {t}")
        print(f"  first tokens: {t.strings[:8]}")
        for what in ("bos", "eos", "pad", "unk"):
            i = getattr(t, what)
            if i >= 0:
                print(f"  {what} {i} = {t.strings[i]!r}")
    if pf.chat_template is not None:
        print(f"chat_template: {len(pf.chat_template)} chars")
    print(f"tensors ({len(pf.tensors)}):")
    for t in pf.tensors.values():
        print(f"  {t}")


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="command", required=True)

    def common(sp):
        sp.add_argument("model", help=".gguf file, .pocket package, HF directory or llama2.c .bin")
        sp.add_argument("--ids", type=parse_ids, help="comma-separated token ids, e.g. 1,2,3")
        sp.add_argument("--prompt", help="text to encode with the llama2.c --tokenizer (BOS added)")
        sp.add_argument("--tokenizer", help="llama2.c tokenizer (tok512.bin)")
        sp.add_argument("--f64", action="store_true", help="compute in float64 instead of float32")
        sp.add_argument("--lora", action="append",
                        help="PEFT adapter directory[:scale], merged into the weights (repeatable)")

    sp = sub.add_parser("logits", help="logits for every position -> .npy [n_ids, vocab] float32")
    common(sp)
    sp.add_argument("-o", "--output", required=True)
    sp.set_defaults(func=cmd_logits)

    sp = sub.add_parser("trace", help="every intermediate pocket's debug trace names -> .npz")
    common(sp)
    sp.add_argument("-o", "--output", required=True)
    sp.set_defaults(func=cmd_trace)

    sp = sub.add_parser("generate", help="greedy generation by full recompute")
    common(sp)
    sp.add_argument("-n", type=int, required=True, help="number of new tokens")
    sp.add_argument("--stop", type=parse_ids, help="ids that end generation (not printed)")
    sp.set_defaults(func=cmd_generate)

    sp = sub.add_parser("classify", help="classification-head label scores of the last id (JSON)")
    common(sp)
    sp.set_defaults(func=cmd_classify)

    sp = sub.add_parser("dequant", help="one tensor, dequantized, float32 PyTorch order -> .npy")
    sp.add_argument("model")
    sp.add_argument("tensor")
    sp.add_argument("-o", "--output", required=True)
    sp.set_defaults(func=cmd_dequant)

    sp = sub.add_parser("dflash", help="a DFlash block drafter's logits -> .npy [blocks * B, vocab]")
    sp.add_argument("model", help="the target model")
    sp.add_argument("drafter", help="the drafter's Hugging Face directory")
    sp.add_argument("--ids", type=parse_ids, required=True, help="comma-separated token ids")
    sp.add_argument("--block-at", type=parse_ids,
                    help="N[,N..]: a block after the first N ids, ids[N] first (default: last id)")
    sp.add_argument("--f64", action="store_true", help="compute in float64 instead of float32")
    sp.add_argument("-o", "--output", required=True)
    sp.set_defaults(func=cmd_dflash)

    sp = sub.add_parser("info", help="metadata and tensor list")
    sp.add_argument("model")
    sp.set_defaults(func=cmd_info)

    args = p.parse_args(argv)
    try:
        args.func(args)
    except (ValueError, KeyError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
