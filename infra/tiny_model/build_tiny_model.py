"""Build Polar's tiny, randomly initialised Qwen3 model and its tokenizer, locally.

Usage: python infra/tiny_model/build_tiny_model.py OUT_DIR

Needs `tokenizers` and `transformers`; `torch` only for the weights (run it with the
vLLM venv's python). Deterministic (fixed corpus, fixed seed) and idempotent: an
existing OUT_DIR/.complete means done; otherwise it builds in a temporary sibling
directory and renames it into place.
"""

from __future__ import annotations

import json
import shutil
import sys
import sysconfig
import tempfile
from collections.abc import Iterator
from pathlib import Path

from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers, processors, trainers

VOCAB_SIZE = 2048
STDLIB_BYTES = 400_000
SEED = 0

PAD_TOKEN = "<|endoftext|>"
EOS_TOKEN = "<|im_end|>"
CONTROL_TOKENS = [PAD_TOKEN, "<|im_start|>", EOS_TOKEN]
# Like Qwen's, these are added tokens that survive `skip_special_tokens=True` decoding.
TAG_TOKENS = [
    "<tool_call>",
    "</tool_call>",
    "<tool_response>",
    "</tool_response>",
    "<think>",
    "</think>",
]

# ChatML in the Qwen3 spirit. Reasoning is kept only for assistant turns after the
# last user turn (Qwen3's rule: within one tool-calling loop it stays, a new user
# query drops it from history).
CHAT_TEMPLATE = r"""{%- macro render_content(content) -%}
    {%- if content is string -%}
        {{- content -}}
    {%- elif content is iterable and content is not mapping -%}
        {%- for part in content -%}
            {%- if part is string -%}
                {{- part -}}
            {%- elif part.type == 'text' -%}
                {{- part.text -}}
            {%- endif -%}
            {%- if not loop.last -%}
                {{- '\n' -}}
            {%- endif -%}
        {%- endfor -%}
    {%- endif -%}
{%- endmacro -%}
{%- if tools %}
    {{- '<|im_start|>system\n' }}
    {%- if messages[0].role == 'system' %}
        {{- render_content(messages[0].content) + '\n\n' }}
    {%- endif %}
    {{- '# Tools\n\nYou may call one or more functions to assist with the user query.\n\n' }}
    {{- 'You are provided with function signatures within <tools></tools> XML tags:\n<tools>' }}
    {%- for tool in tools %}
        {{- '\n' + (tool | tojson) }}
    {%- endfor %}
    {{- '\n</tools>\n\nFor each function call, return a json object with function name and ' }}
    {{- 'arguments within <tool_call></tool_call> XML tags:\n<tool_call>\n' }}
    {{- '{"name": <function-name>, "arguments": <args-json-object>}\n</tool_call><|im_end|>\n' }}
{%- elif messages[0].role == 'system' %}
    {{- '<|im_start|>system\n' + render_content(messages[0].content) + '<|im_end|>\n' }}
{%- endif %}
{%- set ns = namespace(last_query_index=-1) %}
{%- for message in messages %}
    {%- if message.role == 'user' %}
        {%- set ns.last_query_index = loop.index0 %}
    {%- endif %}
{%- endfor %}
{%- for message in messages %}
    {%- set content = render_content(message.content) %}
    {%- if message.role == 'user' or (message.role == 'system' and not loop.first) %}
        {{- '<|im_start|>' + message.role + '\n' + content + '<|im_end|>\n' }}
    {%- elif message.role == 'assistant' %}
        {%- set reasoning = '' %}
        {%- if message.reasoning_content is string %}
            {%- set reasoning = message.reasoning_content %}
        {%- elif '</think>' in content %}
            {%- set reasoning = content.split('</think>')[0].rstrip('\n') %}
            {%- set reasoning = reasoning.split('<think>')[-1].lstrip('\n') %}
            {%- set content = content.split('</think>')[-1].lstrip('\n') %}
        {%- endif %}
        {{- '<|im_start|>assistant\n' }}
        {%- if reasoning and loop.index0 > ns.last_query_index %}
            {{- '<think>\n' + reasoning.strip('\n') + '\n</think>\n\n' + content.lstrip('\n') }}
        {%- else %}
            {{- content }}
        {%- endif %}
        {%- for tool_call in message.tool_calls or [] %}
            {%- if content or not loop.first %}
                {{- '\n' }}
            {%- endif %}
            {%- set call = tool_call.function if tool_call.function is defined else tool_call %}
            {{- '<tool_call>\n{"name": "' + call.name + '", "arguments": ' }}
            {%- if call.arguments is string %}
                {{- call.arguments }}
            {%- else %}
                {{- call.arguments | tojson }}
            {%- endif %}
            {{- '}\n</tool_call>' }}
        {%- endfor %}
        {{- '<|im_end|>\n' }}
    {%- elif message.role == 'tool' %}
        {%- if loop.first or messages[loop.index0 - 1].role != 'tool' %}
            {{- '<|im_start|>user' }}
        {%- endif %}
        {{- '\n<tool_response>\n' + content + '\n</tool_response>' }}
        {%- if loop.last or messages[loop.index0 + 1].role != 'tool' %}
            {{- '<|im_end|>\n' }}
        {%- endif %}
    {%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<|im_start|>assistant\n' }}
    {%- if enable_thinking is defined and enable_thinking is false %}
        {{- '<think>\n\n</think>\n\n' }}
    {%- endif %}
{%- endif %}
"""

