//! Image indexes: OCI's `application/vnd.oci.image.index.v1+json` and
//! Docker's manifest list, which engines with the containerd image store
//! push (an image for the platform built, often beside attestation
//! manifests for the platform `unknown/unknown`). A node pulls the entry
//! for its platform; [`choose`] picks it as containerd does: same OS and
//! architecture, the same variant first (`arm64` without one is `v8`,
//! `amd64` without one is `v1`), then for 32-bit arm an older variant.

use serde::Deserialize;

use crate::platform::Platform;

/// The media type of an OCI image index.
pub const OCI_INDEX: &str = "application/vnd.oci.image.index.v1+json";
/// The media type of a Docker manifest list.
pub const DOCKER_LIST: &str = "application/vnd.docker.distribution.manifest.list.v2+json";

/// Whether a document of `media_type` (its `mediaType`, else the
/// `Content-Type` it was served with) is an index.
pub fn is_index(media_type: Option<&str>) -> bool {
    matches!(media_type, Some(OCI_INDEX | DOCKER_LIST))
}

#[derive(Debug, Deserialize)]
struct Index {
    #[serde(default)]
    manifests: Vec<Entry>,
}

#[derive(Debug, Deserialize)]
struct Entry {
    #[serde(rename = "mediaType")]
    media_type: Option<String>,
    digest: String,
    platform: Option<EntryPlatform>,
}

#[derive(Debug, Deserialize)]
struct EntryPlatform {
    os: String,
    architecture: String,
    variant: Option<String>,
}

impl EntryPlatform {
    fn shown(&self) -> String {
        match &self.variant {
            Some(variant) => format!("{}/{}/{variant}", self.os, self.architecture),
            None => format!("{}/{}", self.os, self.architecture),
        }
    }
}

/// What an index offers for a platform.
#[derive(Debug, PartialEq, Eq)]
pub enum Choice {
    /// The digest of the entry for it.
    Entry(String),
    /// No entry is for it: the platforms of the entries there are
    /// (`linux/arm64/v8`, `unknown/unknown`; `none` for one that names no
    /// platform), in the index's order.
    None(Vec<String>),
    /// The bytes are not an index.
    Unreadable,
}

/// The entry of `index` (its JSON) that a node of `platform` pulls.
pub fn choose(index: &[u8], platform: &Platform) -> Choice {
    let Ok(index) = serde_json::from_slice::<Index>(index) else {
        return Choice::Unreadable;
    };
    let images = index.manifests.iter().filter(|e| {
        // A nested index is no image to run.
        !is_index(e.media_type.as_deref())
    });
    let best = images
        .filter_map(|entry| Some((rank(entry.platform.as_ref()?, platform)?, entry)))
        .min_by_key(|(rank, _)| *rank);
    match best {
        Some((_, entry)) => Choice::Entry(entry.digest.clone()),
        None => Choice::None(
            index
                .manifests
                .iter()
                .map(|e| {
                    e.platform
                        .as_ref()
                        .map_or(String::from("none"), EntryPlatform::shown)
                })
                .collect(),
        ),
    }
}

/// How well an entry's platform fits `wanted`: `0` exactly, higher for an
/// older arm variant, `None` not at all.
fn rank(entry: &EntryPlatform, wanted: &Platform) -> Option<u8> {
    if entry.os != wanted.os || entry.architecture != wanted.architecture {
        return None;
    }
    let (theirs, ours) = (
        variant_of(&wanted.architecture, entry.variant.as_deref()),
        variant_of(&wanted.architecture, wanted.variant.as_deref()),
    );
    if theirs == ours {
        return Some(0);
    }
    // 32-bit arm runs older variants' code: v7 runs v6 and v5.
    let arm = |v: Option<&str>| v?.strip_prefix('v')?.parse::<u8>().ok();
    match (wanted.architecture.as_str(), arm(theirs), arm(ours)) {
        ("arm", Some(theirs), Some(ours)) if theirs < ours => Some(ours - theirs),
        _ => None,
    }
}

