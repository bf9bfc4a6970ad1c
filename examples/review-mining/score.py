#!/usr/bin/env python3
"""F1 of predicted opinion quadruples against gold ones.

A predicted quadruple (aspect, opinion, category, polarity) is correct when all four fields
equal a gold quadruple's (each compared after stripping surrounding whitespace). Per review
the quadruples are multisets: a quadruple predicted twice and gold once counts one true
positive and one false positive. Counts are summed over the file (micro-average):

  precision = TP / predicted,  recall = TP / gold,  F1 = 2 P R / (P + R)

with 0 for a ratio whose denominator is 0. A gold review with no prediction line, or whose
prediction has an error, counts as predicting nothing. --fields adds the same figures for each
field alone and for some pairs, to show which field the misses come from.

  score.py --gold data/sample.jsonl --pred predictions.jsonl [--json] [--fields]"""
import argparse
import json
import sys
from collections import Counter

FIELDS = ("aspect", "opinion", "category", "polarity")
# Diagnostic projections: each quadruple reduced to these fields, then scored the same way.
PROJECTIONS = {
    "aspect": ("aspect",),
    "opinion": ("opinion",),
    "category": ("category",),
    "polarity": ("polarity",),
    "aspect+opinion": ("aspect", "opinion"),
    "aspect+category+polarity": ("aspect", "category", "polarity"),
    "category+polarity": ("category", "polarity"),
}


class ScoreError(Exception):
    pass


def quad(item):
    """The four fields of one opinion, stripped; None for a malformed entry (a non-object, or a
    field that is missing or not a string), which counts as predicted but never matches."""
    if not isinstance(item, dict):
        return None
    values = []
    for field in FIELDS:
        v = item.get(field)
        if not isinstance(v, str):
            return None
        values.append(v.strip())
    return tuple(values)


def prf(tp, n_pred, n_gold):
    p = tp / n_pred if n_pred else 0.0
    r = tp / n_gold if n_gold else 0.0
    f = 2 * p * r / (p + r) if p + r else 0.0
    return {"precision": p, "recall": r, "f1": f, "tp": tp, "predicted": n_pred, "gold": n_gold}


def matches(gold, pred, keys=FIELDS):
    """True positives between two lists of quadruples (multisets), projected to keys."""
    idx = [FIELDS.index(k) for k in keys]
    g = Counter(tuple(q[i] for i in idx) for q in gold if q is not None)
    p = Counter(tuple(q[i] for i in idx) for q in pred if q is not None)
    return sum((g & p).values())


def score(gold_records, pred_records, fields=False):
    """gold_records, pred_records: lists of dicts as read from the JSONL files. Returns the
    report (a dict). Raises ScoreError on duplicate ids or gold without "opinions"."""
    gold = {}
    for r in gold_records:
        if "id" not in r:
            raise ScoreError(f"a gold line has no \"id\": {json.dumps(r)[:80]}")
        if r["id"] in gold:
            raise ScoreError(f"gold id {r['id']!r} appears twice")
        if not isinstance(r.get("opinions"), list):
            raise ScoreError(f"gold id {r['id']!r} has no \"opinions\" list")
        gold[r["id"]] = [quad(o) for o in r["opinions"]]
        if None in gold[r["id"]]:
            raise ScoreError(f"gold id {r['id']!r} has a malformed opinion")
    pred = {}
    n_errors = n_malformed = 0
    extra = []
    for r in pred_records:
        if "id" not in r:
            raise ScoreError(f"a prediction line has no \"id\": {json.dumps(r)[:80]}")
        if r["id"] in pred:
            raise ScoreError(f"prediction id {r['id']!r} appears twice")
        if r["id"] not in gold:
            extra.append(r["id"])
            pred[r["id"]] = []
            continue
        if r.get("error") is not None:
            n_errors += 1
        opinions = r.get("opinions") if r.get("error") is None else []
        if not isinstance(opinions, list):
            opinions = []
        pred[r["id"]] = [quad(o) for o in opinions]
        n_malformed += sum(q is None for q in pred[r["id"]])
    missing = [i for i in gold if i not in pred]

    keys_list = {"all": FIELDS}
    if fields:
        keys_list.update(PROJECTIONS)
    totals = {name: [0, 0, 0] for name in keys_list}  # tp, predicted, gold
    reviews = []
    for rid, g in gold.items():
        p = pred.get(rid, [])
        for name, keys in keys_list.items():
            t = totals[name]
            t[0] += matches(g, p, keys)
            t[1] += len(p)
            t[2] += len(g)
        tp = matches(g, p)
        reviews.append({"id": rid, "tp": tp, "predicted": len(p), "gold": len(g)})
    report = prf(*totals["all"])
    report.update(reviews=len(gold), errors=n_errors, missing=len(missing),
                  malformed=n_malformed, extra_predictions=len(extra))
    if fields:
        report["fields"] = {name: prf(*totals[name]) for name in PROJECTIONS}
    report["per_review"] = reviews
    return report


def read_jsonl(path):
    records = []
    with open(path, encoding="utf-8") as f:
        for number, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except ValueError as e:
                raise ScoreError(f"{path}:{number}: not JSON: {e}")
            if not isinstance(record, dict):
                raise ScoreError(f"{path}:{number}: not a JSON object")
            records.append(record)
    return records


def format_text(report):
    lines = [f"reviews {report['reviews']}  errors {report['errors']}  missing {report['missing']}"
             f"  malformed {report['malformed']}  extra {report['extra_predictions']}",
             f"{'':26} {'P':>6} {'R':>6} {'F1':>6} {'TP':>5} {'pred':>5} {'gold':>5}"]
    rows = [("all four fields", report)] + list(report.get("fields", {}).items())
    for name, r in rows:
        lines.append(f"{name:26} {r['precision']:6.3f} {r['recall']:6.3f} {r['f1']:6.3f} "
                     f"{r['tp']:5d} {r['predicted']:5d} {r['gold']:5d}")
    return "\n".join(lines)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                epilog=__doc__.split("\n\n", 1)[1],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--gold", required=True, help="JSONL with \"id\" and gold \"opinions\"")
    p.add_argument("--pred", required=True, help="predictions JSONL (run.py --out)")
    p.add_argument("--json", action="store_true", help="print the report as one JSON object")
    p.add_argument("--fields", action="store_true", help="also score single fields and pairs")
    p.add_argument("--per-review", action="store_true",
                   help="with --json: keep the per-review counts")
    args = p.parse_args(argv)
    try:
        report = score(read_jsonl(args.gold), read_jsonl(args.pred), fields=args.fields)
    except (ScoreError, OSError) as e:
        print(f"score.py: error: {e}", file=sys.stderr)
        return 2
    if not args.per_review:
        del report["per_review"]
    print(json.dumps(report) if args.json else format_text(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
