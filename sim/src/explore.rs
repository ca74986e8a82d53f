//! Exploration, in one module: the `[explore]` table of a scenario file and the fault schedules
//! drawn from it (here), and, in the simulator build, `seedlog-sim explore` and `shrink`, which
//! run the drawn schedules and delta-debug a failure ([`run`]).
//!
//! The `[explore]` table: a fault space from which `seedlog-sim explore` draws a fault schedule
//! per seed (swarm testing: each seed also draws which fault kinds are enabled), and the
//! failure file a drawn schedule becomes (docs/SCENARIOS.md, "Exploration").
//!
//! Invariants this module owns:
//! * a drawn schedule depends on the seed and the `[explore]` table alone (its own SplitMix64,
//!   never madsim's RNG, so the simulation's draws are those of a plain `run` of the file);
//! * every drawn fault is a `[[faults]]` entry that the loader accepts: `[explore]` is checked
//!   at load time by building sample faults with the loader's own fault builder, and the text a
//!   seed runs is parsed by the loader like any scenario file;
//! * the text a seed runs is the original file with `[[faults]]` and `[explore]` cut out, the
//!   seed pinned, and the drawn faults appended, and nothing else changes: the surgery is
//!   checked by comparing both files as TOML values.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::ops::Range;

use serde::de::{Deserializer, MapAccess, Visitor};
use serde::Deserialize;
use toml::{Spanned, Value};

use crate::scenario::{build_fault, fields_of, parse_faults, FaultKind, Loader, ScenarioError};

/// `[explore]` keys that are not fault kinds.
const META_KEYS: [&str; 3] = ["faults", "window_ms", "swarm"];
/// Keys of an `[explore.KIND]` table that are not fields of the fault.
const KIND_META_KEYS: [&str; 3] = ["weight", "max", "at_ms"];
/// Faults per seed when `faults` is not given.
const FAULTS_DEFAULT: (u32, u32) = (1, 8);
/// Probability of each kind being enabled for a seed when `swarm` is not given.
const SWARM_DEFAULT: f64 = 0.5;
/// Keeps the schedule's stream apart from madsim's, which is seeded with the same number.
const SCHEDULE_SALT: u64 = 0x5eed_1095_e791_04e5;

/// `[explore]` as written: its keys with their spans, kinds separated from the rest.
#[derive(Debug, Default)]
pub(super) struct RawExplore {
    meta: BTreeMap<String, Spanned<Value>>,
    kinds: BTreeMap<String, Spanned<BTreeMap<String, Spanned<Value>>>>,
    unknown: Vec<(String, Spanned<Value>)>,
}

impl<'de> Deserialize<'de> for RawExplore {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct ExploreVisitor;
        impl<'de> Visitor<'de> for ExploreVisitor {
            type Value = RawExplore;
            fn expecting(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                formatter.write_str("the [explore] table")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<RawExplore, A::Error> {
                let mut raw = RawExplore::default();
                while let Some(key) = map.next_key::<String>()? {
                    if META_KEYS.contains(&key.as_str()) {
                        raw.meta.insert(key, map.next_value()?);
                    } else if FaultKind::from_name(&key).is_some() {
                        raw.kinds.insert(key, map.next_value()?);
                    } else {
                        raw.unknown.push((key, map.next_value()?));
                    }
                }
                Ok(raw)
            }
        }
        deserializer.deserialize_map(ExploreVisitor)
    }
}

/// How one field of a drawn fault is chosen.
#[derive(Debug, Clone, PartialEq)]
pub enum FieldDraw {
    /// Always this value.
    Fixed(Value),
    /// One of these, uniformly.
    OneOf(Vec<Value>),
    /// An integer in `low..=high`, uniformly.
    Integer(i64, i64),
    /// A number in `low..=high`, uniformly, in hundredths.
    Float(f64, f64),
    /// `groups = "random"`: every node, split in two non-empty groups at random.
    SplitNodes,
}

