"""The VolumeRestrictions plugin: its class in plugin.py."""

from metrics_sched.plugins.volume_restrictions.plugin import VolumeRestrictions

__all__ = ["VolumeRestrictions"]
