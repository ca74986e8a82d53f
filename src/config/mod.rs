//! Typed, validated configs with Kafka's key names and defaults.
//!
//! Every config is set from `(key, value)` string pairs, the way Kafka receives them: from a
//! `server.properties`-style file ([`parse_properties`]), from CreateTopics config entries, or
//! from a scenario file. Unknown keys are rejected; Kafka keys that seedlog does not implement
//! yet are rejected with a message saying so, never silently ignored. A few broker keys that
//! Kafka's own `server.properties` sets and that would change nothing here (thread counts,
//! socket buffers, the internal topics of features seedlog lacks) are kept in
//! `BrokerConfig::without_effect`, and the broker logs each at start-up.

pub mod broker;
pub mod consumer;
pub mod listeners;
pub mod producer;
pub mod topic;

use std::str::FromStr;

pub use broker::BrokerConfig;
pub use consumer::{AutoOffsetReset, ConsumerConfig, IsolationLevel};
pub use producer::{Acks, ProducerConfig};
pub use topic::TopicConfig;

/// Why a config was rejected.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConfigError {
    /// Not a Kafka config for this component.
    #[error("unknown config '{key}'")]
    Unknown {
        /// The key.
        key: String,
    },
    /// A Kafka config that seedlog does not implement yet.
    #[error("'{key}' is a Kafka config that seedlog does not implement yet{hint}")]
    NotImplemented {
        /// The key.
        key: String,
        /// Extra explanation, starting with "; " or empty.
        hint: String,
    },
    /// The value does not parse or is out of range.
    #[error("invalid value '{value}' for '{key}': {reason}")]
    Invalid {
        /// The key.
        key: String,
        /// The value.
        value: String,
        /// Why.
        reason: String,
    },
    /// Two settings contradict each other (Kafka's cross-field rules).
    #[error("{0}")]
    Conflict(String),
    /// A problem at a line of a properties file.
    #[error("line {line}: {error}")]
    AtLine {
        /// 1-based line number.
        line: usize,
        /// The problem.
        error: Box<ConfigError>,
    },
}

impl ConfigError {
    pub(crate) fn invalid(key: &str, value: &str, reason: impl Into<String>) -> ConfigError {
        ConfigError::Invalid {
            key: key.to_owned(),
            value: value.to_owned(),
            reason: reason.into(),
        }
    }

    pub(crate) fn unknown(key: &str) -> ConfigError {
        ConfigError::Unknown {
            key: key.to_owned(),
        }
    }

    pub(crate) fn not_implemented(key: &str, hint: &str) -> ConfigError {
        let hint = if hint.is_empty() {
            String::new()
        } else {
            format!("; {hint}")
        };
        ConfigError::NotImplemented {
            key: key.to_owned(),
            hint,
        }
    }
}

/// A config that can be built from Kafka-style key/value pairs.
pub trait Configurable {
    /// Sets one key. Unknown keys and bad values are errors.
    fn set(&mut self, key: &str, value: &str) -> Result<(), ConfigError>;
    /// Kafka's cross-field rules, checked once every key is set.
    fn validate(&mut self) -> Result<(), ConfigError>;

    /// The pairs a key stands for, if it is a preset (seedlog's `seedlog.preset`): they are
    /// applied before every other key, so that the keys written beside a preset override it
    /// wherever they stand. `None`: an ordinary key.
    fn preset(
        &self,
        _key: &str,
        _value: &str,
    ) -> Option<Result<Vec<(String, String)>, ConfigError>> {
        None
    }

    /// Applies `pairs` (presets first, then the rest in order), then validates.
    fn apply<'a>(
        &mut self,
        pairs: impl IntoIterator<Item = (&'a str, &'a str)>,
    ) -> Result<(), ConfigError> {
        let pairs: Vec<(&str, &str)> = pairs.into_iter().collect();
        for (key, value) in &pairs {
            if let Some(expanded) = self.preset(key, value) {
                for (key, value) in expanded? {
                    self.set(&key, &value)?;
                }
            }
        }
        for (key, value) in pairs {
            self.set(key, value)?;
        }
        self.validate()
    }
}

/// Parses an integer with an inclusive lower bound, reporting Kafka-style messages.
pub(crate) fn parse_at_least<T>(key: &str, value: &str, min: T) -> Result<T, ConfigError>
where
    T: FromStr + PartialOrd + std::fmt::Display + Copy,
{
    let parsed = value
        .trim()
        .parse::<T>()
        .map_err(|_| ConfigError::invalid(key, value, "expected an integer"))?;
    if parsed < min {
        return Err(ConfigError::invalid(
            key,
            value,
            format!("value must be at least {min}"),
        ));
    }
    Ok(parsed)
}

/// A ratio in `0.0..=1.0` (Kafka's `DOUBLE` configs bounded by `Range.between(0, 1)`), compared
/// by its bits so that configs holding one stay `Eq`.
#[derive(Debug, Clone, Copy)]
pub struct Ratio(pub f64);

impl PartialEq for Ratio {
    fn eq(&self, other: &Ratio) -> bool {
        self.0.to_bits() == other.0.to_bits()
    }
}

