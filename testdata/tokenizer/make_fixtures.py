#!/usr/bin/env python3
"""Builds the small tokenizer.json fixtures in testdata/tokenizer/fixtures/.

They are trained on a tiny corpus with the Python `tokenizers` library and
assembled through its API, so every component is serialized exactly as
Hugging Face writes it. Each one exercises parts of the pipeline that the real
Qwen/Llama tokenizers do not:

  bytelevel  Digits + ByteLevel(add_prefix_space, GPT-2 regex), NFKC, added
             tokens with lstrip/rstrip/single_word/normalized, a
             TemplateProcessing with BOS and EOS, the list form of
             chat_template and an AddedToken-object eos_token.
  metaspace  Metaspace pre-tokenizer (prepend_scheme "first"), byte_fallback,
             Replace normalizer with a regex, ByteFallback+Metaspace decoder.
  wordish    WhitespaceSplit+Punctuation, NFD+StripAccents+Lowercase,
             end_of_word_suffix with the BPE decoder, unk with fuse_unk,
             BertProcessing.

The files are committed; run this only to rebuild them:
    python3 testdata/tokenizer/make_fixtures.py
"""

import json
import os

from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers

HERE = os.path.dirname(os.path.abspath(__file__))
FIXTURES = os.path.join(HERE, "fixtures")

CORPUS = [
    "The quick brown fox jumps over the lazy dog.",
    "Hello world, hello there! How are you doing today?",
    "It's 2024 and the numbers 1234567 and 3.14159 are here.",
    "def main():\n    return hello_world(42)\n",
    "Café déjà vu, naïve résumé.",
    "[INST] Tell me a story [/INST] Once upon a time...",
] * 10

BYTELEVEL_TEMPLATE_DEFAULT = (
    "{{ bos_token }}{% for message in messages %}"
    "{{ '<tool>' if message['role'] == 'tool' else '' }}"
    "{{ message['role'] | upper }}: {{ message['content'] | trim }}{{ eos_token }}\n"
    "{% endfor %}{% if add_generation_prompt %}ASSISTANT:{% endif %}"
)
BYTELEVEL_TEMPLATE_TOOLS = "{% for t in tools %}{{ t | tojson }}{% endfor %}"


def write(name, tok, config=None):
    folder = os.path.join(FIXTURES, name)
    os.makedirs(folder, exist_ok=True)
    data = json.loads(tok.to_str())
    with open(os.path.join(folder, "tokenizer.json"), "w", encoding="utf-8") as f:
        json.dump(data, f, ensure_ascii=False, indent=1)
        f.write("\n")
    if config is not None:
        with open(os.path.join(folder, "tokenizer_config.json"), "w", encoding="utf-8") as f:
            json.dump(config, f, ensure_ascii=False, indent=1)
            f.write("\n")


def bytelevel():
    tok = Tokenizer(models.BPE())
    tok.normalizer = normalizers.NFKC()
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    trainer = trainers.BpeTrainer(
        vocab_size=400, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False
    )
    tok.train_from_iterator(CORPUS, trainer)
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [pre_tokenizers.Digits(individual_digits=True), pre_tokenizers.ByteLevel(add_prefix_space=True)]
    )
    tok.decoder = decoders.ByteLevel()
    tok.add_special_tokens(
        [AddedToken("<|bos|>", special=True, normalized=False), AddedToken("<|eot|>", special=True, normalized=False)]
    )
    tok.add_tokens(
        [
            AddedToken("<tool>", lstrip=True, rstrip=True, normalized=False),
            AddedToken("[NAME]", single_word=True, normalized=False),
            AddedToken("hello_world", normalized=True),
            AddedToken("ﬁx", normalized=True),
        ]
    )
    bos, eot = tok.token_to_id("<|bos|>"), tok.token_to_id("<|eot|>")
    tok.post_processor = processors.Sequence(
        [
            processors.ByteLevel(trim_offsets=False),
            processors.TemplateProcessing(
                single="<|bos|> $A <|eot|>",
                pair="<|bos|> $A <|eot|> $B:1 <|eot|>:1",
                special_tokens=[("<|bos|>", bos), ("<|eot|>", eot)],
            ),
        ]
    )
    config = {
        "bos_token": "<|bos|>",
        "eos_token": {"__type": "AddedToken", "content": "<|eot|>", "lstrip": False, "normalized": False},
        "add_bos_token": False,
        "chat_template": [
            {"name": "default", "template": BYTELEVEL_TEMPLATE_DEFAULT},
            {"name": "tool_use", "template": BYTELEVEL_TEMPLATE_TOOLS},
        ],
    }
    write("bytelevel", tok, config)


def metaspace():
    tok = Tokenizer(models.BPE(unk_token="<unk>", byte_fallback=True, fuse_unk=True))
    tok.normalizer = normalizers.Sequence([normalizers.NFKC(), normalizers.Replace(Regex(" {2,}"), " ")])
    tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="first", split=True)
    trainer = trainers.BpeTrainer(vocab_size=300, special_tokens=["<unk>", "<s>", "</s>"], show_progress=False)
    tok.train_from_iterator(CORPUS, trainer)
    data = json.loads(tok.to_str())
    vocab = data["model"]["vocab"]
    for b in range(256):
        vocab.setdefault(f"<0x{b:02X}>", len(vocab))
    tok = Tokenizer.from_str(json.dumps(data))
    tok.decoder = decoders.Sequence([decoders.ByteFallback(), decoders.Metaspace(prepend_scheme="first")])
    tok.add_special_tokens([AddedToken("[INST]", special=True, normalized=False)])
    tok.add_tokens([AddedToken("[/INST]", special=False, normalized=False, rstrip=True)])
    tok.post_processor = processors.TemplateProcessing(
        single="<s> $A", pair="<s> $A $B", special_tokens=[("<s>", tok.token_to_id("<s>"))]
    )
    write("metaspace", tok, {"bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>", "add_bos_token": True})


def wordish():
    tok = Tokenizer(models.BPE(unk_token="[UNK]", fuse_unk=True, end_of_word_suffix="</w>"))
    tok.normalizer = normalizers.Sequence([normalizers.NFD(), normalizers.StripAccents(), normalizers.Lowercase()])
    tok.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.WhitespaceSplit(), pre_tokenizers.Punctuation()])
    trainer = trainers.BpeTrainer(
        vocab_size=250,
        special_tokens=["[UNK]", "[CLS]", "[SEP]"],
        end_of_word_suffix="</w>",
        show_progress=False,
    )
    tok.train_from_iterator(CORPUS, trainer)
    tok.decoder = decoders.BPEDecoder(suffix="</w>")
    tok.post_processor = processors.BertProcessing(
        ("[SEP]", tok.token_to_id("[SEP]")), ("[CLS]", tok.token_to_id("[CLS]"))
    )
    write("wordish", tok)


def main():
    bytelevel()
    metaspace()
    wordish()
    print(f"wrote fixtures to {FIXTURES}")


if __name__ == "__main__":
    main()
