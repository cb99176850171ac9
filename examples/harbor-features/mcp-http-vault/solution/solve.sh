#!/bin/bash
# the oracle calls the vault service's tool itself, over streamable HTTP, as a harness would
python3 - <<'PY' > /workspace/code.txt
import json, os, re, time, urllib.request

def call(message):
    request = urllib.request.Request(
        "http://vault:8000/mcp",
        data=json.dumps(message).encode(),
        headers={
            "Content-Type": "application/json",
            "Accept": "application/json, text/event-stream",
            "Authorization": "Bearer " + os.environ["VAULT_TOKEN"],
        },
    )
    with urllib.request.urlopen(request, timeout=10) as answer:
        return json.loads(answer.read() or b"null")

for _ in range(100):  # the service may still be starting
    try:
        call({"jsonrpc": "2.0", "id": 1, "method": "initialize",
              "params": {"protocolVersion": "2025-06-18"}})
        break
    except OSError:
        time.sleep(0.2)
result = call({"jsonrpc": "2.0", "id": 2, "method": "tools/call",
               "params": {"name": "lookup_code", "arguments": {"project": "orion"}}})
print(re.search(r"VAULT-[0-9A-F]{10}", result["result"]["content"][0]["text"]).group(0))
PY
