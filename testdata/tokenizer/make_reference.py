#!/usr/bin/env python3
"""Writes testdata/tokenizer/reference_<name>.json for the engine/tokenizer tests.

The references come from the real Hugging Face `tokenizers` library, and chat
templates are rendered with jinja2 configured exactly as transformers'
apply_chat_template does (transformers itself is not needed):

    pip install tokenizers jinja2
    testdata/tokenizer/fetch.sh
    python3 testdata/tokenizer/make_reference.py          # all references
    python3 testdata/tokenizer/make_reference.py qwen3    # just one

The small fixtures under testdata/tokenizer/fixtures/ are committed; they are
rebuilt with make_fixtures.py.

Each reference holds, for a varied set of texts, the ids with and without
special tokens and the decoded strings, and for a few conversations the
rendered chat text and its ids (encoded without special tokens, as
apply_chat_template(tokenize=True) does).
"""

import datetime
import json
import os
import sys

import jinja2
import jinja2.ext
from jinja2.sandbox import ImmutableSandboxedEnvironment
from tokenizers import Tokenizer

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
EXTERNAL = os.path.join(ROOT, "testdata", "external", "tokenizers")

# Real tokenizers fetched by fetch.sh, and the committed fixtures built by
# make_fixtures.py (references are named reference_fixture_<name>.json).
EXTERNAL_NAMES = ["qwen3", "llama3", "llama3_1", "llama2"]
FIXTURE_NAMES = ["bytelevel", "metaspace", "wordish"]

# The fixed clock strftime_now uses, so references do not depend on the day.
FIXED_NOW = datetime.datetime(2025, 3, 7, 14, 5, 9)

TEXTS = [
    "Hello, world! This is a test.",
    "The quick brown fox jumps over the lazy dog. It's 5 o'clock; they'll say we've done it, I'm sure she'd agree.",
    "IT'S DON'T WE'LL THEY'RE I'M YOU'VE HE'D",
    "Café naïve résumé — déjà vu, Ångström, São Paulo, Zürich.",
    "Cafe\u0301 nai\u0308ve A\u030angstro\u0308m",
    "你好，世界！这是一个测试。日本語のテキストも。한국어 문장입니다.",
    "Привет мир! Γειά σου Κόσμε! مرحبا بالعالم שלום עולם नमस्ते दुनिया",
    "I ❤️ emoji 😀👍🏽 and families 👨\u200d👩\u200d👧\u200d👦 and flags 🇯🇵🏳️\u200d🌈!",
    "def foo(x):\n\tif x > 0:\n\t\treturn x * 2\n    else:\n        return None\n",
    "# Title\n\n- item 1\n- item 2\n\n```python\nprint('hi')\n```\n",
    "1234567 3.14159 1,000,000 -42 0.001 2024-01-15 12:30:45 1e10 ٣٤٥ ¾ ²",
    "a  b   c    d\t\te  \n  f   ",
    "line1\n\nline2\n\n\n\nline3\r\n\r\nend\n",
    "   ",
    " ",
    "\n",
    " leading space and trailing space ",
    "non\u00a0breaking\u3000ideographic\u2009thin\u200bzero-width",
    'Mr. O\'Neil\'s dog — "quoted" (parens) [brackets] {braces} <angle> @user #tag $100 50% a&b',
    "Visit https://example.com/path?query=1&b=2 or mail me@example.org.",
    "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa!!!!!!!!!!!!!??????",
    "Pneumonoultramicroscopicsilicovolcanoconiosis supercalifragilisticexpialidocious",
    "∑_{i=1}^{n} x_i² ≤ √(a² + b²) ∞ ≠ ≈ π",
    "𝔘𝔫𝔦𝔠𝔬𝔡𝔢 𝕋𝕖𝕩𝕥 ﬁ ligature ① ② Ⅻ",
    "control\x00chars\x01and\x7fdel",
    "<|im_start|>user\nHello<|im_end|>\n<|im_start|>assistant\n",
    "<|endoftext|>text<|endoftext|><|begin_of_text|>more <|eot_id|> and <s> </s> <unk>",
    "<think>\nreasoning here\n</think>\n\nThe answer.",
    "<|start_header_id|>user<|end_header_id|>\n\nHi!<|eot_id|>",
    "<|bos|>start<|eot|> [INST] do it [/INST]",
    "call  <tool>  now<tool>x",
    "[NAME] is here, not[NAME] or [NAME]s but ([NAME])",
    "hello_world hello_worlds ﬁx ligature",
    "",
]

