#!/usr/bin/env python3
"""Reference implementation of pg_idem's payload fingerprints and message keys.

Written separately from the C++ core (src/core/canonical_json.cpp and
message_key.cpp), from the specification in src/core/message_key.hpp, so that
the test vectors it generates can catch bugs in either. Producers may use it
(or port it) to compute the same keys before sending a message:

    from reference_key import fingerprint, message_key
    message_key('{"order": {"id": 42}, "customer": "a"}', ["order.id", "customer"])

Run it to regenerate test/vectors/keys.json and fingerprints.json:

    python3 test/vectors/reference_key.py
"""

import decimal
import hashlib
import json
import os
import random
import sys

MAX_DEPTH = 1000
MAX_EXPONENT = 1000000

# Parsing, checking and writing recurse once per level of nesting.
sys.setrecursionlimit(max(sys.getrecursionlimit(), 4 * MAX_DEPTH + 100))


class Rejected(ValueError):
    """The payload or the field list is not acceptable."""


# --- parsing ---------------------------------------------------------------

def _no_duplicates(pairs):
    names = [name for name, _ in pairs]
    if len(set(names)) != len(names):
        raise Rejected("duplicate member name")
    return dict(pairs)


def _no_constants(name):
    raise Rejected("not JSON: " + name)


def _check(value, depth=0):
    """Depth, lone surrogates (json.loads lets them through), exponents."""
    if isinstance(value, (dict, list)):
        if depth + 1 > MAX_DEPTH:
            raise Rejected("too deep")
        items = value.items() if isinstance(value, dict) else enumerate(value)
        for name, item in items:
            if isinstance(name, str):
                _check(name, depth + 1)
            _check(item, depth + 1)
    elif isinstance(value, str):
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            raise Rejected("lone surrogate")
    elif isinstance(value, decimal.Decimal):
        if not value.is_zero() and abs(value.adjusted()) > MAX_EXPONENT:
            raise Rejected("number out of range")


def parse(text):
    """Parses JSON text (str, or bytes that must be UTF-8) exactly."""
    if isinstance(text, bytes):
        try:
            text = text.decode("utf-8")
        except UnicodeDecodeError:
            raise Rejected("invalid UTF-8")
    try:
        value = json.loads(text, object_pairs_hook=_no_duplicates,
                           parse_float=decimal.Decimal, parse_int=decimal.Decimal,
                           parse_constant=_no_constants)
    except json.JSONDecodeError as e:
        raise Rejected("not JSON: %s" % e)
    except RecursionError:
        raise Rejected("too deep")
    _check(value)
    return value


# --- the canonical form ------------------------------------------------------

def canonical_number(d):
    """The exact decimal d in ECMAScript's Number::toString layout."""
    if d.is_zero():
        return "0"
    sign, digits, exponent = d.as_tuple()
    digits = "".join(map(str, digits))
    stripped = digits.rstrip("0")
    exponent += len(digits) - len(stripped)
    digits = stripped.lstrip("0")  # as_tuple has no leading zeros, but be sure
    k = len(digits)
    n = exponent + k  # d = 0.digits x 10^n
    if k <= n <= 21:
        text = digits + "0" * (n - k)
    elif 0 < n <= 21:
        text = digits[:n] + "." + digits[n:]
    elif -6 < n <= 0:
        text = "0." + "0" * -n + digits
    else:
        mantissa = digits[0] + ("." + digits[1:] if k > 1 else "")
        text = mantissa + "e" + ("+" if n - 1 > 0 else "-") + str(abs(n - 1))
    return ("-" if sign else "") + text


_ESCAPES = {'"': '\\"', "\\": "\\\\", "\b": "\\b", "\f": "\\f",
            "\n": "\\n", "\r": "\\r", "\t": "\\t"}


def canonical_string(s):
    out = []
    for ch in s:
        if ch in _ESCAPES:
            out.append(_ESCAPES[ch])
        elif ord(ch) < 0x20:
            out.append("\\u%04x" % ord(ch))
        else:
            out.append(ch)
    return '"' + "".join(out) + '"'


