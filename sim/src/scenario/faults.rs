//! `[[faults]]` entries as serde reads them: `at_ms` and `kind`, then one typed table per kind,
//! each `deny_unknown_fields`, so a key that does not belong to a kind is refused by serde.
//!
//! An entry is read in two steps because toml's spans do not survive serde's internally tagged
//! enums (`#[serde(tag = "kind")]` buffers the table): the document is parsed into toml's
//! spanned tree (`DeTable`), `kind` and `at_ms` are taken out of each entry, and what is left is
//! deserialized into the kind's table from the same tree, so every error keeps the span of its
//! key or value in the scenario file.
//!
//! The names serde knows (the kinds, and the keys of each kind's table) are read from the derived
//! `Deserialize` impls themselves ([`serde_names`]), so no second list of them is kept by hand:
//! `explore` asks [`fields_of`] which keys a kind takes.

use serde::de::{self, Deserialize, IntoDeserializer};
use toml::de::{DeTable, DeValue, ValueDeserializer};
use toml::Spanned;

use super::{Loader, RawTime, ScenarioError};

/// The fault kinds, by the name `kind` gives them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum FaultKind {
    Crash,
    Restart,
    Stop,
    Partition,
    Isolate,
    Pause,
    Clog,
    DropRequest,
    DropResponse,
    ResetMidResponse,
    RejectRequest,
    DiskFault,
    SlowDisk,
    DiskFull,
    ClockSkew,
    Delay,
    Corrupt,
    Heal,
}

impl FaultKind {
    /// The kind `name` names, if any (serde's own reading of `kind`).
    pub(crate) fn from_name(name: &str) -> Option<FaultKind> {
        let name: de::value::StrDeserializer<'_, de::value::Error> = name.into_deserializer();
        FaultKind::deserialize(name).ok()
    }

    /// Every kind's name, in declaration order.
    pub(crate) fn names() -> &'static [&'static str] {
        serde_names::<FaultKind>()
    }
}

/// `crash`.
#[derive(Debug, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct CrashFields {
    pub(crate) target: Spanned<String>,
    pub(crate) level: Option<Spanned<String>>,
    pub(crate) restart_after_ms: Option<Spanned<RawTime>>,
    pub(crate) recrash_after_ms: Option<Spanned<RawTime>>,
    pub(crate) recrash_level: Option<Spanned<String>>,
}

/// `restart`.
#[derive(Debug, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RestartFields {
    pub(crate) target: Spanned<String>,
}

/// `stop`.
#[derive(Debug, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct StopFields {
    pub(crate) target: Spanned<String>,
    pub(crate) restart_after_ms: Option<Spanned<RawTime>>,
}

/// `partition`.
#[derive(Debug, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct PartitionFields {
    pub(crate) groups: Spanned<Vec<Vec<String>>>,
    pub(crate) heal_after_ms: Option<Spanned<RawTime>>,
}

/// `isolate` and `pause`: a node (or a selector) until healed.
#[derive(Debug, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct NodeFields {
    pub(crate) target: Spanned<String>,
    pub(crate) heal_after_ms: Option<Spanned<RawTime>>,
}

/// `clog`.
#[derive(Debug, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct ClogFields {
    pub(crate) from: Spanned<String>,
    pub(crate) to: Spanned<String>,
    pub(crate) heal_after_ms: Option<Spanned<RawTime>>,
}

/// `drop_request`, `drop_response` and `reset_mid_response`.
#[derive(Debug, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct ConnectionFields {
    pub(crate) target: Spanned<String>,
    pub(crate) api: Option<Spanned<String>>,
    pub(crate) count: Option<Spanned<u32>>,
    pub(crate) probability: Option<Spanned<f64>>,
}

/// `reject_request` (produce requests only: no `api`).
#[derive(Debug, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RejectFields {
    pub(crate) target: Spanned<String>,
    pub(crate) count: Option<Spanned<u32>>,
    pub(crate) probability: Option<Spanned<f64>>,
    pub(crate) error: Option<Spanned<String>>,
}

