//! Checks of single values: names, image references, subnets, paths.

use std::{
    net::Ipv4Addr,
    path::{Path, PathBuf},
};

use ipnet::{Ipv4Net, Ipv6Net};

use super::{check::Check, node_name};

/// The longest hostname label: the node container's hostname must fit.
const MAX_HOSTNAME: usize = 63;

impl Check<'_> {
    /// The node container's hostname, `<name>-server-0`, must be a DNS label.
    /// A `name` that is no label at all is reported by `dns_label` already.
    pub(super) fn node_hostname(&mut self, name: &str) {
        let hostname = node_name(name);
        if is_dns_label(name) && hostname.len() > MAX_HOSTNAME {
            self.problem(
                "name",
                format!(
                    "makes the node's hostname `{hostname}` {} characters long; a hostname holds at most {MAX_HOSTNAME}",
                    hostname.len()
                ),
                format!(
                    "shorten `name` to at most {} characters",
                    MAX_HOSTNAME - (hostname.len() - name.len())
                ),
            );
        }
    }

    pub(super) fn existing_path(
        &mut self,
        key: &str,
        base: &Path,
        rel: &str,
        what: &str,
    ) -> PathBuf {
        let path = lexically_normal(&base.join(rel));
        if !path.exists() {
            self.problem(
                key,
                format!("`{rel}` does not exist (looked for {})", path.display()),
                format!(
                    "point it at {what}; relative paths start at {}",
                    base.display()
                ),
            );
        }
        path
    }

    pub(super) fn dns_label(&mut self, key: &str, value: &str) -> String {
        if !is_dns_label(value) {
            self.problem(
                key,
                format!("`{value}` is not a DNS label"),
                "use lowercase letters, digits and `-` (at most 63, starting and ending alphanumeric)",
            );
        }
        value.to_string()
    }

    pub(super) fn dns_subdomain(&mut self, key: &str, value: &str) -> String {
        let ok = !value.is_empty() && value.len() <= 253 && value.split('.').all(is_dns_label);
        if !ok {
            self.problem(
                key,
                format!("`{value}` is not a valid Kubernetes object name"),
                "use lowercase letters, digits, `-` and `.` (at most 253)",
            );
        }
        value.to_string()
    }

    pub(super) fn docker_name(&mut self, key: &str, value: String) -> String {
        let mut chars = value.chars();
        let ok = chars.next().is_some_and(|c| c.is_ascii_alphanumeric())
            && chars.all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-'));
        if !ok {
            self.problem(
                key,
                format!("`{value}` is not a valid Docker object name"),
                "start with a letter or digit and use only letters, digits, `_`, `.` and `-`",
            );
        }
        value
    }

    pub(super) fn image_ref(&mut self, key: &str, value: String) -> String {
        let ok = !value.is_empty() && !value.chars().any(char::is_whitespace);
        if !ok {
            self.problem(
                key,
                format!("`{value}` is not an image reference"),
                "write a reference such as `docker.io/library/registry:2`",
            );
        }
        value
    }

    pub(super) fn ipv4_subnet(&mut self, key: &str, value: Option<&str>, default: &str) -> Ipv4Net {
        let fallback = Ipv4Net::new(Ipv4Addr::UNSPECIFIED, 32).expect("prefix 32 is valid");
        let text = value.unwrap_or(default);
        match text.parse::<Ipv4Net>() {
            Ok(net) if net.network() != net.addr() => {
                self.problem(
                    key,
                    format!("`{text}` has host bits set"),
                    format!("write the network address: `{}`", net.trunc()),
                );
                net.trunc()
            }
            Ok(net) => net,
            Err(_) => {
                self.problem(
                    key,
                    format!("`{text}` is not an IPv4 subnet"),
                    "write it in CIDR form, such as `192.168.231.0/24`",
                );
                fallback
            }
        }
    }

    pub(super) fn ipv6_subnet(&mut self, key: &str, text: &str) -> Option<Ipv6Net> {
        match text.parse::<Ipv6Net>() {
            Ok(net) if net.network() != net.addr() => {
                self.problem(
                    key,
                    format!("`{text}` has host bits set"),
                    format!("write the network address: `{}`", net.trunc()),
                );
                Some(net.trunc())
            }
            Ok(net) => Some(net),
            Err(_) => {
                self.problem(key, format!("`{text}` is not an IPv6 subnet"), "write it in CIDR form, such as `fd00:dead:beef::/64`, or remove it for an IPv4-only network");
                None
            }
        }
    }

    pub(super) fn disjoint(&mut self, nets: &[(&str, Ipv4Net)]) {
        for (i, &(a_key, a)) in nets.iter().enumerate() {
            for &(b_key, b) in &nets[i + 1..] {
                if a.contains(&b) || b.contains(&a) {
                    // Report at the key the file declares; a default is not
                    // something the user can find in it.
                    let (at, net, other_key, other) =
                        if self.locations.has(b_key) || !self.locations.has(a_key) {
                            (b_key, b, a_key, a)
                        } else {
                            (a_key, a, b_key, b)
                        };
                    let default = if self.locations.has(other_key) {
                        ""
                    } else {
                        ", the default"
                    };
                    self.problem(
                        at,
                        format!("{net} overlaps `{other_key}` ({other}{default})"),
                        "choose subnets that do not overlap: traffic to the shared range would be misrouted",
                    );
                }
            }
        }
    }
}

/// RFC 1123 label: what Kubernetes namespaces and container names accept.
pub fn is_dns_label(s: &str) -> bool {
    let bytes = s.as_bytes();
    !bytes.is_empty()
        && bytes.len() <= 63
        && bytes
            .iter()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || *b == b'-')
        && bytes[0] != b'-'
        && bytes[bytes.len() - 1] != b'-'
}

/// An OCI repository path: lowercase components joined by `/`, each made of
/// alphanumerics separated by `.`, `_`, `__` or `-`.
pub(super) fn is_repository(s: &str) -> bool {
    !s.is_empty()
        && s.split('/').all(|part| {
            let bytes = part.as_bytes();
            !bytes.is_empty()
                && bytes.iter().all(|b| {
                    b.is_ascii_lowercase() || b.is_ascii_digit() || matches!(b, b'.' | b'_' | b'-')
                })
                && bytes[0].is_ascii_alphanumeric()
                && bytes[bytes.len() - 1].is_ascii_alphanumeric()
        })
}

pub(super) fn is_host_port(s: &str) -> bool {
    match s.rsplit_once(':') {
        Some((host, port)) => {
            !host.is_empty() && !host.contains('/') && port.parse::<u16>().is_ok_and(|p| p > 0)
        }
        None => false,
    }
}

/// `path` without `.` and with each `..` taking away the component before
/// it, as the path reads: the same directory is then always named alike
/// (a file watcher reports changes under the name it was given, and a
/// build context named `…/bench/../../demo` would hold no saved file of
/// `…/demo`). Symbolic links are kept as written.
pub(crate) fn lexically_normal(path: &Path) -> PathBuf {
    use std::path::Component;
    let mut out = PathBuf::new();
    for part in path.components() {
        match part {
            Component::CurDir => {}
            Component::ParentDir => {
                let popped =
                    matches!(out.components().next_back(), Some(Component::Normal(_))) && out.pop();
                if !popped {
                    out.push(part);
                }
            }
            other => out.push(other),
        }
    }
    out
}
