"""A tiny MCP server over stdio (stdlib only): one tool, `lookup_code`, that tells a
project's vault code. JSON-RPC 2.0, one message per line, as MCP's stdio transport says."""

import hashlib
import json
import sys

TOOL = {
    "name": "lookup_code",
    "description": "The vault code of a project, by its name.",
    "inputSchema": {
        "type": "object",
        "properties": {"project": {"type": "string", "description": "the project's name"}},
        "required": ["project"],
    },
}


def code_of(project: str) -> str:
    return "VAULT-" + hashlib.sha256(f"vault:{project}".encode()).hexdigest()[:10].upper()


def result(method: str, params: dict) -> dict:
    if method == "initialize":
        return {
            "protocolVersion": params.get("protocolVersion", "2025-06-18"),
            "capabilities": {"tools": {"listChanged": False}},
            "serverInfo": {"name": "vault", "version": "1.0.0"},
        }
    if method == "tools/list":
        return {"tools": [TOOL]}
    if method == "tools/call":
        if params.get("name") != TOOL["name"]:
            raise KeyError(f"unknown tool {params.get('name')!r}")
        project = str((params.get("arguments") or {}).get("project", ""))
        text = f"The vault code of project {project!r} is {code_of(project)}."
        return {"content": [{"type": "text", "text": text}], "isError": False}
    if method == "ping":
        return {}
    raise NotImplementedError(method)


def main() -> None:
    for line in sys.stdin:
        if not line.strip():
            continue
        message = json.loads(line)
        if "id" not in message:  # a notification: no answer
            continue
        answer: dict = {"jsonrpc": "2.0", "id": message["id"]}
        try:
            answer["result"] = result(message.get("method", ""), message.get("params") or {})
        except NotImplementedError as exc:
            answer["error"] = {"code": -32601, "message": f"method not found: {exc}"}
        except KeyError as exc:
            answer["error"] = {"code": -32602, "message": str(exc)}
        sys.stdout.write(json.dumps(answer) + "\n")
        sys.stdout.flush()


if __name__ == "__main__":
    main()
