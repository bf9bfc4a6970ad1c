#!/usr/bin/env python3
"""Unit tests of score.py (hand-computed precision/recall/F1), of schema_check.py, and of the
example's own files (the sample data is valid against schema.json, spans are substrings).
No dependencies, no pocket binary: python3 examples/review-mining/test_score.py"""
import json
import os
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import schema_check  # noqa: E402
import score  # noqa: E402


def q(aspect, opinion, category="quality", polarity="positive"):
    return {"aspect": aspect, "opinion": opinion, "category": category, "polarity": polarity}


def gold(rid, *ops):
    return {"id": rid, "review": "", "opinions": list(ops)}


def pred(rid, *ops, error=None):
    return {"id": rid, "review": "", "opinions": list(ops), "error": error, "seconds": 0.1}


class Score(unittest.TestCase):
    def check(self, report, p, r, f, tp, n_pred, n_gold):
        self.assertAlmostEqual(report["precision"], p, places=12)
        self.assertAlmostEqual(report["recall"], r, places=12)
        self.assertAlmostEqual(report["f1"], f, places=12)
        self.assertEqual((report["tp"], report["predicted"], report["gold"]), (tp, n_pred, n_gold))

    def test_perfect(self):
        g = [gold("a", q("case", "cheap", "quality", "negative"), q("", "Love it", "overall")),
             gold("b")]
        self.check(score.score(g, [dict(r, error=None) for r in g]), 1, 1, 1, 2, 2, 2)

    def test_micro_average_over_reviews(self):
        # a: gold 3, predicted 2, 1 right; b: gold 2, predicted 1, 1 right.
        # TP 2, predicted 3, gold 5: P 2/3, R 2/5, F1 = 2*(2/3)*(2/5) / (2/3 + 2/5) = 1/2.
        g = [gold("a", q("x", "good"), q("y", "bad", polarity="negative"), q("z", "ok")),
             gold("b", q("u", "nice"), q("v", "fine"))]
        p = [pred("a", q("x", "good"), q("y", "bad")), pred("b", q("u", "nice"))]
        self.check(score.score(g, p), 2 / 3, 2 / 5, 0.5, 2, 3, 5)

    def test_all_four_fields_must_match(self):
        g = [gold("a", q("battery", "lasts", "performance", "positive"))]
        for wrong in (q("Battery", "lasts", "performance", "positive"),  # case matters
                      q("battery", "last", "performance", "positive"),
                      q("battery", "lasts", "quality", "positive"),
                      q("battery", "lasts", "performance", "neutral")):
            self.check(score.score(g, [pred("a", wrong)]), 0, 0, 0, 0, 1, 1)

    def test_whitespace_is_stripped(self):
        g = [gold("a", q("screen", "bright"))]
        p = [pred("a", q(" screen", "bright \n", " quality", "positive "))]
        self.check(score.score(g, p), 1, 1, 1, 1, 1, 1)

    def test_duplicates_are_a_multiset(self):
        # Predicted twice, gold once: 1 TP, 1 FP. Gold twice, predicted once: 1 TP, 1 FN.
        g = [gold("a", q("x", "good")), gold("b", q("y", "bad"), q("y", "bad"))]
        p = [pred("a", q("x", "good"), q("x", "good")), pred("b", q("y", "bad"))]
        # TP 2, predicted 3, gold 3: P = R = F1 = 2/3.
        self.check(score.score(g, p), 2 / 3, 2 / 3, 2 / 3, 2, 3, 3)
        # Twice in both: 2 TP (a set would count 1). Three times predicted, twice gold: 2 TP.
        g = [gold("a", q("x", "good"), q("x", "good"))]
        self.check(score.score(g, [pred("a", q("x", "good"), q("x", "good"))]), 1, 1, 1, 2, 2, 2)
        self.check(score.score(g, [pred("a", *[q("x", "good")] * 3)]), 2 / 3, 1, 0.8, 2, 3, 2)

    def test_order_does_not_matter(self):
        g = [gold("a", q("x", "good"), q("y", "bad"))]
        p = [pred("a", q("y", "bad"), q("x", "good"))]
        self.check(score.score(g, p), 1, 1, 1, 2, 2, 2)

    def test_empty_predictions(self):
        g = [gold("a", q("x", "good")), gold("b", q("y", "bad"))]
        self.check(score.score(g, [pred("a"), pred("b")]), 0, 0, 0, 0, 0, 2)

    def test_empty_gold_and_predictions(self):
        # Nothing to find, nothing found: every ratio has a zero denominator and is 0.
        self.check(score.score([gold("a")], [pred("a")]), 0, 0, 0, 0, 0, 0)

    def test_false_positive_on_review_without_opinions(self):
        g = [gold("a", q("x", "good")), gold("b")]
        p = [pred("a", q("x", "good")), pred("b", q("mug", "blue"))]
        # TP 1, predicted 2, gold 1: P 1/2, R 1, F1 2/3.
        self.check(score.score(g, p), 0.5, 1, 2 / 3, 1, 2, 1)

    def test_error_counts_as_no_prediction(self):
        g = [gold("a", q("x", "good")), gold("b", q("y", "bad"))]
        p = [pred("a", q("x", "good")),
             pred("b", q("y", "bad"), error="the token budget of 5 ran out")]
        report = score.score(g, p)
        # TP 1, predicted 1, gold 2: P 1, R 1/2, F1 2/3.
        self.check(report, 1, 0.5, 2 / 3, 1, 1, 2)
        self.assertEqual(report["errors"], 1)

    def test_missing_prediction_counts_as_no_prediction(self):
        g = [gold("a", q("x", "good")), gold("b", q("y", "bad"))]
        report = score.score(g, [pred("a", q("x", "good"))])
        self.check(report, 1, 0.5, 2 / 3, 1, 1, 2)
        self.assertEqual(report["missing"], 1)

    def test_extra_prediction_is_ignored(self):
        g = [gold("a", q("x", "good"))]
        report = score.score(g, [pred("a", q("x", "good")), pred("zzz", q("y", "bad"))])
        self.check(report, 1, 1, 1, 1, 1, 1)
        self.assertEqual(report["extra_predictions"], 1)

    def test_malformed_prediction_counts_but_never_matches(self):
        g = [gold("a", q("x", "good"))]
        bad = {"aspect": "x", "opinion": "good", "category": "quality"}  # no polarity
        report = score.score(g, [pred("a", bad, "not an object", q("x", "good"))])
        # TP 1, predicted 3, gold 1: P 1/3, R 1, F1 = 2*(1/3) / (4/3) = 1/2.
        self.check(report, 1 / 3, 1, 0.5, 1, 3, 1)
        self.assertEqual(report["malformed"], 2)

    def test_field_diagnostics(self):
        g = [gold("a", q("lid", "does not close", "quality", "negative"), q("", "cheap", "price",
                                                                            "positive"))]
        p = [pred("a", q("lid", "does not close", "quality", "neutral"),
                  q("", "cheap", "price", "positive"))]
        report = score.score(g, p, fields=True)
        self.check(report, 0.5, 0.5, 0.5, 1, 2, 2)
        f = report["fields"]
        for name in ("aspect", "opinion", "category", "aspect+opinion"):
            self.check(f[name], 1, 1, 1, 2, 2, 2)
        for name in ("polarity", "aspect+category+polarity", "category+polarity"):
            self.check(f[name], 0.5, 0.5, 0.5, 1, 2, 2)

    def test_field_projection_is_a_multiset_too(self):
        # Two gold opinions share an empty aspect; one prediction with that aspect matches one.
        g = [gold("a", q("", "good"), q("", "bad"))]
        report = score.score(g, [pred("a", q("", "fine"))], fields=True)
        self.check(report["fields"]["aspect"], 1, 0.5, 2 / 3, 1, 1, 2)
        report = score.score(g, [pred("a", q("", "fine"), q("", "nice"))], fields=True)
        self.check(report["fields"]["aspect"], 1, 1, 1, 2, 2, 2)
        self.check(report, 0, 0, 0, 0, 2, 2)

    def test_bad_inputs_raise(self):
        with self.assertRaisesRegex(score.ScoreError, "appears twice"):
            score.score([gold("a"), gold("a")], [])
        with self.assertRaisesRegex(score.ScoreError, "appears twice"):
            score.score([gold("a")], [pred("a"), pred("a")])
        with self.assertRaisesRegex(score.ScoreError, "no \"opinions\""):
            score.score([{"id": "a", "review": "r"}], [])
        with self.assertRaisesRegex(score.ScoreError, "no \"id\""):
            score.score([gold("a")], [{"opinions": []}])


