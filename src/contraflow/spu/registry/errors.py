"""The registry's errors as Confluent clients read them: an HTTP status and an `error_code`.

Clients branch on the code (`40401` means the subject is unknown, `409` an
incompatible schema), so every refusal the registry makes is one of these.
"""

from __future__ import annotations

SUBJECT_NOT_FOUND = 40401
VERSION_NOT_FOUND = 40402
SCHEMA_NOT_FOUND = 40403
SUBJECT_SOFT_DELETED = 40404
SUBJECT_NOT_SOFT_DELETED = 40405
VERSION_SOFT_DELETED = 40406
VERSION_NOT_SOFT_DELETED = 40407
SUBJECT_LEVEL_CONFIG_NOT_FOUND = 40408
INCOMPATIBLE_SCHEMA = 409
INVALID_SCHEMA = 42201
INVALID_VERSION = 42202
INVALID_COMPATIBILITY_LEVEL = 42203
REFERENCE_EXISTS = 42206
UNAUTHORIZED = 40101
STORE_ERROR = 50001


class RegistryError(Exception):
    """A refused request: `code` is the registry's error code, `status` the HTTP status it maps to."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message

    @property
    def status(self) -> int:
        """The HTTP status: 409 stays 409, the five-digit codes carry theirs in the first three."""
        return self.code if self.code < 1000 else self.code // 100

    def body(self) -> dict[str, object]:
        return {"error_code": self.code, "message": self.message}


def subject_not_found(subject: str) -> RegistryError:
    return RegistryError(SUBJECT_NOT_FOUND, f"Subject '{subject}' not found.")


def version_not_found(subject: str, version: object) -> RegistryError:
    return RegistryError(VERSION_NOT_FOUND, f"Version {version} not found for subject '{subject}'.")


def schema_not_found(what: str = "Schema not found") -> RegistryError:
    return RegistryError(SCHEMA_NOT_FOUND, what)
