//! The kubeconfig the simulator writes for its clients.

use std::io::Write;
use std::path::Path;

use base64::Engine as _;

/// The kubeconfig could not be written.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Writing the file failed.
    #[error("writing kubeconfig {path}")]
    Write {
        /// The file.
        path: String,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
}

/// Renders a kubeconfig with one cluster, user and context, all named `default` as k3s does.
pub fn render(server: &str, ca_pem: Option<&str>, token: &str) -> String {
    let ca = ca_pem
        .map(|pem| {
            format!(
                "    certificate-authority-data: {}\n",
                base64::engine::general_purpose::STANDARD.encode(pem.as_bytes())
            )
        })
        .unwrap_or_default();
    format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- cluster:\n{ca}    server: {server}\n  name: default\n\
         contexts:\n- context:\n    cluster: default\n    user: default\n  name: default\n\
         current-context: default\npreferences: {{}}\nusers:\n- name: default\n  user:\n    token: {token}\n"
    )
}

/// Writes a file readable only by its owner (mode 0600), replacing it atomically.
pub fn write_private(path: &Path, contents: &str) -> Result<(), Error> {
    let err = |source| Error::Write {
        path: path.display().to_string(),
        source,
    };
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).map_err(err)?;
    }
    let tmp = path.with_extension("tmp-kube-sim");
    {
        use std::os::unix::fs::OpenOptionsExt as _;
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o600)
            .open(&tmp)
            .map_err(err)?;
        f.write_all(contents.as_bytes()).map_err(err)?;
        f.sync_all().map_err(err)?;
    }
    {
        use std::os::unix::fs::PermissionsExt as _;
        std::fs::set_permissions(&tmp, std::fs::Permissions::from_mode(0o600)).map_err(err)?;
    }
    std::fs::rename(&tmp, path).map_err(err)
}
