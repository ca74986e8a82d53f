import pytest

from perf import procstat, report, tools
from perf.tools import Stats, Workload

JAVA_PRODUCER = """\
126436 records sent, 25282.1 records/sec (24.69 MB/sec), 729.9 ms avg latency, 1344.0 ms max latency.
100000 records sent, 28860.028860 records/sec (28.18 MB/sec), 838.42 ms avg latency, 1515.00 ms max latency, 760 ms 50th, 1402 ms 95th, 1483 ms 99th, 1514 ms 99.9th.
"""
CONSUMER_PERF = """\
start.time, end.time, data.consumed.in.MB, MB.sec, data.consumed.in.nMsg, nMsg.sec, rebalance.time.ms, fetch.time.ms, fetch.MB.sec, fetch.nMsg.sec
2026-11-29 11:22:59:570, 2026-11-29 11:23:00:526, 97.6563, 102.1509, 100000, 104602.5105, 349, 607, 160.8834, 164744.6458
"""


def test_parse_producer_summary_takes_final_line() -> None:
    s = tools.parse_producer_summary(JAVA_PRODUCER)
    assert s.records == 100000 and s.records_per_sec == pytest.approx(28860.03, rel=1e-6)
    assert (s.mb_per_sec, s.avg_ms, s.max_ms) == (28.18, 838.42, 1515.0)
    assert (s.p50_ms, s.p95_ms, s.p99_ms, s.p999_ms) == (760, 1402, 1483, 1514)


def test_parse_producer_nan_latency() -> None:
    line = "0 records sent, 0.000000 records/sec (0.00 MB/sec), nan ms avg latency, nan ms max latency, nan ms 50th, nan ms 95th, nan ms 99th, nan ms 99.9th."
    s = tools.parse_producer_summary(line)
    assert s.records == 0 and s.p99_ms is None


def test_parse_consumer_performance_uses_fetch_columns() -> None:
    s = tools.parse_consumer_performance(CONSUMER_PERF)
    assert s.records == 100000
    assert s.records_per_sec == pytest.approx(164744.6458)
    assert s.mb_per_sec == pytest.approx(160.8834)
    assert s.rebalance_ms == 349 and s.elapsed_ms == 607


def test_parse_rdk_consume() -> None:
    s = tools.parse_rdk_consume("100000 records consumed, 1042964.516500 records/sec (1018.52 MB/sec), 96 ms elapsed.")
    assert (s.records, s.mb_per_sec, s.elapsed_ms) == (100000, 1018.52, 96)


@pytest.mark.parametrize("fn", [tools.parse_producer_summary, tools.parse_consumer_performance, tools.parse_rdk_consume])
def test_parsers_reject_garbage(fn) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(tools.ParseError):
        fn("ERROR something went wrong\n")


def test_consumer_performance_short_row() -> None:
    with pytest.raises(tools.ParseError):
        tools.parse_consumer_performance("start.time, end.time, x\n1, 2\n")


def test_consumer_performance_warning_before_row() -> None:
    header, row = CONSUMER_PERF.splitlines()
    text = f"{header}\nWARNING: Exiting before consuming the expected number of records: timeout\n{row}\n"
    assert tools.parse_consumer_performance(text).records == 100000


def test_workload_keys_and_commands(tmp_path) -> None:  # type: ignore[no-untyped-def]
    w = Workload("produce", "java", 6, "all")
    assert w.key == "produce-java-p6-acksall" and w.gap_key == "produce-java"
    cmd = tools.produce_cmd(w, "127.0.0.1:1", "t", 10, 1024, tmp_path, tmp_path / "py", tmp_path / "rdk.py")
    assert cmd[-2:] == ["acks=all", "enable.idempotence=false"] and "--throughput" in cmd
    idem = Workload("produce", "java", 1, "all", idempotent_default=True)
    assert idem.gap_key == "produce-java-idempotent"
    assert "enable.idempotence=false" not in tools.produce_cmd(idem, "b", "t", 1, 1, tmp_path, tmp_path, tmp_path)
    rdk = tools.produce_cmd(Workload("produce", "rdkafka", 1, "1"), "b", "t", 5, 9, tmp_path, tmp_path / "py", tmp_path / "r")
    assert rdk[-2:] == ["--acks", "1"]
    native = Workload("produce", "rdkafka", 6, "all", native=True)
    assert native.key == "produce-rdkafka-p6-acksall-c"
    assert native.label == "produce · librdkafka producer in C · 6p · acks=all"


