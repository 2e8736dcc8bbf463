//! Image references as containerd reads them (`github.com/distribution/reference`): validation and
//! normalisation, so `nginx` is `docker.io/library/nginx:latest` and `localhost:5000/x@sha256:…` keeps its
//! registry and digest.

/// The registry of names without one.
pub const DEFAULT_DOMAIN: &str = "docker.io";

/// A reference that is not a valid image name.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("couldn't parse image reference \"{reference}\": {reason}")]
pub struct InvalidReference {
    /// The reference as written.
    pub reference: String,
    /// Why it is invalid, in the words of the reference parser.
    pub reason: &'static str,
}

/// A parsed, normalised image reference.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reference {
    /// The registry host, with port: `docker.io`, `localhost:5000`.
    pub domain: String,
    /// The repository path: `library/nginx`, `team/app`.
    pub path: String,
    /// The tag, if one was written.
    pub tag: Option<String>,
    /// The digest (`sha256:<hex>`), if one was written.
    pub digest: Option<String>,
}

impl Reference {
    /// Parses and normalises a reference (`ParseNormalizedNamed`).
    pub fn parse(s: &str) -> Result<Reference, InvalidReference> {
        let invalid = |reason| InvalidReference {
            reference: s.to_string(),
            reason,
        };
        if s.is_empty() {
            return Err(invalid("invalid reference format"));
        }
        let (rest, digest) = match s.split_once('@') {
            Some((r, d)) => (r, Some(d)),
            None => (s, None),
        };
        if let Some(d) = digest
            && !valid_digest(d)
        {
            return Err(invalid("invalid reference format"));
        }
        // The tag is after the last ':' that follows the last '/'.
        let last_slash = rest.rfind('/').map(|i| i + 1).unwrap_or(0);
        let (name, tag) = match rest[last_slash..].rfind(':') {
            Some(i) => (&rest[..last_slash + i], Some(&rest[last_slash + i + 1..])),
            None => (rest, None),
        };
        if let Some(t) = tag
            && !valid_tag(t)
        {
            return Err(invalid("invalid reference format"));
        }
        let (domain, path) = match name.split_once('/') {
            Some((first, remainder))
                if first.contains(['.', ':'])
                    || first == "localhost"
                    || first.to_lowercase() != first =>
            {
                (first.to_string(), remainder.to_string())
            }
            _ => (DEFAULT_DOMAIN.to_string(), name.to_string()),
        };
        if !valid_domain(&domain) {
            return Err(invalid("invalid reference format"));
        }
        if path.to_lowercase() != path {
            return Err(invalid(
                "invalid reference format: repository name (library/Nginx) must be lowercase",
            ));
        }
        if path.is_empty() || !path.split('/').all(valid_component) {
            return Err(invalid("invalid reference format"));
        }
        let domain = if domain == "index.docker.io" {
            DEFAULT_DOMAIN.to_string()
        } else {
            domain
        };
        let path = if domain == DEFAULT_DOMAIN && !path.contains('/') {
            format!("library/{path}")
        } else {
            path
        };
        if domain.len() + 1 + path.len() > 255 {
            return Err(invalid(
                "repository name must not be more than 255 characters",
            ));
        }
        Ok(Reference {
            domain,
            path,
            tag: tag.map(str::to_string),
            digest: digest.map(str::to_string),
        })
    }

    /// The normalised repository name: `docker.io/library/nginx`.
    pub fn name(&self) -> String {
        format!("{}/{}", self.domain, self.path)
    }

    /// The tag or digest to ask the registry for: the digest when both are written (containerd drops the
    /// tag then), `latest` when neither is.
    pub fn lookup(&self) -> &str {
        self.digest
            .as_deref()
            .or(self.tag.as_deref())
            .unwrap_or("latest")
    }

    /// The image as the container runtime reports it in `containerStatuses[].image`: the normalised name
    /// with its tag, or with its digest when pinned.
    pub fn familiar_with_tag(&self) -> String {
        match (&self.digest, &self.tag) {
            (Some(d), _) => format!("{}@{d}", self.name()),
            (None, Some(t)) => format!("{}:{t}", self.name()),
            (None, None) => format!("{}:latest", self.name()),
        }
    }

    /// The repo digest containerd records at pull time and reports as `imageID`: a pinned digest is kept,
    /// otherwise the resolved manifest (or index) digest.
    pub fn image_id(&self, resolved_digest: &str) -> String {
        let digest = self.digest.as_deref().unwrap_or(resolved_digest);
        format!("{}@{digest}", self.name())
    }
}

