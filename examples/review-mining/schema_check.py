"""A small JSON Schema checker for the subset pocket's --json-schema accepts (type, properties,
required, additionalProperties, items, minItems/maxItems, enum, const, minLength/maxLength,
anyOf, and pocket's "x-pocket-span"), plus checks of the output's form (property order, compact
separators). No dependencies: run.py uses it to check every answer, the tests use it to check
the runtime. Keywords outside the subset are reported, never silently ignored."""
import json

KNOWN = {"type", "properties", "required", "additionalProperties", "items", "minItems",
         "maxItems", "enum", "const", "minLength", "maxLength", "anyOf", "x-pocket-span",
         # annotations: no effect on validity
         "$schema", "$id", "title", "description", "$comment", "examples", "default"}

TYPES = {
    "object": lambda v: isinstance(v, dict),
    "array": lambda v: isinstance(v, list),
    "string": lambda v: isinstance(v, str),
    "boolean": lambda v: isinstance(v, bool),
    "null": lambda v: v is None,
    "integer": lambda v: (isinstance(v, int) and not isinstance(v, bool)) or
                         (isinstance(v, float) and v.is_integer()),
    "number": lambda v: isinstance(v, (int, float)) and not isinstance(v, bool),
}


def _same(a, b):
    """JSON equality (True is not 1, 1 is 1.0)."""
    if isinstance(a, bool) or isinstance(b, bool):
        return isinstance(a, bool) and isinstance(b, bool) and a == b
    return a == b


def validate(value, schema, span_source=None, path="$"):
    """Returns a list of error strings, empty when value is valid. span_source: the text that
    every string with "x-pocket-span": true must be a substring of (None: not checked)."""
    if schema is True or schema == {}:
        return []
    if schema is False:
        return [f"{path}: no value is allowed here"]
    errors = [f"{path}: schema keyword {k!r} is not supported by this checker"
              for k in schema if k not in KNOWN]
    t = schema.get("type")
    if t is not None:
        names = t if isinstance(t, list) else [t]
        if not any(TYPES[n](value) for n in names):
            return errors + [f"{path}: expected {'/'.join(names)}, got {type(value).__name__}"]
    if "enum" in schema and not any(_same(value, e) for e in schema["enum"]):
        errors.append(f"{path}: {value!r} is not one of {schema['enum']}")
    if "const" in schema and not _same(value, schema["const"]):
        errors.append(f"{path}: {value!r} is not {schema['const']!r}")
    if "anyOf" in schema:
        if not any(not validate(value, s, span_source, path) for s in schema["anyOf"]):
            errors.append(f"{path}: matches none of anyOf")
    if isinstance(value, str):
        n = len(value)  # code points, as JSON Schema counts
        if "minLength" in schema and n < schema["minLength"]:
            errors.append(f"{path}: {n} characters, fewer than minLength {schema['minLength']}")
        if "maxLength" in schema and n > schema["maxLength"]:
            errors.append(f"{path}: {n} characters, more than maxLength {schema['maxLength']}")
        if schema.get("x-pocket-span") and span_source is not None and value not in span_source:
            errors.append(f"{path}: {value!r} is not a substring of the source text")
    if isinstance(value, list):
        if "minItems" in schema and len(value) < schema["minItems"]:
            errors.append(f"{path}: {len(value)} items, fewer than minItems {schema['minItems']}")
        if "maxItems" in schema and len(value) > schema["maxItems"]:
            errors.append(f"{path}: {len(value)} items, more than maxItems {schema['maxItems']}")
        if "items" in schema:
            for i, item in enumerate(value):
                errors += validate(item, schema["items"], span_source, f"{path}[{i}]")
    if isinstance(value, dict):
        props = schema.get("properties", {})
        for name in schema.get("required", []):
            if name not in value:
                errors.append(f"{path}: required property {name!r} is missing")
        extra = schema.get("additionalProperties", True)
        for name, v in value.items():
            if name in props:
                errors += validate(v, props[name], span_source, f"{path}.{name}")
            elif extra is False:
                errors.append(f"{path}: property {name!r} is not allowed")
            elif isinstance(extra, dict):
                errors += validate(v, extra, span_source, f"{path}.{name}")
    return errors


def parse_ordered(text):
    """Parses JSON keeping each object's key order: objects become lists of (key, value) pairs
    wrapped in _Pairs, so property order can be checked."""
    return json.loads(text, object_pairs_hook=_Pairs)


class _Pairs(list):
    pass


def order_errors(text, schema, path="$"):
    """Property order against the schema's `properties` order. pocket's constraint accepts members
    in any order (each at most once), so this is a diagnostic, not a validity check."""
    return _order(parse_ordered(text), schema, path)


def _order(value, schema, path):
    errors = []
    if not isinstance(schema, dict):
        return errors
    if isinstance(value, _Pairs):
        props = list(schema.get("properties", {}))
        keys = [k for k, _ in value]
        known = [k for k in keys if k in props]
        if known != sorted(known, key=props.index):
            errors.append(f"{path}: properties in the order {keys}, schema order is {props}")
        if len(set(keys)) != len(keys):
            errors.append(f"{path}: a property appears twice: {keys}")
        for k, v in value:
            errors += _order(v, schema.get("properties", {}).get(k, {}), f"{path}.{k}")
    elif isinstance(value, list):
        for i, v in enumerate(value):
            errors += _order(v, schema.get("items", {}), f"{path}[{i}]")
    return errors


def separator_errors(text):
    """Compact form: outside strings, whitespace only as one space right after ':' or ','."""
    errors = []
    in_string = escaped = False
    prev = ""
    for i, c in enumerate(text):
        if in_string:
            if escaped:
                escaped = False
            elif c == "\\":
                escaped = True
            elif c == '"':
                in_string = False
        elif c == '"':
            in_string = True
        elif c in " \t\r\n":
            if not (c == " " and prev in (":", ",")):
                errors.append(f"offset {i}: whitespace {c!r} after {prev!r} is not compact")
        prev = c if not in_string or c == '"' else prev
    return errors


def load_schema(path):
    with open(path, encoding="utf-8") as f:
        return json.load(f)