/// `disk_fault`.
#[derive(Debug, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct DiskFaultFields {
    pub(crate) target: Spanned<String>,
    pub(crate) fail_writes: Option<Spanned<u32>>,
    pub(crate) fail_syncs: Option<Spanned<u32>>,
    pub(crate) on_fsync_failure: Option<Spanned<String>>,
}

/// `slow_disk`.
#[derive(Debug, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct SlowDiskFields {
    pub(crate) target: Spanned<String>,
    pub(crate) fsync_latency_us: Spanned<[u64; 2]>,
    pub(crate) heal_after_ms: Option<Spanned<RawTime>>,
}

/// `disk_full`.
#[derive(Debug, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct DiskFullFields {
    pub(crate) target: Spanned<String>,
    pub(crate) free_bytes: Spanned<[u64; 2]>,
    pub(crate) heal_after_ms: Option<Spanned<RawTime>>,
}

/// `clock_skew`.
#[derive(Debug, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct ClockSkewFields {
    pub(crate) target: Spanned<String>,
    pub(crate) offset_ms: Spanned<[i64; 2]>,
    pub(crate) heal_after_ms: Option<Spanned<RawTime>>,
}

/// `delay`.
#[derive(Debug, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct DelayFields {
    pub(crate) latency_ms: Spanned<[u64; 2]>,
    pub(crate) heal_after_ms: Option<Spanned<RawTime>>,
}

/// `corrupt`.
#[derive(Debug, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct CorruptFields {
    pub(crate) target: Spanned<String>,
    pub(crate) files: Option<Spanned<String>>,
}

/// `heal`: nothing but `at_ms` and `kind`.
#[derive(Debug, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct HealFields {}

/// The keys of one entry besides `at_ms` and `kind`, typed by its kind.
#[derive(Debug)]
pub(crate) enum FaultFields {
    Crash(CrashFields),
    Restart(RestartFields),
    Stop(StopFields),
    Partition(PartitionFields),
    Isolate(NodeFields),
    Pause(NodeFields),
    Clog(ClogFields),
    DropRequest(ConnectionFields),
    DropResponse(ConnectionFields),
    ResetMidResponse(ConnectionFields),
    RejectRequest(RejectFields),
    DiskFault(DiskFaultFields),
    SlowDisk(SlowDiskFields),
    DiskFull(DiskFullFields),
    ClockSkew(ClockSkewFields),
    Delay(DelayFields),
    Corrupt(CorruptFields),
    Heal(HealFields),
}

impl FaultFields {
    /// Deserializes what is left of an entry into `kind`'s table.
    fn read(kind: FaultKind, rest: ValueDeserializer<'_>) -> Result<FaultFields, toml::de::Error> {
        Ok(match kind {
            FaultKind::Crash => FaultFields::Crash(Deserialize::deserialize(rest)?),
            FaultKind::Restart => FaultFields::Restart(Deserialize::deserialize(rest)?),
            FaultKind::Stop => FaultFields::Stop(Deserialize::deserialize(rest)?),
            FaultKind::Partition => FaultFields::Partition(Deserialize::deserialize(rest)?),
            FaultKind::Isolate => FaultFields::Isolate(Deserialize::deserialize(rest)?),
            FaultKind::Pause => FaultFields::Pause(Deserialize::deserialize(rest)?),
            FaultKind::Clog => FaultFields::Clog(Deserialize::deserialize(rest)?),
            FaultKind::DropRequest => FaultFields::DropRequest(Deserialize::deserialize(rest)?),
            FaultKind::DropResponse => FaultFields::DropResponse(Deserialize::deserialize(rest)?),
            FaultKind::ResetMidResponse => {
                FaultFields::ResetMidResponse(Deserialize::deserialize(rest)?)
            }
            FaultKind::RejectRequest => FaultFields::RejectRequest(Deserialize::deserialize(rest)?),
            FaultKind::DiskFault => FaultFields::DiskFault(Deserialize::deserialize(rest)?),
            FaultKind::SlowDisk => FaultFields::SlowDisk(Deserialize::deserialize(rest)?),
            FaultKind::DiskFull => FaultFields::DiskFull(Deserialize::deserialize(rest)?),
            FaultKind::ClockSkew => FaultFields::ClockSkew(Deserialize::deserialize(rest)?),
            FaultKind::Delay => FaultFields::Delay(Deserialize::deserialize(rest)?),
            FaultKind::Corrupt => FaultFields::Corrupt(Deserialize::deserialize(rest)?),
            FaultKind::Heal => FaultFields::Heal(Deserialize::deserialize(rest)?),
        })
    }
}