/// One fault kind of the space.
#[derive(Debug, Clone, PartialEq)]
pub struct KindSpace {
    /// The fault kind (`crash`, `partition`, ...).
    pub kind: String,
    /// Relative frequency among the kinds enabled for a seed.
    pub weight: u32,
    /// At most this many faults of this kind per seed.
    pub max: Option<u32>,
    /// Where its `at_ms` falls (default: the space's window).
    pub window_ms: Option<(u64, u64)>,
    /// Its fields, in key order.
    pub fields: Vec<(String, FieldDraw)>,
}

/// A validated `[explore]` table.
#[derive(Debug, Clone, PartialEq)]
pub struct ExploreSpace {
    /// How many faults a seed draws (`low..=high`).
    pub faults: (u32, u32),
    /// Where `at_ms` falls.
    pub window_ms: (u64, u64),
    /// The probability of each kind being enabled for a seed (at least one always is).
    pub swarm: f64,
    /// The kinds, by name.
    pub kinds: Vec<KindSpace>,
    /// Every node (for `groups = "random"`).
    pub nodes: Vec<String>,
}

/// One fault of a drawn schedule: a `[[faults]]` entry.
#[derive(Debug, Clone, PartialEq)]
pub struct DrawnFault {
    /// When it fires.
    pub at_ms: u64,
    /// Its kind.
    pub kind: String,
    /// Its other keys, in the order the space lists them.
    pub fields: Vec<(String, Value)>,
}

impl DrawnFault {
    /// The `[[faults]]` entry, as TOML.
    pub fn to_toml(&self) -> String {
        let mut text = format!(
            "[[faults]]\nat_ms = {}\nkind = {}\n",
            self.at_ms,
            Value::String(self.kind.clone())
        );
        for (key, value) in &self.fields {
            let _ = writeln!(text, "{key} = {value}");
        }
        text
    }
}

/// A seed's private stream (SplitMix64): the schedule depends on the seed alone.
struct ScheduleRng(u64);

impl ScheduleRng {
    fn new(seed: u64) -> ScheduleRng {
        ScheduleRng(seed ^ SCHEDULE_SALT)
    }

    fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in `0..count` (`count > 0`).
    fn below(&mut self, count: u64) -> u64 {
        assert!(count > 0, "below(0)");
        ((u128::from(self.next_u64()) * u128::from(count)) >> 64) as u64
    }

    /// Uniform in `low..=high`.
    fn between(&mut self, low: i64, high: i64) -> i64 {
        assert!(low <= high, "between({low}, {high})");
        let span = high.abs_diff(low);
        match span.checked_add(1) {
            Some(count) => low.wrapping_add_unsigned(self.below(count)),
            None => self.next_u64() as i64,
        }
    }

    fn chance(&mut self, probability: f64) -> bool {
        ((self.next_u64() >> 11) as f64 / (1u64 << 53) as f64) < probability
    }
}

impl ExploreSpace {
    /// The fault schedule of `seed`: which kinds are enabled, then each fault's kind, time and
    /// fields, sorted by time (ties keep draw order).
    pub fn draw(&self, seed: u64) -> Vec<DrawnFault> {
        let mut rng = ScheduleRng::new(seed);
        let mut enabled: Vec<&KindSpace> = self
            .kinds
            .iter()
            .filter(|_| rng.chance(self.swarm))
            .collect();
        if enabled.is_empty() {
            enabled.push(&self.kinds[rng.below(self.kinds.len() as u64) as usize]);
        }
        let count = rng.between(i64::from(self.faults.0), i64::from(self.faults.1));
        let mut drawn_of: BTreeMap<&str, u32> = BTreeMap::new();
        let mut faults = Vec::new();
        for _ in 0..count {
            enabled.retain(|kind| {
                kind.max
                    .is_none_or(|max| drawn_of.get(kind.kind.as_str()).copied().unwrap_or(0) < max)
            });
            let total: u64 = enabled.iter().map(|kind| u64::from(kind.weight)).sum();
            if total == 0 {
                break;
            }
            let mut pick = rng.below(total);
            let kind = *enabled
                .iter()
                .find(|kind| {
                    let hit = pick < u64::from(kind.weight);
                    pick = pick.saturating_sub(u64::from(kind.weight));
                    hit
                })
                .expect("the pick is below the total weight");
            *drawn_of.entry(kind.kind.as_str()).or_default() += 1;
            faults.push(self.draw_fault(kind, &mut rng));
        }
        faults.sort_by_key(|fault| fault.at_ms);
        faults
    }

