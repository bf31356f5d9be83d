"""pprof-style profiling of a running scheduler: /debug/pprof/profile during a burst, /debug/threads, the gate."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor

import httpx

from devcluster import DevCluster
from devcluster.kubeapi import KubeAPI
from tests.e2e import kube
from tests.e2e.pools import in_pool, node_pool
from tests.e2e.scheduler_proc import schedulers

MAX_PODS = 1500  # the burst's ceiling; it stops as soon as the profile has come back


def bound_count(api: KubeAPI, namespace: str) -> int:
    return sum(1 for p in kube.list_pods(api, namespace) if p["spec"].get("nodeName"))


def test_profile_during_a_burst_shows_the_scheduling_loop(cluster: DevCluster, api: KubeAPI,
                                                          namespace: str) -> None:
    with node_pool(cluster, 20, cpu="64", memory="64Gi", pods=110) as (pool, _), \
            schedulers(cluster, extra={"enableProfiling": True}) as (name, (proc,)):
        profiled = threading.Event()
        created: list[str] = []

        def burst() -> None:
            # Pods keep coming until the profile is back, so the scheduler is busy for all of its 2 s.
            def create(i: int) -> None:
                if not profiled.is_set():
                    api.post(f"/api/v1/namespaces/{namespace}/pods",
                             kube.pod_manifest(f"b{i:04d}", scheduler=name, cpu="10m", memory="10Mi", **in_pool(pool)))
                    created.append(f"b{i:04d}")

            with ThreadPoolExecutor(8) as workers:
                list(workers.map(create, range(MAX_PODS)))

        creator = threading.Thread(target=burst, name="burst")
        creator.start()
        answers: list[httpx.Response] = []

        def in_cycle(answer: httpx.Response) -> list[str]:
            loop = [line for line in answer.text.splitlines() if line.startswith("scheduling-loop;")]
            return [line for line in loop if "Scheduler.schedule_one" in line
                    and "Framework.run_scheduling_cycle" in line]

        def profiled_in_a_cycle() -> bool:
            # The sampler reads the loop's stack when it gets the GIL, and the loop keeps the GIL inside a cycle: a
            # 2 s profile may catch the loop only between pods (waiting in pop) while the binds keep up with the
            # burst. Profiles are taken until one shows a cycle (what is asserted below), the burst going on.
            answer = httpx.get(f"{proc.url}/debug/pprof/profile", params={"seconds": 2}, timeout=30)
            answers.append(answer)
            return answer.status_code != 200 or bool(in_cycle(answer))

        try:
            kube.poll(lambda: bound_count(api, namespace) >= 5, 60, "the burst's first pods bound")
            kube.poll(profiled_in_a_cycle, 60, "a profile during the burst with the scheduling cycle in it")
        finally:
            profiled.set()
            creator.join(120)
        answer = answers[-1]
        assert answer.status_code == 200, answer.text
        assert answer.headers["content-type"].startswith("text/plain")
        lines = answer.text.splitlines()
        assert lines and all(line.rsplit(" ", 1)[1].isdigit() for line in lines)
        loop = [line for line in lines if line.startswith("scheduling-loop;")]
        assert any("Scheduler.schedule_one" in line and "Framework.run_scheduling_cycle" in line for line in loop), \
            "\n".join(loop[:20])
        # Every thread is sampled, not only the one serving the request.
        threads = {line.split(";", 1)[0] for line in lines}
        assert "http" in threads, sorted(threads)

        speedscope = httpx.get(f"{proc.url}/debug/pprof/profile", params={"seconds": 1, "format": "speedscope"},
                               timeout=30)
        assert speedscope.status_code == 200
        assert "scheduling-loop" in [p["name"] for p in speedscope.json()["profiles"]]

        dump = httpx.get(f"{proc.url}/debug/threads", timeout=10)
        assert dump.status_code == 200
        assert "Thread 'scheduling-loop'" in dump.text and "in schedule_one" in dump.text
        assert "Thread 'MainThread'" in dump.text
        # The burst's pods all bind: the profile did not get in the loop's way.
        kube.poll(lambda: bound_count(api, namespace) == len(created), 120, f"{len(created)} pods bound")


def test_debug_paths_are_404_unless_enabled(cluster: DevCluster) -> None:
    with schedulers(cluster) as (_, (proc,)):
        for path in ("/debug/pprof/profile?seconds=1", "/debug/pprof/heap?start=1", "/debug/threads"):
            assert httpx.get(f"{proc.url}{path}", timeout=10).status_code == 404, path
        assert httpx.get(f"{proc.url}/metrics", timeout=10).status_code == 200
