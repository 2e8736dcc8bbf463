//! Computes the build id compiled into the worker.
//!
//! The id is `WORKER_BUILD_ID` from the build environment when set, else
//! `src-` and a hash of the package's own sources (`Cargo.toml`, `build.rs`
//! and everything under `src/`). It contains no time and no path, so the
//! same sources always give the same binary, and an edit to any source
//! gives a new id.

use std::path::{Path, PathBuf};

fn main() {
    println!("cargo:rerun-if-env-changed=WORKER_BUILD_ID");
    println!("cargo:rerun-if-changed=Cargo.toml");
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-changed=src");

    let id = match std::env::var("WORKER_BUILD_ID") {
        Ok(id) if !id.trim().is_empty() => id.trim().to_string(),
        _ => {
            let root = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR").unwrap());
            let mut files = vec![root.join("Cargo.toml"), root.join("build.rs")];
            collect(&root.join("src"), &mut files);
            files.sort();
            let mut hash = Fnv::new();
            for file in &files {
                let relative = file.strip_prefix(&root).unwrap().to_string_lossy();
                hash.write(relative.replace('\\', "/").as_bytes());
                hash.write(&[0]);
                hash.write(&std::fs::read(file).unwrap());
                hash.write(&[0]);
            }
            format!("src-{:016x}", hash.finish())
        }
    };
    println!("cargo:rustc-env=WORKER_COMPILED_BUILD_ID={id}");
}

fn collect(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            collect(&path, out);
        } else {
            out.push(path);
        }
    }
}

/// FNV-1a, 64 bits: stable across compilers and platforms.
struct Fnv(u64);

impl Fnv {
    fn new() -> Fnv {
        Fnv(0xcbf2_9ce4_8422_2325)
    }

    fn write(&mut self, bytes: &[u8]) {
        for byte in bytes {
            self.0 ^= u64::from(*byte);
            self.0 = self.0.wrapping_mul(0x0000_0100_0000_01b3);
        }
    }

    fn finish(&self) -> u64 {
        self.0
    }
}