/// The keys `kind`'s table takes besides `at_ms` and `kind`, as its `Deserialize` impl names
/// them (in declaration order).
pub(crate) fn fields_of(kind: FaultKind) -> &'static [&'static str] {
    match kind {
        FaultKind::Crash => serde_names::<CrashFields>(),
        FaultKind::Restart => serde_names::<RestartFields>(),
        FaultKind::Stop => serde_names::<StopFields>(),
        FaultKind::Partition => serde_names::<PartitionFields>(),
        FaultKind::Isolate | FaultKind::Pause => serde_names::<NodeFields>(),
        FaultKind::Clog => serde_names::<ClogFields>(),
        FaultKind::DropRequest | FaultKind::DropResponse | FaultKind::ResetMidResponse => {
            serde_names::<ConnectionFields>()
        }
        FaultKind::RejectRequest => serde_names::<RejectFields>(),
        FaultKind::DiskFault => serde_names::<DiskFaultFields>(),
        FaultKind::SlowDisk => serde_names::<SlowDiskFields>(),
        FaultKind::DiskFull => serde_names::<DiskFullFields>(),
        FaultKind::ClockSkew => serde_names::<ClockSkewFields>(),
        FaultKind::Delay => serde_names::<DelayFields>(),
        FaultKind::Corrupt => serde_names::<CorruptFields>(),
        FaultKind::Heal => serde_names::<HealFields>(),
    }
}

/// One `[[faults]]` entry: its time and kind, and its kind's table.
#[derive(Debug)]
pub(crate) struct RawFault {
    pub(crate) at_ms: Spanned<RawTime>,
    /// As written (errors quote it).
    pub(crate) kind: Spanned<String>,
    pub(crate) fields: FaultFields,
}

/// Reads the `faults` value of a parsed document (taken out of it: the rest of the document is
/// deserialized without it), entry by entry.
pub(super) fn read_faults(
    loader: &Loader<'_>,
    faults: Option<Spanned<DeValue<'_>>>,
) -> Result<Vec<RawFault>, ScenarioError> {
    let Some(faults) = faults else {
        return Ok(Vec::new());
    };
    let span = faults.span();
    let DeValue::Array(entries) = faults.into_inner() else {
        return Err(loader.error_at(span, "faults is an array of tables ([[faults]])"));
    };
    entries
        .into_iter()
        .map(|entry| read_fault(loader, entry))
        .collect()
}

/// The `[[faults]]` entries of `loader`'s text alone (explore's sample faults).
pub(crate) fn parse_faults(loader: &Loader<'_>) -> Result<Vec<RawFault>, ScenarioError> {
    let mut root = DeTable::parse(loader.source).map_err(|error| toml_error(loader, &error))?;
    read_faults(loader, root.get_mut().remove("faults"))
}

/// A toml or serde error at its span.
pub(super) fn toml_error(loader: &Loader<'_>, error: &toml::de::Error) -> ScenarioError {
    loader.error_at(error.span().unwrap_or(0..0), error.message())
}

fn read_fault(loader: &Loader<'_>, entry: Spanned<DeValue<'_>>) -> Result<RawFault, ScenarioError> {
    let span = entry.span();
    let DeValue::Table(mut table) = entry.into_inner() else {
        return Err(loader.error_at(span, "a [[faults]] entry is a table"));
    };
    let mut take = |key: &str| {
        table
            .remove(key)
            .ok_or_else(|| loader.error_at(span.clone(), format!("missing field `{key}`")))
    };
    let (at_ms, kind) = (take("at_ms")?, take("kind")?);
    let (at_ms, kind): (Spanned<RawTime>, Spanned<String>) =
        (value(loader, at_ms)?, value(loader, kind)?);
    let Some(fault_kind) = FaultKind::from_name(kind.get_ref()) else {
        let message = format!(
            "unknown fault kind '{}' ({})",
            kind.get_ref(),
            FaultKind::names().join(", ")
        );
        return Err(loader.error_at(kind.span(), message));
    };
    let rest = ValueDeserializer::from(Spanned::new(span, DeValue::Table(table)));
    let fields = FaultFields::read(fault_kind, rest)
        .map_err(|error| fields_error(loader, &kind, fault_kind, &error))?;
    Ok(RawFault {
        at_ms,
        kind,
        fields,
    })
}