def utf16_key(name):
    # Big-endian UTF-16 bytes compare like the code units themselves.
    return name.encode("utf-16-be")


def canonical_value(value):
    if value is None:
        return "null"
    if value is True:
        return "true"
    if value is False:
        return "false"
    if isinstance(value, decimal.Decimal):
        return canonical_number(value)
    if isinstance(value, str):
        return canonical_string(value)
    if isinstance(value, list):
        return "[" + ",".join(canonical_value(v) for v in value) + "]"
    if isinstance(value, dict):
        members = sorted(value.items(), key=lambda kv: utf16_key(kv[0]))
        return "{" + ",".join(canonical_string(k) + ":" + canonical_value(v)
                              for k, v in members) + "}"
    raise TypeError(type(value))


def canonical_json(text):
    return canonical_value(parse(text))


def digest(canonical_text):
    return hashlib.sha256(canonical_text.encode("utf-8")).hexdigest()


def fingerprint(text):
    return digest(canonical_json(text))


# --- message keys ------------------------------------------------------------

def split_path(path):
    if path == "":
        raise Rejected("empty path")
    segments, segment, i = [], "", 0
    while i <= len(path):
        if i == len(path) or path[i] == ".":
            if segment == "":
                raise Rejected("empty segment")
            segments.append(segment)
            segment = ""
        elif path[i] == "\\":
            if i + 1 == len(path) or path[i + 1] not in ".\\":
                raise Rejected("invalid escape")
            i += 1
            segment += path[i]
        else:
            segment += path[i]
        i += 1
    return segments


def select(value, path):
    for segment in split_path(path):
        if isinstance(value, dict):
            if segment not in value:
                raise Rejected("missing")
            value = value[segment]
        elif isinstance(value, list):
            if not segment.isascii() or not segment.isdigit() or \
                    (segment.startswith("0") and segment != "0"):
                raise Rejected("not an index")
            if int(segment) >= len(value):
                raise Rejected("missing")
            value = value[int(segment)]
        else:
            raise Rejected("scalar")
    return value


def message_key(text, fields):
    payload = parse(text)
    if not fields:
        raise Rejected("no fields")
    for path in fields:
        split_path(path)
    if len(set(fields)) != len(fields):
        raise Rejected("duplicate field")
    return digest(canonical_value({path: select(payload, path) for path in fields}))


# --- self-checks ---------------------------------------------------------------

def _es_number_from_float(x):
    """ECMAScript Number::toString via Python's shortest repr of a float."""
    return canonical_number(decimal.Decimal(repr(x)))


def self_check():
    # RFC 8785 section 3.2.3: member order by UTF-16 code units.
    rfc_sorting = ('{"\\u20ac":"Euro Sign","\\r":"Carriage Return","\\ufb33":"Hebrew",'
                   '"1":"One","\\ud83d\\ude00":"Emoji","\\u0080":"Control",'
                   '"\\u00f6":"o"}')
    names = [k for k in json.loads(canonical_json(rfc_sorting))]
    assert names == ["\r", "1", "\u0080", "\u00f6", "\u20ac", "\U0001F600", "\ufb33"], names
    # RFC 8785 section 3.2.2.3's numbers, the four of 15 digits or fewer.
    assert canonical_json("[1E30, 4.50, 2e-3, 0.000000000000000000000000001]") == \
        "[1e+30,4.5,0.002,1e-27]"
    # With at most 15 significant digits, the exact form is RFC 8785's.
    rng = random.Random(8785)
    for _ in range(20000):
        digits = str(rng.randrange(1, 10 ** rng.randrange(1, 16)))
        text = "%s%se%d" % ("-" if rng.random() < 0.5 else "", digits, rng.randrange(-300, 290))
        d = decimal.Decimal(text)
        if d.is_zero() or not (2.3e-308 < abs(float(d)) < 1.7e308):
            continue
        assert canonical_number(d) == _es_number_from_float(float(d)), text


# --- test vectors ----------------------------------------------------------------

def _nested(depth):
    return "[" * depth + "]" * depth


