"""Bad input gets a clear error naming the problem, never a crash: every case must exit with
status 1 (2 for usage errors; never a signal) and print `pocket: error: ...` containing the
expected words."""
import json
import os
import shutil
import signal
import struct
import subprocess
import unittest

from harness import (POCKET, QWEN3_TOKENIZER, SOURCE_DIR, STORIES, STORIES_TOK, main_unittest,
                     make_model, require, work_path)


def run_bytes(args):
    return subprocess.run([POCKET.encode()] + [a if isinstance(a, bytes) else str(a).encode()
                                                for a in args],
                          capture_output=True, timeout=300)


class CliErrors(unittest.TestCase):
    def expect_error(self, args, *words, stdin=None, code=1):
        p = subprocess.run([POCKET] + [str(a) for a in args], capture_output=True, text=True,
                           input=stdin, timeout=300)
        self.assertEqual(p.returncode, code, f"exit {p.returncode}; stderr: {p.stderr[-2000:]}")
        self.assertIn("pocket: error:", p.stderr)
        for w in words:
            self.assertIn(w, p.stderr)
        print(f"ok: {p.stderr.strip()[:200]}")
        return p.stderr

    @classmethod
    def setUpClass(cls):
        cls.model = make_model("errors-tiny.gguf")
        with open(cls.model, "rb") as f:
            cls.good = f.read()

    def variant(self, name, data):
        path = work_path(name)
        with open(path, "wb") as f:
            f.write(data)
        return path

    def test_missing_file(self):
        self.expect_error(["info", work_path("does-not-exist.gguf")], "cannot open",
                          "does-not-exist.gguf")

    def test_truncated_gguf(self):
        for cut in (10, 100, len(self.good) // 2, len(self.good) - 100):
            path = self.variant(f"cut-{cut}.gguf", self.good[:cut])
            self.expect_error(["info", path], "truncated", path)

    def test_wrong_magic(self):
        path = self.variant("magic.gguf", b"GGUX" + self.good[4:])
        self.expect_error(["info", path], "not a model file")

    def test_unsupported_version(self):
        path = self.variant("v9.gguf", self.good[:4] + struct.pack("<I", 9) + self.good[8:])
        self.expect_error(["info", path], "version 9")

    def test_unsupported_architecture(self):
        data = self.good.replace(b"\x05\x00\x00\x00\x00\x00\x00\x00qwen3", b"\x05\x00\x00\x00\x00\x00\x00\x00gemm3", 1)
        self.assertNotEqual(data, self.good)
        path = self.variant("arch.gguf", data)
        self.expect_error(["info", path], "architecture", "gemm3", "not supported")

    def test_unsupported_tensor_type(self):
        name = b"blk.0.attn_q.weight"
        pos = self.good.find(struct.pack("<Q", len(name)) + name)
        self.assertGreater(pos, 0)
        type_pos = pos + 8 + len(name) + 4 + 2 * 8
        data = self.good[:type_pos] + struct.pack("<I", 13) + self.good[type_pos + 4:]
        path = self.variant("q5k.gguf", data)
        self.expect_error(["info", path], "blk.0.attn_q.weight", "q5_K", "not support")

    def test_tensor_count_mismatch(self):
        n = struct.unpack("<Q", self.good[8:16])[0]
        path = self.variant("count.gguf", self.good[:8] + struct.pack("<Q", n + 1) + self.good[16:])
        self.expect_error(["info", path], path)

    def test_shape_mismatch(self):
        src = make_model("errors-hf", extra=("--format", "hf"))
        dst = work_path("errors-hf-bad")
        shutil.rmtree(dst, ignore_errors=True)
        shutil.copytree(src, dst)
        with open(os.path.join(dst, "config.json")) as f:
            cfg = json.load(f)
        cfg["intermediate_size"] = 256
        with open(os.path.join(dst, "config.json"), "w") as f:
            json.dump(cfg, f)
        self.expect_error(["info", dst], "model.layers.0.mlp.gate_proj.weight", "expected [256, 256]",
                          "file has [512, 256]")

    def test_directory_without_config(self):
        d = work_path("empty-dir")
        os.makedirs(d, exist_ok=True)
        self.expect_error(["info", d], "config.json")

    def test_corrupt_safetensors(self):
        src = make_model("errors-hf2", extra=("--format", "hf"))
        dst = work_path("errors-hf2-bad")
        shutil.rmtree(dst, ignore_errors=True)
        shutil.copytree(src, dst)
        st = os.path.join(dst, "model.safetensors")
        with open(st, "rb") as f:
            data = f.read()
        with open(st, "wb") as f:
            f.write(data[: len(data) // 3])
        self.expect_error(["info", dst], "model.safetensors")

    def test_missing_tokenizer(self):
        self.expect_error(["run", "-m", STORIES, "-p", "Once"], "no tokenizer", "--tokenizer")

    def test_out_of_range_ids(self):
        self.expect_error(["logits", "-m", self.model, "--ids", "1,2,99999", "-o",
                           work_path("x.npy")], "99999", "outside the vocabulary")
        self.expect_error(["logits", "-m", self.model, "--ids", "1,-2", "-o", work_path("x.npy")],
                          "not a token id", code=2)

    def test_prompt_longer_than_context(self):
        self.expect_error(["run", "-m", STORIES, "--tokenizer", STORIES_TOK, "-c", "8", "-p",
                           "Once upon a time there was a little girl who liked to play"],
                          "longer than the context")

    def test_invalid_utf8_prompt(self):
        p = run_bytes(["run", "-m", STORIES, "--tokenizer", STORIES_TOK, "-p", b"ab\xffcd"])
        self.assertEqual(p.returncode, 1, p.stderr)
        self.assertIn(b"UTF-8", p.stderr)
        self.assertIn(b"2", p.stderr)  # the byte offset

    def test_bad_tokenize_input(self):
        self.expect_error(["tokenize", "-m", STORIES, "--tokenizer", STORIES_TOK], "stdin line 2",
                          stdin='{"text": "ok"}\nnot json\n')

    def test_bad_flags(self):
        self.expect_error(["run", "-m", STORIES, "--tokenizer", STORIES_TOK, "-p", "x", "--top-p",
                           "0"], "top-p", code=2)
        self.expect_error(["make-model", "--preset", "huge", "-o", work_path("x.gguf")],
                          "unknown preset", code=2)

    def test_usage_errors_name_the_problem(self):
        # Issue 44: a bad --lora scale said "not an adapter" (exit 1); a bad --sink-rate exited 1;
        # a misspelt option got no suggestion (commands did).
        self.expect_error(["run", "-m", STORIES, "--tokenizer", STORIES_TOK, "-p", "x",
                           "--lora", STORIES_TOK + ":abc"], 'the scale "abc" is not a number',
                          code=2)
        self.expect_error(["voice", "-m", STORIES, "--sink-rate", "12345"],
                          "a multiple of 100, got 12345", code=2)
        self.expect_error(["run", "--tmp", "0", "-m", STORIES], 'did you mean "--temp"', code=2)
        self.expect_error(["run", "-m", STORIES, "--qqqqqqqq"], "--help lists its options",
                          code=2)

    def test_voice_outputs_are_checked_before_the_conversation(self):
        # Issue 44: `voice -o /nonexistent/reply.wav` ran the whole conversation, then failed.
        smoke = os.path.join(SOURCE_DIR, "tests", "voice", "smoke.script")
        for flag in ("-o", "--capture"):
            err = self.expect_error(["voice", "-m", STORIES, "--tokenizer", STORIES_TOK,
                                     "--script", smoke, "--virtual-clock", flag,
                                     "/nonexistent-dir/reply.wav"],
                                    flag + " /nonexistent-dir/reply.wav",
                                    "/nonexistent-dir does not exist")
            self.assertNotIn("turns,", err)  # the conversation never started

    def test_convert_output_is_a_pocket_package(self):
        # Issue 44: `convert tiny.gguf -o out.gguf` wrote a .pocket package under a .gguf name.
        for name in ("out.gguf", "out.GGUF", "out.safetensors"):
            out = work_path("convert-ext-" + name)
            self.expect_error(["convert", STORIES, "--tokenizer", STORIES_TOK, "-o", out],
                              "writes a .pocket package", code=2)
            self.assertFalse(os.path.exists(out))

    def test_sigterm_during_convert_leaves_nothing(self):
        # Issue 44: SIGTERM left a temporary output the size of the package (SIGINT cleaned up).
        model = make_model("sigterm-p2.gguf", preset="pocket-0.3b", type="bf16",
                           extra=("--layers", "2"))
        own = work_path("sigterm-convert")
        shutil.rmtree(own, ignore_errors=True)
        os.makedirs(own)
        out = os.path.join(own, "out.pocket")
        p = subprocess.Popen([POCKET, "convert", model, "-o", out, "--weights", "int8", "-t", "1"],
                             stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        err = ""
        while "converting" not in err:  # the progress line: the temporary file is being written
            c = p.stderr.read(1)
            if not c:
                break
            err += c
        p.send_signal(signal.SIGTERM)
        err += p.stderr.read()
        code = p.wait(timeout=120)
        self.assertNotEqual(code, 0, err)
        self.assertIn("cancelled", err)
        self.assertEqual(os.listdir(own), [])

    def test_never_overwrites_input(self):
        require(QWEN3_TOKENIZER, "run scripts/fetch_fixtures.sh")
        # A directory of its own: other e2e tests run in parallel and write (temporary) files into
        # the shared work directory.
        own = work_path("never-overwrite")
        shutil.rmtree(own, ignore_errors=True)
        os.makedirs(own)
        tok = os.path.join(own, "input-tokenizer.json")
        shutil.copyfile(QWEN3_TOKENIZER, tok)
        with open(tok, "rb") as f:
            before = f.read()
        self.expect_error(["make-model", "--preset", "tiny", "--format", "gguf", "--tokenizer", tok,
                           "-o", tok], "refusing to overwrite the input")
        with open(tok, "rb") as f:
            self.assertEqual(f.read(), before)
        leftovers = [f for f in os.listdir(os.path.dirname(tok)) if ".tmp." in f]
        self.assertEqual(leftovers, [])


if __name__ == "__main__":
    main_unittest()