class ScoreCli(unittest.TestCase):
    def run_cli(self, gold_lines, pred_lines, *flags):
        with tempfile.TemporaryDirectory() as tmp:
            paths = []
            for name, lines in (("gold.jsonl", gold_lines), ("pred.jsonl", pred_lines)):
                path = os.path.join(tmp, name)
                with open(path, "w", encoding="utf-8") as f:
                    f.write("".join(json.dumps(x, ensure_ascii=False) + "\n" for x in lines))
                paths.append(path)
            return subprocess.run([sys.executable, os.path.join(HERE, "score.py"),
                                   "--gold", paths[0], "--pred", paths[1], *flags],
                                  capture_output=True, text=True, timeout=60)

    def test_json_output(self):
        g = [gold("a", q("物流", "很快", "delivery")), gold("b", q("x", "good"))]
        p = [pred("a", q("物流", "很快", "delivery")), pred("b")]
        r = self.run_cli(g, p, "--json", "--fields")
        self.assertEqual(r.returncode, 0, r.stderr)
        report = json.loads(r.stdout)
        self.assertEqual((report["tp"], report["predicted"], report["gold"]), (1, 1, 2))
        self.assertAlmostEqual(report["f1"], 2 / 3)
        self.assertIn("aspect+opinion", report["fields"])
        self.assertNotIn("per_review", report)

    def test_text_output(self):
        r = self.run_cli([gold("a", q("x", "good"))], [pred("a", q("x", "good"))])
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("all four fields", r.stdout)
        self.assertIn("1.000", r.stdout)

    def test_error_exit(self):
        r = self.run_cli([gold("a"), gold("a")], [])
        self.assertEqual(r.returncode, 2)
        self.assertIn("appears twice", r.stderr)

    def test_sample_scores_itself_perfectly(self):
        for name in ("sample.jsonl", "sample_zh.jsonl"):
            path = os.path.join(HERE, "data", name)
            r = subprocess.run([sys.executable, os.path.join(HERE, "score.py"), "--gold", path,
                                "--pred", path, "--json"], capture_output=True, text=True)
            self.assertEqual(r.returncode, 0, r.stderr)
            self.assertEqual(json.loads(r.stdout)["f1"], 1.0, name)


