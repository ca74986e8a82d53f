"""bench/perf/fetch_cycle.py: reading `perf trace` output into fetch cycles (lines from real traces
of seedlog and Kafka 4.4, fds and times kept as traced)."""
import pytest

from perf import fetch_cycle

# seedlog: the request in one recvfrom; the header, then per partition a 39-byte header and a
# sendfile, the 3-byte trailer; an eventfd write of another thread and a blocked epoll_wait between.
SEEDLOG = """\
   520.988 ( 0.016 ms): tokio-rt-worke/11742 recvfrom(fd: 12, ubuf: 0x7fafe80118d0, size: 65536)                   = 263
   517.083 ( 4.002 ms): seedlog/11739  ... [continued]: futex())                                            = 0
   521.215 ( 0.025 ms): tokio-rt-worke/11742 sendto(fd: 12, buff: 0x7fafec001ed0, len: 75, flags: NOSIGNAL)        = 75
   521.254 ( 0.554 ms): tokio-rt-worke/11742 sendfile(out_fd: 12, in_fd: 17, offset: 0x7fafe80052e8, count: 999875) = 999875
   521.837 ( 0.017 ms): tokio-rt-worke/11742 sendto(fd: 12, buff: 0x7fafec0098b0, len: 39, flags: NOSIGNAL)        = 39
   521.869 ( 0.062 ms): tokio-rt-worke/11742 sendfile(out_fd: 12, in_fd: 16, offset: 0x7fafe80052e8, count: 999875) = 999875
   523.456 ( 0.015 ms): tokio-rt-worke/11742 sendto(fd: 12, buff: 0x7fafec003ae0, len: 3, flags: NOSIGNAL)         = 3
   526.494 ( 0.017 ms): tokio-rt-worke/11742 recvfrom(fd: 12, ubuf: 0x7fafe80118d0, size: 65536)                   = 263
   526.721 ( 0.018 ms): seedlog/11739 write(fd: 4, buf: 0x7ffc56618528, count: 8)                           = 8
   526.822 ( 0.017 ms): tokio-rt-worke/11742 sendto(fd: 12, buff: 0x7fafec012200, len: 75, flags: NOSIGNAL)        = 75
   526.854 ( 0.171 ms): tokio-rt-worke/11742 sendfile(out_fd: 12, in_fd: 16, offset: 0x7fafe80052e8, count: 999875) = 999875
   527.040 ( 0.010 ms): tokio-rt-worke/11742 recvfrom(fd: 12, ubuf: 0x7fafe80118d0, size: 65536)                   = -11
"""

# Kafka: the request in two reads (size, then body), a wake-up through an eventfd, the header
# in a writev, the records in 256 KiB sendfile pieces.
KAFKA = """\
  2908.024 ( 0.031 ms): data-plane-kaf/12270 read(fd: 155, buf: 0x7fe86800c2a0, count: 4)                          = 4
  2908.081 ( 0.017 ms): data-plane-kaf/12270 read(fd: 155, buf: 0x7fe86800c2a0, count: 259)                        = 259
  2910.066 ( 0.056 ms): data-plane-kaf/12208 write(fd: 126, buf: 0x7fe84a3fdd18, count: 8)                         = 8
  2910.298 ( 0.043 ms): data-plane-kaf/12270 read(fd: 126, buf: 0x7fe848efd410, count: 16)                         = 8
  2910.411 ( 0.047 ms): data-plane-kaf/12270 writev(fd: 155, vec: 0x7fe86800c140, vlen: 1)                         = 75
  2910.501 ( 0.058 ms): data-plane-kaf/12270 sendfile(out_fd: 155, in_fd: 153, offset: 0x7fe848efd038, count: 1048576) = 261932
  2910.610 ( 0.056 ms): data-plane-kaf/12270 sendfile(out_fd: 155, in_fd: 153, offset: 0x7fe848efd038, count: 786644) = 261932
"""


def test_parse_trace_keeps_finished_socket_calls_with_bytes() -> None:
    calls = fetch_cycle.parse_trace(SEEDLOG)
    # The continued futex and the recvfrom that returned EAGAIN are left out.
    assert [c.name for c in calls].count("recvfrom") == 2
    assert all(c.nbytes > 0 for c in calls)
    assert calls == sorted(calls, key=lambda c: c.start)
    sendfile = next(c for c in calls if c.name == "sendfile")
    assert (sendfile.fd, sendfile.nbytes) == (12, 999875)
    assert sendfile.end == pytest.approx(521.254 + 0.554)


def test_the_consumer_connection_is_the_one_written_most_to() -> None:
    assert fetch_cycle.busiest_connection(fetch_cycle.parse_trace(SEEDLOG)) == 12
    assert fetch_cycle.busiest_connection(fetch_cycle.parse_trace(KAFKA)) == 155
    assert fetch_cycle.busiest_connection([]) is None


def test_cycles_split_request_response_and_the_gap_to_the_next_request() -> None:
    cycles = fetch_cycle.cycles(fetch_cycle.parse_trace(SEEDLOG), 12)
    assert len(cycles) == 2
    first, last = cycles
    assert first.broker_ms == pytest.approx(521.215 - (520.988 + 0.016))
    assert first.send_ms == pytest.approx(523.456 + 0.015 - 521.215)
    assert first.client_ms == pytest.approx(526.494 - (523.456 + 0.015))
    assert first.nbytes == 75 + 999875 + 39 + 999875 + 3
    # The other thread's eventfd write is not on fd 12; the last response has no next request.
    assert last.nbytes == 75 + 999875 and last.client_ms is None


def test_a_request_read_in_pieces_counts_from_its_last_piece() -> None:
    (cycle,) = fetch_cycle.cycles(fetch_cycle.parse_trace(KAFKA), 155)
    assert cycle.broker_ms == pytest.approx(2910.411 - (2908.081 + 0.017))
    assert cycle.nbytes == 75 + 2 * 261932


def test_summary_reads_fetches_with_records_only() -> None:
    cycles = fetch_cycle.cycles(fetch_cycle.parse_trace(SEEDLOG), 12)
    small = fetch_cycle.Cycle(broker_ms=9.0, send_ms=9.0, client_ms=9.0, nbytes=100)
    row = fetch_cycle.summarize([small, *cycles])
    assert row["fetches"] == "2"
    assert row["MB per fetch"] == "1.50"
    assert row["broker share"] == f"{100 * cycles[0].broker_ms / cycles[0].total_ms:.0f}%"
