"""Config errors that name the field, e.g. `profiles[0].plugins.score.enabled[1].weight: must be > 0`."""

from __future__ import annotations


def _printable(text: str) -> str:
    """`text` with each non-printable character escaped: a key like "a\\nb" is the user's, and must not
    break the error's one line (the CLI prints it as one) nor forge log lines."""
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() else c.encode("unicode_escape").decode("ascii") for c in text)


class ConfigError(ValueError):
    def __init__(self, field: str, message: str) -> None:
        super().__init__(_printable(f"{field}: {message}" if field else message))
        self.field = field
        self.message = message


class ArgsError(ValueError):
    """Raised by a plugin's check_args; `field` is relative to the plugin's args."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field
        self.message = message