FINGERPRINT_CASES = [
    # (name, payload text, expected error substring or None)
    ("members sorted", '{"b":1,"a":2}', None),
    ("members sorted, other input order", '{"a":2,"b":1}', None),
    ("whitespace dropped", ' {\n\t"a" : [ 1 , 2 ] ,\r\n "b":{ } } ', None),
    ("no whitespace", '{"a":[1,2],"b":{}}', None),
    ("nested objects sorted, arrays keep order", '{"z":[3,1,2],"y":{"d":{"f":1,"e":2},"c":[{"b":1,"a":0}]}}', None),
    ("empty containers", '[{},[],{"a":[]},[{}]]', None),
    ("literals", '[true,false,null]', None),
    ("top-level number", '42', None),
    ("top-level string", '"s"', None),
    ("top-level null", 'null', None),
    ("number 1", '{"n":1}', None),
    ("number 1.0", '{"n":1.0}', None),
    ("number 1e0", '{"n":1e0}', None),
    ("number 1E+0", '{"n":1E+0}', None),
    ("number 10e-1", '{"n":10e-1}', None),
    ("number 0.1e1", '{"n":0.1e1}', None),
    ("number 100e-2", '{"n":100e-2}', None),
    ("zero", '{"n":0}', None),
    ("minus zero", '{"n":-0}', None),
    ("zero 0.0", '{"n":0.0}', None),
    ("zero -0.0e-5", '{"n":-0.0e-5}', None),
    ("zero 0e5", '{"n":0e5}', None),
    ("trailing fraction zeros", '[2.50,-2.500,100,1.0e2,0.10]', None),
    ("exponent layout thresholds",
     '[1e20,1e21,123456789012345678901,1234567890123456789012,0.000001,0.0000001,1e-6,1e-7]', None),
    ("exponent layout, mixed",
     '[123.456e-10,-1.25E+3,1.5e300,5e-324,1.7976931348623157e308,1e400,-1e-400]', None),
    ("RFC 8785 numbers (the first has 17 digits and stays exact)",
     '[333333333.33333329,1E30,4.50,2e-3,0.000000000000000000000000001]', None),
    ("2^53", '{"id":9007199254740992}', None),
    ("2^53 + 1 is not 2^53", '{"id":9007199254740993}', None),
    ("2^64 + 1", '{"id":18446744073709551617}', None),
    ("20 digits stay", '{"id":12345678901234567890}', None),
    ("long decimal stays exact", '{"amount":0.1000000000000000055511151231257827}', None),
    ("escaped e acute", '{"s":"caf\\u00e9"}', None),
    ("literal e acute", '{"s":"caf\u00e9"}', None),
    ("escaped euro", '"\\u20AC"', None),
    ("literal euro", '"\u20ac"', None),
    ("escaped surrogate pair", '"\\ud83d\\ude00"', None),
    ("literal emoji", '"\U0001F600"', None),
    ("escaped solidus", '"a\\/b"', None),
    ("short escapes", '"\\"\\\\\\b\\f\\n\\r\\t"', None),
    ("control characters in lower-case hex", '"\\u0001\\u001F\\u000b\\u0000"', None),
    ("DEL and U+2028 literal", '"\\u007f\\u2028"', None),
    ("member names sorted", '{"b":1,"a":2,"aa":3,"A":4,"":5,"\\u00e9":6,"e":7}', None),
    ("member names sorted as UTF-16, not as UTF-8",
     '{"\\uff61":"halfwidth ideographic full stop","\\ud83d\\ude00":"grinning face"}', None),
    ("RFC 8785 sorting example",
     '{"\\u20ac":"Euro Sign","\\r":"Carriage Return","\\ufb33":"Hebrew Letter Dalet With Dagesh",'
     '"1":"One","\\ud83d\\ude00":"Emoji: Grinning Face","\\u0080":"Control",'
     '"\\u00f6":"Latin Small Letter O With Diaeresis"}', None),
    ("escaped names sort by their decoded text", '{"\\u0062":1,"a\\"":2,"a":3}', None),
    ("1000 levels deep", _nested(1000), None),
    ("1001 levels deep", _nested(1001), "nested deeper than 1000 levels"),
    ("trailing comma", '[1,]', "invalid JSON at offset 3"),
    ("duplicate member", '{"a":1,"a":2}', 'duplicate JSON object member name "a"'),
    ("duplicate member after escapes", '{"a":1,"\\u0061":2}', 'duplicate JSON object member name "a"'),
    ("lone high surrogate", '"\\ud800"', "lone high surrogate"),
    ("lone low surrogate", '"\\udc00x"', "lone low surrogate"),
    ("high surrogate then non-low", '"\\ud800\\u0041"', "lone high surrogate"),
    ("leading zero", '01', "unexpected data after the value"),
    ("two values", '1 2', "unexpected data after the value"),
    ("NaN", 'NaN', "expected a value"),
    ("Infinity", '[Infinity]', "expected a value"),
    ("unterminated array", '[1', "unexpected end of input"),
    ("empty text", '', "unexpected end of input"),
    ("single quotes", "{'a':1}", "expected a member name"),
    ("raw control character", '"a\tb"', "control character in a string"),
    ("bad escape", '"\\x41"', "invalid escape sequence"),
    ("short unicode escape", '"\\u12"', "four hex digits"),
    ("exponent out of range", '{"n":1e1000001}', "is out of range"),
    ("bare fraction", '.5', "expected a value"),
    ("missing fraction digits", '1.', "invalid number"),
    ("plus sign", '+1', "expected a value"),
]

