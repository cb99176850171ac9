#!/bin/bash
# the oracle asks the task's MCP server itself, over stdio, as a harness would
python3 - <<'PY' > /workspace/code.txt
import json, re, subprocess
calls = [
    {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"protocolVersion": "2025-06-18"}},
    {"jsonrpc": "2.0", "method": "notifications/initialized"},
    {"jsonrpc": "2.0", "id": 2, "method": "tools/call",
     "params": {"name": "lookup_code", "arguments": {"project": "orion"}}},
]
out = subprocess.run(["python3", "/opt/mcp/vault_server.py"], capture_output=True, text=True,
                     input="".join(json.dumps(c) + "\n" for c in calls), check=True).stdout
text = json.loads(out.splitlines()[-1])["result"]["content"][0]["text"]
print(re.search(r"VAULT-[0-9A-F]{10}", text).group(0))
PY
