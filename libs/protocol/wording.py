"""Counting things in messages a person reads: "1 GPU", "2 GPUs", never "1 GPUs"."""

from __future__ import annotations


def counted(number: int | float, noun: str, plural: str | None = None) -> str:
    """`number` and `noun`, the noun in the plural unless the number is exactly one."""
    word = noun if number == 1 else (plural or f"{noun}s")
    shown = int(number) if isinstance(number, float) and number.is_integer() else number
    return f"{shown} {word}"