# Raw bytes that are not UTF-8 cannot be written in a JSON string: given as hex.
FINGERPRINT_BYTE_CASES = [
    ("invalid UTF-8 byte", b'"\xff"', "invalid UTF-8"),
    ("overlong UTF-8", b'"\xc0\xaf"', "invalid UTF-8"),
    ("UTF-8 encoded surrogate", b'"\xed\xa0\x80"', "invalid UTF-8"),
    ("truncated UTF-8", b'"\xe2\x82"', "invalid UTF-8"),
    ("above U+10FFFF", b'"\xf4\x90\x80\x80"', "invalid UTF-8"),
    ("byte order mark", b'\xef\xbb\xbf{}', "expected a value"),
]

ORDER = '{"order":{"id":42,"lines":[{"sku":"x","qty":1},{"sku":"y","qty":2}]},"customer":"a","ts":"2024-05-01T10:00:00Z"}'
KEY_CASES = [
    # (name, payload text, fields, expected error substring or None)
    ("two fields", ORDER, ["order.id", "customer"], None),
    ("field order does not matter", ORDER, ["customer", "order.id"], None),
    ("other fields do not matter",
     '{"ts":"2024-05-02T00:00:00Z","customer":"a","order":{"id":42}}', ["order.id", "customer"], None),
    ("spelling of numbers does not matter",
     '{ "customer" : "a", "order" : { "id" : 4.2e1 } }', ["order.id", "customer"], None),
    ("a different value changes the key", ORDER.replace('"id":42', '"id":43'), ["order.id", "customer"], None),
    ("one field", ORDER, ["order.id"], None),
    ("an object as a value", ORDER, ["order"], None),
    ("array index", ORDER, ["order.lines.1.sku"], None),
    ("array index 0", ORDER, ["order.lines.0"], None),
    ("an array as a value", ORDER, ["order.lines"], None),
    ("top-level array", '[{"id":1},{"id":2}]', ["1.id"], None),
    ("2^53", '{"id":9007199254740992}', ["id"], None),
    ("2^53 + 1", '{"id":9007199254740993}', ["id"], None),
    ("null is a value", '{"x":null,"y":1}', ["x"], None),
    ("false is a value", '{"x":false}', ["x"], None),
    ("escaped dot names a member with a dot", '{"a.b":1,"a":{"b":2}}', ["a\\.b"], None),
    ("unescaped dot descends", '{"a.b":1,"a":{"b":2}}', ["a.b"], None),
    ("both", '{"a.b":1,"a":{"b":2}}', ["a.b", "a\\.b"], None),
    ("escaped backslash", '{"a\\\\b":5}', ["a\\\\b"], None),
    ("digits name an object member", '{"0":"zero","items":{"1":"one"}}', ["0", "items.1"], None),
    ("escaped member name in the payload", '{"caf\\u00e9":{"id":"x"}}', ["caf\u00e9.id"], None),
    ("literal member name in the payload", '{"caf\u00e9":{"id":"x"}}', ["caf\u00e9.id"], None),
    ("fields sorted as UTF-16", '{"\\uff61":1,"\\ud83d\\ude00":2}', ["\uff61", "\U0001F600"], None),
    ("string values with escapes", '{"s":"line\\nbreak \\"quoted\\" \\u0007"}', ["s"], None),
    ("missing member", '{"order":{}}', ["order.id"], 'field "order.id" is missing from the payload'),
    ("missing top-level member", ORDER, ["customer", "tenant"], 'field "tenant" is missing from the payload'),
    ("index out of range", ORDER, ["order.lines.2.sku"], 'field "order.lines.2.sku" is missing from the payload'),
    ("huge index", ORDER, ["order.lines.99999999999999999999999"], "is missing from the payload"),
    ("into a number", ORDER, ["order.id.x"],
     'field "order.id.x" cannot be selected: "order.id" is a number, not an object or array'),
    ("into a null", '{"x":null}', ["x.y"], '"x" is null, not an object or array'),
    ("into a scalar payload", '"text"', ["a"], "the payload is a string, not an object or array"),
    ("a name on an array", ORDER, ["order.lines.first"],
     'field "order.lines.first" cannot be selected: "order.lines" is an array and "first" is not an index'),
    ("leading zero index", ORDER, ["order.lines.01"], '"01" is not an index'),
    ("empty path", ORDER, [""], 'field "" is empty'),
    ("empty segment", ORDER, ["order..id"], 'field "order..id" has an empty segment'),
    ("trailing dot", ORDER, ["order."], 'field "order." has an empty segment'),
    ("leading dot", ORDER, [".order"], 'field ".order" has an empty segment'),
    ("invalid escape", ORDER, ["ord\\er"], 'field "ord\\er" has an invalid escape'),
    ("trailing backslash", ORDER, ["order\\"], 'field "order\\" has an invalid escape'),
    ("the same field twice", ORDER, ["order.id", "customer", "order.id"], 'field "order.id" is named twice'),
    ("no fields", ORDER, [], "the message key needs at least one field"),
    ("payload not JSON", '{"order":', ["order"], "invalid JSON"),
]