    fn draw_fault(&self, kind: &KindSpace, rng: &mut ScheduleRng) -> DrawnFault {
        let (low, high) = kind.window_ms.unwrap_or(self.window_ms);
        let at_ms = rng.between(low as i64, high as i64) as u64;
        let fields = kind
            .fields
            .iter()
            .map(|(key, draw)| (key.clone(), self.draw_field(draw, rng)))
            .collect();
        DrawnFault {
            at_ms,
            kind: kind.kind.clone(),
            fields,
        }
    }

    fn draw_field(&self, draw: &FieldDraw, rng: &mut ScheduleRng) -> Value {
        match draw {
            FieldDraw::Fixed(value) => value.clone(),
            FieldDraw::OneOf(values) => values[rng.below(values.len() as u64) as usize].clone(),
            FieldDraw::Integer(low, high) => Value::Integer(rng.between(*low, *high)),
            FieldDraw::Float(low, high) => {
                let hundredths =
                    rng.between((low * 100.0).ceil() as i64, (high * 100.0).floor() as i64);
                Value::Float(hundredths as f64 / 100.0)
            }
            FieldDraw::SplitNodes => {
                let mut nodes = self.nodes.clone();
                for index in (1..nodes.len()).rev() {
                    nodes.swap(index, rng.below(index as u64 + 1) as usize);
                }
                let cut = rng.between(1, nodes.len() as i64 - 1) as usize;
                let group = |names: &[String]| {
                    Value::Array(names.iter().cloned().map(Value::String).collect())
                };
                Value::Array(vec![group(&nodes[..cut]), group(&nodes[cut..])])
            }
        }
    }
}

/// What a fault field holds, which decides how `[explore]` may write it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum FieldShape {
    /// A number of milliseconds or a count: a number or `[low, high]`.
    Integer,
    /// A probability: a number or `[low, high]`.
    Float,
    /// A name: a string or a list of strings to choose from.
    Text,
    /// `[min, max]`: a pair, or a list of pairs to choose from.
    Pair,
    /// Groups of nodes: `[[..], [..]]`, a list of such, or `"random"`.
    Groups,
}

fn shape_of(field: &str) -> FieldShape {
    match field {
        "restart_after_ms" | "recrash_after_ms" | "heal_after_ms" | "count" | "fail_writes"
        | "fail_syncs" => FieldShape::Integer,
        "probability" => FieldShape::Float,
        "fsync_latency_us" | "latency_ms" | "free_bytes" | "offset_ms" => FieldShape::Pair,
        "groups" => FieldShape::Groups,
        _ => FieldShape::Text,
    }
}

fn integer_pair(value: &Value) -> Option<(i64, i64)> {
    match value.as_array()?.as_slice() {
        [Value::Integer(low), Value::Integer(high)] => Some((*low, *high)),
        _ => None,
    }
}

fn number(value: &Value) -> Option<f64> {
    match value {
        Value::Integer(number) => Some(*number as f64),
        Value::Float(number) => Some(*number),
        _ => None,
    }
}

fn is_groups(value: &Value) -> bool {
    value.as_array().is_some_and(|groups| {
        groups.iter().all(|group| {
            group
                .as_array()
                .is_some_and(|names| names.iter().all(Value::is_str))
        })
    })
}

