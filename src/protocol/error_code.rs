//! Kafka error codes, numbered 1:1 with Kafka's `Errors` enum. They are protocol outcomes placed
//! in responses, never Rust `Err` values.

/// A Kafka protocol error code.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[repr(i16)]
#[allow(missing_docs)] // the names are Kafka's; see Kafka's `Errors.java` for each meaning
pub enum ErrorCode {
    UnknownServerError = -1,
    None = 0,
    OffsetOutOfRange = 1,
    CorruptMessage = 2,
    UnknownTopicOrPartition = 3,
    InvalidFetchSize = 4,
    LeaderNotAvailable = 5,
    NotLeaderOrFollower = 6,
    RequestTimedOut = 7,
    MessageTooLarge = 10,
    NetworkException = 13,
    CoordinatorLoadInProgress = 14,
    InvalidTopicException = 17,
    RecordListTooLarge = 18,
    NotEnoughReplicas = 19,
    NotEnoughReplicasAfterAppend = 20,
    InvalidRequiredAcks = 21,
    UnsupportedVersion = 35,
    TopicAlreadyExists = 36,
    InvalidPartitions = 37,
    InvalidReplicationFactor = 38,
    InvalidReplicaAssignment = 39,
    InvalidConfig = 40,
    InvalidRequest = 42,
    UnsupportedForMessageFormat = 43,
    OutOfOrderSequenceNumber = 45,
    InvalidProducerEpoch = 47,
    InvalidTxnState = 48,
    InvalidProducerIdMapping = 49,
    ConcurrentTransactions = 51,
    ProducerFenced = 90,
    KafkaStorageError = 56,
    UnknownProducerId = 59,
    FencedLeaderEpoch = 74,
    UnknownLeaderEpoch = 75,
    OffsetNotAvailable = 78,
    UnknownTopicId = 100,
    InvalidRecord = 87,
    NotController = 41,
    StaleBrokerEpoch = 77,
    InvalidUpdateVersion = 95,
    SnapshotNotFound = 98,
    PositionOutOfRange = 99,
    BrokerIdNotRegistered = 102,
    IneligibleReplica = 107,
    OffsetMetadataTooLarge = 12,
    CoordinatorNotAvailable = 15,
    NotCoordinator = 16,
    IllegalGeneration = 22,
    InconsistentGroupProtocol = 23,
    InvalidGroupId = 24,
    UnknownMemberId = 25,
    InvalidSessionTimeout = 26,
    RebalanceInProgress = 27,
    InvalidCommitOffsetSize = 28,
    NonEmptyGroup = 68,
    GroupIdNotFound = 69,
    MemberIdRequired = 79,
    GroupMaxSizeReached = 81,
    FencedInstanceId = 82,
}

impl ErrorCode {
    /// The wire value.
    pub fn code(self) -> i16 {
        self as i16
    }

    /// Maps a wire value back; unknown codes become `UnknownServerError`.
    pub fn from_code(code: i16) -> ErrorCode {
        ALL.iter()
            .copied()
            .find(|error| error.code() == code)
            .unwrap_or(ErrorCode::UnknownServerError)
    }

    /// Kafka's name in snake case (`not_leader_or_follower`), as scenario files spell it.
    pub fn name(self) -> String {
        let mut name = String::new();
        for (index, c) in format!("{self:?}").chars().enumerate() {
            if c.is_ascii_uppercase() && index > 0 {
                name.push('_');
            }
            name.push(c.to_ascii_lowercase());
        }
        name
    }

    /// The error named `name` (see [`name`](Self::name)).
    pub fn from_name(name: &str) -> Option<ErrorCode> {
        ALL.iter().copied().find(|error| error.name() == name)
    }

    /// Whether a client may retry the request (Kafka's `RetriableException` subclasses).
    pub fn is_retriable(self) -> bool {
        matches!(
            self,
            ErrorCode::CorruptMessage
                | ErrorCode::UnknownTopicOrPartition
                | ErrorCode::LeaderNotAvailable
                | ErrorCode::NotLeaderOrFollower
                | ErrorCode::RequestTimedOut
                | ErrorCode::NetworkException
                | ErrorCode::NotEnoughReplicas
                | ErrorCode::NotEnoughReplicasAfterAppend
                | ErrorCode::KafkaStorageError
                | ErrorCode::UnknownTopicId
                | ErrorCode::CoordinatorLoadInProgress
                | ErrorCode::CoordinatorNotAvailable
                | ErrorCode::NotCoordinator
                | ErrorCode::OffsetNotAvailable
        )
    }

    /// Whether a failed produce with this error may nevertheless have been written: the
    /// broker can answer these after appending (NOT_ENOUGH_REPLICAS_AFTER_APPEND; a timeout
    /// waiting for replication; KAFKA_STORAGE_ERROR when the fsync after the append failed; an
    /// unknown server error). A client must report such a send as indeterminate, not failed.
    pub fn may_have_been_written(self) -> bool {
        matches!(
            self,
            ErrorCode::NotEnoughReplicasAfterAppend
                | ErrorCode::RequestTimedOut
                | ErrorCode::KafkaStorageError
                | ErrorCode::UnknownServerError
                | ErrorCode::NetworkException
        )
    }
}

