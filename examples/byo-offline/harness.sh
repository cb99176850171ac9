#!/usr/bin/env bash
# The session's harness (task.json runs it): the PyPI CLI (httpx) asks the model through the
# session's base URL, the npm CLI (cowsay) says the answer. It reads only Polar's variables:
# OPENAI_BASE_URL, OPENAI_API_KEY, OPENAI_MODEL and POLAR_INSTRUCTION.
set -euo pipefail
body=$(python3 -c 'import json, os; print(json.dumps({"model": os.environ["OPENAI_MODEL"],
  "max_tokens": 64, "messages": [{"role": "user", "content": os.environ["POLAR_INSTRUCTION"]}]}))')
httpx "$OPENAI_BASE_URL/chat/completions" --method POST --json "$body" \
  --headers Authorization "Bearer $OPENAI_API_KEY" --download reply.json
python3 -c 'import json; print(json.load(open("reply.json"))["choices"][0]["message"]["content"])' \
  > answer.txt
rm reply.json
cowsay < answer.txt | tee cow.txt
# the image's python3 is still the one on PATH, not the tool venv's
echo "python3: $(command -v python3); httpx: $(readlink -f "$(command -v httpx)")"