CONVERSATIONS = {
    "system_user": [
        {"role": "system", "content": "You are a helpful assistant."},
        {"role": "user", "content": "What is the capital of France?"},
    ],
    "user_only": [
        {"role": "user", "content": "Write a haiku about Go."},
    ],
    "multi_turn": [
        {"role": "system", "content": "You are terse."},
        {"role": "user", "content": "Hi!"},
        {"role": "assistant", "content": "Hello. How can I help?"},
        {"role": "user", "content": "  What is 2+2?  \n"},
    ],
    "thinking": [
        {"role": "user", "content": "What is 2+2?"},
        {"role": "assistant", "content": "<think>\nAdd the numbers.\n</think>\n\nIt is 4."},
        {"role": "user", "content": "And 3+3? Answer in 中文 😀."},
    ],
}

# A tool, written with its keys already in sorted order: Go maps carry no
# insertion order, so the Go side always sorts them.
TOOLS = [
    {
        "function": {
            "description": "Get the weather in a city.",
            "name": "get_weather",
            "parameters": {
                "properties": {"city": {"description": "City name", "type": "string"}, "days": {"type": "integer"}},
                "required": ["city"],
                "type": "object",
            },
        },
        "type": "function",
    }
]


def jinja_env():
    """The environment transformers' _compile_jinja_template builds."""

    class AssistantTracker(jinja2.ext.Extension):
        tags = {"generation"}

        def parse(self, parser):
            lineno = next(parser.stream).lineno
            body = parser.parse_statements(["name:endgeneration"], drop_needle=True)
            return jinja2.nodes.CallBlock(self.call_method("_render", []), [], [], body).set_lineno(lineno)

        def _render(self, caller):
            return caller()

    def raise_exception(message):
        raise jinja2.exceptions.TemplateError(message)

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)

    def strftime_now(fmt):
        return FIXED_NOW.strftime(fmt)

    env = ImmutableSandboxedEnvironment(
        trim_blocks=True, lstrip_blocks=True, extensions=[AssistantTracker, jinja2.ext.loopcontrols]
    )
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    return env


def token_string(v):
    if isinstance(v, dict):
        return v.get("content")
    return v


def special_tokens_map(cfg):
    """What transformers' tokenizer.special_tokens_map holds."""
    out = {}
    for key in ["bos_token", "eos_token", "unk_token", "sep_token", "pad_token", "cls_token", "mask_token"]:
        v = token_string(cfg.get(key))
        if v is not None:
            out[key] = v
    extra = cfg.get("additional_special_tokens")
    if extra:
        out["additional_special_tokens"] = [token_string(v) for v in extra]
    return out


def own_templates(cfg):
    """(label, source) for the checkpoint's templates: "own" is the default
    one, "own:<name>" the other named ones of the list form."""
    t = cfg.get("chat_template")
    if not t:
        return []
    if isinstance(t, str):
        return [("own", t)]
    named = {item["name"]: item["template"] for item in t}
    out = [("own", named["default"])] if "default" in named else []
    return out + [("own:" + k, v) for k, v in named.items() if k != "default"]


