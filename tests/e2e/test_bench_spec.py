"""pocket bench --spec: speculative decoding measured against plain decoding in the same run.

- One JSON row per (model, threads, mode) with the mode in "spec", the verification cost curve
  c(1..16) (16 positive ratios), acceptance length, tokens per target pass, drafter share, plain and
  speculative decode tokens/s (median, min, max) and their ratio; the existing fields stay.
- The oracle drafter (the model's own greedy continuation, each drafted token kept with
  probability P): at P = 1 every drafted token is kept (about draft_max per pass, several tokens
  per target pass), at P = 0 none; in between some. The bench itself fails when a speculative run
  emits other tokens than plain greedy decoding, so every run here also checks losslessness.
- --verify-cost alone measures the curve (a row with "spec": null); the markdown output gains the
  cost and speculative tables.
- Bad modes, P outside [0, 1] and a bad --draft-max exit 2 naming the option and the value.
Runs are tiny (a synthetic model and stories260K, few tokens, one repetition, no ceilings): no
timing is asserted.
"""
import math
import os
import unittest

from harness import STORIES, json_lines, main_unittest, make_model, pocket

N_PROMPT, N_GEN, DRAFT_MAX = 16, 24, 4
MODES = ["oracle:1", "oracle:0.7", "oracle:0", "auto:oracle:0", "lookup"]


