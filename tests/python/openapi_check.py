"""Checks real HTTP replies against docs/openapi.yaml: the status is documented for the path and
method, the Content-Type is one the response lists, required headers are there, and a JSON body
validates against the response's schema.

The schema check is the subset of JSON Schema (2020-12, as OpenAPI 3.1 uses it) that the
document uses: type (one or a list), properties, required, additionalProperties (bool or
schema), items, minItems, maxProperties, enum, const, minimum, minLength, pattern, oneOf, anyOf,
allOf and local $ref. A keyword outside that subset is an error, so the document cannot silently
use something this check ignores.
"""

import json
import re

KNOWN = {"type", "properties", "required", "additionalProperties", "items", "minItems", "maxProperties", "enum",
         "const", "minimum", "minLength", "pattern", "oneOf", "anyOf", "allOf", "$ref", "description",
         "contentMediaType", "format"}


def resolve(spec, node):
    while isinstance(node, dict) and "$ref" in node:
        ref = node["$ref"]
        if not ref.startswith("#/"):
            raise ValueError("only local $ref: " + ref)
        target = spec
        for part in ref[2:].split("/"):
            target = target[part]
        node = target
    return node


def _type_ok(t, v):
    if t == "null":
        return v is None
    if t == "boolean":
        return isinstance(v, bool)
    if t == "integer":
        return isinstance(v, int) and not isinstance(v, bool)
    if t == "number":
        return isinstance(v, (int, float)) and not isinstance(v, bool)
    if t == "string":
        return isinstance(v, str)
    if t == "array":
        return isinstance(v, list)
    if t == "object":
        return isinstance(v, dict)
    raise ValueError("unknown type " + repr(t))


def validate(spec, schema, v, at="$"):
    """The list of ways `v` does not match `schema` (empty: it matches)."""
    schema = resolve(spec, schema)
    unknown = set(schema) - KNOWN
    if unknown:
        return ["%s: schema keywords this check does not know: %s" % (at, sorted(unknown))]
    errors = []
    if "type" in schema:
        types = schema["type"] if isinstance(schema["type"], list) else [schema["type"]]
        if not any(_type_ok(t, v) for t in types):
            return ["%s: %r is not of type %s" % (at, v if len(repr(v)) < 80 else repr(v)[:80] + "...", types)]
    if "const" in schema and v != schema["const"]:
        errors.append("%s: %r is not %r" % (at, v, schema["const"]))
    if "enum" in schema and v not in schema["enum"]:
        errors.append("%s: %r is not one of %s" % (at, v, schema["enum"]))
    if "minimum" in schema and isinstance(v, (int, float)) and v < schema["minimum"]:
        errors.append("%s: %r is below %r" % (at, v, schema["minimum"]))
    if isinstance(v, str):
        if "minLength" in schema and len(v) < schema["minLength"]:
            errors.append("%s: shorter than %d" % (at, schema["minLength"]))
        if "pattern" in schema and not re.search(schema["pattern"], v):
            errors.append("%s: %r does not match %s" % (at, v, schema["pattern"]))
    if isinstance(v, list):
        if "minItems" in schema and len(v) < schema["minItems"]:
            errors.append("%s: fewer than %d items" % (at, schema["minItems"]))
        if "items" in schema:
            for i, x in enumerate(v):
                errors += validate(spec, schema["items"], x, "%s[%d]" % (at, i))
    if isinstance(v, dict):
        props = schema.get("properties", {})
        for name in schema.get("required", []):
            if name not in v:
                errors.append("%s: missing %r" % (at, name))
        if "maxProperties" in schema and len(v) > schema["maxProperties"]:
            errors.append("%s: more than %d properties" % (at, schema["maxProperties"]))
        extra = schema.get("additionalProperties", True)
        for name, x in v.items():
            if name in props:
                errors += validate(spec, props[name], x, at + "." + name)
            elif extra is False:
                errors.append("%s: %r is not a documented property" % (at, name))
            elif isinstance(extra, dict):
                errors += validate(spec, extra, x, at + "." + name)
    for sub in schema.get("allOf", []):
        errors += validate(spec, sub, v, at)
    if "anyOf" in schema and not any(not validate(spec, s, v, at) for s in schema["anyOf"]):
        errors.append("%s: matches none of anyOf" % at)
    if "oneOf" in schema:
        n = sum(1 for s in schema["oneOf"] if not validate(spec, s, v, at))
        if n != 1:
            errors.append("%s: matches %d of oneOf (exactly one needed)" % (at, n))
    return errors


def media_type(content_type):
    return (content_type or "").split(";")[0].strip().lower()


def operation(spec, path, method):
    """The operation object, or None when the path or the method is not documented (HEAD: GET's)."""
    item = spec["paths"].get(path)
    if item is None:
        return None
    return item.get("get" if method.upper() == "HEAD" else method.lower())


def check_reply(spec, path, method, status, headers, body):
    """Errors of a real reply against the document. `headers`: names in any case -> value.

    A path or method the document does not list must be answered 404 / 405 with the Error body
    (the document says so in its description).
    """
    h = {k.lower(): v for k, v in headers.items()}
    op = operation(spec, path, method)
    errors = []
    if op is None:
        want = 404 if path not in spec["paths"] else 405
        if status != want:
            return ["%s %s: %d, but an undocumented %s is answered %d" %
                    (method, path, status, "path" if want == 404 else "method", want)]
        if want == 405 and "allow" not in h:
            errors.append("%s %s: 405 without Allow" % (method, path))
        response = {"content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}}}
    else:
        response = op.get("responses", {}).get(str(status))
        if response is None:
            return ["%s %s: status %d is not documented (documented: %s)" %
                    (method, path, status, sorted(op.get("responses", {})))]
        response = resolve(spec, response)
    for name, hspec in response.get("headers", {}).items():
        hspec = resolve(spec, hspec)
        if name.lower() not in h:
            if hspec.get("required"):
                errors.append("%s %s %d: missing header %s" % (method, path, status, name))
            continue
        errors += ["header " + e for e in validate(spec, hspec.get("schema", {}), h[name.lower()], name)]
    content = response.get("content", {})
    if method.upper() == "HEAD":
        return errors
    if not content:
        return errors
    got = media_type(h.get("content-type"))
    keys = {media_type(k): k for k in content}
    if got not in keys:
        return errors + ["%s %s %d: Content-Type %r is not one of %s" % (method, path, status, got, sorted(keys))]
    media = content[keys[got]]
    if got == "application/json":
        try:
            doc = json.loads(body)
        except ValueError as e:
            return errors + ["%s %s %d: the body is not JSON (%s): %r" % (method, path, status, e, body[:200])]
        errors += ["%s %s %d: %s" % (method, path, status, e) for e in validate(spec, media.get("schema", {}), doc)]
        if status >= 400 and isinstance(doc, dict) and doc.get("status") != status:
            errors.append("%s %s %d: the error body says status %r" % (method, path, status, doc.get("status")))
    return errors