fn valid_digest(d: &str) -> bool {
    let Some((alg, hex)) = d.split_once(':') else {
        return false;
    };
    !alg.is_empty()
        && alg.starts_with(|c: char| c.is_ascii_alphabetic())
        && alg
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_+.".contains(c))
        && hex.len() >= 32
        && hex.chars().all(|c| c.is_ascii_hexdigit())
        && (alg != "sha256" || (hex.len() == 64 && hex.chars().all(|c| !c.is_ascii_uppercase())))
}

fn valid_tag(t: &str) -> bool {
    !t.is_empty()
        && t.len() <= 128
        && t.starts_with(|c: char| c.is_ascii_alphanumeric() || c == '_')
        && t.chars()
            .all(|c| c.is_ascii_alphanumeric() || "_.-".contains(c))
}

fn valid_domain(d: &str) -> bool {
    let (host, port) = match d.rsplit_once(':') {
        Some((h, p)) if !h.contains(']') || h.ends_with(']') => (h, Some(p)),
        _ => (d, None),
    };
    if let Some(p) = port
        && (p.is_empty() || !p.chars().all(|c| c.is_ascii_digit()))
    {
        return false;
    }
    if host.starts_with('[') && host.ends_with(']') {
        return host.len() > 2;
    }
    !host.is_empty()
        && host.split('.').all(|label| {
            !label.is_empty()
                && label.chars().all(|c| c.is_ascii_alphanumeric() || c == '-')
                && !label.starts_with('-')
                && !label.ends_with('-')
        })
}

/// A path component: lowercase alphanumerics joined by `.`, `_`, `__` or runs of `-`.
fn valid_component(c: &str) -> bool {
    let b = c.as_bytes();
    if b.is_empty() || !is_alnum(b[0]) || !is_alnum(b[b.len() - 1]) {
        return false;
    }
    let mut i = 0;
    while i < b.len() {
        if is_alnum(b[i]) {
            i += 1;
            continue;
        }
        let start = i;
        while i < b.len() && !is_alnum(b[i]) {
            i += 1;
        }
        let sep = &c[start..i];
        let ok = sep == "." || sep == "_" || sep == "__" || sep.bytes().all(|x| x == b'-');
        if !ok {
            return false;
        }
    }
    true
}

fn is_alnum(b: u8) -> bool {
    b.is_ascii_lowercase() || b.is_ascii_digit()
}

#[cfg(test)]
mod tests {
    use super::*;

    const D: &str = "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";

    #[test]
    fn short_names_are_normalised_like_containerd() {
        let r = Reference::parse("nginx").unwrap();
        assert_eq!(r.name(), "docker.io/library/nginx");
        assert_eq!(r.lookup(), "latest");
        assert_eq!(r.familiar_with_tag(), "docker.io/library/nginx:latest");
        assert_eq!(r.image_id(D), format!("docker.io/library/nginx@{D}"));
        let r = Reference::parse("team/app:v1").unwrap();
        assert_eq!(r.name(), "docker.io/team/app");
        let r = Reference::parse("index.docker.io/library/nginx:1.25").unwrap();
        assert_eq!(r.familiar_with_tag(), "docker.io/library/nginx:1.25");
    }

    #[test]
    fn registries_with_ports_and_localhost_keep_their_names() {
        let r = Reference::parse("clrk-registry:5000/x:tag").unwrap();
        assert_eq!(
            (r.domain.as_str(), r.path.as_str(), r.lookup()),
            ("clrk-registry:5000", "x", "tag")
        );
        assert_eq!(r.image_id(D), format!("clrk-registry:5000/x@{D}"));
        let r = Reference::parse("localhost:41234/a/b:1").unwrap();
        assert_eq!(r.name(), "localhost:41234/a/b");
        let r = Reference::parse("localhost/x").unwrap();
        assert_eq!(r.domain, "localhost");
    }

    #[test]
    fn pinned_digests_win_over_tags() {
        let other = "sha256:ffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffff";
        let r = Reference::parse(&format!("foo:1@{D}")).unwrap();
        assert_eq!(r.lookup(), D);
        assert_eq!(r.image_id(other), format!("docker.io/library/foo@{D}"));
    }

    #[test]
    fn malformed_references_are_rejected() {
        for bad in [
            "",
            "Nginx",
            "nginx:",
            "nginx:-x",
            "a//b",
            "a/b_-c",
            "x@sha256:12",
            "-x",
            "x:tag:again",
            "UPPER.example.com/X",
        ] {
            assert!(Reference::parse(bad).is_err(), "{bad} should be invalid");
        }
        for good in ["a__b", "a.b-c/d---e", "registry.example.com:443/x/y:1.2_3"] {
            assert!(Reference::parse(good).is_ok(), "{good} should be valid");
        }
    }
}
