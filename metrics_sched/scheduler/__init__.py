"""The scheduling loop and its collaborators (handle, event routing, binder, reporting)."""

from metrics_sched.scheduler.binding import BindOutcome
from metrics_sched.scheduler.scheduler import Scheduler

__all__ = ["BindOutcome", "Scheduler"]
