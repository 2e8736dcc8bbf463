//! A layer pushed by the harness's distribution client against the same
//! bytes uploaded by `curl`.

use std::{path::Path, time::Instant};

use xshell::{Shell, cmd};

use super::{Error, Figure, start_registry, step};
use crate::image::{distribution, oci};

/// A 200 MB layer pushed by the harness's distribution client, and the
/// same bytes uploaded by `curl` (monolithic POST then PUT, as the
/// distribution API documents it), to the same registry. Each run uploads
/// new bytes, so nothing is skipped.
pub async fn blob_upload(runs: usize, megabytes: usize) -> Result<Vec<Figure>, Error> {
    let dir = tempfile::tempdir().map_err(|e| step("a temporary directory").of(e))?;
    let (_registry, host) = start_registry(dir.path()).await?;
    let client = distribution::Client::new(&host);
    let sh = Shell::new().map_err(|e| step("a shell").of(e))?;
    let (mut ours, mut curl) = (Vec::new(), Vec::new());
    for run in 0..runs as u64 {
        let bytes = pseudo_random(megabytes << 20, run * 2);
        let digest = oci::sha256_digest(&bytes);
        let started = Instant::now();
        client
            .upload_blob("bench/ours", &digest, bytes.into())
            .await
            .map_err(|e| step(UPLOADING).of(e))?;
        ours.push(started.elapsed().as_secs_f64());

        let bytes = pseudo_random(megabytes << 20, run * 2 + 1);
        let digest = oci::sha256_digest(&bytes);
        let file = dir.path().join("blob");
        tokio::fs::write(&file, &bytes)
            .await
            .map_err(|e| step(UPLOADING).of(e))?;
        let started = Instant::now();
        tokio::task::block_in_place(|| curl_upload(&sh, &host, &digest, &file))?;
        curl.push(started.elapsed().as_secs_f64());
    }
    let ratio: Vec<f64> = ours.iter().zip(&curl).map(|(o, c)| o / c).collect();
    Ok(vec![
        Figure::of(
            &format!("{megabytes} MB layer pushed by dev-env"),
            "s",
            ours,
        ),
        Figure::of(&format!("{megabytes} MB layer uploaded by curl"), "s", curl),
        Figure::of("layer upload, dev-env / curl", "ratio", ratio),
    ])
}

const UPLOADING: &str = "uploading the benchmark blob";

/// Uploads `file` as blob `digest` of `bench/curl` with two `curl` calls:
/// a POST that opens the upload, and a PUT of the bytes to its `Location`.
fn curl_upload(sh: &Shell, host: &str, digest: &str, file: &Path) -> Result<(), Error> {
    let fail = step(UPLOADING);
    let url = format!("http://{host}/v2/bench/curl/blobs/uploads/");
    let headers = cmd!(sh, "curl -sf -D - -o /dev/null -X POST {url}")
        .quiet()
        .read()
        .map_err(|e| fail.of(e))?;
    let location = headers
        .lines()
        .find_map(|l| {
            l.strip_prefix("Location: ")
                .or_else(|| l.strip_prefix("location: "))
        })
        .ok_or_else(|| fail.of(String::from("no Location header")))?
        .trim()
        .to_string();
    let location = if location.starts_with("http") {
        location
    } else {
        format!("http://{host}{location}")
    };
    let separator = if location.contains('?') { '&' } else { '?' };
    let put = format!("{location}{separator}digest={digest}");
    let data = format!("@{}", file.display());
    cmd!(sh, "curl -sf -o /dev/null -X PUT -H Content-Type:application/octet-stream --data-binary {data} {put}")
        .quiet()
        .run()
        .map_err(|e| fail.of(e))
}

/// `len` bytes from a xorshift generator: incompressible and different for
/// every `seed`.
fn pseudo_random(len: usize, seed: u64) -> Vec<u8> {
    let mut state = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    let mut out = Vec::with_capacity(len + 8);
    while out.len() < len {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        out.extend_from_slice(&state.to_le_bytes());
    }
    out.truncate(len);
    out
}