INLINE_TEXT = """\
You are a helpful coding assistant. Read the repository, find the bug, and fix it.
The user asked me to run the tests first, so I will look at the failing test and then
edit the file. Let me check which files changed and what the error message says.
I found the problem: the function returns None when the list is empty. I will add a
guard and a test for it. All tests pass now. Here is a summary of the change.
# Tools

You may call one or more functions to assist with the user query.
For each function call, return a json object with function name and arguments.
{"name": "bash", "arguments": {"command": "ls -la && git status"}}
{"name": "read_file", "arguments": {"path": "src/main.py", "offset": 0, "limit": 200}}
{"name": "edit_file", "arguments": {"path": "README.md", "old": "foo", "new": "bar"}}
{"name": "write_file", "arguments": {"path": "tests/test_app.py", "content": "import os\\n"}}
{"type": "function", "function": {"name": "shell", "description": "Run a shell command",
 "parameters": {"type": "object", "properties": {"command": {"type": "string"}},
 "required": ["command"]}}}
{"role": "assistant", "content": null, "tool_calls": [{"id": "call_0", "type": "function"}]}
$ cd /repo && python -m pytest -x -q tests/
$ grep -rn "def main" --include=*.py . | head -20
$ git diff --stat && git apply patch.diff && echo done
$ pip install -e . && ls /tmp | wc -l
diff --git a/app.py b/app.py
--- a/app.py
+++ b/app.py
@@ -1,3 +1,4 @@
+import sys
 FAILED tests/test_app.py::test_empty - AssertionError: assert None == []
 ===== 12 passed, 1 failed in 0.42s =====
"""


def stdlib_corpus(limit: int = STDLIB_BYTES) -> Iterator[str]:
    """Yield the sorted top-level stdlib modules' source, about `limit` bytes in all."""
    stdlib = Path(sysconfig.get_paths()["stdlib"])
    total = 0
    for path in sorted(stdlib.glob("*.py")):
        text = path.read_text(encoding="utf-8", errors="replace")
        yield text
        total += len(text.encode("utf-8"))
        if total >= limit:
            return


def corpus() -> Iterator[str]:
    """The training corpus: stdlib Python plus inline English, JSON and shell text."""
    yield from stdlib_corpus()
    for _ in range(20):
        yield INLINE_TEXT


