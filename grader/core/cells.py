"""A spreadsheet cell's text, kept from being read as a formula (grader.grading.spreadsheet writes every CSV with
it) and read back as it was (the project reads back the adjustments file and grades.csv it wrote).

As OWASP advises against CSV injection, text that starts with =, +, -, @, a tab or a carriage return is written
behind a single quote, which spreadsheets show as text; numbers are never changed."""

from __future__ import annotations

FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")


def as_text(value: object) -> object:
    """A cell's value as written: text a spreadsheet would read as a formula behind a single quote; numbers
    and other text as they are."""
    if isinstance(value, str) and value.startswith(FORMULA_STARTS):
        return "'" + value
    return value


def as_data(text: str) -> str:
    """A cell written by as_text, read back: the quote it put before a formula-like start taken off."""
    return text[1:] if text.startswith("'") and text[1:].startswith(FORMULA_STARTS) else text