/// How `value` draws a field of `shape`, or why it cannot.
fn field_draw(shape: FieldShape, value: &Value) -> Result<FieldDraw, String> {
    let list = value.as_array().filter(|list| !list.is_empty());
    let draw = match shape {
        FieldShape::Integer => match (value, integer_pair(value)) {
            (Value::Integer(_), _) => Some(FieldDraw::Fixed(value.clone())),
            (_, Some((low, high))) if low <= high => Some(FieldDraw::Integer(low, high)),
            _ => None,
        },
        FieldShape::Float => match (number(value), list.map(Vec::as_slice)) {
            (Some(number), _) => Some(FieldDraw::Fixed(Value::Float(number))),
            (None, Some([low, high])) => match (number(low), number(high)) {
                (Some(low), Some(high)) if low <= high => Some(FieldDraw::Float(low, high)),
                _ => None,
            },
            _ => None,
        },
        FieldShape::Text => match (value, list) {
            (Value::String(_), _) => Some(FieldDraw::Fixed(value.clone())),
            (_, Some(list)) if list.iter().all(Value::is_str) => {
                Some(FieldDraw::OneOf(list.clone()))
            }
            _ => None,
        },
        FieldShape::Pair => match (integer_pair(value), list) {
            (Some(_), _) => Some(FieldDraw::Fixed(value.clone())),
            (None, Some(list)) if list.iter().all(|pair| integer_pair(pair).is_some()) => {
                Some(FieldDraw::OneOf(list.clone()))
            }
            _ => None,
        },
        FieldShape::Groups => match (value.as_str(), list) {
            (Some("random"), _) => Some(FieldDraw::SplitNodes),
            (None, Some(_)) if is_groups(value) => Some(FieldDraw::Fixed(value.clone())),
            (None, Some(list)) if list.iter().all(is_groups) => {
                Some(FieldDraw::OneOf(list.clone()))
            }
            _ => None,
        },
    };
    draw.ok_or_else(|| {
        match shape {
            FieldShape::Integer | FieldShape::Float => "a number or [low, high] with low <= high",
            FieldShape::Text => "a string or a list of strings to choose from",
            FieldShape::Pair => "[min, max] or a list of [min, max] to choose from",
            FieldShape::Groups => {
                "groups of nodes ([[\"a\"], [\"b\", \"c\"]]), a list of such, or \"random\""
            }
        }
        .to_owned()
    })
}

/// What a fault kind may be built from: the nodes, the partitions a selector may name, and the
/// end of the safety phase.
pub(super) struct FaultContext<'a> {
    pub(super) nodes: &'a BTreeSet<String>,
    pub(super) partitions: &'a BTreeSet<String>,
    pub(super) offsets_partitions: i32,
    pub(super) duration_ms: u64,
}

impl<'a> FaultContext<'a> {
    pub(super) fn new(
        nodes: &'a BTreeSet<String>,
        partitions: &'a BTreeSet<String>,
        offsets_partitions: i32,
        duration_ms: u64,
    ) -> FaultContext<'a> {
        FaultContext {
            nodes,
            partitions,
            offsets_partitions,
            duration_ms,
        }
    }
}

/// The space of an `[explore]` table, if the file has one.
pub(super) fn build_optional(
    loader: &Loader<'_>,
    raw: Option<&Spanned<RawExplore>>,
    context: &FaultContext<'_>,
) -> Result<Option<ExploreSpace>, ScenarioError> {
    raw.map(|raw| build_explore(loader, raw, context))
        .transpose()
}

