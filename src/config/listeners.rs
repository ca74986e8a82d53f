//! Kafka's listener keys: `listeners` and `advertised.listeners` as lists of `NAME://host:port`,
//! `listener.security.protocol.map`, `controller.listener.names` and
//! `inter.broker.listener.name`. They are kept as written while a file is read (the keys may
//! come in any order) and resolved once every key is set ([`ListenerKeys::resolve`]): which
//! entry the broker serves, which one a controller serves, and what clients are told.

use std::collections::BTreeMap;

use super::ConfigError;

/// One listener: where a node binds (or is advertised).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Listener {
    /// Host to bind or advertise; empty means all interfaces (bind) or `localhost` (advertise).
    pub host: String,
    /// TCP port.
    pub port: u16,
}

impl Listener {
    /// `host:port` to bind (an empty host binds every interface).
    pub fn bind_address(&self) -> String {
        let host = if self.host.is_empty() {
            "0.0.0.0"
        } else {
            &self.host
        };
        format!("{host}:{}", self.port)
    }
}

/// What a node runs (`process.roles`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ProcessRole {
    /// A broker.
    #[default]
    Broker,
    /// A controller.
    Controller,
    /// Both in one process (`process.roles=broker,controller`, Kafka's combined mode): a
    /// controller on the listener `controller.listener.names` names, a broker on the other.
    Combined,
}

impl std::fmt::Display for ProcessRole {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            ProcessRole::Broker => "broker",
            ProcessRole::Controller => "controller",
            ProcessRole::Combined => "broker,controller",
        })
    }
}

/// One entry of `listeners` or `advertised.listeners`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NamedListener {
    /// The listener name (`PLAINTEXT`, `CONTROLLER`, ...), upper case.
    pub name: String,
    /// Where.
    pub listener: Listener,
}

/// The security protocols Kafka knows; a listener named after one needs no map entry.
const PROTOCOLS: [&str; 4] = ["PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"];

/// The listener keys as written.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ListenerKeys {
    /// `listeners`, if set.
    pub listeners: Option<Vec<NamedListener>>,
    /// `advertised.listeners`, if set.
    pub advertised: Option<Vec<NamedListener>>,
    /// `listener.security.protocol.map`, if set.
    pub protocol_map: Option<BTreeMap<String, String>>,
    /// `controller.listener.names`.
    pub controller_names: Vec<String>,
    /// `inter.broker.listener.name`, if set.
    pub inter_broker: Option<String>,
}

/// What the keys resolve to for one node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Resolved {
    /// The listener the node's own role serves: the broker's, or a controller-only node's.
    pub served: Listener,
    /// What clients are told about the broker listener, if `advertised.listeners` names it.
    pub advertised: Option<Listener>,
    /// A combined node's controller listener.
    pub controller: Option<Listener>,
}

/// Parses `NAME://host:port[,NAME://host:port...]`.
pub fn parse_list(key: &str, value: &str) -> Result<Vec<NamedListener>, ConfigError> {
    let mut entries: Vec<NamedListener> = Vec::new();
    for entry in value.split(',').map(str::trim).filter(|e| !e.is_empty()) {
        let invalid =
            |reason: &str| ConfigError::invalid(key, value, format!("'{entry}': {reason}"));
        let (name, address) = entry
            .split_once("://")
            .ok_or_else(|| invalid("expected NAME://host:port"))?;
        let name = name.to_ascii_uppercase();
        if name.is_empty() || !name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
            return Err(invalid("a listener name is letters, digits and '_'"));
        }
        let (host, port) = address
            .rsplit_once(':')
            .ok_or_else(|| invalid("missing :port"))?;
        let port = port.parse::<u16>().map_err(|_| invalid("bad port"))?;
        if entries.iter().any(|known| known.name == name) {
            return Err(invalid("the listener name appears twice"));
        }
        entries.push(NamedListener {
            name,
            listener: Listener {
                host: host.trim_matches(['[', ']']).to_owned(),
                port,
            },
        });
    }
    if entries.is_empty() {
        return Err(ConfigError::invalid(
            key,
            value,
            "expected NAME://host:port",
        ));
    }
    Ok(entries)
}

/// Parses `listener.security.protocol.map`: `NAME:PROTOCOL` pairs.
pub fn parse_protocol_map(key: &str, value: &str) -> Result<BTreeMap<String, String>, ConfigError> {
    let mut map = BTreeMap::new();
    for entry in value.split(',').map(str::trim).filter(|e| !e.is_empty()) {
        let (name, protocol) = entry.split_once(':').ok_or_else(|| {
            ConfigError::invalid(key, value, format!("'{entry}': expected NAME:PROTOCOL"))
        })?;
        let protocol = protocol.trim().to_ascii_uppercase();
        if !PROTOCOLS.contains(&protocol.as_str()) {
            return Err(ConfigError::invalid(
                key,
                value,
                format!(
                    "'{entry}': the protocol is one of PLAINTEXT, SSL, SASL_PLAINTEXT, SASL_SSL"
                ),
            ));
        }
        map.insert(name.trim().to_ascii_uppercase(), protocol);
    }
    Ok(map)
}

