"""Status and Code: what every extension point returns (kube-scheduler's framework.Status)."""

from __future__ import annotations

import dataclasses
import enum
from dataclasses import dataclass

__all__ = ["SUCCESS", "Code", "Status"]


class Code(enum.Enum):
    SUCCESS = "Success"
    ERROR = "Error"
    UNSCHEDULABLE = "Unschedulable"
    # No retry can help until the cluster changes in a way a plugin registered for (or the pod changes).
    UNRESOLVABLE = "UnschedulableAndUnresolvable"
    WAIT = "Wait"  # Permit only: hold the pod until allow()/reject() or the timeout
    SKIP = "Skip"  # the plugin has nothing to say for this pod (Bind: pass to the next binder)
    PENDING = "Pending"  # the outcome of an API call is unknown: keep the pod assumed and try again

    # Every plugin call looks its code up in a set of allowed ones and records its name: Enum's own __hash__ and
    # `value` are Python functions (a microsecond a call, two dozen calls a cycle). Members are singletons compared
    # by identity, so the identity hash agrees with equality; `text` is the value as a plain attribute.
    __hash__ = object.__hash__

    def __init__(self, text: str) -> None:
        self.text = text


@dataclass(frozen=True)
class Status:
    code: Code = Code.SUCCESS
    reason: str = ""
    plugin: str = ""

    @property
    def ok(self) -> bool:
        return self.code in (Code.SUCCESS, Code.SKIP)

    def by(self, plugin: str) -> Status:
        """The same status attributed to `plugin` (the runtime records who said it)."""
        if self.plugin == plugin:
            return self
        if type(self) is Status:  # the usual case, without dataclasses.replace's field walk
            return Status(self.code, self.reason, plugin)
        return dataclasses.replace(self, plugin=plugin)  # a subclass (BindStatus) keeps its own fields

    @classmethod
    def error(cls, reason: str, plugin: str = "") -> Status:
        return cls(Code.ERROR, reason, plugin)

    @classmethod
    def unschedulable(cls, reason: str, plugin: str = "") -> Status:
        return cls(Code.UNSCHEDULABLE, reason, plugin)

    @classmethod
    def wait(cls, reason: str = "", plugin: str = "") -> Status:
        return cls(Code.WAIT, reason, plugin)


SUCCESS = Status()
