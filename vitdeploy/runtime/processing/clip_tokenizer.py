"""CLIP's byte-level BPE tokenizer without torch: SAM 3's text prompts (``sam3.model.tokenizer_ve.SimpleTokenizer``).

The text is cleaned (``ftfy.fix_text``, HTML entities unescaped twice, runs of whitespace to one space, lower case),
split into words, numbers and punctuation runs by CLIP's pattern, each piece's UTF-8 bytes mapped to printable
characters and merged by the BPE ranks of CLIP's vocabulary; the ids are framed by ``<start_of_text>`` and
``<end_of_text>`` and zero-padded to the context length (SAM 3: 32). A text longer than that is cut, its last id
made ``<end_of_text>``, as the official tokenizer does; :meth:`ClipTokenizer.count` says how many ids a text takes,
so a caller can refuse it instead.

The vocabulary is CLIP's ``bpe_simple_vocab_16e6.txt.gz`` (1.36 MB), which the ``sam3`` wheel does not ship: pass its
path, or install the wheel that carries it (``pip install --no-deps open_clip_torch``: 1.5 MB, nothing imported).
``ftfy`` and ``regex`` (Unicode classes) are the ``sam3`` extra's.
"""

from __future__ import annotations

import gzip
import html
import importlib.util
from functools import lru_cache
from pathlib import Path

import numpy as np

from vitdeploy.errors import InputError

VOCAB_NAME = "bpe_simple_vocab_16e6.txt.gz"
#: merges kept from the vocabulary file (after its header line): 49152 - 256 bytes - 2 special tokens
MERGES = 49152 - 256 - 2
SPECIAL = ("<start_of_text>", "<end_of_text>")
PATTERN = r"""<start_of_text>|<end_of_text>|'s|'t|'re|'ve|'m|'ll|'d|[\p{L}]+|[\p{N}]|[^\s\p{L}\p{N}]+"""


def default_vocab() -> Path:
    """CLIP's vocabulary from an installed ``open_clip`` package (found, not imported), or an InputError saying how."""
    spec = importlib.util.find_spec("open_clip")
    for folder in (spec.submodule_search_locations or []) if spec is not None else []:
        candidate = Path(folder) / VOCAB_NAME
        if candidate.is_file():
            return candidate
    raise InputError(f"SAM 3's text prompts need CLIP's vocabulary {VOCAB_NAME}: pass its path (bpe_path=), or "
                     "'pip install --no-deps open_clip_torch' (its wheel carries the file)")


@lru_cache(maxsize=1)
def byte_characters() -> dict[int, str]:
    """Each byte -> a printable character: the printable Latin-1 bytes map to themselves, the rest to 256 + n."""
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    table = {b: chr(b) for b in printable}
    extra = 0
    for b in range(256):
        if b not in table:
            table[b] = chr(256 + extra)
            extra += 1
    return table


def _modules():
    try:
        import ftfy
        import regex
    except ImportError as exc:
        raise InputError(f"SAM 3's text prompts need '{exc.name}': pip install 'vitdeploy[sam3]' (ftfy, regex)") from exc
    return ftfy, regex


class ClipTokenizer:
    """``SimpleTokenizer(bpe_path)`` with ``clean="lower"``: ``tokenizer(texts, context_length)`` -> (N, L) int64."""

    def __init__(self, bpe_path: str | Path | None = None, context_length: int = 32):
        ftfy, regex = _modules()
        self._fix_text = ftfy.fix_text
        self._regex = regex
        path = Path(bpe_path) if bpe_path is not None else default_vocab()
        try:
            lines = gzip.decompress(path.read_bytes()).decode("utf-8").split("\n")
        except (OSError, EOFError, UnicodeDecodeError) as exc:
            raise InputError(f"'{path}' is not CLIP's vocabulary ({VOCAB_NAME}; {type(exc).__name__}): pass that file") \
                from None
        merges = [tuple(line.split()) for line in lines[1:MERGES + 1]]
        if len(merges) != MERGES or any(len(m) != 2 for m in merges):
            raise InputError(f"'{path}' is not CLIP's vocabulary ({VOCAB_NAME}: {MERGES} merges): pass that file")
        symbols = list(byte_characters().values())
        vocab = symbols + [s + "</w>" for s in symbols] + ["".join(m) for m in merges] + list(SPECIAL)
        self.encoder = {token: i for i, token in enumerate(vocab)}
        self.ranks = {merge: i for i, merge in enumerate(merges)}
        self.start_id, self.end_id = self.encoder[SPECIAL[0]], self.encoder[SPECIAL[1]]
        self.context_length = int(context_length)
        self.pattern = regex.compile(PATTERN, regex.IGNORECASE)
        self._pieces: dict[str, list[int]] = {}

    def clean(self, text: str) -> str:
        text = html.unescape(html.unescape(self._fix_text(text))).strip()
        return self._regex.sub(r"\s+", " ", text).strip().lower()

    def _merge(self, piece: str) -> list[str]:
        """The BPE of one piece: repeatedly join the adjacent pair of lowest rank until none is in the ranks."""
        word = [*piece[:-1], piece[-1] + "</w>"]
        while len(word) > 1:
            pairs = {(a, b) for a, b in zip(word, word[1:])}
            best = min(pairs, key=lambda pair: self.ranks.get(pair, len(self.ranks)))
            if best not in self.ranks:
                break
            merged, i = [], 0
            while i < len(word):
                if i < len(word) - 1 and (word[i], word[i + 1]) == best:
                    merged.append(word[i] + word[i + 1])
                    i += 2
                else:
                    merged.append(word[i])
                    i += 1
            word = merged
        return word

    def encode(self, text: str) -> list[int]:
        """The ids of a text, without the start and end tokens."""
        table = byte_characters()
        ids: list[int] = []
        for piece in self.pattern.findall(self.clean(text)):
            if piece in SPECIAL:
                ids.append(self.encoder[piece])
                continue
            if piece not in self._pieces:
                chars = "".join(table[b] for b in piece.encode("utf-8"))
                self._pieces[piece] = [self.encoder[t] for t in self._merge(chars)]
            ids.extend(self._pieces[piece])
        return ids

    def count(self, text: str) -> int:
        """How many ids ``text`` takes with its start and end tokens (more than the context length: it would be cut)."""
        return len(self.encode(text)) + 2

    def __call__(self, texts: str | list[str], context_length: int | None = None) -> np.ndarray:
        texts = [texts] if isinstance(texts, str) else list(texts)
        length = int(context_length or self.context_length)
        out = np.zeros((len(texts), length), dtype=np.int64)
        for row, text in enumerate(texts):
            ids = [self.start_id, *self.encode(text), self.end_id]
            if len(ids) > length:
                ids = ids[:length]
                ids[-1] = self.end_id
            out[row, :len(ids)] = ids
        return out


__all__ = ["ClipTokenizer", "VOCAB_NAME", "byte_characters", "default_vocab"]
