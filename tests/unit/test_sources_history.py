"""`metrics-sched sources --history NODE`: a node's recent series of the Prometheus source's metrics, by range queries
through prometheus-api-client (adapters/prometheus/history.py), plotted in the terminal or as an SVG chart."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any
from xml.etree import ElementTree

import pytest
import yaml

from adapters.prometheus import parse_config
from adapters.prometheus.history import node_history
from metrics_sched.app.cli import main
from metrics_sched.app.cli.history_cmd import sparkline
from tests.unit.test_source_prometheus import FakePrometheus, _serve

pytestmark = pytest.mark.unit

T0 = 1_800_000_000.0


@pytest.fixture
def prom() -> Iterator[FakePrometheus]:
    yield from _serve(FakePrometheus())


def matrix(series: list[tuple[dict[str, str], list[float]]]) -> dict[str, Any]:
    return {"status": "success", "data": {"resultType": "matrix", "result": [
        {"metric": labels, "values": [[T0 + 60 * i, repr(v)] for i, v in enumerate(values)]}
        for labels, values in series]}}


METRICS = [{"name": "gpu_temperature", "preset": "dcgm_gpu_temp"},
           {"name": "gpu_temperature_forecast", "preset": "dcgm_gpu_temp_forecast"}]


def serve_temperatures(prom: FakePrometheus) -> None:
    # The forecast's query holds the raw one: its reply is listed first (the first matching key answers).
    prom.replies["predict_linear"] = (200, matrix([({"hostname": "n1"}, [80, 95, 110]),
                                                   ({"hostname": "n2"}, [60, 60, 60])]))
    prom.replies["DCGM_FI_DEV_GPU_TEMP"] = (200, matrix([({"hostname": "n1"}, [70, 72, 74]),
                                                         ({"hostname": "n2"}, [50, 50, 50])]))


def test_a_nodes_history_is_its_series_of_each_metric_with_the_window_it_came_from(prom: FakePrometheus) -> None:
    serve_temperatures(prom)
    config = parse_config({"url": prom.url, "metrics": METRICS}, base_dir=Path("."))
    temperature, forecast = node_history(config, "n1", T0, T0 + 120, 60)
    assert temperature.points == ((T0, 70.0), (T0 + 60, 72.0), (T0 + 120, 74.0)) and temperature.window is None
    assert [v for _, v in forecast.points] == [80.0, 95.0, 110.0]
    assert forecast.window == "predict_linear over 10m, 30m ahead"
    assert any("predict_linear((DCGM_FI_DEV_GPU_TEMP" in s.query for s in prom.seen)


def test_the_command_plots_sparklines_from_the_schedulers_config(prom: FakePrometheus, tmp_path: Path,
                                                                 capsys: pytest.CaptureFixture[str]) -> None:
    serve_temperatures(prom)
    config = tmp_path / "config.yaml"
    config.write_text(yaml.safe_dump({"sources": [{"name": "prom", "type": "prometheus", "url": prom.url,
                                                   "metrics": METRICS}]}))
    assert main(["sources", "--history", "n1", "--config", str(config), "--since", "30m"]) == 0
    out = capsys.readouterr().out
    assert "n1, the last 30m:" in out
    assert "gpu_temperature           ▁▅█  min 70  max 74  last 74" in out
    assert "last 110  [predict_linear over 10m, 30m ahead]" in out
    chart = tmp_path / "n1.svg"
    assert main(["sources", "--history", "n1", "--config", str(config), "--svg", str(chart)]) == 0
    root = ElementTree.fromstring(chart.read_text())
    lines = root.findall("{http://www.w3.org/2000/svg}polyline")
    assert len(lines) == 2 and len(lines[0].attrib["points"].split()) == 3
    assert "gpu_temperature_forecast (predict_linear over 10m, 30m ahead)" in chart.read_text()


def test_sparklines_resample_to_the_width() -> None:
    assert sparkline([0, 1, 2, 3, 4, 5, 6, 7]) == "▁▂▃▄▅▆▇█"
    assert len(sparkline(list(range(1000)), width=50)) <= 50
    assert sparkline([]) == "" and sparkline([3, 3]) == "▁▁"
