"""Config errors that name the field, e.g. `profiles[0].plugins.score.enabled[1].weight: must be > 0`."""

from __future__ import annotations


class ConfigError(ValueError):
    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}" if field else message)
        self.field = field
        self.message = message


class ArgsError(ValueError):
    """Raised by a plugin's check_args; `field` is relative to the plugin's args."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field
        self.message = message
