//! The real broker's side of idempotent producers: InitProducerId hands out ids that a `kill -9`
//! never brings back, and a retried batch is answered with its first offset and stored once,
//! also after the restart (the producer state is rebuilt from the log).

use std::time::Duration;

use bytes::Bytes;
use kafka_protocol::messages::{InitProducerIdRequest, RequestKind, ResponseKind};
use seedlog::protocol::record_batch::{build_batch, stamp_producer};
use seedlog::protocol::ErrorCode;
use seedlog::runtime::client::ClientConnection;

use super::broker_process::{temp_dir, BrokerProcess};
use super::real_tcp::{consume_all, create, produce_batch};

const TOPIC: &str = "idempotent";
const TIMEOUT: Duration = Duration::from_secs(10);

/// A one-record batch of `producer_id` at epoch 0 with first sequence `sequence`.
fn batch(text: &str, producer_id: i64, sequence: i32) -> Bytes {
    let batch = build_batch(&[(None, Some(text.as_bytes()))], 1);
    stamp_producer(&batch, producer_id, 0, sequence)
}

async fn init_producer_id(connection: &mut ClientConnection) -> (i16, i64) {
    let request = InitProducerIdRequest::default()
        .with_transactional_id(None)
        .with_transaction_timeout_ms(60_000);
    let ResponseKind::InitProducerId(response) = connection
        .call_within(TIMEOUT, RequestKind::InitProducerId(request))
        .await
        .expect("InitProducerId answered")
    else {
        panic!("InitProducerId answered with another API")
    };
    (response.error_code, response.producer_id.0)
}

async fn connect(broker: &BrokerProcess) -> ClientConnection {
    ClientConnection::connect(&broker.address, "it")
        .await
        .expect("connect")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retries_are_stored_once_and_producer_ids_survive_kill_9() {
    let dir = temp_dir("idempotence");
    let mut broker = BrokerProcess::start(&dir, &[], &[]);
    create(&broker.address, TOPIC, 1, &[("flush.messages", "1")]).await;
    let mut connection = connect(&broker).await;
    let (error, first) = init_producer_id(&mut connection).await;
    assert_eq!((error, first), (0, 0));
    assert_eq!(init_producer_id(&mut connection).await, (0, 1));
    for (sequence, text) in [(0, "a"), (1, "b")] {
        let answer = produce_batch(&mut connection, TOPIC, -1, batch(text, first, sequence)).await;
        assert_eq!(
            (answer.error_code, answer.base_offset),
            (0, i64::from(sequence))
        );
    }
    let retry = produce_batch(&mut connection, TOPIC, -1, batch("a", first, 0)).await;
    assert_eq!((retry.error_code, retry.base_offset), (0, 0), "{retry:?}");
    let gap = produce_batch(&mut connection, TOPIC, -1, batch("d", first, 3)).await;
    assert_eq!(gap.error_code, ErrorCode::OutOfOrderSequenceNumber.code());

    broker.kill9();
    broker.restart();
    let mut connection = connect(&broker).await;
    let (error, after) = init_producer_id(&mut connection).await;
    assert_eq!(error, 0);
    assert!(
        after >= 1_000,
        "ids reserved before the crash are skipped: got {after}"
    );
    let retry = produce_batch(&mut connection, TOPIC, -1, batch("b", first, 1)).await;
    assert_eq!(
        (retry.error_code, retry.base_offset),
        (0, 1),
        "the retry across the restart is recognised from the log"
    );
    let next = produce_batch(&mut connection, TOPIC, -1, batch("c", first, 2)).await;
    assert_eq!((next.error_code, next.base_offset), (0, 2));
    let read = consume_all(&broker.address, TOPIC, 1, 3).await;
    assert_eq!(
        read[&0],
        [
            (0, "a".to_owned()),
            (1, "b".to_owned()),
            (2, "c".to_owned())
        ],
        "each record once"
    );
    broker.stop();
}