/// Validates `[explore]` into a space.
fn build_explore(
    loader: &Loader<'_>,
    raw: &Spanned<RawExplore>,
    context: &FaultContext<'_>,
) -> Result<ExploreSpace, ScenarioError> {
    let table = raw.get_ref();
    if let Some((key, value)) = table.unknown.first() {
        let message = format!(
            "unknown key '{key}' in [explore] (keys: {}; or a fault kind, as [explore.crash])",
            META_KEYS.join(", ")
        );
        return Err(loader.error_at(value.span(), message));
    }
    let pair = |key: &str, default: (u64, u64)| -> Result<(u64, u64), ScenarioError> {
        let Some(value) = table.meta.get(key) else {
            return Ok(default);
        };
        match (value.get_ref(), integer_pair(value.get_ref())) {
            (Value::Integer(fixed), _) if *fixed >= 0 => Ok((*fixed as u64, *fixed as u64)),
            (_, Some((low, high))) if 0 <= low && low <= high => Ok((low as u64, high as u64)),
            _ => Err(loader.error_at(
                value.span(),
                format!("[explore] {key} is a number or [low, high] with 0 <= low <= high"),
            )),
        }
    };
    let (low, high) = pair(
        "faults",
        (u64::from(FAULTS_DEFAULT.0), u64::from(FAULTS_DEFAULT.1)),
    )?;
    let faults = (low as u32, high.min(u64::from(u32::MAX)) as u32);
    let window_ms = pair("window_ms", (0, context.duration_ms))?;
    check_window(
        loader,
        table
            .meta
            .get("window_ms")
            .map_or(raw.span(), Spanned::span),
        window_ms,
        context,
    )?;
    let swarm = match table.meta.get("swarm") {
        None => SWARM_DEFAULT,
        Some(value) => match number(value.get_ref()) {
            Some(probability) if (0.0..=1.0).contains(&probability) => probability,
            _ => {
                return Err(loader.error_at(
                    value.span(),
                    "[explore] swarm is a probability within 0..=1",
                ))
            }
        },
    };
    if table.kinds.is_empty() {
        return Err(loader.error_at(
            raw.span(),
            "[explore] enables no fault kind (add a table such as [explore.crash])",
        ));
    }
    let kinds = table
        .kinds
        .iter()
        .map(|(kind, fields)| build_kind(loader, kind, fields, context))
        .collect::<Result<Vec<_>, _>>()?;
    Ok(ExploreSpace {
        faults,
        window_ms,
        swarm,
        kinds,
        nodes: context.nodes.iter().cloned().collect(),
    })
}

fn check_window(
    loader: &Loader<'_>,
    span: Range<usize>,
    (_, high): (u64, u64),
    context: &FaultContext<'_>,
) -> Result<(), ScenarioError> {
    if high > context.duration_ms {
        return Err(loader.error_at(
            span,
            format!(
                "[explore] window_ms ends at {high}, after the safety phase (duration_ms {})",
                context.duration_ms
            ),
        ));
    }
    Ok(())
}

fn build_kind(
    loader: &Loader<'_>,
    kind: &str,
    table: &Spanned<BTreeMap<String, Spanned<Value>>>,
    context: &FaultContext<'_>,
) -> Result<KindSpace, ScenarioError> {
    let allowed =
        fields_of(FaultKind::from_name(kind).expect("only fault kinds are parsed as kinds"));
    let mut space = KindSpace {
        kind: kind.to_owned(),
        weight: 1,
        max: None,
        window_ms: None,
        fields: Vec::new(),
    };
    let mut spans = Vec::new();
    for (key, value) in table.get_ref() {
        let error = |message: String| {
            loader.error_at(value.span(), format!("[explore.{kind}] {key}: {message}"))
        };
        match key.as_str() {
            "weight" | "max" => {
                let count = value
                    .get_ref()
                    .as_integer()
                    .filter(|count| (1..=i64::from(u32::MAX)).contains(count))
                    .ok_or_else(|| error("a whole number >= 1".to_owned()))?;
                if key == "weight" {
                    space.weight = count as u32;
                } else {
                    space.max = Some(count as u32);
                }
            }
            "at_ms" => {
                let window = integer_pair(value.get_ref())
                    .filter(|(low, high)| 0 <= *low && low <= high)
                    .ok_or_else(|| error("[low, high] with 0 <= low <= high".to_owned()))?;
                let window = (window.0 as u64, window.1 as u64);
                check_window(loader, value.span(), window, context)?;
                space.window_ms = Some(window);
            }
            field if allowed.contains(&field) => {
                let draw = field_draw(shape_of(field), value.get_ref()).map_err(error)?;
                space.fields.push((key.clone(), draw));
                spans.push(value.span());
            }
            _ => {
                let mut keys: Vec<&str> = allowed.to_vec();
                keys.extend(KIND_META_KEYS);
                return Err(error(format!(
                    "unknown key for a '{kind}' fault (keys: {})",
                    keys.join(", ")
                )));
            }
        }
    }
    check_samples(loader, &space, &spans, table.span(), context)?;
    Ok(space)
}

