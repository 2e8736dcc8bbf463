//! Where each key of a YAML document sits, so that errors found after
//! deserialization still name `file:line:col`.
//!
//! serde_yaml reports positions only for its own parse and type errors; the
//! checks that run on typed values (subnets, names, paths) look their key up
//! here by its dotted path (`components.worker.rollout.kind`, `manifests[1]`),
//! the same spelling serde_yaml uses in its messages.

use std::collections::{HashMap, hash_map::Entry};

use saphyr_parser::{Event, Parser};

/// A 1-based line and column.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Location {
    pub line: usize,
    pub column: usize,
}

/// Key and value positions of every node of the first document, by path.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Locations {
    keys: HashMap<String, Location>,
    values: HashMap<String, Location>,
    /// The first key that repeats a key of the same map, at the repetition.
    duplicate: Option<(String, Location)>,
}

enum Frame {
    Map {
        path: String,
        pending_key: Option<String>,
    },
    Seq {
        path: String,
        next: usize,
    },
}

impl Locations {
    /// Indexes `text`. A document that does not parse yields an empty index:
    /// serde_yaml reports that error with its own position first.
    pub(crate) fn index(text: &str) -> Locations {
        let mut locations = Locations::default();
        let mut stack: Vec<Frame> = Vec::new();
        for item in Parser::new_from_str(text) {
            let Ok((event, span)) = item else { break };
            let here = Location {
                line: span.start.line(),
                column: span.start.col() + 1,
            };
            // Decide the path of this node when it is a value.
            let value_path = match stack.last_mut() {
                Some(Frame::Map { path, pending_key }) => match pending_key.take() {
                    Some(key) => Some(join(path, &key)),
                    None => {
                        // This node is a key.
                        if let Event::Scalar(key, ..) = &event {
                            let key = key.to_string();
                            let full = join(path, &key);
                            match locations.keys.entry(full) {
                                // The first position stays: later lookups
                                // name the key as serde_yaml would read it.
                                Entry::Occupied(first) => {
                                    let key = first.key().clone();
                                    locations.duplicate.get_or_insert((key, here));
                                }
                                Entry::Vacant(slot) => {
                                    slot.insert(here);
                                }
                            }
                            *pending_key = Some(key);
                        } else {
                            // Complex keys are not used by the config; keep the
                            // map balanced by treating the next node as a value.
                            *pending_key = Some(String::from("?"));
                        }
                        None
                    }
                },
                Some(Frame::Seq { path, next }) => {
                    let p = format!("{path}[{next}]");
                    *next += 1;
                    Some(p)
                }
                None => Some(String::new()),
            };
            match event {
                Event::MappingStart(..) => {
                    let path = value_path.clone().unwrap_or_default();
                    if let Some(p) = &value_path {
                        locations.values.entry(p.clone()).or_insert(here);
                    }
                    stack.push(Frame::Map {
                        path,
                        pending_key: None,
                    });
                }
                Event::SequenceStart(..) => {
                    let path = value_path.clone().unwrap_or_default();
                    if let Some(p) = &value_path {
                        locations.values.entry(p.clone()).or_insert(here);
                    }
                    stack.push(Frame::Seq { path, next: 0 });
                }
                Event::MappingEnd | Event::SequenceEnd => {
                    stack.pop();
                }
                Event::Scalar(..) | Event::Alias(..) => {
                    if let Some(p) = value_path {
                        locations.values.entry(p).or_insert(here);
                    }
                }
                Event::DocumentEnd => break,
                _ => {}
            }
        }
        locations
    }

    /// The position of the key at `path`, or failing that of the nearest
    /// enclosing key, or the start of the file.
    pub(crate) fn key(&self, path: &str) -> Location {
        let mut p = path;
        loop {
            if let Some(loc) = self.keys.get(p) {
                return *loc;
            }
            match p.rfind(['.', '[']) {
                Some(i) => p = &p[..i],
                None => return Location { line: 1, column: 1 },
            }
        }
    }

    /// The first key declared twice in one map, by path, at its second
    /// occurrence.
    pub(crate) fn duplicate(&self) -> Option<(&str, Location)> {
        self.duplicate.as_ref().map(|(key, at)| (key.as_str(), *at))
    }

    /// Whether the document spells out the key at `path`.
    pub(crate) fn has(&self, path: &str) -> bool {
        self.keys.contains_key(path)
    }

    /// The position of the value at `path`, falling back to its key.
    pub(crate) fn value(&self, path: &str) -> Location {
        self.values
            .get(path)
            .copied()
            .unwrap_or_else(|| self.key(path))
    }
}

fn join(parent: &str, key: &str) -> String {
    if parent.is_empty() {
        key.to_string()
    } else {
        format!("{parent}.{key}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_and_values_are_found_by_path() {
        let text = "name: demo\ncomponents:\n  worker:\n    image: w\nmanifests:\n  - a\n  - b\n";
        let loc = Locations::index(text);
        assert_eq!(loc.key("name"), Location { line: 1, column: 1 });
        assert_eq!(
            loc.key("components.worker"),
            Location { line: 3, column: 3 }
        );
        assert_eq!(
            loc.value("components.worker.image"),
            Location {
                line: 4,
                column: 12
            }
        );
        assert_eq!(loc.value("manifests[1]"), Location { line: 7, column: 5 });
        // Unknown paths fall back to the nearest enclosing key.
        assert_eq!(
            loc.key("components.worker.build.cargo"),
            Location { line: 3, column: 3 }
        );
        assert_eq!(loc.key("nothing"), Location { line: 1, column: 1 });
    }
}