/// `variant` of `architecture`, the default one when it names none.
fn variant_of<'a>(architecture: &str, variant: Option<&'a str>) -> Option<&'a str> {
    match (architecture, variant) {
        ("arm64", None) => Some("v8"),
        ("amd64", None) => Some("v1"),
        ("arm", None) => Some("v7"),
        (_, v) => v,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An image index as the OCI image-spec (`image-index.md`) shows one:
    /// images for two platforms, each entry with its media type, size,
    /// digest and platform; here with an attestation manifest as Docker's
    /// containerd image store adds one.
    const INDEX: &str = r#"{
      "schemaVersion": 2,
      "mediaType": "application/vnd.oci.image.index.v1+json",
      "manifests": [
        {
          "mediaType": "application/vnd.oci.image.manifest.v1+json",
          "size": 7143,
          "digest": "sha256:e692418e4cbaf90ca69d05a66403747baa33ee08806650b51fab815ad7fc331f",
          "platform": {"architecture": "ppc64le", "os": "linux"}
        },
        {
          "mediaType": "application/vnd.oci.image.manifest.v1+json",
          "size": 7682,
          "digest": "sha256:5b0bcabd1ed22e9fb1310cf6c2dec7cdef19f0ad69efa1f392e94a4333501270",
          "platform": {"architecture": "amd64", "os": "linux"}
        },
        {
          "mediaType": "application/vnd.oci.image.manifest.v1+json",
          "size": 566,
          "digest": "sha256:7a51e8c2d1b3a1b5cb42ae5b3fd3e2f5a1e5b6a8bd19dcbcb84e4e1bd0c02f14",
          "platform": {"architecture": "unknown", "os": "unknown"},
          "annotations": {"vnd.docker.reference.type": "attestation-manifest"}
        }
      ],
      "annotations": {"com.example.key1": "value1"}
    }"#;

    #[test]
    fn an_index_gives_the_entry_for_the_platform() {
        assert_eq!(
            choose(INDEX.as_bytes(), &Platform::linux("x86_64")),
            Choice::Entry(String::from(
                "sha256:5b0bcabd1ed22e9fb1310cf6c2dec7cdef19f0ad69efa1f392e94a4333501270"
            ))
        );
        assert_eq!(
            choose(INDEX.as_bytes(), &Platform::linux("ppc64le")),
            Choice::Entry(String::from(
                "sha256:e692418e4cbaf90ca69d05a66403747baa33ee08806650b51fab815ad7fc331f"
            ))
        );
    }

    #[test]
    fn an_index_without_the_platform_names_the_platforms_it_has() {
        assert_eq!(
            choose(INDEX.as_bytes(), &Platform::linux("aarch64")),
            Choice::None(vec![
                String::from("linux/ppc64le"),
                String::from("linux/amd64"),
                String::from("unknown/unknown"),
            ])
        );
        assert_eq!(
            choose(b"not json", &Platform::linux("x86_64")),
            Choice::Unreadable
        );
    }

    #[test]
    fn variants_match_as_containerd_matches_them() {
        let index = |entries: &[(&str, Option<&str>)]| {
            let manifests: Vec<_> = entries
                .iter()
                .enumerate()
                .map(|(i, (arch, variant))| {
                    let mut platform = serde_json::json!({"os": "linux", "architecture": arch});
                    if let Some(v) = variant {
                        platform["variant"] = serde_json::json!(v);
                    }
                    serde_json::json!({"digest": format!("sha256:{i}"), "platform": platform})
                })
                .collect();
            serde_json::to_vec(&serde_json::json!({"manifests": manifests})).unwrap()
        };
        let arm64 = Platform::linux("aarch64");
        let found = choose(&index(&[("arm", Some("v7")), ("arm64", None)]), &arm64);
        assert_eq!(
            found,
            Choice::Entry(String::from("sha256:1")),
            "arm64 is v8"
        );
        let arm = Platform::linux("armv7");
        let older = index(&[("arm", Some("v5")), ("arm", Some("v6"))]);
        assert_eq!(
            choose(&older, &arm),
            Choice::Entry(String::from("sha256:1"))
        );
        let newer = index(&[("arm", Some("v8"))]);
        assert!(matches!(choose(&newer, &arm), Choice::None(_)));
    }

    #[test]
    fn index_media_types_are_told_from_manifests() {
        assert!(is_index(Some(OCI_INDEX)) && is_index(Some(DOCKER_LIST)));
        assert!(!is_index(Some(super::super::OCI_MANIFEST)) && !is_index(None));
    }
}
