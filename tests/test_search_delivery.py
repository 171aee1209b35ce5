"""A capacity search's probe meets a rate only when it delivered it, and the
answer states the tail at the rate it sustains (issue 43, item 7)."""

from __future__ import annotations

from perflab.search import Answer, Probe, SearchSettings, meets

SEARCH = SearchSettings.model_validate({"over": "workload.rate", "goal": "latency_p99_ms <= 5",
                                        "from": 1000, "to": 64000})


def test_a_probe_that_fell_behind_its_rate_has_not_met_it() -> None:
    on_time = {"tps": 990.0, "latency_p99_ms": 2.0, "failed": 0.0}
    behind = {"tps": 900.0, "latency_p99_ms": 2.0, "failed": 0.0}  # a low p99 of the requests it did send
    assert meets(SEARCH, on_time, "done", 1000.0) == (True, "")
    met, why = meets(SEARCH, behind, "done", 1000.0)
    assert not met and "delivered 900 of 1000" in why
    # an HTTP run's rate is its requests per second
    assert not meets(SEARCH, {"req_per_s": 900.0, "latency_p99_ms": 2.0}, "done", 1000.0)[0]
    # a search over something that is not a rate asks no delivery
    clients = SearchSettings.model_validate({"over": "workload.clients", "goal": "latency_p99_ms <= 5",
                                             "from": 1, "to": 64})
    assert meets(clients, {"tps": 1.0, "latency_p99_ms": 2.0}, "done", 8.0) == (True, "")


def test_the_answer_states_the_tail_at_the_rate_it_sustains() -> None:
    probes = [Probe(1000.0, 1, True, {"tps": 1000.0, "latency_p99_ms": 2.0, "latency_p99_9_ms": 7.5,
                                      "latency_max_ms": 31.0}, ""),
              Probe(1000.0, 3, True, {"tps": 999.0, "latency_p99_ms": 2.5, "latency_p99_9_ms": 9.25,
                                      "latency_max_ms": 28.0}, ""),
              Probe(2000.0, 2, False, {"tps": 1700.0}, "delivered 1700 of 2000/s (85%, under 95%)")]
    text = Answer(SEARCH, 1000.0, 2000.0, probes, " tx/s", True, False).text()
    assert "sustains 1000 tx/s" in text
    assert "p99.9 9.25 ms" in text and "max 31 ms" in text  # the worst of the runs there
    assert "delivers 95% of it" in text


def test_a_short_poisson_probe_is_not_missed_by_the_draw_of_its_arrivals() -> None:
    # 1 s at 500/s: the schedule's own count has an SD of 22 arrivals
    short = {"tps": 460.0, "latency_p99_ms": 2.0, "measured_s": 1.0}
    assert meets(SEARCH, short, "done", 500.0)[0]
    assert not meets(SEARCH, {**short, "measured_s": 600.0}, "done", 500.0)[0]