/// The values a field's draw can take that the loader should see: every choice, both ends of a
/// range.
fn samples(draw: &FieldDraw, nodes: &[String]) -> Vec<Value> {
    match draw {
        FieldDraw::Fixed(value) => vec![value.clone()],
        FieldDraw::OneOf(values) => values.clone(),
        FieldDraw::Integer(low, high) => vec![Value::Integer(*low), Value::Integer(*high)],
        FieldDraw::Float(low, high) => vec![Value::Float(*low), Value::Float(*high)],
        FieldDraw::SplitNodes => {
            let group =
                |names: &[String]| Value::Array(names.iter().cloned().map(Value::String).collect());
            vec![Value::Array(vec![group(&nodes[..1]), group(&nodes[1..])])]
        }
    }
}

/// Builds, with the loader's fault builder, a fault of every value each field can take (the
/// other fields at their first value), so a bad target or a missing field is reported at load
/// time, at the line of the `[explore]` key.
fn check_samples(
    loader: &Loader<'_>,
    space: &KindSpace,
    spans: &[Range<usize>],
    table_span: Range<usize>,
    context: &FaultContext<'_>,
) -> Result<(), ScenarioError> {
    let nodes: Vec<String> = context.nodes.iter().cloned().collect();
    if space
        .fields
        .iter()
        .any(|(_, draw)| *draw == FieldDraw::SplitNodes)
        && nodes.len() < 2
    {
        return Err(loader.error_at(table_span, "groups = \"random\" needs at least two nodes"));
    }
    let all: Vec<Vec<Value>> = space
        .fields
        .iter()
        .map(|(_, draw)| samples(draw, &nodes))
        .collect();
    let first: Vec<Value> = all.iter().map(|values| values[0].clone()).collect();
    let mut cases = vec![(first.clone(), table_span)];
    for (index, values) in all.iter().enumerate() {
        for value in values.iter().skip(1) {
            let mut case = first.clone();
            case[index] = value.clone();
            cases.push((case, spans[index].clone()));
        }
    }
    for (values, span) in cases {
        let fault = DrawnFault {
            at_ms: space.window_ms.map_or(0, |(low, _)| low),
            kind: space.kind.clone(),
            fields: space
                .fields
                .iter()
                .map(|(key, _)| key.clone())
                .zip(values)
                .collect(),
        };
        let text = fault.to_toml();
        let sample = Loader {
            file: loader.file,
            source: &text,
        };
        let built = parse_faults(&sample)
            .and_then(|mut faults| {
                let raw = faults.pop().expect("a drawn fault is one [[faults]] entry");
                build_fault(
                    &sample,
                    &raw,
                    context.nodes,
                    (context.partitions, context.offsets_partitions),
                    context.duration_ms,
                )
            })
            .map_err(|error| error.message);
        if let Err(message) = built {
            return Err(loader.error_at(span, format!("[explore.{}] {message}", space.kind)));
        }
    }
    Ok(())
}

