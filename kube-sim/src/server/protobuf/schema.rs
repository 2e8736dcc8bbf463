//! The protobuf schema of the served built-in kinds: for each message, its fields by tag with their
//! Kubernetes JSON names. The table in `schema.txt` is generated (see the `generate` test module)
//! from k8s-pb's message definitions and k8s-openapi's JSON field names.
//!
//! The text format, one item a line: `kind <apiVersion> <Kind> <message>` names the message of a
//! kind; `message <name>` starts a message, whose fields follow as `<tag> <json name> <cardinality>
//! <type>`. The cardinality is `one`, `req` (one, and always written in JSON, even when zero), `many`
//! (repeated) or `map` (a map from string keys to values of the type). The type is a scalar
//! (`string`, `bool`, `int32`, `int64`, `uint32`, `uint64`, `bytes`, `double`, `float`) or a message
//! name such as `api.core.v1.PodSpec`, k8s-pb's module path.

use std::collections::HashMap;
use std::sync::OnceLock;

/// The generated table.
const TEXT: &str = include_str!("schema.txt");

/// How many values a field holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Card {
    /// At most one, left out of JSON when zero.
    One,
    /// Exactly one, written to JSON even when zero.
    Required,
    /// A list.
    Many,
    /// A map from string keys.
    Map,
}

/// One field of a message.
#[derive(Debug, Clone, Copy)]
pub(super) struct Field {
    /// The JSON name, as in the Kubernetes API.
    pub(super) json: &'static str,
    /// How many values it holds.
    pub(super) card: Card,
    /// The scalar type or message name of its values.
    pub(super) ty: &'static str,
}

/// The messages and the kinds they encode.
#[derive(Debug, Default)]
pub(super) struct Schema {
    kinds: HashMap<(&'static str, &'static str), &'static str>,
    messages: HashMap<&'static str, HashMap<u32, Field>>,
}

impl Schema {
    /// The table, read once.
    pub(super) fn get() -> &'static Schema {
        static SCHEMA: OnceLock<Schema> = OnceLock::new();
        SCHEMA.get_or_init(|| Schema::parse(TEXT))
    }

    /// Reads the text form; lines that do not fit the format are skipped (the `generate` test keeps
    /// the table well formed).
    fn parse(text: &'static str) -> Schema {
        let mut schema = Schema::default();
        let mut current: Option<&'static str> = None;
        for line in text.lines().filter(|l| !l.starts_with('#')) {
            let words: Vec<&'static str> = line.split_whitespace().collect();
            match words.as_slice() {
                ["kind", api_version, kind, message] => {
                    schema.kinds.insert((api_version, kind), message);
                }
                ["message", name] => {
                    current = Some(name);
                    schema.messages.entry(name).or_default();
                }
                [tag, json, card, ty] => {
                    let (Some(message), Ok(tag), Some(card)) =
                        (current, tag.parse(), card_of(card))
                    else {
                        continue;
                    };
                    let field = Field { json, card, ty };
                    schema
                        .messages
                        .entry(message)
                        .or_default()
                        .insert(tag, field);
                }
                _ => {}
            }
        }
        schema
    }

    /// The message of a kind at an API version. `DeleteOptions` is sent with the version of the
    /// resource it deletes, so any version finds it.
    pub(super) fn kind(&self, api_version: &str, kind: &str) -> Option<&'static str> {
        let exact = self.kinds.get(&(api_version, kind));
        let any_version = || match kind {
            "DeleteOptions" => self.kinds.get(&("meta.k8s.io/v1", "DeleteOptions")),
            _ => None,
        };
        exact.or_else(any_version).copied()
    }

    /// The fields of a message, by tag.
    pub(super) fn message(&self, name: &str) -> Option<&HashMap<u32, Field>> {
        self.messages.get(name)
    }

    /// The kinds the table knows, as `(apiVersion, kind)`.
    #[cfg(test)]
    pub(super) fn kinds(&self) -> impl Iterator<Item = (&'static str, &'static str)> + '_ {
        self.kinds.keys().copied()
    }
}

fn card_of(word: &str) -> Option<Card> {
    Some(match word {
        "one" => Card::One,
        "req" => Card::Required,
        "many" => Card::Many,
        "map" => Card::Map,
        _ => return None,
    })
}
