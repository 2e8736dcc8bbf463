//! `components.<name>.forward`: the ports a component's pods are reached
//! on from this machine, `[localPort:]containerPort`, each bound on
//! 127.0.0.1.

use std::{collections::BTreeMap, fmt, str::FromStr};

use serde::Deserialize;

use super::check::Check;

/// One forwarded port: `local` on 127.0.0.1 to `remote` in the pod.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct PortForward {
    pub local: u16,
    pub remote: u16,
}

impl fmt::Display for PortForward {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "127.0.0.1:{} -> {}", self.local, self.remote)
    }
}

impl FromStr for PortForward {
    type Err = String;

    /// `8080` (the same port on both sides) or `19090:9090` (local first).
    fn from_str(s: &str) -> Result<PortForward, String> {
        let port = |text: &str, side: &str| match text.trim().parse::<u16>() {
            Ok(0) => Err(format!("the {side} port is 0; give a port from 1 to 65535")),
            Ok(p) => Ok(p),
            Err(_) => Err(format!(
                "`{text}` is not a {side} port; give a number from 1 to 65535"
            )),
        };
        match s.split_once(':') {
            Some((local, remote)) => Ok(PortForward {
                local: port(local, "local")?,
                remote: port(remote, "container")?,
            }),
            None => {
                let p = port(s, "container")?;
                Ok(PortForward {
                    local: p,
                    remote: p,
                })
            }
        }
    }
}

/// A port as written: a bare number or a `local:remote` string.
#[derive(Debug, Deserialize)]
#[serde(untagged)]
pub(super) enum RawPort {
    Number(u64),
    Text(String),
}

impl RawPort {
    fn text(&self) -> String {
        match self {
            RawPort::Number(n) => n.to_string(),
            RawPort::Text(t) => t.clone(),
        }
    }
}

impl Check<'_> {
    /// The forwards of component `component`, each checked; a local port
    /// that an earlier forward (of any component) already binds is a
    /// problem too, as both could never be listening.
    pub(super) fn forwards(
        &mut self,
        component: &str,
        raw: &[RawPort],
        taken: &mut BTreeMap<u16, String>,
    ) -> Vec<PortForward> {
        let mut forwards = Vec::new();
        for (i, port) in raw.iter().enumerate() {
            let key = format!("components.{component}.forward[{i}]");
            match port.text().parse::<PortForward>() {
                Ok(forward) => match taken.get(&forward.local) {
                    Some(owner) => self.problem(
                        &key,
                        format!(
                            "local port {} is already forwarded for `{owner}`",
                            forward.local
                        ),
                        "give each forward a local port of its own: `<localPort>:<containerPort>`",
                    ),
                    None => {
                        taken.insert(forward.local, component.to_string());
                        forwards.push(forward);
                    }
                },
                Err(message) => self.problem(
                    &key,
                    message,
                    "write `<containerPort>` or `<localPort>:<containerPort>`, such as `8080` or `18080:8080`",
                ),
            }
        }
        forwards
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ports_parse_with_and_without_a_local_port() {
        assert_eq!(
            "8080".parse(),
            Ok(PortForward {
                local: 8080,
                remote: 8080
            })
        );
        assert_eq!(
            "19090:9090".parse(),
            Ok(PortForward {
                local: 19090,
                remote: 9090
            })
        );
        assert!("0".parse::<PortForward>().unwrap_err().contains("0"));
        assert!("70000".parse::<PortForward>().is_err());
        assert!("a:80".parse::<PortForward>().unwrap_err().contains("`a`"));
        assert!("80:".parse::<PortForward>().is_err());
    }
}
