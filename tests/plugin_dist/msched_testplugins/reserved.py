"""Reserved: nodes a Reservation (a CRD) gives to a team take no other team's pods (label example.com/team) and are
its preferred ones."""

import numpy as np

from metrics_sched import framework as fw


class Reservations(fw.ClusterIndex):
    kinds = (fw.ApiKind("example.com/v1", "reservations", optional=True),)  # watched where the CRD is installed
    team_of: dict[str, str] = {}  # node -> team; replaced whole by the watch, so read without a lock

    def on_event(self, kind: fw.ApiKind, event: fw.EventType, obj: fw.KubeObject) -> fw.IndexChange:
        spec, teams = obj.get("spec") or {}, dict(self.team_of)
        if event == "DELETED":
            teams.pop(spec.get("nodeName", ""), None)
        else:
            teams[spec.get("nodeName", "")] = spec.get("team", "")
        self.team_of = teams
        return fw.IndexChange(fw.ClusterEvent.NODE_LABELS)  # as a relabelled node: the pods it parked retry


class Reserved(fw.FilterPlugin, fw.ScorePlugin):
    name = "Reserved"
    indexes = (Reservations,)
    events = frozenset({fw.ClusterEvent.NODE_ADDED, fw.ClusterEvent.NODE_LABELS})

    def __init__(self, args: fw.NoArgs, handle: fw.Handle) -> None:
        super().__init__(args, handle)
        self.reservations = handle.index(Reservations)  # the scheduler's one instance, typed

    def _rows(self, pod: fw.PodInfo, table: fw.NodeTable) -> tuple[fw.BoolArray, fw.BoolArray]:
        mine, others = np.zeros(table.capacity, dtype=bool), np.zeros(table.capacity, dtype=bool)
        for node, team in self.reservations.team_of.items():  # rows for the pod's team, rows for another
            if (row := table.index.get(node)) is not None:
                (mine if team == pod.labels.get("example.com/team") else others)[row] = True
        return mine, others

    def filter(self, cycle: fw.CycleState, pod: fw.PodInfo, table: fw.NodeTable) -> fw.Filtered:
        return fw.Filtered.single(~self._rows(pod, table)[1], "node(s) reserved for another team")

    def score(self, cycle: fw.CycleState, pod: fw.PodInfo, table: fw.NodeTable, rows: fw.IntArray) -> fw.FloatArray:
        return self._rows(pod, table)[0][rows] * 100.0
