//! The pure wire layer: frames, the request/response codec, supported versions, error codes,
//! RecordBatch v2, transaction markers (control batches), the validation of the records inside a
//! batch, and the zero-copy Fetch response. Depends on nothing else in seedlog.

pub mod api_versions;
pub mod codec;
pub mod compression;
pub mod control;
pub mod error_code;
pub mod fetch_response;
pub mod frame;
pub mod record_batch;
pub mod record_validation;
pub mod requests;

pub use error_code::ErrorCode;
