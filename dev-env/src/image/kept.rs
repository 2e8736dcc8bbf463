//! Images kept beside what they were made from: a build that changed
//! nothing leaves its inputs untouched, and their image is then read back
//! instead of being packed, compressed and digested again (a `dev` build
//! of a kube-rs operator is about 45 MB, and assembling its image takes a
//! few tenths of a second).
//!
//! An image is kept under a key that names its inputs as built (sizes,
//! modification times and inodes, with what else decides the image); the
//! key is removed first and written last, so a half-written image is never
//! read back, and an image whose blobs do not match its manifest is not
//! trusted.

use std::path::Path;

use crate::image::oci::{self, Blob, Image};
use crate::platform::Platform;

/// The image kept in `dir` under `key`, or the one `make` makes (then kept
/// there).
pub(crate) fn kept_or<E>(
    dir: &Path,
    key: &str,
    make: impl FnOnce() -> Result<Image, E>,
) -> Result<Image, E> {
    if let Some(image) = read(dir, key) {
        return Ok(image);
    }
    let image = make()?;
    // Keeping it is an optimisation: a failure costs the next push time,
    // not this one its image.
    let _ = write(dir, key, &image);
    Ok(image)
}

/// The image of the binary at `path`, built as `bin` for `platform`: read
/// back when the binary is unchanged, assembled (and kept beside it, in
/// `<binary>.image/`) otherwise.
pub(crate) fn binary_image(path: &Path, bin: &str, platform: &Platform) -> std::io::Result<Image> {
    let key = format!("{bin} {platform} {}", stamp(path)?);
    let mut name = path.file_name().unwrap_or_default().to_os_string();
    name.push(".image");
    kept_or(&path.with_file_name(name), &key, || {
        Ok(oci::binary_image(bin, std::fs::read(path)?, platform))
    })
}

/// What names a file as written: its size, modification time and inode
/// (a rebuilt or rewritten file changes one of them).
pub(crate) fn stamp(path: &Path) -> std::io::Result<String> {
    let meta = std::fs::metadata(path)?;
    let modified = meta
        .modified()?
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default()
        .as_nanos();
    #[cfg(unix)]
    let inode = std::os::unix::fs::MetadataExt::ino(&meta);
    #[cfg(not(unix))]
    let inode = 0;
    Ok(format!("{} {modified} {inode}", meta.len()))
}

fn read(dir: &Path, key: &str) -> Option<Image> {
    if std::fs::read_to_string(dir.join("key")).ok()? != key {
        return None;
    }
    let config = Blob::new(oci::OCI_CONFIG, std::fs::read(dir.join("config")).ok()?);
    let manifest = Blob::new(
        crate::image::distribution::OCI_MANIFEST,
        std::fs::read(dir.join("manifest")).ok()?,
    );
    let layer_digest = std::fs::read_to_string(dir.join("layer.digest")).ok()?;
    let layer = Blob::known(
        oci::OCI_LAYER_GZIP,
        layer_digest,
        std::fs::read(dir.join("layer")).ok()?,
    );
    // The manifest names what was read: anything else is not this image.
    let named: serde_json::Value = serde_json::from_slice(&manifest.bytes).ok()?;
    let names = |blob: &Blob, at: &str| named.pointer(at) == Some(&blob.digest.as_str().into());
    (names(&config, "/config/digest") && names(&layer, "/layers/0/digest")).then(|| Image {
        config,
        layers: vec![layer],
        manifest,
    })
}

fn write(dir: &Path, key: &str, image: &Image) -> std::io::Result<()> {
    std::fs::create_dir_all(dir)?;
    match std::fs::remove_file(dir.join("key")) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(e),
        _ => {}
    }
    let [layer] = image.layers.as_slice() else {
        return Ok(());
    };
    std::fs::write(dir.join("config"), &image.config.bytes)?;
    std::fs::write(dir.join("manifest"), &image.manifest.bytes)?;
    std::fs::write(dir.join("layer"), &layer.bytes)?;
    std::fs::write(dir.join("layer.digest"), &layer.digest)?;
    let temporary = dir.join("key.new");
    std::fs::write(&temporary, key)?;
    std::fs::rename(temporary, dir.join("key"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_unchanged_binary_reads_its_image_back_and_a_rebuilt_one_is_assembled_again() {
        let dir = tempfile::tempdir().unwrap();
        let binary = dir.path().join("worker");
        std::fs::write(&binary, b"\x7fELF one").unwrap();
        let platform = Platform::linux("amd64");
        let first = binary_image(&binary, "worker", &platform).unwrap();
        assert_eq!(
            first,
            oci::binary_image("worker", b"\x7fELF one".to_vec(), &platform)
        );
        // Read back: the same image, whatever the file says now that the
        // key still matches (it is the key, not the bytes, that is read).
        let kept = dir.path().join("worker.image");
        assert!(kept.join("key").is_file());
        assert_eq!(binary_image(&binary, "worker", &platform).unwrap(), first);
        // Another platform is another image.
        let arm = binary_image(&binary, "worker", &Platform::linux("arm64")).unwrap();
        assert_ne!(arm.manifest.digest, first.manifest.digest);
        // A rebuilt binary (new size, time or inode) is assembled again.
        std::fs::remove_file(&binary).unwrap();
        std::fs::write(&binary, b"\x7fELF two, longer").unwrap();
        let second = binary_image(&binary, "worker", &platform).unwrap();
        assert_eq!(
            second,
            oci::binary_image("worker", b"\x7fELF two, longer".to_vec(), &platform)
        );
        // A damaged copy is not trusted.
        std::fs::write(kept.join("layer.digest"), "sha256:0").unwrap();
        assert_eq!(binary_image(&binary, "worker", &platform).unwrap(), second);
    }
}
