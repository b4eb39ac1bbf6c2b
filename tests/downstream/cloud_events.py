#!/usr/bin/env python3
"""Reads records of seckill.order-events with the CloudEvents SDK's Kafka
binding (`cloudevents.v1.kafka.from_binary`, the package's 1.x API), as a downstream team's Python
consumer would, and checks every one: the SDK makes a CloudEvent of it (its
required attributes present), whose attributes agree with the record's JSON
value (id = eventId, subject = orderId, type = com.seckill.order.<type>,
time = occurredAt), whose source is SOURCE and whose dataschema is the
schema's $id, and whose data is the value, unchanged.

Reads JSON lines on stdin: {"headers": {name: hex}, "key": str, "value": str}.
Prints one JSON line: the events' types and the attributes of the first.
Exit 0 when every record held.

Usage: cloud_events.py SOURCE SCHEMA-FILE < records.jsonl
"""

import json
import sys
from datetime import datetime, timezone

from cloudevents.v1.kafka import KafkaMessage, from_binary

source, schema_file = sys.argv[1:3]
schema_id = json.load(open(schema_file))["$id"]
seen, first, problems = {}, None, []
for line in sys.stdin:
    record = json.loads(line)
    headers = {name: bytes.fromhex(value) for name, value in record["headers"].items()}
    message = KafkaMessage(headers=headers, key=record["key"], value=record["value"].encode())
    event = from_binary(message)
    value = json.loads(record["value"])
    attributes = event.get_attributes()
    want = {
        "specversion": "1.0",
        "id": value["eventId"],
        "source": source,
        "type": "com.seckill.order." + value["type"].lower(),
        "subject": value["orderId"],
        "datacontenttype": "application/json",
        "dataschema": schema_id,
    }
    for name, expected in want.items():
        if attributes.get(name) != expected:
            problems.append(f"{value['eventId']}: {name} is {attributes.get(name)!r}, not {expected!r}")
    time = datetime.fromisoformat(attributes["time"].replace("Z", "+00:00"))
    if abs(time.timestamp() * 1000 - value["occurredAt"]) > 1:
        problems.append(f"{value['eventId']}: time {attributes['time']} is not occurredAt {value['occurredAt']}")
    if time.tzinfo != timezone.utc:
        problems.append(f"{value['eventId']}: time {attributes['time']} is not UTC")
    if event.get_data() != value:
        problems.append(f"{value['eventId']}: the data is not the record's value")
    seen[value["type"]] = seen.get(value["type"], 0) + 1
    first = first or {k: str(v) for k, v in attributes.items()}
print(json.dumps({"types": seen, "first": first, "problems": problems}))
sys.exit(1 if problems or not seen else 0)
