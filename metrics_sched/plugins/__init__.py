"""Built-in plugins, one per module. BUILTIN maps each plugin's name to its class; in_tree_registry() is the
registry of them (and of the third-party plugins installed) that the commands build the scheduler from."""

from __future__ import annotations

from metrics_sched.framework import Plugin, Registry
from metrics_sched.plugins.coscheduling import Coscheduling
from metrics_sched.plugins.cost import Cost
from metrics_sched.plugins.custom_metric import CustomMetric
from metrics_sched.plugins.default_binder import DefaultBinder
from metrics_sched.plugins.default_preemption import DefaultPreemption
from metrics_sched.plugins.dynamic_resources import DynamicResources
from metrics_sched.plugins.gpu_temperature import GPUTemperature
from metrics_sched.plugins.gpu_thermal_forecast import GPUThermalForecast
from metrics_sched.plugins.hot_value import HotValue
from metrics_sched.plugins.image_locality import ImageLocality
from metrics_sched.plugins.in_flight_ledger import InFlightLedger
from metrics_sched.plugins.inter_pod_affinity import InterPodAffinity
from metrics_sched.plugins.load_risk_balancing import LoadRiskBalancing
from metrics_sched.plugins.node_affinity import NodeAffinity
from metrics_sched.plugins.node_label_filter import NodeLabelFilter
from metrics_sched.plugins.node_label_score import NodeLabelScore
from metrics_sched.plugins.node_load import NodeLoad
from metrics_sched.plugins.node_name import NodeName
from metrics_sched.plugins.node_ports import NodePorts
from metrics_sched.plugins.node_ready import NodeReady
from metrics_sched.plugins.node_resources_balanced_allocation import NodeResourcesBalancedAllocation
from metrics_sched.plugins.node_resources_fit import NodeResourcesFit
from metrics_sched.plugins.node_unschedulable import NodeUnschedulable
from metrics_sched.plugins.node_volume_limits import NodeVolumeLimits
from metrics_sched.plugins.pod_topology_spread import PodTopologySpread
from metrics_sched.plugins.priority_sort import PrioritySort
from metrics_sched.plugins.taint_toleration import TaintToleration
from metrics_sched.plugins.target_load_packing import TargetLoadPacking
from metrics_sched.plugins.unsupported_fields import UnsupportedFields
from metrics_sched.plugins.volume_binding import VolumeBinding
from metrics_sched.plugins.volume_restrictions import VolumeRestrictions
from metrics_sched.plugins.volume_zone import VolumeZone
from metrics_sched.plugins.zone_spread import ZoneSpread

# Opt-in, history-aware (docs/forecasting.md): in no default profile, nor in the core bench's all-plugins profile
# (issue 48: the core's figures stay those of the profiles without them).
HISTORY_AWARE = frozenset({GPUThermalForecast.name, LoadRiskBalancing.name, TargetLoadPacking.name, HotValue.name})

BUILTIN: dict[str, type[Plugin]] = {
    cls.name: cls
    for cls in (
        PrioritySort, NodeResourcesFit, NodeUnschedulable, NodeReady, NodeName, TaintToleration, NodeAffinity,
        NodeLabelFilter, NodeLabelScore, ZoneSpread, DefaultBinder, GPUTemperature, NodeLoad, Cost, CustomMetric,
        InFlightLedger, UnsupportedFields, NodePorts, NodeResourcesBalancedAllocation, ImageLocality,
        InterPodAffinity, PodTopologySpread, VolumeRestrictions, NodeVolumeLimits, VolumeBinding, VolumeZone,
        Coscheduling,
        DefaultPreemption,
        DynamicResources,
        GPUThermalForecast, LoadRiskBalancing, TargetLoadPacking, HotValue,
    )
}



def in_tree_registry(*, third_party: bool = True) -> Registry:
    """The built-ins, each checked as a third-party plugin is, plus the entry points' plugins unless `third_party`
    is False (tests: what an installed package adds must not change them)."""
    return Registry.of(BUILTIN.values(), third_party=third_party)


__all__ = ["BUILTIN", "HISTORY_AWARE", "in_tree_registry"]