/// Whether `line` is a table header (`[name]` or `[[name]]`), and its name without spaces.
fn header_name(line: &str) -> Option<String> {
    let line = line.trim();
    let line = line
        .split_once('#')
        .map_or(line, |(header, _)| header)
        .trim_end();
    let inner = line
        .strip_prefix("[[")
        .and_then(|rest| rest.strip_suffix("]]"))
        .or_else(|| {
            line.strip_prefix('[')
                .and_then(|rest| rest.strip_suffix(']'))
        })?;
    let name: String = inner.chars().filter(|c| !c.is_whitespace()).collect();
    let bare = |c: char| c.is_ascii_alphanumeric() || c == '_' || c == '-' || c == '.';
    (!name.is_empty() && name.chars().all(bare)).then_some(name)
}

/// `source` without its `[[faults]]` and `[explore]` tables (and the comment lines right above
/// their headers), with `[scenario] seed = seed`.
fn cut_faults_and_explore(source: &str, seed: u64) -> Option<String> {
    let mut out: Vec<String> = Vec::new();
    let mut section = String::new();
    let mut seed_written = false;
    for line in source.lines() {
        if let Some(name) = header_name(line) {
            section = name;
            let dropped =
                section == "faults" || section == "explore" || section.starts_with("explore.");
            if dropped {
                while out
                    .last()
                    .is_some_and(|last| last.trim_start().starts_with('#'))
                {
                    out.pop();
                }
                continue;
            }
            out.push(line.to_owned());
            if section == "scenario" {
                out.push(format!("seed = {seed}"));
                seed_written = true;
            }
            continue;
        }
        let dropped =
            section == "faults" || section == "explore" || section.starts_with("explore.");
        let old_seed = section == "scenario"
            && line
                .split_once('=')
                .is_some_and(|(key, _)| key.trim() == "seed");
        if !dropped && !old_seed {
            out.push(line.to_owned());
        }
    }
    seed_written.then(|| {
        while out.last().is_some_and(|last| last.trim().is_empty()) {
            out.pop();
        }
        out.join("\n") + "\n"
    })
}

/// The scenario a seed of exploration runs: `source` (the explored file) with its `[[faults]]`
/// replaced by `faults` and its `[explore]` removed, pinned to `seed`. Fails if the file is
/// written in a way the cut cannot follow (tables as dotted keys or inline): the result is
/// checked against `source` as TOML values.
pub fn explored_source(source: &str, seed: u64, faults: &[DrawnFault]) -> Result<String, String> {
    let unreadable = "cannot cut [[faults]] and [explore] out of this file (write them, and \
                      [scenario], as table headers)";
    let mut text = cut_faults_and_explore(source, seed).ok_or(unreadable)?;
    let _ = writeln!(
        text,
        "\n# The fault schedule seed {seed} drew from [explore] (it replaces the explored file's \
         [[faults]]).",
    );
    for fault in faults {
        let _ = write!(text, "\n{}", fault.to_toml());
    }
    let parse = |text: &str| toml::from_str::<toml::Table>(text).map_err(|error| error.to_string());
    let mut expected = parse(source)?;
    expected.remove("faults");
    expected.remove("explore");
    if let Some(Value::Table(scenario)) = expected.get_mut("scenario") {
        scenario.insert("seed".to_owned(), Value::Integer(seed as i64));
    }
    let mut got = parse(&text)?;
    let drawn = got
        .remove("faults")
        .and_then(|faults| faults.as_array().map(Vec::len));
    if got != expected || drawn.unwrap_or(0) != faults.len() {
        return Err(unreadable.to_owned());
    }
    Ok(text)
}

#[cfg(madsim)]
pub mod run;
#[cfg(madsim)]
pub use self::run::{explore, parse_budget, parse_seeds, shrink, ExploreOptions, COMMIT};

#[cfg(test)]
mod tests;