class BenchSpec(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.model = make_model("bench-tiny.gguf")
        out = cls.bench(cls.model, "--spec", ",".join(MODES[:3]), "--spec", MODES[3], "--spec",
                        MODES[4], "--json")
        cls.rows = {r["spec"]: r for r in json_lines(out.stdout)}

    @staticmethod
    def bench(model, *args, check=True):
        return pocket("bench", "-m", model, "-t", 1, "-r", 1, "--no-ceilings", "-p", N_PROMPT,
                      "-n", N_GEN, "--draft-max", DRAFT_MAX, *args, check=check)

    def test_a_row_per_mode_with_the_fields(self):
        self.assertEqual(sorted(self.rows), sorted(MODES))
        for mode, r in self.rows.items():
            print(f"{mode}: accepted/pass {r['acceptance_length']:.2f}, tokens/pass "
                  f"{r['tokens_per_pass']:.2f}, speedup {r['spec_speedup']:.2f}, "
                  f"drafter share {r['draft_share']:.4f}")
            self.assertEqual(r["measured"], ["prefill", "decode", "verify_cost", "spec_decode"])
            for field in ("decode_tokens_per_s", "prefill_tokens_per_s", "load_ms",
                          "session_bytes"):
                self.assertIn(field, r)  # the existing fields stay
            self.assertEqual(len(r["verify_cost"]), 16)
            self.assertTrue(all(c > 0 and math.isfinite(c) for c in r["verify_cost"]),
                            r["verify_cost"])
            self.assertGreater(r["decode_step_ms"], 0)
            self.assertEqual(r["draft_max"], DRAFT_MAX)
            self.assertEqual(r["spec_auto"], mode.startswith("auto:"))
            self.assertEqual(r["spec_tokens"], N_GEN)
            for name in ("plain_decode_tokens_per_s", "spec_decode_tokens_per_s"):
                self.assertGreater(r[name], 0)
                self.assertLessEqual(r[name + "_min"], r[name])
                self.assertGreaterEqual(r[name + "_max"], r[name])
            self.assertAlmostEqual(r["spec_speedup"],
                                   r["spec_decode_tokens_per_s"] / r["plain_decode_tokens_per_s"],
                                   delta=1e-3 * r["spec_speedup"] + 1e-4)
            self.assertGreaterEqual(r["draft_share"], 0)
            self.assertLess(r["draft_share"], 1)
            self.assertGreaterEqual(r["acceptance_length"], 0)
            self.assertLessEqual(r["acceptance_length"], DRAFT_MAX)
            self.assertLessEqual(r["accepted_draft_tokens"], r["drafted_tokens"])
            self.assertGreater(r["tokens_per_pass"], 0)
            self.assertLessEqual(r["tokens_per_pass"], DRAFT_MAX + 1)
        # The same plain runs serve every mode.
        plain = {r["plain_decode_tokens_per_s"] for r in self.rows.values()}
        self.assertEqual(len(plain), 1)

    def test_oracle_acceptance_follows_p(self):
        full, none, some = self.rows["oracle:1"], self.rows["oracle:0"], self.rows["oracle:0.7"]
        # P = 1: every drafted token kept, nearly draft_max per pass (the budget's end drafts
        # fewer), several tokens per target pass.
        # Exact by design: the oracle drafts plain decoding's greedy tokens, and verify passes
        # under 32 rows on the same table reproduce them.
        self.assertEqual(full["accepted_draft_tokens"], full["drafted_tokens"])
        self.assertGreater(full["drafted_tokens"], 0)
        self.assertGreaterEqual(full["acceptance_length"], 0.75 * DRAFT_MAX)
        self.assertGreater(full["tokens_per_pass"], 2)
        self.assertEqual(full["draft_acceptance"], 1)
        # P = 0: nothing kept, one token per pass (the budget's last token takes no pass).
        self.assertEqual(none["acceptance_length"], 0)
        self.assertEqual(none["accepted_draft_tokens"], 0)
        self.assertGreater(none["drafted_tokens"], 0)
        self.assertLess(none["tokens_per_pass"], 1.1)
        self.assertEqual(self.rows["auto:oracle:0"]["accepted_draft_tokens"], 0)
        # In between.
        self.assertGreater(some["acceptance_length"], 0)
        self.assertLess(some["acceptance_length"], full["acceptance_length"])
        self.assertLess(some["draft_acceptance"], 1)

    def test_verify_cost_alone(self):
        rows = json_lines(self.bench(self.model, "--verify-cost", "--json").stdout)
        self.assertEqual(len(rows), 1)
        r = rows[0]
        self.assertIsNone(r["spec"])
        self.assertEqual(r["measured"], ["prefill", "decode", "verify_cost"])
        self.assertEqual(len(r["verify_cost"]), 16)
        self.assertTrue(all(c > 0 for c in r["verify_cost"]))
        self.assertNotIn("spec_speedup", r)
        # Without --spec or --verify-cost the rows are as before.
        r = json_lines(self.bench(self.model, "--json").stdout)[0]
        self.assertEqual(r["measured"], ["prefill", "decode"])
        self.assertNotIn("verify_cost", r)

    def test_markdown_tables(self):
        out = self.bench(self.model, "--spec", "oracle:1,lookup", "-p", 0).stdout
        print(out)
        self.assertIn("| c(1) |", out)
        self.assertIn("| c(16) |", out)
        self.assertIn("| spec tg t/s |", out)
        self.assertIn("| oracle:1 | 4 |", out)
        self.assertIn("| lookup | 4 |", out)

    def test_progress_counts_the_new_steps(self):
        out = self.bench(self.model, "--spec", "oracle:1")
        lines = [l for l in out.stderr.splitlines() if l.startswith("pocket bench:")]
        self.assertTrue(lines[-1].endswith("done"), lines[-1])
        # 1 load + 2 runs, the greedy continuation, 10 cost sweeps (a warm-up and at least 9),
        # 2 x (plain + oracle:1) runs.
        self.assertIn("(18/18 steps)", lines[-1])

    def test_stories260k_lookup_and_oracle(self):
        if not os.path.exists(STORIES):
            self.skipTest("the shared test data (../shared/testdata) is missing")
        rows = json_lines(self.bench(STORIES, "--spec", "lookup,oracle:1", "--json").stdout)
        self.assertEqual([r["spec"] for r in rows], ["lookup", "oracle:1"])
        self.assertEqual(rows[1]["accepted_draft_tokens"], rows[1]["drafted_tokens"])
        self.assertGreater(rows[1]["tokens_per_pass"], 2)

    def test_draft_models(self):
        # Issue 44: `--spec draft:FILE` was refused; it is measured as `pocket run` runs it
        # (guarded), and under auto:. The model drafting for itself is always right; a random
        # one-layer model almost never.
        other = make_model("bench-tiny-draft.gguf", seed=2, extra=("--layers", "1"))
        modes = [f"draft:{self.model}", f"draft:{other}", f"auto:draft:{other}"]
        rows = json_lines(self.bench(self.model, "--spec", modes[0], "--spec", modes[1],
                                     "--spec", modes[2], "--json").stdout)
        self.assertEqual([r["spec"] for r in rows], modes)
        self.assertGreater(rows[0]["drafted_tokens"], 0)
        self.assertEqual(rows[0]["accepted_draft_tokens"], rows[0]["drafted_tokens"])
        self.assertGreater(rows[0]["tokens_per_pass"], 2)
        for r in rows[1:]:
            self.assertLess(r["tokens_per_pass"], 1.5, r)
            self.assertGreater(r["plain_steps"], N_GEN // 2, r)
        p = pocket("bench", "-m", self.model, "--no-ceilings", "-n", 4, "--spec",
                   "draft:/nonexistent/d.gguf", check=False)
        self.assertEqual(p.returncode, 1, p.stderr)
        self.assertIn("/nonexistent/d.gguf", p.stderr)

    def test_bad_input_names_the_option_and_value(self):
        for args, words in [
            (["--spec", "oracle:1.5"], ["--spec", "oracle:1.5", "[0, 1]"]),
            (["--spec", "oracle:-0.1"], ["--spec", "oracle:-0.1", "[0, 1]"]),
            (["--spec", "oracle"], ["--spec", "oracle", "P"]),
            (["--spec", "oracle:x"], ["--spec", "oracle:x"]),
            (["--spec", "wizard"], ["--spec", "wizard", "unknown"]),
            (["--spec", "lookup,bogus"], ["--spec", "bogus"]),
            (["--spec", "auto"], ["--spec", "auto", "drafter"]),
            (["--spec", "lookup:2"], ["--spec", "lookup:2"]),
            (["--spec", "draft:"], ["--spec", "draft:", "FILE"]),
            (["--spec", "oracle:1", "--draft-max", "0"], ["--draft-max", "0"]),
            (["--spec", "oracle:1", "--draft-max", "-3"], ["--draft-max", "-3"]),
            (["--spec", "oracle:1", "--draft-max", "x"], ["--draft-max", "x"]),
        ]:
            p = pocket("bench", "-m", self.model, "--no-ceilings", *args, check=False)
            print(args, "->", p.stderr.strip())
            self.assertEqual(p.returncode, 2, args)
            for w in words:
                self.assertIn(w, p.stderr, args)
            self.assertEqual(p.stdout, "")


if __name__ == "__main__":
    main_unittest()
