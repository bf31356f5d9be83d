"""The Kubernetes DRA CEL environment for device selectors, on cel-expr-python (Google's C++ CEL runtime):

    dev = CelDevice.from_api(driver, device_json)   # once per device and slice version
    sel = SelectorCache().compile(expression)       # CelCompileError(upstream text)
    sel.matches(dev) -> bool                        # CelRuntimeError(upstream text)

Design and the differences from upstream (cel-go): docs/design/dra-cel.md.
"""

from metrics_sched.plugins.dynamic_resources.cel.cache import SelectorCache
from metrics_sched.plugins.dynamic_resources.cel.device import CelDevice
from metrics_sched.plugins.dynamic_resources.cel.errors import CelCompileError, CelError, CelRuntimeError
from metrics_sched.plugins.dynamic_resources.cel.selector import MAX_EXPRESSION_LENGTH, CompiledSelector

__all__ = [
    "MAX_EXPRESSION_LENGTH",
    "CelCompileError",
    "CelDevice",
    "CelError",
    "CelRuntimeError",
    "CompiledSelector",
    "SelectorCache",
]
