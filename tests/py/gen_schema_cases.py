#!/usr/bin/env python3
"""Labels the JSON Schema cases of tests/test_schema_grammar.c with Python's jsonschema (Draft 2020-12,
formats checked), the independent reference, and prints the C case table to paste into that test.

Each instance is JSON text (spacing matters: the grammar decides where whitespace may go). Its label is
whether jsonschema accepts it (text that is not JSON is invalid). Where the grammar is narrower than the
schema by design (fixed key order, closed objects, one spelling of a constant...), the case says so and
the C test expects rejection; such cases must be valid per jsonschema (the grammar never widens).
Run: python3 tests/py/gen_schema_cases.py > /tmp/cases.c"""
import json

import jsonschema

NARROW = "narrow"  # valid per JSON Schema, refused by the grammar by design

CASES = [
    ("person", {"type": "object", "properties": {
        "name": {"type": "string", "minLength": 1, "maxLength": 8},
        "age": {"type": "integer", "minimum": 0, "maximum": 150}, "nick": {"type": "string"}},
        "required": ["name", "age"], "additionalProperties": False}, [
        '{"name":"Ann","age":30}', '{"name":"Ann","age":30,"nick":"a"}', '{"name":"","age":3}',
        '{"name":"Ann"}', '{"name":"Ann","age":151}', '{"name":"Ann","age":-1}', '{"name":"Ann","age":30,"x":1}',
        '{"name":"Ann","age":3.5}', '{"name":"Annabelle1","age":1}', '{ "name" : "Ann" , "age" : 0 }',
        '{\n  "name": "Ann",\n  "age": 7\n}', '{"name":"\\u00e9\\"","age":100}',
        ('{"age":30,"name":"Ann"}', NARROW), ('{"name":"Ann","age":30}  ', NARROW), '{"name":"Ann",,"age":30}']),
    ("nested", {"type": "object", "properties": {
        "user": {"type": "object", "properties": {"id": {"type": "integer"}, "roles": {
            "type": "array", "items": {"enum": ["admin", "user"]}, "minItems": 1, "maxItems": 2}},
            "required": ["id", "roles"]}, "active": {"type": "boolean"}}, "required": ["user"]}, [
        '{"user":{"id":1,"roles":["admin"]}}', '{"user":{"id":1,"roles":["admin","user"]},"active":true}',
        '{"user":{"id":1,"roles":[]}}', '{"user":{"id":1,"roles":["user","user","admin"]}}',
        '{"user":{"id":1,"roles":["root"]}}', '{"user":{"id":"1","roles":["user"]}}', '{"active":false}',
        '{"user":{"id":-12,"roles":[ "user" ]},"active":false}',
        ('{"user":{"id":1,"roles":["user"],"x":1}}', NARROW)]),
    ("numbers", {"type": "array", "items": {"type": "number"}, "minItems": 2, "maxItems": 4}, [
        '[1,2]', '[1]', '[1,2,3,4,5]', '[0.5,-1e10,3E+2]', '[01,2]', '[1,"2"]', '[ 1 , 2 ]', '[1.,2]',
        '[-0.0,2e-5,1]', '[1,2,3,4]', '[]']),
    ("enum", {"enum": ["red", "green", 3, None, True, {"a": [1, 2]}]}, [
        '"red"', '"blue"', '3', 'null', '{"a":[1,2]}', '4', 'true', 'false', ('{"a": [1,2]}', NARROW)]),
    ("const", {"const": "x\ny\u00e9"}, ['"x\\ny\u00e9"', '"xy"', ('"x\\u000ay\u00e9"', NARROW)]),
    ("anyof", {"anyOf": [{"type": "string", "maxLength": 3}, {"type": "integer", "minimum": 10},
                         {"type": "null"}]}, ['"ab"', '"abcd"', '10', '9', 'null', 'true', '10.5', '123456']),
    ("tree", {"$defs": {"node": {"type": "object", "properties": {"value": {"type": "integer"},
        "children": {"type": "array", "items": {"$ref": "#/$defs/node"}}},
        "required": ["value"], "additionalProperties": False}}, "$ref": "#/$defs/node"}, [
        '{"value":1}', '{"value":1,"children":[{"value":2},{"value":3,"children":[]}]}',
        '{"value":1,"children":[{"children":[]}]}', '{"value":1,"children":[{"value":"x"}]}',
        '{"value":1,"children":[{"value":2,"children":[{"value":3,"children":[{"value":4}]}]}]}']),
    ("list", {"type": "object", "properties": {"name": {"type": "string"},
        "next": {"anyOf": [{"$ref": "#"}, {"type": "null"}]}}, "required": ["name", "next"]}, [
        '{"name":"a","next":null}', '{"name":"a","next":{"name":"b","next":null}}', '{"name":"a"}',
        '{"name":"a","next":{"name":"b"}}']),
    ("formats", {"type": "object", "properties": {"d": {"type": "string", "format": "date"},
        "t": {"type": "string", "format": "time"}, "dt": {"type": "string", "format": "date-time"},
        "u": {"type": "string", "format": "uuid"}}, "additionalProperties": False}, [
        '{"d":"2024-05-31"}', '{"d":"2024-13-01"}', '{"d":"2024-04-31"}', '{"t":"12:30:00Z"}',
        '{"t":"25:00:00Z"}', '{"t":"12:30:00"}', '{"dt":"2024-01-02T03:04:05.123+02:00"}',
        '{"dt":"2024-01-02 03:04:05Z"}', '{"u":"123e4567-e89b-12d3-a456-426614174000"}',
        '{"u":"123e4567e89b12d3a456426614174000"}', '{"d":"2023-11-30","u":"123e4567-e89b-12d3-a456-42661417400"}',
        '{}', ('{"d":"2024-02-29"}', NARROW)]),
    ("int_range", {"type": "integer", "exclusiveMinimum": -20, "maximum": 1234}, [
        '-19', '-20', '0', '1234', '1235', '999', '-5', '01', '100', '1000', '1240', '-21', '1199', '1230',
        ('-0', NARROW)]),
    ("int_min", {"type": "integer", "minimum": -7}, ['-7', '-8', '12345678', '0', '-10', '-1', '7']),
    ("int_max", {"type": "integer", "maximum": -100}, ['-100', '-99', '-1000000', '5', '-101', '0']),
    ("int_wide", {"type": "integer", "minimum": 95, "exclusiveMaximum": 10005}, [
        '95', '94', '10004', '10005', '100', '999', '5000', '9999', '10000', '20000', '-95']),
    ("prefix", {"type": "array", "prefixItems": [{"type": "string"}, {"type": "boolean"}],
                "items": {"type": "integer"}, "maxItems": 4}, [
        '["a",true]', '["a"]', '[]', '["a",true,1,2]', '["a",true,1,2,3]', '[true]', '["a",true,"x"]']),
    ("nullable", {"type": ["string", "null"], "maxLength": 2}, ['"ab"', '"abc"', 'null', '1']),
    ("allof", {"allOf": [{"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]},
                         {"properties": {"b": {"type": "string"}}, "required": ["b"]}]}, [
        '{"a":1,"b":"x"}', '{"a":1}', '{"b":"x"}', '{"a":"1","b":"x"}']),
    ("extra", {"type": "object", "properties": {"id": {"type": "integer"}}, "required": ["id"],
               "additionalProperties": {"type": "boolean"}}, [
        '{"id":1}', '{"id":1,"x":true,"y":false}', '{"id":1,"x":1}', '{"id":1,"id2":true}', '{"id":1,"i":true}',
        '{"id":1,"":true}', '{"id":1,"id":true}']),
    ("any", {}, ['{"a":[1,{"b":null}]}', '"x"', '1', '[ ]', 'tru', '[1,]']),
    ("pattern", {"type": "object", "properties": {"code": {"type": "string", "pattern": "^[A-Z]{2}-\\d{3}$"},
                 "tag": {"type": "string", "pattern": "ab+c"}, "alt": {"type": "string", "pattern": "^a[|]|cd$"}},
                 "additionalProperties": False}, [
        '{"alt":"a|zz"}', '{"alt":"zzcd"}', '{"alt":"za|"}', '{"alt":"cdz"}', '{"alt":"acd"}',
        '{"code":"AB-123"}', '{"code":"AB-12"}', '{"code":"ab-123"}', '{"code":"AB-123x"}', '{"tag":"xxabbbcyy"}',
        '{"tag":"ac"}', '{"tag":"abc"}', '{"code":"AB-123","tag":"z\\nabc\\""}', '{"tag":"a\\"bc"}']),
    ("pattern_quotes", {"type": "string", "pattern": "^\"[a-z]*\"\\\\$"}, [
        '"\\"ab\\"\\\\"', '"\\"ab\\""', '"ab"', '"\\"\\"\\\\"', '"\\"A\\"\\\\"']),
    ("string", {"type": "string"}, ['"a\\"b\\\\c\u00e9\\n\\u12aF"', '"a\x01"', '"\\x"', '"\U0001F600"', ('"\\uDFFF"', NARROW), ('"\\ud83d\\ude00"', NARROW)]),
    ("oneof", {"oneOf": [
        {"type": "object", "properties": {"kind": {"const": "circle"}, "r": {"type": "number"}},
         "required": ["kind", "r"], "additionalProperties": False},
        {"type": "object", "properties": {"kind": {"const": "square"}, "side": {"type": "number"}},
         "required": ["kind", "side"], "additionalProperties": False}]}, [
        '{"kind":"circle","r":1.5}', '{"kind":"square","side":2}', '{"kind":"circle","side":2}']),
    ("open_object", {"type": "object"}, ['{"x":{"y":[]}}', '[]', '{}']),
    ("definitions", {"definitions": {"pt": {"type": "array", "prefixItems": [{"type": "number"}, {"type": "number"}],
        "minItems": 2}}, "type": "object", "properties": {"p": {"$ref": "#/definitions/pt"}}, "required": ["p"],
        "additionalProperties": True}, [
        '{"p":[1,2]}', '{"p":[1,2],"q":"x"}', '{"p":[1]}', '{"p":[1,2],"p2":null}', ('{"p":[1,2,3]}', NARROW)]),
    ("collide", {"type": "object", "properties": {"a b": {"type": "integer"}, "a-b": {"type": "string"},
        "space": {"type": "boolean"}, "q\"\\": {"type": "null"}}, "required": ["a b", "a-b", "space"]}, [
        '{"a b":1,"a-b":"x","space":true}', '{"a b":"x","a-b":1,"space":true}',
        '{"a b":1,"a-b":"x","space":false,"q\\"\\\\":null}', '{"a b":1,"a-b":"x"}']),
    ("required_extra", {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["b"],
                        "additionalProperties": {"type": "string"}}, [
        '{"b":"x"}', '{"b":1}', '{"b":"x","a":1}', '{"a":1}', ('{"a":1,"b":"x"}', NARROW), '{"b":"x","c":"y"}']),
]


def label(schema, text):
    try:
        instance = json.loads(text)
    except ValueError:
        return False
    validator = jsonschema.Draft202012Validator(schema, format_checker=jsonschema.Draft202012Validator.FORMAT_CHECKER)
    return validator.is_valid(instance)


def c_string(s):
    out = '"'
    for b in s.encode():
        ch = chr(b)
        out += {'"': '\\"', '\\': '\\\\', '\n': '\\n'}.get(ch, ch if 32 <= b < 127 else '\\x%02x""' % b)
    return out + '"'


def main():
    print("/* generated by tests/py/gen_schema_cases.py: expected = jsonschema's verdict, except the cases")
    print(" * marked narrow (valid JSON Schema instances the grammar refuses by design) */")
    for name, schema, instances in CASES:
        jsonschema.Draft202012Validator.check_schema(schema)
        print("static const instance_case %s_instances[] = {" % name)
        for inst in instances:
            text, narrow = (inst if isinstance(inst, tuple) else (inst, None))
            valid = label(schema, text)
            if narrow:
                assert valid, "a narrow case must be valid per jsonschema: " + text
            print("    {%s, %s}," % (c_string(text), "false" if narrow else ("true" if valid else "false")) +
                  (" /* narrow */" if narrow else ""))
        print("};")
    print("static const schema_case schema_cases[] = {")
    for name, schema, _ in CASES:
        print("    {%s, %s, %s_instances, sizeof %s_instances / sizeof *%s_instances}," %
              (c_string(name), c_string(json.dumps(schema, separators=(',', ':'))), name, name, name))
    print("};")


if __name__ == "__main__":
    main()
