"""Validates JSON instances against one of the project's schemas (draft
2020-12), the schemas referring to each other by their $id, answered from
schemas/. Instances come one per line on stdin; one line per instance goes
out: empty when valid, else its errors. Used by the end-to-end tests
(tests/harness/schemas.rs) through the test tools' virtualenv."""
import json
import pathlib
import sys

import jsonschema
import referencing

schemas = pathlib.Path(sys.argv[1])
registry = referencing.Registry()
for path in schemas.glob("*.json"):
    contents = json.loads(path.read_text())
    registry = registry.with_resource(contents["$id"], referencing.Resource.from_contents(contents))
schema = json.loads((schemas / sys.argv[2]).read_text())
jsonschema.Draft202012Validator.check_schema(schema)
validator = jsonschema.Draft202012Validator(schema, registry=registry)
for line in sys.stdin:
    errors = [f"{e.message} at /{'/'.join(map(str, e.absolute_path))}" for e in validator.iter_errors(json.loads(line))]
    print(json.dumps(errors))