def cell(broker: str, rps: float | None, p99: float | None = None, key: str = "produce-java-p1-acks1") -> report.Cell:
    stats = Stats(records=10, records_per_sec=rps, mb_per_sec=1.0, p99_ms=p99) if rps is not None else None
    return report.Cell(broker, key, "produce · x", "ok" if stats else "gap", stats=stats)


def test_summary_ratios() -> None:
    table = report.summary_table([cell("kafka", 100.0, 10.0), cell("tansu", 400.0, 40.0), cell("seedlog", 200.0, 5.0)])
    row = table.splitlines()[2]
    assert "| 100 | 400 | 200 | 2.00× | 0.50× | 10 | 40 | 5 | 0.50× | 0.12× |" in row


def test_summary_gap_and_missing() -> None:
    table = report.summary_table([cell("kafka", 100.0, 10.0), cell("seedlog", None)])
    row = table.splitlines()[2]
    assert "| 100 | not run | gap | – | – |" in row


def test_ratio_and_fmt() -> None:
    assert report.ratio(None, 1.0) == "–" and report.ratio(1.0, 0) == "–" and report.ratio(3, 2) == "1.50×"
    assert report.fmt_num(1234567.8) == "1,234,568" and report.fmt_num(None) == "–"


def test_replace_region_variants() -> None:
    new = report.replace_region("", "X")
    assert new.startswith("# Benchmarks\n") and f"{report.HEADING}\n\n{report.BEGIN}\nX\n{report.END}" in new
    other = "# Benchmarks\n\n## Simulation speed\n\nfast\n"
    new = report.replace_region(other, "X")
    assert "## Simulation speed\n\nfast\n" in new and new.rstrip().endswith(report.END)
    again = report.replace_region(new, "Y")
    assert "X" not in again.split(report.BEGIN)[1] and "fast" in again and again.count(report.BEGIN) == 1
    heading_only = f"# B\n\n{report.HEADING}\n\nold prose\n"
    new = report.replace_region(heading_only, "Z")
    assert new.index(report.BEGIN) > new.index(report.HEADING) and "old prose" in new


def test_procstat_parsers() -> None:
    stat = "4242 (java (weird) name) S 1 4242 4242 0 -1 4194560 100 0 0 0 250 50 0 0 20 0 40 0 999 0 0"
    assert procstat.parse_stat_cpu(stat, 100) == pytest.approx(3.0)
    status = "Name:\tjava\nVmHWM:\t  524288 kB\nVmRSS:\t  1024 kB\n"
    assert procstat.parse_status_kib(status, "VmHWM") == 524288
    assert procstat.parse_status_kib(status, "VmSwap") is None


def test_details_omit_not_run_and_list_reason_once() -> None:
    cells = [cell("kafka", 100.0, 10.0),
             report.Cell("seedlog", "produce-java-p1-acks1", "produce · x", "not run", note="binary missing"),
             report.Cell("seedlog", "produce-java-p1-acksall", "produce · y", "not run", note="binary missing")]
    assert "binary missing" not in report.details_table(cells)
    assert report.not_run_lines(cells) == ["- **seedlog not run:** binary missing", ""]
    meta = report.Meta(date="d", machine="m", load_before="0", records=1, record_size=1, command="c")
    assert report.render_section(meta, cells).count("binary missing") == 1