def train_tokenizer() -> Tokenizer:
    """Train a byte-level BPE of VOCAB_SIZE entries, special tokens included."""
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    tokenizer.post_processor = processors.ByteLevel(trim_offsets=False)
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB_SIZE,
        special_tokens=CONTROL_TOKENS + TAG_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator(corpus(), trainer)
    # Keep the ids the trainer reserved, but mark the tags as ordinary added tokens.
    tokenizer.add_tokens([AddedToken(tag, special=False, normalized=False) for tag in TAG_TOKENS])
    return tokenizer


def save_tokenizer(tokenizer: Tokenizer, out: Path) -> int:
    """Save a transformers fast tokenizer with the chat template; return its length."""
    from transformers import PreTrainedTokenizerFast

    fast = PreTrainedTokenizerFast(
        tokenizer_object=tokenizer,
        eos_token=EOS_TOKEN,
        pad_token=PAD_TOKEN,
        model_max_length=4096,
        clean_up_tokenization_spaces=False,
    )
    fast.chat_template = CHAT_TEMPLATE
    fast.save_pretrained(out)
    (out / "chat_template.jinja").write_text(CHAT_TEMPLATE, encoding="utf-8")
    config_path = out / "tokenizer_config.json"
    config = json.loads(config_path.read_text(encoding="utf-8"))
    config["chat_template"] = CHAT_TEMPLATE
    config["tokenizer_class"] = "PreTrainedTokenizerFast"  # a name transformers 4 and 5 know
    config_path.write_text(json.dumps(config, indent=2, ensure_ascii=False) + "\n", "utf-8")
    return len(fast)


def save_model(tokenizer: Tokenizer, vocab_size: int, out: Path) -> None:
    """Save a randomly initialised two-layer Qwen3 and its generation config."""
    import torch
    from transformers import GenerationConfig, Qwen3Config, Qwen3ForCausalLM

    pad_id = tokenizer.token_to_id(PAD_TOKEN)
    eos_id = tokenizer.token_to_id(EOS_TOKEN)
    config = Qwen3Config(
        vocab_size=vocab_size,
        hidden_size=128,
        intermediate_size=256,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=1,
        head_dim=64,  # vLLM's CPU attention kernels refuse 16
        max_position_embeddings=4096,
        tie_word_embeddings=True,
        bos_token_id=pad_id,
        eos_token_id=eos_id,
        pad_token_id=pad_id,
    )
    torch.manual_seed(SEED)
    model = Qwen3ForCausalLM(config).to(torch.float32).eval()
    model.save_pretrained(out, safe_serialization=True)
    GenerationConfig(bos_token_id=pad_id, eos_token_id=eos_id, pad_token_id=pad_id).save_pretrained(
        out
    )


def build(out_dir: Path) -> None:
    """Build the model into `out_dir` unless it is already complete."""
    if (out_dir / ".complete").exists():
        print(f"{out_dir} is already complete")
        return
    if out_dir.exists():
        sys.exit(f"{out_dir} exists but is not a complete build; remove it first")
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out_dir.name}.", dir=out_dir.parent))
    try:
        tokenizer = train_tokenizer()
        vocab_size = save_tokenizer(tokenizer, tmp)
        save_model(tokenizer, vocab_size, tmp)
        summary = {
            "vocab_size": vocab_size,
            "eos_token_id": tokenizer.token_to_id(EOS_TOKEN),
            "pad_token_id": tokenizer.token_to_id(PAD_TOKEN),
        }
        (tmp / ".complete").write_text(json.dumps(summary) + "\n", encoding="utf-8")
        for path in tmp.iterdir():
            path.chmod(0o644)
        tmp.chmod(0o755)
        try:
            tmp.rename(out_dir)
        except OSError:
            if not (out_dir / ".complete").exists():
                raise
            print(f"{out_dir} was completed by another build")
            return
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print(f"built {out_dir}: {summary}")


def main(argv: list[str]) -> None:
    """Command-line entry point."""
    if len(argv) != 2:
        sys.exit(f"usage: {argv[0]} OUT_DIR")
    build(Path(argv[1]).resolve())


if __name__ == "__main__":
    main(sys.argv)
