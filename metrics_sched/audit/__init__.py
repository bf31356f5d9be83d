"""Decision audit: one DecisionRecord per scheduling attempt, fanned out to several sinks."""

from metrics_sched.audit.record import Candidate, DecisionRecord, StoredDecision, TermDetail, build_record
from metrics_sched.audit.ring import DecisionRing

__all__ = ["Candidate", "DecisionRecord", "DecisionRing", "StoredDecision", "TermDetail", "build_record"]