def build_vectors():
    fingerprints = []
    for name, text, error in FINGERPRINT_CASES + FINGERPRINT_BYTE_CASES:
        case = {"name": name}
        if isinstance(text, bytes):
            case["payload_hex"] = text.hex()
        else:
            case["payload"] = text
        if error is None:
            case["canonical"] = canonical_json(text)
            case["fingerprint"] = fingerprint(text)
        else:
            try:
                canonical_json(text)
            except Rejected:
                pass
            else:
                raise AssertionError("the reference accepts %r" % name)
            case["error"] = error
        fingerprints.append(case)

    keys = []
    for name, text, fields, error in KEY_CASES:
        case = {"name": name, "payload": text, "fields": fields}
        if error is None:
            case["key"] = message_key(text, fields)
        else:
            try:
                message_key(text, fields)
            except Rejected:
                pass
            else:
                raise AssertionError("the reference accepts %r" % name)
            case["error"] = error
        keys.append(case)
    return fingerprints, keys


def _write(path, cases):
    with open(path, "w", encoding="utf-8") as f:
        f.write("[\n")
        f.write(",\n".join(json.dumps(c, ensure_ascii=False) for c in cases))
        f.write("\n]\n")


def main():
    self_check()
    fingerprints, keys = build_vectors()
    here = os.path.dirname(os.path.abspath(__file__))
    _write(os.path.join(here, "fingerprints.json"), fingerprints)
    _write(os.path.join(here, "keys.json"), keys)
    print("%d fingerprint cases, %d key cases" % (len(fingerprints), len(keys)))


if __name__ == "__main__":
    main()