/// One value of an entry, typed (an error without a span of its own is put at the value's).
fn value<T: de::DeserializeOwned>(
    loader: &Loader<'_>,
    raw: Spanned<DeValue<'_>>,
) -> Result<T, ScenarioError> {
    let span = raw.span();
    T::deserialize(ValueDeserializer::from(raw))
        .map_err(|error| loader.error_at(error.span().unwrap_or(span), error.message()))
}

/// Serde's error for a kind's table, said with the kind: a key it does not take, at that key's
/// line; a key it needs, at the `kind` line.
fn fields_error(
    loader: &Loader<'_>,
    kind: &Spanned<String>,
    fault_kind: FaultKind,
    error: &toml::de::Error,
) -> ScenarioError {
    let quoted = |prefix: &str| {
        let rest = error.message().strip_prefix(prefix)?;
        rest.split_once('`').map(|(field, _)| field.to_owned())
    };
    if let Some(field) = quoted("unknown field `") {
        let expected: Vec<String> = ["at_ms", "kind"]
            .iter()
            .chain(fields_of(fault_kind))
            .map(|key| format!("`{key}`"))
            .collect();
        let message = format!(
            "unknown field `{field}` for fault kind `{}`, expected one of {}",
            kind.get_ref(),
            expected.join(", ")
        );
        return loader.error_at(error.span().unwrap_or(kind.span()), message);
    }
    if let Some(field) = quoted("missing field `") {
        let what = match field.as_str() {
            "fsync_latency_us" | "latency_ms" | "free_bytes" => format!("'{field} = [min, max]'"),
            "offset_ms" => "'offset_ms = [min, max]' (milliseconds, negative: behind)".to_owned(),
            _ => format!("'{field}'"),
        };
        let message = format!("a '{}' fault needs {what}", kind.get_ref());
        return loader.error_at(kind.span(), message);
    }
    toml_error(loader, error)
}

/// The names a derived `Deserialize` impl passes to the deserializer: a struct's fields, an
/// enum's variants. Read by asking it to deserialize from [`Names`], which records them and stops.
fn serde_names<T: de::DeserializeOwned>() -> &'static [&'static str] {
    match T::deserialize(Names) {
        Err(NamesFound(names)) => names,
        Ok(_) => unreachable!("Names produces no value"),
    }
}

/// A deserializer that only records the names it is asked for.
struct Names;

/// What [`Names`] found (it always "fails" with it).
#[derive(Debug)]
struct NamesFound(&'static [&'static str]);

impl std::fmt::Display for NamesFound {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(formatter, "names {:?}", self.0)
    }
}

impl std::error::Error for NamesFound {}

impl de::Error for NamesFound {
    fn custom<M: std::fmt::Display>(_: M) -> Self {
        NamesFound(&[])
    }
}

impl<'de> de::Deserializer<'de> for Names {
    type Error = NamesFound;

    fn deserialize_any<V: de::Visitor<'de>>(self, _: V) -> Result<V::Value, NamesFound> {
        Err(NamesFound(&[]))
    }

    fn deserialize_struct<V: de::Visitor<'de>>(
        self,
        _: &'static str,
        fields: &'static [&'static str],
        _: V,
    ) -> Result<V::Value, NamesFound> {
        Err(NamesFound(fields))
    }

    fn deserialize_enum<V: de::Visitor<'de>>(
        self,
        _: &'static str,
        variants: &'static [&'static str],
        _: V,
    ) -> Result<V::Value, NamesFound> {
        Err(NamesFound(variants))
    }

    serde::forward_to_deserialize_any! {
        bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string bytes byte_buf
        option unit unit_struct newtype_struct seq tuple tuple_struct map identifier ignored_any
    }
}
