"""Dynamic Resource Allocation (issue 43): the DynamicResources plugin and its allocator and CEL parts."""
