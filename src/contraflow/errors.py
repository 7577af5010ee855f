"""Errors a user can cause and fix.

The CLI prints a `UserError` as one line (no traceback) and exits with its
`exit_code`; every other exception is a bug and keeps its traceback.
"""

from __future__ import annotations


class UserError(Exception):
    """Bad input from the user: unknown topic, invalid name, bad offset, syntax error..."""

    exit_code: int = 2

    def __init__(self, message: str, *, exit_code: int | None = None) -> None:
        super().__init__(message)
        if exit_code is not None:
            self.exit_code = exit_code
