"""Token labels for attention heatmaps: a list of strings, or a tokenizer's output, per batch item.

>>> normalize_tokens(["[CLS]", "hi", "[SEP]"])
[['[CLS]', 'hi', '[SEP]']]
>>> vocab = {0: "<s>", 7: "cat"}
>>> normalize_tokens({"input_ids": [[0, 7]]}, lambda ids: [vocab[i] for i in ids])
[['<s>', 'cat']]
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

__all__ = ["normalize_tokens", "tokens_for"]

Tokens = list[list[str]]


def normalize_tokens(tokens: Any, tokenizer: Any = None) -> Tokens | None:
    """One list of token strings per batch item (``None`` clears the labels).

    Args:
        tokens: a list of strings (used for every batch item), a list of such lists (one per
            batch item), or a tokenizer's output (a dict or ``BatchEncoding`` with
            ``input_ids``, 1-D or ``[batch, seq]``, list or tensor).
        tokenizer: for a tokenizer's output: the tokenizer (its ``convert_ids_to_tokens`` is
            used) or any function ``ids -> token strings``. A fast tokenizer's
            ``BatchEncoding`` also works without it (its ``.tokens(i)``).

    Raises:
        TypeError: anything else, with what was given and what to pass instead.
    """
    if tokens is None:
        return None
    if isinstance(tokens, Mapping) or hasattr(tokens, "input_ids"):
        return _from_encoding(tokens, tokenizer)
    if isinstance(tokens, str) or not isinstance(tokens, Sequence):
        raise TypeError(
            f"set_tokens needs a list of token strings or a tokenizer's output, got "
            f"{type(tokens).__name__}; e.g. explorer.set_tokens(['[CLS]', 'hello', '[SEP]']) "
            "or explorer.set_tokens(tokenizer(text, return_tensors='pt'), tokenizer)"
        )
    if all(isinstance(tok, str) for tok in tokens):
        return [list(tokens)]
    if all(isinstance(row, Sequence) and not isinstance(row, str) for row in tokens):
        rows = [list(row) for row in tokens]
        if all(isinstance(tok, str) for row in rows for tok in row):
            return rows
    bad = next(tok for tok in _flat(tokens) if not isinstance(tok, str))
    raise TypeError(
        f"token labels must be strings, got {type(bad).__name__} {bad!r}; token ids need the "
        "tokenizer: explorer.set_tokens({'input_ids': ids}, tokenizer)"
    )


def tokens_for(tokens: Tokens | None, batch: int, length: int) -> list[str] | None:
    """The labels of batch item ``batch`` if they fit an axis of ``length``, else ``None``."""
    if not tokens:
        return None
    row = tokens[batch] if batch < len(tokens) else tokens[0] if len(tokens) == 1 else None
    return row if row is not None and len(row) == length else None


def _flat(tokens: Sequence[Any]) -> list[Any]:
    out: list[Any] = []
    for tok in tokens:
        is_row = isinstance(tok, Sequence) and not isinstance(tok, str)
        out.extend(tok if is_row else [tok])
    return out


def _from_encoding(encoding: Any, tokenizer: Any) -> Tokens:
    ids = encoding["input_ids"] if isinstance(encoding, Mapping) else encoding.input_ids
    rows = ids.tolist() if hasattr(ids, "tolist") else list(ids)
    if rows and not isinstance(rows[0], list):
        rows = [rows]
    convert = _converter(encoding, tokenizer)
    return [[str(tok) for tok in convert(i, row)] for i, row in enumerate(rows)]


def _converter(encoding: Any, tokenizer: Any) -> Callable[[int, list[int]], Sequence[Any]]:
    if tokenizer is not None and hasattr(tokenizer, "convert_ids_to_tokens"):
        return lambda _i, row: tokenizer.convert_ids_to_tokens(row)
    if callable(tokenizer):
        return lambda _i, row: tokenizer(row)
    if tokenizer is None and callable(getattr(encoding, "tokens", None)):
        try:
            encoding.tokens(0)
        except Exception:  # slow tokenizers raise: fall through to the hint
            pass
        else:
            return lambda i, _row: encoding.tokens(i)
    raise TypeError(
        "a tokenizer's output holds token ids; pass the tokenizer (or a function ids -> "
        f"tokens) too, got tokenizer={type(tokenizer).__name__}: "
        "explorer.set_tokens(encoding, tokenizer)"
    )