/// Parses a comma-separated list of listener names.
pub fn parse_names(value: &str) -> Vec<String> {
    value
        .split(',')
        .map(str::trim)
        .filter(|name| !name.is_empty())
        .map(str::to_ascii_uppercase)
        .collect()
}

impl ListenerKeys {
    /// The security protocol of listener `name`: the map's entry; else the name itself when it
    /// is a protocol's; else PLAINTEXT for a controller listener when no map is set (as Kafka
    /// 4 assumes).
    fn protocol(&self, name: &str) -> Result<String, ConfigError> {
        if let Some(protocol) = self.protocol_map.as_ref().and_then(|map| map.get(name)) {
            return Ok(protocol.clone());
        }
        if PROTOCOLS.contains(&name) {
            return Ok(name.to_owned());
        }
        if self.protocol_map.is_none() && self.controller_names.iter().any(|c| c == name) {
            return Ok("PLAINTEXT".to_owned());
        }
        Err(ConfigError::Conflict(format!(
            "listener '{name}' has no security protocol: add {name}:PLAINTEXT to listener.security.protocol.map"
        )))
    }

    /// Checks that a listener the node serves speaks PLAINTEXT, the only protocol seedlog has.
    fn plaintext(&self, entry: &NamedListener) -> Result<(), ConfigError> {
        let protocol = self.protocol(&entry.name)?;
        if protocol == "PLAINTEXT" {
            Ok(())
        } else {
            Err(ConfigError::not_implemented(
                "listeners",
                &format!(
                    "listener '{}' uses security protocol {protocol}; seedlog speaks PLAINTEXT only",
                    entry.name
                ),
            ))
        }
    }

    /// Resolves the keys for a node of `role`. Without `listeners`, the node has one
    /// `PLAINTEXT` listener, `default`.
    pub fn resolve(&self, role: ProcessRole, default: &Listener) -> Result<Resolved, ConfigError> {
        let defaults = [NamedListener {
            name: "PLAINTEXT".to_owned(),
            listener: default.clone(),
        }];
        let entries = self.listeners.as_deref().unwrap_or(&defaults);
        let controller = self.controller_entry(role, entries)?;
        let Some(entry) = self.broker_entry(role, controller.is_some(), entries)? else {
            // A controller-only node with controller.listener.names serves that listener.
            let served = controller.expect("a controller listener").listener.clone();
            return Ok(Resolved {
                served,
                advertised: None,
                controller: None,
            });
        };
        Ok(Resolved {
            served: entry.listener.clone(),
            advertised: self.advertised_for(entry, entries)?,
            controller: controller
                .filter(|_| role == ProcessRole::Combined)
                .map(|entry| entry.listener.clone()),
        })
    }