const ALL: [ErrorCode; 60] = [
    ErrorCode::UnknownServerError,
    ErrorCode::None,
    ErrorCode::OffsetOutOfRange,
    ErrorCode::CorruptMessage,
    ErrorCode::UnknownTopicOrPartition,
    ErrorCode::InvalidFetchSize,
    ErrorCode::LeaderNotAvailable,
    ErrorCode::NotLeaderOrFollower,
    ErrorCode::RequestTimedOut,
    ErrorCode::MessageTooLarge,
    ErrorCode::NetworkException,
    ErrorCode::CoordinatorLoadInProgress,
    ErrorCode::InvalidTopicException,
    ErrorCode::RecordListTooLarge,
    ErrorCode::NotEnoughReplicas,
    ErrorCode::NotEnoughReplicasAfterAppend,
    ErrorCode::InvalidRequiredAcks,
    ErrorCode::UnsupportedVersion,
    ErrorCode::TopicAlreadyExists,
    ErrorCode::InvalidPartitions,
    ErrorCode::InvalidReplicationFactor,
    ErrorCode::InvalidReplicaAssignment,
    ErrorCode::InvalidConfig,
    ErrorCode::InvalidRequest,
    ErrorCode::UnsupportedForMessageFormat,
    ErrorCode::OutOfOrderSequenceNumber,
    ErrorCode::InvalidProducerEpoch,
    ErrorCode::InvalidTxnState,
    ErrorCode::InvalidProducerIdMapping,
    ErrorCode::ConcurrentTransactions,
    ErrorCode::ProducerFenced,
    ErrorCode::KafkaStorageError,
    ErrorCode::UnknownProducerId,
    ErrorCode::FencedLeaderEpoch,
    ErrorCode::UnknownLeaderEpoch,
    ErrorCode::OffsetNotAvailable,
    ErrorCode::UnknownTopicId,
    ErrorCode::InvalidRecord,
    ErrorCode::NotController,
    ErrorCode::StaleBrokerEpoch,
    ErrorCode::InvalidUpdateVersion,
    ErrorCode::SnapshotNotFound,
    ErrorCode::PositionOutOfRange,
    ErrorCode::BrokerIdNotRegistered,
    ErrorCode::IneligibleReplica,
    ErrorCode::OffsetMetadataTooLarge,
    ErrorCode::CoordinatorNotAvailable,
    ErrorCode::NotCoordinator,
    ErrorCode::IllegalGeneration,
    ErrorCode::InconsistentGroupProtocol,
    ErrorCode::InvalidGroupId,
    ErrorCode::UnknownMemberId,
    ErrorCode::InvalidSessionTimeout,
    ErrorCode::RebalanceInProgress,
    ErrorCode::InvalidCommitOffsetSize,
    ErrorCode::NonEmptyGroup,
    ErrorCode::GroupIdNotFound,
    ErrorCode::MemberIdRequired,
    ErrorCode::GroupMaxSizeReached,
    ErrorCode::FencedInstanceId,
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_match_kafka_numbering() {
        assert_eq!(ErrorCode::NotLeaderOrFollower.code(), 6);
        assert_eq!(ErrorCode::NotEnoughReplicas.code(), 19);
        assert_eq!(ErrorCode::UnsupportedVersion.code(), 35);
        assert_eq!(ErrorCode::InvalidRecord.code(), 87);
        assert_eq!(ErrorCode::from_code(36), ErrorCode::TopicAlreadyExists);
        assert_eq!(ErrorCode::from_code(12_345), ErrorCode::UnknownServerError);
    }

    /// Every code against kafka-protocol's table (generated from Kafka's `Errors.java`): the
    /// same number under the same name.
    #[test]
    fn every_code_is_kafkas_under_its_name() {
        for error in ALL {
            if error == ErrorCode::None {
                continue;
            }
            let theirs =
                kafka_protocol::ResponseError::try_from_code(error.code()).expect("not NONE");
            assert_eq!(
                format!("{theirs:?}"),
                format!("{error:?}"),
                "code {}",
                error.code()
            );
        }
    }

    #[test]
    fn names_round_trip() {
        assert_eq!(
            ErrorCode::NotLeaderOrFollower.name(),
            "not_leader_or_follower"
        );
        assert_eq!(
            ErrorCode::from_name("not_enough_replicas"),
            Some(ErrorCode::NotEnoughReplicas)
        );
        assert_eq!(ErrorCode::from_name("nope"), None);
    }

    #[test]
    fn errors_answered_after_an_append_are_not_definite_failures() {
        // A failed fsync is reported after the batch reached the page cache (regression:
        // scenarios/durability/fsync-eio-without-retries.toml, seed 1).
        assert!(ErrorCode::KafkaStorageError.may_have_been_written());
        assert!(ErrorCode::NotEnoughReplicasAfterAppend.may_have_been_written());
        assert!(
            !ErrorCode::NotEnoughReplicas.may_have_been_written(),
            "checked before the append"
        );
        assert!(!ErrorCode::MessageTooLarge.may_have_been_written());
    }
}
