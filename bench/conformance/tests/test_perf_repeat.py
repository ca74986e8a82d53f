"""bench/perf/run.py --repeat: round order (ABAB…), median (min–max) cells, ratios of medians.

Plain unittest, so it runs under the suite's pytest (conftest.py) and on its own:
  python3 -m unittest discover -s bench/conformance/tests -p 'test_perf_repeat.py'
"""
import sys
import unittest
from pathlib import Path
from unittest import mock

BENCH = Path(__file__).resolve().parents[2]
if str(BENCH) not in sys.path:
    sys.path.insert(0, str(BENCH))

from perf import report, run  # noqa: E402
from perf.tools import Stats  # noqa: E402

KEY = "produce-rdkafka-p1-acks1"


def cell(broker: str, rps: float | None, p99: float | None = None, round_: int = 1, status: str = "ok",
         cpu: float | None = 1.0, note: str = "", key: str = KEY) -> report.Cell:
    stats = Stats(records=1000, records_per_sec=rps, mb_per_sec=rps / 1000, p99_ms=p99) if rps is not None else None
    return report.Cell(broker, key, "produce · x", status, stats=stats, broker_cpu_s=cpu, note=note, round=round_)


def rounds(broker: str, rates: list[float], p99s: list[float] | None = None) -> list[report.Cell]:
    p99s = p99s or [None] * len(rates)
    return [cell(broker, r, p, round_=i + 1) for i, (r, p) in enumerate(zip(rates, p99s))]


class ScheduleTest(unittest.TestCase):
    def test_rounds_alternate_the_brokers(self) -> None:
        self.assertEqual(run.schedule(["kafka", "tansu", "seedlog"], 2),
                         [(1, "kafka"), (1, "tansu"), (1, "seedlog"), (2, "kafka"), (2, "tansu"), (2, "seedlog")])

    def test_one_round_is_the_broker_list(self) -> None:
        self.assertEqual(run.schedule(["kafka", "seedlog"], 1), [(1, "kafka"), (1, "seedlog")])

    def test_run_all_runs_groups_round_by_round_and_tags_cells(self) -> None:
        calls = []

        def fake_group(broker, client, partitions, s, round_):  # type: ignore[no-untyped-def]
            calls.append((round_, broker, client, partitions))
            return [report.Cell(broker, "k", "l", "ok")]

        s = mock.Mock(brokers=["kafka", "seedlog"], clients=["rdkafka"], partitions=[1, 6], acks=["1"], repeat=2)
        with mock.patch.object(run, "run_group", fake_group), \
                mock.patch.object(run.control, "available", return_value=None):
            cells = run.run_all(s)
        self.assertEqual(calls, [(1, "kafka", "rdkafka", 1), (1, "kafka", "rdkafka", 6),
                                 (1, "seedlog", "rdkafka", 1), (1, "seedlog", "rdkafka", 6),
                                 (2, "kafka", "rdkafka", 1), (2, "kafka", "rdkafka", 6),
                                 (2, "seedlog", "rdkafka", 1), (2, "seedlog", "rdkafka", 6)])
        self.assertEqual([c.round for c in cells], [1, 1, 1, 1, 2, 2, 2, 2])

    def test_round_directories_only_with_repeat(self) -> None:
        one = mock.Mock(run_dir=Path("/r"), repeat=1)
        self.assertEqual(run.group_dir(one, "kafka", "java", 6, 1), Path("/r/kafka-java-p6"))
        three = mock.Mock(run_dir=Path("/r"), repeat=3)
        self.assertEqual(run.group_dir(three, "kafka", "java", 6, 2), Path("/r/round2/kafka-java-p6"))

    def test_repeat_option(self) -> None:
        self.assertEqual(run.parse_args([]).repeat, 1)
        self.assertEqual(run.parse_args(["--repeat", "5"]).repeat, 5)
        with mock.patch("sys.stderr"), self.assertRaises(SystemExit):
            run.parse_args(["--repeat", "0"])


