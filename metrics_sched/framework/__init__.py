"""The plugin framework: extension-point interfaces, the registry and the per-profile runtime."""