    /// The controller listener a node of `role` serves, if any.
    fn controller_entry<'a>(
        &self,
        role: ProcessRole,
        entries: &'a [NamedListener],
    ) -> Result<Option<&'a NamedListener>, ConfigError> {
        let Some(name) = self.controller_names.first() else {
            if role == ProcessRole::Combined {
                return Err(ConfigError::Conflict(
                    "process.roles=broker,controller needs controller.listener.names (which entry of listeners the controller serves)"
                        .to_owned(),
                ));
            }
            // A controller-only node without it serves its one listener, as a broker would.
            return Ok(None);
        };
        if role == ProcessRole::Broker {
            if let Some(entry) = entries
                .iter()
                .find(|e| self.controller_names.contains(&e.name))
            {
                return Err(ConfigError::Conflict(format!(
                    "listeners holds the controller listener '{}' (controller.listener.names), but process.roles=broker runs no controller",
                    entry.name
                )));
            }
            return Ok(None);
        }
        let entry = entries.iter().find(|e| &e.name == name).ok_or_else(|| {
            ConfigError::Conflict(format!(
                "controller.listener.names names '{name}', which listeners does not hold"
            ))
        })?;
        self.plaintext(entry)?;
        Ok(Some(entry))
    }

    /// The broker listener a node serves: `None` for a controller-only node that serves its
    /// controller listener.
    fn broker_entry<'a>(
        &self,
        role: ProcessRole,
        has_controller: bool,
        entries: &'a [NamedListener],
    ) -> Result<Option<&'a NamedListener>, ConfigError> {
        let brokers: Vec<&NamedListener> = entries
            .iter()
            .filter(|e| !self.controller_names.contains(&e.name))
            .collect();
        if role == ProcessRole::Controller && has_controller {
            return match brokers.first() {
                Some(entry) => Err(ConfigError::Conflict(format!(
                    "process.roles=controller serves only controller listeners; '{}' is not in controller.listener.names",
                    entry.name
                ))),
                None => Ok(None),
            };
        }
        let entry = match brokers.as_slice() {
            [] => {
                return Err(ConfigError::Conflict(
                    "listeners holds no broker listener (every entry is a controller listener)"
                        .to_owned(),
                ))
            }
            [entry] => *entry,
            [..] => {
                return Err(ConfigError::not_implemented(
                    "listeners",
                    "seedlog serves exactly one broker listener",
                ))
            }
        };
        if let Some(inter) = &self.inter_broker {
            if inter != &entry.name {
                return Err(ConfigError::Conflict(format!(
                    "inter.broker.listener.name={inter} is not the broker listener of listeners ('{}')",
                    entry.name
                )));
            }
        }
        self.plaintext(entry)?;
        Ok(Some(entry))
    }

    /// The `advertised.listeners` entry of the broker listener `entry`, if any.
    fn advertised_for(
        &self,
        entry: &NamedListener,
        entries: &[NamedListener],
    ) -> Result<Option<Listener>, ConfigError> {
        let Some(advertised) = &self.advertised else {
            return Ok(None);
        };
        if let Some(unknown) = advertised
            .iter()
            .find(|a| !entries.iter().any(|e| e.name == a.name))
        {
            return Err(ConfigError::Conflict(format!(
                "advertised.listeners names '{}', which listeners does not hold",
                unknown.name
            )));
        }
        Ok(advertised
            .iter()
            .find(|a| a.name == entry.name)
            .map(|a| a.listener.clone()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const DEFAULT: Listener = Listener {
        host: String::new(),
        port: 9092,
    };

    fn keys(listeners: &str) -> ListenerKeys {
        ListenerKeys {
            listeners: Some(parse_list("listeners", listeners).expect("parses")),
            ..ListenerKeys::default()
        }
    }

    #[test]
    fn a_combined_node_serves_the_broker_and_the_controller_listener() {
        let mut keys = keys("PLAINTEXT://:9092,CONTROLLER://:9093");
        keys.controller_names = vec!["CONTROLLER".to_owned()];
        keys.protocol_map = Some(
            parse_protocol_map("m", "CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT,SSL:SSL")
                .expect("map"),
        );
        let resolved = keys
            .resolve(ProcessRole::Combined, &DEFAULT)
            .expect("valid");
        assert_eq!(resolved.served.port, 9092);
        assert_eq!(resolved.controller.expect("controller").port, 9093);
        // The same keys on a broker-only node hold a listener it does not serve.
        assert!(keys.resolve(ProcessRole::Broker, &DEFAULT).is_err());
        // Without controller.listener.names a combined node cannot tell the two apart.
        keys.controller_names.clear();
        assert!(keys.resolve(ProcessRole::Combined, &DEFAULT).is_err());
    }

    #[test]
    fn a_controller_only_node_serves_its_controller_listener() {
        let mut keys = keys("CONTROLLER://127.0.0.1:9093");
        keys.controller_names = vec!["CONTROLLER".to_owned()];
        let resolved = keys
            .resolve(ProcessRole::Controller, &DEFAULT)
            .expect("valid");
        assert_eq!(resolved.served.bind_address(), "127.0.0.1:9093");
        // A broker listener on a controller-only node is Kafka's error too.
        let mut both = self::keys("PLAINTEXT://:9092,CONTROLLER://:9093");
        both.controller_names = vec!["CONTROLLER".to_owned()];
        assert!(both.resolve(ProcessRole::Controller, &DEFAULT).is_err());
    }

    #[test]
    fn bad_listener_lists_say_what_is_wrong() {
        let error = parse_list("listeners", "PLAINTEXT://:1,PLAINTEXT://:2").expect_err("twice");
        assert!(error.to_string().contains("appears twice"), "{error}");
        assert!(parse_list("listeners", "localhost:9092").is_err());
        assert!(parse_protocol_map("m", "A:TLS").is_err());
        let error = keys("SSL://:9092")
            .resolve(ProcessRole::Broker, &DEFAULT)
            .expect_err("ssl");
        assert!(error.to_string().contains("PLAINTEXT only"), "{error}");
        let error = keys("PLAINTEXT://:1,OTHER://:2")
            .resolve(ProcessRole::Broker, &DEFAULT)
            .expect_err("two broker listeners");
        assert!(
            error.to_string().contains("exactly one broker listener"),
            "{error}"
        );
        let mut inter = keys("PLAINTEXT://:1");
        inter.inter_broker = Some("INTERNAL".to_owned());
        assert!(inter.resolve(ProcessRole::Broker, &DEFAULT).is_err());
    }

    #[test]
    fn advertised_listeners_pick_the_broker_listener_by_name() {
        let mut keys = keys("PLAINTEXT://:9092,CONTROLLER://:9093");
        keys.controller_names = vec!["CONTROLLER".to_owned()];
        keys.advertised = Some(
            parse_list(
                "a",
                "PLAINTEXT://broker.example:9092,CONTROLLER://broker.example:9093",
            )
            .expect("parses"),
        );
        let resolved = keys
            .resolve(ProcessRole::Combined, &DEFAULT)
            .expect("valid");
        assert_eq!(
            resolved.advertised.expect("advertised").host,
            "broker.example"
        );
        keys.advertised = Some(parse_list("a", "EXTERNAL://x:1").expect("parses"));
        assert!(keys.resolve(ProcessRole::Combined, &DEFAULT).is_err());
    }
}
