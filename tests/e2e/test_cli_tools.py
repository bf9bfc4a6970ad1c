"""The tool subcommands (logits, tokenize, info, make-model, prune-vocab, score):

- no command that writes a file writes over one it reads: the output given as an input, a hard
  link to one or a symbolic link to one is refused with `pocket: error:` naming the file, exit 1,
  the input unchanged and no temporary file left;
- score tokenizes candidates by the one candidate rule (runtime/candidates.h);
- tokenize -p encodes as run does (BOS first when the tokenizer adds one, unless --no-bos);
- usage errors exit 2; every option has a description and every --help ends with examples."""
import json
import os
import re
import shutil
import subprocess
import unittest

from harness import (POCKET, QWEN3_TOKENIZER, STORIES, STORIES_TOK, main_unittest, require,
                     work_path)

# A directory of its own: other e2e tests run in parallel and write into the shared work directory.
OWN = work_path("cli-tools")
TOOLS = ("logits", "tokenize", "info", "make-model", "prune-vocab", "score")


def pocket_run(*args, stdin=None):
    return subprocess.run([POCKET, *map(str, args)], capture_output=True, text=True, input=stdin,
                          timeout=300)


def pocket_ok(*args, stdin=None):
    p = pocket_run(*args, stdin=stdin)
    if p.returncode != 0:
        raise AssertionError(f"pocket {' '.join(map(str, args))} exited {p.returncode}: "
                             f"{p.stderr[-2000:]}")
    return p


def read_bytes(path):
    with open(path, "rb") as f:
        return f.read()


def temporaries(*dirs):
    return [os.path.join(d, f) for d in set(dirs) for f in os.listdir(d) if ".tmp." in f]


