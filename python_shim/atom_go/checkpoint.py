"""What the frameworks' hooks check about a checkpoint path before serving it on atom-go.

vLLM and SGLang read a checkpoint directory themselves (config.json, the tokenizer): a GGUF
file must first be given a Hugging Face-style directory (``atom-plugin gguf-dir FILE.gguf
DIR``), and a directory without tokenizer files can only serve token-id prompts. Imports
nothing from either framework.
"""

from __future__ import annotations

import os

# Files one of which a Hugging Face tokenizer directory holds (fast, SentencePiece, byte-level
# BPE vocabularies, tiktoken).
TOKENIZER_FILES = ("tokenizer.json", "tokenizer.model", "vocab.json", "tiktoken.model", "tekken.json")


def is_gguf_file(path: str) -> bool:
    """Whether path names a GGUF file (rather than a checkpoint directory or a hub id)."""
    return path.endswith(".gguf") and os.path.isfile(path)


def gguf_file_message(path: str, framework: str) -> str:
    """The one line that says what to run instead of serving a GGUF file directly."""
    name = os.path.basename(path)
    stem = name[: -len(".gguf")] or "model"
    return (
        f"atom-go: {framework} cannot read a GGUF file itself; run `atom-plugin gguf-dir {path} {stem}` "
        f"and serve the directory {stem} instead of {name}"
    )


def has_tokenizer(path: str) -> bool:
    """Whether a local checkpoint directory holds tokenizer files; True for what is not a
    local directory (a hub id: the framework resolves it)."""
    if not os.path.isdir(path):
        return True
    return any(os.path.isfile(os.path.join(path, f)) for f in TOKENIZER_FILES)


def no_tokenizer_message(path: str, framework: str, skip_flag: str) -> str:
    """The start-up warning for a checkpoint directory without tokenizer files."""
    return (
        f"atom-go: {path} has no tokenizer ({' or '.join(TOKENIZER_FILES[:2])}): {framework} serves it with "
        f"{skip_flag}, so only token-id prompts work (text prompts, chat and detokenized output do not); "
        f"pass a tokenizer directory (--tokenizer) to serve text"
    )