def chat_cases(tok, cfg, name):
    """Chat renders: the checkpoint's own template, plus fixture templates."""
    templates = own_templates(cfg)
    if name == "qwen3":
        with open(os.path.join(HERE, "templates", "smollm2.jinja")) as f:
            templates.append(("smollm2.jinja", f.read()))
    if name == "fixture_bytelevel":
        with open(os.path.join(HERE, "templates", "constructs.jinja")) as f:
            templates.append(("constructs.jinja", f.read()))
    if name == "llama3_1":
        with open(os.path.join(HERE, "templates", "tools_dates.jinja")) as f:
            templates.append(("tools_dates.jinja", f.read()))
    env = jinja_env()
    smap = special_tokens_map(cfg)
    cases = []
    for tname, src in templates:
        compiled = env.from_string(src)
        variants = []
        for conv in CONVERSATIONS:
            for gen in (True, False):
                variants.append((conv, gen, {}, None))
        if name == "qwen3" and tname == "own":
            variants.append(("thinking", True, {"enable_thinking": False}, None))
            variants.append(("system_user", True, {}, TOOLS))
        if tname == "own:tool_use":
            variants = [("user_only", False, {}, TOOLS)]
        if tname == "tools_dates.jinja":
            variants.append(("system_user", True, {}, TOOLS))
            variants.append(("multi_turn", True, {"date_string": "26 Jul 2024"}, TOOLS))
        for conv, gen, extra, tools in variants:
            kwargs = {**smap, **extra}
            text = compiled.render(
                messages=CONVERSATIONS[conv], tools=tools, documents=None, add_generation_prompt=gen, **kwargs
            )
            cases.append(
                {
                    "template": tname,
                    "conversation": conv,
                    "messages": CONVERSATIONS[conv],
                    "add_generation_prompt": gen,
                    "vars": extra,
                    "tools": tools,
                    "text": text,
                    "ids": tok.encode(text, add_special_tokens=False).ids,
                }
            )
    return cases


def encode_cases(tok):
    cases = []
    for text in TEXTS:
        plain = tok.encode(text, add_special_tokens=False).ids
        special = tok.encode(text, add_special_tokens=True).ids
        cases.append(
            {
                "text": text,
                "ids": plain,
                "ids_special": special,
                "decode": tok.decode(plain, skip_special_tokens=False),
                "decode_skip": tok.decode(plain, skip_special_tokens=True),
                "decode_special_skip": tok.decode(special, skip_special_tokens=True),
            }
        )
    return cases


def write(path, ref):
    """Compact JSON, one case per line, so diffs stay readable."""
    with open(path, "w", encoding="utf-8") as f:
        f.write("{\n")
        f.write(' "tokenizer": %s,\n' % json.dumps(ref["tokenizer"]))
        f.write(' "tokenizers_version": %s,\n' % json.dumps(ref["tokenizers_version"]))
        f.write(' "now": %s,\n' % json.dumps(ref["now"]))
        for key in ("encode", "chat"):
            f.write(' "%s": [\n' % key)
            lines = [json.dumps(c, ensure_ascii=False) for c in ref[key]]
            f.write(",\n".join("  " + line for line in lines))
            f.write("\n ]%s\n" % ("," if key == "encode" else ""))
        f.write("}\n")


def main():
    import tokenizers

    names = sys.argv[1:] or EXTERNAL_NAMES + ["fixture_" + n for n in FIXTURE_NAMES]
    for name in names:
        if name.startswith("fixture_"):
            folder = os.path.join(HERE, "fixtures", name[len("fixture_") :])
        else:
            folder = os.path.join(EXTERNAL, name)
        if not os.path.exists(os.path.join(folder, "tokenizer.json")):
            sys.exit(f"{folder}/tokenizer.json is missing: run testdata/tokenizer/fetch.sh first")
        tok = Tokenizer.from_file(os.path.join(folder, "tokenizer.json"))
        cfg = {}
        if os.path.exists(os.path.join(folder, "tokenizer_config.json")):
            with open(os.path.join(folder, "tokenizer_config.json"), encoding="utf-8") as f:
                cfg = json.load(f)
        ref = {
            "tokenizer": name,
            "tokenizers_version": tokenizers.__version__,
            "now": FIXED_NOW.isoformat(),
            "encode": encode_cases(tok),
            "chat": chat_cases(tok, cfg, name),
        }
        out = os.path.join(HERE, f"reference_{name}.json")
        write(out, ref)
        print(f"wrote {out}: {len(ref['encode'])} encode cases, {len(ref['chat'])} chat cases")


if __name__ == "__main__":
    main()
