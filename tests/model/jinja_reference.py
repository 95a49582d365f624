#!/usr/bin/python3
"""Renders templates with Python's jinja2 the way transformers' apply_chat_template does, for
chat_template_test (which compares omnistage's renderer against it).

    /usr/bin/python3 jinja_reference.py CASES.json OUT.json

CASES.json: [{"template": "...", "variables": {...}}, ...]. OUT.json gets one entry per case:
{"text": rendered} or {"error": message}.
"""
import json
import sys
from datetime import datetime

import jinja2
import jinja2.ext
from jinja2.sandbox import ImmutableSandboxedEnvironment


def raise_exception(message):
    raise jinja2.exceptions.TemplateError(message)


def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


def strftime_now(fmt):
    return datetime.now().strftime(fmt)


def main():
    cases = json.load(open(sys.argv[1], encoding="utf-8"))
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[jinja2.ext.loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    results = []
    for case in cases:
        try:
            results.append({"text": env.from_string(case["template"]).render(**case["variables"])})
        except Exception as e:  # noqa: BLE001 - the test compares failures too
            results.append({"error": str(e)})
    json.dump(results, open(sys.argv[2], "w", encoding="utf-8"), ensure_ascii=False)


if __name__ == "__main__":
    main()