class SchemaCheck(unittest.TestCase):
    schema = schema_check.load_schema(os.path.join(HERE, "schema.json"))
    review = "Fast delivery, but the case feels cheap."

    def errors(self, value):
        return schema_check.validate(value, self.schema, span_source=self.review)

    def test_valid(self):
        self.assertEqual(self.errors({"opinions": []}), [])
        self.assertEqual(self.errors({"opinions": [q("case", "feels cheap", "quality",
                                                     "negative"), q("", "", "overall",
                                                                    "neutral")]}), [])

    def test_invalid(self):
        cases = {
            "not a substring": {"opinions": [q("battery", "cheap")]},
            "not one of": {"opinions": [q("case", "cheap", "durability")]},
            "is missing": {"opinions": [{"aspect": "case", "opinion": "cheap",
                                         "category": "quality"}]},
            "not allowed": {"opinions": [dict(q("case", "cheap"), note="x")]},
            "more than maxItems": {"opinions": [q("case", "cheap")] * 9},
            "more than maxLength": {"opinions": [q("Fast delivery, but the case feels", "")]},
            "expected string": {"opinions": [q(None, "cheap")]},
            "expected array": {"opinions": {}},
            "'opinions' is missing": {},
        }
        for message, value in cases.items():
            errs = self.errors(value)
            self.assertTrue(any(message in e for e in errs), (message, errs))

    def test_span_counts_characters_not_bytes(self):
        self.assertEqual(schema_check.validate("物流很快", {"type": "string", "maxLength": 4}), [])

    def test_other_keywords(self):
        s = {"anyOf": [{"const": 1}, {"type": "string", "minLength": 2}]}
        self.assertEqual(schema_check.validate(1, s), [])
        self.assertEqual(schema_check.validate("ab", s), [])
        self.assertTrue(schema_check.validate("a", s))
        self.assertTrue(schema_check.validate(True, s))  # True is not 1 in JSON
        self.assertTrue(schema_check.validate([], {"type": "array", "minItems": 1}))
        self.assertTrue(schema_check.validate("x", {"pattern": "x"}))  # unsupported: reported

    def test_order_and_separators(self):
        good = '{"opinions":[{"aspect":"case","opinion":"feels cheap", "category":"quality",' \
               '"polarity": "negative"}]}'
        self.assertEqual(schema_check.order_errors(good, self.schema), [])
        self.assertEqual(schema_check.separator_errors(good), [])
        swapped = '{"opinions":[{"opinion":"x","aspect":"","category":"price","polarity":"neutral"}]}'
        self.assertTrue(schema_check.order_errors(swapped, self.schema))
        self.assertTrue(schema_check.separator_errors('{"opinions" :[]}'))
        self.assertTrue(schema_check.separator_errors('{"opinions":  []}'))
        self.assertTrue(schema_check.separator_errors('{"opinions":[\n]}'))
        self.assertEqual(schema_check.separator_errors('{"a":"x  y\\" ,  z"}'), [])


