"""Where BatchScope and Reads used to live: kept so a plugin written against it still imports them. New code imports
them (and the `Batchable` protocol a plugin must now list among its bases) from the SDK, `metrics_sched.framework`.
"""

from metrics_sched.framework.batchable import MAX_DIRTY, BatchScope, Reads, has_only_local_volumes

__all__ = ["MAX_DIRTY", "BatchScope", "Reads", "has_only_local_volumes"]