class AggregateTest(unittest.TestCase):
    def test_median_with_min_max(self) -> None:
        [c] = report.aggregate(rounds("seedlog", [550112.0, 351004.0, 545180.0]))
        self.assertEqual(report.fmt_metric(c, "records_per_sec"), "545,180 (351,004–550,112)")
        self.assertEqual(report.fmt_metric(c, "mb_per_sec", 1), "545.2 (351.0–550.1)")

    def test_even_count_median_is_the_middle_mean(self) -> None:
        [c] = report.aggregate(rounds("kafka", [100.0, 200.0]))
        self.assertEqual(report.fmt_metric(c, "records_per_sec"), "150 (100–200)")
        self.assertEqual(c.stats.records, 1000)

    def test_cell_metrics_get_median_and_spread(self) -> None:
        runs = [cell("kafka", 1.0, cpu=cpu, round_=i) for i, cpu in enumerate([9.0, 3.0, 4.5], 1)]
        [c] = report.aggregate(runs)
        self.assertEqual(report.fmt_metric(c, "broker_cpu_s", 1), "4.5 (3.0–9.0)")
        self.assertEqual(report.fmt_metric(c, "broker_peak_rss_mib"), "–")

    def test_single_round_is_unchanged(self) -> None:
        cells = [cell("kafka", 100.0, 10.0), cell("seedlog", 200.0, 5.0)]
        self.assertEqual(report.aggregate(cells), cells)
        self.assertEqual(report.fmt_metric(cells[0], "records_per_sec"), "100")

    def test_order_is_first_seen(self) -> None:
        other = "produce-rdkafka-p6-acks1"
        cells = [cell("kafka", 1.0), cell("kafka", 1.0, key=other), cell("kafka", 3.0, round_=2),
                 cell("kafka", 3.0, round_=2, key=other)]
        self.assertEqual([(c.workload, c.stats.records_per_sec) for c in report.aggregate(cells)],
                         [(KEY, 2.0), (other, 2.0)])

    def test_failed_round_is_left_out_of_the_median_and_named(self) -> None:
        runs = rounds("seedlog", [100.0, 300.0]) + [cell("seedlog", None, round_=3, status="failed", note="rc=1")]
        [c] = report.aggregate(runs)
        self.assertEqual(c.status, "ok")
        self.assertEqual(report.fmt_metric(c, "records_per_sec"), "200 (100–300)")
        self.assertEqual(c.note, "median of 2 of 3 rounds; round 3: failed: rc=1")

    def test_all_rounds_gap_stay_one_gap(self) -> None:
        runs = [cell("tansu", None, round_=r, status="gap", note="cannot decode") for r in (1, 2, 3)]
        [c] = report.aggregate(runs)
        self.assertEqual((c.status, c.note, c.spread), ("gap", "cannot decode", {}))

    def test_all_rounds_failed_stay_failed_with_each_reason(self) -> None:
        runs = [cell("seedlog", None, round_=r, status="failed", note=f"rc={r}") for r in (1, 2)]
        [c] = report.aggregate(runs)
        self.assertEqual((c.status, c.note), ("failed", "round 1: rc=1; round 2: rc=2"))
        self.assertIn("| FAILED |", report.summary_table([c]))

    def test_differing_ok_notes_are_listed_per_round(self) -> None:
        runs = [cell("kafka", 1.0, round_=1, note="join 5 ms"), cell("kafka", 1.0, round_=2, note="join 7 ms")]
        [c] = report.aggregate(runs)
        self.assertEqual(c.note, "round 1: join 5 ms; round 2: join 7 ms")


class TableTest(unittest.TestCase):
    def test_summary_ratios_are_ratios_of_medians(self) -> None:
        cells = (rounds("kafka", [100.0, 300.0, 200.0], [10.0, 30.0, 20.0])
                 + rounds("seedlog", [50.0, 400.0, 500.0], [5.0, 1.0, 100.0]))
        row = report.summary_table(report.aggregate(cells)).splitlines()[2]
        # medians 200 and 400 (means would give 1.58×); p99 medians 20 and 5
        self.assertIn("| 200 (100–300) | not run | 400 (50–500) | 2.00× | – "
                      "| 20 (10–30) | not run | 5 (1–100) | 0.25× | – |", row)

    def test_details_show_spread_but_not_for_the_record_count(self) -> None:
        row = report.details_table(report.aggregate(rounds("seedlog", [300.0, 100.0, 200.0]))).splitlines()[2]
        self.assertIn("| 1,000 | 200 (100–300) | 0.2 (0.1–0.3) |", row)
        self.assertIn("| 1.0 (1.0–1.0) | – |", row)

    def test_single_round_tables_have_no_spread(self) -> None:
        cells = [cell("kafka", 100.0, 10.0), cell("tansu", 400.0, 40.0), cell("seedlog", 200.0, 5.0)]
        row = report.summary_table(report.aggregate(cells)).splitlines()[2]
        self.assertIn("| 100 | 400 | 200 | 2.00× | 0.50× | 10 | 40 | 5 | 0.50× | 0.12× |", row)

    def test_section_names_commit_rounds_and_date(self) -> None:
        meta = report.Meta(date="2026-12-02 10:00 UTC", machine="m", load_before="0", records=1, record_size=1,
                           command="python3 bench/perf/run.py --repeat 3", commit="abc1234+dirty", repeat=3)
        first = report.render_section(meta, []).splitlines()[0]
        self.assertEqual(first, "_Written by `python3 bench/perf/run.py --repeat 3` on 2026-12-02 10:00 UTC at "
                                "commit `abc1234+dirty`, 3 rounds per broker (median, min–max). Do not edit by "
                                "hand between the markers._")
        self.assertIn("Each cell is the median of 3 rounds", report.render_section(meta, []))

    def test_section_without_commit_or_repeat(self) -> None:
        meta = report.Meta(date="d", machine="m", load_before="0", records=1, record_size=1, command="c")
        section = report.render_section(meta, [])
        self.assertTrue(section.startswith("_Written by `c` on d, 1 round. Do not edit"))
        self.assertNotIn("median", section)


class CommitTest(unittest.TestCase):
    def git(self, porcelain: str) -> str:
        def fake(cmd, **_):  # type: ignore[no-untyped-def]
            out = "abc1234\n" if "rev-parse" in cmd else porcelain
            return mock.Mock(stdout=out, returncode=0)

        with mock.patch.object(run.subprocess, "run", fake):
            return run.commit()

    def test_clean_and_dirty(self) -> None:
        self.assertEqual(self.git(""), "abc1234")
        self.assertEqual(self.git(" M src/lib.rs\n"), "abc1234+dirty")


if __name__ == "__main__":
    unittest.main()
