"""What the scheduler knows of a pod and of resource amounts: PodInfo, request accounting, quantities."""