impl Eq for Ratio {}

impl std::fmt::Display for Ratio {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.0)
    }
}

/// Parses a double between 0 and 1 inclusive, with Kafka's `Range.between` messages.
pub(crate) fn parse_ratio(key: &str, value: &str) -> Result<Ratio, ConfigError> {
    let parsed = value
        .trim()
        .parse::<f64>()
        .ok()
        .filter(|parsed| !parsed.is_nan())
        .ok_or_else(|| ConfigError::invalid(key, value, "expected a number"))?;
    if parsed < 0.0 {
        return Err(ConfigError::invalid(
            key,
            value,
            "value must be no less than 0",
        ));
    }
    if parsed > 1.0 {
        return Err(ConfigError::invalid(
            key,
            value,
            "value must be no more than 1",
        ));
    }
    Ok(Ratio(parsed))
}

/// Parses a `bootstrap.servers` list (`host:port,host:port`).
pub(crate) fn parse_servers(value: &str) -> Vec<String> {
    value
        .split(',')
        .map(|server| server.trim().to_owned())
        .filter(|server| !server.is_empty())
        .collect()
}

/// The first of `bootstrap.servers`, which a client needs to start.
pub fn first_bootstrap_server(servers: &[String]) -> Result<String, ConfigError> {
    servers.first().cloned().ok_or_else(|| {
        ConfigError::invalid(
            "bootstrap.servers",
            "",
            "at least one host:port is required",
        )
    })
}

/// Parses `true`/`false` (case-insensitive, as Kafka's `ConfigDef` does).
pub(crate) fn parse_bool(key: &str, value: &str) -> Result<bool, ConfigError> {
    match value.trim().to_ascii_lowercase().as_str() {
        "true" => Ok(true),
        "false" => Ok(false),
        _ => Err(ConfigError::invalid(key, value, "expected true or false")),
    }
}

/// One `key=value` line of a properties file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Property {
    /// 1-based line number.
    pub line: usize,
    /// The key.
    pub key: String,
    /// The value, trimmed.
    pub value: String,
}

/// Parses Java-properties-style text (`key=value` or `key: value`, `#`/`!` comments, blank
/// lines). Line continuations are not supported and are reported as errors.
pub fn parse_properties(text: &str) -> Result<Vec<Property>, ConfigError> {
    let mut properties = Vec::new();
    for (index, raw) in text.lines().enumerate() {
        let line = index + 1;
        let trimmed = raw.trim();
        if trimmed.is_empty() || trimmed.starts_with('#') || trimmed.starts_with('!') {
            continue;
        }
        let at_line = |error| ConfigError::AtLine {
            line,
            error: Box::new(error),
        };
        if trimmed.ends_with('\\') {
            return Err(at_line(ConfigError::Conflict(
                "line continuations are not supported".into(),
            )));
        }
        let Some(split) = trimmed.find(['=', ':']) else {
            return Err(at_line(ConfigError::Conflict(format!(
                "expected key=value, found '{trimmed}'"
            ))));
        };
        let key = trimmed[..split].trim();
        if key.is_empty() {
            return Err(at_line(ConfigError::Conflict("empty key".into())));
        }
        properties.push(Property {
            line,
            key: key.to_owned(),
            value: trimmed[split + 1..].trim().to_owned(),
        });
    }
    Ok(properties)
}

/// Applies parsed properties to `config`, attaching line numbers to errors.
pub fn apply_properties<C: Configurable>(
    config: &mut C,
    properties: &[Property],
) -> Result<(), ConfigError> {
    let at_line = |line: usize| {
        move |error: ConfigError| ConfigError::AtLine {
            line,
            error: Box::new(error),
        }
    };
    for property in properties {
        if let Some(expanded) = config.preset(&property.key, &property.value) {
            for (key, value) in expanded.map_err(at_line(property.line))? {
                config.set(&key, &value).map_err(at_line(property.line))?;
            }
        }
    }
    for property in properties {
        config
            .set(&property.key, &property.value)
            .map_err(at_line(property.line))?;
    }
    config.validate()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn properties_parse_with_line_numbers_and_reject_garbage() {
        let text = "# comment\n\nnode.id=3\nlisteners : PLAINTEXT://127.0.0.1:9092\n! other\n";
        let parsed = parse_properties(text).expect("parses");
        assert_eq!(parsed.len(), 2);
        assert_eq!(
            parsed[1],
            Property {
                line: 4,
                key: "listeners".into(),
                value: "PLAINTEXT://127.0.0.1:9092".into()
            }
        );
        let error = parse_properties("a=1\njunk line\n").expect_err("garbage");
        assert_eq!(
            error.to_string(),
            "line 2: expected key=value, found 'junk line'"
        );
    }

    #[test]
    fn integer_bounds_are_enforced() {
        assert_eq!(parse_at_least("x", "5", 1_i64), Ok(5));
        assert!(parse_at_least("x", "0", 1_i64).is_err());
        assert!(parse_at_least("x", "five", 1_i64).is_err());
        assert_eq!(parse_bool("b", "TRUE"), Ok(true));
        assert!(parse_bool("b", "yes").is_err());
    }
}