class SampleData(unittest.TestCase):
    schema = schema_check.load_schema(os.path.join(HERE, "schema.json"))

    def test_gold_is_valid_against_the_schema(self):
        for name in ("sample.jsonl", "sample_zh.jsonl"):
            ids = set()
            with open(os.path.join(HERE, "data", name), encoding="utf-8") as f:
                for line in f:
                    r = json.loads(line)
                    self.assertNotIn(r["id"], ids)
                    ids.add(r["id"])
                    errs = schema_check.validate({"opinions": r["opinions"]}, self.schema,
                                                 span_source=r["review"])
                    self.assertEqual(errs, [], r["id"])
                    for o in r["opinions"]:  # already stripped, so exact match is fair
                        self.assertEqual(o["aspect"], o["aspect"].strip(), r["id"])
                        self.assertEqual(o["opinion"], o["opinion"].strip(), r["id"])
            self.assertGreaterEqual(len(ids), 10, name)

    def test_english_sample_is_ascii(self):
        with open(os.path.join(HERE, "data", "sample.jsonl"), encoding="utf-8") as f:
            self.assertTrue(f.read().isascii())

    def test_prompt_has_one_placeholder(self):
        with open(os.path.join(HERE, "prompt.txt"), encoding="utf-8") as f:
            text = f.read()
        self.assertEqual(text.count("{review}"), 1)
        categories = self.schema["properties"]["opinions"]["items"]["properties"]["category"]
        for c in categories["enum"]:  # the prompt lists every category
            self.assertIn(c, text)


if __name__ == "__main__":
    unittest.main(argv=[sys.argv[0], "-v"])
