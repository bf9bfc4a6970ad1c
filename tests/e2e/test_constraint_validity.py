"""JSON-Schema-constrained generation, checked independently: schema_generations (C++) writes
generations of stories260K and of a random-weight model on the Qwen3 vocabulary under the schemas
in tests/e2e/schemas/; every finished output must parse, validate against its schema with Python's
jsonschema (Draft 2020-12, formats checked where the module can), and every span field
("x-pocket-span": true) must be a substring of the source text. A generation may fail only because
its token budget ran out (ResourceExhausted), never return an invalid output."""
import json
import os
import sys

from harness import WORK, run

import jsonschema

HERE = os.path.dirname(os.path.abspath(__file__))
SCHEMAS = os.path.join(HERE, "schemas")
N = int(os.environ.get("POCKET_VALIDITY_N", "60"))


def spans(schema, instance, root, out):
    """Collects (value) of every string whose schema is a span, following $ref, items, properties."""
    if not isinstance(schema, dict):
        return
    if "$ref" in schema:
        target = root
        for part in schema["$ref"].lstrip("#/").split("/"):
            if part:
                target = target[part]
        spans(target, instance, root, out)
    if schema.get("x-pocket-span") and isinstance(instance, str):
        out.append(instance)
    for key in ("anyOf", "oneOf", "allOf"):
        for sub in schema.get(key, []):
            spans(sub, instance, root, out)
    if isinstance(instance, dict):
        for k, v in instance.items():
            if k in schema.get("properties", {}):
                spans(schema["properties"][k], v, root, out)
    if isinstance(instance, list):
        for i, v in enumerate(instance):
            prefix = schema.get("prefixItems", [])
            spans(prefix[i] if i < len(prefix) else schema.get("items", {}), v, root, out)


def jsonschema_version():
    try:
        import importlib.metadata
        return importlib.metadata.version("jsonschema")
    except Exception:  # noqa: BLE001 - the version is only printed
        return "?"


def main():
    binary = sys.argv[1]
    names = sorted(f for f in os.listdir(SCHEMAS) if f.endswith(".json"))
    out = os.path.join(WORK, "schema-generations.jsonl")
    run([binary, out, str(N)] + [os.path.join(SCHEMAS, f) for f in names], timeout=1700)
    schemas = {f: json.load(open(os.path.join(SCHEMAS, f), encoding="utf-8")) for f in names}
    checker = jsonschema.FormatChecker()
    valid, budget, bad = 0, 0, []
    per = {}
    with open(out, encoding="utf-8") as f:
        for line in f:
            g = json.loads(line)
            key = (g["schema"], g["model"])
            per.setdefault(key, [0, 0])
            if g["error"] is not None:
                if g["code"] != "ResourceExhausted":
                    bad.append(f"{key}: unexpected error {g['error']}")
                budget += 1
                per[key][1] += 1
                continue
            try:
                instance = json.loads(g["text"])
            except ValueError as e:
                bad.append(f"{key}: does not parse ({e}): {g['text']!r}")
                continue
            schema = schemas[g["schema"]]
            errors = list(jsonschema.Draft202012Validator(schema, format_checker=checker)
                          .iter_errors(instance))
            if errors:
                bad.append(f"{key}: {errors[0].message}: {g['text']!r}")
                continue
            found = []
            spans(schema, instance, schema, found)
            for s in found:
                if s not in g["source"]:
                    bad.append(f"{key}: span {s!r} is not in the source: {g['text']!r}")
            valid += 1
            per[key][0] += 1
    for (schema, model), (ok, cut) in sorted(per.items()):
        print(f"[ validity ] {schema} / {model}: {ok} valid, {cut} cut by the budget")
    print(f"[ validity ] {valid} schema-constrained outputs valid (jsonschema "
          f"{jsonschema_version()}), "
          f"{budget} cut by the budget, {len(bad)} invalid")
    for b in bad[:20]:
        print("INVALID", b)
    assert not bad, f"{len(bad)} invalid outputs"
    # Most generations must finish (a constraint that never completes proves nothing).
    assert valid >= len(per) * N // 3, (valid, len(per) * N)


if __name__ == "__main__":
    main()
