"""pocket run --spec from the command line: every drafter (prompt lookup, a draft model, a DFlash
block drafter, the auto policy) gives plain decoding's greedy tokens; --json lists every
verification step; bad drafters are errors that name the problem (another vocabulary: its size or
the first token that differs; a block drafter's bad field or tensor), never a crash.

Uses the real stories260K model (converted with its tokenizer, so a draft model's vocabulary can be
compared token by token) and synthetic drafters in the released layouts."""
import json
import os
import shutil
import struct
import unittest

from harness import STORIES, STORIES_TOK, pocket, work_path, make_model

PROMPTS = [
    "Lily and Tom went to the park. Lily and Tom",
    "The cat sat on the mat. The cat sat on the",
    "Once upon a time",
]


def stories_package(name, tokenizer):
    path = work_path(name)
    if not os.path.exists(path):
        pocket("convert", STORIES, "--tokenizer", tokenizer, "--weights", "f32", "-o", path)
    return path


def modified_tokenizer(token_id):
    """tok512.bin with token `token_id`'s bytes changed (same length): llama2.c's format is
    max_token_length, then per token a float score, an int32 length and the bytes."""
    path = work_path(f"tok512-mod{token_id}.bin")
    with open(STORIES_TOK, "rb") as f:
        data = bytearray(f.read())
    offset = 4
    for i in range(512):
        (length,) = struct.unpack_from("<i", data, offset + 4)
        if i == token_id:
            start = offset + 8
            data[start] = ord("Q") if data[start] != ord("Q") else ord("Z")
            break
        offset += 8 + length
    with open(path, "wb") as f:
        f.write(bytes(data))
    return path


def run_json(model, prompt, *extra):
    p = pocket("run", "-m", model, "-p", prompt, "--temp", "0", "-n", "48", "-t", "1", "--json",
               *extra)
    return json.loads(p.stdout)


class CliSpecTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.target = stories_package("spec-stories.pocket", STORIES_TOK)
        cls.drafter_dir = work_path("spec-stories-dflash")
        if not os.path.exists(cls.drafter_dir):
            pocket("make-model", "--preset", "dflash-drafter", "--target", cls.target, "-o",
                   cls.drafter_dir)

    def test_every_drafter_gives_the_plain_tokens(self):
        specs = ["lookup", "auto", f"draft:{self.target}", f"auto:draft:{self.target}",
                 f"dflash:{self.drafter_dir}", f"auto:dflash:{self.drafter_dir}"]
        for prompt in PROMPTS:
            plain = run_json(self.target, prompt)
            self.assertEqual(plain["verify_passes"], 0)
            self.assertEqual(plain["spec_steps"], [])
            for spec in specs:
                with self.subTest(prompt=prompt, spec=spec):
                    out = run_json(self.target, prompt, "--spec", spec, "--draft-max", "6")
                    # The target verifies on its own table in passes of at most 7 rows (exact
                    # form): plain decoding's tokens by design, whatever the drafter.
                    self.assertEqual(out["tokens"], plain["tokens"])
                    self.assertEqual(out["text"], plain["text"])
                    steps = out["spec_steps"]
                    self.assertEqual(len(steps), out["verify_passes"])
                    self.assertEqual(sum(s["accepted"] for s in steps),
                                     out["accepted_draft_tokens"])
                    self.assertEqual(sum(len(s["drafted"]) for s in steps), out["drafted_tokens"])
                    for s in steps:
                        self.assertTrue(1 <= len(s["drafted"]) <= 6, s)
                        self.assertTrue(0 <= s["accepted"] <= len(s["drafted"]), s)
                    if spec.startswith("draft:"):
                        # The target drafting for itself: every draft is right (and the guard
                        # never pauses it).
                        self.assertGreater(out["verify_passes"], 0)
                        self.assertEqual(out["accepted_draft_tokens"], out["drafted_tokens"])
                        self.assertEqual(out["paused_draft_steps"], 0)

    def test_draft_trees_give_the_plain_tokens(self):
        # Prompt lookup with up to 4 branches: trees where earlier text continued differently.
        trees = 0
        for prompt in PROMPTS:
            plain = run_json(self.target, prompt)
            with self.subTest(prompt=prompt):
                out = run_json(self.target, prompt, "--spec", "lookup", "--draft-branches", "4")
                # Tree passes never take a tile form: plain decoding's tokens by design.
                self.assertEqual(out["tokens"], plain["tokens"])
                self.assertLessEqual(out["tree_passes"], out["verify_passes"])
                self.assertEqual(sum(len(s["drafted"]) for s in out["spec_steps"]),
                                 out["drafted_tokens"])
                trees += out["tree_passes"]
        self.assertGreater(trees, 0)

    def test_a_package_with_a_drafter_speculates_by_default(self):
        packaged = work_path("spec-stories-with-drafter.pocket")
        if not os.path.exists(packaged):
            pocket("convert", STORIES, "--tokenizer", STORIES_TOK, "--weights", "f32",
                   "--drafter", self.drafter_dir, "-o", packaged)
        for prompt in PROMPTS:
            plain = run_json(packaged, prompt, "--spec", "none")
            by_default = run_json(packaged, prompt)  # auto with the packaged drafter
            packaged_dflash = run_json(packaged, prompt, "--spec", "dflash")
            self.assertEqual(by_default["tokens"], plain["tokens"])
            self.assertEqual(packaged_dflash["tokens"], plain["tokens"])
            self.assertGreater(packaged_dflash["verify_passes"], 0)
            # auto decodes plainly or verifies; either way its steps are accounted for
            self.assertGreater(by_default["verify_passes"] + by_default["plain_decode_steps"], 0)
        # Without a packaged drafter: none by default, and dflash is an error saying so.
        self.assertEqual(run_json(self.target, PROMPTS[0])["plain_decode_steps"], 0)
        p = pocket("run", "-m", self.target, "-p", PROMPTS[0], "-n", "8", "--spec", "dflash",
                   check=False)
        self.assertEqual(p.returncode, 1, p.stderr)
        self.assertIn("no block drafter", p.stderr)

    def test_stats_line_reports_the_acceptance(self):
        p = pocket("run", "-m", self.target, "-p", PROMPTS[0], "--temp", "0", "-n", "32",
                   "--spec", "lookup")
        self.assertIn("verification passes", p.stderr)
        self.assertIn("drafted tokens accepted", p.stderr)

    def test_a_draft_model_with_another_vocabulary_is_refused(self):
        other = stories_package("spec-stories-mod.pocket", modified_tokenizer(300))
        p = pocket("run", "-m", self.target, "-p", PROMPTS[0], "-n", "8", "--spec",
                   f"draft:{other}", check=False)
        self.assertEqual(p.returncode, 1, p.stderr)
        self.assertIn("token 300", p.stderr)
        self.assertIn(other, p.stderr)
        # Issue 44: a draft model without a tokenizer (the llama2.c checkpoint alone) was
        # accepted on its size; its table cannot be compared.
        p = pocket("run", "-m", self.target, "-p", PROMPTS[0], "-n", "8", "--spec",
                   f"draft:{STORIES}", check=False)
        self.assertEqual(p.returncode, 1, p.stderr)
        self.assertIn("no tokenizer", p.stderr)
        self.assertIn(STORIES, p.stderr)
        tiny = make_model("spec-tiny.gguf")  # vocabulary 1024
        p = pocket("run", "-m", self.target, "-p", PROMPTS[0], "-n", "8", "--spec",
                   f"draft:{tiny}", check=False)
        self.assertEqual(p.returncode, 1, p.stderr)
        self.assertIn("1024", p.stderr)
        self.assertIn("512", p.stderr)

    def test_bad_block_drafters_name_the_field_or_tensor(self):
        with open(os.path.join(self.drafter_dir, "config.json")) as f:
            config = json.load(f)
        cases = [
            ("mask", lambda c: c["dflash_config"].update(mask_token_id=512), "mask_token_id"),
            ("depth", lambda c: c["dflash_config"].update(target_layer_ids=[0, 9]),
             "target_layer_ids"),
            ("arch", lambda c: c.update(architectures=["Qwen3ForCausalLM"]), "architectures"),
            ("hidden", lambda c: c.update(hidden_size=128), "hidden_size"),
        ]
        for name, edit, needle in cases:
            with self.subTest(case=name):
                bad = work_path(f"spec-bad-dflash-{name}")
                shutil.rmtree(bad, ignore_errors=True)
                shutil.copytree(self.drafter_dir, bad)
                c = json.loads(json.dumps(config))
                edit(c)
                with open(os.path.join(bad, "config.json"), "w") as f:
                    json.dump(c, f)
                p = pocket("run", "-m", self.target, "-p", PROMPTS[0], "-n", "8", "--spec",
                           f"dflash:{bad}", check=False)
                self.assertEqual(p.returncode, 1, p.stderr)
                self.assertIn(needle, p.stderr)
                self.assertNotIn("Traceback", p.stderr)
        p = pocket("run", "-m", self.target, "-p", PROMPTS[0], "-n", "8", "--spec",
                   "dflash:/nonexistent/drafter", check=False)
        self.assertEqual(p.returncode, 1, p.stderr)
        self.assertIn("/nonexistent/drafter", p.stderr)

    def test_usage_errors_exit_2(self):
        cases = [
            (["--spec", "bogus"], "bogus"),
            (["--spec", "lookup", "--draft-max", "0"], "--draft-max"),
            (["--spec", "lookup", "--draft-min", "9"], "--draft-min"),
            (["--spec", f"draft:{self.target}", "--draft-p-min", "1.5"], "--draft-p-min"),
            (["--spec", "draft:"], "draft:"),
            (["--spec", "lookup", "--draft-branches", "9"], "--draft-branches"),
        ]
        for args, needle in cases:
            with self.subTest(args=args):
                p = pocket("run", "-m", self.target, "-p", "x", *args, check=False)
                self.assertEqual(p.returncode, 2, p.stderr)
                self.assertIn(needle, p.stderr)


if __name__ == "__main__":
    unittest.main()