class NeverOverwritesInputs(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        require(QWEN3_TOKENIZER, "run scripts/fetch_fixtures.sh")
        shutil.rmtree(OWN, ignore_errors=True)
        os.makedirs(OWN)
        cls.stories = os.path.join(OWN, "stories260K.bin")
        cls.stories_tok = os.path.join(OWN, "tok512.bin")
        shutil.copyfile(STORIES, cls.stories)
        shutil.copyfile(STORIES_TOK, cls.stories_tok)
        # tokenizer.json with its tokenizer_config.json beside it (read as well).
        cls.tok_dir = os.path.join(OWN, "qwen3-tokenizer")
        os.makedirs(cls.tok_dir)
        cls.tok_json = os.path.join(cls.tok_dir, "tokenizer.json")
        shutil.copyfile(QWEN3_TOKENIZER, cls.tok_json)
        config = os.path.join(os.path.dirname(QWEN3_TOKENIZER), "tokenizer_config.json")
        cls.tok_config = os.path.join(cls.tok_dir, "tokenizer_config.json")
        if os.path.exists(config):
            shutil.copyfile(config, cls.tok_config)
        else:
            with open(cls.tok_config, "w") as f:
                f.write("{}\n")
        # A tiny GGUF holding a (fitted) byte-level BPE tokenizer, and a Hugging Face directory.
        cls.gguf = os.path.join(OWN, "tiny-tok.gguf")
        pocket_ok("make-model", "--preset", "tiny", "--tokenizer", cls.tok_json, "-o", cls.gguf)
        cls.hf = os.path.join(OWN, "tiny-hf")
        pocket_ok("make-model", "--preset", "tiny", "--format", "hf", "-o", cls.hf)
        words = ["the", "cat", "sat", "on", "a", "mat", "dog", "ran", "fast", "hello", "world"]
        cls.corpus = os.path.join(OWN, "corpus.txt")
        with open(cls.corpus, "w") as f:
            for i in range(200):
                f.write(" ".join(words[(i * 7 + j * 3) % len(words)] for j in range(8)) + "\n")
        cls.eval = os.path.join(OWN, "eval.txt")
        with open(cls.eval, "w") as f:
            f.write("the dog sat on the mat\nhello world\n")

    def expect_refused(self, make_args, inp, forms=("same", "hardlink", "symlink")):
        """make_args(output) -> argv; each form of output naming `inp` must be refused."""
        before = read_bytes(inp)
        for form in forms:
            if form == "same":
                out = inp
            else:
                out = os.path.join(OWN, f"out-{form}-{os.path.basename(inp)}")
                if os.path.lexists(out):
                    os.remove(out)
                if form == "hardlink":
                    os.link(inp, out)
                else:
                    os.symlink(inp, out)
            args = make_args(out)
            p = pocket_run(*args)
            what = f"{form}: pocket {' '.join(map(str, args))}"
            self.assertEqual(p.returncode, 1, f"{what}: exit {p.returncode}; {p.stderr[-2000:]}")
            self.assertIn("pocket: error:", p.stderr, what)
            self.assertIn(out, p.stderr, what)
            self.assertIn("refusing to overwrite", p.stderr, what)
            self.assertEqual(read_bytes(inp), before, f"{what}: the input changed")
            self.assertEqual(temporaries(OWN, os.path.dirname(inp), os.path.dirname(out)), [],
                             what)
            if form != "same":
                os.remove(out)
            print(f"ok: {form}: {p.stderr.strip()[:160]}")

    def test_logits(self):
        for inp in (self.stories, self.stories_tok):
            self.expect_refused(lambda out: ["logits", "-m", self.stories, "--tokenizer",
                                             self.stories_tok, "--ids", "1,2", "-o", out], inp)
        self.expect_refused(lambda out: ["logits", "-m", self.gguf, "--ids", "1,2", "--all",
                                         "-o", out], self.gguf)

    def test_logits_model_directory(self):
        # A Hugging Face directory stands for the files in it that the model loads from.
        for name in ("model.safetensors", "config.json"):
            self.expect_refused(lambda out: ["logits", "-m", self.hf, "--ids", "1,2", "-o", out],
                                os.path.join(self.hf, name))
        # Anything else in the directory may be written.
        out = os.path.join(self.hf, "logits.npy")
        pocket_ok("logits", "-m", self.hf, "--ids", "1,2", "-o", out)
        pocket_ok("logits", "-m", self.hf, "--ids", "1,2", "-o", out)
        os.remove(out)

    def test_make_model(self):
        for inp in (self.tok_json, self.tok_config):
            self.expect_refused(lambda out: ["make-model", "--preset", "tiny", "--format", "gguf",
                                             "--tokenizer", self.tok_json, "-o", out], inp)
        # A directory whose config.json or model.safetensors is (a link to) the tokenizer.
        for name in ("config.json", "model.safetensors"):
            d = os.path.join(OWN, f"hf-out-{name}")
            shutil.rmtree(d, ignore_errors=True)
            os.makedirs(d)
            for form, link in (("hardlink", os.link), ("symlink", os.symlink)):
                target = os.path.join(d, name)
                link(self.tok_json, target)
                p = pocket_run("make-model", "--preset", "tiny", "--format", "hf", "--tokenizer",
                               self.tok_json, "-o", d)
                self.assertEqual(p.returncode, 1, f"{form} {name}: {p.stderr[-2000:]}")
                self.assertIn(target, p.stderr)
                self.assertEqual(temporaries(d, self.tok_dir), [])
                self.assertTrue(os.path.lexists(target), f"{form} {name} was replaced")
                os.remove(target)
            self.assertEqual(read_bytes(self.tok_json), read_bytes(QWEN3_TOKENIZER))

    def prune_args(self, out="-", id_map=None, model_out=None):
        args = ["prune-vocab", "--tokenizer", self.gguf, "--corpus", self.corpus, "--eval",
                self.eval, "--size", 400, "-o", out if out != "-" else os.path.join(OWN, "p.json")]
        if id_map:
            args += ["--id-map", id_map]
        if model_out:
            args += ["--model", self.gguf, "--model-out", model_out]
        return args

    def test_prune_vocab(self):
        # Every output (-o, --id-map, --model-out) against every input (--tokenizer, --corpus,
        # --eval, --model).
        for inp in (self.gguf, self.corpus, self.eval):
            self.expect_refused(lambda out: self.prune_args(out=out), inp)
            self.expect_refused(lambda out: self.prune_args(id_map=out), inp)
            self.expect_refused(
                lambda out: self.prune_args(model_out=out) + ["--id-map",
                                                              os.path.join(OWN, "ids.json")], inp)
        self.assertFalse(os.path.exists(os.path.join(OWN, "p.json")))  # refused before writing
        self.assertFalse(os.path.exists(os.path.join(OWN, "ids.json")))
        # Two outputs naming one file: a usage error.
        same = os.path.join(OWN, "same.out")
        p = pocket_run(*self.prune_args(out=same, model_out=same))
        self.assertEqual(p.returncode, 2, p.stderr)
        self.assertIn("--model-out", p.stderr)
        self.assertFalse(os.path.exists(same))
        # And the command still works.
        pocket_ok(*self.prune_args(id_map=os.path.join(OWN, "ids.json"),
                                   model_out=os.path.join(OWN, "p.gguf")))
        ids = json.loads(read_bytes(os.path.join(OWN, "ids.json")))
        self.assertEqual(len(ids), 400)


class Tokenize(unittest.TestCase):
    def stdin_ids(self, text):
        p = pocket_ok("tokenize", "-m", STORIES, "--tokenizer", STORIES_TOK,
                      stdin=json.dumps({"text": text}) + "\n")
        return json.loads(p.stdout)["ids"]

    def test_prompt_matches_run(self):
        text = "Once upon a time"
        p = pocket_ok("tokenize", "-m", STORIES, "--tokenizer", STORIES_TOK, "-p", text)
        lines = p.stdout.splitlines()
        self.assertEqual(len(lines), 1)
        ids = json.loads(lines[0])["ids"]
        # stories260K's SentencePiece vocabulary adds BOS (id 1), as run does for its prompt.
        self.assertEqual(ids, [1] + self.stdin_ids(text))
        run = pocket_ok("run", "-m", STORIES, "--tokenizer", STORIES_TOK, "-p", text, "-n", 1,
                        "--temp", 0, "--json")
        self.assertEqual(json.loads(run.stdout.splitlines()[-1])["n_prompt_tokens"], len(ids))
        no_bos = pocket_ok("tokenize", "-m", STORIES, "--tokenizer", STORIES_TOK, "-p", text,
                           "--no-bos")
        self.assertEqual(json.loads(no_bos.stdout)["ids"], self.stdin_ids(text))

    def test_empty_prompt_is_the_token_run_starts_from(self):
        p = pocket_ok("tokenize", "-m", STORIES, "--tokenizer", STORIES_TOK, "-p", "")
        self.assertEqual(json.loads(p.stdout)["ids"], [1])
        run = pocket_ok("run", "-m", STORIES, "--tokenizer", STORIES_TOK, "-p", "", "-n", 1,
                        "--temp", 0, "--json")
        self.assertEqual(json.loads(run.stdout)["n_prompt_tokens"], 1)
        p = pocket_ok("tokenize", "-m", STORIES, "--tokenizer", STORIES_TOK, "-p", "", "--no-bos")
        self.assertEqual(json.loads(p.stdout)["ids"], [])

    def test_prompt_without_bos_tokenizer(self):
        require(QWEN3_TOKENIZER, "run scripts/fetch_fixtures.sh")
        text = "<|im_start|>user hello"
        p = pocket_ok("tokenize", "-m", QWEN3_TOKENIZER, "-p", text)
        stdin = pocket_ok("tokenize", "-m", QWEN3_TOKENIZER, stdin=json.dumps({"text": text}))
        self.assertEqual(json.loads(p.stdout), json.loads(stdin.stdout))  # Qwen3 adds no BOS
        self.assertEqual(json.loads(p.stdout)["ids"][0], 151644)
        p = pocket_ok("tokenize", "-m", QWEN3_TOKENIZER, "-p", text, "--no-parse-special")
        self.assertNotIn(151644, json.loads(p.stdout)["ids"])


class Score(unittest.TestCase):
    def test_candidate_rule(self):
        def ids(text):
            p = pocket_ok("tokenize", "-m", STORIES, "--tokenizer", STORIES_TOK,
                          stdin=json.dumps({"text": text}) + "\n")
            return json.loads(p.stdout)["ids"]

        prompt_ids = ids("Once upon a")  # without BOS
        p = pocket_ok("score", "-m", STORIES, "--tokenizer", STORIES_TOK, "-p", "Once upon a",
                      "--candidates", " time, day", "--json")
        report = json.loads(p.stdout)
        self.assertEqual(report["prompt_tokens"], 1 + len(prompt_ids))  # BOS, as run
        tokens = {c["text"]: c["tokens"] for c in report["candidates"]}
        self.assertEqual(set(tokens), {" time", " day"})
        for cand in (" time", " day"):
            joint = ids("Once upon a" + cand)
            self.assertEqual(joint[:len(prompt_ids)], prompt_ids)
            self.assertEqual(tokens[cand], joint[len(prompt_ids):], cand)
            # Not the candidate encoded alone (SentencePiece's dummy prefix adds a token).
            self.assertNotEqual(tokens[cand], ids(cand), cand)
        self.assertEqual(report["candidates"][0]["text"], " time")
        # A prompt given as ids has no text to join: each candidate is encoded alone.
        p = pocket_ok("score", "-m", STORIES, "--tokenizer", STORIES_TOK, "--ids",
                      ",".join(map(str, [1] + prompt_ids)), "--candidates", " time, day", "--json")
        tokens = {c["text"]: c["tokens"] for c in json.loads(p.stdout)["candidates"]}
        self.assertEqual(tokens[" time"], ids(" time"))

    def test_help_states_the_rule(self):
        text = pocket_ok("score", "--help").stdout
        self.assertIn("after the prompt's own tokens", text)


class UsageAndHelp(unittest.TestCase):
    def test_usage_errors_exit_2(self):
        out = work_path("cli-tools-usage.npy")
        cases = [
            (["score", "-m", STORIES, "--tokenizer", STORIES_TOK, "--candidates", "a,b"], "-p"),
            (["score", "-m", STORIES, "--tokenizer", STORIES_TOK, "-p", "x", "--ids", "1",
              "--candidates", "a"], "--ids"),
            (["score", "-m", STORIES, "--tokenizer", STORIES_TOK, "--ids", "1", "--chat",
              "--candidates", "a"], "--chat"),
            (["score", "-m", STORIES, "--tokenizer", STORIES_TOK, "-p", "x", "--candidates",
              "a,,b"], "empty"),
            (["score", "-m", STORIES, "--tokenizer", STORIES_TOK, "-p", "x"], "--candidates"),
            (["score", "-m", STORIES, "--tokenizer", STORIES_TOK, "--ids", "1,x",
              "--candidates", "a"], "not a token id"),
            (["score", "-m", STORIES, "--tokenizer", STORIES_TOK, "-p", "x", "--head",
              "--candidates", "a"], "--head"),
            (["logits", "-m", STORIES, "--ids", "1,x", "-o", out], "not a token id"),
            (["logits", "-m", STORIES, "--ids", "", "-o", out], "--ids"),
            (["logits", "-m", STORIES, "--ids", "1", "-o", ""], "-o"),
            (["tokenize", "-m", STORIES, "--tokenizer", STORIES_TOK, "--no-bos"], "--no-bos"),
            (["info", ""], "empty"),
            (["make-model", "--preset", "huge", "-o", work_path("x.gguf")], "unknown preset"),
            (["make-model", "--type", "q3", "-o", work_path("x.gguf")], "--type"),
            (["make-model", "--arch", "gpt", "-o", work_path("x.gguf")], "--arch"),
            (["make-model", "--tied", "--untied", "-o", work_path("x.gguf")], "--tied"),
            (["make-model", "--format", "onnx", "-o", work_path("x.gguf")], "--format"),
            (["make-model", "--type", "q4_0", "-o", work_path("x-hf")], "f32, f16 or bf16"),
            (["prune-vocab", "--tokenizer", STORIES, "--corpus", STORIES, "-o", out, "--model",
              STORIES], "--model-out"),
            (["prune-vocab", "--tokenizer", STORIES, "--corpus", STORIES, "-o", out,
              "--held-out", "1.5"], "--held-out"),
        ]
        for args, word in cases:
            p = pocket_run(*args)
            what = f"pocket {' '.join(args)}"
            self.assertEqual(p.returncode, 2, f"{what}: exit {p.returncode}; {p.stderr[-1000:]}")
            self.assertIn("pocket: error:", p.stderr, what)
            self.assertIn(word, p.stderr, what)
            self.assertFalse(os.path.exists(out), what)
        self.assertFalse(os.path.exists(work_path("x-hf")))

    def test_runtime_errors_exit_1(self):
        p = pocket_run("score", "-m", STORIES, "--tokenizer", STORIES_TOK, "--ids", "1,99999",
                       "--candidates", "a")
        self.assertEqual(p.returncode, 1, p.stderr)
        self.assertIn("outside the vocabulary", p.stderr)
        p = pocket_run("tokenize", "-m", STORIES, "-p", "x")
        self.assertEqual(p.returncode, 1, p.stderr)
        self.assertIn("--tokenizer", p.stderr)

    def test_help(self):
        """Every option has a description; --help ends with two or three examples."""
        for cmd in TOOLS:
            p = pocket_ok(cmd, "--help")
            lines = p.stdout.rstrip("\n").split("\n")
            section = None
            n_options = 0
            for i, line in enumerate(lines):
                if re.match(r"^[A-Z][A-Za-z]*:$", line):
                    section = line[:-1]
                    continue
                if section not in ("Options", "Positionals") or not line.startswith("  ") \
                        or line.startswith("   "):
                    continue
                n_options += 1
                m = re.match(r"^  (\S.*?)(?:\s{2,}(\S.*))?$", line)
                description = m.group(2)
                if description is None and i + 1 < len(lines) and \
                        re.match(r"^\s{8,}\S", lines[i + 1]):
                    description = lines[i + 1].strip()  # a long name: the description below
                self.assertTrue(description, f"{cmd}: no description for {line.strip()!r}")
            self.assertGreater(n_options, 2, cmd)
            examples = lines[lines.index("Examples:") + 1:] if "Examples:" in lines else []
            self.assertTrue(2 <= len(examples) <= 3, f"{cmd}: examples {examples}\n{p.stdout}")
            for e in examples:
                self.assertTrue(e.startswith(f"  pocket {cmd} ") or
                                re.match(rf"^  .*\| pocket {cmd} ", e), f"{cmd}: {e!r}")


if __name__ == "__main__":
    main_unittest()
