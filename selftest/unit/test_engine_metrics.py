"""The engine's /metrics: Prometheus text parsed from the lab vLLM's real body and SGLang's
documented one, and the Scraper against a real HTTP server on loopback."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from http.server import ThreadingHTTPServer
from pathlib import Path

import pytest

from infergate.inference.engine_metrics import Scraper, engine_figures, parse_prometheus_text
from selftest.local_http import JsonHandler, serving

DATA = Path(__file__).parents[1] / "data"
VLLM = (DATA / "lab" / "vllm-metrics.txt").read_text()
SGLANG = (DATA / "inference" / "sglang-metrics-docs.txt").read_text()


def sample_lines(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.strip() and not line.startswith("#")]


def test_every_line_of_the_lab_vllm_body_is_a_sample() -> None:
    samples = parse_prometheus_text(VLLM)
    assert len(samples) == len(sample_lines(VLLM)) > 100
    running = [s for s in samples if s.name == "vllm:num_requests_running"]
    assert [s.labels["model_name"] for s in running] == ["smollm2-135m"]


def test_the_lab_vllm_body_gives_every_figure_under_load() -> None:
    figures = engine_figures(parse_prometheus_text(VLLM))
    assert set(figures) == {"kv_cache_usage", "running", "waiting", "preemptions"}
    assert 0 < figures["kv_cache_usage"] <= 1  # a fraction, not a percentage
    assert figures["running"] >= 1  # recorded while the load ran


def test_sglang_names_give_its_figures() -> None:
    figures = engine_figures(parse_prometheus_text(SGLANG))
    assert figures == {"kv_cache_usage": 0.28, "running": 162.0, "waiting": 2826.0}


def test_counts_sum_over_engines_and_usage_is_their_mean() -> None:
    text = (
        'vllm:num_requests_running{engine="0",model_name="m"} 3.0\n'
        'vllm:num_requests_running{engine="1",model_name="m"} 5.0\n'
        'vllm:kv_cache_usage_perc{engine="0",model_name="m"} 0.2\n'
        'vllm:kv_cache_usage_perc{engine="1",model_name="m"} 0.6\n'
        'vllm:num_preemptions_total{engine="0",model_name="m"} 7.0\n'
    )
    figures = engine_figures(parse_prometheus_text(text))
    assert figures == {"running": 8.0, "kv_cache_usage": pytest.approx(0.4), "preemptions": 7.0}


def test_the_older_vllm_cache_name_is_read() -> None:
    text = 'vllm:gpu_cache_usage_perc{model_name="m"} 0.5\n'
    assert engine_figures(parse_prometheus_text(text)) == {"kv_cache_usage": 0.5}


def test_label_values_with_quotes_braces_and_commas_and_timestamps() -> None:
    text = 'x{a="say \\"hi\\", {b}",c="2"} +Inf 1700000000000\ny NaN\nz{} -1.5e3\n'
    x, y, z = parse_prometheus_text(text)
    assert x.labels == {"a": 'say \\"hi\\", {b}', "c": "2"}
    assert x.value == float("inf")
    assert y.value != y.value  # NaN
    assert (z.name, z.value) == ("z", -1500.0)


def test_a_line_that_is_no_sample_is_named() -> None:
    with pytest.raises(ValueError, match=r"line 2 is not a Prometheus sample: '<html>'"):
        parse_prometheus_text("a 1\n<html>\n")
    with pytest.raises(ValueError, match="line 1: 'many' is not a number"):
        parse_prometheus_text("a many\n")


# --- the Scraper against a real server ----------------------------------------------------


class MetricsServer(ThreadingHTTPServer):
    body: str
    status: int
    seen: list[str | None]  # each request's Authorization header


class Metrics(JsonHandler):
    server: MetricsServer

    def do_GET(self) -> None:
        self.server.seen.append(self.headers.get("Authorization"))
        data = self.server.body.encode()
        self.send_response(self.server.status if self.path == "/metrics" else 404)
        self.send_header("Content-Type", "text/plain; version=0.0.4")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


@pytest.fixture
def server() -> Iterator[MetricsServer]:
    httpd = MetricsServer(("127.0.0.1", 0), Metrics)
    httpd.body, httpd.status, httpd.seen = VLLM, 200, []
    with serving(httpd):
        yield httpd


def base_of(httpd: MetricsServer) -> str:
    return f"http://127.0.0.1:{httpd.server_address[1]}"


def test_nothing_is_recorded_before_the_first_level(server: MetricsServer) -> None:
    scraper = Scraper(base_of(server), "sk-secret")
    scraper.scrape_once()
    assert scraper.samples == ()
    scraper.level("c=1")
    scraper.scrape_once()
    scraper.level("c=4")
    scraper.scrape_once()
    first, second = scraper.samples
    assert (first.level, second.level) == ("c=1", "c=4")
    assert 0 <= first.t_s <= second.t_s
    assert first.values == engine_figures(parse_prometheus_text(VLLM))
    assert server.seen == ["Bearer sk-secret"] * 3
    assert scraper.problem == ""


def test_a_server_without_metrics_is_a_problem_not_an_exception(server: MetricsServer) -> None:
    server.status, server.body = 404, "Not Found"
    scraper = Scraper(base_of(server), "sk-secret")
    scraper.level("c=1")
    scraper.scrape_once()
    assert scraper.samples == ()
    assert scraper.problem == f"GET {base_of(server)}/metrics: HTTP 404: Not Found"
    server.status, server.body = 200, "process_cpu_seconds_total 1.5\n"
    scraper.scrape_once()
    assert "answered none of vLLM's or SGLang's load figures" in scraper.problem
    server.body = "<html>\n"
    scraper.scrape_once()
    assert "line 1 is not a Prometheus sample" in scraper.problem
    assert "sk-secret" not in scraper.problem


def test_a_refused_port_is_a_problem_not_an_exception() -> None:
    with socket.socket() as s:  # a port that was free a moment ago: nothing listens there
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    scraper = Scraper(f"http://127.0.0.1:{port}")
    scraper.level("c=1")
    scraper.scrape_once()
    assert scraper.samples == ()
    assert f"no answer from http://127.0.0.1:{port}" in scraper.problem


def test_the_thread_scrapes_until_the_with_ends(server: MetricsServer) -> None:
    with Scraper(base_of(server), interval_s=0.01) as scraper:
        scraper.level("c=16")
        waited = time.monotonic()
        while len(scraper.samples) < 3 and time.monotonic() - waited < 60:
            time.sleep(0.01)
    names = {t.name for t in threading.enumerate()}
    assert "infergate-scrape" not in names  # joined on leaving
    count = len(scraper.samples)
    assert count >= 3
    time.sleep(0.05)
    assert len(scraper.samples) == count
    assert {s.level for s in scraper.samples} == {"c=16"}
