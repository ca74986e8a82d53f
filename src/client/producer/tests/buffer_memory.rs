//! `buffer.memory`: the producer never holds more than that many bytes of records; a send beyond
//! it waits up to `max.block.ms`, then fails, as Kafka's `BufferPool` makes `send` block and
//! throw.

use super::*;

/// What one of these tests' records counts: its size as a batch of one.
fn size_of(id: u64) -> u64 {
    BatchBuilder::default().size_with(0, None, Some(format!("v{id}").as_bytes())) as u64
}

#[test]
fn a_broker_that_stops_answering_holds_the_producer_at_buffer_memory() {
    let memory = size_of(1) * 4;
    let mut core = core(&[
        ("buffer.memory", &memory.to_string()),
        ("max.block.ms", "1000"),
        ("max.in.flight.requests.per.connection", "5"),
    ]);
    send(&mut core, 0, 1);
    step(&mut core, 0, up(0));
    for id in 2..=10 {
        send(&mut core, 0, id);
    }
    assert!(core.buffered <= memory, "{} > {memory}", core.buffered);
    assert_eq!(
        core.record_bytes.len(),
        4,
        "four records fit, the rest wait"
    );
    assert_eq!(core.waiting_for_memory.len(), 6);
    // The broker never answers: the request timeout is 30 s, max.block.ms 1 s.
    assert_eq!(core.next_deadline(), Some(Millis(1_000)));
    let outputs = step(&mut core, 1_000, ProducerInput::Tick);
    let failed = rejected(&outputs);
    assert_eq!(
        failed.iter().map(|(id, _)| *id).collect::<Vec<_>>(),
        (5..=10).collect::<Vec<_>>(),
        "the sends without room fail after max.block.ms"
    );
    assert!(failed
        .iter()
        .all(|(_, error)| *error == ErrorCode::RequestTimedOut));
    assert!(core.buffered <= memory);
}

#[test]
fn a_completed_record_makes_room_for_the_next_waiting_send() {
    let memory = size_of(1) * 2;
    let mut core = core(&[
        ("buffer.memory", &memory.to_string()),
        ("max.in.flight.requests.per.connection", "1"),
    ]);
    send(&mut core, 0, 1);
    step(&mut core, 0, up(0));
    send(&mut core, 0, 2);
    send(&mut core, 0, 3);
    assert_eq!(core.waiting_for_memory.len(), 1);
    let outputs = step(
        &mut core,
        1,
        ProducerInput::Response {
            node: 0,
            response: response(ErrorCode::None, 0),
        },
    );
    assert_eq!(completions(&outputs), [(1, Ok(0))]);
    assert!(core.waiting_for_memory.is_empty(), "record 3 was admitted");
    assert_eq!(core.record_bytes.len(), 2);
}

#[test]
fn a_record_larger_than_buffer_memory_fails_at_once() {
    let mut core = core(&[("buffer.memory", "10")]);
    let outputs = send(&mut core, 0, 1);
    assert_eq!(rejected(&outputs), [(1, ErrorCode::MessageTooLarge)]);
}
